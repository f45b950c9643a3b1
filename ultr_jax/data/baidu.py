r"""Baidu-ULTR in the Arrow/Parquet files of its research releases.

Baidu-ULTR (Zou et al., NeurIPS 2022 Datasets track; the WSDM Cup 2023 data)
logs real result pages of Baidu search with their clicks, plus expert
relevance annotations for a separate set of queries. Hager et al. ("Unbiased
Learning to Rank Meets Reality", SIGIR 2024) publish it with per-document
features on the Hugging Face hub (``baidu-ultr-606k``: 768-d query-document
embeddings of a MonoBERT cross-encoder; ``baidu-ultr_uva-mlm-ctr`` and
``baidu-ultr_baidu-mlm-ctr``: embeddings plus lexical features).
:func:`load_baidu_ultr` reads those files as a :class:`RankingDataset`, in
either layout:

* **one row per shown document** (the hub's ``.feather`` files): consecutive
  rows with the same ``query_id`` are one result page (a session);
* **one row per result page** (the hub builder's output written with
  ``datasets``' ``to_parquet``, or any Parquet/Arrow file of that shape): the
  per-document columns hold lists.

Columns (other columns are ignored):

======================  =======================================================
``query_id``            integer; required.
``position``            1-based rank the document was shown at (click data).
``click``               0 or 1 (click data).
``label``               graded relevance >= 0 (annotation data).
``frequency_bucket``    the query's frequency bucket (annotations), per query.
feature columns         a number or a vector per document:
                        :data:`BERT_FEATURES` (``"bert"``), :data:`LTR_FEATURES`
                        (``"ltr"``) or any names given.
======================  =======================================================

The result follows the one layout of the library: item ``i`` of a page is
the document shown at position ``i + 1``, and positions no row fills are
masked (``where`` False), so a page with a gap keeps its ranks, as in
:func:`~ultr_jax.data.click_log_sessions`; without a ``position`` column the
documents keep the file order. Pages longer than ``list_size`` keep their
first ``list_size`` positions. Logged clicks travel as ``extras["clicks"]``,
which :func:`ultr_jax.train.fit` trains on when it is given no ``click_fn``.

:func:`read_baidu_sessions` reads the release's raw session files
(``part-XXXXX.gz``: query lines, then one line per shown document) as a
session :class:`~ultr_jax.data.ClickLog`, for the identifiability check, the
propensity estimators and the click models, which need no features.

Bad input raises a ``ValueError`` naming the file, the row (0-based, as
Arrow counts them; ``row r, document d`` in the page layout) and the field.
pyarrow is needed only here: ``pip install 'ultr_jax[baidu]'``.
"""

import os
import pathlib
from typing import Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np

from ultr_jax.data import _io
from ultr_jax.data.click_log import (
  READ_ERRORS,
  ClickLog,
  SessionPage,
  decode_ids,
  raise_absurd_position,
  register_session_reader,
  session_file,
  session_lines,
)
from ultr_jax.data.dataset import RankingDataset

__all__ = ["BERT_FEATURES", "LTR_FEATURES", "QUERY_KEYS", "load_baidu_ultr", "read_baidu_sessions"]

PathLike = Union[str, os.PathLike]

#: The MonoBERT query-document embedding (768 values per document).
BERT_FEATURES = ("query_document_embedding",)
#: The lexical features of Hager et al.'s ``ltr`` data (one value each).
LTR_FEATURES = (
  "bm25",
  "bm25_title",
  "bm25_abstract",
  "tf_idf",
  "tf",
  "idf",
  "ql_jelinek_mercer_short",
  "ql_jelinek_mercer_long",
  "ql_dirichlet",
  "document_length",
  "title_length",
  "abstract_length",
)
_FEATURE_SETS = {"bert": BERT_FEATURES, "ltr": LTR_FEATURES}
_PER_DOCUMENT = ("position", "click", "label")  # scalars per document: they tell the layout
_SUFFIXES = (".feather", ".arrow", ".ipc", ".parquet")
_F32_MAX = float(np.finfo(np.float32).max)


def _pyarrow():
  try:
    import pyarrow  # pylint: disable=g-import-not-at-top
    import pyarrow.compute  # pylint: disable=g-import-not-at-top,unused-import
    import pyarrow.feather  # pylint: disable=g-import-not-at-top,unused-import
    import pyarrow.parquet  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:  # pragma: no cover - pyarrow is in the test extras
    raise ImportError(
      "load_baidu_ultr reads Arrow and Parquet files with pyarrow: "
      "pip install 'ultr_jax[baidu]' (or pip install pyarrow)"
    ) from e
  return pyarrow


def _open(path: pathlib.Path):
  """The file's schema, and a function reading ``columns`` of it as a table."""
  pa = _pyarrow()
  suffix = path.suffix.lower()
  if suffix not in _SUFFIXES:
    raise ValueError(f"{path}: unknown file type {suffix!r}; expected one of {_SUFFIXES}")
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no such file")
  try:
    if suffix == ".parquet":
      schema = pa.parquet.read_schema(path)
      read = lambda cols: pa.parquet.read_table(path, columns=list(cols), memory_map=True)  # noqa: E731
    else:
      read = lambda cols: pa.feather.read_table(
        path,
        columns=None if cols is None else list(cols),  # noqa: E731
        memory_map=True,
      )
      try:  # Feather V2 is the Arrow IPC file format: its schema costs no read
        with pa.memory_map(str(path)) as source:
          schema = pa.ipc.open_file(source).schema
      except pa.ArrowInvalid:  # an IPC stream (datasets' .arrow files), Feather V1, or not Arrow at all
        try:
          with pa.memory_map(str(path)) as source:
            schema = pa.ipc.open_stream(source).schema
          read = lambda cols: _read_ipc_stream(pa, path, cols)  # noqa: E731
        except pa.ArrowInvalid:
          schema = read(None).schema
  except (pa.ArrowException, OSError, EOFError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a readable {suffix[1:]} file ({e})") from e
  return schema, read


def _read_ipc_stream(pa, path, columns):
  """An Arrow IPC stream file as a table (memory-mapped: the map lives as long as the table's buffers)."""
  table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
  return table if columns is None else table.select(list(columns))


class _Where(NamedTuple):
  """Names a document in error messages: its file, row (and index within a page row)."""

  path: pathlib.Path
  page_layout: bool
  row: np.ndarray  # [D] the table row of each document
  index: Optional[np.ndarray]  # [D] its index inside the row's lists (page layout; None: not needed otherwise)

  def __call__(self, doc: int, field: str) -> str:
    if self.page_layout:
      assert self.index is not None  # given with the page layout
      at = f"row {self.row[doc]}, document {self.index[doc]}"
    else:
      at = f"row {self.row[doc]}"
    return f"{self.path}, {at}, field {field!r}"


def _is_list(pa, type_) -> bool:
  return pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_)


def _flatten(pa, column, lengths: Optional[np.ndarray], path, field):
  """One level of list flattened; with ``lengths``, every row's list must have that length."""
  column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
  if column.null_count:
    raise ValueError(f"{path}, row {_first_null(pa, column)}, field {field!r}: missing value")
  got = np.asarray(pa.compute.list_value_length(column).to_numpy(zero_copy_only=False), np.int64)
  if lengths is not None and not np.array_equal(got, lengths):
    bad = int(np.flatnonzero(got != lengths)[0])
    raise ValueError(
      f"{path}, row {bad}, field {field!r}: {got[bad]} values where the other columns have {lengths[bad]}"
    )
  return column.flatten(), got


def _first_null(pa, column) -> int:
  return int(np.flatnonzero(pa.compute.is_null(column).to_numpy(zero_copy_only=False))[0])


def _numbers(pa, column, where: _Where, field: str, check_finite: bool = True) -> np.ndarray:
  """A column of one number per document as NumPy, or ``[D, width]`` for a vector per document.

  ``check_finite=False`` leaves the check to the caller (the features are checked once cast,
  which is several times faster than NumPy's float16 ``isfinite``).
  """
  column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
  if column.null_count:
    raise ValueError(f"{where(_first_null(pa, column), field)}: missing value")
  if _is_list(pa, column.type):
    values, lengths = _flatten(pa, column, None, where.path, field)
    width = int(lengths[0]) if len(lengths) else 0
    if np.any(lengths != width):
      bad = int(np.flatnonzero(lengths != width)[0])
      raise ValueError(f"{where(bad, field)}: a vector of {lengths[bad]} values, where row 0's has {width}")
    if values.null_count:
      bad = _first_null(pa, values) // max(width, 1)
      raise ValueError(f"{where(bad, field)}: missing value inside the vector")
    out = _numeric(pa, values, where, field, width, check_finite)
    return out.reshape(len(lengths), width)
  return _numeric(pa, column, where, field, 1, check_finite)


def _numeric(pa, array, where: _Where, field: str, width: int, check_finite: bool = True) -> np.ndarray:
  if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_boolean(array.type)):
    raise ValueError(f"{where(0, field)}: expected numbers, got the Arrow type {array.type}")
  out = array.to_numpy(zero_copy_only=False)
  if check_finite and out.dtype.kind == "f":
    bad = ~np.isfinite(out)
    if bad.any():
      first = int(np.flatnonzero(bad)[0])
      raise ValueError(f"{where(first // width, field)}: value {out[first]} is not finite")
  return out


@np.errstate(over="ignore")
def _raise_not_finite(docs, feature_names, keep, where: _Where, dtype):
  """Names the first kept document whose feature is not finite (or overflows ``dtype``)."""
  kept = np.flatnonzero(keep)
  for name in feature_names:
    values = docs[name].reshape(len(keep), -1)[kept]
    bad = ~np.isfinite(values.astype(dtype)).all(axis=1)
    if bad.any():
      row = int(np.flatnonzero(bad)[0])
      value = values[row][~np.isfinite(values[row].astype(dtype))][0]
      why = "is not finite" if not np.isfinite(value) else f"overflows the dtype {np.dtype(dtype).name}"
      raise ValueError(f"{where(int(kept[row]), name)}: value {value} {why}")
  raise AssertionError("a non-finite feature that no column holds")  # pragma: no cover


def _integers(values: np.ndarray, where: _Where, field: str, low: int, high: Optional[int] = None) -> np.ndarray:
  """Checks that ``values`` are integers in ``[low, high]``."""
  bad = (values < low) | (values != np.round(values))
  if high is not None:
    bad |= values > high
  if bad.any():
    doc = int(np.flatnonzero(bad)[0])
    allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    raise ValueError(f"{where(doc, field)}: {values[doc]} is not {allowed}")
  return _io.as_ids(values, np.int64, lambda doc: where(doc, field))


def _feature_names(features) -> tuple:
  if isinstance(features, str):
    if features not in _FEATURE_SETS:
      raise ValueError(
        f"features: unknown set {features!r}; expected one of {sorted(_FEATURE_SETS)} or a sequence of column names"
      )
    return _FEATURE_SETS[features]
  names = tuple(features)
  if not names:
    raise ValueError("features: give at least one column")
  return names


def _read_file(path: pathlib.Path, feature_names, extra_columns, max_sessions: Optional[int]):
  """One file's documents as flat ``[D]`` arrays, and its pages.

  Returns ``(docs, session, where, pages)``: ``docs`` maps a column to its values per document
  (``[D]`` or ``[D, width]``), ``session [D]`` is each document's 0-based page in the file, ``where``
  names documents in errors, and ``pages`` maps ``query_id`` (and ``frequency_bucket``) to
  ``[num_pages]`` values.
  """
  pa = _pyarrow()
  wanted = ("query_id",) + feature_names + tuple(extra_columns)
  optional = _PER_DOCUMENT + ("frequency_bucket",)
  schema, read = _open(path)
  missing = [c for c in wanted if c not in schema.names]
  if missing:
    raise ValueError(f"{path}: no column {missing[0]!r} (the file has {schema.names})")
  present = [c for c in optional if c in schema.names]
  if not any(c in present for c in ("click", "label")):
    raise ValueError(
      f"{path}: neither a 'click' nor a 'label' column: a Baidu-ULTR file holds clicks or "
      f"annotations (the file has {schema.names})"
    )
  layout_key = next(c for c in _PER_DOCUMENT if c in present)
  page_layout = _is_list(pa, schema.field(layout_key).type)
  columns = list(dict.fromkeys(wanted + tuple(present)))
  try:
    table = read(columns)
  except (pa.ArrowException, OSError, EOFError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a readable {path.suffix[1:]} file ({type(e).__name__}: {e})") from e

  qid_col = table.column("query_id").combine_chunks()
  if not pa.types.is_integer(qid_col.type):
    raise ValueError(f"{path}, row 0, field 'query_id': expected integers, got the Arrow type {qid_col.type}")
  if qid_col.null_count:
    raise ValueError(f"{path}, row {_first_null(pa, qid_col)}, field 'query_id': missing value")
  qid_rows = _io.as_ids(qid_col.to_numpy(), np.int64, lambda r: f"{path}, row {r}, field 'query_id'")

  if page_layout:
    if max_sessions is not None:
      table, qid_rows = table.slice(0, max_sessions), qid_rows[:max_sessions]
    num_rows = table.num_rows
    _, lengths = _flatten(pa, table.column(layout_key), None, path, layout_key)
    session = np.repeat(np.arange(num_rows), lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    where = _Where(path, True, session, np.arange(len(session)) - starts[session])
    flat = {}
    for name in columns:
      col = table.column(name)
      if name in ("query_id", "frequency_bucket") and not _is_list(pa, col.type):
        flat[name] = None  # per page
        continue
      if not _is_list(pa, col.type):
        raise ValueError(
          f"{path}, row 0, field {name!r}: a page-per-row file needs a list per row here, got the Arrow type {col.type}"
        )
      flat[name], _ = _flatten(pa, col, lengths, path, name)
    pages = {"query_id": qid_rows}
    docs = {
      name: _numbers(pa, col, where, name, name not in feature_names) for name, col in flat.items() if col is not None
    }
    if "frequency_bucket" in columns:
      if flat["frequency_bucket"] is None:
        pages["frequency_bucket"] = _numbers(
          pa,
          table.column("frequency_bucket"),
          _Where(path, False, np.arange(num_rows), np.zeros(num_rows, int)),
          "frequency_bucket",
        )
      else:  # one value per document: the page's first document's
        first = np.minimum(starts, max(len(session) - 1, 0))
        pages["frequency_bucket"] = docs.pop("frequency_bucket")[first] if len(session) else np.zeros(num_rows)
  else:
    new = np.ones(len(qid_rows), bool)
    new[1:] = qid_rows[1:] != qid_rows[:-1]
    session = np.cumsum(new) - 1
    if max_sessions is not None and len(session) and session[-1] >= max_sessions:
      cut = int(np.searchsorted(session, max_sessions))
      table, session = table.slice(0, cut), session[:cut]
    where = _Where(path, False, np.arange(len(session)), np.zeros(len(session), np.int64))
    docs = {
      name: _numbers(pa, table.column(name), where, name, name not in feature_names)
      for name in columns
      if name != "query_id"
    }
    first = np.flatnonzero(new[: len(session)])
    pages = {"query_id": qid_rows[first]}
    if "frequency_bucket" in docs:
      pages["frequency_bucket"] = docs.pop("frequency_bucket")[first]
  return docs, session, where, pages


def _checked_file(path, feature_names, extra_columns, remaining, list_size):
  """One file's documents, checked: ``(docs, session, slot, num_pages, pages, where)`` (see :func:`_read_file`).

  A document's slot is its 0-based position (``position`` - 1), or its place in its page where the file has no
  positions; clicks must be 0/1, labels non-negative, float columns within float32, and no page may show two
  documents at one position.
  """
  docs, session, where, pages = _read_file(path, feature_names, extra_columns, remaining)
  num = len(pages["query_id"])
  if "position" in docs:
    slot = _integers(docs["position"], where, "position", 1) - 1
    limit = _io.extent_limit(len(slot))
    if list_size is None and len(slot) and slot.max() >= limit:
      doc = int(np.flatnonzero(slot >= limit)[0])
      raise ValueError(
        f"{where(doc, 'position')}: {slot[doc] + 1} is absurdly large for a file of {len(slot)} documents "
        f"(more than {limit}); pass list_size= to keep the top positions only"
      )
  else:
    first_doc = np.searchsorted(session, np.arange(num))  # pages are contiguous runs of documents
    slot = np.arange(len(session)) - first_doc[session]
  if "click" in docs:
    docs["click"] = _integers(docs["click"], where, "click", 0, 1)
  if "label" in docs:
    bad = docs["label"] < 0
    if bad.any():
      doc = int(np.flatnonzero(bad)[0])
      raise ValueError(f"{where(doc, 'label')}: {docs['label'][doc]} is negative")
  for name in ("label",) + extra_columns:  # stored as float32
    if name in docs and docs[name].dtype.kind == "f" and docs[name].dtype.itemsize > 4:
      bad = np.abs(docs[name]) > _F32_MAX
      if bad.any():
        doc = int(np.flatnonzero(bad.reshape(len(bad), -1).any(1))[0])
        raise ValueError(f"{where(doc, name)}: {docs[name][doc]} is outside the float32 range")
  # Two documents of one page at one position.
  cell = session.astype(np.int64) * (int(slot.max()) + 1 if len(slot) else 1) + slot
  _, first = np.unique(cell, return_index=True)
  repeated = np.ones(len(cell), bool)
  repeated[first] = False
  if repeated.any():
    doc = int(np.flatnonzero(repeated)[0])
    raise ValueError(f"{where(doc, 'position')}: its page already shows a document at position {slot[doc] + 1}")
  return docs, session, slot, num, pages, where


def load_baidu_ultr(
  paths: Union[PathLike, Sequence[PathLike]],
  *,
  features: Union[str, Sequence[str]] = "bert",
  list_size: Optional[int] = None,
  max_sessions: Optional[int] = None,
  extra_columns: Sequence[str] = (),
  dtype=np.float32,
) -> RankingDataset:
  r"""Loads Baidu-ULTR click or annotation files as padded pages.

  Args:
    paths: one file or several (``.feather``/``.arrow``/``.ipc`` or
      ``.parquet``), read in order; a page never spans two files.
    features: ``"bert"`` (:data:`BERT_FEATURES`), ``"ltr"``
      (:data:`LTR_FEATURES`) or a sequence of column names, concatenated in
      that order (a vector column contributes its width).
    list_size: ``L`` (default: the largest position, or the longest page
      without a ``position`` column); longer pages keep their top ``L``.
    max_sessions: read only the first this many pages (over all files).
    extra_columns: further per-document numeric columns (``media_type``,
      ``displayed_time``, ``serp_height``, ``slipoff_count_after_click``)
      returned as ``extras[name] float32[S, L]``.
    dtype: the features' dtype (the 768-d embeddings are float16 on disk).

  Returns:
    A :class:`RankingDataset` with one query per page: ``features
    [S, L, F]``, ``labels`` (the ``label`` column, else zeros), ``where``,
    ``qid`` (``query_id``), ``doc_ids`` (the document's 0-based row over all
    files read; its index in the flattened lists for the page layout) and
    ``extras``: ``clicks float32[S, L]`` (with a ``click`` column),
    ``frequency_bucket int32[S]`` (with that column) and the extra columns.

  Raises:
    ValueError: an unknown file type, an unreadable file, a missing column,
      a missing value, a non-finite value (for the features: among the
      documents kept, or one that overflows ``dtype``), a label or extra
      value outside the float32 range, a position < 1 (or, without
      ``list_size``, above ``max(65536, number of documents in the file)``), a
      click other than 0/1,
      a negative label, vectors of different widths, list columns of
      different lengths in one page row, or two documents at one position of
      a page (each naming the file, row and field).

  >>> import pathlib, tempfile, pyarrow as pa, pyarrow.feather
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "part-0.feather"
  >>> pa.feather.write_feather(pa.table({
  ...     "query_id": [7, 7, 7, 9, 9], "position": [1, 2, 4, 2, 1], "click": [0, 1, 0, 1, 0],
  ...     "bm25": [3.0, 2.0, 1.0, 5.0, 4.0]}), p)
  >>> ds = load_baidu_ultr(p, features=["bm25"])
  >>> ds.qid.tolist(), ds.features[..., 0].tolist()
  ([7, 9], [[3.0, 2.0, 0.0, 1.0], [4.0, 5.0, 0.0, 0.0]])
  >>> ds.where.tolist()
  [[True, True, False, True], [True, True, False, False]]
  >>> ds.extras["clicks"].tolist()
  [[0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
  """
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  paths = [pathlib.Path(p) for p in paths]
  if not paths:
    raise ValueError("paths: give at least one file")
  if max_sessions is not None and int(max_sessions) < 1:
    raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
  if list_size is not None and int(list_size) < 1:
    raise ValueError(f"list_size must be >= 1, got {list_size}")
  feature_names = _feature_names(features)
  extra_columns = tuple(extra_columns)

  parts = []
  remaining = max_sessions
  for path in paths:
    docs, session, slot, num, pages, where = _checked_file(path, feature_names, extra_columns, remaining, list_size)
    parts.append((docs, session, slot, num, pages, where))
    if remaining is not None:
      remaining -= num
      if remaining <= 0:
        break

  num_pages = sum(p[3] for p in parts)
  with_docs = [p for p in parts if len(p[2])]
  if not with_docs:
    raise ValueError(f"{', '.join(map(str, paths))}: no documents")
  longest = max(int(p[2].max()) + 1 for p in with_docs)
  L = longest if list_size is None else int(list_size)
  widths = [1 if v.ndim == 1 else v.shape[1] for v in (with_docs[0][0][n] for n in feature_names)]
  F = int(sum(widths))
  out_features = np.zeros((num_pages, L, F), dtype)
  labels = np.zeros((num_pages, L), np.float32)
  mask = np.zeros((num_pages, L), bool)
  qid = np.zeros(num_pages, np.int64)
  doc_ids = np.full((num_pages, L), -1, np.int32)
  has_clicks = all("click" in p[0] for p in parts)
  clicks = np.zeros((num_pages, L), np.float32) if has_clicks else None
  has_bucket = all("frequency_bucket" in p[4] for p in parts)
  bucket = np.zeros(num_pages, np.int32) if has_bucket else None
  extra = {name: np.zeros((num_pages, L), np.float32) for name in extra_columns}

  page_offset = doc_offset = 0
  flat_features = out_features.reshape(num_pages * L, F)
  for docs, session, slot, num, pages, where in parts:
    keep = slot < L
    every = bool(keep.all())
    s, i = session[keep] + page_offset, slot[keep]
    rows = s * L + i
    column = 0
    for name, width in zip(feature_names, widths):
      values = docs[name]
      if values.ndim == 1:
        values = values[:, None]
      if values.shape[1] != width:
        raise ValueError(f"{where(0, name)}: vectors of width {values.shape[1]}, where {paths[0]} has {width}")
      with np.errstate(over="ignore"):  # an overflow of dtype is named below
        flat_features[rows, column : column + width] = values if every else values[keep]
      column += width
    if not np.isfinite(out_features[page_offset : page_offset + num]).all():
      _raise_not_finite(docs, feature_names, keep, where, dtype)
    mask[s, i] = True
    doc_ids[s, i] = np.flatnonzero(keep) + doc_offset
    if "label" in docs:
      labels[s, i] = docs["label"][keep]
    if clicks is not None:
      clicks[s, i] = docs["click"][keep]
    for name in extra_columns:
      if docs[name].ndim != 1:
        raise ValueError(f"extra column {name!r}: expected one number per document, got vectors")
      extra[name][s, i] = docs[name][keep]
    qid[page_offset : page_offset + num] = pages["query_id"]
    if bucket is not None:
      bucket[page_offset : page_offset + num] = pages["frequency_bucket"]
    page_offset += num
    doc_offset += len(session)

  extras: dict[str, np.ndarray] = dict(extra)
  if clicks is not None:
    extras["clicks"] = clicks
  if bucket is not None:
    extras["frequency_bucket"] = bucket
  return RankingDataset(features=out_features, labels=labels, where=mask, qid=qid, doc_ids=doc_ids, extras=extras)


# ----------------------------------------------------------------------------
# The raw session files (part-XXXXX.gz) of the Baidu-ULTR release.

_SESSION_FIELDS = {"pos": 0, "url_md5": 1, "click": 5}  # of a document line (0-based columns)
QUERY_KEYS = ("query", "qid")


def _cut_short(path, line_no: int, why: str) -> str:
  return (
    f"{path}:{line_no}: field 'qid': a query line (qid, query, query_reformulation) where {why}: "
    "is it a document line (pos, url_md5, title, abstract, multimedia_type, click, ...) cut short?"
  )


def read_baidu_sessions(path: PathLike, *, query_key: str = "query", max_sessions: Optional[int] = None) -> ClickLog:
  r"""Reads a raw Baidu-ULTR session file (``part-XXXXX.gz``) as a session :class:`~ultr_jax.data.ClickLog`.

  The release's tab-separated text (gzip or plain): each result page starts
  with a query line ``qid, query, query_reformulation`` (at most 3 fields;
  the texts are token ids joined by ``\x01``), followed by one line per shown
  document ``pos, url_md5, title, abstract, multimedia_type, click, ...``
  (``pos`` 1-based, ``click`` 0/1; the other columns are not read). No
  features are needed: the log's (query, document, position, click) rows are
  what the identifiability check, the intervention-harvesting propensity
  estimators and the session click models read
  (``experiments/identifiability/check.py --click_log=... --click_log_format=baidu``,
  ``experiments/click_models/main.py --config.click_log=... --config.click_log_format=baidu``).

  Args:
    path: the session file (gzip, recognised by its magic bytes, is
      decompressed on the fly).
    query_key: what makes two pages the same query, so that a document shown
      at different positions on them is one item: ``"query"`` (the query's
      token ids, default) or ``"qid"``.
    max_sessions: read only the first this many pages.

  Returns:
    A :class:`~ultr_jax.data.ClickLog` with one row per shown document:
    ``items`` are dense ids of (query, ``url_md5``) pairs, ``positions``
    0-based, ``sessions`` one id per page in file order, ``query_ids`` the
    ``qid`` column, ``doc_ids`` the ``url_md5`` column and ``lines`` each
    row's line in the file (for error messages).

  Raises:
    ValueError: a document line before any query line, a line with 4 to 5
      fields, a ``pos`` that is not an integer >= 1 or is absurdly large
      (more than ``max(65536, number of documents)``), a ``click`` that is
      not 0 or 1, an empty ``url_md5``, an id that is not UTF-8, a file that
      does not decompress, or a query line that looks like a document line
      cut to 3 fields or fewer: one no document line follows, or one whose
      qid is the pos after the document line above it and whose next
      document line is at the pos after that (naming the file, line and
      field).

  >>> import gzip, pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "part-00000.gz"
  >>> doc = lambda pos, url, click: "\t".join([str(pos), url, "1\x012", "3", "0", str(click)] + ["0"] * 27)
  >>> with gzip.open(p, "wt") as f:
  ...   _ = f.write("\n".join(["1\t11\x0112\t", doc(1, "u1", 0), doc(2, "u2", 1),
  ...                          "2\t11\x0112\t", doc(1, "u2", 1), doc(2, "u3", 0)]) + "\n")
  >>> log = read_baidu_sessions(p)
  >>> log.items.tolist(), log.positions.tolist(), log.clicks.tolist(), log.sessions.tolist()
  ([0, 1, 1, 2], [0, 1, 0, 1], [0.0, 1.0, 1.0, 0.0], [0, 0, 1, 1])
  >>> read_baidu_sessions(p, query_key="qid").num_items  # two qids: no document is shared
  4
  """
  path = session_file(path, max_sessions)
  item_ids: dict = {}  # (query, url_md5) -> dense id, in order of first appearance
  intern = item_ids.setdefault
  page_qids, page_lines, urls, positions, clicks, sessions, lines, items = [], [], [], [], [], [], [], []
  for session, page in enumerate(baidu_pages(path, query_key=query_key, max_sessions=max_sessions)):
    page_qids.append(page.qid)
    page_lines.append(page.line)
    urls.extend(page.urls)
    positions.extend(page.positions)
    clicks.extend(page.clicks)
    lines.extend(page.lines)
    sessions.extend([session] * len(page.urls))
    items.extend([intern((page.query, url), len(item_ids)) for url in page.urls])
  qids = decode_ids(page_qids, path, "qid", page_lines)
  doc_ids = decode_ids(urls, path, "url_md5", lines)
  pos_arr = np.asarray(positions, np.int32)
  session_arr = np.asarray(sessions, np.int32)
  return ClickLog(
    items=np.asarray(items, np.int32),
    positions=pos_arr,
    clicks=np.asarray(clicks, np.float32),
    weights=np.ones(len(items), np.float32),
    query_ids=qids[session_arr],
    doc_ids=doc_ids,
    num_items=len(item_ids),
    num_positions=int(pos_arr.max()) + 1,
    sessions=session_arr,
    path=str(path),
    lines=np.asarray(lines, np.int32),
  )


def baidu_pages(path, *, query_key: str = "query", max_sessions: Optional[int] = None) -> Iterator[SessionPage]:
  r"""The result pages of a raw Baidu-ULTR session file, one :class:`~ultr_jax.data.click_log.SessionPage` each.

  The per-record parser of the format (its grammar and its errors, as :func:`read_baidu_sessions`
  documents them), read line by line in memory bounded by one page: :func:`read_baidu_sessions`
  collects its pages, :func:`~ultr_jax.data.convert_click_log` writes them to session shards. A page
  is yielded once the next query line (or the end of the file) shows it complete; the checks that
  need the whole file (no document lines at all, an absurdly large ``pos`` for the number of rows)
  raise at its end. ``path`` is read as given (the callers check it with ``session_file``).

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "part-00000"
  >>> doc = lambda pos, url, click: "\t".join([str(pos), url, "1", "2", "0", str(click)])
  >>> _ = p.write_text("\n".join(["7\t11\x0112\t", doc(1, "u1", 0), doc(2, "u2", 1)]) + "\n")
  >>> [(pg.qid, pg.urls, pg.positions, pg.clicks, pg.lines) for pg in baidu_pages(p)]
  [(b'7', [b'u1', b'u2'], [0, 1], [False, True], [2, 3])]
  """
  if query_key not in QUERY_KEYS:
    raise ValueError(f"query_key must be one of {QUERY_KEYS}, got {query_key!r}")
  pos_col, url_col, click_col = (_SESSION_FIELDS[k] for k in ("pos", "url_md5", "click"))
  show = lambda b: repr(b.decode("utf-8", "replace"))  # noqa: E731
  page: Optional[SessionPage] = None  # the page being read
  num_pages, num_rows = 0, 0
  prev_pos = None  # the pos of the line above when it is a document line, else None
  suspect = None  # (line, qid) of a query line that may be a document line cut short
  # Bytes, not text: only the few fields kept are decoded (by the callers), not the long title and
  # abstract token lists. Positions beyond MAX_INFERRED_EXTENT that raise the running maximum are kept
  # with their line: the first of them beyond the limit of the whole file is the one to name.
  top, large = _io.MAX_INFERRED_EXTENT, []
  try:
    with session_lines(path) as fh:
      for line_no, line in enumerate(fh, start=1):
        fields = line.rstrip(b"\r\n").split(b"\t", click_col + 1)
        if len(fields) == 1 and not fields[0]:
          continue
        if len(fields) <= 3:  # a query line starts a page
          if page is not None and not page.urls:
            raise ValueError(_cut_short(path, page.line, "no document line follows it"))
          if max_sessions is not None and num_pages >= max_sessions:
            break
          if page is not None:
            yield page
          num_pages += 1
          query = fields[1] if query_key == "query" and len(fields) > 1 else fields[0]
          page = SessionPage(fields[0], query, line_no, [], [], [], [])
          # A document line cut to <= 3 fields reads as a query line whose qid is a position:
          # the pos of the line above plus one, with the next document line at the pos after.
          suspect = (line_no, int(fields[0])) if prev_pos is not None and fields[0] == b"%d" % (prev_pos + 1) else None
          prev_pos = None
          continue
        if page is None:
          raise ValueError(f"{path}:{line_no}: a document line before any query line")
        if len(fields) <= click_col:
          raise ValueError(
            f"{path}:{line_no}: {len(fields)} fields: a query line has at most 3, a document "
            f"line at least {click_col + 1} (pos, url_md5, title, abstract, multimedia_type, "
            "click, ...)"
          )
        pos, click, url = fields[pos_col], fields[click_col], fields[url_col]
        prev_pos = int(pos) if pos.isdigit() else 0
        if prev_pos < 1:
          raise ValueError(f"{path}:{line_no}: field 'pos': {show(pos)} is not an integer >= 1")
        if suspect is not None:
          if prev_pos == suspect[1] + 1:
            raise ValueError(
              _cut_short(
                path,
                suspect[0],
                f"its qid {suspect[1]} continues the positions above it and line {line_no} continues at pos {prev_pos}",
              )
            )
          suspect = None
        if click != b"0" and click != b"1":
          raise ValueError(f"{path}:{line_no}: field 'click': {show(click)} is not 0 or 1")
        if not url:
          raise ValueError(f"{path}:{line_no}: field 'url_md5': empty")
        page.urls.append(url)
        page.positions.append(prev_pos - 1)
        page.clicks.append(click == b"1")
        page.lines.append(line_no)
        num_rows += 1
        if prev_pos > top:
          top = prev_pos
          large.append((line_no, prev_pos - 1))
  except READ_ERRORS as e:
    raise ValueError(f"{path}: cannot read the session file ({type(e).__name__}: {e})") from e
  if not num_rows:
    raise ValueError(f"{path}: no document lines")
  assert page is not None  # a document line (num_rows > 0) comes after a query line
  if not page.urls:
    raise ValueError(_cut_short(path, page.line, "no document line follows it"))
  limit = _io.extent_limit(num_rows)
  for line_no, position in large:
    if position >= limit:
      raise_absurd_position(path, line_no, position, num_rows, "pos")
  yield page


register_session_reader("baidu", read_baidu_sessions)
