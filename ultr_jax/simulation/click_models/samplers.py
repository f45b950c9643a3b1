r"""The click sampler every model with independent clicks shares (a model's own sampler lives in its module)."""

from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.types import Array, PRNGKey

__all__ = ["sample_clicks"]


def sample_clicks(
  key: PRNGKey,
  click_prob: Array,
  *,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> Array:
  r"""Independent Bernoulli (or aggregated Binomial) clicks.

  .. math::
      C_i \sim \mathrm{Bernoulli}(p_i) \quad\text{or}\quad
      \mathrm{CTR}_i = \mathrm{Binomial}(N, p_i) / N

  Args:
    key: PRNG key.
    click_prob: ``[..., L]`` marginal click probabilities.
    where: ``bool[..., L]``; masked items never click.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, returns CTRs over that many impressions.

  Returns:
    ``float32[..., L]`` (``[S, ..., L]`` with ``num_sessions``).

  >>> c = sample_clicks(jax.random.key(0), jnp.full((4,), 0.5), num_sessions=20000)
  >>> print(round(float(c.mean()), 2))
  0.5
  """
  p = jnp.asarray(click_prob, jnp.float32)
  shape = p.shape if num_sessions is None else (num_sessions,) + p.shape
  if num_impressions is not None:
    c = jax.random.binomial(key, float(num_impressions), jnp.broadcast_to(p, shape), shape=shape)
    c = c.astype(jnp.float32) / float(num_impressions)
  else:
    c = (jax.random.uniform(key, shape) < p).astype(jnp.float32)
  if where is not None:
    c = jnp.where(where, c, 0.0)
  return c
