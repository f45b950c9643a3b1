r"""Stochastic rankings and team-draft multileaving for online learning to rank.

The online methods (:mod:`ultr_jax.train.online`) show each query a ranking
drawn from the current model and learn from the clicks on it:

* :func:`plackett_luce_sample` draws a ranking from the Plackett-Luce
  distribution of the scores (the Gumbel-max trick, one sort);
  :func:`plackett_luce_log_prob` is its log-probability (PDGD, Oosterhuis &
  de Rijke CIKM'18, Eq. 2);
* :func:`team_draft_multileave` merges the rankings of ``n`` rankers into one
  displayed list, each item credited to the ranker ("team") that placed it
  (team-draft interleaving, Radlinski et al. CIKM'08, for ``n = 2``; team-draft
  multileaving, Schuth et al. CIKM'14, for ``n > 2``);
  :func:`multileave_credit` counts each team's clicks.

Rankings are returned as 0-based ``positions`` per item, the layout every
click model takes (``positions=``); masked items come after every valid one.
"""

import math
from typing import Optional

import jax
import jax.numpy as jnp
import rax

from ultr_jax._numerics import as_float
from ultr_jax.types import Array, PRNGKey

__all__ = ["plackett_luce_sample", "plackett_luce_log_prob", "team_draft_multileave", "multileave_credit"]


def _mask(scores, where):
  return jnp.ones(scores.shape, bool) if where is None else jnp.broadcast_to(where, scores.shape)


def plackett_luce_sample(key: PRNGKey, scores: Array, *, where: Optional[Array] = None) -> Array:
  r"""Draws a ranking from the Plackett-Luce model of ``scores``.

  .. math::
      P(R \mid f) = \prod_{t=1}^{|R|} \frac{e^{f(R_t)}}{\sum_{j \ge t} e^{f(R_j)}}

  sampled as the order of ``scores + Gumbel(0, 1)`` noise (Gumbel-max trick).

  Args:
    key: PRNG key.
    scores: ``[..., L]`` log-weights :math:`f`.
    where: ``bool[..., L]``; masked items are placed after every valid one.

  Returns:
    ``int32[..., L]`` 0-based position of each item.

  >>> pos = plackett_luce_sample(jax.random.key(0), jnp.array([50.0, 0.0, -50.0]))
  >>> print(pos)
  [0 1 2]
  """
  scores = as_float(scores)
  noisy = scores + jax.random.gumbel(key, scores.shape, scores.dtype)
  return (rax.utils.ranks(noisy, where=_mask(scores, where)) - 1).astype(jnp.int32)


def plackett_luce_log_prob(scores: Array, positions: Array, *, where: Optional[Array] = None,
                           top_k: Optional[int] = None) -> Array:
  r"""Log-probability of a ranking (its top ``k``) under the Plackett-Luce model.

  .. math::
      \log P(R_{1..k} \mid f) = \sum_{t=1}^{k} \Bigl( f(R_t) - \log \sum_{j \ge t} e^{f(R_j)} \Bigr)

  where the sums run over valid items only.

  Args:
    scores: ``[..., L]`` log-weights.
    positions: ``int[..., L]`` 0-based positions (a permutation per list,
      masked items last, as :func:`plackett_luce_sample` returns).
    where: ``bool[..., L]``.
    top_k: score only the first ``k`` positions (default: all).

  Returns:
    ``[...]`` in the scores' dtype.

  >>> lp = plackett_luce_log_prob(jnp.zeros(3), jnp.array([2, 0, 1]))
  >>> print(round(float(jnp.exp(lp)), 6))  # 1/3! for equal scores
  0.166667
  """
  scores = as_float(scores)
  where = _mask(scores, where)
  order = jnp.argsort(positions, axis=-1)
  s = jnp.take_along_axis(jnp.where(where, scores, -jnp.inf), order, axis=-1)
  valid = jnp.take_along_axis(where, order, axis=-1)
  if top_k is not None:
    valid = valid & (jnp.arange(s.shape[-1]) < top_k)
  suffix = jax.lax.cumlogsumexp(s, axis=s.ndim - 1, reverse=True)
  return jnp.sum(jnp.where(valid, s - jnp.where(valid, suffix, 0.0), 0.0), axis=-1)


def _multileave_one(key, scores, where):
  """Team-draft multileaving of one list: ``scores [n, L]``, ``where [L]``."""
  n, size = scores.shape
  # Each team's ranking as item indices, masked items last (stable for ties).
  orders = jnp.argsort(jnp.where(where, -scores, jnp.inf), axis=-1, stable=True)
  order_valid = where[orders]
  tie_break = jax.random.uniform(key, (size, n))
  num_valid = jnp.sum(where)

  def pick(carry, inputs):
    taken, counts = carry
    slot, noise = inputs
    # The team with the fewest picks goes next, ties at random: within a round
    # every team picks once, in a uniformly random order (Schuth et al. 2014).
    team = jnp.argmin(counts + noise)
    free = ~taken[orders[team]] & order_valid[team]
    doc = orders[team, jnp.argmax(free)]
    active = slot < num_valid
    taken = taken.at[doc].set(taken[doc] | active)
    counts = counts.at[team].add(active.astype(counts.dtype))
    return (taken, counts), (doc, jnp.where(active, team, -1))

  init = (jnp.zeros(size, bool), jnp.zeros(n, jnp.float32))
  _, (docs, teams) = jax.lax.scan(pick, init, (jnp.arange(size), tie_break))
  slots = jnp.arange(size, dtype=jnp.int32)
  active = slots < num_valid
  # Masked items fill the slots after the valid ones, in array order.
  rest = jnp.argsort(~where, stable=True)  # valid first, then masked
  docs = jnp.where(active, docs, rest)
  positions = jnp.zeros(size, jnp.int32).at[docs].set(slots)
  team_of = jnp.full(size, -1, jnp.int32).at[docs].set(jnp.where(active, teams, -1))
  return positions, team_of


def team_draft_multileave(key: PRNGKey, scores: Array, *, where: Optional[Array] = None) -> tuple[Array, Array]:
  r"""Team-draft multileaving of ``n`` rankers' rankings into one displayed list.

  In every round each ranker (team) adds, in a uniformly random order, its
  highest-ranked item not yet in the list (Schuth et al. CIKM'14; for
  ``n = 2`` this is team-draft interleaving, Radlinski et al. CIKM'08). Each
  item is credited to the team that placed it; :func:`multileave_credit`
  turns clicks into per-team credit.

  Args:
    key: PRNG key (the order of the teams in each round).
    scores: ``[..., n, L]``, the ``n`` rankers' scores of the same ``L`` items
      (higher ranks first; ties keep array order).
    where: ``bool[..., L]``.

  Returns:
    ``(positions, teams)``: ``int32[..., L]`` 0-based displayed position of
    each item (masked items after the valid ones) and the team that placed
    it (-1 at padding).

  >>> scores = jnp.array([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])  # opposite rankings
  >>> positions, teams = team_draft_multileave(jax.random.key(0), scores)
  >>> sorted(teams.tolist()) in ([0, 0, 1], [0, 1, 1])  # teams alternate
  True
  """
  scores = as_float(scores)
  n, size = scores.shape[-2:]
  batch = scores.shape[:-2]
  where = jnp.ones(batch + (size,), bool) if where is None else jnp.broadcast_to(where, batch + (size,))
  flat = math.prod(batch)
  keys = jax.random.split(key, flat)
  positions, teams = jax.vmap(_multileave_one)(keys, scores.reshape(flat, n, size), where.reshape(flat, size))
  return positions.reshape(batch + (size,)), teams.reshape(batch + (size,))


def multileave_credit(clicks: Array, teams: Array, *, num_teams: int, where: Optional[Array] = None) -> Array:
  r"""Clicks credited to each team of a multileaved list.

  .. math::  \mathrm{credit}_j = \sum_i c_i\,\mathbb{1}[\mathrm{team}_i = j]

  Args:
    clicks: ``[..., L]`` clicks.
    teams: ``int[..., L]`` from :func:`team_draft_multileave` (-1 counts for nobody).
    num_teams: ``n``.
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., n]``.

  >>> print(multileave_credit(jnp.array([1.0, 0.0, 1.0]), jnp.array([0, 1, 0]), num_teams=2))
  [2. 0.]
  """
  clicks = jnp.asarray(clicks, jnp.float32)
  if where is not None:
    clicks = jnp.where(where, clicks, 0.0)
  one_hot = jax.nn.one_hot(teams, num_teams, dtype=jnp.float32)  # -1 -> all zeros
  return jnp.einsum("...l,...ln->...n", clicks, one_hot)
