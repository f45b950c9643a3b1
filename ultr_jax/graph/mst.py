r"""Prim's minimum spanning tree over IG components (Algorithms 2 and 3).

Chen et al. (ICML 2024), Sections 4.1-4.2: to connect an IG with ``K``
components with minimum total cost, build the complete graph on the
components with edge weight = the cheapest intervention (or merge) between
them, and take its MST with Prim's algorithm. Every MST edge is one
intervention / merge, ``K - 1`` in all. (As printed, Algorithms 2 and 3 add
``G_j``, an already found component, to the found set; Prim's algorithm adds
``G_i``, the newly reached one, which is what this implements.)
"""

import numpy as np

__all__ = ["prim_mst", "UnionFind"]


def prim_mst(cost: np.ndarray, start: int = 0) -> list[tuple[int, int, float]]:
  r"""Prim's MST on a dense symmetric cost matrix ``[K, K]``.

  Starting from ``{start}``, repeatedly adds the cheapest edge
  :math:`(i, j)` with :math:`i` found and :math:`j` not (ties: smallest
  ``(i, j)`` in row-major order of the scan).

  Args:
    cost: ``[K, K]`` a dense symmetric cost matrix.
    start: the node the tree starts from.

  Returns:
    ``K - 1`` edges ``(found i, new j, cost)`` in the order they were added.

  >>> c = np.array([[0, 1, 4], [1, 0, 2], [4, 2, 0]], float)
  >>> prim_mst(c)
  [(0, 1, 1.0), (1, 2, 2.0)]
  """
  cost = np.asarray(cost, float)
  k = cost.shape[0]
  found = np.zeros(k, bool)
  found[start] = True
  best = cost[start].copy()
  parent = np.full(k, start)
  edges = []
  for _ in range(k - 1):
    cand = np.where(found, np.inf, best)
    j = int(np.argmin(cand))
    edges.append((int(parent[j]), j, float(best[j])))
    found[j] = True
    better = (cost[j] < best) & ~found
    best = np.where(better, cost[j], best)
    parent = np.where(better, j, parent)
  return edges


class UnionFind:
  """Disjoint sets whose representative is the smallest member.

  >>> uf = UnionFind(5); uf.union(4, 3); uf.union(3, 1)
  >>> [uf.find(i) for i in range(5)]
  [0, 1, 2, 1, 1]
  """

  def __init__(self, n: int):
    self.parent = list(range(n))

  def find(self, i: int) -> int:
    root = i
    while self.parent[root] != root:
      root = self.parent[root]
    while self.parent[i] != root:
      self.parent[i], i = root, self.parent[i]
    return root

  def union(self, a: int, b: int) -> None:
    ra, rb = self.find(a), self.find(b)
    if ra != rb:
      lo, hi = min(ra, rb), max(ra, rb)
      self.parent[hi] = lo

  def canonical(self) -> np.ndarray:
    return np.array([self.find(i) for i in range(len(self.parent))], np.int32)
