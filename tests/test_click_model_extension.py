"""Adding a click model is one module plus one registry line: a model written from scratch here (a position-based
model whose every rank shares one examination probability) is registered and then passes the registry's
invariants unchanged (the functions of tests/test_click_model_registry.py: sampled frequencies against the exact
marginals and likelihood, the likelihood summing to 1 over all click vectors, mask equals truncation, vmap equals
a loop, recovery by fitting, the likelihood loss against the fit), and its simulator samples its marginals."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import test_click_model_registry as registry
from ultr_jax import simulation as sim
from ultr_jax.simulation.click_models import base


@dataclasses.dataclass(frozen=True)
class ConstantExamination(sim.ClickModel):
  r"""Every rank is examined with one probability: :math:`P(C_i = 1) = \theta\, a_i`, independent clicks."""

  name = "constant_examination"
  config_keys = {"theta": 0.7}
  parameters = {"examination": sim.Parameter((), r"examination :math:`\theta`: the probability of examining a rank")}

  def simulation_kwargs(self, cfg):
    return {"theta": float(cfg.get("theta", 0.7))}

  def session(self, attraction, *, where=None, positions=None, top_k=None, theta=0.7):
    r, where, positions, shown = base.prepare(attraction, where, positions, top_k)
    exam = jnp.full(r.shape, theta, jnp.float32)
    return base.Session(exam, exam * r, shown, True, top_k=top_k)

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    log_q = jnp.broadcast_to(log_bias["examination"] + log_a, jnp.shape(clicks))
    return log_q, jnp.log(-jnp.expm1(log_q))

  def predict(self, clicks, a, params, *, where):
    q = params["examination"] * a
    return q, q

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    return sim.sample_clicks(key, params["examination"] * a, where=where, num_sessions=num_sessions)


@pytest.fixture
def name(monkeypatch):
  """The model registered (one line, as in ``click_models/__init__.py``) for the test only."""
  monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
  sim.register(ConstantExamination)
  return ConstantExamination.name


def test_the_registry_finds_the_new_model_and_reads_its_declarations(name):
  assert name in sim.click_models("fittable") and name in sim.click_models("loss")
  m = sim.get_click_model(name)
  assert m.bias_shapes(4) == {"examination": ()} and m.item_params == ()
  assert sorted(m.init(num_docs=3, list_size=4)) == ["attraction", "examination"]
  assert any(name in line for line in base.parameter_table((name,)))
  with pytest.raises(ValueError, match="unknown key 'thet' for click model 'constant_examination'"):
    sim.make_click_fn({"name": name, "thet": 0.5})


@pytest.mark.parametrize(
  "invariant",
  [
    registry.test_sampled_click_frequencies_and_session_frequencies_match_the_exact_probabilities,
    registry.test_conditionals_multiply_to_the_likelihood_which_sums_to_one_over_all_click_vectors,
    registry.test_mask_equals_truncation_and_vmap_equals_loop,
    registry.test_a_fit_predicts_the_models_own_sessions_as_well_as_the_generating_parameters,
    registry.test_the_likelihood_loss_is_the_fitted_models_likelihood,
  ],
  ids=lambda f: f.__name__[len("test_") :],
)
def test_the_registry_invariants_hold_for_the_new_model(name, invariant):
  invariant(name)


def test_the_simulator_samples_the_new_models_marginals(name):
  n = 20000
  fn = sim.make_click_fn({"name": name, "theta": 0.6, "num_sessions": n})
  labels = jnp.array([4.0, 2.0, 0.0])
  out = fn(jax.random.key(0), {"labels": labels, "where": jnp.ones(3, bool)})
  np.testing.assert_allclose(out["examination"], 0.6, rtol=1e-6)
  want = 0.6 * np.asarray(sim.relevance_probability(labels))
  np.testing.assert_allclose(out["click_prob"], want, rtol=1e-6)
  freq = np.asarray(out["clicks"]).mean(0)
  assert np.all(np.abs(freq - want) <= 5 * np.sqrt(want * (1 - want) / n)), (freq, want)
