r"""Shared click samplers: the building blocks the click models compose (loop-free or one ``lax.scan``)."""

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation import probabilities as P  # noqa: F401 (the doctests')
from ultr_jax.types import Array, PRNGKey

__all__ = ["sample_clicks", "sample_dcm_clicks", "sample_chain_clicks", "sample_ubm_clicks"]


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


def sample_dcm_clicks(
  key: PRNGKey,
  attraction: Array,
  *,
  continuation: Array | float = 0.0,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
) -> Array:
  r"""One DCM / cascade session per list, in displayed (array) order.

  The user scans down the list; at an examined item they click with
  probability :math:`r_i` and after a click continue with probability
  :math:`\lambda_i` (cascade: :math:`\lambda = 0`). With attraction draws
  :math:`A_i \sim \mathrm{Bern}(r_i)` and continuation draws
  :math:`V_i \sim \mathrm{Bern}(\lambda_i)`, drawn for every item at once,

  .. math::
      E_i = \mathbb{1}\Bigl[\sum_{j<i} A_j (1 - V_j) = 0\Bigr]
          = \mathbb{1}[i \le \min\{j: A_j (1 - V_j) = 1\}], \qquad C_i = E_i A_i

  which is exact (the user stops at the first click without continuation)
  and needs one ``argmax`` reduction instead of a loop over positions.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    continuation: :math:`\lambda`, scalar or ``[..., L]``.
    where: ``bool[..., L]`` displayed items (masked items are skipped).
    num_sessions: if set, a leading sessions axis.

  Returns:
    ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

  >>> c = sample_dcm_clicks(jax.random.key(0), jnp.ones(3), num_sessions=5)
  >>> print(c.sum(0))
  [5. 0. 0.]
  """
  r = jnp.asarray(attraction, jnp.float32)
  shape = r.shape if num_sessions is None else (num_sessions,) + r.shape
  k_a, k_v = jax.random.split(key)
  attracted = jax.random.uniform(k_a, shape) < r
  if where is not None:
    attracted = attracted & where
  if isinstance(continuation, (int, float)) and continuation == 0:
    stop = attracted
  else:
    stop = attracted & ~(jax.random.uniform(k_v, shape) < jnp.asarray(continuation, jnp.float32))
  # The user leaves at the first stop: clicks are the attracted items up to and
  # including it. argmax finds it in one reduction (cheaper than a cumsum,
  # which XLA lowers to a reduce-window on CPU).
  list_size = r.shape[-1]
  first_stop = jnp.where(jnp.any(stop, axis=-1), jnp.argmax(stop, axis=-1), list_size)
  return (attracted & (jnp.arange(list_size) <= first_stop[..., None])).astype(jnp.float32)


def sample_chain_clicks(
  key: PRNGKey,
  attraction: Array,
  *,
  continue_no_click: Array | float,
  continue_click: Array | float,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
) -> Array:
  r"""One click-chain session per list (DBN, CCM), in displayed (array) order.

  The user scans down the list; an examined item is clicked when attractive
  (:math:`A_i \sim \mathrm{Bern}(r_i)`), and the user goes on with
  probability :math:`c^1_i` after a click, :math:`c^0_i` without one. With
  every draw made at once (:math:`U_i \sim U(0, 1)`), the stop event is
  :math:`T_i = \mathbb{1}[U_i \ge c^{A_i}_i]` and

  .. math::
      E_i = \mathbb{1}\Bigl[\sum_{j<i} T_j = 0\Bigr], \qquad C_i = E_i A_i,

  exact and loop-free, as :func:`sample_dcm_clicks`.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    continue_no_click, continue_click: :math:`c^0, c^1`, scalars or
      ``[..., L]``.
    where: ``bool[..., L]`` displayed items (masked items are skipped).
    num_sessions: if set, a leading sessions axis.

  Returns:
    ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

  >>> c = sample_chain_clicks(jax.random.key(0), jnp.ones(3), continue_no_click=1.0,
  ...                         continue_click=0.0, num_sessions=4)
  >>> print(c.sum(0))  # the cascade: everyone clicks the first item and leaves
  [4. 0. 0.]
  """
  r = jnp.asarray(attraction, jnp.float32)
  shape = r.shape if num_sessions is None else (num_sessions,) + r.shape
  k_a, k_u = jax.random.split(key)
  attracted = jax.random.uniform(k_a, shape) < r
  cont = jnp.where(attracted, jnp.asarray(continue_click, jnp.float32), jnp.asarray(continue_no_click, jnp.float32))
  stop = jax.random.uniform(k_u, shape) >= cont
  if where is not None:
    attracted = attracted & where
    stop = stop & where
  list_size = r.shape[-1]
  first_stop = jnp.where(jnp.any(stop, axis=-1), jnp.argmax(stop, axis=-1), list_size)
  return (attracted & (jnp.arange(list_size) <= first_stop[..., None])).astype(jnp.float32)


def sample_ubm_clicks(
  key: PRNGKey,
  attraction: Array,
  gamma: Array,
  *,
  ranks: Optional[Array] = None,
  where: Optional[Array] = None,
  num_sessions: Optional[int] = None,
) -> Array:
  r"""User browsing model sessions (Dupret & Piwowarski SIGIR'08), items in displayed order.

  The user scans down the list; item ``j`` at rank :math:`r_j` is examined
  with probability :math:`\gamma[r_j, l]`, where ``l`` is the state of the
  last click (0 = none, ``i + 1`` = rank ``i``), and clicked with probability
  :math:`a_j` once examined. One ``lax.scan`` step per displayed item carries
  the last-click state of every session and list; the uniforms are drawn at
  once.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    gamma: ``[K, K + 1]`` examination table
      (:func:`~ultr_jax.simulation.ubm_gamma`).
    ranks: ``int[..., L]`` 0-based ranks (default ``arange(L)``).
    where: ``bool[..., L]`` displayed items (masked items are skipped).
    num_sessions: if set, a leading sessions axis.

  Returns:
    ``float32[..., L]`` clicks (``[S, ..., L]`` with ``num_sessions``).

  >>> g = jnp.asarray(P.ubm_gamma(2))
  >>> c = sample_ubm_clicks(jax.random.key(0), jnp.ones(2), g, num_sessions=20000)
  >>> print(np.asarray(c.mean(0)).round(2))  # 0.68, then 0.32 * 0.61 + 0.68 * 0.68 = 0.6576
  [0.68 0.66]
  """
  a = jnp.asarray(attraction, jnp.float32)
  gamma = jnp.asarray(gamma, jnp.float32)
  shape = a.shape if num_sessions is None else (num_sessions,) + a.shape
  length = a.shape[-1]
  where = jnp.ones(a.shape, bool) if where is None else jnp.asarray(where, bool)
  ranks = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) if ranks is None else jnp.asarray(ranks), a.shape)
  u = jax.random.uniform(key, shape)
  k, s = gamma.shape[0], gamma.shape[1]

  def step(last, x):
    u_j, a_j, shown_j, r_j = x
    exam = gamma[jnp.clip(r_j, 0, k - 1), jnp.clip(last, 0, s - 1)]
    click = shown_j & (u_j < exam * a_j)
    return jnp.where(click, r_j + 1, last), click

  move = lambda x: jnp.moveaxis(jnp.broadcast_to(x, shape), -1, 0)
  _, clicks = jax.lax.scan(step, jnp.zeros(shape[:-1], jnp.int32), (move(u), move(a), move(where), move(ranks)))
  return jnp.moveaxis(clicks, 0, -1).astype(jnp.float32)
