"""Private log-space numerics shared across layers (imports jax only, so every layer may use it)."""

import jax
import jax.numpy as jnp

__all__ = ["as_float", "log1mexp"]


def log1mexp(x: jax.Array) -> jax.Array:
  r""":math:`\log(1 - e^{x})` for :math:`x \le 0` (Mächler 2012), finite grads at 0 avoided by callers."""
  x = jnp.minimum(x, 0.0)
  small = x > -jnp.log(2.0)
  safe_small = jnp.where(small, x, -1.0)
  safe_large = jnp.where(small, -1.0, x)
  return jnp.where(small, jnp.log(-jnp.expm1(safe_small)), jnp.log1p(-jnp.exp(safe_large)))


def as_float(x) -> jax.Array:
  """``x`` as an array of its own floating dtype (float64 stays float64 under x64), else float32."""
  x = jnp.asarray(x)
  return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)
