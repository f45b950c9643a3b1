"""Private log-space numerics shared across layers (imports jax only, so every layer may use it)."""

import jax
import jax.numpy as jnp

__all__ = ["as_float", "log1mexp"]


def log1mexp(x: jax.Array, *, one_branch: bool = False) -> jax.Array:
  r""":math:`\log(1 - e^{x})` for :math:`x \le 0` (Mächler 2012), finite grads at 0 avoided by callers.

  ``one_branch=True`` computes ``log(-expm1(x))`` alone (no clamp, no select), as the click models' likelihoods
  do: exact near 0 (a click probability near 1, where ``log1p(-exp(x))`` cancels); below about -17 it gives 0
  for :math:`-e^x`, an absolute error under 5e-8 per term of a log-likelihood; without the second branch's
  select, a click-model fit's objective runs faster.

  >>> print(log1mexp(jnp.log(jnp.array([0.5, 0.9]))), log1mexp(jnp.log(0.5), one_branch=True))
  [-0.6931472 -2.302585 ] -0.6931472
  """
  if one_branch:
    return jnp.log(-jnp.expm1(x))
  x = jnp.minimum(x, 0.0)
  small = x > -jnp.log(2.0)
  safe_small = jnp.where(small, x, -1.0)
  safe_large = jnp.where(small, -1.0, x)
  return jnp.where(small, jnp.log(-jnp.expm1(safe_small)), jnp.log1p(-jnp.exp(safe_large)))


def as_float(x) -> jax.Array:
  """``x`` as an array of its own floating dtype (float64 stays float64 under x64), else float32."""
  x = jnp.asarray(x)
  return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)
