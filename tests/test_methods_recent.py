"""The methods since 2023 (``train/methods/recent.py``): registered, finite, their inputs and their towers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax.train import available_methods, get_method

NAMES = ("dr_ltr", "prpo", "safe_dr", "two_tower_disentangled", "two_tower_weighted", "upe")
Q, L, F = 4, 5, 3


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  where = np.arange(L) < rng.integers(3, L + 1, size=(Q, 1))
  where[2] = False  # one all-masked (padding) query
  batch = {
    "features": rng.normal(size=(Q, L, F)).astype(np.float32),
    "where": where,
    "clicks": ((rng.random((Q, L)) < 0.4) & where).astype(np.float32),
    "examination": np.broadcast_to(1.0 / (np.arange(L) + 1.0), (Q, L)).astype(np.float32),
    "positions": np.stack([rng.permutation(L) for _ in range(Q)]).astype(np.int32),
  }
  return jax.tree.map(jnp.asarray, batch)


def test_every_new_method_is_registered():
  assert set(NAMES) <= set(available_methods())


@pytest.mark.parametrize("name", NAMES)
def test_loss_and_grads_are_finite_and_padding_gets_none(name):
  method = get_method(name, {"ranker": "linear"}, num_features=F, list_size=L)
  batch = _batch()
  params, extra = method.init(jax.random.key(0), batch)

  @jax.jit
  def run(params, batch, key):
    value, grads = jax.value_and_grad(lambda p: method.loss(p, extra, batch, key)[0])(params)
    g_feat = jax.grad(lambda x: method.loss(params, extra, {**batch, "features": x}, key)[0])(batch["features"])
    return value, grads, g_feat, method.score(params, batch)

  value, grads, g_feat, scores = run(params, batch, jax.random.key(1))
  assert np.isfinite(float(value))
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads["relevance"]))  # the ranker learns
  np.testing.assert_array_equal(g_feat[2], 0.0)
  assert scores.shape == (Q, L)


def test_bad_settings_are_refused_with_their_field():
  for name, cfg, field in [
    ("dr_ltr", {"treatment": "oracle"}, "treatment"),
    ("dr_ltr", {"dr_tau": 2.0}, "dr_tau"),
    ("prpo", {"num_samples": 1}, "num_samples"),
    ("prpo", {"epsilon": 0.0}, "epsilon"),
    ("safe_dr", {"delta": 1.0}, "delta"),
    ("two_tower_disentangled", {"observation_dropout": 1.0}, "observation_dropout"),
    ("two_tower_weighted", {"weight_clip": 0.5}, "weight_clip"),
    ("upe", {"num_permutations": 0}, "num_permutations"),
  ]:
    with pytest.raises(ValueError, match=field):
      get_method(name, cfg, num_features=F, list_size=L)
  assert get_method("dr_ltr", {"treatment": "trust"}, num_features=F, list_size=L).requires == (
    "clicks",
    "examination",
    "eps_plus",
    "eps_minus",
  )
