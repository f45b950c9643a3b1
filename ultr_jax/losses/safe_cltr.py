r"""Safe counterfactual LTR: the safe doubly robust objective and proximal ranking policy optimisation (PRPO).

A Plackett-Luce policy :math:`\pi` over a list's documents gives each document an expected *exposure*
:math:`\omega_\pi(d) = \mathbb{E}_{y \sim \pi}[\lambda(\mathrm{rank}(d \mid y))]` with the DCG weights
:math:`\lambda(k) = 1 / \log_2(k + 1)`; the value of the policy under a relevance estimate :math:`\hat R`
(the doubly robust one, :func:`~ultr_jax.losses.doubly_robust_targets`) is
:math:`\hat V(\pi) = \sum_d \omega_\pi(d)\hat R_d`. Both objectives compare :math:`\omega_\pi` with the logging
policy's exposure :math:`\omega_0` through the ratios :math:`\rho_d = \omega_\pi(d) / \omega_0(d)`.

* **Safe DR** (Gupta, Oosterhuis & de Rijke, "Safe Deployment for Counterfactual Learning to Rank with Exposure-Based
  Risk Minimization", SIGIR'23, Eq. 15-17): maximise a high-confidence lower bound
  :math:`\hat V(\pi) - \kappa\sqrt{\hat d_2(\pi \| \pi_0) / N}`, :math:`\kappa = \sqrt{(1 - \delta)/\delta}`,
  with the exposure-based second moment :math:`\hat d_2 = \sum_d \omega_0(d)\rho_d^2 / \sum_d \omega_0(d)`
  (:func:`exposure_divergence`).
* **PRPO** (Gupta, Oosterhuis & de Rijke, "Practical and Robust Safety Guarantees for Advanced Counterfactual
  Learning to Rank", CIKM'24, Eq. 9-10): the PPO-style clip of each document's ratio. A document whose ratio
  is still below :math:`1 + \epsilon` keeps its reward :math:`\hat R_d`; beyond it the reward is scaled by
  ``clip_scale`` (-0.1 in the released code: a push back towards the band), so the policy cannot move far
  from the logger whatever the estimates say, with no dependence on :math:`N` or :math:`\delta`.

Both are optimised by REINFORCE over sampled rankings :math:`y_1..y_S \sim \pi` (Gumbel-perturbed scores:
the caller draws ``gumbel_noise`` from its key): with per-document coefficients :math:`g_d` (the derivative of
the objective with respect to :math:`\omega_\pi(d)`, stop-gradient), the surrogate

.. math::
    \ell = -\frac{1}{S}\sum_{s} \big(G(y_s) - \bar G\big)\log\pi(y_s), \qquad G(y) = \sum_d g_d\,\lambda(\mathrm{rank}(d \mid y)),

has the gradient of :math:`-\sum_d g_d\,\omega_\pi(d)` in expectation; :math:`\bar G`, the mean over the samples,
is the control variate (the paper's mean-reward baseline).
"""

from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = [
  "exposure_divergence",
  "plackett_luce_samples",
  "prpo_coefficients",
  "prpo_loss",
  "safe_dr_loss",
]


def _dcg_weights(ranks: jax.Array, top_k: Optional[int]) -> jax.Array:
  w = 1.0 / jnp.log2(ranks.astype(jnp.float32) + 1.0)
  return w if top_k is None else jnp.where(ranks <= top_k, w, 0.0)


def plackett_luce_samples(
  scores: jax.Array, gumbel_noise: jax.Array, *, where: Optional[jax.Array] = None, top_k: Optional[int] = None
) -> tuple[jax.Array, jax.Array]:
  r"""Rankings sampled from the Plackett-Luce policy of ``scores``: their log-probabilities and exposures.

  The Gumbel-max trick: sorting :math:`s + g` with :math:`g` i.i.d. standard Gumbel draws a ranking from
  :math:`\pi(y) = \prod_k e^{s_{y_k}} / \sum_{j \ge k} e^{s_{y_j}}` (valid items only, padding last). Each
  sample's per-document exposure is its DCG weight :math:`1/\log_2(\mathrm{rank} + 1)` (0 beyond ``top_k``).

  Args:
    scores: ``[..., L]`` the policy's logits.
    gumbel_noise: ``[..., S, L]`` standard Gumbel noise, one row per sample (``jax.random.gumbel(key, ...)``).
    where: ``bool[..., L]`` valid items (None: all).
    top_k: the exposure cut-off (None: the whole list).

  Returns:
    ``(log_probs [..., S], exposure [..., S, L])``: :math:`\log\pi(y_s)` (differentiable in ``scores``) and the
    samples' exposures (0 where masked); the mean of the exposures over ``S`` estimates :math:`\omega_\pi`.

  >>> lp, e = plackett_luce_samples(jnp.zeros(2), jnp.array([[1.0, 0.0], [0.0, 1.0]]))
  >>> [round(v, 4) for v in jnp.exp(lp).tolist()], e.tolist()
  ([0.5, 0.5], [[1.0, 0.6309297680854797], [0.6309297680854797, 1.0]])
  """
  where = _utils.as_where(where, scores.shape)
  s = _utils.bound_scores(jnp.where(where, scores, 0.0))
  valid = jnp.broadcast_to(where[..., None, :], gumbel_noise.shape)
  key = jnp.where(valid, jax.lax.stop_gradient(s)[..., None, :] + gumbel_noise, -jnp.inf)
  order = jnp.argsort(-key, axis=-1, stable=True)  # [..., S, L]: the sampled ranking, padding last
  sorted_s = jnp.take_along_axis(jnp.broadcast_to(s[..., None, :], order.shape), order, axis=-1)
  sorted_valid = jnp.take_along_axis(valid, order, axis=-1)
  masked = jnp.where(sorted_valid, sorted_s, -jnp.inf)
  suffix = jax.lax.cumlogsumexp(masked, axis=masked.ndim - 1, reverse=True)
  suffix = jnp.where(sorted_valid, suffix, 0.0)
  log_probs = jnp.sum(jnp.where(sorted_valid, sorted_s - suffix, 0.0), axis=-1)
  ranks = jnp.argsort(order, axis=-1) + 1
  exposure = jnp.where(valid, _dcg_weights(ranks, top_k), 0.0)
  return log_probs, jax.lax.stop_gradient(exposure)


def exposure_divergence(exposure: jax.Array, logging_exposure: jax.Array, *, where: Optional[jax.Array] = None):
  r"""The exposure-based second moment :math:`\hat d_2(\pi \| \pi_0)` of one list (SIGIR'23 Eq. 15).

  .. math::
      \hat d_2 = \frac{\sum_d \omega_0(d)\,(\omega_\pi(d)/\omega_0(d))^2}{\sum_d \omega_0(d)}

  1 when the exposures agree, larger the further :math:`\pi` moves from the logger.

  Args:
    exposure: ``[..., L]`` :math:`\omega_\pi`.
    logging_exposure: ``[..., L]`` :math:`\omega_0` (> 0 where valid).
    where: ``bool[..., L]`` valid items (None: all).

  Returns:
    ``[...]`` :math:`\hat d_2` per list (1 for an all-masked list).

  >>> float(exposure_divergence(jnp.array([1.0, 0.5]), jnp.array([1.0, 0.5])))
  1.0
  """
  where = _utils.as_where(where, exposure.shape)
  w0 = jnp.where(where, jnp.maximum(logging_exposure, 1.0 / _utils.DEFAULT_MAX_WEIGHT), 1.0)
  num = jnp.sum(jnp.where(where, exposure**2 / w0, 0.0), axis=-1)
  den = jnp.sum(jnp.where(where, w0, 0.0), axis=-1)
  return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)


def _reinforce(scores, coefficients, gumbel_noise, where, weights, top_k, reduce_fn):
  """The REINFORCE surrogate of ``-sum_d g_d omega(d)`` per list, with the samples' mean as control variate."""
  log_probs, exposure = plackett_luce_samples(scores, gumbel_noise, where=where, top_k=top_k)
  g = jax.lax.stop_gradient(jnp.where(where, coefficients, 0.0))
  if weights is not None:
    g = g * jax.lax.stop_gradient(jnp.where(where, weights, 0.0))
  reward = jnp.sum(g[..., None, :] * exposure, axis=-1)  # [..., S]
  advantage = jax.lax.stop_gradient(reward - jnp.mean(reward, axis=-1, keepdims=True))
  per_list = -jnp.mean(advantage * log_probs, axis=-1)
  return _utils.reduce_lists(per_list, where, reduce_fn)


def prpo_coefficients(
  exposure: jax.Array,
  targets: jax.Array,
  *,
  logging_exposure: jax.Array,
  where: Optional[jax.Array] = None,
  epsilon: float = 0.2,
  clip_scale: float = -0.1,
) -> jax.Array:
  r"""PRPO's per-document reward: :math:`\hat R_d` inside the ratio band, ``clip_scale`` :math:`\hat R_d` beyond.

  .. math::
      g_d = \begin{cases} \hat R_d & \rho_d = \omega_\pi(d)/\omega_0(d) < 1 + \epsilon \\
                          c\,\hat R_d & \text{otherwise} \end{cases}

  Gupta et al., CIKM'24, Eq. 10 (with :math:`c` = ``clip_scale``, the released code's -0.1).

  Args:
    exposure: ``[..., L]`` :math:`\omega_\pi` (stop-gradient).
    targets: ``[..., L]`` reward estimates :math:`\hat R_d`.
    logging_exposure: ``[..., L]`` :math:`\omega_0`.
    where: ``bool[..., L]`` valid items (None: all).
    epsilon: the band's half-width :math:`\epsilon` (> 0).
    clip_scale: :math:`c`, the factor beyond the band.

  Returns:
    ``[..., L]`` coefficients, 0 where masked.

  >>> prpo_coefficients(jnp.array([1.0, 1.0]), jnp.array([2.0, 2.0]), logging_exposure=jnp.array([1.0, 0.5])).tolist()
  [2.0, -0.20000000298023224]
  """
  if not epsilon > 0:
    raise ValueError(f"epsilon must be positive, got {epsilon}")
  where = _utils.as_where(where, exposure.shape)
  w0 = jnp.maximum(logging_exposure, 1.0 / _utils.DEFAULT_MAX_WEIGHT)
  inside = exposure < (1.0 + epsilon) * w0
  g = jnp.where(inside, targets, clip_scale * targets)
  return jax.lax.stop_gradient(jnp.where(where, g, 0.0))


@register_loss("safe_cltr")
def prpo_loss(
  scores: jax.Array,
  targets: jax.Array,
  *,
  logging_exposure: jax.Array,
  gumbel_noise: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  epsilon: float = 0.2,
  clip_scale: float = -0.1,
  top_k: Optional[int] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""PRPO: the REINFORCE surrogate with PRPO's clipped rewards (:func:`prpo_coefficients`).

  .. math::
      \ell = -\frac{1}{S}\sum_s (G(y_s) - \bar G)\log\pi(y_s), \qquad G(y) = \sum_d g_d\,\lambda(\mathrm{rank}(d \mid y))

  with :math:`\omega_\pi` estimated by the same samples. Inside the band (every :math:`\rho_d < 1 + \epsilon`)
  it is the plain policy gradient of :math:`\hat V(\pi)` (Gupta et al., CIKM'24, Eq. 9-10).

  Args:
    scores: ``[..., L]`` the policy's logits.
    targets: ``[..., L]`` reward estimates :math:`\hat R_d` (doubly robust ones in the paper).
    logging_exposure: ``[..., L]`` the logging policy's exposure :math:`\omega_0(d)`.
    gumbel_noise: ``[..., S, L]`` standard Gumbel noise for ``S`` sampled rankings.
    where: ``bool[..., L]`` valid items (None: all).
    weights: ``[..., L]`` per-item weights (multiply the rewards).
    epsilon: the ratio band :math:`\epsilon`.
    clip_scale: the reward factor beyond the band.
    top_k: the exposure cut-off (None: the whole list).
    reduce_fn: over lists with a valid item (None: per list ``[...]``).

  Returns:
    The surrogate loss: a scalar, or ``[...]`` per list with ``reduce_fn=None``.

  Two samples (each order once); the gradient lifts the rewarded document:

  >>> g = jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> f = lambda s: prpo_loss(s, jnp.array([1.0, 0.0]), logging_exposure=jnp.ones(2), gumbel_noise=g)
  >>> [round(v, 4) for v in jax.grad(f)(jnp.zeros(2)).tolist()]
  [-0.0923, 0.0923]
  """
  where = _utils.as_where(where, scores.shape)
  _, exposure = plackett_luce_samples(scores, gumbel_noise, where=where, top_k=top_k)
  omega = jnp.mean(exposure, axis=-2)
  g = prpo_coefficients(
    omega, targets, logging_exposure=logging_exposure, where=where, epsilon=epsilon, clip_scale=clip_scale
  )
  return _reinforce(scores, g, gumbel_noise, where, weights, top_k, reduce_fn)


@register_loss("safe_cltr")
def safe_dr_loss(
  scores: jax.Array,
  targets: jax.Array,
  *,
  logging_exposure: jax.Array,
  gumbel_noise: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  num_sessions: float = 1000.0,
  delta: float = 0.95,
  top_k: Optional[int] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Safe DR: the REINFORCE surrogate of the risk-penalised value (SIGIR'23 Eq. 17).

  .. math::
      \max_\pi\ \hat V(\pi) - \kappa\sqrt{\hat d_2(\pi \| \pi_0) / N}, \qquad \kappa = \sqrt{(1 - \delta) / \delta}

  per list; the coefficients are the objective's derivative in :math:`\omega_\pi` (:func:`exposure_divergence`),
  :math:`g_d = \hat R_d - \kappa\,\rho_d / (\sqrt{N \hat d_2}\sum_{d'}\omega_0(d'))`.

  Args:
    scores: ``[..., L]`` the policy's logits.
    targets: ``[..., L]`` reward estimates :math:`\hat R_d`.
    logging_exposure: ``[..., L]`` :math:`\omega_0(d)`.
    gumbel_noise: ``[..., S, L]`` standard Gumbel noise for ``S`` sampled rankings.
    where: ``bool[..., L]`` valid items (None: all).
    weights: ``[..., L]`` per-item weights (multiply the rewards).
    num_sessions: :math:`N`, the log's size (the penalty shrinks as :math:`1/\sqrt{N}`).
    delta: the confidence :math:`\delta \in (0, 1)`.
    top_k: the exposure cut-off.
    reduce_fn: over lists with a valid item (None: per list ``[...]``).

  Returns:
    The surrogate loss: a scalar, or ``[...]`` per list with ``reduce_fn=None``.

  With little data the penalty pulls towards the logger (here: rank document 1 first) against the reward:

  >>> g = jnp.array([[1.0, 0.0], [0.0, 1.0]])
  >>> w0 = jnp.array([0.63, 1.0])
  >>> f = lambda s, n: safe_dr_loss(s, jnp.array([1.0, 0.0]), logging_exposure=w0, gumbel_noise=g, num_sessions=n)
  >>> [round(float(jax.grad(f)(jnp.zeros(2), n)[0]), 4) for n in (1e6, 1.0)]
  [-0.0923, -0.0862]
  """
  if not 0.0 < delta < 1.0 or not num_sessions > 0:
    raise ValueError(f"delta must be in (0, 1) and num_sessions > 0, got {delta}, {num_sessions}")
  where = _utils.as_where(where, scores.shape)
  _, exposure = plackett_luce_samples(scores, gumbel_noise, where=where, top_k=top_k)
  omega = jnp.mean(exposure, axis=-2)
  kappa = ((1.0 - delta) / delta) ** 0.5

  def objective(w):
    value = jnp.sum(jnp.where(where, w * targets, 0.0), axis=-1)
    return jnp.sum(value - kappa * jnp.sqrt(exposure_divergence(w, logging_exposure, where=where) / num_sessions))

  g = jax.grad(objective)(jax.lax.stop_gradient(omega))
  return _reinforce(scores, g, gumbel_noise, where, weights, top_k, reduce_fn)
