"""Tests of the click-model likelihood losses (ultr_jax.losses.click_model) and the click_model_<m>
methods: the loss against the simulation likelihoods on probabilities, display order by positions,
the usual invariants, and a small learning problem."""

import functools

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
import rax
from jax.test_util import check_grads

from ultr_jax import losses, simulation as sim
from ultr_jax.train import available_methods, get_method

# XLA's default optimisation for the one test here whose cost is running, not compiling (conftest turns it
# down for the whole suite): 600 full-batch steps of 4 learners, 30 s -> 16 s.
COMPUTE_BOUND = {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True}

MODELS = losses.CLICK_MODEL_LOSSES
Q, L = 5, 6


def _data(seed=0):
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=(Q, L)).astype(np.float32)
  sat = rng.normal(size=(Q, L)).astype(np.float32)
  clicks = (rng.random((Q, L)) < 0.4).astype(np.float32)
  where = np.arange(L) < rng.integers(2, L + 1, size=(Q, 1))
  bias = {
    m: {k: rng.normal(size=s).astype(np.float32) for k, s in losses.click_model_bias_shapes(m, L).items()}
    for m in MODELS
  }
  return scores, sat, clicks, where, bias


def _reference(model, scores, sat, clicks, where, bias):
  """The same log-likelihood from the simulation likelihoods on probabilities (display = array order)."""
  sig = lambda x: 1 / (1 + np.exp(-np.asarray(x, np.float64)))
  a = jnp.asarray(sig(scores), jnp.float32)
  b = {k: sig(v) for k, v in bias.items()}
  if model == "mixture":  # the default components (PBM, DCM), weighted by softmax(weights)
    log_w = jax.nn.log_softmax(jnp.asarray(bias["weights"], jnp.float32))
    parts = [
      _reference(m, scores, sat, clicks, where, {k.split(".", 1)[1]: v for k, v in bias.items() if k[:3] == f"c{i}."})
      for i, m in enumerate(("pbm", "dcm"))
    ]
    return jnp.logaddexp(log_w[0] + parts[0], log_w[1] + parts[1])
  if model in ("pbm", "trust"):  # independent clicks; trust: a false click w.p. rho of a true one
    q = b["examination"][None, :] * (a + (b["trust"][None, :] * (1 - a) if model == "trust" else 0.0))
    return sim.bernoulli_log_likelihood(clicks, jnp.log(q), jnp.log1p(-q), where=where)
  if model == "ubm":
    return sim.UBM.log_likelihood(clicks, a, jnp.asarray(b["gamma"], jnp.float32), where=where)
  if model == "dcm":
    c0, c1 = sim.get_click_model("dcm").continuations(a, continuation=jnp.asarray(b["continuation"], jnp.float32))
  elif model == "dbn":
    c0, c1 = sim.get_click_model("dbn").continuations(
      a, perseverance=float(b["perseverance"]), satisfaction=jnp.asarray(sig(sat), jnp.float32)
    )
  elif model == "sdbn":
    c0, c1 = sim.get_click_model("sdbn").continuations(a, satisfaction=jnp.asarray(sig(sat), jnp.float32))
  else:
    c0, c1 = sim.get_click_model("ccm").continuations(a, alpha=jnp.asarray(b["alpha"], jnp.float32))
  return sim.ChainModel.log_likelihood(clicks, a, continue_no_click=c0, continue_click=c1, where=where)


@pytest.mark.parametrize("model", MODELS)
def test_loss_is_the_click_models_session_likelihood(model):
  scores, sat, clicks, where, bias = _data()
  got = losses.click_model_loss(
    scores, clicks, model=model, bias=bias[model], where=where, satisfaction_scores=sat, reduce_fn=None
  )
  want = _reference(model, scores, sat, clicks, where, bias[model])
  np.testing.assert_allclose(got, -np.asarray(want), rtol=2e-5, atol=1e-5)
  mean = losses.click_model_loss(scores, clicks, model=model, bias=bias[model], where=where, satisfaction_scores=sat)
  np.testing.assert_allclose(mean, -np.asarray(want).mean(), rtol=2e-5)


@pytest.mark.parametrize("model", MODELS)
def test_items_are_taken_in_display_order_by_position(model):
  """Permuting the items together with their positions changes nothing."""
  scores, sat, clicks, where, bias = _data(1)
  where = np.ones_like(where)
  perm = np.stack([np.random.default_rng(i).permutation(L) for i in range(Q)])
  take = lambda x: np.take_along_axis(x, perm, axis=1)
  plain = losses.click_model_loss(
    scores, clicks, model=model, bias=bias[model], satisfaction_scores=sat, reduce_fn=None
  )
  permuted = losses.click_model_loss(
    take(scores),
    take(clicks),
    model=model,
    bias=bias[model],
    positions=perm,
    satisfaction_scores=take(sat),
    reduce_fn=None,
  )
  np.testing.assert_allclose(permuted, plain, rtol=1e-5)


@pytest.mark.parametrize("model", MODELS)
def test_click_logits_score_the_session_likelihood_in_item_order(model):
  """The per-item conditional click logits, permuted with their positions, give the session likelihood back."""
  scores, sat, clicks, where, bias = _data(3)
  perm = np.stack([np.random.default_rng(10 + i).permutation(L) for i in range(Q)])
  take = lambda x: np.take_along_axis(x, perm, axis=1)
  kw = dict(model=model, bias=bias[model], where=take(where), positions=perm, satisfaction_scores=take(sat))
  z = np.asarray(losses.click_model_click_logits(take(scores), take(clicks), **kw), np.float64)
  c = take(clicks)
  per_item = c * -np.logaddexp(0, -z) + (1 - c) * -np.logaddexp(0, z)
  got = (per_item * take(where)).sum(-1)
  want = losses.click_model_log_likelihood_from_logits(take(scores), take(clicks), **kw)
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
  # Item order: the logit of the item at display position 0 does not depend on any click.
  first = np.argmin(np.where(take(where), perm, L), axis=-1)
  flipped = np.asarray(losses.click_model_click_logits(take(scores), 1 - take(clicks), **kw))
  rows = np.arange(Q)
  np.testing.assert_allclose(flipped[rows, first], z[rows, first], rtol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_mask_equals_truncation_zero_grads_when_masked_and_check_grads(model):
  scores, sat, clicks, _, bias = _data(2)
  fn = lambda s, b, where=None, c=clicks, u=sat: losses.click_model_loss(
    s, c, model=model, bias=b, where=where, satisfaction_scores=u, reduce_fn=None
  )
  pad = lambda x, v: np.concatenate([x, np.full((Q, 2), v, np.float32)], axis=1)
  where = np.broadcast_to(np.arange(L + 2) < L, (Q, L + 2))
  # Garbage in the padding (scores, clicks, satisfaction); the bias tables cover the padded positions.
  bias_pad = {
    k: (
      np.concatenate([v, np.zeros((2,) + v.shape[1:], np.float32)])
      if v.ndim >= 1 and k not in ("alpha", "weights")
      else v
    )
    for k, v in bias[model].items()
  }
  if model == "ubm":
    bias_pad["gamma"] = np.pad(bias[model]["gamma"], ((0, 2), (0, 2)))
  got = fn(pad(scores, 50.0), bias_pad, where, pad(clicks, 1.0), pad(sat, -50.0))
  np.testing.assert_allclose(got, fn(scores, bias[model]), rtol=1e-5)
  g = jax.grad(lambda s, b: fn(s, b, jnp.zeros((Q, L), bool)).sum(), argnums=(0, 1))(scores, bias[model])
  chex.assert_tree_all_finite(g)
  assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(g))
  check_grads(
    lambda s, b: fn(s, b).sum(),
    (jnp.asarray(scores), jax.tree.map(jnp.asarray, bias[model])),
    order=1,
    modes=("rev",),
    atol=5e-2,
    rtol=5e-2,
  )


def test_extreme_logits_stay_finite():
  """Logits of +-80 (sigmoid saturates in float32): the log-space loss and its gradients stay finite."""
  scores = jnp.array([[80.0, -80.0, 0.0, 80.0]])
  clicks = jnp.array([[1.0, 0.0, 1.0, 0.0]])
  for model in MODELS:
    bias = {k: jnp.full(s, 80.0) for k, s in losses.click_model_bias_shapes(model, 4).items()}
    fn = lambda s: losses.click_model_loss(s, clicks, model=model, bias=bias, satisfaction_scores=-s)
    value, grad = jax.value_and_grad(fn)(scores)
    assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad))), model


def test_errors():
  with pytest.raises(ValueError, match="unknown click-model loss 'cascade'"):
    losses.click_model_bias_shapes("cascade", 3)
  with pytest.raises(ValueError, match="satisfaction_scores"):
    losses.click_model_loss(jnp.zeros(3), jnp.zeros(3), model="dbn", bias={"perseverance": jnp.zeros(())})


# ----------------------------------------------------------------------------
# The methods.

NAMES = tuple(f"click_model_{m}" for m in MODELS)


def test_registered():
  assert set(NAMES) <= set(available_methods())


@pytest.mark.parametrize("name", NAMES)
def test_method_loss_grads_score_and_propensities(name):
  rng = np.random.default_rng(0)
  features = rng.normal(size=(Q, L, 4)).astype(np.float32)
  where = np.arange(L) < rng.integers(2, L + 1, size=(Q, 1))
  where[3] = False
  batch = jax.tree.map(
    jnp.asarray,
    {
      "features": features,
      "where": where,
      "clicks": ((rng.random((Q, L)) < 0.4) & where).astype(np.float32),
      "positions": np.stack([rng.permutation(L) for _ in range(Q)]).astype(np.int32),
    },
  )
  method = get_method(
    name,
    ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": (8,), "dropout": 0.1}),
    num_features=4,
    list_size=L,
  )
  params, extra = method.init(jax.random.key(0), batch)
  (value, _), grads = jax.jit(jax.value_and_grad(method.loss, has_aux=True))(params, extra, batch, jax.random.key(1))
  assert np.isfinite(float(value))
  chex.assert_tree_all_finite(grads)
  # Every bias parameter set learns (the SDBN has none: its satisfaction is a tower output).
  assert not params["bias"] or any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads["bias"]))
  g_feat = jax.grad(lambda x: method.loss(params, extra, {**batch, "features": x}, jax.random.key(1))[0])(
    batch["features"]
  )
  np.testing.assert_array_equal(g_feat[3], 0.0)  # the all-masked list
  # Items beyond a top-k cut (not shown) are left out of the likelihood.
  shown = batch["positions"] < 3
  cut = method.loss(params, extra, {**batch, "shown": shown}, jax.random.key(1))[0]
  dropped = method.loss(params, extra, {**batch, "where": batch["where"] & shown}, jax.random.key(1))[0]
  np.testing.assert_allclose(cut, dropped, rtol=1e-6)
  # Ranking ignores clicks and positions.
  scores = method.score(params, batch)
  np.testing.assert_array_equal(method.score(params, {"features": batch["features"]}), scores)
  if name in ("click_model_pbm", "click_model_ubm"):
    prop = np.asarray(method.propensities(params, extra))
    assert prop.shape == (L,) and prop[0] == pytest.approx(1.0)
  else:
    assert method.propensities is None


def _fit(name, batch, steps=600):
  method = get_method(
    name,
    ml_collections.ConfigDict({"ranker": "linear"}),
    num_features=batch["features"].shape[-1],
    list_size=batch["where"].shape[-1],
  )
  params, extra = method.init(jax.random.key(0), batch)
  tx = optax.adam(0.05)

  @functools.partial(jax.jit, compiler_options=COMPUTE_BOUND)
  def run(params):
    def step(carry, key):
      params, opt_state = carry
      grads = jax.grad(lambda p: method.loss(p, extra, batch, key)[0])(params)
      updates, opt_state = tx.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), None

    return jax.lax.scan(step, (params, tx.init(params)), jax.random.split(jax.random.key(1), steps))[0][0]

  params = run(params)
  return method, params


@pytest.mark.slow  # a statistical recovery through the training loop; the methods' exact invariants run by default
def test_a_dbn_learner_fits_dbn_clicks_best_and_recovers_the_perseverance():
  """Relevance sigma(x.w) as the DBN's attraction (and satisfaction), DBN sessions (gamma 0.8) over a
  noisy logging order, linear learners. On fresh sessions the DBN learner's likelihood beats the PBM,
  UBM and DCM learners' (the CCM nests this DBN, so it is not compared), it finds gamma, and every
  learner ranks above the logging order."""
  rng = np.random.default_rng(0)
  n, l, f = 2000, 8, 6
  x = rng.normal(size=(n, l, f)).astype(np.float32)
  w = rng.normal(size=f).astype(np.float32)
  rel = 1 / (1 + np.exp(-(x @ w)))
  order = np.argsort(-(x @ w + 1.5 * rng.normal(size=(n, l))), axis=1)
  x, rel = np.take_along_axis(x, order[..., None], 1), np.take_along_axis(rel, order, 1)
  sessions = lambda seed: sim.dbn(jax.random.key(seed), jnp.asarray(rel, jnp.float32), perseverance=0.8)["clicks"]
  batch = {
    "features": jnp.asarray(x),
    "where": jnp.ones((n, l), bool),
    "clicks": sessions(0),
    "labels": jnp.asarray(rel, jnp.float32),
  }
  held_out = {**batch, "clicks": sessions(1)}
  logging_ndcg = float(rax.ndcg_metric(-jnp.broadcast_to(jnp.arange(l, dtype=jnp.float32), (n, l)), batch["labels"]))
  nll = {}
  for name in ("click_model_dbn", "click_model_pbm", "click_model_ubm", "click_model_dcm"):
    method, params = _fit(name, batch)
    nll[name] = float(method.loss(params, {}, held_out, jax.random.key(0))[0])
    assert float(rax.ndcg_metric(method.score(params, batch), batch["labels"])) > logging_ndcg + 0.02, name
    if name == "click_model_dbn":
      assert abs(float(jax.nn.sigmoid(params["bias"]["perseverance"])) - 0.8) < 0.03
  assert nll["click_model_dbn"] < min(v for k, v in nll.items() if k != "click_model_dbn"), nll


def test_dbn_score_options():
  from ultr_jax.train.methods.baselines import make_relevance_tower

  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 4)), jnp.float32)
  cfg = lambda **kw: ml_collections.ConfigDict({"ranker": "linear", **kw})
  attraction = get_method("click_model_dbn", cfg(), num_features=4, list_size=3)
  product = get_method("click_model_dbn", cfg(dbn_score="product"), num_features=4, list_size=3)
  params, _ = attraction.init(jax.random.key(0), None)
  out = make_relevance_tower(cfg(), output_size=2).apply({"params": params["relevance"]}, x)
  np.testing.assert_allclose(attraction.score(params, {"features": x}), out[..., 0], rtol=1e-6)
  np.testing.assert_allclose(
    product.score(params, {"features": x}), jax.nn.log_sigmoid(out[..., 0]) + jax.nn.log_sigmoid(out[..., 1]), rtol=1e-6
  )
  with pytest.raises(ValueError, match="dbn_score"):
    get_method("click_model_dbn", cfg(dbn_score="relevance"), num_features=4, list_size=3)
