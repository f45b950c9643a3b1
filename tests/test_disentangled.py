"""Disentangled two-tower (Zhang et al., KDD'23): gradient reversal, observation dropout, the loss's parts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import losses


def test_gradient_reversal_and_observation_dropout():
  x = jnp.array([0.5, -1.0])
  np.testing.assert_array_equal(losses.gradient_reversal(x, 2.0), x)
  np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(losses.gradient_reversal(x, 2.0) ** 2))(x), -4.0 * x)
  assert losses.observation_dropout(x, jax.random.key(0), 0.0) is x
  o = losses.observation_dropout(jnp.ones(20_000), jax.random.key(1), 0.3)
  assert abs(float(jnp.mean(o == 0.0)) - 0.3) < 0.02 and abs(float(jnp.mean(o)) - 1.0) < 0.03
  with pytest.raises(ValueError, match="rate"):
    losses.observation_dropout(x, jax.random.key(0), 1.0)


def test_loss_is_the_two_tower_loss_plus_the_adversary_which_never_trains_the_ranker():
  s, o, a = jnp.array([0.3, -1.0, 2.0]), jnp.array([0.5, 0.0, -0.5]), jnp.array([0.1, 0.2, 0.3])
  c = jnp.array([1.0, 0.0, 1.0])
  two_tower = losses.two_tower_loss(s, c, observation_logits=o)
  f = lambda s, o, a, lam: losses.disentangled_two_tower_loss(
    s, c, observation_logits=o, adversary_logits=a, adversary_weight=lam
  )
  np.testing.assert_allclose(f(s, o, a, 0.0), two_tower, rtol=1e-6)
  np.testing.assert_allclose(f(s, o, a, 2.0), two_tower + 2.0 * jnp.mean((a - s) ** 2), rtol=1e-6)
  gs = jax.grad(f)(s, o, a, 2.0)
  np.testing.assert_allclose(gs, jax.grad(lambda s: losses.two_tower_loss(s, c, observation_logits=o))(s), rtol=1e-6)
  # Through the reversal the bias tower gets the adversary's gradient negated: it learns to defeat it.
  head = lambda o: 0.7 * losses.gradient_reversal(o, 1.0) + 0.1
  go = jax.grad(lambda o: f(s, o, head(o), 1.0))(o)
  click_part = jax.grad(lambda o: losses.two_tower_loss(s, c, observation_logits=o))(o)
  np.testing.assert_allclose(go - click_part, -0.7 * 2.0 * (head(o) - s) / 3.0, rtol=1e-5)
