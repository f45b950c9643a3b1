r"""Node merging (Chen et al., ICML 2024, Section 4.2, Algorithm 3).

Every bias factor :math:`t` has a bias feature :math:`X_t` (the position
number; or ``[X_context, 10 p]`` for context-dependent bias). The merging
cost of two factors is

.. math::
    C(t_1, t_2) = \lVert X_{t_1} - X_{t_2} \rVert \quad (\text{Eq. 7}),

the merging cost of two components is the cheapest pair across them (Eq. 8),
and the merge set is the MST over components (``K - 1`` pairs; merging along
a cycle can make the click fit infeasible, Proposition 3). Merged factors
share one observation parameter: records' bias ids are remapped to a
canonical representative (smallest id of its merged group, union-find).
"""

import dataclasses

import numpy as np

from ultr_jax.graph.mst import UnionFind

__all__ = ["MergePlan", "merge_plan", "apply_merge"]


@dataclasses.dataclass(frozen=True)
class MergePlan:
  """``pairs[i] = (t_found, t_new)`` merged with cost ``costs[i]``;
  ``canonical[t]`` is the representative of factor ``t``."""

  pairs: list
  costs: list
  canonical: np.ndarray

  @property
  def total_cost(self) -> float:
    return float(sum(self.costs))


def merge_plan(bias_features, labels, present=None, *, start=None) -> MergePlan:
  r"""Algorithm 3 (NodeMerging): the minimum-cost ``K - 1`` merges (Prim).

  Prim's algorithm over components with edge weight
  :math:`\min_{t_A \in V_A, t_B \in V_B} \lVert X_{t_A} - X_{t_B}\rVert`,
  implemented incrementally over factors: ``best[t]`` is the distance from
  factor ``t`` to the found set, updated with the members of every newly
  found component, so the cost is ``O(T^2 d)`` time and ``O(T)`` memory (fine
  for tens of thousands of factors). Starts from the largest component (as
  the paper's code), ties by smallest id.

  Args:
    bias_features: ``float[T, d]`` (or ``[T]``) bias features :math:`X_t`.
    labels: ``int[T]`` component label of every factor
      (:func:`~ultr_jax.graph.factor_components`).
    present: optional ``bool[T]``; absent factors are not nodes.
    start: label of the first component (default: the largest).

  Returns:
    A :class:`MergePlan`.

  >>> plan = merge_plan(np.arange(10.), np.array([0] * 4 + [4] * 6))
  >>> print(plan.pairs, plan.canonical.tolist())
  [(4, 3)] [0, 1, 2, 3, 3, 5, 6, 7, 8, 9]
  """
  x = np.asarray(bias_features, np.float64)
  if x.ndim == 1:
    x = x[:, None]
  labels = np.asarray(labels)
  t_count = labels.shape[0]
  present = np.ones(t_count, bool) if present is None else np.asarray(present, bool)
  ids = np.flatnonzero(present)
  comp_labels, sizes = np.unique(labels[ids], return_counts=True)
  if start is None:
    start = comp_labels[np.argmax(sizes)]  # first max = smallest label
  members = {c: ids[labels[ids] == c] for c in comp_labels}
  found = ~present.copy()  # absent factors never get picked
  best = np.full(t_count, np.inf)
  partner = np.full(t_count, -1)

  def add(c):
    m = members[c]
    found[m] = True
    rest = np.flatnonzero(~found)
    if rest.size == 0:
      return
    # distances from the new members to every unfound factor, in chunks
    chunk = max(1, int(4e6 // (rest.size * x.shape[1])))
    for lo in range(0, m.size, chunk):
      mm = m[lo : lo + chunk]
      d = np.sqrt(((x[rest][:, None, :] - x[mm][None, :, :]) ** 2).sum(-1))
      j = np.argmin(d, axis=1)
      dmin = d[np.arange(rest.size), j]
      better = dmin < best[rest]
      best[rest[better]] = dmin[better]
      partner[rest[better]] = mm[j[better]]

  add(start)
  uf = UnionFind(t_count)
  pairs, costs = [], []
  for _ in range(len(comp_labels) - 1):
    cand = np.where(found, np.inf, best)
    t_new = int(np.argmin(cand))
    pairs.append((int(partner[t_new]), t_new))
    costs.append(float(best[t_new]))
    uf.union(int(partner[t_new]), t_new)
    add(labels[t_new])
  return MergePlan(pairs=pairs, costs=costs, canonical=uf.canonical())


def apply_merge(factor_ids, canonical) -> np.ndarray:
  r"""Remaps bias ids to their merge representative,
  :math:`t \mapsto \mathrm{canonical}(t)`, so merged factors share
  :math:`o'`.

  Args:
    factor_ids: ``int[...]`` bias factor ids.
    canonical: ``int[T]``: each factor's merge representative.

  Returns:
    ``int[...]`` the remapped factor ids.

  >>> apply_merge(np.array([[0, 4, 5]]), np.array([0, 1, 2, 3, 3, 5]))
  array([[0, 3, 5]], dtype=int32)
  """
  t = np.asarray(factor_ids)
  return np.asarray(canonical, np.int32)[np.maximum(t, 0)].astype(np.int32)
