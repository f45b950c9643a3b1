"""Private helpers shared by the ULTR losses (not public API): masks, the one reduction, weight clipping."""

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import rax
from ultr_jax.types import ReduceFn

#: Default cap of every inverse-propensity-style weight (``max_weight=None``): :math:`10^{8}`, i.e. propensities
#: (or propensity ratios) below :math:`10^{-8}` count as :math:`10^{-8}`. The expected-metrics runs never come near it
#: (their smallest oracle propensities are around :math:`10^{-3}`); it exists so that a propensity of
#: :math:`10^{-30}` or DLA weights at scores of :math:`\pm 10^{30}` give finite losses and gradients in float32.
#: Pass ``max_weight=math.inf`` to switch clipping off.
DEFAULT_MAX_WEIGHT = 1e8

#: Bound of the scores entering a squared residual or a probit link (CLD, Heckman): :math:`|s| \le 10^{15}`, so the
#: square (:math:`\le 10^{30}`) and :math:`\log\Phi` (:math:`\ge -5 \cdot 10^{29}`) stay finite in float32. No
#: trained model comes near it; beyond it the gradient is 0 rather than inf/NaN.
SCORE_BOUND = 1e15


def as_where(where: Optional[jax.Array], shape) -> jax.Array:
  """``where`` as a bool array of ``shape`` (all True when None)."""
  if where is None:
    return jnp.ones(shape, bool)
  return jnp.broadcast_to(jnp.asarray(where).astype(bool), shape)


_PROBE = (1.0, 3.0, 8.0)
_PROBE_WHERE = (True, True, False)


def _probe_is_mean(reduce_fn: ReduceFn) -> bool:
  try:
    with jax.ensure_compile_time_eval():
      value = reduce_fn(jnp.asarray(_PROBE, jnp.float32), where=jnp.asarray(_PROBE_WHERE))
    return bool(abs(float(value) - 2.0) < 1e-6)
  except Exception:  # a reduction that cannot take the probe is not a masked mean
    return False


_cached_is_mean = functools.lru_cache(maxsize=256)(_probe_is_mean)


def is_mean(reduce_fn: ReduceFn) -> bool:
  """Whether ``reduce_fn(a, where=...)`` is the masked mean, judged by what it computes (not by identity).

  ``jnp.mean``, ``functools.partial(jnp.mean)`` and ``lambda a, where: jnp.mean(a, where=where)`` all are; the
  probe (``[1, 3, 8]`` with the last masked gives 2) runs eagerly once per function, also under ``jit``.

  >>> is_mean(jnp.mean), is_mean(lambda a, where=None: jnp.mean(a, where=where)), is_mean(jnp.sum)
  (True, True, False)
  """
  try:
    return _cached_is_mean(reduce_fn)
  except TypeError:  # unhashable callable
    return _probe_is_mean(reduce_fn)


def reduce_loss(
  values: jax.Array, where: jax.Array, reduce_fn: Optional[ReduceFn], *, mass: Optional[jax.Array] = None
) -> jax.Array:
  r"""The one reduction of every loss: per-record values (items, lists or pairs) to the loss.

  ``values`` are the records' (already weighted) losses :math:`v_r`, ``where`` which records count.

  * ``reduce_fn=None``: the values, 0 where not counted (so ``jnp.sum`` of them is the ``jnp.sum`` loss);
  * a masked mean (:func:`is_mean`): without ``mass`` rax's ``safe_reduce`` mean over the counted records (a
    NaN-free all-masked mean is 0); with ``mass`` :math:`m_r` (record weights, pair mass, session counts) the
    mean per unit of mass :math:`\sum_r v_r / \sum_r m_r` (0 when no mass);
  * any other reduction (``jnp.sum``, ``jnp.max``, ...): ``reduce_fn(values, where=where)`` via rax's
    ``safe_reduce``.

  >>> v, w = jnp.array([2.0, 4.0, 9.0]), jnp.array([True, True, False])
  >>> [float(reduce_loss(v, w, f)) for f in (jnp.mean, jnp.sum)], float(reduce_loss(v, w, jnp.mean, mass=jnp.ones(3) * 4))
  ([3.0, 6.0], 0.75)
  """
  values = jnp.where(where, values, 0.0)
  if reduce_fn is None:
    return values
  if is_mean(reduce_fn):
    if mass is None:
      return rax.utils.safe_reduce(values, where=where, reduce_fn=jnp.mean)
    den = jnp.sum(jnp.where(where, mass, 0.0))
    return jnp.where(den > 0, jnp.sum(values) / jnp.where(den > 0, den, 1.0), 0.0)
  return rax.utils.safe_reduce(values, where=where, reduce_fn=reduce_fn)


def reduce_items(loss: jax.Array, where: jax.Array, reduce_fn) -> jax.Array:
  """Pointwise reduction with rax's ``safe_reduce`` semantics (masked -> 0): :func:`reduce_loss` without mass."""
  return reduce_loss(loss, where, reduce_fn)


def reduce_lists(per_list: jax.Array, where: jax.Array, reduce_fn) -> jax.Array:
  """Reduction of per-list losses ``[...]`` over the lists with a valid item (``where`` is ``[..., L]``)."""
  return reduce_loss(per_list, jnp.any(where, axis=-1), reduce_fn)


def bound_scores(scores: jax.Array) -> jax.Array:
  """``scores`` clipped to :data:`SCORE_BOUND` (identity on every realistic score)."""
  return jnp.clip(scores, -SCORE_BOUND, SCORE_BOUND)


def softmax_loss(scores, labels, where, weights, reduce_fn):
  """:func:`rax.softmax_loss` per list, reduced by :func:`reduce_lists` (same numbers as rax's own reduction)."""
  per_list = rax.softmax_loss(scores, labels, where=where, weights=weights, reduce_fn=None)
  return reduce_lists(per_list, where, reduce_fn)


def sigmoid_loss(scores, labels, where, weights, reduce_fn):
  """:func:`rax.pointwise_sigmoid_loss` per item, reduced by :func:`reduce_loss`."""
  per_item = rax.pointwise_sigmoid_loss(scores, labels, where=where, weights=weights, reduce_fn=None)
  return reduce_loss(per_item, where, reduce_fn)


def target_bce(
  scores: jax.Array, target: jax.Array, where: jax.Array, reduce_fn, weights: Optional[jax.Array] = None
) -> jax.Array:
  r"""Sigmoid cross-entropy against a real-valued target :math:`t` (linear in it, so unbiased targets stay unbiased).

  :math:`-[t \log\sigma(s) + (1 - t)\log\sigma(-s)]` per item, reduced like :func:`reduce_items`; ``t`` may
  leave [0, 1] (an IPS or affine estimate of relevance).
  """
  loss = -(target * jax.nn.log_sigmoid(scores) + (1.0 - target) * jax.nn.log_sigmoid(-scores))
  if weights is not None:
    loss = loss * weights
  return reduce_loss(loss, where, reduce_fn)


def clip_log_weights(log_w: jax.Array, max_weight: Optional[float]) -> jax.Array:
  """Clips log-weights at ``log(max_weight)`` (None: :data:`DEFAULT_MAX_WEIGHT`; ``math.inf``: no clipping)."""
  if max_weight is None:
    max_weight = DEFAULT_MAX_WEIGHT
  if max_weight <= 0:
    raise ValueError(f"max_weight must be positive, got {max_weight}")
  if math.isinf(max_weight):
    return log_w
  return jnp.minimum(log_w, jnp.log(max_weight))


def one_hot_positions(positions: jax.Array, num_positions: int, where: jax.Array) -> jax.Array:
  """``[..., L] -> [..., L, K]`` float one-hot of (clipped) positions, zero where masked."""
  pos = jnp.clip(positions, 0, num_positions - 1)
  return jax.nn.one_hot(pos, num_positions) * where[..., None]


def per_position_sum(values: jax.Array, positions: jax.Array, num_positions: int, where: jax.Array) -> jax.Array:
  """Sum of ``values`` ``[..., L]`` per position over every leading dim -> ``[K]``."""
  oh = one_hot_positions(positions, num_positions, where)
  v = jnp.where(where, values, 0.0)
  return jnp.einsum("...l,...lk->k", v, oh)


def click_pair_loss(
  scores: jax.Array,
  clicks: jax.Array,
  item_weights: jax.Array,
  where: jax.Array,
  weights: Optional[jax.Array],
  reduce_fn,
  lambdaweight_fn=None,
) -> jax.Array:
  r"""Pairwise logistic loss over (clicked i, unclicked j) pairs, weighted by the clicked item.

  Pair mass :math:`m_{ij} = v_i c_i (1 - c_j)` (``v = weights``, 1 when
  None; :math:`i \ne j`, both valid), per-pair loss
  :math:`m_{ij} u_i \lambda_{ij} \log(1 + e^{-(s_i - s_j)})` with ``u = item_weights``
  and :math:`\lambda` = ``lambdaweight_fn(scores, clicks, where=where)`` (a rax
  lambdaweight, e.g. ``losses.lambdarank_weights``; gradients stopped), or 1.
  A mean divides the sum by :math:`\sum m_{ij}` (a mean over pair records);
  None returns the ``[..., L, L]`` pair losses; any other ``reduce_fn``
  reduces the pairs with :math:`m_{ij} > 0` (:func:`reduce_loss`).
  """
  clicks = jnp.where(where, clicks, 0.0)
  v = jnp.ones_like(clicks) if weights is None else jnp.where(where, weights, 0.0)
  valid = where[..., :, None] & where[..., None, :] & ~jnp.eye(scores.shape[-1], dtype=bool)
  mass = jax.lax.stop_gradient(jnp.where(valid, (v * clicks)[..., :, None] * (1.0 - clicks)[..., None, :], 0.0))
  on = mass > 0
  diff = jnp.where(on, scores[..., :, None] - scores[..., None, :], 0.0)
  pair = jnp.where(on, mass * item_weights[..., :, None] * jax.nn.softplus(-diff), 0.0)
  if lambdaweight_fn is not None:
    lam = lambdaweight_fn(scores, clicks, where=where)  # rax gives the pairs flattened, [..., L * L]
    pair = pair * jax.lax.stop_gradient(jnp.reshape(lam, pair.shape))
  return reduce_loss(pair, on, reduce_fn, mass=mass)
