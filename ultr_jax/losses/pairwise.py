r"""Pairwise debiasing (PairD, Unbiased LambdaMART).

Hu, Wang, Peng, Li, "Unbiased LambdaMART: An Unbiased Pairwise
Learning-to-Rank Algorithm", WWW'19, as in ULTRA's ``PairDebias``. For a
clicked item :math:`i` and an unclicked item :math:`j` of the same list,
the pairwise logistic loss is reweighted by position-based bias ratios
:math:`t^+` (clicked side) and :math:`t^-` (unclicked side):

.. math::
    \ell = \sum_{c_i > c_j} \frac{\log(1 + e^{-(s_i - s_j)})}{t^+_{k_i}\, t^-_{k_j}}.

The ratios are updated in closed form from the (stop-gradiented) pair
losses, with :math:`p` the regularisation exponent (ULTRA ``regulation_p``
= 1) and ULTRA's running average with step :math:`\alpha`:

.. math::
    t^+_k \propto \Big(\sum_{c_i > c_j,\, k_i = k}
        \frac{\ell_{ij}}{t^-_{k_j}}\Big)^{\frac{1}{p+1}}, \qquad
    t^-_k \propto \Big(\sum_{c_i > c_j,\, k_j = k}
        \frac{\ell_{ij}}{t^+_{k_i}}\Big)^{\frac{1}{p+1}},

normalised so that :math:`t^\pm_1 = 1`. Unlike ULTRA (whose target for a
position without pairs in the batch is 0, so its ratio decays towards 0 and
its weight grows without bound), such a position keeps its value here. The
ranker loss is the mean over valid pairs (ULTRA sums; a constant scale).
Pairs are all (clicked, unclicked)
pairs of valid items (both orders of display, as in the paper), built with
an ``[..., L, L]`` mask (no Python loops). The ratios are the state of
:func:`pairwise_debiasing_estimator`, an ``(init, update)`` pair
(:class:`~ultr_jax.losses.Estimator`); the loss only reads them.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.estimator import Estimator
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = [
  "click_pairs",
  "pairwise_debiasing_loss",
  "pairwise_debiasing_update",
  "PairwiseDebiasingState",
  "pairwise_debiasing_estimator",
]


def click_pairs(clicks: jax.Array, *, where: Optional[jax.Array] = None) -> jax.Array:
  r"""``[..., L, L]`` bool mask of pairs (i clicked, j unclicked), both valid.

  Args:
    clicks: ``[..., L]`` clicks.
    where: ``bool[..., L]`` the valid items (None: all).

  Returns:
    ``bool[..., L, L]``: True for the pairs ``(i, j)`` with ``i`` clicked and ``j`` not, both valid.

  >>> click_pairs(jnp.array([1.0, 0.0, 0.0]), where=jnp.array([True, True, False])).sum()
  Array(1, dtype=int32)
  """
  where = _utils.as_where(where, clicks.shape)
  valid = where[..., :, None] & where[..., None, :]
  return valid & (clicks[..., :, None] > clicks[..., None, :])


def _pair_losses(scores, clicks, where):
  pairs = click_pairs(clicks, where=where)
  diff = jnp.where(pairs, scores[..., :, None] - scores[..., None, :], 0.0)
  return jnp.where(pairs, jax.nn.softplus(-diff), 0.0), pairs


@register_loss("paird")
def pairwise_debiasing_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  t_plus: jax.Array,
  t_minus: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Debiased pairwise logistic loss (see the module docstring).

  Args:
    scores: ``[..., L]`` logits.
    clicks: ``[..., L]`` clicks.
    t_plus: ``[..., L]`` :math:`t^+` of each item's position.
    t_minus: ``[..., L]`` :math:`t^-` of each item's position.
    where: ``[..., L]`` mask.
    weights: optional ``[..., L]`` item weights; the pair ``(i, j)`` gets
      ``weights[i]`` (rax's convention).
    max_weight: clip of :math:`1/(t^+_i t^-_j)` (None: ``DEFAULT_MAX_WEIGHT`` = 1e8;
      ``math.inf``: none).
    reduce_fn: over valid pairs (rax's pairwise convention); None returns
      ``[..., L, L]`` per-pair losses (0 off the pairs).

  Returns:
    The loss: a scalar, or the ``[..., L, L]`` pair losses (0 off the pairs) with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([1.0, 0.0]); t = jnp.ones(2)
  >>> round(float(pairwise_debiasing_loss(s, c, t_plus=t, t_minus=0.5 * t)), 4)  # 2 log 2
  1.3863
  """
  where = _utils.as_where(where, scores.shape)
  losses, pairs = _pair_losses(scores, clicks, where)
  tp = jnp.where(where, t_plus, 1.0)
  tm = jnp.where(where, t_minus, 1.0)
  log_w = -(jnp.log(jnp.maximum(tp, 1e-12))[..., :, None] + jnp.log(jnp.maximum(tm, 1e-12))[..., None, :])
  w = jax.lax.stop_gradient(jnp.exp(_utils.clip_log_weights(log_w, max_weight)))
  if weights is not None:
    w = w * jax.lax.stop_gradient(jnp.where(where, weights, 0.0))[..., :, None]
  loss = jnp.where(pairs, losses * w, 0.0)
  return _utils.reduce_loss(loss, pairs, reduce_fn)


def pairwise_debiasing_update(
  t_plus: jax.Array,
  t_minus: jax.Array,
  scores: jax.Array,
  clicks: jax.Array,
  positions: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  step_size: float = 0.05,
  p: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
  r"""Closed-form :math:`t^\pm` update with a running average (ULTRA ``PairDebias``).

  Args:
    t_plus, t_minus: ``[K]`` current ratios (position 1 = 1).
    scores: ``[..., L]`` logits (stop-gradiented).
    clicks: ``[..., L]`` clicks.
    positions: ``[..., L]`` 0-based positions (clipped to ``K-1``).
    where: ``[..., L]`` mask.
    step_size: :math:`\alpha` of :math:`t \leftarrow (1-\alpha)t + \alpha\hat t`.
    p: regularisation exponent.

  Returns:
    ``(t_plus, t_minus)``, ``[K]`` each. A position without pairs in the
    batch keeps its value; nothing changes when position 1 has none.

  >>> tp, tm = pairwise_debiasing_update(jnp.ones(2), jnp.ones(2), jnp.zeros(2),
  ...                                    jnp.array([0.0, 1.0]), jnp.arange(2), step_size=1.0)
  >>> [float(x) for x in tp], [float(x) for x in tm]
  ([1.0, 1.0], [1.0, 1.0])
  """
  where = _utils.as_where(where, scores.shape)
  k = t_plus.shape[-1]
  pos = jnp.clip(positions, 0, k - 1)
  losses, pairs = _pair_losses(jax.lax.stop_gradient(scores), clicks, where)
  tp_items = jnp.take(t_plus, pos)
  tm_items = jnp.take(t_minus, pos)
  # Sum over j of l_ij / t-_j (per clicked item i), and over i of l_ij / t+_i (per unclicked j).
  plus_items = jnp.sum(losses / tm_items[..., None, :], axis=-1)
  minus_items = jnp.sum(losses / tp_items[..., :, None], axis=-2)
  n_plus = _utils.per_position_sum(jnp.sum(pairs, axis=-1).astype(losses.dtype), pos, k, where)
  n_minus = _utils.per_position_sum(jnp.sum(pairs, axis=-2).astype(losses.dtype), pos, k, where)
  plus = _utils.per_position_sum(plus_items, pos, k, where)
  minus = _utils.per_position_sum(minus_items, pos, k, where)

  def update(t, mass, n):
    ok = (n > 0) & (mass > 0) & (mass[0] > 0)
    ratio = jnp.where(ok, mass / jnp.where(mass[0] > 0, mass[0], 1.0), 1.0)
    target = jnp.where(ok, ratio, 1.0) ** (1.0 / (p + 1.0))
    return jnp.where(ok, (1.0 - step_size) * t + step_size * target, t)

  return (jax.lax.stop_gradient(update(t_plus, plus, n_plus)), jax.lax.stop_gradient(update(t_minus, minus, n_minus)))


class PairwiseDebiasingState(NamedTuple):
  """State of :func:`pairwise_debiasing_estimator`: the bias ratios :math:`t^+`, :math:`t^-`, ``[K]`` each."""

  t_plus: jax.Array
  t_minus: jax.Array


def pairwise_debiasing_estimator(num_positions: int, *, step_size: float = 0.05, p: float = 1.0) -> Estimator:
  r"""PairD's closed-form bias-ratio update as an ``(init, update)`` pair (Hu et al., WWW'19, Eqs. 12-13).

  ``init()`` gives :math:`t^\pm_k = 1`; ``update(state, scores, clicks, *,
  positions, where=None)`` applies :func:`pairwise_debiasing_update` (the
  running average of the :math:`(p+1)`-th roots of the position-normalised
  pair-loss sums, see the module docstring) at the current scores (stop-gradient).

  Args:
    num_positions: ``K``.
    step_size: :math:`\alpha` of :math:`t \leftarrow (1-\alpha)t + \alpha\hat t`.
    p: regularisation exponent (ULTRA ``regulation_p``).

  Returns:
    An :class:`~ultr_jax.losses.Estimator` with state :class:`PairwiseDebiasingState`.

  >>> est = pairwise_debiasing_estimator(2, step_size=1.0)
  >>> state = est.update(est.init(), jnp.zeros(2), jnp.array([0.0, 1.0]), positions=jnp.arange(2))
  >>> [float(x) for x in state.t_plus], [float(x) for x in state.t_minus]
  ([1.0, 1.0], [1.0, 1.0])
  """

  def init() -> PairwiseDebiasingState:
    ones = jnp.ones((int(num_positions),), jnp.float32)
    return PairwiseDebiasingState(ones, ones)

  def update(state: PairwiseDebiasingState, scores, clicks, *, positions, where=None) -> PairwiseDebiasingState:
    t_plus, t_minus = pairwise_debiasing_update(
      state.t_plus, state.t_minus, scores, clicks, positions, where=where, step_size=step_size, p=p
    )
    return PairwiseDebiasingState(t_plus, t_minus)

  return Estimator(init=init, update=update)
