r"""Disentangling relevance and bias in two-tower models (Zhang et al., KDD'23).

Zhang, Wang, Hu, Qian, Yan, Zhuang, Bendersky, Najork, "Towards Disentangling Relevance and Bias in Unbiased
Learning to Rank", KDD'23. A two-tower click model (:func:`~ultr_jax.losses.two_tower_loss`) with a relevance
tower :math:`r(x)` and a bias tower :math:`o(k)` is confounded when the logger ranks by relevance: the bias
tower can explain clicks that relevance caused (position and relevance are correlated), and the relevance tower
learns less. Two fixes (the paper's Section 4):

* **observation dropout** (Section 4.1): during training the bias tower's output is dropped (set to 0, the
  other entries rescaled by :math:`1/(1-p)`) with probability :math:`p`, so the relevance tower must explain
  clicks on its own (:func:`observation_dropout`);
* **gradient reversal** (Section 4.2): an adversarial head :math:`a(o)` predicts the relevance tower's output
  from the bias tower's output, and its gradient reaches the bias tower reversed and scaled by :math:`\eta`
  (:func:`gradient_reversal`), so the bias tower learns to carry no relevance information.

The loss is the two-tower click loss plus the adversary's squared error (Eq. 8),

.. math::
    \ell = \ell_{click}(r, o) + \lambda \sum_i \big(a_i - \mathrm{sg}(r_i)\big)^2 .
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn
from ultr_jax.losses.two_tower import two_tower_log_probs

__all__ = ["disentangled_two_tower_loss", "gradient_reversal", "observation_dropout"]


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def gradient_reversal(x: jax.Array, scale: float = 1.0) -> jax.Array:
  r"""The identity forward, the gradient times :math:`-\eta` backward (Ganin & Lempitsky 2015; KDD'23 Eq. 9).

  Args:
    x: any array.
    scale: :math:`\eta \ge 0`, the reversed gradient's scale.

  Returns:
    ``x`` unchanged; its cotangent is :math:`-\eta` times the incoming one.

  >>> float(jax.grad(lambda x: 3.0 * gradient_reversal(x, 0.5))(1.0))
  -1.5
  """
  return x


def _reversal_fwd(x, scale):
  return x, None


def _reversal_bwd(scale, _, g):
  return (-scale * g,)


gradient_reversal.defvjp(_reversal_fwd, _reversal_bwd)


def observation_dropout(observation_logits: jax.Array, key: jax.Array, rate: float) -> jax.Array:
  r"""Drops each bias-tower output with probability ``rate`` (KDD'23 Section 4.1): inverted dropout.

  .. math::
      \tilde o_i = \frac{m_i}{1 - p}\,o_i, \qquad m_i \sim \mathrm{Bernoulli}(1 - p)

  Args:
    observation_logits: ``[..., L]`` bias-tower logits.
    key: a ``jax.random.key``.
    rate: :math:`p \in [0, 1)`.

  Returns:
    ``[..., L]`` the dropped-out logits (``observation_logits`` when ``rate`` is 0).

  >>> o = observation_dropout(jnp.ones(1000), jax.random.key(0), 0.5)
  >>> sorted(set(o.tolist())), round(float(jnp.mean(o == 0)), 1)
  ([0.0, 2.0], 0.5)
  """
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"observation dropout rate must be in [0, 1), got {rate}")
  if rate == 0.0:
    return observation_logits
  keep = jax.random.bernoulli(key, 1.0 - rate, observation_logits.shape)
  return jnp.where(keep, observation_logits / (1.0 - rate), 0.0)


@register_loss("disentangled", trains=("observation_logits", "adversary_logits"))
def disentangled_two_tower_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  observation_logits: jax.Array,
  adversary_logits: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  mode: str = "additive",
  adversary_weight: float = 1.0,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""The two-tower click loss plus the adversary's squared error (KDD'23 Eq. 8).

  .. math::
      \ell_i = -c_i\log P(C_i{=}1) - (1 - c_i)\log P(C_i{=}0) + \lambda\,(a_i - \mathrm{sg}(r_i))^2

  ``adversary_logits`` :math:`a` are the adversarial head's predictions from the (gradient-reversed, see
  :func:`gradient_reversal`) bias-tower output; the relevance tower gets no gradient from the adversary.

  Args:
    scores: ``[..., L]`` relevance-tower logits :math:`r`.
    clicks: ``[..., L]`` clicks.
    observation_logits: ``[..., L]`` bias-tower logits :math:`o` (after :func:`observation_dropout` in training).
    adversary_logits: ``[..., L]`` the adversary's predictions :math:`a` of :math:`r`.
    where: ``bool[..., L]`` valid items (None: all).
    weights: ``[..., L]`` per-item weights.
    mode: ``"additive"`` or ``"product"`` (:func:`~ultr_jax.losses.two_tower_log_probs`).
    adversary_weight: :math:`\lambda \ge 0`.
    reduce_fn: over valid items (None: ``[..., L]``).

  Returns:
    The loss: a scalar, or ``[..., L]`` per item with ``reduce_fn=None``.

  >>> z = jnp.zeros(2); c = jnp.array([1.0, 0.0])
  >>> round(float(disentangled_two_tower_loss(z, c, observation_logits=z, adversary_logits=jnp.ones(2))), 4)
  1.6931
  """
  where = _utils.as_where(where, scores.shape)
  r = _utils.bound_scores(jnp.where(where, scores, 0.0))
  o = jnp.where(where, observation_logits, 0.0)
  a = _utils.bound_scores(jnp.where(where, adversary_logits, 0.0))
  log_p, log_n = two_tower_log_probs(r, o, mode=mode)
  c = jnp.where(where, clicks, 0.0)
  # The adversary's error, bounded as CLD's squared residuals are (|r|, |a| <= 1e15).
  loss = -(c * log_p + (1.0 - c) * log_n) + adversary_weight * (a - jax.lax.stop_gradient(r)) ** 2
  if weights is not None:
    loss = loss * weights
  return _utils.reduce_loss(loss, where, reduce_fn)
