"""UPE (Luo et al., SIGIR'24): the backdoor-adjusted weights in closed form."""

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import losses


def test_backdoor_weights_average_the_permuted_propensities():
  theta = np.array([[0.5, 0.3, 0.2], [0.6, 0.1, 0.3], [0.2, 0.5, 0.3]])
  w = losses.backdoor_weights(jnp.log(jnp.asarray(theta)) + 1.3)  # any shift: softmax per permutation
  mean = theta.mean(axis=0)
  np.testing.assert_allclose(w, mean[0] / mean, rtol=1e-5)
  # One permutation equal to the observed list: DLA's weights.
  o = jnp.array([0.2, -0.4, 1.0])
  np.testing.assert_allclose(losses.backdoor_weights(o[None]), losses.dla_weights(o), rtol=1e-6)
  # Masked items take no part in any permutation's softmax.
  wm = losses.backdoor_weights(jnp.log(jnp.asarray(theta)), where=jnp.array([True, True, False]))
  sub = theta[:, :2] / theta[:, :2].sum(axis=1, keepdims=True)
  np.testing.assert_allclose(wm[:2], sub.mean(0)[0] / sub.mean(0), rtol=1e-5)
  assert float(wm[2]) == 1.0


def test_upe_with_the_observed_list_as_its_one_permutation_is_dla():
  s, o, c = jnp.array([0.3, -1.0, 2.0]), jnp.array([0.5, 0.0, -0.5]), jnp.array([1.0, 0.0, 1.0])
  upe = lambda s, o: losses.upe_loss(s, c, observation_logits=o, permuted_observation_logits=o[None])
  dla = lambda s, o: losses.dla_loss(s, c, observation_logits=o)
  np.testing.assert_allclose(upe(s, o), dla(s, o), rtol=1e-6)
  for g, h in zip(jax.grad(upe, argnums=(0, 1))(s, o), jax.grad(dla, argnums=(0, 1))(s, o)):
    np.testing.assert_allclose(g, h, rtol=1e-5)
