r"""Sufficient statistics of session logs: weighted records that a click model's likelihood reads.

A click model's log-likelihood of a session log is a sum over sessions; many sessions share what the
likelihood reads of them, so the log reduces to *records* (integer keys) with *counts* (float weights), and

.. math::
    \sum_{s=1}^{S} \log P_\theta(c^{(s)}) = \sum_{r=1}^{R} \sum_v n_{r,v}\, f_v(\theta; k_r)

costs :math:`O(R)`, not :math:`O(S)`. Three reductions (:meth:`~ultr_jax.simulation.ClickModel.sufficient_statistics`):

* **patterns** (the default of every model): the distinct (document list, click vector, mask) triples with
  their session counts, weighted by the session log-likelihood;
* **items** (independent clicks given the rank, PBM and trust): per (document, rank) the impressions and
  clicks, :math:`k \log q + (n - k)\log(1 - q)`;
* **ubm items**: the same per (document, rank, last-click state).

Records merge associatively (:func:`merge_click_statistics`: concatenate, group equal keys, add the counts),
so a log is reduced batch by batch in memory bounded by the number of distinct records.
"""

from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["ClickStatistics", "merge_click_statistics", "pattern_statistics", "pattern_sessions", "item_statistics"]


class ClickStatistics(NamedTuple):
  """Weighted records of a session log (host side, NumPy).

  Attributes:
    kind: the reduction (``patterns``, ``items``, ``ubm_items``; records of different kinds never merge).
    keys: ``int64[R, K]`` the distinct records.
    counts: ``float64[R, V]`` their weights (sessions for patterns; impressions and clicks for items).
    num_sessions: sessions with at least one shown item (the fit's normaliser).
    list_size: ``L``.
    num_docs: one more than the largest document id seen (0 for an empty log).
  """

  kind: str
  keys: np.ndarray
  counts: np.ndarray
  num_sessions: float
  list_size: int
  num_docs: int

  @property
  def num_records(self) -> int:
    """``R``."""
    return int(self.keys.shape[0])


def _group(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Equal rows of ``keys`` merged, their ``counts`` added (rows sorted)."""
  if keys.shape[0] == 0:
    return keys, counts
  keys = np.ascontiguousarray(keys, np.int64)
  if keys.shape[1] == 1:
    uniq, inverse = np.unique(keys[:, 0], return_inverse=True)
    uniq = uniq[:, None]
  else:
    # Rows as opaque byte strings: one sort of R items instead of a lexsort over K columns.
    view = keys.view(np.dtype((np.void, keys.dtype.itemsize * keys.shape[1]))).ravel()
    _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
    uniq = keys[first]
  inverse = inverse.ravel()
  summed = np.stack(
    [np.bincount(inverse, weights=counts[:, v], minlength=uniq.shape[0]) for v in range(counts.shape[1])], axis=1
  )
  return uniq, summed


def merge_click_statistics(stats: Sequence[ClickStatistics]) -> ClickStatistics:
  """The statistics of the union of the logs (associative and commutative up to the records' order).

  >>> a = item_statistics(np.array([[0, 1]]), np.array([[1.0, 0.0]]), np.ones((1, 2), bool))
  >>> b = item_statistics(np.array([[1, 0]]), np.array([[0.0, 0.0]]), np.ones((1, 2), bool))
  >>> m = merge_click_statistics([a, b])
  >>> m.keys.tolist(), m.counts.tolist(), m.num_sessions
  ([[0, 0], [0, 1], [1, 0], [1, 1]], [[1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], 2.0)
  """
  stats = list(stats)
  if not stats:
    raise ValueError("merge_click_statistics: nothing to merge")
  kinds = {s.kind for s in stats}
  sizes = {s.list_size for s in stats}
  if len(kinds) != 1 or len(sizes) != 1:
    raise ValueError(f"merge_click_statistics: different reductions or list sizes {sorted(kinds)}, {sorted(sizes)}")
  keys, counts = _group(np.concatenate([s.keys for s in stats]), np.concatenate([s.counts for s in stats]))
  return ClickStatistics(
    kind=stats[0].kind,
    keys=keys,
    counts=counts,
    num_sessions=float(sum(s.num_sessions for s in stats)),
    list_size=stats[0].list_size,
    num_docs=max(s.num_docs for s in stats),
  )


def _common(doc_ids, clicks, where):
  doc_ids = np.asarray(doc_ids, np.int64)
  clicks = np.asarray(clicks)
  where = np.ones(clicks.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), clicks.shape)
  if doc_ids.shape != clicks.shape or clicks.ndim != 2:
    raise ValueError(f"doc_ids {doc_ids.shape} and clicks {clicks.shape} must have the same [B, L] shape")
  sessions = np.any(where, axis=-1)
  num_docs = int(doc_ids[where].max()) + 1 if where.any() else 0
  return doc_ids, (clicks > 0.5), where, float(sessions.sum()), num_docs


#: Lists up to this long store their click vector and mask as bit masks (one int32-safe key column each).
MAX_PACKED_LIST_SIZE = 30


def pattern_statistics(doc_ids, clicks, where) -> ClickStatistics:
  r"""The distinct sessions ``(doc_ids, clicks, where)`` with their counts (masked items: id 0, no click).

  Keys ``[R, L + 2]``: the ids, then the clicks and the mask as bit masks (:math:`\sum_i c_i 2^i`) for
  :math:`L \le 30` (:data:`MAX_PACKED_LIST_SIZE`), else ``[R, 3L]`` (ids, clicks, mask);
  :func:`pattern_sessions` decodes them. Counts ``[R, 1]``: sessions.

  >>> s = pattern_statistics(np.array([[3, 4], [3, 4], [4, 3]]), np.array([[1, 0], [1, 0], [0, 0]]), None)
  >>> s.keys.tolist(), s.counts[:, 0].tolist(), s.num_docs
  ([[3, 4, 1, 3], [4, 3, 0, 3]], [2.0, 1.0], 5)
  """
  doc_ids, clicks, where, num_sessions, num_docs = _common(doc_ids, clicks, where)
  keep = np.any(where, axis=-1)
  length = doc_ids.shape[1]
  ids, c, w = np.where(where, doc_ids, 0)[keep], (clicks & where)[keep], where[keep]
  if length <= MAX_PACKED_LIST_SIZE:
    bits = np.left_shift(np.int64(1), np.arange(length, dtype=np.int64))
    c, w = (c @ bits)[:, None], (w @ bits)[:, None]
  keys = np.concatenate([ids, c, w], axis=1).astype(np.int64)
  keys, counts = _group(keys, np.ones((keys.shape[0], 1)))
  return ClickStatistics("patterns", keys, counts, num_sessions, length, num_docs)


def pattern_sessions(keys):
  """``(doc_ids, clicks, where)`` ``[R, L]`` of pattern keys (NumPy or JAX; see :func:`pattern_statistics`).

  >>> ids, c, w = pattern_sessions(np.array([[3, 4, 1, 3]]))
  >>> ids.tolist(), c.tolist(), w.tolist()
  ([[3, 4]], [[1, 0]], [[True, True]])
  """
  width = keys.shape[-1]
  if width - 2 <= MAX_PACKED_LIST_SIZE:
    length = width - 2
    shifts = np.arange(length)
    c = (keys[:, length : length + 1] >> shifts) & 1
    w = ((keys[:, length + 1 :] >> shifts) & 1) > 0
    return keys[:, :length], c, w
  length = width // 3
  return keys[:, :length], keys[:, length : 2 * length], keys[:, 2 * length :] > 0


def item_statistics(doc_ids, clicks, where, *, last_click_state: bool = False) -> ClickStatistics:
  r"""Impressions and clicks per (document, rank), or per (document, rank, last-click state).

  The state is the UBM's (:func:`~ultr_jax.simulation.ubm_log_probs`): 0 without a click above, else one
  more than the rank of the last click above. Keys ``[R, 2]`` or ``[R, 3]``; counts ``[R, 2]``:
  :math:`(n, k)`.

  >>> s = item_statistics(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None, last_click_state=True)
  >>> s.kind, s.keys.tolist(), s.counts.tolist()
  ('ubm_items', [[0, 0, 0], [1, 1, 1]], [[1.0, 1.0], [1.0, 0.0]])
  """
  doc_ids, clicks, where, num_sessions, num_docs = _common(doc_ids, clicks, where)
  length = doc_ids.shape[1]
  ranks = np.broadcast_to(np.arange(length), doc_ids.shape)
  columns = [doc_ids[where], ranks[where]]
  if last_click_state:
    state = np.maximum.accumulate(np.where(where & clicks, ranks + 1, 0), axis=1)
    state = np.concatenate([np.zeros_like(state[:, :1]), state[:, :-1]], axis=1)
    columns.append(state[where])
  keys = np.stack(columns, axis=1).astype(np.int64)
  c = clicks[where].astype(np.float64)
  keys, counts = _group(keys, np.stack([np.ones_like(c), c], axis=1))
  kind = "ubm_items" if last_click_state else "items"
  return ClickStatistics(kind, keys, counts, num_sessions, length, num_docs)
