r"""Node intervention (Chen et al., ICML 2024, Section 4.1, Algorithm 2).

An intervention displays a document :math:`x`, seen at bias factor
:math:`t_1`, at a factor :math:`t_2` of another component; the new record
:math:`(x, t_2)` joins the two components. With finite clicks the choice
matters (Proposition 1); the cost of an intervention is

.. math::
    C(x, t_1, t_2) = \frac{1}{r(x)\,o(t_1)} + \frac{1}{r(x)\,o(t_2)} - 2
    \quad (\text{Eq. 3})

with estimates :math:`\hat r, \hat o` (in the paper, from a model trained
with node merging). Between components :math:`A` and :math:`B` the cheapest
move in either direction is taken (Eqs. 4-6); since :math:`C` decreases in
:math:`r(x)`, :math:`o(t_1)` and :math:`o(t_2)`, the best move from
:math:`A` to :math:`B` uses :math:`\hat r_{\max}(t) = \max_{x \in X_t}
\hat r(x)` and the target :math:`\arg\max_{t \in V_B} \hat o(t)`. Prim's
MST over components picks the ``K - 1`` cheapest interventions.

For position bias an intervention is materialised as in the paper's code: a
copy of a logged list with the documents at positions :math:`a` and
:math:`b` swapped is appended. (Section 4.1 adds one point :math:`(x^*, t^*)`; the code's swapped copy
of a whole list adds two swapped points and duplicates, and is what an online experiment can show.)
"""

import dataclasses
from typing import Optional

import numpy as np

from ultr_jax.data.dataset import RankingDataset
from ultr_jax.graph.mst import prim_mst

__all__ = [
  "Intervention",
  "intervention_cost",
  "intervention_plan",
  "random_intervention_plan",
  "apply_interventions",
]


@dataclasses.dataclass(frozen=True)
class Intervention:
  """Swap positions ``position_a`` and ``position_b`` of list ``query``
  (a row index); ``doc`` moves from ``position_a`` to ``position_b``."""

  query: int
  position_a: int
  position_b: int
  doc: int
  cost: float


def intervention_cost(r_x, o_t1, o_t2):
  r"""Eq. 3: :math:`C = 1/(r\,o_1) + 1/(r\,o_2) - 2` (variance of
  :math:`o'(t_1)/o(t_1) - o'(t_2)/o(t_2)` up to :math:`1/(N R)`,
  Proposition 1).

  Args:
    r_x: the relevance :math:`r` of the document to move.
    o_t1: the examination :math:`o_1` of its position.
    o_t2: the examination :math:`o_2` of the position it moves to.

  Returns:
    The cost :math:`C` (the broadcast shape of the inputs).

  >>> float(intervention_cost(0.5, 0.5, 1.0))
  4.0
  """
  r_x = np.asarray(r_x, np.float64)
  return 1.0 / (r_x * o_t1) + 1.0 / (r_x * o_t2) - 2.0


def _best_records(doc_ids, where, r_hat, num_positions):
  """Per position t: the record (query, doc) with max r_hat(doc) shown at t
  (ties: lowest query index)."""
  q, l = doc_ids.shape
  r_rec = np.where(where, r_hat[np.maximum(doc_ids, 0)], -np.inf)
  best_q = np.argmax(r_rec, axis=0)  # first max = lowest query
  rmax = r_rec[best_q, np.arange(l)]
  best_doc = doc_ids[best_q, np.arange(l)]
  out_q = np.full(num_positions, -1)
  out_r = np.full(num_positions, -np.inf)
  out_d = np.full(num_positions, -1)
  out_q[:l], out_r[:l], out_d[:l] = best_q, rmax, best_doc
  return out_q, out_r, out_d


def intervention_plan(
  doc_ids, where, labels, r_hat, o_hat, *, present: Optional[np.ndarray] = None
) -> list[Intervention]:
  r"""Algorithm 2 (NodeIntervention) for position bias: ``K - 1`` min-cost swaps.

  Args:
    doc_ids: ``int[Q, L]`` logged lists (item at position ``p`` is shown at
      bias factor ``p``).
    where: ``bool[Q, L]``.
    labels: ``int[L]`` IG component label of every position.
    r_hat: ``float[num_docs]`` relevance estimates.
    o_hat: ``float[L]`` observation estimates.
    present: optional ``bool[L]`` positions that occur.

  Returns:
    ``K - 1`` :class:`Intervention`\ s, along Prim's MST over components with
    the Eq. 4-6 costs (starting from the component of position 0).

  >>> docs = np.array([[0, 1, 2, 3], [4, 1, 5, 6]])
  >>> plan = intervention_plan(docs, docs >= 0, np.array([0, 0, 2, 2]),
  ...                          np.linspace(0.1, 1, 7), np.array([.9, .8, .5, .4]))
  >>> p = plan[0]; print(p.query, p.position_a, p.position_b, p.doc)
  1 3 0 6
  """
  doc_ids = np.asarray(doc_ids)
  where = np.asarray(where, bool)
  labels = np.asarray(labels)
  o_hat = np.asarray(o_hat, np.float64)
  r_hat = np.asarray(r_hat, np.float64)
  l = labels.shape[0]
  present = np.ones(l, bool) if present is None else np.asarray(present, bool)
  best_q, rmax, best_doc = _best_records(doc_ids, where, r_hat, l)
  comps = np.unique(labels[present])
  k = comps.size
  # target of a move into component B: argmax_{t in B} o_hat(t)
  target = np.array([np.flatnonzero(present & (labels == c))[np.argmax(o_hat[present & (labels == c)])] for c in comps])
  # cost_move[t, B]: move the best x shown at t into B's target
  with np.errstate(divide="ignore"):
    cost_move = intervention_cost(rmax[:, None], o_hat[:, None], o_hat[target][None, :])
  cost_move[~present | ~np.isfinite(rmax)] = np.inf
  cost = np.full((k, k), np.inf)
  move = {}
  for a in range(k):
    in_a = present & (labels == comps[a])
    for b in range(k):
      if a == b:
        continue
      c_ab = np.where(in_a, cost_move[:, b], np.inf)
      t = int(np.argmin(c_ab))
      move[a, b] = (t, int(target[b]), float(c_ab[t]))
  for a in range(k):
    for b in range(a + 1, k):
      ab, ba = move[a, b], move[b, a]
      cost[a, b] = cost[b, a] = min(ab[2], ba[2])
  np.fill_diagonal(cost, 0.0)
  start = int(np.flatnonzero(comps == labels[np.flatnonzero(present)[0]])[0])
  plan = []
  for i, j, _ in prim_mst(cost, start):
    ab, ba = move[i, j], move[j, i]
    t_from, t_to, c = ab if ab[2] <= ba[2] else ba
    plan.append(
      Intervention(query=int(best_q[t_from]), position_a=t_from, position_b=t_to, doc=int(best_doc[t_from]), cost=c)
    )
  return plan


def random_intervention_plan(rng: np.random.Generator, doc_ids, where, labels, *, present=None) -> list[Intervention]:
  r"""The random-cost ablation (Figure 4a): Eq. 3 replaced by
  :math:`C \sim U[0, 1]`, i.e. a random MST over components, and for each of
  its edges a random logged list with a random position of one component
  swapped with a random position of the other.

  Args:
    rng: a NumPy random generator.
    doc_ids: ``int[Q, L]`` the logged lists' document ids.
    where: ``bool[Q, L]`` the valid items.
    labels: ``int[L]`` the IG component of each position (the bias factors' connected components).
    present: optional ``bool[L]`` the positions that may move (None: all).

  Returns:
    The list of :class:`Intervention` s.

  >>> docs = np.arange(8).reshape(2, 4)
  >>> plan = random_intervention_plan(np.random.default_rng(0), docs,
  ...                                 docs >= 0, np.array([0, 0, 2, 2]))
  >>> len(plan), plan[0].position_a < 2 <= plan[0].position_b
  (1, True)
  """
  doc_ids = np.asarray(doc_ids)
  where = np.asarray(where, bool)
  labels = np.asarray(labels)
  l = labels.shape[0]
  present = np.ones(l, bool) if present is None else np.asarray(present, bool)
  comps = np.unique(labels[present])
  k = comps.size
  w = rng.uniform(size=(k, k))
  w = np.triu(w, 1) + np.triu(w, 1).T
  plan = []
  for i, j, c in prim_mst(w, 0):
    pos_a = rng.choice(np.flatnonzero(present & (labels == comps[i])))
    pos_b = rng.choice(np.flatnonzero(present & (labels == comps[j])))
    rows = np.flatnonzero(where[:, pos_a] & where[:, pos_b])
    q = int(rng.choice(rows))
    plan.append(
      Intervention(query=q, position_a=int(pos_a), position_b=int(pos_b), doc=int(doc_ids[q, pos_a]), cost=float(c))
    )
  return plan


def apply_interventions(ds: RankingDataset, plan) -> RankingDataset:
  r"""Appends, per intervention, a copy of list ``query`` with positions
  ``a`` and ``b`` swapped (a new query; all per-item arrays are swapped).

  Args:
    ds: the logged :class:`~ultr_jax.data.RankingDataset`.
    plan: the :class:`Intervention` s to apply.

  Returns:
    A new dataset: ``ds`` followed by one swapped copy of a list per intervention.

  >>> ds = RankingDataset(features=np.zeros((1, 3, 0), np.float32),
  ...     labels=np.array([[2., 1, 0]], np.float32), where=np.ones((1, 3), bool),
  ...     qid=np.array([5]), doc_ids=np.array([[7, 8, 9]], np.int32))
  >>> out = apply_interventions(ds, [Intervention(0, 0, 2, 7, 0.0)])
  >>> print(out.doc_ids.tolist(), out.qid.tolist())
  [[7, 8, 9], [9, 8, 7]] [5, 6]
  """
  if not plan:
    return ds
  rows = np.array([p.query for p in plan])
  new = ds.subset(rows)
  perm = np.tile(np.arange(ds.list_size), (len(plan), 1))
  for i, p in enumerate(plan):
    perm[i, p.position_a], perm[i, p.position_b] = p.position_b, p.position_a

  def swap(a):
    if a.ndim >= 2 and a.shape[1] == ds.list_size:
      idx = perm.reshape(perm.shape + (1,) * (a.ndim - 2))
      return np.take_along_axis(a, idx, axis=1)
    return a

  extras = {}
  for k, v in new.extras.items():
    extras[k] = v if k == "positions" else swap(v)
  qid = np.asarray(ds.qid).max() + 1 + np.arange(len(plan))

  def cat(a, b):
    return np.concatenate([a, b.astype(a.dtype)], axis=0)

  return RankingDataset(
    features=cat(ds.features, swap(new.features)),
    labels=cat(ds.labels, swap(new.labels)),
    where=cat(ds.where, swap(new.where)),
    qid=cat(ds.qid, qid),
    doc_ids=None if ds.doc_ids is None else cat(ds.doc_ids, swap(new.doc_ids)),
    extras={k: cat(ds.extras[k], extras[k]) for k in ds.extras},
  )
