r"""Fixed-shape batches of sessions streamed from Parquet session shards.

:class:`SessionStream` reads the shards that :func:`~ultr_jax.data.convert_click_log` writes
(a file, a glob, a directory, or a list of them) one Parquet row group at a time, and yields
batches in the library's layout: item ``i`` of a list is the document shown at position ``i``
(as :func:`~ultr_jax.data.click_log_sessions` lays out a log in memory), every batch has the
same shapes ``[B, L]`` (the last one padded, its padding rows marked by ``valid``), so a jitted
step compiles once. Memory holds a few row groups, never the log.

It is a Grain pipeline (``grain.MapDataset`` over the row groups of all shards: seeded shuffle,
per-process slice, repeat, a read-and-validate map, thread prefetch, then
``grain.experimental.RebatchIterDataset`` to ``B`` sessions), so its position is Grain's
checkpointable iterator state: :meth:`SessionStream.get_state` gives a small JSON-able dict,
and :meth:`SessionStream.set_state` on a stream built with the same arguments resumes exactly.

:func:`session_batches` yields the same batches from a :class:`~ultr_jax.data.ClickLog` in
memory (the stream without shuffling, on one process, gives identical arrays).

Grain and pyarrow are needed only here: ``pip install 'ultr_jax[stream]'``.
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Optional, Protocol, Sequence, Union

import numpy as np

from ultr_jax.data import _shards
from ultr_jax.data.click_log import ClickLog, click_log_sessions
from ultr_jax.data.convert import _pyarrow, session_shard_paths, session_shard_set

__all__ = ["BATCH_KEYS", "SessionStream", "session_batches"]

PathLike = Union[str, os.PathLike]

#: The arrays of every batch (and ``extras`` columns, named as in the shards).
BATCH_KEYS = ("doc_ids", "clicks", "positions", "where", "valid", "session")
_INT32_MAX = np.iinfo(np.int32).max


def _grain():
  try:
    import grain  # noqa: PLC0415
  except ImportError as e:  # pragma: no cover - grain is in the test extras
    raise ImportError("SessionStream is a Grain pipeline: pip install 'ultr_jax[stream]' (or pip install grain)") from e
  return grain


def _empty(n: int, list_size: int, extra_columns: Sequence[str]) -> dict:
  out = {
    "doc_ids": np.zeros((n, list_size), np.int32),
    "clicks": np.zeros((n, list_size), np.float32),
    "positions": np.zeros((n, list_size), np.int32),
    "where": np.zeros((n, list_size), bool),
    "valid": np.zeros(n, bool),
    "session": np.full(n, -1, np.int64),
  }
  for name in extra_columns:
    out[name] = np.zeros((n, list_size), np.float32)
  return out


class _ReadRowGroup:
  """Reads, checks and lays out one row group: ``(index, (path, row_group, first_row)) -> [n, L] arrays``."""

  def __init__(self, list_size: int, extra_columns: Sequence[str], shuffle: bool, seed: int):
    self.list_size, self.extra_columns = list_size, tuple(extra_columns)
    self.shuffle, self.seed = shuffle, seed

  def __call__(self, index: int, unit: tuple) -> dict:
    pa = _pyarrow()
    path, row_group, first_row = unit[:3]
    columns = ["session", "doc_ids", "clicks", "positions", *self.extra_columns]
    try:
      f = _shards.open_parquet(path, "Parquet shard")
    except FileNotFoundError:
      raise FileNotFoundError(f"{path}: no such session shard (it was there when the stream started)") from None
    table = _shards.read_row_group(f, path, row_group, first_row, columns, "session shard")
    n, L = table.num_rows, self.list_size
    where_ = lambda r, field: f"{path}, row {first_row + int(r)}, field {field!r}"  # noqa: E731
    for name in columns:
      col = table.column(name)
      if col.null_count:
        r = np.flatnonzero(pa.compute.is_null(col).to_numpy(zero_copy_only=False))[0]
        raise ValueError(f"{where_(r, name)}: missing value")
    lists = {}
    lengths = None
    for name in columns[1:]:
      col = table.column(name).combine_chunks()
      got: np.ndarray = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
      if lengths is None:
        lengths = got
      elif not np.array_equal(got, lengths):
        r = np.flatnonzero(got != lengths)[0]
        raise ValueError(f"{where_(r, name)}: {got[r]} values, where 'doc_ids' has {lengths[r]}")
      values = col.flatten()
      if values.null_count:
        r = np.repeat(np.arange(n), lengths)[np.flatnonzero(pa.compute.is_null(values).to_numpy(False))[0]]
        raise ValueError(f"{where_(r, name)}: missing value inside the list")
      lists[name] = values.to_numpy(zero_copy_only=False)
    assert lengths is not None  # columns[1:] holds doc_ids, clicks and positions
    row = np.repeat(np.arange(n), lengths)
    pos, docs, clicks = lists["positions"], lists["doc_ids"], lists["clicks"]
    checks = (
      ("positions", pos < 0, "is negative"),
      ("positions", pos >= L, f"is beyond list_size {L} (0-based positions)"),
      ("clicks", (clicks != 0) & (clicks != 1), "is not 0 or 1"),
      ("doc_ids", (docs < 0) | (docs > _INT32_MAX), "is not an id in [0, 2**31)"),
    )
    for name, bad, msg in checks:
      if bad.any():
        k = np.flatnonzero(bad)[0]
        raise ValueError(f"{where_(row[k], name)}: {lists[name][k]} {msg}")
    cell = row * L + pos
    _, first = np.unique(cell, return_index=True)
    if len(first) != len(cell):
      repeated = np.ones(len(cell), bool)
      repeated[first] = False
      k = np.flatnonzero(repeated)[0]
      raise ValueError(f"{where_(row[k], 'positions')}: the session shows two documents at position {pos[k]}")
    out = _empty(n, L, self.extra_columns)
    out["doc_ids"][row, pos] = docs
    out["clicks"][row, pos] = clicks
    out["positions"][row, pos] = pos
    out["where"][row, pos] = True
    out["valid"][:] = True
    out["session"][:] = table.column("session").to_numpy()
    for name in self.extra_columns:
      out[name][row, pos] = lists[name]
    if self.shuffle:  # a seeded permutation inside the row group (the shuffle buffer); index counts epochs too
      perm = np.random.default_rng([self.seed, index]).permutation(n)
      out = {k: v[perm] for k, v in out.items()}
    return out


class _Pad:
  """Pads a short batch to ``batch_size`` rows (``valid`` False, ``session`` -1)."""

  def __init__(self, batch_size: int, list_size: int, extra_columns: Sequence[str]):
    self.batch_size, self.list_size, self.extra_columns = batch_size, list_size, tuple(extra_columns)

  def __call__(self, batch: dict) -> dict:
    n = len(batch["valid"])
    if n == self.batch_size:
      return batch
    out = _empty(self.batch_size, self.list_size, self.extra_columns)
    for k, v in batch.items():
      out[k][:n] = v
    return out


def _processes(process_index: Optional[int], process_count: Optional[int]) -> tuple:
  """``(process_index, process_count)``, JAX's where not given."""
  if process_index is None or process_count is None:
    import jax  # noqa: PLC0415  (only for the defaults)

    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
  if not 0 <= int(process_index) < int(process_count):
    raise ValueError(f"process_index must be in [0, process_count), got {process_index} of {process_count}")
  return int(process_index), int(process_count)


def _files(names) -> str:
  return ", ".join(str(n) for n in names or [])


def _epoch_shuffle(grain, parent, seed: int):
  """``parent`` in a seeded order, a new one each epoch: index ``e * n + i`` is ``perm_e[i] + e * n`` with
  ``perm_e = np.random.default_rng([seed, e]).permutation(n)``.

  Grain's own ``MapDataset.shuffle`` does the same through its ``index_shuffle``, which was measured to cost far
  more per element for a dataset of a few row groups than for one of many: a stream of a few row groups paid
  it for every row group it read (the stream's throughput with this shuffle is in ``benchmarks/RESULTS.md``,
  section "`fit` on a stream, after removing host work").
  """

  class EpochShuffle(grain.MapDataset):
    def __init__(self):
      super().__init__(parent)
      self._perms: dict = {}

    def __len__(self) -> int:
      return len(self._parent)

    def __str__(self) -> str:
      return f"EpochShuffle(seed={seed})"

    def _perm(self, epoch: int) -> np.ndarray:
      perm = self._perms.get(epoch)
      if perm is None:  # computed again by a racing thread at worst: the same array
        perm = np.random.default_rng([seed, epoch]).permutation(len(self._parent))
        self._perms = {**{e: p for e, p in self._perms.items() if e >= epoch - 1}, epoch: perm}
      return perm

    def __getitem__(self, index):
      if isinstance(index, slice):
        return self.slice(index)
      n = len(self._parent)
      epoch, i = divmod(int(index), n)
      return self._parent[int(self._perm(epoch)[i]) + epoch * n]

  return EpochShuffle()


class _ClosableLog(Protocol):
  """What a stream needs of the :class:`~ultr_jax.data.StreamedClickLog` it came from (not imported: a cycle)."""

  @property
  def closed(self) -> bool: ...


class _RowGroupStream:
  r"""The Grain pipeline of the Parquet streams: fixed-shape batches from row groups, resumable, re-iterable.

  A subclass lists its units (one per non-empty Parquet row group: ``(path, row_group, first_row, num_rows,
  ...)``), a reader ``read(index, unit) -> {name: [n, ...]}`` (``index`` counts units over the epochs: it seeds
  the shuffle inside the unit) and a padder ``pad(batch) -> batch`` to ``batch_size`` rows, and calls
  :meth:`_build`. The pipeline: ``grain.MapDataset`` of the units -> seeded ``shuffle`` -> this process's
  slice (``p, p + P, ...``) -> ``repeat`` -> the read ``map`` -> thread prefetch ->
  ``RebatchIterDataset`` to ``batch_size`` rows -> the pad. Its position is Grain's iterator state.

  Iterating: every ``iter(stream)`` (a ``for`` loop, ``list(stream)``) starts a pass over all
  ``num_epochs`` from the beginning, with the same batches every pass; after :meth:`set_state` the next pass
  starts at that position instead; ``next(stream)`` continues the current pass.
  """

  batch_size: int
  process_index: int
  process_count: int
  _log: _ClosableLog  # set by StreamedClickLog.stream: the log whose converted shards the stream keeps alive

  def _build(
    self,
    units: Sequence[tuple],
    *,
    read,
    pad,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_epochs: Optional[int],
    process_index: Optional[int],
    process_count: Optional[int],
    num_threads: int,
    prefetch: int,
    config: dict,
    shards: _shards.ShardSet,
  ) -> None:
    grain = _grain()
    if int(batch_size) < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if num_epochs is not None and int(num_epochs) < 1:
      raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs}")
    self.batch_size = int(batch_size)
    self.process_index, self.process_count = _processes(process_index, process_count)
    self._config = {
      **shards.identity,
      **config,
      "row_groups": len(units),
      "batch_size": self.batch_size,
      "shuffle": bool(shuffle),
      "seed": int(seed),
      "num_epochs": num_epochs,
      "process": [self.process_index, self.process_count],
    }
    ds = grain.MapDataset.source(list(units))
    if shuffle:
      ds = _epoch_shuffle(grain, ds, int(seed))
    ds = ds[self.process_index :: self.process_count]
    self._my_units: list[tuple] = []
    for i in range(len(ds)):
      unit = ds[i]
      assert unit is not None  # grain's None marks a filtered-out element; nothing is filtered here
      self._my_units.append(unit)
    if num_epochs != 1:
      ds = ds.repeat(num_epochs)
    ds = ds.map_with_index(read)
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=int(num_threads), prefetch_buffer_size=int(prefetch)))
    it = grain.experimental.RebatchIterDataset(it, batch_size=self.batch_size, drop_remainder=False)
    self._dataset = it.map(pad)
    self._iterator = iter(self._dataset)
    self._positioned = True  # the iterator sits where a pass should start (built, or moved by set_state)
    self._num_epochs = num_epochs

  @property
  def _rows_per_epoch(self) -> int:
    return sum(int(u[3]) for u in self._my_units)

  @property
  def num_batches(self) -> Optional[int]:
    """Batches this process yields over all epochs (None without end)."""
    if self._num_epochs is None:
      return None
    return -(-self._rows_per_epoch * int(self._num_epochs) // self.batch_size)

  def _check_open(self) -> None:
    """Refuses to read on once the click log this stream came from (:meth:`StreamedClickLog.stream`) is closed."""
    log = getattr(self, "_log", None)
    if log is not None and log.closed:
      raise ValueError(
        f"the click log this stream reads was closed ({log!r}): close() removed the shards it converted; "
        "iterate the stream before closing its log (or inside `with open_click_log(...) as log:`), or open the "
        "log again"
      )

  def __iter__(self) -> Iterator[dict]:
    """Starts a pass: from the beginning (the same order every pass), or where :meth:`set_state` put it."""
    self._check_open()
    if not self._positioned:
      self._iterator = iter(self._dataset)
    self._positioned = False
    return self

  def __next__(self) -> dict:
    self._check_open()
    self._positioned = False
    return next(self._iterator)

  def identity(self) -> str:
    r"""What the batches are a function of: a SHA-256 (hex) of the shard set and the options that change them.

    .. math:: \mathrm{identity} = \mathrm{SHA256}(\mathrm{JSON}(\text{conversion id}, \text{files read},
       B, L, \text{shuffle}, \text{seed}, \text{epochs}, (p, P), \ldots))

    The shard set is the ``conversion_id`` of its manifest (a digest of the shards' content) and the names of
    the files read; not the directory's path (a moved conversion keeps its identity), the reader threads,
    the prefetch or the position (:meth:`get_state`). Two streams with one identity yield the same batches.

    Returns:
      64 hex digits.

    >>> import pathlib, tempfile
    >>> from ultr_jax.data import SessionStream, convert_click_log
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "log.tsv").write_text("session_id\tquery_id\tdoc_id\tposition\tclick\ns1\tq\ta\t1\t0\n")
    >>> _ = convert_click_log(d / "log.tsv", d / "shards")
    >>> a, b, c = (SessionStream(d / "shards", batch_size=n, process_count=1) for n in (2, 2, 3))
    >>> len(a.identity()), a.identity() == b.identity(), a.identity() == c.identity()
    (64, True, False)
    """
    return _shards.digest(self._config)

  def get_state(self) -> dict:
    """The stream's position: a JSON-able dict (Grain's iterator state, the shard set and the stream's arguments)."""
    return {"config": dict(self._config), "grain": self._iterator.get_state()}

  def set_state(self, state: dict) -> None:
    """Moves to a position :meth:`get_state` gave, on a stream over the same shards built with the same arguments.

    Raises:
      ValueError: the state comes from a stream over other shards (naming both conversions) or with other
        arguments (naming them).
    """
    config = json.loads(json.dumps(self._config))
    theirs = json.loads(json.dumps(state.get("config", {})))
    if theirs.get("shards") != config["shards"] or theirs.get("files") != config["files"]:
      raise ValueError(
        f"the state is of a stream over other shards (conversion {str(theirs.get('shards'))[:16]}, files "
        f"{_files(theirs.get('files'))}), not this stream's (conversion {config['shards'][:16]}, files "
        f"{_files(config['files'])}); a position applies only to the shards it was taken on"
      )
    if theirs != config:
      diff = sorted(k for k in set(config) | set(theirs) if config.get(k) != theirs.get(k))
      raise ValueError(f"the state is of a stream with other arguments ({', '.join(diff)}); build it as that one was")
    self._iterator.set_state(state["grain"])
    self._positioned = True


class SessionStream(_RowGroupStream):
  r"""Fixed-shape batches of sessions from Parquet session shards, in bounded memory.

  Each batch is a dict of NumPy arrays (:data:`BATCH_KEYS`):
  ``doc_ids int32[B, L]`` (the dense (query, document) ids of
  :attr:`~ultr_jax.data.ClickLog.items`), ``clicks float32[B, L]``,
  ``positions int32[B, L]`` (0-based; item ``i`` is position ``i``, so
  ``positions[b, i] = i`` where shown), ``where bool[B, L]``, ``valid bool[B]``
  (False on the padding rows of the last batch) and ``session int64[B]`` (the
  session's index in the source log, -1 on padding), plus ``float32[B, L]``
  for each of ``extra_columns``. A session with no documents (a Baidu-ULTR page
  without results) is a row with ``where`` all False.

  Order: without ``shuffle``, the shards' order (the source log's). With it, a
  seeded permutation of the row groups of all shards (a new one each epoch),
  and a seeded permutation of the sessions inside each row group: the shuffle
  buffer is one row group (``row_group_size`` of the conversion). The same
  seed gives the same batches.

  Passes: every ``iter(stream)`` (a ``for`` loop, ``list(stream)``) starts a
  pass over all ``num_epochs`` from the beginning, with the same batches as
  the first pass, so a stream can be read again (fit a click model, then
  score it). After :meth:`set_state`, the next pass starts at that position
  instead; ``next(stream)`` continues the current pass.

  Processes: the row groups (after the shuffle) are dealt round-robin, process
  ``p`` of ``P`` reading ``p, p + P, ...``: the processes' batches are
  disjoint and together cover the log. Shapes agree across processes:
  ``list_size`` defaults to the longest list of the whole conversion (from
  its manifest), and :attr:`num_docs` is its vocabulary size, whichever of
  its shards a process is given.

  Integrity: the shards must be listed by their directory's manifest
  (``_manifest.json``, written last by the converter) and all be of one
  conversion, each with the size and footer the manifest records; every page
  is read with its CRC-32 verified. An interrupted conversion (no manifest),
  a foreign or leftover file, shards of two conversions or a flipped byte
  are errors naming the file, never other data.
  :meth:`identity` names the shard set and the options;
  :meth:`get_state` records it, and :meth:`set_state` refuses a state taken
  on other shards.
  Processes may get different numbers of batches (:attr:`num_batches`); a
  multi-host loop steps ``min`` of them, or pads with ``valid`` False batches.

  Args:
    source: a shard, a glob, a directory of shards or a list of them.
    batch_size: ``B`` sessions per batch.
    list_size: ``L`` (default: the longest list in the shards); a session
      with a position >= ``L`` is an error.
    shuffle: shuffle row groups and the sessions in them.
    seed: the shuffle's seed.
    num_epochs: passes over the data (None: without end).
    process_index: this process, in ``[0, process_count)`` (default
      ``jax.process_index()``).
    process_count: the number of processes (default ``jax.process_count()``).
    extra_columns: further per-document shard columns to batch.
    num_threads: Grain's reader threads.
    prefetch: the row groups read ahead (memory is about ``prefetch`` row
      groups).

  Raises:
    FileNotFoundError: a missing shard (naming it).
    ValueError: a shard not listed by a manifest (no ``_manifest.json``: an
      interrupted conversion, or a file not written by ultr_jax; another
      conversion's shard), shards of two conversions, a size or footer that
      is not the manifest's, an unreadable or truncated shard, a shard
      without a session column (naming the file and field); while iterating,
      a page whose checksum fails (naming the file and row group), a bad row (list
      lengths that disagree, a negative or too large position, two documents
      at one position, a click not 0/1, a missing value), naming the file,
      row and field.

  >>> import pathlib, tempfile
  >>> from ultr_jax.data import convert_click_log
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> _ = (d / "log.tsv").write_text("session_id\tquery_id\tdoc_id\tposition\tclick\n"
  ...                               "s1\tq\ta\t1\t0\ns1\tq\tb\t2\t1\ns2\tq\tb\t1\t1\ns3\tq\tc\t2\t0\n")
  >>> _ = convert_click_log(d / "log.tsv", d / "shards")
  >>> stream = SessionStream(d / "shards", batch_size=2, process_index=0, process_count=1)
  >>> [b["doc_ids"].tolist() for b in stream]
  [[[0, 1], [1, 0]], [[0, 2], [0, 0]]]
  >>> stream = SessionStream(d / "shards", batch_size=2, process_index=0, process_count=1)
  >>> b = next(stream); state = stream.get_state()
  >>> resumed = SessionStream(d / "shards", batch_size=2, process_index=0, process_count=1)
  >>> resumed.set_state(state)
  >>> next(resumed)["where"].tolist(), next(resumed, None) is None
  ([[False, True], [False, False]], True)
  """

  def __init__(
    self,
    source: Union[PathLike, Sequence[PathLike]],
    *,
    batch_size: int,
    list_size: Optional[int] = None,
    shuffle: bool = False,
    seed: int = 0,
    num_epochs: Optional[int] = 1,
    process_index: Optional[int] = None,
    process_count: Optional[int] = None,
    extra_columns: Sequence[str] = (),
    num_threads: int = 2,
    prefetch: int = 4,
  ):
    self.paths = session_shard_paths(source)
    self.extra_columns = tuple(extra_columns)
    shards = session_shard_set(self.paths)
    units = []
    for path in self.paths:
      missing = [c for c in self.extra_columns if c not in shards.schemas[path].names]
      if missing:
        raise ValueError(f"{path}: field {missing[0]!r}: no such column (extra_columns)")
      md = shards.metadata[path]
      first = 0
      for g in range(md.num_row_groups):
        rows = md.row_group(g).num_rows
        if rows:
          units.append((path, g, first, rows))
        first += rows
    sizes = shards.sizes  # the whole conversion's, from its manifest
    num_items, num_positions = int(sizes.get("num_items", 0)), int(sizes.get("num_positions", 0))
    self.list_size = int(list_size) if list_size is not None else max(num_positions, 1)
    if self.list_size < 1:
      raise ValueError(f"list_size must be >= 1, got {list_size}")
    #: The vocabulary size (the largest ``doc_ids`` + 1 over all shards).
    self.num_docs = num_items
    self._build(
      units,
      read=_ReadRowGroup(self.list_size, self.extra_columns, bool(shuffle), int(seed)),
      pad=_Pad(int(batch_size), self.list_size, self.extra_columns),
      batch_size=batch_size,
      shuffle=shuffle,
      seed=seed,
      num_epochs=num_epochs,
      process_index=process_index,
      process_count=process_count,
      num_threads=num_threads,
      prefetch=prefetch,
      config={"paths": len(self.paths), "list_size": self.list_size, "extra_columns": list(self.extra_columns)},
      shards=shards,
    )

  @property
  def num_sessions(self) -> int:
    """Sessions this process reads per epoch."""
    return self._rows_per_epoch

  # The shared pipeline's public members, documented here too.
  num_batches = _RowGroupStream.num_batches
  identity = _RowGroupStream.identity
  get_state = _RowGroupStream.get_state
  set_state = _RowGroupStream.set_state


def session_batches(log: ClickLog, *, batch_size: int, list_size: Optional[int] = None) -> Iterator[dict]:
  r"""The batches of :class:`SessionStream`, from a session :class:`~ultr_jax.data.ClickLog` in memory.

  Sessions in order (:func:`~ultr_jax.data.click_log_sessions`' rows), ``B`` per batch, the last
  one padded (``valid`` False, ``session`` -1). A stream without shuffling on one process over the
  shards converted from the same file yields identical arrays.

  Args:
    log: a session click log (a ``session_id`` column, or a Baidu/Yandex log).
    batch_size: ``B``.
    list_size: ``L`` (default: the log's largest position + 1).

  Returns:
    An iterator of dicts with the keys :data:`BATCH_KEYS`.

  Raises:
    ValueError: ``batch_size`` < 1; the errors of :func:`~ultr_jax.data.click_log_sessions`.

  >>> import pathlib, tempfile
  >>> from ultr_jax.data import read_click_log
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.tsv"
  >>> _ = p.write_text("session_id\tquery_id\tdoc_id\tposition\tclick\ns1\tq\ta\t1\t0\ns1\tq\tb\t2\t1\n"
  ...                  "s2\tq\tb\t1\t1\n")
  >>> [(b["clicks"].tolist(), b["valid"].tolist()) for b in session_batches(read_click_log(p), batch_size=3)]
  [([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]], [True, True, False])]
  """
  if int(batch_size) < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  s = click_log_sessions(log, list_size=list_size)
  num, L = s["where"].shape
  B = int(batch_size)
  for start in range(0, num, B):
    n = min(B, num - start)
    out = _empty(B, L, ())
    sl = slice(start, start + n)
    out["doc_ids"][:n] = s["doc_ids"][sl]
    out["clicks"][:n] = s["clicks"][sl]
    out["where"][:n] = s["where"][sl]
    out["positions"][:n] = np.where(s["where"][sl], np.arange(L, dtype=np.int32), 0)
    out["valid"][:n] = True
    out["session"][:n] = np.arange(start, start + n)
    yield out
