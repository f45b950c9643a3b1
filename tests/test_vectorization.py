"""Tests of Vectorization (Chen et al. KDD'22): the density loss, base vector and scores, and the method."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from ultr_jax import losses
from ultr_jax.train import get_method

Q, L, D = 4, 6, 3


def _arrays(seed=0):
  rng = np.random.default_rng(seed)
  mean = rng.normal(size=(Q, L, D)).astype(np.float32)
  log_var = rng.normal(scale=0.5, size=(Q, L, D)).astype(np.float32)
  obs = rng.normal(size=(Q, L, D)).astype(np.float32)
  rel = rng.normal(size=(Q, L, D)).astype(np.float32)
  where = np.arange(L) < np.array([[6], [4], [1], [0]])  # the last list is all padding
  return mean, log_var, obs, rel, where


def _numpy_reference(mean, log_var, obs, rel, where):
  terms, scores = [], np.zeros(where.shape)
  for q in range(Q):
    num, den = np.zeros(D), np.zeros(D)
    for i in range(L):
      if where[q, i]:
        terms.append(np.mean((mean[q, i] - obs[q, i]) ** 2 * np.exp(-log_var[q, i]) + log_var[q, i]))
        num += mean[q, i] * np.exp(-log_var[q, i])
        den += np.exp(-log_var[q, i])
    base = np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)
    scores[q] = rel[q] @ base
  return np.mean(terms), scores


def test_against_numpy_loops():
  mean, log_var, obs, rel, where = _arrays()
  want_loss, want_scores = _numpy_reference(mean, log_var, obs, rel, where)
  got = losses.observation_density_loss(mean, obs, log_var=log_var, where=where)
  np.testing.assert_allclose(got, want_loss, rtol=1e-5)
  scores = losses.vectorization_scores(rel, mean, log_var, where=where)
  np.testing.assert_allclose(jnp.where(where, scores, 0.0), np.where(where, want_scores, 0.0), rtol=1e-5, atol=1e-6)


def test_mask_equals_truncation_and_padding_garbage_is_ignored():
  mean, log_var, obs, rel, where = _arrays(1)
  garbage = lambda a: np.where(where[..., None], a, 1e4)
  for q in range(Q):
    n = int(where[q].sum())
    if n == 0:
      continue
    full = losses.vectorization_scores(garbage(rel)[q], garbage(mean)[q], garbage(log_var)[q], where=where[q])
    cut = losses.vectorization_scores(rel[q, :n], mean[q, :n], log_var[q, :n])
    np.testing.assert_allclose(full[:n], cut, rtol=1e-5, atol=1e-6)
  a = losses.observation_density_loss(garbage(mean), garbage(obs), log_var=garbage(log_var), where=where)
  b = losses.observation_density_loss(mean[where], obs[where], log_var=log_var[where])
  np.testing.assert_allclose(a, b, rtol=1e-5)


def test_vmap_equals_loop():
  mean, log_var, _, rel, where = _arrays(2)
  batched = jax.vmap(lambda r, m, v, w: losses.vectorization_scores(r, m, v, where=w))(rel, mean, log_var, where)
  for q in range(Q):
    np.testing.assert_allclose(
      batched[q], losses.vectorization_scores(rel[q], mean[q], log_var[q], where=where[q]), rtol=1e-6
    )


def test_gradients_stop_at_the_observation_and_vanish_when_all_masked():
  mean, log_var, obs, rel, where = _arrays(3)
  g_obs = jax.grad(lambda o: losses.observation_density_loss(mean, o, log_var=log_var, where=where))(obs)
  np.testing.assert_array_equal(g_obs, 0.0)  # the density follows o, never the reverse
  none = np.zeros_like(where)
  value, grads = jax.value_and_grad(
    lambda m, v: losses.observation_density_loss(m, obs, log_var=v, where=none), argnums=(0, 1)
  )(mean, log_var)
  assert float(value) == 0.0
  for g in grads:
    np.testing.assert_array_equal(g, 0.0)
  g = jax.grad(lambda m: jnp.sum(losses.vectorization_scores(rel, m, log_var, where=none)))(mean)
  np.testing.assert_array_equal(g, 0.0)


def test_check_grads():
  mean, log_var, obs, rel, where = _arrays(4)
  with jax.enable_x64(True):
    m, v, o, r = (jnp.asarray(a, jnp.float64) for a in (mean, log_var, obs, rel))
    check_grads(
      jax.jit(lambda m, v: losses.observation_density_loss(m, o, log_var=v, where=where)),
      (m, v),
      order=2,
      modes=["rev"],
    )
    check_grads(
      jax.jit(lambda r, m, v: losses.vectorization_scores(r, m, v, where=where).sum()),
      (r, m, v),
      order=2,
      modes=["rev"],
    )


def test_density_minimum_is_the_mean_and_variance_of_the_observations():
  """For one item shown at several positions, the loss is minimised at mu = mean(o), e^v = var(o)."""
  obs = jnp.asarray([[1.0, 2.0], [3.0, 2.0], [2.0, 5.0]])[None]  # [1, 3, 2]: three impressions
  mu = obs.mean(axis=1, keepdims=True)
  var = obs.var(axis=1, keepdims=True) + 1e-12

  def loss(m, v):
    return losses.observation_density_loss(jnp.broadcast_to(m, obs.shape), obs, log_var=jnp.broadcast_to(v, obs.shape))

  g = jax.grad(loss, argnums=(0, 1))(mu, jnp.log(var))
  np.testing.assert_allclose(g[0], 0.0, atol=1e-6)
  np.testing.assert_allclose(g[1], 0.0, atol=1e-6)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  where = np.arange(L) < np.array([[6], [5], [3], [0]])
  return {
    "features": jnp.asarray(rng.normal(size=(Q, L, 5)), jnp.float32),
    "where": jnp.asarray(where),
    "clicks": jnp.asarray((rng.random((Q, L)) < 0.4) & where, jnp.float32),
    "positions": jnp.asarray(np.stack([rng.permutation(L) for _ in range(Q)]), jnp.int32),
  }


def test_method_freezes_observation_and_density_while_the_ranker_pretrains(assert_compiles_once):
  config = {"ranker": "mlp", "hidden_sizes": (8,), "density_sizes": (8,), "pretrain_steps": 2, "dimension": D}
  method = get_method("vectorization", config, num_features=5, list_size=L)
  batch = _batch()
  params, extra = method.init(jax.random.key(0), batch)
  assert params["observation"].shape == (L, D) and float(params["observation"].min()) == 1.0

  def grads(params, extra, batch):
    return jax.grad(method.loss, has_aux=True)(params, extra, batch, jax.random.key(1))

  # Pretraining and training are one program: the phase is a traced step counter, not a Python branch.
  assert_compiles_once(grads, lambda i: ((params, {**extra, "step": extra["step"] + 2 * i}, _batch(i)), {}))
  grads = jax.jit(functools.partial(grads, batch=batch))
  for step in range(4):
    g, (metrics, extra) = grads(params, extra)
    assert int(extra["step"]) == step + 1
    moving = [np.any(np.asarray(leaf) != 0) for leaf in jax.tree.leaves((g["observation"], g["density"]))]
    assert all(moving) if step >= 2 else not any(moving), step
    assert any(np.any(np.asarray(leaf) != 0) for leaf in jax.tree.leaves(g["relevance"]))
    assert set(metrics) == {"click_loss", "density_loss"}


def test_method_click_logit_is_the_inner_product_of_relevance_and_observation():
  """With a linear ranker of output size d, the click loss equals rax's softmax on <r(x), o(k)>."""
  import rax

  method = get_method(
    "vectorization", {"ranker": "linear", "density_sizes": (4,), "dimension": 2}, num_features=5, list_size=L
  )
  batch = _batch(1)
  params, extra = method.init(jax.random.key(2), batch)
  params["observation"] = jnp.asarray(np.random.default_rng(0).normal(size=(L, 2)), jnp.float32)
  _, (metrics, _) = method.loss(params, extra, batch, jax.random.key(0))
  w, b = params["relevance"]["out"]["kernel"], params["relevance"]["out"]["bias"]
  r = batch["features"] @ w + b
  logits = jnp.sum(r * params["observation"][batch["positions"]], axis=-1)
  want = rax.softmax_loss(logits, batch["clicks"], where=batch["where"])
  np.testing.assert_allclose(metrics["click_loss"], want, rtol=1e-5)


def test_bad_dimension_raises():
  with pytest.raises(ValueError, match="dimension must be >= 1"):
    get_method("vectorization", {"dimension": 0}, num_features=5, list_size=L)
