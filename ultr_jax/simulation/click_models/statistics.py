r"""Sufficient statistics of session logs: weighted records that a click model's likelihood reads.

A click model's log-likelihood of a session log is a sum over sessions; many sessions share what the
likelihood reads of them, so the log reduces to *records* (integer keys) with *counts* (float weights), and

.. math::
    \sum_{s=1}^{S} \log P_\theta(c^{(s)}) = \sum_{r=1}^{R} \sum_v n_{r,v}\, f_v(\theta; k_r)

costs :math:`O(R)`, not :math:`O(S)`. Three reductions (:func:`~ultr_jax.simulation.statistics_reduction`):

* **patterns** (the default of every model): the distinct (document list, click vector, mask) triples with
  their session counts, weighted by the session log-likelihood;
* **items** (independent clicks given the rank, PBM and trust): per (document, rank) the impressions and
  clicks, :math:`k \log q + (n - k)\log(1 - q)`;
* **ubm items**: the same per (document, rank, last-click state).

Records merge associatively (:func:`merge_click_statistics`: concatenate, group equal keys, add the counts),
so a log is reduced batch by batch in memory bounded by the number of distinct records. Where those outgrow a
memory budget (``memory_budget_bytes``), the item counts are hash-partitioned by document and spilled to
``.npz`` run files (:class:`PartitionedStatistics`): any number of runs, from any batches, files or processes,
merge by taking the union of their files, and a fit reads one partition at a time.
"""

import json
import os
import pathlib
import shutil
import tempfile
import uuid
import weakref
from typing import Iterator, NamedTuple, Optional, Sequence, overload

import numpy as np

from ultr_jax._state_files import read_state_file

__all__ = [
  "ClickStatistics",
  "StatisticsTooLarge",
  "ItemCounter",
  "RecordMerger",
  "PartitionedStatistics",
  "open_partitioned_statistics",
  "write_statistics_runs",
  "count_codes",
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


@overload
def merge_click_statistics(stats: Sequence["ClickStatistics"]) -> "ClickStatistics": ...
@overload
def merge_click_statistics(
  stats: Sequence["ClickStatistics | PartitionedStatistics"],
) -> "ClickStatistics | PartitionedStatistics": ...
def merge_click_statistics(stats):
  """The statistics of the union of the logs (associative and commutative up to the records' order).

  In-memory statistics merge into one :class:`ClickStatistics`; where any is a :class:`PartitionedStatistics`,
  the result is one too (the union of the runs, the in-memory ones spilled beside them).

  Args:
    stats: the statistics of several logs, in memory or spilled.

  Returns:
    One :class:`ClickStatistics`, or a :class:`PartitionedStatistics` where any input was spilled.

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
  if any(isinstance(s, PartitionedStatistics) for s in stats):
    return _merge_partitioned(stats)
  stats = [s for s in stats if isinstance(s, ClickStatistics)]  # all of them: none is partitioned
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
  """Session-pattern statistics (a cascade-family model's distinct sessions) that outgrow the memory budget: a
  session pattern reads several documents, so its records cannot be partitioned by document and spilled (item
  counts can); on a log whose lists barely repeat there are about as many patterns as sessions. Fit such a log
  with :class:`~ultr_jax.simulation.Minibatch` (:func:`~ultr_jax.simulation.fit_click_model`'s fallback), or raise the budget."""


#: Bytes a :class:`ClickStatistics` record of ``K`` key and ``V`` count columns takes (int64 and float64).
def record_bytes(num_keys: int, num_counts: int) -> int:
  return 8 * (int(num_keys) + int(num_counts))


_META = "ultr_jax.partitioned_statistics"
#: The shape of a writer's ``<tag>.json`` (any other JSON object in the directory is not a writer's and is skipped).
_META_SPEC = {
  f"{_META}?": {
    "kind": str,
    "list_size": int,
    "num_sessions": float,
    "num_docs": int,
    "num_partitions": int,
    "runs": [[str]],
  }
}
_META_WHAT = f"a JSON object (a statistics writer's metadata under {_META!r}: kind, list_size, runs per partition)"
_META_RECOVERY = "gather the statistics again into an empty directory (or remove the file if it is not a writer's)"


class PartitionedStatistics:
  r"""Item statistics spilled to disk: records hash-partitioned by document, partition
  :math:`p = d \bmod P`, in ``.npz`` run files (``keys``, ``counts``) under one directory.

  The records of a document all lie in its partition; one partition's runs, grouped
  (:meth:`partition`), are its :class:`ClickStatistics`. Runs from different batches, files or processes merge
  by the union of their files (:func:`merge_click_statistics`, :func:`open_partitioned_statistics`): associative
  and order-free, since grouping adds the counts of equal keys.

  Attributes:
    kind: the statistics' kind, as in :class:`ClickStatistics`.
    list_size: the list size, as in :class:`ClickStatistics`.
    num_sessions: the sessions counted, as in :class:`ClickStatistics`.
    num_docs: the document id range, as in :class:`ClickStatistics`.
    num_partitions: ``P``.
    runs: ``tuple`` of ``P`` tuples of run file paths.
  """

  def __init__(self, kind, list_size, num_sessions, num_docs, num_partitions, runs, owner=None):
    self.kind, self.list_size, self.num_sessions, self.num_docs = kind, int(list_size), float(num_sessions), num_docs
    self.num_partitions, self.runs, self._owner = int(num_partitions), tuple(tuple(r) for r in runs), owner

  def __repr__(self) -> str:
    return (
      f"PartitionedStatistics(kind={self.kind!r}, num_partitions={self.num_partitions}, "
      f"runs={sum(map(len, self.runs))}, num_sessions={self.num_sessions}, num_docs={self.num_docs})"
    )

  @property
  def num_run_records(self) -> int:
    """Records in the run files, at least the distinct records (a key may be in several runs)."""
    total = 0
    for paths in self.runs:
      for path in paths:
        with np.load(path) as z:
          total += int(z["counts"].shape[0])
    return total

  def partition(self, p: int) -> ClickStatistics:
    r"""Partition ``p``'s records (documents :math:`d \equiv p \bmod P`), grouped, as :class:`ClickStatistics`."""
    keys, counts = [], []
    for path in self.runs[p]:
      with np.load(path) as z:
        keys.append(z["keys"])
        counts.append(z["counts"])
    if len(keys) == 1:  # one run is grouped already (a spill or a compaction writes distinct sorted keys)
      k, c = keys[0], counts[0]
    elif keys:
      k, c = _group(np.concatenate(keys), np.concatenate(counts))
    else:
      width = 3 if self.kind == "ubm_items" else 2
      k, c = np.zeros((0, width), np.int64), np.zeros((0, 2))
    return ClickStatistics(self.kind, k, c, self.num_sessions, self.list_size, self.num_docs)

  def partitions(self) -> Iterator[ClickStatistics]:
    """:meth:`partition` of each ``p`` in turn (one in memory at a time)."""
    for p in range(self.num_partitions):
      yield self.partition(p)

  def compact(self) -> "PartitionedStatistics":
    """The same statistics with each partition's runs grouped into one run file (written beside them)."""
    if all(len(r) <= 1 for r in self.runs):
      return self
    directory = next(pathlib.Path(r).parent for runs in self.runs for r in runs)
    spill, runs = _Spill(directory, self.num_partitions, _tag()), []
    for p, paths in enumerate(self.runs):
      if len(paths) <= 1:
        runs.append(paths)
        continue
      part = self.partition(p)
      path = directory / f"p{p:05d}_{spill.tag}_000000.npz"
      _atomic_savez(path, keys=part.keys, counts=part.counts)
      runs.append((str(path),))
    return PartitionedStatistics(
      self.kind, self.list_size, self.num_sessions, self.num_docs, self.num_partitions, runs, self._owner
    )

  def to_statistics(self) -> ClickStatistics:
    """All partitions in memory as one :class:`ClickStatistics` (for logs that fit after all)."""
    merged = merge_click_statistics(list(self.partitions()))  # each partition carries all the sessions
    return merged._replace(num_sessions=self.num_sessions, num_docs=self.num_docs)


class _Spill:
  """Writes one accumulator's runs (``p{partition}_{tag}_{n}.npz``) and its metadata (``{tag}.json``)."""

  def __init__(self, directory, num_partitions: int, tag: str):
    self.owner = None
    if directory is None:
      directory = tempfile.mkdtemp(prefix="ultr_jax_statistics_")
      self.owner = _TempDir(directory)
    self.directory, self.num_partitions, self.tag = pathlib.Path(directory), int(num_partitions), tag
    self.directory.mkdir(parents=True, exist_ok=True)
    self.runs: list = [[] for _ in range(self.num_partitions)]

  def write(self, keys: np.ndarray, counts: np.ndarray) -> None:
    part = keys[:, 0] % self.num_partitions
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(self.num_partitions + 1))
    for p in np.flatnonzero(np.diff(bounds)):
      rows = order[bounds[p] : bounds[p + 1]]
      path = self.directory / f"p{p:05d}_{self.tag}_{len(self.runs[p]):06d}.npz"
      _atomic_savez(path, keys=keys[rows], counts=counts[rows])
      self.runs[p].append(str(path))

  def finish(self, kind, list_size, num_sessions, num_docs) -> PartitionedStatistics:
    meta = {
      "kind": kind,
      "list_size": int(list_size),
      "num_sessions": float(num_sessions),
      "num_docs": int(num_docs),
      "num_partitions": self.num_partitions,
      "runs": [[os.path.basename(r) for r in runs] for runs in self.runs],
    }
    tmp = self.directory / f".{self.tag}.json.tmp"
    tmp.write_text(json.dumps({_META: meta}))
    os.replace(tmp, self.directory / f"{self.tag}.json")
    return PartitionedStatistics(kind, list_size, num_sessions, num_docs, self.num_partitions, self.runs, self.owner)


class _TempDir:
  """Deletes a temporary directory when the last statistics reading it are gone."""

  def __init__(self, path):
    self.path = path
    weakref.finalize(self, shutil.rmtree, path, True)


def _atomic_savez(path: pathlib.Path, **arrays) -> None:
  tmp = path.with_name(f".{path.name}.tmp")
  with open(tmp, "wb") as f:
    np.savez(f, **arrays)
  os.replace(tmp, path)


def open_partitioned_statistics(directory) -> PartitionedStatistics:
  r"""The union of every accumulator's runs written under ``directory`` (by any processes, in any order).

  Each writer (an :class:`ItemCounter` with that ``spill_dir``) left its runs and a ``{tag}.json`` with its
  session count; the union adds the sessions, takes the largest ``num_docs`` and concatenates each partition's
  runs, so the merged statistics equal those of one pass over all the writers' sessions.

  Args:
    directory: the shared ``spill_dir``.

  Returns:
    :class:`PartitionedStatistics`.

  Raises:
    ValueError: naming the directory when it holds no writer's metadata, or writers of different kinds, list
      sizes or numbers of partitions.

  >>> import tempfile
  >>> d = tempfile.mkdtemp()
  >>> for ids in ([[0, 1]], [[1, 0]]):  # two writers (processes) into one directory
  ...   c = ItemCounter(memory_budget_bytes=0, spill_dir=d, num_partitions=2)
  ...   c.add(np.array(ids), np.array([[1.0, 0.0]]), None)
  ...   _ = c.result()
  >>> s = open_partitioned_statistics(d)
  >>> s.num_sessions, s.to_statistics().keys.tolist()
  (2.0, [[0, 0], [0, 1], [1, 0], [1, 1]])
  """
  directory = pathlib.Path(directory)
  metas = []
  for path in sorted(directory.glob("*.json")):
    meta = read_state_file(path, _META_SPEC, what=_META_WHAT, recovery=_META_RECOVERY).get(_META)
    if meta is not None:
      metas.append(meta)
  if not metas:
    raise ValueError(f"{directory}: no partitioned statistics (no writer's .json metadata)")
  shape = {(m["kind"], m["list_size"], m["num_partitions"]) for m in metas}
  if len(shape) != 1:
    raise ValueError(f"{directory}: writers of different (kind, list_size, num_partitions): {sorted(shape)}")
  kind, list_size, parts = shape.pop()
  runs = [[str(directory / r) for m in metas for r in m["runs"][p]] for p in range(parts)]
  sessions = sum(m["num_sessions"] for m in metas)
  return PartitionedStatistics(kind, list_size, sessions, max(m["num_docs"] for m in metas), parts, runs)


def write_statistics_runs(stats: ClickStatistics, directory, num_partitions: int = 64) -> PartitionedStatistics:
  """In-memory statistics written as one writer's partitioned runs under ``directory`` (as a spilled
  :class:`ItemCounter` leaves them), so that :func:`open_partitioned_statistics` merges them with the others.

  >>> import tempfile
  >>> d = tempfile.mkdtemp()
  >>> s = item_statistics(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None)
  >>> write_statistics_runs(s, d, 2).to_statistics().keys.tolist()
  [[0, 0], [1, 1]]
  """
  spill = _Spill(directory, num_partitions, _tag())
  if stats.num_records:
    spill.write(stats.keys, stats.counts)
  return spill.finish(stats.kind, stats.list_size, stats.num_sessions, stats.num_docs)


def _merge_partitioned(stats: list) -> PartitionedStatistics:
  """Partitioned (and in-memory) statistics of one kind as one :class:`PartitionedStatistics` (union of runs)."""
  first = next(s for s in stats if isinstance(s, PartitionedStatistics))
  parts = {s.num_partitions for s in stats if isinstance(s, PartitionedStatistics)}
  if len(parts) != 1:
    raise ValueError(f"merge_click_statistics: partitioned statistics of different num_partitions {sorted(parts)}")
  runs, owners = [list(r) for r in first.runs], []
  for s in stats:
    if isinstance(s, ClickStatistics):  # spilled next to the first's runs
      directory = next((pathlib.Path(r).parent for runs in first.runs for r in runs), None)
      spill = _Spill(directory, first.num_partitions, _tag())
      spill.write(s.keys, s.counts)
      runs = [r + w for r, w in zip(runs, spill.runs)]
      owners.append(spill.owner)
    elif s is not first:
      runs = [r + list(w) for r, w in zip(runs, s.runs)]
    owners.append(getattr(s, "_owner", None))
  return PartitionedStatistics(
    first.kind,
    first.list_size,
    sum(s.num_sessions for s in stats),
    max(s.num_docs for s in stats),
    first.num_partitions,
    runs,
    tuple(o for o in owners if o is not None),
  )


def _tag() -> str:
  """A run-file tag unique across processes and accumulators."""
  return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


class RecordMerger:
  r"""Accumulates per-batch :class:`ClickStatistics` (``reduce(doc_ids, clicks, where)``, e.g. a model's
  :func:`~ultr_jax.simulation.statistics_reduction`), merging the pending ones
  (:func:`merge_click_statistics`) whenever they outgrow the merged records: memory :math:`O(R + B L)` for
  :math:`R` distinct records, merging work :math:`O(S L \log R)` over :math:`S` sessions.

  Args:
    reduce: the per-batch reduction.
    memory_budget_bytes: the most bytes of records held (None: no limit); past it :class:`StatisticsTooLarge`
      (session patterns read several documents, so they are not partitioned and spilled).

  >>> m = RecordMerger(pattern_statistics)
  >>> for _ in range(3):
  ...   m.add(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None)
  >>> m.result().counts.tolist()
  [[3.0]]
  """

  def __init__(self, reduce, *, memory_budget_bytes: Optional[int] = None):
    self.reduce, self.pending_rows = reduce, 0
    self.merged: Optional[ClickStatistics] = None
    self.pending: list[ClickStatistics] = []
    self.memory_budget_bytes = memory_budget_bytes
    self.num_sessions = 0.0

  def configure(self, *, memory_budget_bytes: Optional[int] = None, **unused) -> "RecordMerger":
    """Sets the memory budget (the other options of :meth:`ItemCounter.configure` do not apply); returns self."""
    del unused
    self.memory_budget_bytes = memory_budget_bytes
    return self

  @property
  def num_records(self) -> int:
    """Records held now (merged and pending; at least the distinct ones)."""
    return (self.merged.num_records if self.merged is not None else 0) + self.pending_rows

  @property
  def held_bytes(self) -> int:
    """Bytes of the records held now."""
    parts = ([self.merged] if self.merged is not None else []) + self.pending
    return sum(s.keys.nbytes + s.counts.nbytes for s in parts)

  def add(self, doc_ids, clicks, where=None) -> None:
    """Reduces one batch and merges when due."""
    s = self.reduce(doc_ids, clicks, where)
    self.pending.append(s)
    self.pending_rows += s.num_records
    self.num_sessions += s.num_sessions
    if self.pending_rows > max(self.merged.num_records if self.merged is not None else 0, 1 << 16):
      self.merged = merge_click_statistics(([self.merged] if self.merged is not None else []) + self.pending)
      self.pending, self.pending_rows = [], 0
    budget = self.memory_budget_bytes
    if budget is not None and self.held_bytes > budget:
      raise StatisticsTooLarge(
        f"{s.kind} statistics hold {self.num_records:,} records ({self.held_bytes:,} bytes) after "
        f"{self.num_sessions:,.0f} sessions, over memory_budget_bytes={budget:,}: each record is a distinct "
        "session (a list with its clicks), which reads several documents, so the records cannot be partitioned "
        "by document and spilled; the sessions barely repeat, so this log does not reduce: fit it with "
        "fit_click_model(..., solver=Minibatch()) (an optax optimiser over the stream, memory flat) or raise the budget"
      )

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

  The state is the UBM's (:meth:`~ultr_jax.simulation.UBM.filter_log_probs`): 0 without a click above, else one
  more than the rank of the last click above. Keys ``[R, 2]`` or ``[R, 3]`` (sorted); counts ``[R, 2]``:
  :math:`(n, k)`. One batch through :class:`ItemCounter`.

  >>> s = item_statistics(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None, last_click_state=True)
  >>> s.kind, s.keys.tolist(), s.counts.tolist()
  ('ubm_items', [[0, 0, 0], [1, 1, 1]], [[1.0, 1.0], [1.0, 0.0]])
  """
  counter = ItemCounter(last_click_state=last_click_state)
  counter.add(doc_ids, clicks, where)
  stats = counter.result()
  assert isinstance(stats, ClickStatistics)  # no memory budget: nothing spills
  return stats


#: :class:`ItemCounter` keeps a dense table while the item keys span at most this many cells (2 int64 each:
#: 512 MiB) and its memory budget allows, and sorted sparse records beyond.
MAX_DENSE_ITEM_CELLS = 1 << 25
#: Partitions :class:`ItemCounter` spills into by default (each one ``1/P`` of the records, read one at a time).
NUM_PARTITIONS = 64


class ItemCounter:
  r"""Accumulates :func:`item_statistics` over batches of sessions in one integer counting pass per batch.

  Each shown item is coded as one integer, :math:`2\,(d\,T + t) + c` for document :math:`d`, rank key
  :math:`t < T` (the rank, :math:`T = L`; or rank and last-click state, :math:`T = L (L + 1)`) and click
  :math:`c`, and counted: into a dense table ``int64[D T, 2]`` that grows with the largest document id while
  :math:`D T \le` :data:`MAX_DENSE_ITEM_CELLS` and the table fits half the memory budget (``np.bincount``:
  :math:`O(B L)` per batch, no sort), else as sorted ``(code, count)`` records: each batch counted by a sort of
  its own, the sorted pieces merged by one stable sort over the runs whenever they outgrow the merged records
  (:math:`O(S L \log R)` over :math:`S` sessions). Where the records held pass ``memory_budget_bytes``, they are
  decoded, hash-partitioned by document and written to run files under ``spill_dir``
  (:class:`PartitionedStatistics`), and counting starts afresh: the records held stay within the budget (plus
  one batch) however many distinct (document, rank) pairs the log has; merging, decoding and spilling them need
  work space of a few times their size on top. Counts are exact integers; :meth:`result` gives the statistics of every
  batch added, equal to :func:`merge_click_statistics` of the per-batch ones.

  Args:
    last_click_state: count per (document, rank, last-click state) (the UBM's) instead of (document, rank).
    max_dense_cells: the dense table's most cells.
    memory_budget_bytes: the most bytes of counts held (None: no limit, never spilled).
    spill_dir: where runs go (None: a temporary directory, deleted with the statistics); several counters
      (processes) may share one (:func:`open_partitioned_statistics`).
    num_partitions: ``P``, partitions of the spilled records.
    device: count on the JAX default device (sort-based reduction, :func:`count_codes`) instead of NumPy; None:
      on a GPU or TPU backend.

  >>> c = ItemCounter()
  >>> c.add(np.array([[0, 1]]), np.array([[1.0, 0.0]]), None)
  >>> c.add(np.array([[1, 0]]), np.array([[1.0, 0.0]]), None)
  >>> s = c.result(); s.keys.tolist(), s.counts.tolist(), s.num_sessions
  ([[0, 0], [0, 1], [1, 0], [1, 1]], [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]], 2.0)
  """

  def __init__(
    self,
    *,
    last_click_state: bool = False,
    max_dense_cells: int = MAX_DENSE_ITEM_CELLS,
    memory_budget_bytes: Optional[int] = None,
    spill_dir=None,
    num_partitions: int = NUM_PARTITIONS,
    device: Optional[bool] = None,
  ):
    self.last_click_state, self.max_dense_cells = bool(last_click_state), int(max_dense_cells)
    self.memory_budget_bytes = None if memory_budget_bytes is None else int(memory_budget_bytes)
    if self.memory_budget_bytes is not None:
      self.max_dense_cells = min(self.max_dense_cells, self.memory_budget_bytes // 32)
    self.spill_dir, self.num_partitions, self._spill = spill_dir, int(num_partitions), None
    if self.num_partitions < 1:
      raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    self.device = device
    self.kind = "ubm_items" if last_click_state else "items"
    self.list_size: Optional[int] = None
    self.num_docs, self.num_sessions = 0, 0.0
    self.table: Optional[np.ndarray] = None  # int64[D * T * 2]: (no-click, click) counts per cell
    self.sparse: list = []  # (codes int64[R], counts int64[R]) sorted, while the keys are too many for a table
    self._pending, self._buffer, self._buffered = 0, [], 0

  def configure(
    self,
    *,
    memory_budget_bytes: Optional[int] = None,
    spill_dir=None,
    num_partitions: int = NUM_PARTITIONS,
    device: Optional[bool] = None,
  ) -> "ItemCounter":
    """Sets the constructor's budget and spill options on a fresh counter (as a model's
    :class:`~ultr_jax.simulation.StatisticsReduction` made it); returns self."""
    if self.list_size is not None:
      raise ValueError("ItemCounter.configure: the counter has already counted")
    ItemCounter.__init__(
      self,
      last_click_state=self.last_click_state,
      max_dense_cells=self.max_dense_cells,
      memory_budget_bytes=memory_budget_bytes,
      spill_dir=spill_dir,
      num_partitions=num_partitions,
      device=device,
    )
    return self

  @property
  def num_records(self) -> int:
    """Records held as sparse ``(code, count)`` pairs now (0 while the counts are one dense table, whose size
    :data:`MAX_DENSE_ITEM_CELLS` bounds)."""
    return sum(c.shape[0] for c, _ in self.sparse)

  @property
  def held_bytes(self) -> int:
    """Bytes of counts held now (the dense table, the sparse records and the buffered codes)."""
    table = 0 if self.table is None else self.table.nbytes
    return table + sum(c.nbytes + n.nbytes for c, n in self.sparse) + sum(b.nbytes for b in self._buffer)

  @property
  def spilled(self) -> bool:
    """Whether records went to disk."""
    return self._spill is not None

  def _per_doc(self, length: int) -> int:
    return length * (length + 1) if self.last_click_state else length

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
    per_doc = self._per_doc(length)
    wide = 2 * (top + 1) * per_doc >= np.iinfo(np.int32).max
    dtype = np.int64 if wide else np.int32
    code = doc_ids.astype(dtype) * dtype(2 * per_doc)
    code += (self._rank_keys(click, where) * 2).astype(dtype, copy=False)
    code += click
    code = code.ravel() if full else code[where]
    dense_ok = self.num_docs * per_doc <= self.max_dense_cells and not self.sparse and not self.spilled
    if self.table is not None or dense_ok:
      self._count_dense(code, per_doc)
    else:
      self._count_sparse(code)
    if self.memory_budget_bytes is not None and self.held_bytes > self.memory_budget_bytes:
      self._spill_held()

  def _count_dense(self, code, per_doc):
    size = 2 * self.num_docs * per_doc
    if self.num_docs * per_doc > self.max_dense_cells:  # outgrew the table: its cells become sparse records
      assert self.table is not None  # without a table the counts are dense only while they fit
      self._flush()
      present = np.flatnonzero(self.table)
      self.sparse, self.table = [(present.astype(np.int64), self.table[present])], None
      self._count_sparse(code)
      return
    if self.table is None or self.table.shape[0] < size:  # grow (doubling) with the largest id
      self._flush()
      cap = self.max_dense_cells * 2
      grown = np.zeros(max(size, 0 if self.table is None else min(2 * self.table.shape[0], cap)), np.int64)
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
      assert self.table is not None  # codes are buffered for the dense table only
      code = self._buffer[0] if len(self._buffer) == 1 else np.concatenate(self._buffer)
      self.table += np.bincount(code, minlength=self.table.shape[0])
      self._buffer, self._buffered = [], 0

  def _count_sparse(self, code):
    # Each batch counted by one sort of its own (small, in cache); the sorted pieces merged whenever they outgrow
    # the merged records, by one stable sort over the runs.
    codes, counts = count_codes(code, device=self.device)
    self.sparse.append((codes, counts))
    self._pending += codes.shape[0]
    if len(self.sparse) > 1 and self._pending > self.sparse[0][0].shape[0]:
      self.sparse = [self._merge_sparse()]
      self._pending = 0

  def _merge_sparse(self):
    """The held pieces merged into one sorted ``(code, count)`` run; the pieces are let go of first (the caller
    holds the result), so a merge's peak is the run and its sort's work space, not the pieces as well."""
    pieces, self.sparse = self.sparse, []
    codes = np.concatenate([c for c, _ in pieces])
    counts = np.concatenate([n for _, n in pieces])
    del pieces
    if codes.shape[0] == 0:
      return codes.astype(np.int64), counts.astype(np.int64)
    # The pieces are sorted runs: a stable sort (timsort) merges k of them in O(n log k).
    order = np.argsort(codes, kind="stable")
    codes, counts = codes[order], counts[order]
    del order
    first = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    return codes[first].astype(np.int64, copy=False), np.add.reduceat(counts, first).astype(np.int64, copy=False)

  def _held_codes(self) -> tuple[np.ndarray, np.ndarray]:
    """The sorted ``(code, count)`` pairs of every count held (held as one run from then on)."""
    if self.table is not None:
      self._flush()
      present = np.flatnonzero(self.table)
      return present, self.table[present]
    if len(self.sparse) > 1:
      self.sparse, self._pending = [self._merge_sparse()], 0
    return self.sparse[0] if self.sparse else (np.zeros(0, np.int64), np.zeros(0, np.int64))

  def _spill_held(self) -> "_Spill":
    """Writes every count held as partitioned runs and forgets them (before decoding them: the decoded records,
    not the codes as well, are what a spill holds); returns the spill."""
    codes, counts = self._held_codes()
    self.table, self.sparse, self._pending, self._buffer, self._buffered = None, [], 0, [], 0
    keys, counts = self._decode(codes, counts)
    del codes
    if self._spill is None:
      self._spill = _Spill(self.spill_dir, self.num_partitions, _tag())
    if keys.shape[0]:
      self._spill.write(keys, counts)
    return self._spill

  def _decode(self, present: np.ndarray, counted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keys int64[R, K], counts float64[R, 2])`` of sorted ``(code, count)`` pairs."""
    length = self.list_size or 0
    present = np.asarray(present, np.int64)
    cell, click = present >> 1, (present & 1) == 1  # codes >= 0: the cell and the click bit
    change = np.diff(cell, prepend=-1) != 0  # present is sorted: a cell's (no click, click) adjacent
    first = np.flatnonzero(change)
    rows = first.shape[0]
    out = np.zeros((rows, 2), np.float64)
    if rows:
      out[:, 0] = np.add.reduceat(counted, first)
      out[np.cumsum(change)[click] - 1, 1] = counted[click]
    per_doc = max(self._per_doc(length), 1)
    keys = np.empty((rows, 3 if self.last_click_state else 2), np.int64)
    cell = cell[first]
    del first, change, click
    np.divmod(cell, per_doc, out=(keys[:, 0], cell))  # the document, and the rest in place of the cell
    if self.last_click_state:
      np.divmod(cell, length + 1, out=(keys[:, 1], keys[:, 2]))
    else:
      keys[:, 1] = cell
    return keys, out

  def result(self) -> "ClickStatistics | PartitionedStatistics":
    """The statistics (kind ``items`` or ``ubm_items``) of everything added: a :class:`ClickStatistics`, or a
    :class:`PartitionedStatistics` where the counts went past the memory budget."""
    length = self.list_size or 0
    if self._spill is not None:
      return self._spill_held().finish(self.kind, length, self.num_sessions, self.num_docs)
    if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:  # nothing held in memory at all
      return self._spill_held().finish(self.kind, length, self.num_sessions, self.num_docs)
    keys, counts = self._decode(*self._held_codes())
    return ClickStatistics(self.kind, keys, counts, self.num_sessions, length, self.num_docs)


def count_codes(code: np.ndarray, *, device: Optional[bool] = None) -> tuple[np.ndarray, np.ndarray]:
  r"""The distinct integer codes, sorted, and how often each occurs: :math:`\{(u, \#\{i : x_i = u\})\}`.

  On the host, ``np.unique``; on the JAX default device (``device=True``, or None on a GPU/TPU backend), a
  sort-based reduction: sort, mark where the value changes, number the runs by a cumulative sum and add ones
  into them with :func:`jax.ops.segment_sum` (codes past int32 are split into two int32 words and sorted as a
  pair, since JAX runs without 64-bit integers by default). Both give the same exact counts.

  Args:
    code: ``int[N]`` codes :math:`\ge 0`.
    device: where to count (None: the device when it is an accelerator).

  Returns:
    ``(codes int64[U], counts int64[U])``.

  >>> count_codes(np.array([5, 2, 5, 5]))
  (array([2, 5]), array([1, 3]))
  >>> [x.tolist() for x in count_codes(np.array([2**40, 3, 2**40]), device=True)]
  [[3, 1099511627776], [1, 2]]
  """
  code = np.asarray(code).ravel()
  if device is None:
    device = _accelerator()
  if not device or code.shape[0] == 0:
    narrow = code.dtype.itemsize <= 4 and np.issubdtype(code.dtype, np.integer)  # sorted as is: int32 sorts faster
    uniq, counts = np.unique(code if narrow else code.astype(np.int64, copy=False), return_counts=True)
    return uniq.astype(np.int64, copy=False), counts.astype(np.int64)
  from ultr_jax.simulation.click_models import _device_count  # noqa: PLC0415 (jax, only where asked)

  return _device_count.count_codes_on_device(code)


def _accelerator() -> bool:
  import jax  # noqa: PLC0415

  return jax.default_backend() in ("gpu", "tpu", "cuda", "rocm")
