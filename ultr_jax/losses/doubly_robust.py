r"""Doubly robust estimation for position and trust bias (Oosterhuis, TOIS'23).

Oosterhuis, "Doubly Robust Estimation for Correcting Position Bias in Click Feedback for Unbiased Learning to
Rank", ACM TOIS 41(3), 2023. Clicks follow the affine model of trust bias (Eq. 5),

.. math::
    P(C = 1 \mid d \text{ at } k) = \alpha_k R_d + \beta_k ,

and a stochastic logging policy :math:`\pi_0` places document :math:`d` at rank :math:`k` with probability
:math:`\pi_0(k \mid d)`; its *expected treatments* are (Eq. 20)

.. math::
    \bar\alpha_d = \sum_k \pi_0(k \mid d)\,\alpha_k, \qquad \bar\beta_d = \sum_k \pi_0(k \mid d)\,\beta_k .

With a regression model :math:`\hat R_d` (written :math:`h_d` here, the ``imputed`` input of the loss
vocabulary) the doubly robust estimate of relevance is (Eq. 28, with the clipped treatment of Eq. 36)

.. math::
    \hat R^{DR}_d = h_d + \frac{\overline{c}_d - \bar\beta_d - \bar\alpha_d h_d}{\max(\bar\alpha_d, \tau)},
    \qquad \tau = \min\big(10 / \sqrt{N},\ 1\big),

unbiased when either the treatments are right (the IPS part) or the regression is (the direct-method part); a
document the logger can never show usefully (:math:`\bar\alpha_d = 0`) keeps its regression estimate
:math:`h_d`. Where nothing is clipped (:math:`\bar\alpha_d \ge \tau`) it is the IPS/affine estimate
:math:`(\overline{c}_d - \bar\beta_d) / \bar\alpha_d` whatever :math:`h` is. Per session, :math:`\overline{c}_d` is
the session's click; the mean over sessions is the paper's click-through rate, so a loss that is linear in the
estimate is the paper's estimate in expectation over a batch.

The regression model is fitted by the direct method (the paper's Eq. 25 objective, a squared error of the
predicted click probability :math:`\bar\alpha_d h_d + \bar\beta_d`): :func:`direct_method_loss`. The paper
optimises a Plackett-Luce policy by PL-Rank on the DCG-exposure-weighted estimates; here the estimates are the
targets of the listwise softmax cross-entropy (the ULTRA convention every other correction of the library uses),
whose optimum orders documents by the same estimates. SIF's :func:`~ultr_jax.losses.dr_targets` is the special
case :math:`\bar\beta = 0` with click propensities in place of :math:`\bar\alpha` on its displayed items (it
keeps its own function: a displayed item of propensity 0 gets :math:`m + c/\tau` there, :math:`h` here).
"""

import math
from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["direct_method_loss", "doubly_robust_softmax_loss", "doubly_robust_targets", "dr_clip_threshold"]


def dr_clip_threshold(num_sessions: int) -> float:
  r"""The paper's treatment floor :math:`\tau = \min(10 / \sqrt{N}, 1)` for a log of ``num_sessions`` sessions.

  Oosterhuis, TOIS'23, Section 7 (the clipping of :math:`\bar\alpha` in Eq. 36).

  Args:
    num_sessions: :math:`N`, the number of logged sessions (>= 1).

  Returns:
    :math:`\tau` as a float in (0, 1].

  Raises:
    ValueError: ``num_sessions`` below 1.

  >>> dr_clip_threshold(100), dr_clip_threshold(10_000)
  (1.0, 0.1)
  """
  if int(num_sessions) < 1:
    raise ValueError(f"num_sessions must be >= 1, got {num_sessions}")
  return min(10.0 / math.sqrt(int(num_sessions)), 1.0)


def doubly_robust_targets(
  clicks: jax.Array,
  *,
  alpha_bar: jax.Array,
  beta_bar: jax.Array,
  imputed: jax.Array,
  where: Optional[jax.Array] = None,
  tau: Optional[float] = None,
) -> jax.Array:
  r"""Stop-gradient doubly robust relevance estimates :math:`\hat R^{DR}_d` (TOIS'23 Eq. 28 / 36).

  .. math::
      \hat R^{DR}_d = \begin{cases}
        h_d + (c_d - \bar\beta_d - \bar\alpha_d h_d) / \max(\bar\alpha_d, \tau) & \bar\alpha_d > 0 \\
        h_d & \bar\alpha_d \le 0 \end{cases}

  Args:
    clicks: ``[..., L]`` clicks (or click-through rates).
    alpha_bar: ``[..., L]`` expected treatments :math:`\bar\alpha_d` (for a deterministic logger
      :math:`\alpha_k` at the item's rank: :math:`\theta_k(\epsilon^+_k - \epsilon^-_k)` under trust bias,
      :math:`\theta_k` under the PBM).
    beta_bar: ``[..., L]`` expected click offsets :math:`\bar\beta_d` (:math:`\theta_k\epsilon^-_k`; 0 under the PBM).
    imputed: ``[..., L]`` the regression model's estimates :math:`h_d`.
    where: ``bool[..., L]`` valid items (None: all); padding gets 0.
    tau: the floor :math:`\tau` of :math:`\bar\alpha` (None: ``1 / DEFAULT_MAX_WEIGHT``, i.e. no clipping in
      practice; :func:`dr_clip_threshold` gives the paper's).

  Returns:
    ``[..., L]`` estimates (stop-gradient), 0 where masked.

  >>> c = jnp.array([1.0, 0.0, 0.0])
  >>> t = doubly_robust_targets(c, alpha_bar=jnp.array([0.5, 0.5, 0.0]), beta_bar=jnp.array([0.1, 0.1, 0.0]),
  ...                           imputed=jnp.array([0.4, 0.4, 0.7]))
  >>> [round(v, 4) for v in t.tolist()]  # (1 - 0.1) / 0.5, (0 - 0.1) / 0.5, h where alpha_bar = 0
  [1.8, -0.2, 0.7]
  """
  clicks = jnp.asarray(clicks)
  where = _utils.as_where(where, clicks.shape)
  tau = 1.0 / _utils.DEFAULT_MAX_WEIGHT if tau is None else float(tau)
  if not tau > 0:
    raise ValueError(f"tau must be positive, got {tau}")
  dtype = jnp.result_type(float, clicks, alpha_bar, beta_bar, imputed)
  sg = jax.lax.stop_gradient
  a, b, h = (sg(jnp.asarray(x, dtype)) for x in (alpha_bar, beta_bar, imputed))
  observable = where & (a > 0)
  a = jnp.where(observable, a, 1.0)
  estimate = h + (jnp.asarray(clicks, dtype) - b - a * h) / jnp.maximum(a, tau)
  return sg(jnp.where(observable, estimate, jnp.where(where, h, 0.0)))


@register_loss("doubly_robust")
def doubly_robust_softmax_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  alpha_bar: jax.Array,
  beta_bar: jax.Array,
  imputed: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  tau: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Listwise softmax cross-entropy on the doubly robust estimates (:func:`doubly_robust_targets`).

  .. math::
      \ell = -\sum_d \hat R^{DR}_d \log\frac{e^{s_d}}{\sum_{d'} e^{s_{d'}}}

  Linear in :math:`\hat R^{DR}`, so unbiased for the softmax loss on the true relevance when either the
  treatments or the regression are right (Oosterhuis, TOIS'23, Theorem 5.2). Equals
  :func:`~ultr_jax.losses.affine_softmax_loss` where :math:`\bar\alpha \ge \tau`.

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks.
    alpha_bar: ``[..., L]`` expected treatments :math:`\bar\alpha_d`.
    beta_bar: ``[..., L]`` expected offsets :math:`\bar\beta_d`.
    imputed: ``[..., L]`` regression estimates :math:`h_d`.
    where: ``bool[..., L]`` valid items (None: all).
    weights: ``[..., L]`` per-item weights (multiply the estimates, rax's convention).
    tau: the floor of :math:`\bar\alpha` (see :func:`doubly_robust_targets`).
    reduce_fn: over lists with a valid item (None: per list ``[...]``).

  Returns:
    The loss: a scalar, or ``[...]`` per list with ``reduce_fn=None``.

  >>> s = jnp.zeros(2); c = jnp.array([0.0, 1.0])
  >>> round(float(doubly_robust_softmax_loss(s, c, alpha_bar=jnp.array([1.0, 0.5]), beta_bar=jnp.zeros(2),
  ...                                        imputed=jnp.full(2, 0.3))), 4)  # IPS: 2 log 2
  1.3863
  """
  where = _utils.as_where(where, scores.shape)
  target = doubly_robust_targets(clicks, alpha_bar=alpha_bar, beta_bar=beta_bar, imputed=imputed, where=where, tau=tau)
  return _utils.softmax_loss(scores, target, where, weights, reduce_fn)


@register_loss("doubly_robust")
def direct_method_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  alpha_bar: jax.Array,
  beta_bar: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""The regression model's direct-method objective: squared error of the predicted click probability.

  .. math::
      \ell = \sum_d \big(c_d - \bar\alpha_d\,\sigma(s_d) - \bar\beta_d\big)^2 ,

  :math:`h_d = \sigma(s_d)` (Oosterhuis, TOIS'23, Eq. 25: the regression that the direct-method estimate
  :math:`\hat R^{DM}_d = h_d` uses, minimised in expectation by the true relevance when the treatments are right).

  Args:
    scores: ``[..., L]`` the regression model's logits (:math:`h = \sigma(s)`).
    clicks: ``[..., L]`` clicks.
    alpha_bar: ``[..., L]`` expected treatments.
    beta_bar: ``[..., L]`` expected offsets.
    where: ``bool[..., L]`` valid items (None: all).
    weights: ``[..., L]`` per-item weights.
    reduce_fn: over valid items (None: ``[..., L]``).

  Returns:
    The loss: a scalar, or ``[..., L]`` per item with ``reduce_fn=None``.

  >>> round(float(direct_method_loss(jnp.zeros(2), jnp.array([1.0, 0.0]), alpha_bar=jnp.ones(2),
  ...                                beta_bar=jnp.zeros(2))), 4)  # (1 - 0.5)^2 and 0.5^2
  0.25
  """
  where = _utils.as_where(where, scores.shape)
  dtype = jnp.result_type(float, scores)
  sg = jax.lax.stop_gradient
  a = sg(jnp.where(where, jnp.asarray(alpha_bar, dtype), 0.0))
  b = sg(jnp.where(where, jnp.asarray(beta_bar, dtype), 0.0))
  c = jnp.where(where, jnp.asarray(clicks, dtype), 0.0)
  loss = (c - a * jax.nn.sigmoid(scores) - b) ** 2
  if weights is not None:
    loss = loss * weights
  return _utils.reduce_loss(loss, where, reduce_fn)
