"""Tests of the click models' likelihoods (the chains' ChainModel, the UBM): conditional click probabilities and
session log-likelihoods against enumerations of every latent variable (NumPy), the samplers'
marginals, and the usual invariants (mask equals truncation, vmap equals loop, gradients)."""

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ultr_jax import simulation as sim

CHAIN_PARAMS = {
  "cascade": {},
  "dcm": dict(continuation=np.array([0.7, 0.4, 0.9, 0.2])),
  "dbn": dict(perseverance=0.8, satisfaction=np.array([0.5, 0.3, 0.9, 0.6])),
  "ccm": dict(alpha=(0.9, 0.7, 0.2)),
}


def _params(model, length):
  """The model's parameters with per-item arrays cycled to ``length`` items."""
  return {
    k: (np.resize(v, length).astype(np.float32) if isinstance(v, np.ndarray) else v)
    for k, v in CHAIN_PARAMS[model].items()
  }


def _continuations(model, a):
  c0, c1 = sim.get_click_model(model).continuations(jnp.asarray(a, jnp.float32), **_params(model, len(a)))
  return np.asarray(c0, np.float64), np.asarray(c1, np.float64)


def _chain_joint_by_latents(a, c0, c1):
  """P(click vector) of a click chain by summing over every latent draw.

  Each item has an attraction draw A_j ~ Bern(a_j) and a go-on draw G_j ~ Bern(c^{A_j}_j); the user
  examines item j iff every earlier go-on draw succeeded, and clicks iff examined and attracted.
  (The go-on draws after the user left do not matter, so they are summed over too.)"""
  n = len(a)
  joint = {}
  for draws in itertools.product((0, 1), repeat=2 * n):
    att, go = draws[:n], draws[n:]
    prob, examined, clicks = 1.0, True, []
    for j in range(n):
      prob *= a[j] if att[j] else 1 - a[j]
      cont = c1[j] if att[j] else c0[j]
      prob *= cont if go[j] else 1 - cont
      clicks.append(int(examined and att[j]))
      examined = examined and bool(go[j])
    joint[tuple(clicks)] = joint.get(tuple(clicks), 0.0) + prob
  return joint


def _ubm_joint_by_latents(a, gamma):
  """P(click vector) of the UBM by summing over every examination and attraction draw."""
  n = len(a)
  joint = {}
  for draws in itertools.product((0, 1), repeat=2 * n):
    exam, att = draws[:n], draws[n:]
    prob, last, clicks = 1.0, 0, []
    for j in range(n):
      g = gamma[j, last]
      prob *= (g if exam[j] else 1 - g) * (a[j] if att[j] else 1 - a[j])
      clicks.append(exam[j] * att[j])
      if clicks[-1]:
        last = j + 1
    joint[tuple(clicks)] = joint.get(tuple(clicks), 0.0) + prob
  return joint


def _all_click_vectors(n):
  return np.array(list(itertools.product((0.0, 1.0), repeat=n)), np.float32)


A4 = np.array([0.7, 0.4, 0.6, 0.25])


@pytest.mark.parametrize("model", sorted(CHAIN_PARAMS))
def test_chain_likelihood_equals_the_latent_enumeration(model):
  c0, c1 = _continuations(model, A4)
  joint = _chain_joint_by_latents(A4, c0, c1)
  vectors = _all_click_vectors(4)
  ll = sim.ChainModel.log_likelihood(
    jnp.asarray(vectors),
    jnp.asarray(A4, jnp.float32),
    continue_no_click=jnp.asarray(c0, jnp.float32),
    continue_click=jnp.asarray(c1, jnp.float32),
  )
  want = np.array([joint.get(tuple(int(v) for v in row), 0.0) for row in vectors])
  np.testing.assert_allclose(np.exp(np.asarray(ll, np.float64)), want, rtol=2e-6, atol=1e-12)
  assert abs(np.exp(np.asarray(ll, np.float64)).sum() - 1.0) < 1e-5
  if model == "cascade":  # two clicks are impossible: -inf, not NaN
    assert np.isneginf(np.asarray(ll)[vectors.sum(1) > 1]).all()


@pytest.mark.parametrize("model", sorted(CHAIN_PARAMS))
def test_chain_conditionals_are_ratios_of_the_joint_and_sum_to_the_samplers_marginals(model):
  c0, c1 = _continuations(model, A4)
  joint = _chain_joint_by_latents(A4, c0, c1)
  vectors = _all_click_vectors(4)
  q = np.asarray(
    sim.ChainModel.conditional_click_prob(
      jnp.asarray(vectors),
      jnp.asarray(A4, jnp.float32),
      continue_no_click=jnp.asarray(c0, jnp.float32),
      continue_click=jnp.asarray(c1, jnp.float32),
    ),
    np.float64,
  )
  for row, q_row in zip(vectors.astype(int), q):
    for i in range(4):
      prefix = tuple(row[:i])
      p_prefix = sum(p for c, p in joint.items() if c[:i] == prefix)
      if p_prefix < 1e-12:
        continue
      p_click = sum(p for c, p in joint.items() if c[:i] == prefix and c[i] == 1)
      assert abs(q_row[i] - p_click / p_prefix) < 2e-6, (row, i)
  # Marginal click rates: sum over histories of P(history) q equals the model's marginal.
  marginal = sum(p * np.asarray(c, float) for c, p in joint.items())
  exam = sim.ChainModel.examination(
    jnp.asarray(A4, jnp.float32),
    continue_no_click=jnp.asarray(c0, jnp.float32),
    continue_click=jnp.asarray(c1, jnp.float32),
  )
  np.testing.assert_allclose(np.asarray(exam) * A4, marginal, rtol=2e-6)


def test_chain_continuations_match_the_click_models():
  """The samplers' marginal examination under the same parameters (dcm, dbn, ccm, cascade)."""
  a = jnp.asarray(A4, jnp.float32)
  key = jax.random.key(0)
  outs = {
    "cascade": sim.cascade(key, a),
    "dcm": sim.dcm(key, a, continuation=jnp.asarray(CHAIN_PARAMS["dcm"]["continuation"], jnp.float32)),
    "dbn": sim.dbn(
      key, a, perseverance=0.8, satisfaction=jnp.asarray(CHAIN_PARAMS["dbn"]["satisfaction"], jnp.float32)
    ),
    "ccm": sim.ccm(key, a, alpha=(0.9, 0.7, 0.2)),
  }
  for model, out in outs.items():
    c0, c1 = sim.get_click_model(model).continuations(a, **CHAIN_PARAMS[model])
    exam = sim.ChainModel.examination(a, continue_no_click=c0, continue_click=c1)
    np.testing.assert_allclose(exam, out["examination"], rtol=1e-6, err_msg=model)
  np.testing.assert_allclose(sim.get_click_model("dbn").continuations(a)[1], 0.9 * (1 - a), rtol=1e-6)  # sigma = a
  assert not isinstance(sim.get_click_model("pbm"), sim.ClickChain)  # an optional capability, not on every model
  assert sim.click_models("chain") == tuple(
    m for m in sim.click_models() if isinstance(sim.get_click_model(m), sim.ClickChain)
  )
  with pytest.raises(ValueError, match="3 entries"):
    sim.get_click_model("ccm").continuations(a, alpha=(0.9, 0.5))


def test_ubm_likelihood_equals_the_latent_enumeration_and_the_marginals():
  rng = np.random.default_rng(3)
  a = rng.uniform(0.1, 0.9, size=4)
  gamma = np.tril(rng.uniform(0.05, 1.0, size=(4, 5)), k=0)
  joint = _ubm_joint_by_latents(a, gamma)
  vectors = _all_click_vectors(4)
  args = (jnp.asarray(vectors), jnp.asarray(a, jnp.float32), jnp.asarray(gamma, jnp.float32))
  ll = np.asarray(sim.UBM.log_likelihood(*args), np.float64)
  want = np.array([joint[tuple(int(v) for v in row)] for row in vectors])
  np.testing.assert_allclose(np.exp(ll), want, rtol=2e-6)
  q = np.asarray(sim.UBM.conditional_click_prob(*args), np.float64)
  marginal = (np.exp(ll)[:, None] * vectors).sum(0)
  np.testing.assert_allclose(
    marginal, sim.UBM.examination(jnp.asarray(a, jnp.float32), jnp.asarray(gamma, jnp.float32)) * a, rtol=2e-6
  )
  # q_i = P(c_i = 1 | prefix): a click at rank 1 moves rank 2 to gamma[1, 1].
  np.testing.assert_allclose(q[vectors[:, 0] == 1, 1], gamma[1, 1] * a[1], rtol=1e-6)
  np.testing.assert_allclose(q[vectors[:, 0] == 0, 1], gamma[1, 0] * a[1], rtol=1e-6)


def _likelihoods():
  rng = np.random.default_rng(0)
  gamma = jnp.asarray(np.tril(rng.uniform(0.1, 1.0, size=(6, 7))), jnp.float32)
  fns = {}
  for model in sorted(CHAIN_PARAMS):

    def chain(clicks, a, where=None, model=model):
      c0, c1 = sim.get_click_model(model).continuations(a, **_params(model, a.shape[-1]))
      return sim.ChainModel.log_likelihood(clicks, a, continue_no_click=c0, continue_click=c1, where=where)

    fns[model] = chain
  fns["ubm"] = lambda clicks, a, where=None: sim.UBM.log_likelihood(clicks, a, gamma[: a.shape[-1]], where=where)
  return fns


LIKELIHOODS = _likelihoods()


def _sessions(model, n=5, length=4, seed=0):
  """Sessions each model can produce (the cascade: at most one click)."""
  rng = np.random.default_rng(seed)
  clicks = (rng.uniform(size=(n, length)) < 0.4).astype(np.float32)
  if model == "cascade":
    first = np.argmax(clicks, axis=1)
    clicks = np.where(np.arange(length) == first[:, None], clicks, 0.0).astype(np.float32)
  a = rng.uniform(0.1, 0.9, size=(n, length)).astype(np.float32)
  return jnp.asarray(clicks), jnp.asarray(a)


@pytest.mark.parametrize("model", sorted(LIKELIHOODS))
def test_mask_equals_truncation(model):
  """A masked tail (with garbage clicks) gives the truncated list's likelihood."""
  fn = jax.jit(LIKELIHOODS[model])  # one compile per shape (eagerly: one per primitive)
  clicks, a = _sessions(model, length=4)
  garbage = jnp.concatenate([clicks, jnp.ones((5, 2))], axis=1)
  a_pad = jnp.concatenate([a, jnp.full((5, 2), 0.7)], axis=1)
  where = jnp.arange(6) < 4
  np.testing.assert_allclose(fn(garbage, a_pad, jnp.broadcast_to(where, (5, 6))), fn(clicks, a), rtol=1e-6)
  assert np.all(np.asarray(fn(garbage, a_pad, jnp.zeros((5, 6), bool))) == 0.0)


@pytest.mark.parametrize("model", sorted(LIKELIHOODS))
def test_vmap_equals_loop_and_compiles_once(model):
  fn = jax.jit(LIKELIHOODS[model])  # one compile per shape (eagerly: one per primitive)
  clicks, a = _sessions(model)
  batched = jax.vmap(fn)(clicks, a)
  looped = jnp.stack([fn(clicks[i], a[i]) for i in range(clicks.shape[0])])
  np.testing.assert_allclose(batched, looped, rtol=1e-6)
  traces = []

  @jax.jit
  def run(c, x):
    traces.append(1)
    return fn(c, x)

  for seed in range(3):
    run(*_sessions(model, seed=seed))
  assert len(traces) == 1


@pytest.mark.parametrize("model", sorted(LIKELIHOODS))
def test_gradients_are_finite_checked_and_zero_when_all_masked(model):
  fn = jax.jit(LIKELIHOODS[model])  # one compile per shape (eagerly: one per primitive)
  clicks, a = _sessions(model, n=3)
  check_grads(
    lambda x: fn(clicks, jax.nn.sigmoid(x)).sum(),
    (jnp.log(a / (1 - a)),),
    order=1,
    modes=("rev",),
    atol=5e-2,
    rtol=5e-2,
  )
  g = jax.grad(lambda x: fn(clicks, x).sum())(a)
  chex.assert_tree_all_finite(g)
  g0 = jax.grad(lambda x: fn(clicks, x, jnp.zeros(clicks.shape, bool)).sum())(a)
  assert np.all(np.asarray(g0) == 0.0)


def test_chain_log_likelihood_stays_finite_in_log_space_for_long_lists():
  """200 unclicked items of attraction 0.99: P = 0.01^200 underflows float32, the log does not."""
  a = jnp.full(200, 0.99)
  ll = sim.ChainModel.log_likelihood(jnp.zeros(200), a, continue_no_click=1.0, continue_click=0.5)
  # No click at all under c0 = 1: every item is examined and unattractive.
  np.testing.assert_allclose(ll, 200 * np.log(0.01), rtol=1e-5)


def test_logit_log_probs_equal_the_probability_functions_for_every_model():
  rng = np.random.default_rng(5)
  clicks = jnp.asarray(_all_click_vectors(4))
  s = rng.normal(size=4).astype(np.float32)
  u = rng.normal(size=4).astype(np.float32)
  sig = lambda x: jax.nn.sigmoid(jnp.asarray(x, jnp.float32))
  for model in sim.click_models("fittable"):
    bias = {
      k: rng.normal(size=shape).astype(np.float32) for k, shape in sim.get_click_model(model).bias_shapes(4).items()
    }
    log_q, log_1mq = sim.get_click_model(model).log_probs_from_logits(clicks, s, bias, item_logits={"satisfaction": u})
    got = sim.bernoulli_log_likelihood(clicks, log_q, log_1mq)
    a = sig(s)
    if model in ("pbm", "trust"):
      q = sig(bias["examination"]) * (a + (sig(bias["trust"]) * (1 - a) if model == "trust" else 0.0))
      want = sim.bernoulli_log_likelihood(clicks, jnp.log(q), jnp.log1p(-q))
    elif model == "ubm":
      want = sim.UBM.log_likelihood(clicks, a, sig(bias["gamma"]))
    elif model == "mixture":  # the default components, PBM and DCM, weighted by softmax(weights)
      log_w = jax.nn.log_softmax(jnp.asarray(bias["weights"]))
      q = sig(bias["c0.examination"]) * a
      ll_pbm = sim.bernoulli_log_likelihood(clicks, jnp.log(q), jnp.log1p(-q))
      c0, c1 = sim.get_click_model("dcm").continuations(a, continuation=sig(bias["c1.continuation"]))
      ll_dcm = sim.ChainModel.log_likelihood(clicks, a, continue_no_click=c0, continue_click=c1)
      want = jnp.logaddexp(log_w[0] + ll_pbm, log_w[1] + ll_dcm)
    else:
      params = {
        "sdbn": {"satisfaction": sig(u)},
        "cascade": {},
        "dcm": {"continuation": sig(bias.get("continuation", 0.0))},
        "dbn": {"perseverance": sig(bias.get("perseverance", 0.0)), "satisfaction": sig(u)},
        "ccm": {"alpha": sig(bias.get("alpha", np.zeros(3)))},
      }[model]
      c0, c1 = sim.get_click_model(model).continuations(a, **params)
      want = sim.ChainModel.log_likelihood(clicks, a, continue_no_click=c0, continue_click=c1)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=model)
  with pytest.raises(ValueError, match="satisfaction_logits"):
    sim.get_click_model("dbn").log_probs_from_logits(clicks, s, {"perseverance": 0.0})
