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


def log1mexp(x: jax.Array) -> jax.Array:
  r""":math:`\log(1 - e^{x})` for :math:`x \le 0` (Mächler 2012), finite grads at 0 avoided by callers."""
  x = jnp.minimum(x, 0.0)
  small = x > -jnp.log(2.0)
  safe_small = jnp.where(small, x, -1.0)
  safe_large = jnp.where(small, -1.0, x)
  return jnp.where(small, jnp.log(-jnp.expm1(safe_small)), jnp.log1p(-jnp.exp(safe_large)))


def reduce_items(loss: jax.Array, where: jax.Array, reduce_fn) -> jax.Array:
  """Pointwise reduction with rax's ``safe_reduce`` semantics (masked -> 0)."""
  loss = jnp.where(where, loss, 0.0)
  return rax.utils.safe_reduce(loss, where=where, reduce_fn=reduce_fn)


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


def per_position_sum(values: jax.Array, positions: jax.Array, num_positions: int,
                     where: jax.Array) -> jax.Array:
  """Sum of ``values`` ``[..., L]`` per position over every leading dim -> ``[K]``."""
  oh = one_hot_positions(positions, num_positions, where)
  v = jnp.where(where, values, 0.0)
  return jnp.einsum("...l,...lk->k", v, oh)
