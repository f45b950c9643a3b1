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

from typing import NamedTuple, Optional, Sequence

import numpy as np

__all__ = [
  "ClickStatistics",
  "StatisticsTooLarge",
  "ItemCounter",
  "RecordMerger",
  "merge_click_statistics",
  "pattern_statistics",
  "pattern_sessions",
  "item_statistics",
]


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


#: A key space of at most ``max(DENSE_MIN_CELLS, DENSE_CELLS_PER_ROW * rows)`` cells is grouped by counting into a
#: dense table (``np.bincount``, :math:`O(R + \text{cells})`) rather than by sorting (:math:`O(R \log R)`).
DENSE_MIN_CELLS = 1 << 22
DENSE_CELLS_PER_ROW = 2


def _sum_by(index: np.ndarray, counts: np.ndarray, size: int) -> np.ndarray:
  return np.stack([np.bincount(index, weights=counts[:, v], minlength=size) for v in range(counts.shape[1])], axis=1)


def _group(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Equal rows of ``keys`` merged, their ``counts`` added; rows in lexicographic order.

  Rows whose columns' ranges multiply to less than :math:`2^{62}` are coded as one ``int64`` (mixed radix, the
  first column most significant), then counted into a dense table when the code space is small
  (:data:`DENSE_MIN_CELLS`) or sorted once as integers otherwise; wider rows (session patterns) are sorted as
  byte strings.
  """
  if keys.shape[0] == 0:
    return keys, counts
  keys = np.ascontiguousarray(keys, np.int64)
  rows, width = keys.shape
  columns = np.ascontiguousarray(keys.T)
  lo, hi = [int(c.min()) for c in columns], [int(c.max()) for c in columns]
  spans = [h - l + 1 for l, h in zip(lo, hi)]
  cells = int(np.prod(spans, dtype=object))
  if cells < (1 << 62):
    strides = [int(np.prod(spans[j + 1 :], dtype=object)) for j in range(width)]
    code = (columns[0] - lo[0]) * strides[0]
    for j in range(1, width):
      code += (columns[j] - lo[j]) * strides[j]
    if cells <= max(DENSE_MIN_CELLS, DENSE_CELLS_PER_ROW * rows):
      table = np.bincount(code, minlength=cells)  # then each present cell's record number
      present = np.flatnonzero(table)
      table[present] = np.arange(present.shape[0])
      inverse = table[code]
    else:
      present, inverse = np.unique(code, return_inverse=True)
    summed = _sum_by(inverse.ravel(), counts, present.shape[0])
    uniq = np.stack([lo[j] + (present // strides[j]) % spans[j] for j in range(width)], axis=1)
    return uniq, summed
  # Rows as opaque byte strings: one sort of R items instead of a lexsort over K columns (byte order).
  view = keys.view(np.dtype((np.void, keys.dtype.itemsize * width))).ravel()
  _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
  return keys[first], _sum_by(inverse.ravel(), counts, first.shape[0])


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


class StatisticsTooLarge(ValueError):
  """A log whose sufficient statistics outgrow the records budget: its sessions barely repeat (the session
  patterns of a cascade-family model on a noisy ranker's log), so the reduction saves nothing; fit such a log
  with :func:`~ultr_jax.simulation.fit_click_model_minibatch`."""


class RecordMerger:
  r"""Accumulates per-batch :class:`ClickStatistics` (``reduce(doc_ids, clicks, where)``, e.g. a model's
  :meth:`~ultr_jax.simulation.ClickModel.sufficient_statistics`), merging the pending ones
  (:func:`merge_click_statistics`) whenever they outgrow the merged records: memory :math:`O(R + B L)` for
  :math:`R` distinct records, merging work :math:`O(S L \log R)` over :math:`S` sessions.

  >>> m = RecordMerger(pattern_statistics)
  >>> for _ in range(3):
  ...   m.add(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None)
  >>> m.result().counts.tolist()
  [[3.0]]
  """

  def __init__(self, reduce):
    self.reduce, self.merged, self.pending, self.pending_rows = reduce, None, [], 0

  @property
  def num_records(self) -> int:
    """Records held now (merged and pending; at least the distinct ones)."""
    return (self.merged.num_records if self.merged is not None else 0) + self.pending_rows

  def add(self, doc_ids, clicks, where=None) -> None:
    """Reduces one batch and merges when due."""
    s = self.reduce(doc_ids, clicks, where)
    self.pending.append(s)
    self.pending_rows += s.num_records
    if self.pending_rows > max(self.merged.num_records if self.merged is not None else 0, 1 << 16):
      self.merged = merge_click_statistics(([self.merged] if self.merged is not None else []) + self.pending)
      self.pending, self.pending_rows = [], 0

  def result(self) -> ClickStatistics:
    """The merged statistics of every batch added."""
    parts = ([self.merged] if self.merged is not None else []) + self.pending
    if not parts:
      raise ValueError("RecordMerger: nothing was added")
    return merge_click_statistics(parts)


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
  more than the rank of the last click above. Keys ``[R, 2]`` or ``[R, 3]`` (sorted); counts ``[R, 2]``:
  :math:`(n, k)`. One batch through :class:`ItemCounter`.

  >>> s = item_statistics(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None, last_click_state=True)
  >>> s.kind, s.keys.tolist(), s.counts.tolist()
  ('ubm_items', [[0, 0, 0], [1, 1, 1]], [[1.0, 1.0], [1.0, 0.0]])
  """
  counter = ItemCounter(last_click_state=last_click_state)
  counter.add(doc_ids, clicks, where)
  return counter.result()


#: :class:`ItemCounter` keeps a dense table while the item keys span at most this many cells (2 int64 each:
#: 512 MiB), and sorted sparse records beyond.
MAX_DENSE_ITEM_CELLS = 1 << 25


class ItemCounter:
  r"""Accumulates :func:`item_statistics` over batches of sessions in one integer counting pass per batch.

  Each shown item is coded as one integer, :math:`2\,(d\,T + t) + c` for document :math:`d`, rank key
  :math:`t < T` (the rank, :math:`T = L`; or rank and last-click state, :math:`T = L (L + 1)`) and click
  :math:`c`, and counted: into a dense table ``int64[D T, 2]`` that grows with the largest document id while
  :math:`D T \le` :data:`MAX_DENSE_ITEM_CELLS` (``np.bincount``, or ``np.add.at`` when the table is much
  larger than the batch: :math:`O(B L)` per batch, no sort), else as sorted ``(code, count)`` records merged
  as they accumulate (:math:`O(B L \log R)`). Counts are exact integers; :meth:`result` gives the
  :class:`ClickStatistics` of every batch added, equal to :func:`merge_click_statistics` of the per-batch ones.

  >>> c = ItemCounter()
  >>> c.add(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None)
  >>> c.add(np.array([[1, 0]]), np.array([[1.0, 0.0]]), None)
  >>> s = c.result(); s.keys.tolist(), s.counts.tolist(), s.num_sessions
  ([[0, 0], [0, 1], [1, 0], [1, 1]], [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]], 2.0)
  """

  def __init__(self, *, last_click_state: bool = False, max_dense_cells: int = MAX_DENSE_ITEM_CELLS):
    self.last_click_state, self.max_dense_cells = bool(last_click_state), int(max_dense_cells)
    self.kind = "ubm_items" if last_click_state else "items"
    self.list_size: Optional[int] = None
    self.num_docs, self.num_sessions = 0, 0.0
    self.table: Optional[np.ndarray] = None  # int64[D * T * 2]: (no-click, click) counts per cell
    self.sparse: list = []  # (codes int64[R], counts int64[R]) sorted, while the keys are too many for a table
    self._pending, self._buffer, self._buffered = 0, [], 0

  @property
  def num_records(self) -> int:
    """Records held as sparse ``(code, count)`` pairs now (0 while the counts are one dense table, whose size
    :data:`MAX_DENSE_ITEM_CELLS` bounds)."""
    return sum(c.shape[0] for c, _ in self.sparse)

  def _rank_keys(self, clicks: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``t``: the rank, or rank * (L + 1) + last-click state, ``int[B, L]`` (or ``[L]``)."""
    length = clicks.shape[1]
    ranks = np.arange(length, dtype=np.int32)
    if not self.last_click_state:
      return ranks
    small = np.int16 if length < np.iinfo(np.int16).max else np.int32
    state = np.zeros(clicks.shape, small)  # 1 + the rank of the last click above, 0 without one
    state[:, 1:] = (ranks[:-1] + 1).astype(small) * (where[:, :-1] & clicks[:, :-1])
    np.maximum.accumulate(state, axis=1, out=state)
    return state + ranks * np.int32(length + 1)

  def add(self, doc_ids, clicks, where=None) -> None:
    """Counts a batch ``doc_ids int[B, L]``, ``clicks [B, L]`` (1 where > 0.5), ``where bool[B, L]`` (None: all)."""
    doc_ids, clicks = np.asarray(doc_ids), np.asarray(clicks)
    if doc_ids.shape != clicks.shape or clicks.ndim != 2:
      raise ValueError(f"doc_ids {doc_ids.shape} and clicks {clicks.shape} must have the same [B, L] shape")
    length = clicks.shape[1]
    if self.list_size is None:
      self.list_size = length
    elif length != self.list_size:
      raise ValueError(f"ItemCounter: a batch of list size {length} after batches of {self.list_size}")
    if where is not None and np.all(where):
      where = None
    full = where is None
    where = np.ones(clicks.shape, bool) if full else np.broadcast_to(np.asarray(where, bool), clicks.shape)
    self.num_sessions += float(clicks.shape[0] if full else np.count_nonzero(np.any(where, axis=1)))
    if not full and not where.any():
      return
    top = int(doc_ids.max() if full else np.max(doc_ids, where=where, initial=0))
    if (np.min(doc_ids) if full else np.min(doc_ids, where=where, initial=0)) < 0:
      raise ValueError("ItemCounter: negative document ids")
    self.num_docs = max(self.num_docs, top + 1)
    click = clicks > 0.5
    per_doc = length * (length + 1) if self.last_click_state else length
    wide = 2 * (top + 1) * per_doc >= np.iinfo(np.int32).max
    dtype = np.int64 if wide else np.int32
    code = doc_ids.astype(dtype) * dtype(2 * per_doc)
    code += (self._rank_keys(click, where) * 2).astype(dtype, copy=False)
    code += click
    code = code.ravel() if full else code[where]
    if self.table is not None or (self.num_docs * per_doc <= self.max_dense_cells and not self.sparse):
      self._count_dense(code, per_doc)
    else:
      self._count_sparse(code)

  def _count_dense(self, code, per_doc):
    size = 2 * self.num_docs * per_doc
    if self.num_docs * per_doc > self.max_dense_cells:  # outgrew the table: its cells become sparse records
      self._flush()
      present = np.flatnonzero(self.table)
      self.sparse, self.table = [(present.astype(np.int64), self.table[present])], None
      self._count_sparse(code)
      return
    if self.table is None or self.table.shape[0] < size:  # grow (doubling) with the largest id
      self._flush()
      grown = np.zeros(max(size, 0 if self.table is None else 2 * self.table.shape[0]), np.int64)
      if self.table is not None:
        grown[: self.table.shape[0]] = self.table
      self.table = grown
    # Codes wait until they are as many as the table's cells, so each O(cells) bincount counts as many items.
    self._buffer.append(code)
    self._buffered += code.shape[0]
    if self._buffered >= self.table.shape[0]:
      self._flush()

  def _flush(self):
    if self._buffer:
      code = self._buffer[0] if len(self._buffer) == 1 else np.concatenate(self._buffer)
      self.table += np.bincount(code, minlength=self.table.shape[0])
      self._buffer, self._buffered = [], 0

  def _count_sparse(self, code):
    codes, counts = np.unique(code.astype(np.int64), return_counts=True)
    self.sparse.append((codes, counts))
    self._pending += codes.shape[0]
    if len(self.sparse) > 1 and self._pending > self.sparse[0][0].shape[0]:
      self.sparse = [self._merge_sparse()]
      self._pending = 0

  def _merge_sparse(self):
    codes = np.concatenate([c for c, _ in self.sparse])
    counts = np.concatenate([n for _, n in self.sparse])
    uniq, inverse = np.unique(codes, return_inverse=True)
    return uniq, np.bincount(inverse.ravel(), weights=counts, minlength=uniq.shape[0]).astype(np.int64)

  def result(self) -> ClickStatistics:
    """The :class:`ClickStatistics` (kind ``items`` or ``ubm_items``) of everything added."""
    length = self.list_size or 0
    if self.table is not None:
      self._flush()
      present = np.flatnonzero(self.table)
      counted = self.table[present]
    elif self.sparse:
      present, counted = self._merge_sparse() if len(self.sparse) > 1 else self.sparse[0]
    else:
      present, counted = np.zeros(0, np.int64), np.zeros(0, np.int64)
    cell, click = present // 2, present % 2
    first = np.flatnonzero(np.diff(cell, prepend=-1))  # present is sorted: a cell's (no click, click) adjacent
    cells = cell[first]
    n = np.add.reduceat(counted, first) if cells.shape[0] else np.zeros(0, np.int64)
    k = np.zeros(cells.shape[0], np.int64)
    k[np.cumsum(np.diff(cell, prepend=-1) != 0)[click == 1] - 1] = counted[click == 1]
    per_doc = length * (length + 1) if self.last_click_state else length
    doc, rest = cells // max(per_doc, 1), cells % max(per_doc, 1)
    columns = [doc, rest // (length + 1), rest % (length + 1)] if self.last_click_state else [doc, rest]
    keys = np.stack(columns, axis=1).astype(np.int64)
    counts = np.stack([n.astype(np.float64), k.astype(np.float64)], axis=1)
    return ClickStatistics(self.kind, keys, counts, self.num_sessions, length, self.num_docs)
