"""Doubly robust LTR (Oosterhuis, TOIS'23): closed forms on tiny lists.

The invariants (mask equals truncation, vmap, all-masked gradients, ...) come from the registry in test_losses.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import losses

C = np.array([1.0, 0.0, 1.0, 0.0])
THETA = np.array([1.0, 0.6, 0.4, 0.3])
EPS_PLUS, EPS_MINUS = np.array([1.0, 0.95, 0.9, 0.9]), np.array([0.1, 0.1, 0.2, 0.05])
ALPHA, BETA = THETA * (EPS_PLUS - EPS_MINUS), THETA * EPS_MINUS
H = np.array([0.2, 0.7, 0.1, 0.9])


def test_dr_equals_ips_where_nothing_is_clipped():
  """alpha_bar >= tau: the DR estimate is the affine/IPS one, (c - beta) / alpha, whatever h is."""
  tau = float(ALPHA.min())
  for h in (H, 1.0 - H, np.zeros(4)):
    dr = losses.doubly_robust_targets(C, alpha_bar=ALPHA, beta_bar=BETA, imputed=h, tau=tau)
    np.testing.assert_allclose(dr, (C - BETA) / ALPHA, rtol=1e-6)
    affine = losses.affine_targets(C, propensities=THETA, eps_plus=EPS_PLUS, eps_minus=EPS_MINUS)
    np.testing.assert_allclose(dr, affine, rtol=1e-5)
  s = jnp.array([0.3, -0.2, 1.0, 0.0])
  kw = dict(propensities=THETA, eps_plus=EPS_PLUS, eps_minus=EPS_MINUS)
  np.testing.assert_allclose(
    losses.doubly_robust_softmax_loss(s, C, alpha_bar=ALPHA, beta_bar=BETA, imputed=H, tau=tau),
    losses.affine_softmax_loss(s, C, **kw),
    rtol=1e-5,
  )


def test_dr_is_the_regression_where_alpha_bar_is_zero_and_clips_below_tau():
  alpha = np.array([0.0, 0.05, 0.5, 0.0])
  beta = np.array([0.0, 0.01, 0.1, 0.0])
  clicks = np.array([0.0, 1.0, 1.0, 0.0])
  dr = np.asarray(losses.doubly_robust_targets(clicks, alpha_bar=alpha, beta_bar=beta, imputed=H, tau=0.1))
  np.testing.assert_allclose(dr[[0, 3]], H[[0, 3]], rtol=1e-6)  # never usefully shown: h_d
  np.testing.assert_allclose(dr[1], H[1] + (1.0 - 0.01 - 0.05 * H[1]) / 0.1, rtol=1e-6)  # clipped at tau
  np.testing.assert_allclose(dr[2], (1.0 - 0.1) / 0.5, rtol=1e-6)  # unclipped: IPS


def test_dr_is_unbiased_if_either_the_treatments_or_the_regression_is_right():
  """E[c] = alpha R + beta: E[R_DR] = R with any h when nothing is clipped, with h = R when all is clipped."""
  relevance = np.array([0.9, 0.2, 0.5, 0.0])
  ctr = ALPHA * relevance + BETA
  kw = dict(alpha_bar=ALPHA, beta_bar=BETA)
  np.testing.assert_allclose(losses.doubly_robust_targets(ctr, imputed=H, tau=0.01, **kw), relevance, atol=1e-6)
  np.testing.assert_allclose(losses.doubly_robust_targets(ctr, imputed=relevance, tau=1.0, **kw), relevance, atol=1e-6)
  biased = np.asarray(losses.doubly_robust_targets(ctr, imputed=H, tau=1.0, **kw))
  assert np.max(np.abs(biased - relevance)) > 0.1  # clipped with a wrong regression: biased (the trade-off)


def test_clip_threshold_and_direct_method_optimum():
  assert losses.dr_clip_threshold(1) == 1.0 and losses.dr_clip_threshold(400) == 0.5
  with pytest.raises(ValueError, match="num_sessions"):
    losses.dr_clip_threshold(0)
  with pytest.raises(ValueError, match="tau"):
    losses.doubly_robust_targets(C, alpha_bar=ALPHA, beta_bar=BETA, imputed=H, tau=0.0)
  # The direct-method objective is minimised at sigma(s) = R when the click-through rates are alpha R + beta.
  relevance = np.array([0.9, 0.2, 0.5, 0.4])
  ctr = jnp.asarray(ALPHA * relevance + BETA)
  grad = jax.grad(lambda s: losses.direct_method_loss(s, ctr, alpha_bar=ALPHA, beta_bar=BETA))
  np.testing.assert_allclose(grad(jnp.log(relevance / (1 - relevance))), 0.0, atol=1e-6)
