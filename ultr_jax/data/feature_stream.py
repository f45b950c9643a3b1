r"""Feature datasets as streams: Parquet list files read as fixed-shape batches in bounded memory.

:class:`FeatureStream` reads ranked lists with features from Parquet files holding **one row per list** (a
query, or a result page) and per-document values as lists, one Parquet row group at a time, and yields the
batches of :func:`~ultr_jax.data.batches` (``features [B, L, F]``, ``labels [B, L]``, ``where [B, L]``,
``qid [B]``, the extras and ``doc_ids [B, L]``), so a jitted step compiles once and memory holds a few row
groups, never the dataset. It reads:

* **feature shards** written by :func:`convert_svmlight` (an SVMlight/LETOR file with its ``.query`` file,
  converted block by block), :func:`~ultr_jax.data.convert_baidu_ultr` (Baidu-ULTR's files with one row per
  document, converted record batch by record batch) or :func:`write_feature_shards` (a
  :class:`~ultr_jax.data.RankingDataset` in memory);
* **Baidu-ULTR** Parquet files in the page-per-row layout (:func:`~ultr_jax.data.load_baidu_ultr`'s second
  layout: ``query_id``, list columns ``position``, ``click``, ``label`` and the feature columns), directly.

The columns (a list per row, one value per document, all of a row's lists of one length):

======================  ====================================  =============================================
``query_id``            integer                               the batch's ``qid``.
feature columns         ``list<fixed_size_binary(4 w)>``,     ``w`` values per document (``F`` is the sum of
                        ``list<number>`` or                   the widths), concatenated in the order given.
                        ``list<list<number>>``                The binary form (the shards') holds the
                                                              document's ``w`` little-endian float32 values.
``label``               ``list<number>``                      graded relevance >= 0 (else 0).
``position``            ``list<integer>``                     1-based rank: document at ``position`` is item
                                                              ``position - 1`` (else: the list's order).
``click``               ``list<integer>``                     0/1, batched as ``extras["clicks"]``.
``doc_id``              ``list<integer>``                     the batch's ``doc_ids`` (else: the document's
                                                              index in the lists of all files, as
                                                              :func:`~ultr_jax.data.load_baidu_ultr` numbers
                                                              them).
``frequency_bucket``    integer (or a list)                   ``extras["frequency_bucket"] int32[B]``.
extra columns           numbers, or lists of numbers          ``extras``: ``[B, L]`` per document, ``[B]``
                                                              per list.
======================  ====================================  =============================================

Features are stored as one fixed-size binary value per document because Parquet decodes a nested
``list<list<float>>`` column value by value (its repetition and definition levels): the time to read one row
group of 1024 lists x 20 documents x 136 features both ways, nested floats against ``list<fixed_size_binary>``,
is measured in ``benchmarks/RESULTS.md`` (section "`fit` on a stream, after removing host work").

Shards of ultr_jax are read only as their manifest (``_manifest.json``, written last) lists them, with every
page's CRC-32 verified, as :class:`~ultr_jax.data.SessionStream` reads session shards; Parquet files written
elsewhere (Baidu-ULTR's page-per-row files: no ``ultr_jax.*`` footer keys, no manifest) are read as they are.
Shuffling, process splitting, resuming, :meth:`~FeatureStream.identity` and passes are those of
:class:`~ultr_jax.data.SessionStream` (the same Grain pipeline): row groups are shuffled (a new order each epoch) and the lists inside each, row groups
are dealt round-robin to the processes, :meth:`FeatureStream.get_state` / :meth:`~FeatureStream.set_state`
resume exactly, and every ``iter(stream)`` starts a new pass.

pyarrow and grain are needed only here: ``pip install 'ultr_jax[stream]'``.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import pathlib
from typing import Iterator, Optional, Sequence, Union

import numpy as np

from ultr_jax.data import _io
from ultr_jax.data import _shards
from ultr_jax.data import svmlight as _svm
from ultr_jax.data.baidu import BERT_FEATURES, LTR_FEATURES
from ultr_jax.data._shards import ShardWriter as _ShardWriter
from ultr_jax.data._shards import pyarrow as _shards_pyarrow
from ultr_jax.data.dataset import RankingDataset, is_per_item
from ultr_jax.data.stream import _RowGroupStream

__all__ = ["FeatureStream", "convert_svmlight", "write_feature_shards"]

PathLike = Union[str, os.PathLike]
_FEATURE_SETS = {"bert": BERT_FEATURES, "ltr": LTR_FEATURES}
_F32_MAX = float(np.finfo(np.float32).max)


def _pyarrow():
  return _shards_pyarrow("feature shards")


def _is_list(pa, t) -> bool:
  return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_number(pa, t) -> bool:
  return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


# ----------------------------------------------------------------------------
# Writing shards.


def _binary_features(pa, values: np.ndarray):
  """``float32[D, F]`` as a ``fixed_size_binary(4 F)`` array, one value per document (no copy when contiguous)."""
  values = np.ascontiguousarray(values, dtype="<f4")
  width = values.shape[1] * 4
  return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(values), [None, pa.py_buffer(values)])


def _lists(pa, offsets: np.ndarray, values):
  return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)


@_shards.converts_into_out_dir  # the workdir lock: one writer; a failure leaves it incomplete
def write_feature_shards(
  ds: RankingDataset,
  out_dir: PathLike,
  *,
  shard_size: int = 1 << 16,
  row_group_size: int = 1024,
  overwrite: bool = False,
) -> list:
  r"""Writes a :class:`~ultr_jax.data.RankingDataset` as Parquet feature shards for :class:`FeatureStream`.

  One row per query, in order: ``query_id`` (``qid``), ``features`` (each shown item's ``F`` float32 values),
  ``label``, ``position`` (the item's index + 1, so masked items inside a list stay gaps), ``doc_id`` (when
  the dataset has ``doc_ids``) and every extra under its own name (per item: a list of its dtype; per query:
  a value). ``FeatureStream(out_dir, batch_size=B)`` then yields ``batches(ds, B, shuffle=False)``.

  Args:
    ds: the dataset.
    out_dir: the directory for ``part-NNNNN.parquet`` and, written last, the manifest ``_manifest.json`` that
      :class:`FeatureStream` requires (created; it must hold no shards yet).
    shard_size: lists per file.
    row_group_size: lists per Parquet row group: the unit of reading, shuffling and splitting over processes.
    overwrite: replace a conversion already in ``out_dir`` (complete, or interrupted: shards without a
      manifest); only its ``part-NNNNN.parquet`` files and manifest are removed.

  Returns:
    The shard paths, in order.

  Raises:
    ValueError: an extra named like a shard column, or of another shape than ``[Q, L]`` or ``[Q]`` (naming it);
      ``out_dir`` holding a conversion without ``overwrite``.

  >>> import tempfile
  >>> from ultr_jax.data import make_synthetic, batches
  >>> ds = make_synthetic(num_train=5, num_valid=1, num_test=1, list_size=3, num_features=2).train
  >>> paths = write_feature_shards(ds, tempfile.mkdtemp(), row_group_size=2)
  >>> [(b["features"].shape, b["qid"].tolist()) for b in FeatureStream(paths, batch_size=4, process_count=1)]
  [((4, 3, 2), [0, 1, 2, 3]), ((4, 3, 2), [4, -1, -1, -1])]
  """
  pa = _pyarrow()
  L, F = ds.list_size, ds.num_features
  extras = [(name, is_per_item(np.asarray(v), L), np.asarray(v).dtype) for name, v in ds.extras.items()]
  taken = {"query_id", "features", "label", "position", "doc_id", "click", "frequency_bucket"}
  for name, per_item, dtype in extras:
    if name in taken:
      raise ValueError(f"extras[{name!r}]: the name of a feature-shard column; rename the extra")
    if np.asarray(ds.extras[name]).ndim != (2 if per_item else 1):
      raise ValueError(f"extras[{name!r}]: shape {np.asarray(ds.extras[name]).shape}; expected [Q, L] or [Q]")
  fields = [
    ("query_id", pa.int64()),
    ("features", pa.list_(pa.binary(4 * F))),
    ("label", pa.list_(pa.float32())),
    ("position", pa.list_(pa.int32())),
  ]
  if ds.doc_ids is not None:
    fields.append(("doc_id", pa.list_(pa.int64())))
  for name, per_item, dtype in extras:
    t = pa.from_numpy_dtype(dtype)
    fields.append((name, pa.list_(t) if per_item else t))
  schema = pa.schema(fields)
  meta = {
    "format": "features",
    "feature_columns": json.dumps(["features"]),
    "num_features": F,
    "extras": json.dumps([[n, p, np.dtype(d).name] for n, p, d in extras]),
    "source": "RankingDataset",
    "kind": "features",
  }
  writer = _ShardWriter(out_dir, schema, shard_size, row_group_size, meta, overwrite=overwrite)
  try:
    step = max(1, min(int(row_group_size), 1 << 14))
    for a in range(0, ds.num_queries, step):
      sl = slice(a, min(a + step, ds.num_queries))
      where = ds.where[sl]
      q, i = np.nonzero(where)
      offsets = np.concatenate(([0], np.cumsum(where.sum(1))))
      cols = [
        pa.array(ds.qid[sl].astype(np.int64)),
        _lists(pa, offsets, _binary_features(pa, ds.features[sl][q, i])),
        _lists(pa, offsets, pa.array(ds.labels[sl][q, i].astype(np.float32))),
        _lists(pa, offsets, pa.array((i + 1).astype(np.int32))),
      ]
      if ds.doc_ids is not None:
        cols.append(_lists(pa, offsets, pa.array(ds.doc_ids[sl][q, i].astype(np.int64))))
      for name, per_item, _ in extras:
        v = np.asarray(ds.extras[name])[sl]
        cols.append(_lists(pa, offsets, pa.array(v[q, i])) if per_item else pa.array(v))
      writer.add(pa.Table.from_arrays(cols, schema=schema), list_size=int(i.max()) + 1 if len(i) else 0)
    return writer.finish()
  except BaseException:
    writer.abort()
    raise


# ----------------------------------------------------------------------------
# SVMlight, block by block.


def _blocks(path: pathlib.Path, block_size: int) -> Iterator[tuple]:
  """``(first line number, bytes)`` of whole lines, about ``block_size`` bytes each (gzip read on the fly)."""
  with open(path, "rb") as raw:
    gz = raw.read(2) == _io.GZIP_MAGIC
  line, carry = 1, b""
  with (gzip.open if gz else open)(path, "rb") as f:
    while True:
      try:
        chunk = f.read(block_size)
      except _io.DECODER_ERRORS as e:
        raise ValueError(f"{path}: a gzip file that cannot be decompressed ({type(e).__name__}: {e})") from e
      if not chunk:
        break
      data = carry + chunk
      cut = data.rfind(b"\n") + 1
      if cut == 0:
        carry = data
        continue
      yield line, data[:cut]
      line += data.count(b"\n", 0, cut)
      carry = data[cut:]
  if carry:
    yield line, carry


def _parse_block(path, first_line: int, block: bytes):
  """The rows of a block: ``(labels, qid or None, indptr, idx, val, line)`` with the file's line numbers."""
  parsed = _svm._parse_fast(block)
  if parsed is None:
    parsed = _svm._parse_reference(block, path, first_line)
  else:
    parsed = parsed[:5] + (parsed[5] + (first_line - 1),)
  return parsed


def _svmlight_rows(path, block_size, num_features, max_label, state):
  """Parses and checks ``path`` block by block: yields ``(labels, qid or None, indptr, idx, val, line)``
  (float32 labels and values, 1-based ids). ``state`` collects the file's totals (rows, values, largest id,
  whether lines carry ``qid:``)."""
  f_check = _svm._I32_MAX if num_features is None else int(num_features)
  for first_line, block in _blocks(path, block_size):
    labels, qid, indptr, idx, val, line = _parse_block(path, first_line, block)
    if not len(labels):
      continue
    has = qid is not None
    if state.setdefault("has_qid", has) != has:  # the block's first line against the lines before it
      raise _svm._err(path, int(line[0]), "qid", "some lines have a qid: field and others do not")
    _, labels, val = _svm._validate(path, labels, indptr, idx, val, line, f_check, max_label)
    state["rows"] = state.get("rows", 0) + len(labels)
    state["values"] = state.get("values", 0) + len(idx)
    state["max_id"] = max(state.get("max_id", 0), int(idx.max()) if len(idx) else 0)
    state.setdefault("first_line", int(line[0]))
    yield labels, qid, indptr, idx, val, line


@_shards.converts_into_out_dir  # the workdir lock: one writer; a failure leaves it incomplete
def convert_svmlight(
  path: PathLike,
  out_dir: PathLike,
  *,
  query_path: Optional[PathLike] = None,
  num_features: Optional[int] = None,
  max_label: Optional[float] = 4,
  shard_size: int = 1 << 16,
  row_group_size: int = 1024,
  block_size: int = 1 << 24,
  overwrite: bool = False,
) -> list:
  r"""Converts an SVMlight/LETOR file to Parquet feature shards, reading it block by block.

  The shards hold one row per query, in file order (``query_id``, ``features``, ``label``, ``doc_id``: the
  row's 0-based data line, see the module docstring), and :class:`FeatureStream` batches them as
  :func:`~ultr_jax.data.load_svmlight` of the same file, with the same options, lays it out. The file is read
  twice, ``block_size`` bytes of whole lines at a time (gzip decompressed on the fly): first to check it and
  find ``F`` (the largest feature id, unless given), then to write the shards. Memory holds a block, a row
  group of lists and 16 bytes per query.

  Queries come from the ``qid:`` fields, whose rows must be contiguous (a qid that comes back after another
  query began is an error: ``load_svmlight`` merges such rows, which a reader of one block at a time cannot),
  or from the ``.query`` file (``query_path``, default ``path + ".query"``; it takes precedence when given).

  Args:
    path: the data file.
    out_dir: the directory for ``part-NNNNN.parquet`` and the manifest (see :func:`write_feature_shards`).
    query_path: a LightGBM-style group file, one document count per query in order (None: ``path + ".query"``,
      read only where the lines carry no ``qid:``).
    num_features: ``F``; ids above it are an error (None: the largest id, which may be at most
      ``max(65536, number of values in the file)``, as in :func:`~ultr_jax.data.read_svmlight`).
    max_label: labels outside ``[0, max_label]`` are an error (None: no check).
    shard_size: queries per shard file.
    row_group_size: queries per Parquet row group (the unit of reading, shuffling and splitting over
      processes).
    block_size: bytes of text parsed at a time.
    overwrite: replace a conversion already in ``out_dir`` (see :func:`write_feature_shards`).

  Returns:
    The shard paths, in order.

  Raises:
    ValueError: the errors of :func:`~ultr_jax.data.read_svmlight` (naming the file, the 1-based line and the
      field; with several errors in a file, the first block's), and a qid whose rows are not contiguous. Nothing
      is left in ``out_dir`` then.

  >>> import pathlib, tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> _ = (d / "a.txt").write_text("2 qid:7 1:0.5 3:2\n0 qid:7 2:1\n1 qid:9 3:4\n")
  >>> paths = convert_svmlight(d / "a.txt", d / "shards")
  >>> (b,) = FeatureStream(paths, batch_size=2, process_count=1)
  >>> b["features"].tolist(), b["qid"].tolist(), b["doc_ids"].tolist()
  ([[[0.5, 0.0, 2.0], [0.0, 1.0, 0.0]], [[0.0, 0.0, 4.0], [0.0, 0.0, 0.0]]], [7, 9], [[0, 1], [2, -1]])
  """
  pa = _pyarrow()
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no such file")
  if num_features is not None and not 0 <= int(num_features) <= _svm._I32_MAX:
    raise ValueError(f"num_features must be in [0, {_svm._I32_MAX}], got {num_features}")
  if int(block_size) < 1:
    raise ValueError(f"block_size must be >= 1, got {block_size}")
  explicit_q = query_path is not None
  qpath = pathlib.Path(query_path) if explicit_q else pathlib.Path(str(path) + ".query")
  out_dir = _shards.prepare_out_dir(out_dir, overwrite)  # before reading: a used directory fails at once

  # Pass 1: check every line, find F, and the query runs of the qid: fields (16 bytes per query).
  state: dict = {}
  runs = _query_runs(_svmlight_rows(path, block_size, num_features, max_label, state), not explicit_q)
  if not state.get("rows"):
    raise _svm._err(path, 1, "label", "empty file (no data lines)")
  rows = state["rows"]
  limit = None  # an inferred F above this is the in-memory reader's "absurdly large" error (raised in pass 2)
  if num_features is None:
    max_id: int = state["max_id"]  # the largest feature id (an int, set by pass 1)
    num_features = max_id
    if num_features > _io.extent_limit(state["values"]):
      limit = _io.extent_limit(state["values"])
  F = int(num_features)
  counts = bounds = None
  if explicit_q or not state["has_qid"]:
    if not state["has_qid"] and not qpath.is_file():
      raise _svm._err(
        path, state["first_line"], "qid", f"lines carry no qid: field and the .query file {qpath} is missing"
      )
    counts = _svm._read_query_file(qpath, rows, path)  # one count per query
    bounds = np.cumsum(counts)
  else:
    _check_contiguous(path, np.concatenate(runs))
    del runs

  if limit is not None:  # the in-memory reader's error, at the first id above the limit (nothing is written)
    _check_feature_ids(path, _svmlight_rows(path, block_size, F, max_label, {}), limit, state["values"])

  # Pass 2: the rows again, grouped into queries, written as shards.
  schema = pa.schema(
    [("query_id", pa.int64()), ("features", pa.list_(pa.binary(4 * F))), ("label", pa.list_(pa.float32()))]
    + [("doc_id", pa.list_(pa.int64()))]
  )
  meta = {
    "format": "features",
    "feature_columns": json.dumps(["features"]),
    "num_features": F,
    "extras": "[]",
    "source": str(path),
    "kind": "features",
  }
  writer = _ShardWriter(out_dir, schema, shard_size, row_group_size, meta)
  try:
    _write_queries(pa, writer, schema, _svmlight_rows(path, block_size, F, max_label, {}), F, bounds)
    return writer.finish()
  except BaseException:
    writer.abort()
    raise


def _query_runs(blocks, use_qid: bool) -> list:
  """Reads ``blocks`` (of :func:`_svmlight_rows`) to their end; with ``use_qid``, the ``[qid, first line]`` of
  each run of rows of one qid (a run may go on across blocks), one array per block."""
  runs, last = [], None
  for _, qid, _, _, _, line in blocks:
    if qid is not None and use_qid:
      new = np.ones(len(qid), bool)
      new[1:] = qid[1:] != qid[:-1]
      if last is not None and qid[0] == last:
        new[0] = False
      runs.append(np.stack([qid[new], line[new]], 1))
      last = qid[-1]
  return runs


def _check_contiguous(path, runs: np.ndarray) -> None:
  """An error at the first line where a qid's rows come back after other queries' (``runs``: ``[qid, line]``)."""
  order = np.argsort(runs[:, 0], kind="stable")
  again = np.flatnonzero(runs[order[1:], 0] == runs[order[:-1], 0])
  if len(again):
    k = order[1:][again]
    k = k[np.argmin(runs[k, 1])]
    first = runs[order[np.searchsorted(runs[order, 0], runs[k, 0])], 1]
    raise _svm._err(
      path,
      int(runs[k, 1]),
      "qid",
      f"qid {runs[k, 0]} comes back after other queries (its rows began on line {first}): convert_svmlight "
      "needs each query's rows together (sort the file by qid, keeping the rows' order), or use load_svmlight",
    )


def _check_feature_ids(path, blocks, limit: int, values: int) -> None:
  """The in-memory reader's error at the first feature id above ``limit`` in ``blocks`` (a file of ``values``
  values)."""
  for _, _, indptr, idx, _, line in blocks:
    if (idx > limit).any():
      k = int(np.flatnonzero(idx > limit)[0])
      raise _svm._err(
        path,
        int(line[np.searchsorted(indptr, k, side="right") - 1]),
        "feature id",
        f"feature id {idx[k]} is absurdly large for a file of {values} values (more than {limit}); "
        "pass num_features= to allow it",
      )


def _write_queries(pa, writer, schema, blocks, F: int, bounds) -> None:
  """Adds the rows of ``blocks`` to ``writer`` as queries of ``F`` dense features: grouped by their qid, or with
  ``bounds`` (the .query file's cumulative counts) by those."""
  carry = None  # the rows of the last query of the block before (it may go on)
  row0 = 0
  for labels, qid, indptr, idx, val, _ in blocks:
    n = len(labels)
    dense = np.zeros((n, F), np.float32)
    dense[np.repeat(np.arange(n), np.diff(indptr)), idx - 1] = val
    doc = np.arange(row0, row0 + n)
    if bounds is not None:
      group = np.searchsorted(bounds, doc, side="right")
      key = qid if qid is not None else group
    else:
      group = key = qid
    block = {"label": labels, "features": dense, "doc": doc, "group": group, "key": key}
    if carry is not None:
      block = {k: np.concatenate([carry[k], v]) for k, v in block.items()}
    row0 += n
    g = block["group"]
    starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    complete = int(starts[-1])
    if bounds is not None and row0 == bounds[-1]:
      complete = len(g)  # the .query file says the last query ends here
    carry = {k: v[complete:] for k, v in block.items()}
    _add_queries(pa, writer, schema, {k: v[:complete] for k, v in block.items()}, starts[starts < complete])
  if carry is not None and len(carry["group"]):
    _add_queries(pa, writer, schema, carry, np.array([0]))


def _add_queries(pa, writer, schema, rows: dict, starts: np.ndarray) -> None:
  """Adds the queries of ``rows`` (each query's rows beginning at ``starts``) to the writer."""
  if not len(starts):
    return
  n = len(rows["group"])
  offsets = np.append(starts, n)
  # The query's qid: its last row's (the in-memory reader assigns the rows' qids in order).
  qid = rows["key"][offsets[1:] - 1].astype(np.int64)
  table = pa.Table.from_arrays(
    [
      pa.array(qid),
      _lists(pa, offsets, _binary_features(pa, rows["features"])),
      _lists(pa, offsets, pa.array(rows["label"], pa.float32())),
      _lists(pa, offsets, pa.array(rows["doc"], pa.int64())),
    ],
    schema=schema,
  )
  writer.add(table, list_size=int(np.diff(offsets).max()))


# ----------------------------------------------------------------------------
# Reading.


def _feature_names(features) -> tuple:
  if isinstance(features, str):
    if features in _FEATURE_SETS:
      return _FEATURE_SETS[features]
    return (features,)
  names = tuple(features)
  if not names:
    raise ValueError("features: give at least one column")
  return names


def _paths(source) -> list:
  return _io.expand_sources(
    source,
    what="Parquet files",
    directory=lambda d: _shards.manifest_paths(d, "feature shards"),
    missing="no such Parquet file",
    sort=True,
  )


class _Column:
  """How one column is read: ``kind`` 'binary' (float32 bytes), 'vector' (list of numbers) or 'scalar'."""

  def __init__(self, name: str, kind: str, width: int, per_item: bool = True, dtype=None, column: str = ""):
    self.name, self.kind, self.width, self.per_item, self.dtype = name, kind, width, per_item, dtype
    self.column = column or name  # the file's column (``click`` for the ``clicks`` extra)

  def spec(self):
    return [self.name, self.kind, self.width, self.per_item, None if self.dtype is None else np.dtype(self.dtype).name]


def _column_kind(pa, f, path: str, name: str) -> _Column:
  """A feature column's layout from the schema (a nested list's width from its first document)."""
  t = f.schema_arrow.field(name).type
  if not _is_list(pa, t):
    raise ValueError(f"{path}, field {name!r}: a list per row is needed (one value per document), got {t}")
  v = t.value_type
  if pa.types.is_fixed_size_binary(v):
    if v.byte_width % 4:
      raise ValueError(f"{path}, field {name!r}: {v.byte_width} bytes per document is not a float32 vector")
    return _Column(name, "binary", v.byte_width // 4)
  if _is_number(pa, v):
    return _Column(name, "scalar", 1)
  if _is_list(pa, v) and _is_number(pa, v.value_type):
    if pa.types.is_fixed_size_list(v):
      return _Column(name, "vector", v.list_size)
    for g in range(f.num_row_groups):  # a variable-size list: the width of the first document's vector
      col = _shards.read_row_group(f, path, g, 0, [name], "Parquet file").column(name).combine_chunks().flatten()
      col = col.drop_null()
      if len(col):
        return _Column(name, "vector", int(pa.compute.list_value_length(col)[0].as_py()))
    return _Column(name, "vector", 0)
  raise ValueError(f"{path}, field {name!r}: expected numbers, a vector or float32 bytes per document, got {t}")


def _documents(pa, f, path: str, g: int, name: str) -> tuple:
  """``(documents, largest value or None)`` of row group ``g``'s list column ``name`` (from the statistics
  when they are there; else by reading the column)."""
  md = f.metadata.row_group(g)
  for c in range(md.num_columns):
    col = md.column(c)
    if col.path_in_schema == f"{name}.list.element" or col.path_in_schema == f"{name}.list.item":
      st = col.statistics
      if st is not None and st.has_null_count:
        top = st.max if st.has_min_max else None
        return int(col.num_values - st.null_count), top
  col = _shards.read_row_group(f, path, g, 0, [name], "Parquet file").column(name).combine_chunks()
  values = col.flatten()
  top = pa.compute.max(values).as_py() if len(values) else None
  return len(values), top


class _ReadLists:
  """Reads, checks and lays out one row group: ``(index, (path, row_group, first_row, rows, first_doc)) ->
  {name: [n, L, ...] or [n]}`` (the batch keys), shuffled inside the row group when asked."""

  def __init__(self, stream: "FeatureStream", shuffle: bool, seed: int):
    self.s = stream
    self.shuffle, self.seed = shuffle, seed

  def empty(self, n: int, features: bool = True) -> dict:
    s = self.s
    out = {
      "features": np.zeros((n, s.list_size, s.num_features), s.dtype) if features else None,
      "labels": np.zeros((n, s.list_size), np.float32),
      "where": np.zeros((n, s.list_size), bool),
      "qid": np.full(n, -1, np.int64),
    }
    for e in s._extras:
      out[e.name] = np.zeros((n, s.list_size) if e.per_item else (n,), e.dtype)
    out["doc_ids"] = np.full((n, s.list_size), -1, np.int32)
    return out

  def __call__(self, index: int, unit: tuple) -> dict:
    pa = _pyarrow()
    s = self.s
    path, g, first_row, _, first_doc = unit
    try:
      f = _shards.open_parquet(path, "Parquet file", memory_map=True)
    except FileNotFoundError:
      raise FileNotFoundError(f"{path}: no such Parquet file (it was there when the stream started)") from None
    table = _shards.read_row_group(f, path, g, first_row, s._columns, "Parquet file")
    n, L = table.num_rows, s.list_size
    at = functools.partial(_location, path, first_row)

    qcol = _array(table, "query_id")
    if qcol.null_count:
      raise ValueError(f"{at(_first_null(pa, qcol), 'query_id')}: missing value")
    qid = _io.as_ids(qcol.to_numpy(), np.int64, lambda r: at(r, "query_id"))

    flat, row, item = _list_values(pa, table, s._list_columns, at, n)
    D = len(row)
    slot, in_order = _slots(pa, flat, row, item, at)
    keep = slot < L
    every = bool(keep.all())
    cell = row * L + slot
    kept_cell = cell if every else cell[keep]

    if self.shuffle:  # a seeded permutation inside the row group (the shuffle buffer); index counts epochs too
      perm = np.random.default_rng([self.seed, index]).permutation(n)
      inv = np.empty(n, np.int64)
      inv[perm] = np.arange(n)
      kept_cell = (inv[row] * L + slot) if every else (inv[row] * L + slot)[keep]
    # Every list full and in order (a common layout): the features are [n, L, F] already, one copy moves them.
    whole = every and in_order and D == n * L and len(s._features) == 1
    out = self.empty(n, features=not whole)
    kept = slice(None) if every else keep

    # Features: [D, w] per column, cast to the dtype, finite where kept.
    fview = None if whole else out["features"].reshape(n * L, s.num_features)
    c0 = 0
    for col in s._features:
      x = _feature_values(pa, col, flat[col.name], at, row, item)[kept]
      x = _finite_cast(x, s.dtype, keep, col.name, at, row, item)
      if whole:
        x = x.reshape(n, L, s.num_features)
        out["features"] = np.take(x, perm, axis=0) if self.shuffle else x.copy()
      else:
        assert fview is not None  # made when not whole
        if col.width == s.num_features:
          fview[kept_cell] = x
        else:
          fview[kept_cell, c0 : c0 + col.width] = x
      c0 += col.width

    out["where"].reshape(-1)[kept_cell] = True
    if "label" in flat:
      out["labels"].reshape(-1)[kept_cell] = _labels(pa, flat["label"], at, row, item)[kept]
    if "doc_id" in flat:
      ids = _doc_ids(pa, flat["doc_id"], at, row, item)
    else:
      ids = np.arange(first_doc, first_doc + D)
    out["doc_ids"].reshape(-1)[kept_cell] = ids[kept]
    for e in s._extras:
      if e.per_item or e.column == "click":
        out[e.name].reshape(-1)[kept_cell] = _item_extra(pa, e, flat[e.column], at, row, item)[kept]
      else:
        v = _list_extra(pa, e, _array(table, e.name), at)
        out[e.name][:] = v[perm] if self.shuffle else v
    out["qid"][:] = qid[perm] if self.shuffle else qid
    return out


def _location(path, first_row: int, r, field: str, d=None) -> str:
  """Where a value is, for an error: the file, the row (``r`` counts from the row group's ``first_row``), the
  document ``d`` when given, the field."""
  doc = "" if d is None else f", document {d}"
  return f"{path}, row {first_row + int(r)}{doc}, field {field!r}"


def _numbers(pa, at, name: str, values) -> np.ndarray:
  """An Arrow array of numbers as NumPy (an error naming the field for any other type)."""
  if not _is_number(pa, values.type):
    raise ValueError(f"{at(0, name)}: expected numbers, got the Arrow type {values.type}")
  return values.to_numpy(zero_copy_only=False)


def _integers(at, row, item, name: str, v: np.ndarray, low, high=None) -> np.ndarray:
  """``v`` (one value per document) as int64, each an integer in ``[low, high]`` (an error naming the first that
  is not)."""
  bad = (v < low) | (v != np.round(v)) | ((v > high) if high is not None else False)
  if np.any(bad):
    k = int(np.flatnonzero(bad)[0])
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    raise ValueError(f"{at(row[k], name, item[k])}: {v[k]} is not {allowed}")
  return _io.as_ids(v, np.int64, lambda k: at(row[k], name, item[k]))


def _list_values(pa, table, columns, at, n: int) -> tuple:
  """``(flat, row, item)``: each list column's values one per document (``flat[name]``), checked to have no
  missing value and, in every row, one length across the columns; each document's row and place in its list."""
  lengths, layout, flat = None, None, {}
  for name in columns:
    col = _array(table, name)
    if col.null_count:
      raise ValueError(f"{at(_first_null(pa, col), name)}: missing value")
    got = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
    if lengths is None:
      lengths, layout = got, name
    elif not np.array_equal(got, lengths):
      r = int(np.flatnonzero(got != lengths)[0])
      raise ValueError(f"{at(r, name)}: {got[r]} values, where {layout!r} has {lengths[r]}")
    flat[name] = col.flatten()
  lengths = np.asarray(lengths, np.int64)
  D = int(lengths.sum())
  row = np.repeat(np.arange(n), lengths)
  starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
  item = np.arange(D) - starts[row]
  for name, values in flat.items():
    if values.null_count:
      k = _first_null(pa, values)
      raise ValueError(f"{at(row[k], name, item[k])}: missing value")
  return flat, row, item


def _slots(pa, flat: dict, row, item, at) -> tuple:
  """``(slot, in_order)``: each document's 0-based place in its list (its ``position`` - 1, else its place in
  the row), and whether that is its place in the row; two documents of a list at one position are an error."""
  if "position" in flat:
    slot = _integers(at, row, item, "position", _numbers(pa, at, "position", flat["position"]), 1) - 1
  else:
    slot = item
  in_order = "position" not in flat or bool(np.array_equal(slot, item))  # then no two documents share a position
  if not in_order and len(row):
    key = row * (int(slot.max()) + 1) + slot  # (list, position) pairs, the cut ones too
    _, first = np.unique(key, return_index=True)
    if len(first) != len(key):
      dup = np.ones(len(key), bool)
      dup[first] = False
      k = int(np.flatnonzero(dup)[0])
      raise ValueError(f"{at(row[k], 'position', item[k])}: its list already shows a document at {slot[k] + 1}")
  return slot, in_order


def _feature_values(pa, col: _Column, v, at, row, item) -> np.ndarray:
  """Feature column ``col``'s values ``v`` (one per document) as ``[documents, col.width]``."""
  if col.kind == "binary":
    width = v.type.byte_width
    if width != 4 * col.width:
      raise ValueError(f"{at(0, col.name)}: {width // 4} values per document, where the first file has {col.width}")
    x = np.frombuffer(v.buffers()[1], "<f4", count=len(v) * col.width, offset=v.offset * width)
    return x.reshape(len(v), col.width)
  if col.kind == "vector":
    got = pa.compute.list_value_length(v).to_numpy(zero_copy_only=False)
    if len(got) and np.any(got != col.width):
      k = int(np.flatnonzero(got != col.width)[0])
      raise ValueError(f"{at(row[k], col.name, item[k])}: a vector of {got[k]} values, where the first has {col.width}")
    inner = v.flatten()
    if inner.null_count:
      k = _first_null(pa, inner) // max(col.width, 1)
      raise ValueError(f"{at(row[k], col.name, item[k])}: missing value inside the vector")
    return _numbers(pa, at, col.name, inner).reshape(len(v), col.width)
  return _numbers(pa, at, col.name, v).reshape(len(v), 1)


def _finite_cast(x: np.ndarray, dtype, keep, name: str, at, row, item) -> np.ndarray:
  """The kept documents' features ``x`` cast to ``dtype``; a value that is not finite there is an error."""
  with np.errstate(over="ignore", invalid="ignore"):
    cast = x.astype(dtype, copy=False)
    if cast.size and not (np.isfinite(cast.max()) and np.isfinite(cast.min())):  # no temporaries: NaN propagates
      r = int(np.flatnonzero(~np.isfinite(cast).all(axis=1))[0])
      k = np.flatnonzero(keep)[r]
      value = x[r][~np.isfinite(cast[r])][0]
      why = "is not finite" if not np.isfinite(value) else f"overflows the dtype {dtype.name}"
      raise ValueError(f"{at(row[k], name, item[k])}: value {value} {why}")
  return cast


def _labels(pa, values, at, row, item) -> np.ndarray:
  """The ``label`` column's values, each a finite relevance >= 0 (an error naming the first that is not)."""
  lab = _numbers(pa, at, "label", values)
  bad = ~np.isfinite(lab) | (lab < 0) | (np.abs(lab) > _F32_MAX)
  if bad.any():
    k = int(np.flatnonzero(bad)[0])
    raise ValueError(f"{at(row[k], 'label', item[k])}: {lab[k]} is not a finite relevance >= 0")
  return lab


def _doc_ids(pa, values, at, row, item) -> np.ndarray:
  """The ``doc_id`` column's values, each in [-1, 2**31) (an error naming the first that is not)."""
  ids = _numbers(pa, at, "doc_id", values)
  bad = (ids < -1) | (ids > _svm._I32_MAX)
  if bad.any():
    k = int(np.flatnonzero(bad)[0])
    raise ValueError(f"{at(row[k], 'doc_id', item[k])}: {ids[k]} is not an id in [-1, 2**31)")
  return ids


def _item_extra(pa, e: _Column, values, at, row, item) -> np.ndarray:
  """A per-document extra's values: clicks 0 or 1, floats finite in their dtype."""
  if e.column == "click":
    return _integers(at, row, item, "click", _numbers(pa, at, "click", values), 0, 1)
  v = _numbers(pa, at, e.name, values)
  if np.dtype(e.dtype).kind == "f":
    bad = ~np.isfinite(v) | (np.abs(v) > _F32_MAX if np.dtype(e.dtype).itemsize == 4 else False)
    if np.any(bad):
      k = int(np.flatnonzero(bad)[0])
      raise ValueError(f"{at(row[k], e.name, item[k])}: {v[k]} is not a finite {np.dtype(e.dtype).name}")
  return v


def _list_extra(pa, e: _Column, col, at) -> np.ndarray:
  """A per-list extra's values, one per row (of a list column, each list's first value)."""
  if col.null_count:
    raise ValueError(f"{at(_first_null(pa, col), e.name)}: missing value")
  if _is_list(pa, col.type):  # one value per document: the list's first
    first = pa.compute.list_element(col, 0) if len(col) else col.flatten()
    return _numbers(pa, at, e.name, first)
  return _numbers(pa, at, e.name, col)


def _array(table, name: str):
  """A table column as one Arrow array (no copy when it is one chunk, as a row group's are)."""
  col = table.column(name)
  return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _first_null(pa, column) -> int:
  return int(np.flatnonzero(pa.compute.is_null(column).to_numpy(zero_copy_only=False))[0])


class _PadLists:
  """Pads a short batch to ``batch_size`` lists (``where`` False, ``qid`` and ``doc_ids`` -1)."""

  def __init__(self, batch_size: int, reader: _ReadLists):
    self.batch_size, self.reader = batch_size, reader

  def __call__(self, batch: dict) -> dict:
    n = len(batch["qid"])
    if n == self.batch_size:
      return batch
    out = self.reader.empty(self.batch_size)
    for k, v in batch.items():
      out[k][:n] = v
    return out


def _units(pa, files: list, types: dict, present: list, layout: str, list_size) -> tuple:
  """``(units, documents, longest list, largest position)`` of the files: a unit ``(path, row group, first row,
  rows, documents before it)`` per non-empty row group; each file checked to have the first file's columns and
  types. The lists are measured only where the footers (or ``list_size``) leave them unknown."""
  path0 = files[0][0]
  units, doc0, longest, top_position = [], 0, 0, 0
  for path, f, meta in files:
    for c, t in types.items():
      if c not in f.schema_arrow.names:
        raise ValueError(f"{path}: field {c!r}: no such column (the first file, {path0}, has it)")
      if f.schema_arrow.field(c).type != t:
        raise ValueError(f"{path}: field {c!r}: of type {f.schema_arrow.field(c).type}, where {path0}'s is {t}")
    longest = max(longest, int(meta.get("list_size", 0)))
    first = 0
    for g in range(f.num_row_groups):
      rows = f.metadata.row_group(g).num_rows
      docs = 0
      if rows and ("doc_id" not in present or list_size is None and "list_size" not in meta):
        docs, top = _documents(pa, f, path, g, "position" if "position" in present else layout)
        if "position" in present and top is not None:
          top_position = max(top_position, int(top))
        elif "list_size" not in meta and list_size is None:
          col = _shards.read_row_group(f, path, g, first, [layout], "Parquet file").column(layout)
          lens = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
          longest = max(longest, int(lens.max()) if len(lens) else 0)
      if rows:
        units.append((path, g, first, rows, doc0))
      first += rows
      doc0 += docs
  return units, doc0, longest, top_position


def _extra_columns(pa, schema0, meta0: dict, path0, extra_columns) -> list:
  """The extras' columns: ``extra_columns`` (of the first file's schema ``schema0``; None: those its footer
  ``meta0`` recorded), then ``clicks`` from a ``click`` column and ``frequency_bucket`` where the file has them."""
  extras = []
  if extra_columns is None:
    for name, per_item, dt in json.loads(meta0.get("extras", "[]")):
      extras.append(_Column(name, "scalar", 1, bool(per_item), np.dtype(dt)))
  else:
    for name in extra_columns:
      if name not in schema0.names:
        raise ValueError(f"{path0}: field {name!r}: no such column (extra_columns; the file has {schema0.names})")
      extras.append(_Column(name, "scalar", 1, _is_list(pa, schema0.field(name).type), np.dtype(np.float32)))
  if "click" in schema0.names:
    extras.append(_Column("clicks", "scalar", 1, True, np.dtype(np.float32), column="click"))
  if "frequency_bucket" in schema0.names and all(e.name != "frequency_bucket" for e in extras):
    extras.append(_Column("frequency_bucket", "scalar", 1, False, np.dtype(np.int32)))
  return extras


class FeatureStream(_RowGroupStream):
  r"""Fixed-shape batches of ranked lists with features from Parquet list files, in bounded memory.

  Each batch is the dict :func:`~ultr_jax.data.batches` yields for the same lists in memory:
  ``features [B, L, F]`` (``dtype``; zero at padding), ``labels float32[B, L]``, ``where bool[B, L]``,
  ``qid int64[B]`` (-1 on padding lists), the extras (``clicks float32[B, L]`` from a ``click`` column,
  ``frequency_bucket int32[B]``, the extra columns) and ``doc_ids int32[B, L]`` (-1 at padding). Epochs
  follow each other without padding between them; the last batch of a pass is padded with fully masked lists. Lists longer than ``L`` keep their first ``L`` items (by
  ``position``, else in order).

  Order: without ``shuffle``, the files' (sorted by path) and their rows'. With it, a seeded permutation of
  the row groups of all files (a new one each epoch) and of the lists inside each row group (the shuffle
  buffer is one row group). The same seed gives the same batches. Processes read disjoint sets of row groups
  (dealt round-robin after the shuffle) that together cover the files; shapes agree across processes.

  Args:
    source: a file, a glob, a directory (its ``*.parquet``) or a list of them.
    batch_size: ``B`` lists per batch.
    features: the feature columns, concatenated in order: a column name, a sequence of them, ``"bert"`` or
      ``"ltr"`` (Baidu-ULTR's, :data:`~ultr_jax.data.BERT_FEATURES`, :data:`~ultr_jax.data.LTR_FEATURES`);
      default: those the shards were written with (:func:`convert_svmlight`, :func:`write_feature_shards`).
    list_size: ``L`` (default: the longest list, or the largest ``position``, over all files: from the
      files' footers and statistics where they have them, else read from the column).
    shuffle: shuffle the row groups and the lists in them.
    seed: the shuffle's seed.
    num_epochs: passes over the data (None: without end).
    process_index: this process, in ``[0, process_count)`` (default ``jax.process_index()``).
    process_count: the number of processes (default ``jax.process_count()``).
    extra_columns: further columns to batch as extras (float32; ``[B, L]`` for a list column, ``[B]``
      otherwise); default: those :func:`write_feature_shards` recorded.
    dtype: the features' dtype.
    num_threads: Grain's reader threads.
    prefetch: the row groups read ahead.

  Raises:
    FileNotFoundError: a missing file (naming it).
    ValueError: a shard of ultr_jax not listed by a manifest (an interrupted conversion, another conversion's
      shard), shards of two conversions, a size or footer that is not the manifest's, an unreadable or
      truncated file, a missing column or one of another type than the first file's (naming the file and
      field); while iterating, a page whose checksum fails (naming the file and row group), a bad value (a missing one, list lengths that
      disagree, a position < 1 or two documents at one position, a click not 0/1, a negative or non-finite
      label, a non-finite feature among those kept), naming the file, row, document and field.

  >>> import pathlib, tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> _ = (d / "a.txt").write_text("2 qid:1 1:0.5\n0 qid:1 2:1\n1 qid:2 1:4\n0 qid:3 2:2\n")
  >>> _ = convert_svmlight(d / "a.txt", d / "shards", row_group_size=2)
  >>> stream = FeatureStream(d / "shards", batch_size=2, process_index=0, process_count=1)
  >>> [b["qid"].tolist() for b in stream], stream.num_features, stream.list_size
  ([[1, 2], [3, -1]], 2, 2)
  >>> b = next(iter(stream)); state = stream.get_state()
  >>> resumed = FeatureStream(d / "shards", batch_size=2, process_index=0, process_count=1)
  >>> resumed.set_state(state)
  >>> [b["labels"].tolist() for b in resumed]
  [[[0.0, 0.0], [0.0, 0.0]]]
  """

  def __init__(
    self,
    source: Union[PathLike, Sequence[PathLike]],
    *,
    batch_size: int,
    features: Union[None, str, Sequence[str]] = None,
    list_size: Optional[int] = None,
    shuffle: bool = False,
    seed: int = 0,
    num_epochs: Optional[int] = 1,
    process_index: Optional[int] = None,
    process_count: Optional[int] = None,
    extra_columns: Optional[Sequence[str]] = None,
    dtype=np.float32,
    num_threads: int = 2,
    prefetch: int = 4,
  ):
    pa = _pyarrow()
    self.paths = _paths(source)
    self.dtype = np.dtype(dtype)
    shards = _shards.shard_set(self.paths, "feature shards", foreign=True)  # files without a manifest: not ours
    sizes = {k: str(v) for k, v in shards.sizes.items()} if shards.manifest is not None else {}
    files = [
      (p, _shards.open_parquet(p, "Parquet file", memory_map=True), {**shards.footers[p], **sizes}) for p in self.paths
    ]
    path0, f0, meta0 = files[0]
    if features is None:
      if "feature_columns" not in meta0:
        raise ValueError(
          f"{path0}: not a feature shard of ultr_jax (no recorded feature columns); name the feature columns "
          "with features= (a column, a list of them, 'bert' or 'ltr')"
        )
      features = json.loads(meta0["feature_columns"])
    names = _feature_names(features)
    schema0 = f0.schema_arrow
    for name in ("query_id",) + names:
      if name not in schema0.names:
        raise ValueError(f"{path0}: field {name!r}: no such column (the file has {schema0.names})")
    if not pa.types.is_integer(schema0.field("query_id").type):
      raise ValueError(f"{path0}, field 'query_id': expected integers, got {schema0.field('query_id').type}")
    self._features = [_column_kind(pa, f0, path0, n) for n in names]
    #: ``F``, the sum of the feature columns' widths.
    self.num_features = int(sum(c.width for c in self._features))
    present = [c for c in ("label", "position", "doc_id") if c in schema0.names]
    extras = _extra_columns(pa, schema0, meta0, path0, extra_columns)
    self._extras = extras
    item_columns = present + [c.name for c in self._features] + [e.column for e in extras if e.per_item]
    self._list_columns = list(dict.fromkeys(item_columns))
    self._columns = list(dict.fromkeys(["query_id"] + self._list_columns + [e.column for e in extras]))
    layout = (present + [e.column for e in extras if e.per_item] + [self._features[0].name])[0]

    # Units (one per non-empty row group), documents before each (for doc_ids), the longest list.
    types = {c: schema0.field(c).type for c in self._columns}
    units, doc0, longest, top_position = _units(pa, files, types, present, layout, list_size)
    if list_size is None:
      list_size = max(longest, top_position, 1)
      if top_position > max(longest, _io.extent_limit(doc0)):
        raise ValueError(
          f"{', '.join(self.paths[:3])}: field 'position': {top_position} is absurdly large for files of {doc0} "
          f"documents (more than {_io.extent_limit(doc0)}); pass list_size= to keep the top positions only"
        )
    if int(list_size) < 1:
      raise ValueError(f"list_size must be >= 1, got {list_size}")
    self.list_size = int(list_size)
    reader = _ReadLists(self, bool(shuffle), int(seed))
    self._build(
      units,
      read=reader,
      pad=_PadLists(int(batch_size), reader),
      batch_size=batch_size,
      shuffle=shuffle,
      seed=seed,
      num_epochs=num_epochs,
      process_index=process_index,
      process_count=process_count,
      num_threads=num_threads,
      prefetch=prefetch,
      config={
        "paths": len(self.paths),
        "list_size": self.list_size,
        "features": [c.spec() for c in self._features],
        "extras": [e.spec() for e in self._extras],
        "dtype": self.dtype.name,
      },
      shards=shards,
    )

  @property
  def num_lists(self) -> int:
    """Lists this process reads per epoch."""
    return self._rows_per_epoch

  # The shared pipeline's public members, documented here too.
  num_batches = _RowGroupStream.num_batches
  identity = _RowGroupStream.identity
  get_state = _RowGroupStream.get_state
  set_state = _RowGroupStream.set_state
