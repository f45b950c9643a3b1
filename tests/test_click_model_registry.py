"""Invariants of every registered click model, parametrized over the registry (ultr_jax.simulation.click_models):
a model is tested by being registered.

In each model's fitted parametrisation (random logits): sampled click frequencies match the exact marginal
click probabilities and every session's frequency matches its likelihood (Monte Carlo, 5 sigma); the
conditional click probabilities multiply to the session likelihood; the likelihood sums to 1 over all 2^L
click vectors; mask equals truncation; vmap equals a loop; a fit on sessions drawn from the model predicts
them as well as the generating parameters; the likelihood loss equals the fitted model's likelihood. And the
name lists are views of the registry, configs are strict, simulators hashable."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import losses, simulation as sim

FITTABLE = sim.click_models("fittable")
LOSSES = sim.click_models("loss")
L = 4

# One program per (model, shapes) instead of an eager op-by-op dispatch (each op its own compile).
_log_likelihood = jax.jit(sim.click_model_log_likelihood, static_argnums=0)
_predict = jax.jit(sim.click_model_predict, static_argnums=0)


def _random(name, seed, *, num_docs=L, list_size=L, scale=1.0):
  """The model and random parameters (probabilities) of its fitted parametrisation."""
  m = sim.get_click_model(name)
  rng = np.random.default_rng(seed)
  logits = {
    k: jnp.asarray(scale * rng.normal(size=v.shape), jnp.float32)
    for k, v in m.init(num_docs=num_docs, list_size=list_size).items()
  }
  return m, m.to_probabilities(logits), logits


def _per_session(m, params, ids):
  """``(a, params)`` of the sessions ``ids`` ``[..., L]``: per-document parameters gathered, tables kept."""
  docs = ("attraction",) + tuple(m.item_params)
  per_item = {k: params[k][ids] for k in m.item_params}
  bias = {k: v for k, v in params.items() if k not in docs}
  return params["attraction"][ids], {**bias, **per_item}


def _all_click_vectors(n):
  return np.array(list(itertools.product((0.0, 1.0), repeat=n)), np.float32)


@pytest.mark.parametrize("name", FITTABLE)
def test_sampled_click_frequencies_and_session_frequencies_match_the_exact_probabilities(name):
  m, params, _ = _random(name, 0)
  ids = jnp.arange(L)
  a, p = _per_session(m, params, ids)
  n = 20000
  clicks = np.asarray(jax.jit(lambda k: m.sample(k, a, p, where=jnp.ones(L, bool), num_sessions=n))(jax.random.key(1)))
  assert clicks.shape == (n, L) and set(np.unique(clicks)) <= {0.0, 1.0}
  pred = _predict(m, params, jnp.broadcast_to(ids, (n, L)), clicks)
  marginal = np.asarray(pred["marginal"][0], np.float64)
  bound = 5 * np.sqrt(marginal * (1 - marginal) / n) + 1e-9
  assert np.all(np.abs(clicks.mean(0) - marginal) <= bound), (clicks.mean(0), marginal)
  # Every click vector's frequency is its likelihood (the conditionals, multiplied).
  vectors = _all_click_vectors(L)
  ll = np.asarray(_log_likelihood(m, params, jnp.broadcast_to(ids, vectors.shape), vectors))
  codes = clicks.astype(int) @ (1 << np.arange(L))
  for code, row in enumerate(vectors.astype(int) @ (1 << np.arange(L))):
    want = np.exp(ll[code])
    freq = np.mean(codes == row)
    assert abs(freq - want) <= 5 * np.sqrt(want * (1 - want) / n) + 1e-9, (vectors[code], freq, want)


@pytest.mark.parametrize("name", FITTABLE)
def test_conditionals_multiply_to_the_likelihood_which_sums_to_one_over_all_click_vectors(name):
  m, params, _ = _random(name, 1)
  vectors = jnp.asarray(_all_click_vectors(L))
  ids = jnp.broadcast_to(jnp.arange(L), vectors.shape)
  ll = np.asarray(_log_likelihood(m, params, ids, vectors), np.float64)
  assert abs(np.exp(ll).sum() - 1.0) < 1e-5
  pred = _predict(m, params, ids, vectors)
  q = np.asarray(pred["conditional"], np.float64)
  c = np.asarray(vectors)
  with np.errstate(divide="ignore"):
    product = np.sum(np.where(c > 0, np.log(q), np.log1p(-q)), axis=-1)
  np.testing.assert_allclose(np.exp(product), np.exp(ll), rtol=2e-5, atol=1e-7)
  # The marginal click probability is the likelihood-weighted mean click of each rank.
  marginal = np.asarray(pred["marginal"][0])
  np.testing.assert_allclose(np.exp(ll) @ c, marginal, rtol=2e-5, atol=1e-7)
  # The first item's conditional does not depend on any click.
  np.testing.assert_allclose(q[:, 0], q[0, 0], rtol=1e-6)


@pytest.mark.parametrize("name", FITTABLE)
def test_mask_equals_truncation_and_vmap_equals_loop(name):
  m, params, _ = _random(name, 2, num_docs=6, list_size=L + 2)
  rng = np.random.default_rng(3)
  ids = np.stack([rng.permutation(6) for _ in range(5)]).astype(np.int32)
  clicks = (rng.random((5, L + 2)) < 0.4).astype(np.float32)
  if name == "cascade":  # at most one click
    clicks = clicks * (np.cumsum(clicks, axis=1) <= 1)
  where = np.arange(L + 2) < L
  full = _log_likelihood(m, params, ids, clicks, where=where)
  garbage = np.where(where, clicks, 1.0 - clicks)
  np.testing.assert_allclose(_log_likelihood(m, params, ids, garbage, where=where), full, rtol=1e-6)
  truncated = _log_likelihood(m, params, ids[:, :L], clicks[:, :L])
  np.testing.assert_allclose(full, truncated, rtol=1e-5, atol=1e-6)
  one = lambda i, c: sim.click_model_log_likelihood(m, params, i, c)
  np.testing.assert_allclose(
    jax.jit(jax.vmap(one))(jnp.asarray(ids), jnp.asarray(clicks)),
    [jax.jit(one)(i, c) for i, c in zip(ids, clicks)],
    rtol=1e-6,
  )


@pytest.mark.parametrize("name", FITTABLE)
def test_a_fit_predicts_the_models_own_sessions_as_well_as_the_generating_parameters(name):
  """Sessions drawn from the model (10 queries x 5 documents, shuffled displays), fitted by maximum
  likelihood: on fresh sessions the fit's log-likelihood is within 0.01 nats of the truth's and its marginal
  click probabilities within 0.02 of the truth's on average."""
  q, length, n = 10, 5, 6000
  m, truth, _ = _random(name, 4, num_docs=q * length, list_size=length, scale=0.8)
  rng = np.random.default_rng(5)
  sample = jax.jit(lambda key, ids: m.sample(key, *_per_session(m, truth, ids), where=jnp.ones(ids.shape, bool)))

  def log(seed):
    queries = rng.integers(0, q, size=n)
    ids = (queries[:, None] * length + np.stack([rng.permutation(length) for _ in range(n)])).astype(np.int32)
    return ids, np.asarray(sample(jax.random.key(seed), ids))

  (ids, clicks), (test_ids, test_clicks) = log(0), log(1)
  fit = sim.fit_click_model(
    m, {"doc_ids": ids, "clicks": clicks}, solver=sim.LBFGS(max_iters=300), num_docs=q * length, l2=0.1
  )
  score = jax.jit(  # the mean log-likelihood and the marginals on the fresh sessions: one program for both
    lambda p: (
      jnp.mean(sim.click_model_log_likelihood(m, p, test_ids, test_clicks)),
      sim.click_model_predict(m, p, test_ids, test_clicks)["marginal"],
    )
  )
  (got, fit_marginal), (want, true_marginal) = score(fit.params), score(truth)
  assert float(got) > float(want) - 0.01, (got, want)
  assert np.mean(np.abs(np.asarray(fit_marginal) - np.asarray(true_marginal))) < 0.02


@pytest.mark.parametrize("name", LOSSES)
def test_the_likelihood_loss_is_the_fitted_models_likelihood(name):
  """The loss's parametrisation (scores = attraction logits, item outputs, bias logits) is the fit's."""
  m, params, logits = _random(name, 6)
  rng = np.random.default_rng(7)
  ids = np.stack([rng.permutation(L) for _ in range(6)]).astype(np.int32)
  clicks = (rng.random((6, L)) < 0.4).astype(np.float32)
  docs = ("attraction",) + tuple(m.item_params)
  bias = {k: v for k, v in logits.items() if k not in docs}
  items = {k: logits[k][ids] for k in m.item_params}
  loss = losses.click_model_loss(
    logits["attraction"][ids], clicks, model=name, bias=bias, item_scores=items, reduce_fn=None
  )
  ll = _log_likelihood(m, params, ids, clicks)
  np.testing.assert_allclose(-np.asarray(loss), ll, rtol=2e-5, atol=1e-5)
  # Per-item weights of 1 change nothing, of 0 drop the items (as a mask does).
  w = np.ones((6, L), np.float32)
  w[:, -1] = 0.0
  weighted = losses.click_model_loss(
    logits["attraction"][ids], clicks, model=name, bias=bias, item_scores=items, weights=w, reduce_fn=None
  )
  masked = losses.click_model_loss(
    logits["attraction"][ids], clicks, model=name, bias=bias, item_scores=items, where=w > 0, reduce_fn=None
  )
  np.testing.assert_allclose(weighted, masked, rtol=1e-6)


def test_the_name_lists_are_views_of_the_registry():
  assert sim.FITTABLE_CLICK_MODELS == sim.click_models("fittable")
  assert losses.CLICK_MODEL_LOSSES == sim.click_models("loss")
  assert {"sdbn", "mixture"} <= set(sim.FITTABLE_CLICK_MODELS) and "cascade" not in losses.CLICK_MODEL_LOSSES
  for name in sim.click_models():
    m = sim.get_click_model(name)
    assert m.name == name and m == sim.get_click_model(name) and hash(m) == hash(sim.get_click_model(name))
  with pytest.raises(ValueError, match="unknown click model 'nope'"):
    sim.get_click_model("nope")
  with pytest.raises(ValueError, match="capability"):
    sim.click_models("flying")


def test_configs_are_strict_and_simulators_hashable():
  with pytest.raises(
    ValueError, match=r"unknown key 'etaa' for click model 'pbm' \(did you mean 'eta'\?\); known keys: .*eta"
  ):
    sim.make_click_fn({"name": "pbm", "etaa": 1.0})
  with pytest.raises(ValueError, match=r"'alpha' does not apply to click model 'dcm' \(a key of ccm, position_trust\)"):
    sim.make_click_fn({"name": "dcm", "alpha": (0.9, 0.8, 0.2)})
  with pytest.raises(ValueError, match="continuation"):
    sim.make_click_fn({"name": "mixture", "components": [{"name": "pbm", "continuation": 0.5}, {"name": "dcm"}]})
  cfg = {"name": "ubm", "gamma": np.tril(np.full((3, 4), 0.5))}
  a, b = sim.make_click_fn(cfg), sim.make_click_fn(dict(cfg, gamma=cfg["gamma"].tolist()))
  a_sim, b_sim = a.__self__, b.__self__  # the frozen simulators behind the functions
  assert a_sim == b_sim and hash(a_sim) == hash(b_sim) and a_sim != sim.make_click_fn({"name": "ubm"}).__self__
  assert a_sim == sim.click_simulator(cfg) and {a_sim: 1}[b_sim] == 1
  batch = {"labels": jnp.array([4.0, 0.0, 2.0]), "where": jnp.ones(3, bool)}
  np.testing.assert_array_equal(a(jax.random.key(0), batch)["clicks"], b(jax.random.key(0), batch)["clicks"])


def test_a_mixture_of_one_model_twice_is_that_model():
  """Two copies of the DCM with the same parameters: the mixture's likelihood is the DCM's, at any weights."""
  m = sim.get_click_model("mixture").__class__(("dcm", "dcm"))
  rng = np.random.default_rng(8)
  dcm = {"attraction": rng.uniform(0.1, 0.9, 5), "continuation": rng.uniform(0.1, 0.9, L)}
  params = {
    "attraction": dcm["attraction"],
    "c0.continuation": dcm["continuation"],
    "c1.continuation": dcm["continuation"],
    "weights": np.array([0.3, 0.7]),
  }
  ids = np.stack([rng.permutation(5)[:L] for _ in range(8)])
  clicks = (rng.random((8, L)) < 0.4).astype(np.float32)
  np.testing.assert_allclose(
    _log_likelihood(m, params, ids, clicks),
    _log_likelihood("dcm", dcm, ids, clicks),
    rtol=1e-5,
  )
