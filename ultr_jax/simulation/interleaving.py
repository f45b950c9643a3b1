r"""Stochastic rankings, team-draft and probabilistic multileaving for online learning to rank.

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
  :func:`multileave_credit` counts each team's clicks;
* :func:`probabilistic_multileave` builds the list from the rankers' soft
  rank distributions :math:`P_j(d) \propto r_j(d)^{-\tau}` instead
  (probabilistic interleaving, Hofmann et al. CIKM'11; probabilistic
  multileave, Schuth et al. SIGIR'15), and
  :func:`probabilistic_multileave_assignment` gives, for each displayed item,
  the posterior probability that each ranker placed it;
* :func:`multileave_preferences` turns clicks and (one-hot or posterior)
  assignments into the expected pairwise outcome
  :math:`\mathbb{E}[\operatorname{sign}(C_x - C_y)]`, exactly rather than by
  sampling assignments.

Rankings are returned as 0-based ``positions`` per item, the layout every
click model takes (``positions=``); masked items come after every valid one.
"""

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import rax

from ultr_jax._numerics import as_float
from ultr_jax.types import Array, PRNGKey

__all__ = [
  "plackett_luce_sample",
  "plackett_luce_log_prob",
  "team_draft_multileave",
  "multileave_credit",
  "probabilistic_multileave",
  "probabilistic_multileave_assignment",
  "multileave_preferences",
]


def _mask(scores, where):
  return jnp.ones(scores.shape, bool) if where is None else jnp.broadcast_to(where, scores.shape)


def _batched_where(scores, where):
  """``where`` as ``bool[..., L]`` for ``scores [..., n, L]``."""
  shape = scores.shape[:-2] + scores.shape[-1:]
  return jnp.ones(shape, bool) if where is None else jnp.broadcast_to(where, shape)


def _per_list(one, key, scores, where):
  """``one(key, scores [n, L], where [L]) -> arrays [L]``, vmapped over the leading dims of ``scores [..., n, L]``."""
  n, size = scores.shape[-2:]
  batch = scores.shape[:-2]
  flat = math.prod(batch)
  out = jax.vmap(one)(
    jax.random.split(key, flat), scores.reshape(flat, n, size), _batched_where(scores, where).reshape(flat, size)
  )
  return jax.tree.map(lambda a: a.reshape(batch + (size,)), out)


def _fill_positions(docs, where):
  """Displayed positions from the item drawn at each slot; padding fills the slots after the valid items."""
  size = docs.shape[-1]
  slots = jnp.arange(size, dtype=jnp.int32)
  active = slots < jnp.sum(where)
  docs = jnp.where(active, docs, jnp.argsort(~where, stable=True))  # valid first, then masked, in array order
  return jnp.zeros(size, jnp.int32).at[docs].set(slots), docs, active


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


def plackett_luce_log_prob(
  scores: Array, positions: Array, *, where: Optional[Array] = None, top_k: Optional[int] = None
) -> Array:
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
  positions, docs, active = _fill_positions(docs, where)
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
  return _per_list(_multileave_one, key, as_float(scores), where)


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


def _rank_weights(scores, where, tau):
  r""":math:`r_j(d)^{-\tau}` for ``scores [..., n, L]`` and ``where [..., 1, L]``; 0 at padding.

  The weights lie in :math:`[L^{-\tau}, 1]`, so plain sums of them neither
  overflow nor lose the smallest while :math:`\tau \ln L \le 80`.
  """
  size = scores.shape[-1]
  if tau <= 0 or tau * math.log(max(size, 2)) > 80.0:
    raise ValueError(
      f"tau must be > 0 with tau * ln(list size) <= 80 (r^-tau stays a normal float); got tau={tau} "
      f"for lists of {size} items"
    )
  ranks = rax.utils.ranks(scores, where=jnp.broadcast_to(where, scores.shape))
  return jnp.where(where, ranks.astype(scores.dtype) ** -tau, 0.0)


def _probabilistic_one(key, scores, where, tau):
  """Probabilistic multileaving of one list: ``scores [n, L]``, ``where [L]``."""
  n, size = scores.shape
  log_w = jnp.log(_rank_weights(scores, where[None], tau))  # -inf at padding
  k_team, k_doc = jax.random.split(key)
  teams = jax.random.randint(k_team, (size,), 0, n)
  gumbel = jax.random.gumbel(k_doc, (size, size), scores.dtype)

  def pick(taken, inputs):
    team, noise = inputs
    # The slot's ranker samples from its distribution over the items not yet shown (Gumbel-max).
    doc = jnp.argmax(jnp.where(taken, -jnp.inf, log_w[team]) + noise)
    return taken.at[doc].set(True), doc

  _, docs = jax.lax.scan(pick, ~where, (teams, gumbel))
  return _fill_positions(docs, where)[0]


def probabilistic_multileave(key: PRNGKey, scores: Array, *, where: Optional[Array] = None, tau: float = 3.0) -> Array:
  r"""Probabilistic multileaving of ``n`` rankers' rankings into one displayed list.

  Ranker :math:`j` puts a soft distribution over the items from its ranks
  :math:`r_j(d)` (1-based, among the valid items). Each slot draws a ranker
  uniformly at random, and that ranker samples an item not shown yet:

  .. math::
      P_j(d \mid \text{shown}) = \frac{r_j(d)^{-\tau}}{\sum_{d' \notin \text{shown}} r_j(d')^{-\tau}}

  (probabilistic interleaving, Hofmann, Whiteson & de Rijke CIKM'11, for
  ``n = 2``; probabilistic multileave, Schuth et al. SIGIR'15). Which ranker
  filled a slot is not kept: the clicks are credited through the posterior
  of :func:`probabilistic_multileave_assignment`, which every ranker's
  distribution covers, so the comparison can be re-done for other rankers.

  Args:
    key: PRNG key.
    scores: ``[..., n, L]``, the rankers' scores of the same ``L`` items
      (ties are ranked in array order).
    where: ``bool[..., L]``.
    tau: the softmax's steepness; 3 in the papers. ``tau * ln(L)`` must not
      exceed 80 (a ``ValueError`` otherwise), so that every weight is a normal
      float32.

  Returns:
    ``int32[..., L]`` 0-based displayed position of each item (padding after
    the valid items).

  >>> scores = jnp.array([[9.0, 0.0, -9.0], [9.0, 0.0, -9.0]])  # two rankers that agree
  >>> positions = probabilistic_multileave(jax.random.key(0), scores, tau=30.0)
  >>> print(positions)  # a steep tau follows their common ranking
  [0 1 2]
  """
  return _per_list(functools.partial(_probabilistic_one, tau=float(tau)), key, as_float(scores), where)


def probabilistic_multileave_assignment(
  scores: Array, positions: Array, *, where: Optional[Array] = None, tau: float = 3.0
) -> Array:
  r"""Posterior probability that ranker :math:`j` placed each item of a probabilistic multileave.

  Given the displayed list, the slots' rankers are independent (the shown
  set before each slot is fixed by the list), so for the item :math:`d_i`
  at slot :math:`i`

  .. math::
      P(a_i = j \mid \text{list}) = \frac{P_j(d_i \mid d_{<i})}{\sum_{j'} P_{j'}(d_i \mid d_{<i})},
      \qquad
      P_j(d_i \mid d_{<i}) = \frac{r_j(d_i)^{-\tau}}{\sum_{t \ge i} r_j(d_t)^{-\tau}},

  the denominators a reverse ``cumsum`` over the displayed order (no
  subtraction; the weights are bounded, see ``tau``). The rankers need not be
  those that built the list.

  Args:
    scores: ``[..., n, L]`` as for :func:`probabilistic_multileave`.
    positions: ``int[..., L]`` 0-based displayed positions (a permutation per
      list, padding last).
    where: ``bool[..., L]``.
    tau: as in :func:`probabilistic_multileave`.

  Returns:
    ``[..., n, L]`` probabilities, summing to 1 over rankers at every valid
    item; 0 at padding.

  >>> scores = jnp.array([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]])  # opposite rankers
  >>> post = probabilistic_multileave_assignment(scores, jnp.array([0, 1, 2]))
  >>> [round(float(p), 3) for p in post[:, 0]]  # ranks 1 and 3 of the item shown first: 27 to 1
  [0.964, 0.036]
  """
  scores = as_float(scores)
  where = _batched_where(scores, where)[..., None, :]
  weights = _rank_weights(scores, where, float(tau))  # [..., n, L]
  positions = jnp.broadcast_to(jnp.asarray(positions)[..., None, :], weights.shape)
  shown = jnp.take_along_axis(weights, jnp.argsort(positions, axis=-1), axis=-1)  # in displayed order
  remaining = jnp.flip(jnp.cumsum(jnp.flip(shown, -1), axis=-1), -1)  # >= the slot's own weight
  slot = jnp.take_along_axis(shown / jnp.where(remaining > 0, remaining, 1.0), positions, axis=-1)
  return slot / jnp.where(where, jnp.sum(slot, axis=-2, keepdims=True), 1.0)


def multileave_preferences(
  clicks: Array, assignment: Array, *, where: Optional[Array] = None, against: Optional[int] = None
) -> Array:
  r"""Expected pairwise outcome of a multileaved comparison.

  Each clicked item is credited to one ranker, :math:`a_i \sim` ``assignment[..., :, i]``,
  independently; with :math:`C_j = \sum_i c_i\,\mathbb{1}[a_i = j]` the
  outcome is

  .. math::  P_{xy} = \mathbb{E}\bigl[\operatorname{sign}(C_x - C_y)\bigr] \in [-1, 1],

  > 0 when ranker :math:`x` beats :math:`y`. It is computed exactly: the
  distribution of :math:`C_x - C_y` (support :math:`-L..L`) is built by one
  ``lax.scan`` over the items, for every pair at once, where Schuth et al.
  (SIGIR'15) sample assignments. With one-hot assignments (team-draft's
  teams) it is :math:`\operatorname{sign}` of the credit difference of
  :func:`multileave_credit`.

  Args:
    clicks: ``[..., L]`` clicks (0/1).
    assignment: ``[..., n, L]``, e.g. :func:`probabilistic_multileave_assignment`
      or ``jax.nn.one_hot(teams, n, axis=-2)``.
    where: ``bool[..., L]``.
    against: a ranker :math:`y`; then only the column :math:`P_{\cdot y}`
      is computed (``n`` times less work: MGD compares its candidates with
      the current ranker only).

  Returns:
    ``[..., n, n]``, antisymmetric with a zero diagonal; ``[..., n]`` with ``against``.

  >>> assignment = jnp.array([[1.0, 0.5], [0.0, 0.5]])  # item 0 surely ranker 0's, item 1 a coin flip
  >>> print(multileave_preferences(jnp.array([1.0, 1.0]), assignment))  # ranker 0 wins 2-0 or ties 1-1
  [[ 0.   0.5]
   [-0.5  0. ]]
  """
  assignment = as_float(assignment)
  n, size = assignment.shape[-2:]
  clicks = jnp.asarray(clicks, assignment.dtype)
  if where is not None:
    clicks = jnp.where(where, clicks, 0.0)
  credit = jnp.moveaxis(assignment * clicks[..., None, :], -1, 0)  # [L, ..., n]
  if against is None:
    xs, ys = jnp.meshgrid(jnp.arange(n), jnp.arange(n), indexing="ij")
  else:
    xs, ys = jnp.arange(n), jnp.full(n, int(against))
  off = (xs != ys).astype(credit.dtype)
  up = credit[..., xs] * off  # [L, ..., pairs]: item i adds 1 to C_x - C_y
  down = credit[..., ys] * off  # ... or takes 1 away
  pad = [(0, 0)] * (up.ndim - 1)

  def add(dist, step):
    u, d = step
    raised = jnp.pad(dist, pad + [(1, 0)])[..., :-1]
    lowered = jnp.pad(dist, pad + [(0, 1)])[..., 1:]
    return (1.0 - u - d)[..., None] * dist + u[..., None] * raised + d[..., None] * lowered, None

  dist = jnp.zeros(up.shape[1:] + (2 * size + 1,), credit.dtype).at[..., size].set(1.0)
  dist, _ = jax.lax.scan(add, dist, (up, down))
  sign = jnp.sign(jnp.arange(-size, size + 1)).astype(credit.dtype)
  return dist @ sign
