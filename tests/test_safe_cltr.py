"""Safe DR and PRPO (Gupta et al., SIGIR'23 / CIKM'24): closed forms on tiny lists."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import losses

S = np.array([0.5, -0.3, 0.1])
R_HAT = np.array([1.0, -0.5, 0.3])
# Six noise rows: row p puts permutation p on top (a large gap between ranks), so every ranking is sampled once.
PERMS = list(itertools.permutations(range(3)))
NOISE = np.stack([np.array([10.0 * (3 - list(p).index(i)) for i in range(3)]) for p in PERMS])


def _pl_log_prob(s, order):
  s = np.asarray(s, np.float64)[list(order)]
  return sum(s[k] - np.log(np.sum(np.exp(s[k:]))) for k in range(len(s)))


def test_plackett_luce_samples_are_the_rankings_with_their_probabilities():
  log_probs, exposure = losses.plackett_luce_samples(jnp.asarray(S), jnp.asarray(NOISE))
  want = [_pl_log_prob(S, p) for p in PERMS]
  np.testing.assert_allclose(log_probs, want, rtol=1e-5)
  np.testing.assert_allclose(np.sum(np.exp(want)), 1.0, rtol=1e-6)
  for row, p in zip(np.asarray(exposure), PERMS):
    np.testing.assert_allclose(row[list(p)], 1.0 / np.log2(np.arange(3) + 2.0), rtol=1e-6)


def _reinforce_grad(s, reward_coef):
  """-(1/S) sum_s (G_s - mean G) grad log pi(y_s) over the six rankings, by hand."""
  gains = np.array([np.sum(reward_coef[list(p)] / np.log2(np.arange(3) + 2.0)) for p in PERMS])
  adv = gains - gains.mean()
  grad = np.zeros(3)
  for a, p in zip(adv, PERMS):
    g = np.zeros(3)
    for k in range(3):
      rest = list(p[k:])
      g[p[k]] += 1.0
      g[rest] -= np.exp(s[rest]) / np.sum(np.exp(s[rest]))
    grad -= a * g / len(PERMS)
  return grad


def test_prpo_clip_is_inactive_inside_the_ratio_band():
  """Every ratio below 1 + epsilon: PRPO is the plain policy gradient of sum_d omega(d) R_d."""
  omega = np.mean(np.asarray(losses.plackett_luce_samples(jnp.asarray(S), jnp.asarray(NOISE))[1]), axis=0)
  inside = omega / 1.1  # ratios 1.1 < 1.2
  f = lambda eps, w0: jax.grad(
    lambda s: losses.prpo_loss(s, R_HAT, logging_exposure=w0, gumbel_noise=NOISE, epsilon=eps)
  )(jnp.asarray(S))
  np.testing.assert_allclose(f(0.2, inside), _reinforce_grad(S, R_HAT), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(f(0.2, inside), f(1e9, inside), rtol=1e-6)
  # Outside the band (ratio 1.5 for document 0) its reward is scaled by -0.1: another gradient.
  outside = inside.copy()
  outside[0] = omega[0] / 1.5
  coef = R_HAT.copy()
  coef[0] *= -0.1
  np.testing.assert_allclose(f(0.2, outside), _reinforce_grad(S, coef), rtol=1e-4, atol=1e-6)
  g = losses.prpo_coefficients(jnp.asarray(omega), R_HAT, logging_exposure=outside)
  np.testing.assert_allclose(g, coef, rtol=1e-6)
  with pytest.raises(ValueError, match="epsilon"):
    losses.prpo_coefficients(jnp.asarray(omega), R_HAT, logging_exposure=outside, epsilon=0.0)


def test_safe_dr_penalty_vanishes_with_data_and_pulls_towards_the_logger():
  omega = np.mean(np.asarray(losses.plackett_luce_samples(jnp.asarray(S), jnp.asarray(NOISE))[1]), axis=0)
  w0 = np.array([0.4, 1.0, 0.7])
  np.testing.assert_allclose(losses.exposure_divergence(jnp.asarray(w0), w0), 1.0, rtol=1e-6)
  np.testing.assert_allclose(
    losses.exposure_divergence(jnp.asarray(omega), w0), np.sum(omega**2 / w0) / np.sum(w0), rtol=1e-6
  )
  grad = lambda n: jax.grad(
    lambda s: losses.safe_dr_loss(s, R_HAT, logging_exposure=w0, gumbel_noise=NOISE, num_sessions=n)
  )(jnp.asarray(S))
  np.testing.assert_allclose(grad(1e12), _reinforce_grad(S, R_HAT), rtol=1e-4, atol=1e-6)
  # With little data the coefficients are R_d - kappa rho_d / (sqrt(N d2) sum w0): the closed form by hand.
  n, kappa = 10.0, np.sqrt(0.05 / 0.95)
  d2 = np.sum(omega**2 / w0) / np.sum(w0)
  coef = R_HAT - kappa * (omega / w0) / (np.sqrt(n * d2) * np.sum(w0))
  np.testing.assert_allclose(grad(n), _reinforce_grad(S, coef), rtol=1e-4, atol=1e-6)
