"""Private helpers shared by the baseline ULTR losses (not public API)."""

from typing import Optional

import jax
import jax.numpy as jnp
import rax


def as_where(where: Optional[jax.Array], shape) -> jax.Array:
  """``where`` as a bool array of ``shape`` (all True when None)."""
  if where is None:
    return jnp.ones(shape, bool)
  return jnp.broadcast_to(jnp.asarray(where).astype(bool), shape)


def reduce_items(loss: jax.Array, where: jax.Array, reduce_fn) -> jax.Array:
  """Pointwise reduction with rax's ``safe_reduce`` semantics (masked -> 0)."""
  loss = jnp.where(where, loss, 0.0)
  return rax.utils.safe_reduce(loss, where=where, reduce_fn=reduce_fn)


def target_bce(scores: jax.Array, target: jax.Array, where: jax.Array, reduce_fn) -> jax.Array:
  r"""Sigmoid cross-entropy against a real-valued target :math:`t` (linear in it, so unbiased targets stay unbiased).

  :math:`-[t \log\sigma(s) + (1 - t)\log\sigma(-s)]` per item, reduced like :func:`reduce_items`; ``t`` may
  leave [0, 1] (an IPS or affine estimate of relevance).
  """
  loss = -(target * jax.nn.log_sigmoid(scores) + (1.0 - target) * jax.nn.log_sigmoid(-scores))
  return reduce_items(loss, where, reduce_fn)


def clip_log_weights(log_w: jax.Array, max_weight: Optional[float]) -> jax.Array:
  """Clips log-weights at ``log(max_weight)`` (no clipping when None)."""
  if max_weight is None:
    return log_w
  if max_weight <= 0:
    raise ValueError(f"max_weight must be positive, got {max_weight}")
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
  ``reduce_fn=jnp.mean`` divides the sum by :math:`\sum m_{ij}` (a mean over
  pair records); None returns the ``[..., L, L]`` pair losses; any other
  ``reduce_fn`` reduces them.
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
  if reduce_fn is None:
    return pair
  if reduce_fn is jnp.mean:
    total = jnp.sum(mass)
    return jnp.sum(pair) / jnp.where(total > 0, total, 1.0)
  return reduce_fn(pair)
