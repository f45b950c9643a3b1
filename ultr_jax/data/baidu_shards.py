r"""Baidu-ULTR's files with one row per shown document, converted to feature shards in bounded memory.

The hub's Baidu-ULTR feature files (``.feather``: Arrow IPC; or Parquet) hold **one row per (result page,
document)**; consecutive rows with the same ``query_id`` are one page (:func:`~ultr_jax.data.load_baidu_ultr`'s
first layout). A page can span record batches, so these files cannot be read a row group at a time as lists:
:func:`convert_baidu_ultr` reads them record batch by record batch (``batch_rows`` rows at a time), groups each
page's rows, and writes the Parquet feature shards :class:`~ultr_jax.data.FeatureStream` reads, one row per
page, with the writer of :func:`~ultr_jax.data.write_feature_shards`. Memory holds one input record batch (a
Parquet file's: its row group's pages being decoded), ``batch_rows`` rows as float32, one output row group and
16 bytes per page of the file being read (the check that pages are contiguous), never the file.

Files with one row per page (the second layout) need no conversion: ``FeatureStream`` reads them as they are.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Iterator, Optional, Sequence, Union

import numpy as np

from ultr_jax.data import _io
from ultr_jax.data import _shards
from ultr_jax.data import baidu as _baidu
from ultr_jax.data.feature_stream import _binary_features, _lists, _ShardWriter

__all__ = ["convert_baidu_ultr"]

PathLike = Union[str, os.PathLike]
_SHARD_COLUMNS = ("query_id", "features", "label", "position", "doc_id", "click", "frequency_bucket")


def _source_paths(source) -> list:
  """The files of ``source`` in order: a file, a glob or a directory (sorted), or a list of them (in its order)."""
  files = _io.expand_sources(
    source,
    what=f"Baidu-ULTR files ({', '.join(_baidu._SUFFIXES)})",
    directory=lambda d: sorted(p for p in d.iterdir() if p.suffix.lower() in _baidu._SUFFIXES),
    missing=None,  # opening it names it
  )
  return [pathlib.Path(p) for p in files]


class _File:
  """One input file: its schema, checked, and its rows as record batches of at most ``batch_rows`` rows."""

  present: list  # the optional columns it has (set by _check_schema)
  columns: list  # the columns read from it (set by _check_schema)

  def __init__(self, pa, path: pathlib.Path):
    self.pa, self.path = pa, path
    suffix = path.suffix.lower()
    if suffix not in _baidu._SUFFIXES:
      raise ValueError(f"{path}: unknown file type {suffix!r}; expected one of {_baidu._SUFFIXES}")
    if not path.is_file():
      raise FileNotFoundError(f"{path}: no such file")
    self.kind = "parquet" if suffix == ".parquet" else "ipc"
    try:
      if self.kind == "parquet":
        self.schema = pa.parquet.ParquetFile(path, memory_map=True, page_checksum_verification=True).schema_arrow
      else:
        self.schema, self.kind = self._ipc_schema()
    except (pa.ArrowException, OSError, EOFError) as e:
      what = "Parquet" if self.kind == "parquet" else "Arrow IPC (Feather V2)"
      raise ValueError(f"{path}: not a readable {what} file (truncated, or not {what}: {e})") from None

  def _ipc_schema(self):
    pa = self.pa
    with pa.memory_map(str(self.path)) as source:
      try:  # Feather V2 is the IPC file format; an IPC stream (datasets' .arrow cache files) has no footer
        return pa.ipc.open_file(source).schema, "ipc"
      except pa.ArrowInvalid as e:
        source.seek(0)
        head = source.read(4)
        if head == b"FEA1":
          raise ValueError(
            f"{self.path}: a Feather V1 file, which cannot be read a record batch at a time; rewrite it as "
            "Feather V2 (pyarrow.feather.write_feather(pyarrow.feather.read_table(path), new_path)) or read it "
            "with load_baidu_ultr"
          ) from None
        source.seek(0)
        try:
          return pa.ipc.open_stream(source).schema, "ipc_stream"
        except pa.ArrowInvalid:
          raise e from None

  def batches(self, columns: Sequence[str], batch_rows: int) -> Iterator[tuple]:
    """``(first row, RecordBatch of columns)`` in file order, at most ``batch_rows`` rows each."""
    pa = self.pa
    row, at = 0, ""
    try:
      if self.kind == "parquet":  # a row group at a time (its batches would run on into the next one)
        f = pa.parquet.ParquetFile(self.path, page_checksum_verification=True)
        for g in range(f.num_row_groups):
          at = f"row group {g}, "
          for batch in f.iter_batches(batch_size=batch_rows, row_groups=[g], columns=list(columns), use_threads=False):
            yield row, batch
            row += batch.num_rows
        return
      fields = [self.schema.get_field_index(c) for c in columns]
      options = pa.ipc.IpcReadOptions(included_fields=fields, use_threads=False)
      with pa.OSFile(str(self.path)) as source:  # read, not mapped: a mapped file counts in the RSS
        if self.kind == "ipc":
          reader = pa.ipc.open_file(source, options=options)
          record_batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
          record_batches = pa.ipc.open_stream(source, options=options)
        for batch in record_batches:
          for a in range(0, batch.num_rows, batch_rows):
            part = batch.slice(a, batch_rows)
            yield row, part
            row += part.num_rows
          del batch, part  # before the next record batch is read: one in memory at a time
    except (pa.ArrowException, OSError, EOFError) as e:
      raise ValueError(
        f"{self.path}, {at}rows from {row}: cannot read them (a damaged or truncated file: {e})"
      ) from None


class _Width:
  """The width of a feature column: from the first file's type, or the first document's vector."""

  def __init__(self, name: str):
    self.name = name
    self.width: Optional[int] = None
    self.source: Optional[tuple] = None  # (path, row) the width was taken from

  def check(self, path, width: int, row: int, where, lengths=None) -> None:
    if self.width is None:
      self.width, self.source = int(width), (path, row)
      return
    source = self.source
    assert source is not None  # set with the width
    if lengths is None:
      if width != self.width:
        raise ValueError(
          f"{path}, field {self.name!r}: vectors of {width} values (its Arrow type), where {source[0]}'s "
          f"have {self.width}"
        )
      return
    bad = lengths != self.width
    if bad.any():
      k = int(np.flatnonzero(bad)[0])
      ref = f"row {source[1]}'s" if source[0] == path else f"{source[0]}, row {source[1]}'s"
      raise ValueError(f"{where(k, self.name)}: a vector of {lengths[k]} values, where {ref} has {self.width}")


class _Converter:
  """Groups the rows of the files into pages, checks them as :func:`~ultr_jax.data.load_baidu_ultr` does, and
  writes whole pages to the shards (created at the first page, once ``F`` is known)."""

  def __init__(self, pa, files, feature_names, extra_columns, widths, list_size, out_dir, shard_size, row_group_size):
    self.pa, self.files = pa, files
    self.feature_names, self.extra_columns = feature_names, extra_columns
    self.widths = widths
    self.list_size = None if list_size is None else int(list_size)
    self.has_clicks = all("click" in f.present for f in files)
    self.has_bucket = all("frequency_bucket" in f.present for f in files)
    self.writer_args = (out_dir, shard_size, row_group_size)
    self.writer: Optional[_ShardWriter] = None
    self.doc0 = 0  # documents (rows) of the files before
    self.prev = None  # (path, query_id of its last page) of the last file with rows

  # -- one file --------------------------------------------------------------

  def convert(self, f: _File, batch_rows: int) -> None:
    pa, path = self.pa, f.path
    carry = None  # the rows of the page still open (it may go on in the next record batch)
    run_qid, run_row = [], []  # every page's query_id and first row (the contiguity check)
    top, large = _io.MAX_INFERRED_EXTENT - 1, []  # (row, slot) that raise the largest slot beyond the limit
    rows_read = 0
    for r0, batch in f.batches(f.columns, batch_rows):
      n = batch.num_rows
      if not n:
        continue
      rows_read = r0 + n
      rows = np.arange(r0, r0 + n)
      where = _baidu._Where(path, False, rows, None)
      qcol = batch.column("query_id")
      if qcol.null_count:
        raise ValueError(f"{where(_baidu._first_null(pa, qcol), 'query_id')}: missing value")
      q = _io.as_ids(qcol.to_numpy(zero_copy_only=False), np.int64, lambda r: where(r, "query_id"))
      if r0 == 0 and self.prev is not None and q[0] == self.prev[1]:
        raise ValueError(
          f"{where(0, 'query_id')}: query_id {q[0]} continues the last page of {self.prev[0]}: a page must lie in "
          "one file (load_baidu_ultr reads each file's pages apart); write each page's rows into one file"
        )
      new = np.empty(n, bool)
      new[0] = carry is None or q[0] != carry["qid"][-1]
      new[1:] = q[1:] != q[:-1]
      starts = np.flatnonzero(new)
      run_qid.append(q[starts])
      run_row.append(rows[starts])
      chunk = self._read(f, batch, q, rows, where, new, starts, 0 if carry is None else len(carry["row"]))
      if self.list_size is None:  # candidates for "absurdly large" (the limit depends on the file's length)
        for k in np.flatnonzero(chunk["slot"] > top):
          if chunk["slot"][k] > top:
            top = int(chunk["slot"][k])
            large.append((int(rows[k]), top))
      if len(starts):
        s0, last = int(starts[0]), int(starts[-1])
        if carry is not None:  # the open page ends where the first new one starts
          self._emit(f, _concat(carry, _take(chunk, slice(0, s0))) if s0 else carry)
        if last > s0:
          self._emit(f, _take(chunk, slice(s0, last)))
        carry = _take(chunk, slice(last, n))
      else:
        carry = _concat(carry, chunk)
      del batch, chunk  # the record batch goes before the next one is read
    if carry is not None:
      self._emit(f, carry)
      self.prev = (path, int(carry["qid"][-1]))
    if run_qid:
      _check_contiguous(path, np.concatenate(run_qid), np.concatenate(run_row))
    limit = _io.extent_limit(rows_read)
    for row, slot in large:
      if slot >= limit:
        raise ValueError(
          f"{path}, row {row}, field 'position': {slot + 1} is absurdly large for a file of {rows_read} "
          f"documents (more than {limit}); pass list_size= to keep the top positions only"
        )
    self.doc0 += rows_read

  def _read(self, f: _File, batch, q, rows, where, new, starts, open_count: int) -> dict:
    """One record batch's values, checked: ``{name: [n] or [n, F]}``, ``slot`` each row's item index."""
    pa, n = self.pa, len(q)
    numbers = lambda name, finite=True: _baidu._numbers(pa, batch.column(name), where, name, finite)  # noqa: E731
    out = {"qid": q, "row": rows}
    if "position" in f.present:
      out["slot"] = _baidu._integers(numbers("position"), where, "position", 1) - 1
    else:  # the file's order: the row's index in its page (which may have begun in an earlier record batch)
      run = np.cumsum(new) - 1
      first = np.where(run >= 0, starts[np.maximum(run, 0)], -open_count) if len(starts) else -open_count
      out["slot"] = np.arange(n) - first
    keep = None if self.list_size is None else out["slot"] < self.list_size
    if "click" in f.present:  # checked in every file that has it; kept where every file has it, as in memory
      click = _baidu._integers(numbers("click"), where, "click", 0, 1)
      if self.has_clicks:
        out["click"] = click.astype(np.int8)
    if "label" in f.present:
      label = numbers("label")
      if (label < 0).any():
        k = int(np.flatnonzero(label < 0)[0])
        raise ValueError(f"{where(k, 'label')}: {label[k]} is negative")
      out["label"] = _float32(label, where, "label")
    else:
      out["label"] = np.zeros(n, np.float32)
    if "frequency_bucket" in f.present:
      bucket = numbers("frequency_bucket")
      if self.has_bucket:
        out["frequency_bucket"] = bucket
    for name in self.extra_columns:
      values = numbers(name)
      if values.ndim != 1:
        raise ValueError(f"{where(0, name)}: an extra column needs one number per document, got vectors")
      out[name] = _float32(values, where, name)
    values = {}
    for name in self.feature_names:
      col = batch.column(name)
      if col.null_count:
        raise ValueError(f"{where(_baidu._first_null(pa, col), name)}: missing value")
      if _baidu._is_list(pa, col.type):
        lengths = pa.compute.list_value_length(col).to_numpy(zero_copy_only=False)
        self.widths[name].check(f.path, lengths[0], int(rows[0]), where, lengths)
      values[name] = numbers(name, False)
    F = sum(w.width for w in self.widths.values())
    feats = np.empty((n, F), np.float32)
    c = 0
    for name in self.feature_names:
      v = values[name]
      with np.errstate(over="ignore", invalid="ignore"):  # an overflow of float32 is named below
        feats[:, c : c + self.widths[name].width] = v.reshape(n, -1)
      c += self.widths[name].width
    if feats.size and not (np.isfinite(feats.max()) and np.isfinite(feats.min())):  # no temporaries: NaN propagates
      bad = ~np.isfinite(feats).all(axis=1)
      if keep is not None:
        bad &= keep
      if bad.any():
        _baidu._raise_not_finite(
          values, self.feature_names, np.ones(n, bool) if keep is None else keep, where, np.float32
        )
    out["features"] = feats
    return out

  # -- whole pages to the shards ---------------------------------------------

  def _emit(self, f: _File, block: dict) -> None:
    """Writes ``block``: the rows of whole pages, in order."""
    pa = self.pa
    q, slot, rows = block["qid"], block["slot"], block["row"]
    n = len(q)
    new = np.ones(n, bool)
    new[1:] = q[1:] != q[:-1]
    starts = np.flatnonzero(new)
    page = np.cumsum(new) - 1
    if "position" in f.present:  # two documents at one position of a page (cut ones too, as in memory)
      cell = page * (int(slot.max()) + 1) + slot
      _, first = np.unique(cell, return_index=True)
      if len(first) != n:
        repeated = np.ones(n, bool)
        repeated[first] = False
        k = int(np.flatnonzero(repeated)[0])
        raise ValueError(
          f"{f.path}, row {rows[k]}, field 'position': its page already shows a document at position {slot[k] + 1}"
        )
    keep = slice(None) if self.list_size is None else slot < self.list_size
    if isinstance(keep, slice) or keep.all():
      keep = slice(None)
      counts = np.diff(np.append(starts, n))
    else:
      counts = np.bincount(page[keep], minlength=len(starts))
    offsets = np.concatenate(([0], np.cumsum(counts)))
    lists = lambda values: _lists(pa, offsets, pa.array(values))  # noqa: E731
    cols = {
      "query_id": pa.array(q[starts]),
      "features": _lists(pa, offsets, _binary_features(pa, block["features"][keep])),
      "label": lists(block["label"][keep]),
      "position": lists((slot[keep] + 1).astype(np.int32)),
      "doc_id": lists(self.doc0 + rows[keep]),
    }
    if self.has_clicks:
      cols["click"] = lists(block["click"][keep])
    if self.has_bucket:  # the page's first document's, as load_baidu_ultr takes it
      cols["frequency_bucket"] = pa.array(block["frequency_bucket"][starts].astype(np.int32))
    for name in self.extra_columns:
      cols[name] = lists(block[name][keep])
    if self.writer is None:
      self.writer = self._writer()
    longest = self.list_size if self.list_size is not None else int(slot.max()) + 1
    self.writer.add(pa.Table.from_arrays(list(cols.values()), schema=self.writer.schema), list_size=longest)

  def _writer(self) -> _ShardWriter:
    pa = self.pa
    F = sum(w.width for w in self.widths.values())
    fields = [
      ("query_id", pa.int64()),
      ("features", pa.list_(pa.binary(4 * F))),
      ("label", pa.list_(pa.float32())),
      ("position", pa.list_(pa.int32())),
      ("doc_id", pa.list_(pa.int64())),
    ]
    if self.has_clicks:
      fields.append(("click", pa.list_(pa.int8())))
    if self.has_bucket:
      fields.append(("frequency_bucket", pa.int32()))
    fields += [(name, pa.list_(pa.float32())) for name in self.extra_columns]
    first = str(self.files[0].path)
    meta = {
      "format": "features",
      "feature_columns": json.dumps(["features"]),
      "num_features": F,
      "extras": json.dumps([[name, True, "float32"] for name in self.extra_columns]),
      "source": first if len(self.files) == 1 else f"{first} and {len(self.files) - 1} more files",
      "source_features": json.dumps(list(self.feature_names)),
      "kind": "features",
    }
    return _ShardWriter(*self.writer_args[:1], pa.schema(fields), *self.writer_args[1:], meta)


def _take(block: dict, rows: slice) -> dict:
  return {k: v[rows] for k, v in block.items()}


def _concat(a: Optional[dict], b: dict) -> dict:
  return b if a is None else {k: np.concatenate([a[k], b[k]]) for k in b}


def _float32(values: np.ndarray, where, name: str) -> np.ndarray:
  """Per-document numbers stored as float32 (an error naming the document where one is outside its range)."""
  if values.dtype.kind == "f" and values.dtype.itemsize > 4:
    bad = np.abs(values) > _baidu._F32_MAX
    if bad.any():
      k = int(np.flatnonzero(bad)[0])
      raise ValueError(f"{where(k, name)}: {values[k]} is outside the float32 range")
  return values.astype(np.float32)


def _check_contiguous(path, qid: np.ndarray, first_row: np.ndarray) -> None:
  """Each page's ``query_id`` once in the file: else names the first row of the earliest page that repeats one."""
  order = np.argsort(qid, kind="stable")
  again = np.flatnonzero(qid[order[1:]] == qid[order[:-1]])
  if not len(again):
    return
  k = order[1:][again]
  k = k[np.argmin(first_row[k])]
  began = first_row[order[np.searchsorted(qid[order], qid[k])]]
  raise ValueError(
    f"{path}, row {first_row[k]}, field 'query_id': query_id {qid[k]} comes back after other pages (its page "
    f"began at row {began}): convert_baidu_ultr needs each page's rows together, once per file (load_baidu_ultr "
    "reads this as two pages)"
  )


@_shards.converts_into_out_dir  # the workdir lock: one writer; a failure leaves it incomplete
def convert_baidu_ultr(
  source: Union[PathLike, Sequence[PathLike]],
  out_dir: PathLike,
  *,
  features: Union[str, Sequence[str]] = "bert",
  list_size: Optional[int] = None,
  extra_columns: Sequence[str] = (),
  shard_size: int = 1 << 16,
  row_group_size: int = 1024,
  batch_rows: int = 1 << 12,
  overwrite: bool = False,
) -> list:
  r"""Converts Baidu-ULTR files with one row per shown document to feature shards, a record batch at a time.

  Reads ``.feather``/``.arrow``/``.ipc`` (Arrow IPC: Feather V2 or an IPC stream) or ``.parquet`` files with
  one row per (result page, document), as :func:`~ultr_jax.data.load_baidu_ultr` does, but ``batch_rows`` rows
  at a time, and writes Parquet feature shards with one row per page: ``query_id``, ``features`` (the feature
  columns concatenated: ``F`` float32 values per document), ``label`` (zeros without a ``label`` column),
  ``position``, ``doc_id`` (the document's 0-based row over all the files, as ``load_baidu_ultr`` numbers it),
  ``click`` and ``frequency_bucket`` (where every file has them) and the extra columns (float32). Then
  ``FeatureStream(out_dir, batch_size=B)`` yields ``data.batches(load_baidu_ultr(source, ...), B,
  shuffle=False)``: ``features [B, L, F]``, ``labels [B, L]``, ``where [B, L]`` (the document at position
  ``p`` is item ``p - 1``), ``qid [B]``, ``clicks [B, L]``, ``frequency_bucket [B]``, the extras ``[B, L]``
  and ``doc_ids [B, L]``, where ``L`` is the largest position (or ``list_size``). The features are stored as
  float32: Baidu's float16 embeddings exactly, float64 values rounded (one that overflows float32 is an error).

  **Pages must be contiguous.** A page is a run of consecutive rows with one ``query_id`` (in Baidu-ULTR a
  ``query_id`` names one search session, so its rows lie together, once per file). A ``query_id`` that comes
  back after other pages of the same file is an error, raised once the file has been read (``load_baidu_ultr``
  would read it as a second page; a converter that sees a record batch at a time cannot tell that from a page
  torn apart). A page may span record batches and Parquet row groups, **not files**: a file whose first row
  continues the ``query_id`` of the previous file's last page is an error, because ``load_baidu_ultr`` reads
  each file's pages apart, so joining the two parts would make the stream differ from the data in memory and
  keeping them apart would make two lists of one page.

  Memory holds one input record batch (of a Parquet file: the pages of its row group being decoded),
  ``batch_rows`` rows as float32, one output row group and 16 bytes per page of the file being read (for the
  contiguity check); never a file.

  Args:
    source: a file, a glob or a directory (its ``.feather``/``.arrow``/``.ipc``/``.parquet`` files, sorted by
      name), or a list of them (read in the list's order).
    out_dir: the directory for ``part-NNNNN.parquet`` and, written last, the manifest ``_manifest.json`` that
      :class:`~ultr_jax.data.FeatureStream` requires (created; it must hold no shards yet).
    features: ``"bert"``, ``"ltr"`` or a sequence of column names, concatenated in that order, as in
      :func:`~ultr_jax.data.load_baidu_ultr`.
    list_size: ``L`` (None: the largest position, as in :func:`~ultr_jax.data.load_baidu_ultr`); documents at
      positions beyond ``list_size`` are not written.
    extra_columns: further per-document numeric columns, as in :func:`~ultr_jax.data.load_baidu_ultr`.
    shard_size: pages per shard file.
    row_group_size: pages per Parquet row group (the unit of reading, shuffling and splitting over processes).
    batch_rows: rows converted at a time (longer record batches are sliced).
    overwrite: replace a conversion already in ``out_dir`` (complete, or interrupted: shards without a
      manifest); only its ``part-NNNNN.parquet`` files and manifest are removed.

  Returns:
    The shard paths, in order.

  Raises:
    ValueError: the errors of :func:`~ultr_jax.data.load_baidu_ultr`, with its messages (an unreadable or
      truncated file, a missing column, a missing or non-finite value, a position < 1 or, without
      ``list_size``, an absurdly large one, two documents at one position of a page, a click not 0/1, a negative
      label, ...), a vector of another width than the first one, a file with one row per page, a page that is
      not contiguous or continues into the next file: each naming the file, the row (0-based, as Arrow counts
      them) and the field. Nothing is left in ``out_dir`` then.
    FileNotFoundError: a missing file.

  >>> import pathlib, tempfile, pyarrow as pa, pyarrow.feather
  >>> from ultr_jax.data import FeatureStream
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> pa.feather.write_feather(pa.table({
  ...     "query_id": [7, 7, 7, 9, 9], "position": [1, 2, 4, 2, 1], "click": [0, 1, 0, 1, 0],
  ...     "bm25": [3.0, 2.0, 1.0, 5.0, 4.0]}), d / "part-0.feather", chunksize=2)  # pages span record batches
  >>> paths = convert_baidu_ultr(d / "part-0.feather", d / "shards", features=["bm25"])
  >>> (b,) = FeatureStream(paths, batch_size=2, process_count=1)
  >>> b["qid"].tolist(), b["features"].shape, b["features"][..., 0].tolist()
  ([7, 9], (2, 4, 1), [[3.0, 2.0, 0.0, 1.0], [4.0, 5.0, 0.0, 0.0]])
  >>> b["clicks"].tolist(), b["doc_ids"].tolist()
  ([[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], [[0, 1, -1, 2], [4, 3, -1, -1]])
  """
  pa = _baidu._pyarrow()
  if list_size is not None and int(list_size) < 1:
    raise ValueError(f"list_size must be >= 1, got {list_size}")
  if int(batch_rows) < 1:
    raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
  if int(shard_size) < 1 or int(row_group_size) < 1:
    raise ValueError(f"shard_size and row_group_size must be >= 1, got {shard_size} and {row_group_size}")
  feature_names = _baidu._feature_names(features)
  extra_columns = tuple(extra_columns)
  for name in extra_columns:
    if name in _SHARD_COLUMNS or name in feature_names:
      raise ValueError(f"extra_columns: {name!r} is a feature or a column of the shards; it cannot be an extra")

  # Every file's schema first: a truncated file or a missing column fails before anything is written.
  files = [_File(pa, p) for p in _source_paths(source)]
  _shards.prepare_out_dir(out_dir, overwrite, create=False)
  widths = {name: _Width(name) for name in feature_names}
  wanted = ("query_id",) + feature_names + extra_columns
  for f in files:
    _check_schema(pa, f, wanted, feature_names, widths)
  converter = _Converter(
    pa, files, feature_names, extra_columns, widths, list_size, out_dir, shard_size, row_group_size
  )
  try:
    for f in files:
      converter.convert(f, int(batch_rows))
    if not converter.doc0:
      raise ValueError(f"{', '.join(str(f.path) for f in files)}: no documents")
    assert converter.writer is not None  # the first page, written once there are documents, created it
    return converter.writer.finish()
  except BaseException:
    if converter.writer is not None:
      converter.writer.abort()
    raise


def _check_schema(pa, f: _File, wanted: tuple, feature_names: tuple, widths: dict) -> None:
  """The columns and their types, as ``load_baidu_ultr`` checks them; sets ``f.present`` and ``f.columns``."""
  path, schema = f.path, f.schema
  missing = [c for c in wanted if c not in schema.names]
  if missing:
    raise ValueError(f"{path}: no column {missing[0]!r} (the file has {schema.names})")
  present = [c for c in _baidu._PER_DOCUMENT + ("frequency_bucket",) if c in schema.names]
  if not any(c in present for c in ("click", "label")):
    raise ValueError(
      f"{path}: neither a 'click' nor a 'label' column: a Baidu-ULTR file holds clicks or "
      f"annotations (the file has {schema.names})"
    )
  layout_key = next(c for c in _baidu._PER_DOCUMENT if c in present)
  if _baidu._is_list(pa, schema.field(layout_key).type):
    raise ValueError(
      f"{path}, field {layout_key!r}: lists, one row per result page: FeatureStream reads such files as they are "
      "(FeatureStream(path, batch_size=..., features=...)); convert_baidu_ultr converts one row per document"
    )
  t = schema.field("query_id").type
  if not pa.types.is_integer(t):
    raise ValueError(f"{path}, row 0, field 'query_id': expected integers, got the Arrow type {t}")
  for name in wanted[1:] + tuple(present):
    t = schema.field(name).type
    inner = t.value_type if name in feature_names and _baidu._is_list(pa, t) else t
    if not (pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_boolean(inner)):
      raise ValueError(f"{path}, row 0, field {name!r}: expected numbers, got the Arrow type {t}")
    if name in feature_names and pa.types.is_fixed_size_list(t):
      widths[name].check(path, t.list_size, 0, None)
    elif name in feature_names and not _baidu._is_list(pa, t):
      widths[name].check(path, 1, 0, None)
  f.present, f.columns = present, list(dict.fromkeys(wanted + tuple(present)))
