"""Tests of ultr_jax.models: shapes, parameter counts, padding independence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import models

F = 5


def _feature_towers():
  return {
    "linear": models.LinearRanker(),
    "mlp": models.MLPRanker(hidden_sizes=(7, 3), activation="relu", layer_norm=True),
    "mlp_no_ln": models.MLPRanker(hidden_sizes=(4,), layer_norm=False),
    "mlp_ln_before": models.MLPRanker(hidden_sizes=(4,), norm_position="before", ln_epsilon=1e-3),
    "linear_ln": models.LinearRanker(input_norm=True),
    "feature_bias": models.FeatureBias(hidden_sizes=(6,)),
  }


@pytest.mark.parametrize("name", sorted(_feature_towers()))
def test_feature_tower_shapes_under_leading_dims(name):
  tower = _feature_towers()[name]
  params = tower.init(jax.random.key(0), jnp.zeros((1, F)))
  apply = jax.jit(tower.apply)  # one compile per shape (eagerly: one per primitive)
  x = jax.random.normal(jax.random.key(1), (12, 6, F))
  flat = apply(params, x.reshape(-1, F)).reshape(12, 6)
  for lead in [(12,), (3, 4), (2, 3, 2)]:
    out = apply(params, x.reshape(*lead, 6, F))
    assert out.shape == (*lead, 6)
    # The same items in any layout give the same scores (no cross-item coupling).
    np.testing.assert_allclose(out.reshape(12, 6), flat, rtol=1e-5, atol=1e-5)
  assert apply(params, x[0, 0]).shape == ()


@pytest.mark.parametrize("name", sorted(_feature_towers()))
def test_padding_does_not_affect_other_items(name):
  tower = _feature_towers()[name]
  params = tower.init(jax.random.key(0), jnp.zeros((1, F)))
  x = jax.random.normal(jax.random.key(1), (4, 6, F))
  y = x.at[:, 4:].set(1e3)  # garbage in the padded tail
  np.testing.assert_allclose(tower.apply(params, x)[:, :4], tower.apply(params, y)[:, :4], rtol=1e-6)


def test_parameter_counts():
  def count(m, *args):
    return models.num_params(jax.eval_shape(m.init, jax.random.key(0), *args))

  x = jnp.zeros((2, 136))
  assert count(models.LinearRanker(), x) == 137
  # LBD's default tower on 136 MSLR features: Dense + LayerNorm per layer.
  expected = (136 * 512 + 512 + 2 * 512) + (512 * 256 + 256 + 2 * 256) + (256 * 128 + 128 + 2 * 128) + 129
  assert count(models.MLPRanker(), x) == expected
  assert count(models.MLPRanker(hidden_sizes=(8,), layer_norm=False), x) == 136 * 8 + 8 + 9
  assert count(models.DocumentEmbedding(num_docs=11), jnp.zeros((3,), jnp.int32)) == 11
  assert count(models.PositionBias(num_positions=10), jnp.zeros((3,), jnp.int32)) == 10
  assert (
    count(models.ContextPositionBias(num_contexts=4, num_positions=10), jnp.zeros((3,), jnp.int32), jnp.array(0)) == 40
  )
  assert count(models.FeatureBias(hidden_sizes=(3,)), jnp.zeros((2, 4))) == 4 * 3 + 3 + 4


def test_lbd_default_mlp_config():
  m = models.MLPRanker()
  assert tuple(m.hidden_sizes) == (512, 256, 128) and m.activation == "elu" and m.layer_norm


def test_id_towers_look_up_their_table():
  emb = models.DocumentEmbedding(num_docs=4)
  params = {"params": {"logits": jnp.array([0.0, 1.0, 2.0, 3.0])}}
  np.testing.assert_array_equal(emb.apply(params, jnp.array([[3, 1, -1]])), [[3.0, 1.0, 0.0]])
  pos = models.PositionBias(num_positions=3)
  params = {"params": {"logits": jnp.array([5.0, 6.0, 7.0])}}
  # Positions beyond the table share the last logit.
  np.testing.assert_array_equal(pos.apply(params, jnp.array([[0, 2, 9]])), [[5.0, 7.0, 7.0]])
  ctx = models.ContextPositionBias(num_contexts=2, num_positions=3)
  table = jnp.arange(6.0).reshape(2, 3)
  out = ctx.apply({"params": {"logits": table}}, jnp.array([[0, 1, 2], [0, 1, 2]]), jnp.array([0, 1]))
  np.testing.assert_array_equal(out, table)


def test_dropout_only_in_training_mode():
  m = models.MLPRanker(hidden_sizes=(32,), dropout=0.5)
  x = jax.random.normal(jax.random.key(0), (3, 6, F))
  params = m.init(jax.random.key(1), x)
  np.testing.assert_array_equal(m.apply(params, x), m.apply(params, x, deterministic=True))
  a = m.apply(params, x, deterministic=False, rngs={"dropout": jax.random.key(2)})
  b = m.apply(params, x, deterministic=False, rngs={"dropout": jax.random.key(3)})
  assert not np.allclose(a, b)


def test_two_tower_combinations():
  r, o = jnp.array([-1.0, 0.5, 2.0]), jnp.array([0.3, -2.0, 1.0])
  sig = lambda z: 1 / (1 + np.exp(-np.asarray(z, np.float64)))
  np.testing.assert_allclose(np.exp(models.combine_towers(r, o, mode="additive")), sig(r + o), rtol=1e-5)
  np.testing.assert_allclose(np.exp(models.combine_towers(r, o, mode="product")), sig(r) * sig(o), rtol=1e-5)
  with pytest.raises(ValueError, match="mode"):
    models.combine_towers(r, o, mode="max")

  tt = models.TwoTower(relevance=models.LinearRanker(), bias=models.PositionBias(num_positions=4), mode="product")
  x, pos = jax.random.normal(jax.random.key(0), (2, 4, F)), jnp.tile(jnp.arange(4), (2, 1))
  params = tt.init(jax.random.key(1), x, pos)
  rel, obs = tt.apply(params, x, pos)
  np.testing.assert_allclose(tt.apply(params, x, method="score"), rel)
  np.testing.assert_allclose(
    tt.apply(params, x, pos, method="click_log_prob"), models.combine_towers(rel, obs, mode="product")
  )


def test_make_ranker_rejects_unknown_names():
  assert isinstance(models.make_ranker("mlp", hidden_sizes=(3,)), models.MLPRanker)
  with pytest.raises(ValueError, match="ranker"):
    models.make_ranker("gbdt")
  with pytest.raises(ValueError, match="activation"):
    models.MLPRanker(activation="swish2").init(jax.random.key(0), jnp.zeros((1, 2)))


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_norm_before_normalises_the_input(kind):
  # LayerNorm on the input (the LBD code's rankers): a per-document affine map of the features,
  # x -> a x + b with a > 0, leaves the score unchanged; the default layout does not.
  x = jax.random.normal(jax.random.key(0), (3, 4, F))
  x2 = 2.5 * x + 0.7
  before = models.make_ranker(kind, hidden_sizes=(6,), norm_position="before", ln_epsilon=1e-9)
  after = models.make_ranker(kind, hidden_sizes=(6,))
  p = before.init(jax.random.key(1), x)
  np.testing.assert_allclose(before.apply(p, x2), before.apply(p, x), rtol=1e-4, atol=1e-5)
  q = after.init(jax.random.key(1), x)
  assert not np.allclose(after.apply(q, x2), after.apply(q, x), atol=1e-3)
  with pytest.raises(ValueError, match="norm_position"):
    models.make_ranker(kind, norm_position="middle")
