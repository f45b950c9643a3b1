r"""Session logs as Parquet shards, converted from text logs in bounded memory.

A click log of a billion sessions (Baidu-ULTR has 1.21 B, the Yandex Relevance
Prediction log 146 M) does not fit in memory. :func:`convert_click_log` reads a
log line by line (the delimited rows of :func:`~ultr_jax.data.read_click_log`,
a raw Baidu-ULTR ``part-*.gz`` session file, a Yandex log) and writes **session
shards**: Parquet files ``part-00000.parquet, part-00001.parquet, ...`` of
``shard_size`` sessions each, in row groups of ``row_group_size`` sessions, one
row per session (one result page shown to one user):

==============  ================  ===============================================
``session``     ``int64``         0-based index of the session in the source
                                  (the :attr:`~ultr_jax.data.ClickLog.sessions`
                                  id the in-memory reader gives it).
``query_id``    ``string``        the query id as written.
``doc_ids``     ``list<int64>``   dense id of each shown (query, document) pair:
                                  the :attr:`~ultr_jax.data.ClickLog.items` of
                                  the in-memory reader of the same file.
``doc_names``   ``list<string>``  the document ids as written.
``positions``   ``list<int32>``   0-based position of each document.
``clicks``      ``list<int8>``    0/1 click on each document.
``lines``       ``list<int64>``   the source line of each document (for errors).
extra columns   ``list<float32>``  further numeric TSV columns (``extra_columns``).
==============  ================  ===============================================

Each shard's key-value metadata records the source (``ultr_jax.source``,
``ultr_jax.format``) and ``ultr_jax.num_items`` / ``ultr_jax.num_positions``
(running maxima). Every page carries a CRC-32, and the **manifest**
``_manifest.json``, written last, lists the shards (name, rows, bytes, CRC-32
of the file and of its footer), the whole conversion's ``num_items`` /
``num_positions`` (so every process reading a subset of the shards agrees on
the shapes), the vocabulary's digest, the options and a ``conversion_id``
(the SHA-256 of all that). The readers require it: a conversion that did not
finish, a file it does not list, shards of two conversions or a damaged byte
are errors naming the file (``overwrite=True`` converts into a directory
holding a previous or interrupted conversion).
:func:`read_session_shards` reads shards back as the
:class:`~ultr_jax.data.ClickLog` that ``read_click_log`` gives for the source
file; :class:`~ultr_jax.data.SessionStream` batches them without reading them
whole.

Memory: one row group of sessions plus the vocabulary of (query, document)
pairs (dense ids need it; it grows with the distinct pairs, not the sessions)
and, for the delimited layout, 8 bytes per session to check that each session's
rows are contiguous. The text grammar and the error messages (file, line,
field) are those of the in-memory readers: the raw Baidu and Yandex files are
parsed by those readers' own per-page parsers (``baidu_pages``,
``yandex_pages``), a delimited log by Arrow's CSV reader or, where it meets
anything irregular, a per-line parser with ``read_click_log``'s grammar.
A delimited log must have a ``session_id`` column, the rows of a session must
be contiguous and show one query (the session layout of
:func:`~ultr_jax.data.click_log_sessions`).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from ultr_jax.data.baidu import QUERY_KEYS, baidu_pages
from ultr_jax.data import _io
from ultr_jax.data import _shards
from ultr_jax.data._shards import ShardWriter
from ultr_jax.data._shards import pyarrow as _shards_pyarrow
from ultr_jax.data.click_log import CLICK_LOG_FORMATS, READ_ERRORS, ClickLog, decode_id, session_file
from ultr_jax.data.yandex import yandex_pages

__all__ = [
  "SESSION_COLUMNS",
  "ClickLogRows",
  "convert_click_log",
  "read_session_shards",
  "session_shard_paths",
  "write_session_shards",
]

PathLike = Union[str, os.PathLike]

#: The columns every session shard has (see the module docstring).
SESSION_COLUMNS = ("session", "query_id", "doc_ids", "doc_names", "positions", "clicks", "lines")
_LIST_COLUMNS = ("doc_ids", "doc_names", "positions", "clicks", "lines")
_CSV_BLOCK = 1 << 20  # bytes of text per Arrow CSV batch: the delimited path's working set is a few times this


def _pyarrow():
  return _shards_pyarrow("session shards")


def _schema(extra_columns: Sequence[str]):
  pa = _pyarrow()
  fields = [
    ("session", pa.int64()),
    ("query_id", pa.string()),
    ("doc_ids", pa.list_(pa.int64())),
    ("doc_names", pa.list_(pa.string())),
    ("positions", pa.list_(pa.int32())),
    ("clicks", pa.list_(pa.int8())),
    ("lines", pa.list_(pa.int64())),
  ]
  fields += [(name, pa.list_(pa.float32())) for name in extra_columns]
  return pa.schema(fields)


class _Session:
  """One session while it is parsed."""

  __slots__ = ("session", "query_id", "doc_ids", "doc_names", "positions", "clicks", "lines", "extras")

  def __init__(self, session: int, query_id: str, num_extras: int = 0):
    self.session, self.query_id = session, query_id
    self.doc_ids, self.doc_names, self.positions, self.clicks, self.lines = [], [], [], [], []
    self.extras = [[] for _ in range(num_extras)]


def _sessions_table(sessions: list, schema, num_extras: int):
  """A table of parsed :class:`_Session` objects, one row each."""
  pa = _pyarrow()
  offsets = pa.array(np.cumsum([0] + [len(s.doc_ids) for s in sessions], dtype=np.int64).astype(np.int32))

  def lists(values, type_):
    return pa.ListArray.from_arrays(offsets, pa.array(values, type=type_))

  columns = [
    pa.array([s.session for s in sessions], pa.int64()),
    pa.array([s.query_id for s in sessions], pa.string()),
    lists([v for s in sessions for v in s.doc_ids], pa.int64()),
    lists([v for s in sessions for v in s.doc_names], pa.string()),
    lists([v for s in sessions for v in s.positions], pa.int32()),
    lists([v for s in sessions for v in s.clicks], pa.int8()),
    lists([v for s in sessions for v in s.lines], pa.int64()),
  ]
  columns += [lists([v for s in sessions for v in s.extras[k]], pa.float32()) for k in range(num_extras)]
  return pa.Table.from_arrays(columns, schema=schema)


class _ShardWriter(ShardWriter):
  """The session shards' :class:`~ultr_jax.data._shards.ShardWriter`: parsed sessions buffered into tables of
  ``row_group_size``, the footers' ``num_items`` / ``num_positions`` the largest id and position so far, and a
  shard never spanning two source files (:meth:`set_source`)."""

  def __init__(self, out_dir: pathlib.Path, shard_size: int, row_group_size: int, extra_columns, metadata: dict):
    self.extra_columns = tuple(extra_columns)
    super().__init__(out_dir, _schema(self.extra_columns), shard_size, row_group_size, {**metadata, "kind": "session"})
    self.sizes = {"num_items": 0, "num_positions": 0}
    self._sessions: list = []  # parsed sessions not yet in a table

  def add_session(self, s: _Session):
    """Adds one parsed session."""
    self._sessions.append(s)
    if len(self._sessions) >= self.row_group_size:
      self._tabulate()

  def _tabulate(self):
    if self._sessions:
      self.add_table(_sessions_table(self._sessions, self.schema, len(self.extra_columns)))
      self._sessions = []

  def add_table(self, table):
    """Adds a table of sessions (the shard schema)."""
    pc = self.pa.compute
    tops = {}
    if table.num_rows:
      for name, size in (("doc_ids", "num_items"), ("positions", "num_positions")):
        top = pc.max(pc.list_flatten(table.column(name))).as_py()
        tops[size] = None if top is None else int(top) + 1
    self.add(table, **tops)

  def set_source(self, source: str):
    """Ends the current shard (a shard never spans two source files); later shards name ``source``."""
    self._tabulate()
    self.end_shard(source=source)

  def finish(self, **manifest) -> list:
    self._tabulate()
    return super().finish(**manifest)


# ----------------------------------------------------------------------------
# Streaming parsers: each yields the sessions of one source file in order.


@contextlib.contextmanager
def _text_lines(path: pathlib.Path):
  """The file's lines as bytes (gzip, recognised by its magic bytes, decompressed), as ``read_click_log`` reads it."""
  try:
    with _io.binary_lines(path) as fh:
      yield fh
  except READ_ERRORS as e:
    if isinstance(e, UnicodeDecodeError):
      raise
    raise ValueError(f"{path}: cannot read the log ({type(e).__name__}: {e})") from e


def _line_text(line: bytes, path, line_no: int) -> str:
  try:
    return line.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(
      f"{path}:{line_no}: byte {line[e.start : e.start + 1]!r} at column {e.start + 1} is not UTF-8 ({e.reason})"
    ) from e


_REQUIRED = ("query_id", "doc_id", "position", "click")


def _tsv_header(path: pathlib.Path, delimiter: Optional[str], extra_columns: Sequence[str], *, sessions: bool = True):
  """``(delimiter, number of fields, column -> index)`` of a delimited log's header, checked as
  ``read_click_log`` checks it; ``sessions``: the session layout (a ``session_id`` column, no ``impressions``)."""
  with _text_lines(path) as fh:
    header = _line_text(fh.readline(), path, 1).rstrip("\r\n")
  if not header:
    raise ValueError(f"{path}:1: empty file; expected a header with columns {list(_REQUIRED)}")
  delim = delimiter or ("\t" if "\t" in header else ",")
  names = [c.strip() for c in header.split(delim)]
  missing = [c for c in _REQUIRED if c not in names]
  if missing:
    raise ValueError(f"{path}:1: the header {names} lacks the column(s) {missing}")
  if sessions and "impressions" in names:
    raise ValueError(
      f"{path}:1: an aggregated log (an impressions column) has no sessions; session shards need one row "
      "per (session, shown document) and a session_id column"
    )
  if sessions and "session_id" not in names:
    raise ValueError(f"{path}:1: no session_id column; session shards need one row per (session, shown document)")
  if "impressions" in names and "session_id" in names:
    raise ValueError(
      f"{path}:1: a log has either session_id (one row per shown document and session) "
      "or impressions (aggregated counts), not both"
    )
  missing = [c for c in extra_columns if c not in names]
  if missing:
    raise ValueError(f"{path}:1: the header {names} lacks the extra column(s) {missing}")
  optional = [c for c in ("session_id", "impressions") if c in names]
  cols = {c: names.index(c) for c in (*_REQUIRED, *optional, *extra_columns)}
  return delim, len(names), cols


def _tsv_rows(path: pathlib.Path, delim: str, num_fields: int) -> Iterator[tuple]:
  """``(line_no, stripped fields)`` of each data line (empty lines skipped, as ``read_click_log`` does; a line
  of blanks is a row of too few fields there too)."""
  with _text_lines(path) as fh:
    fh.readline()
    for line_no, raw in enumerate(fh, start=2):
      line = _line_text(raw, path, line_no)
      if not line.rstrip("\r\n"):
        continue
      fields = line.rstrip("\r\n").split(delim)
      if len(fields) != num_fields:
        raise ValueError(f"{path}:{line_no}: {len(fields)} fields, but the header names {num_fields}")
      yield line_no, [f.strip() for f in fields]


def _integer(value: str, path, line_no: int, field: str) -> int:
  """An integer of the text formats (``read_click_log``'s grammar: ``_io.INT_RE``, below 2**53)."""
  if value.isascii() and value.isdigit() and len(value) < 16:
    return int(value)
  number = float(value) if _io.INT_RE.fullmatch(value.encode("utf-8", "replace")) else float("nan")
  if not abs(number) < 2**53:
    raise ValueError(f"{path}:{line_no}: field {field!r}: {value!r} is not an integer")
  return int(number)


def _number(value: str, path, line_no: int, field: str) -> float:
  """A finite decimal number of the text formats (``read_click_log``'s grammar: ``_io.NUM_RE``)."""
  if value == "0" or value == "1":
    return float(value)
  number = float(value) if _io.NUM_RE.fullmatch(value.encode("utf-8", "replace")) else float("nan")
  if not np.isfinite(number):
    raise ValueError(f"{path}:{line_no}: field {field!r}: {value!r} is not a finite decimal number")
  return number


def _tsv_vocabulary(paths, *, delimiter, extra_columns, sessions: bool = True) -> dict:
  """``(query, document) key -> dense id`` over the delimited logs ``paths``: sorted, as ``read_click_log`` numbers."""
  keys = {}
  for path in paths:
    delim, num_fields, cols = _tsv_header(path, delimiter, extra_columns, sessions=sessions)
    qc, dc = cols["query_id"], cols["doc_id"]
    rows = 0
    for _, f in _tsv_rows(path, delim, num_fields):
      keys[f[qc] + "\x1f" + f[dc]] = None
      rows += 1
    if not rows:
      raise ValueError(f"{path}: no data rows after the header")
  return {k: i for i, k in enumerate(sorted(keys))}


class ClickLogRows:
  r"""The rows of delimited click logs as chunks of flat records, read line by line in bounded memory.

  What :func:`~ultr_jax.data.read_click_log` reads, any layout it accepts (with or without
  ``session_id``, 0/1 clicks or aggregated ``click`` / ``impressions`` counts), without holding the
  file: one pass numbers the (query, document) pairs (sorted, the ids ``read_click_log`` gives them;
  the vocabulary is the memory that grows, with the distinct pairs, not the rows), then every
  iteration reads the files again and yields dicts of ``[n]`` arrays, ``n <= chunk_size``:

  ``doc_ids int32`` (the pair's id), ``positions int32`` (0-based), ``clicks float32`` (0/1, or the
  CTR ``click / impressions``), ``weights float32`` (1, or ``impressions``) and ``where bool`` (all
  True). Records, not sessions: for what reduces row by row, such as the clicks and impressions per
  (document, position) of intervention harvesting (:func:`ultr_jax.graph.gather_click_counts`).
  Several files are one log (one vocabulary). The grammar and the error messages (file, line, field)
  are ``read_click_log``'s; an error found at the end of a file (a position absurdly large for its
  number of rows) is raised after the chunks before it were yielded.

  Args:
    paths: a delimited log or a list of them (gzip decompressed).
    delimiter: the column separator, as in :func:`~ultr_jax.data.read_click_log` (None: a tab if the header
      has one, else a comma).
    position_base: the rank of the top position in the files (1, or 0), as in
      :func:`~ultr_jax.data.read_click_log`.
    chunk_size: records per chunk.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.csv"
  >>> _ = p.write_text("query_id,doc_id,position,click,impressions\nq,b,1,3,4\nq,a,2,1,4\n")
  >>> rows = ClickLogRows(p)
  >>> [(c["doc_ids"].tolist(), c["positions"].tolist(), c["clicks"].tolist()) for c in rows], rows.num_items
  ([([1, 0], [0, 1], [0.75, 0.25])], 2)
  """

  def __init__(self, paths, *, delimiter: Optional[str] = None, position_base: int = 1, chunk_size: int = 1 << 16):
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
      raise ValueError("paths: give at least one file")
    if int(chunk_size) < 1:
      raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    self.paths = [session_file(p, None) for p in paths]
    self.delimiter, self.position_base, self.chunk_size = delimiter, int(position_base), int(chunk_size)
    self._item_of = _tsv_vocabulary(self.paths, delimiter=delimiter, extra_columns=(), sessions=False)
    #: The number of distinct (query, document) pairs (``doc_ids`` lie in ``[0, num_items)``).
    self.num_items = len(self._item_of)

  def __iter__(self) -> Iterator[dict]:
    for path in self.paths:
      yield from self._file(path)

  def _file(self, path) -> Iterator[dict]:
    delim, num_fields, cols = _tsv_header(path, self.delimiter, (), sessions=False)
    qc, dc, pc, cc = (cols[c] for c in _REQUIRED)
    ic = cols.get("impressions")
    base, item_of = self.position_base, self._item_of
    items, positions, clicks, weights = [], [], [], []
    rows, top, large = 0, _io.MAX_INFERRED_EXTENT - 1, []  # positions that raise the maximum beyond the floor

    def chunk():
      n = len(items)
      return {
        "doc_ids": np.asarray(items, np.int32),
        "positions": np.asarray(positions, np.int32),
        "clicks": np.asarray(clicks, np.float32),
        "weights": np.asarray(weights, np.float32),
        "where": np.ones(n, bool),
      }

    for line_no, f in _tsv_rows(path, delim, num_fields):
      position = _integer(f[pc], path, line_no, "position") - base
      if position < 0:
        raise ValueError(f"{path}:{line_no}: field 'position': {position + base} is below the top position {base}")
      click = _number(f[cc], path, line_no, "click")
      if ic is None:
        if click != 0.0 and click != 1.0:
          raise ValueError(
            f"{path}:{line_no}: field 'click': {click} is not 0 or 1 (add an impressions column for counts)"
          )
        weight = 1.0
      else:
        weight = _number(f[ic], path, line_no, "impressions")
        if not weight > 0:
          raise ValueError(f"{path}:{line_no}: field 'impressions': {weight} is not a positive count")
        if not 0 <= click <= weight:
          raise ValueError(f"{path}:{line_no}: field 'click': {click} is not a click count in [0, impressions]")
        click /= weight
      items.append(item_of[f[qc] + "\x1f" + f[dc]])
      positions.append(position)
      clicks.append(click)
      weights.append(weight)
      rows += 1
      if position > top:
        top = position
        large.append((line_no, position))
      if len(items) >= self.chunk_size:
        yield chunk()
        items, positions, clicks, weights = [], [], [], []
    limit = _io.extent_limit(rows)
    for line_no, position in large:
      if position >= limit:
        raise ValueError(
          f"{path}:{line_no}: field 'position': {position + base} is absurdly large for a log of {rows} rows "
          f"(more than {limit} positions)"
        )
    if items:
      yield chunk()


def _tsv_sessions(path, *, delimiter, position_base, extra_columns, max_sessions, check, item_of) -> Iterator[_Session]:
  r"""Sessions of a delimited log; ``check`` collects ``hash(session_id)`` of each session for the contiguity check.

  ``item_of`` (:func:`_tsv_vocabulary`) numbers the (query, document) pairs.
  """
  delim, num_fields, cols = _tsv_header(path, delimiter, extra_columns)
  qc, dc, pc, cc, sc = (cols[c] for c in ("query_id", "doc_id", "position", "click", "session_id"))
  ec = [cols[c] for c in extra_columns]
  current, current_sid, first_query, index = None, None, None, -1
  for line_no, f in _tsv_rows(path, delim, num_fields):
    sid = f[sc]
    if sid != current_sid:
      if current is not None:
        yield current
      if max_sessions is not None and index + 1 >= max_sessions:
        return
      index += 1
      current_sid, first_query = sid, f[qc]
      check.append(hash(sid))
      current = _Session(index, f[qc], len(ec))
    elif f[qc] != first_query:
      raise ValueError(
        f"{path}:{line_no}: field 'query_id': {f[qc]!r}, but its session began with query {first_query!r}"
      )
    assert current is not None  # the first row starts a session (its session_id is not the initial None)
    position = _integer(f[pc], path, line_no, "position") - position_base
    if position < 0:
      raise ValueError(
        f"{path}:{line_no}: field 'position': {position + position_base} is below the top position {position_base}"
      )
    click = _number(f[cc], path, line_no, "click")
    if click not in (0.0, 1.0):
      raise ValueError(f"{path}:{line_no}: field 'click': {click} is not 0 or 1 (add an impressions column for counts)")
    current.doc_ids.append(item_of[f[qc] + "\x1f" + f[dc]])
    current.doc_names.append(f[dc])
    current.positions.append(position)
    current.clicks.append(int(click))
    current.lines.append(line_no)
    for k, c in enumerate(ec):
      current.extras[k].append(_number(f[c], path, line_no, extra_columns[k]))
  if current is not None:
    yield current


class _Fallback(Exception):
  """The Arrow CSV path met something other than a clean log: the per-line parser takes over."""


def _arrow_csv(path, delimiter, extra_columns):
  """``(column name -> Arrow column, batches())``: Arrow's streaming CSV reader over a delimited log, as strings."""
  pa = _pyarrow()
  import pyarrow.csv  # noqa: PLC0415,F401

  delim, num_fields, cols = _tsv_header(path, delimiter, extra_columns)
  if len(delim) != 1 or _io.is_gzip(path):
    raise _Fallback("a multi-character delimiter, or gzip")
  names = [f"f{i}" for i in range(num_fields)]
  wanted = {c: names[i] for c, i in cols.items()}
  read = pa.csv.ReadOptions(skip_rows=1, column_names=names, block_size=_CSV_BLOCK)
  parse = pa.csv.ParseOptions(
    delimiter=delim, quote_char=False, double_quote=False, escape_char=False, ignore_empty_lines=False
  )
  conv = pa.csv.ConvertOptions(
    column_types={n: pa.string() for n in names},
    include_columns=sorted(set(wanted.values())),
    strings_can_be_null=False,
    null_values=[],
  )

  def batches():
    try:
      reader = pa.csv.open_csv(path, read_options=read, parse_options=parse, convert_options=conv)
      for rb in reader:
        if any(rb.column(i).null_count for i in range(rb.num_columns)):
          raise _Fallback("a missing value")
        yield rb
    except (pa.ArrowInvalid, UnicodeDecodeError) as e:
      raise _Fallback(str(e)) from None

  return wanted, batches


def _tsv_vocabulary_arrow(paths, *, delimiter, extra_columns) -> dict:
  """:func:`_tsv_vocabulary` with Arrow's CSV reader (:class:`_Fallback` where it meets anything irregular)."""
  pa = _pyarrow()
  pc = pa.compute
  parts, seen, pending = [], 0, 0
  for path in paths:
    wanted, batches = _arrow_csv(path, delimiter, extra_columns)
    rows = 0
    for rb in batches():
      query, doc = (pc.utf8_trim_whitespace(rb.column(wanted[c])) for c in ("query_id", "doc_id"))
      if len(query) and pc.min(pc.min_element_wise(pc.utf8_length(query), pc.utf8_length(doc))).as_py() == 0:
        # A blank line (Arrow reads it as a row of empty fields; the per-line parser skips it) or an empty id:
        # counted here it would be a pair of its own, shifting every id after it.
        raise _Fallback("a blank line or an empty id")
      key = pc.binary_join_element_wise(query, doc, "\x1f")
      rows += len(key)
      parts.append(pc.unique(key))
      pending += len(parts[-1])
      if pending > 2 * seen:  # deduplicate when the batches' pairs outgrow the vocabulary so far: amortized linear
        parts = [pc.unique(pa.concat_arrays(parts))]
        seen = pending = len(parts[0])
    if not rows:
      raise _Fallback("no data rows")
  vocab = pc.unique(pa.concat_arrays(parts))
  del parts
  vocab = pc.take(vocab, pc.sort_indices(vocab))  # UTF-8 byte order is code-point order, as np.unique sorts
  return {k: i for i, k in enumerate(vocab.to_pylist())}


def _tsv_tables(path, *, delimiter, position_base, extra_columns, max_sessions, check, schema, item_of) -> Iterator:
  r"""Tables of sessions of a clean delimited log, parsed by Arrow's streaming CSV reader (several times faster).

  Any irregularity (blank or ragged lines, a value that is not a plain integer or 0/1, a session
  that changes query) raises :class:`_Fallback`; :func:`_tsv_sessions` then converts the file
  again and raises the in-memory reader's error, or accepts what that reader accepts.
  ``item_of`` numbers the (query, document) pairs (a dict, built once: ``pc.index_in`` would
  hash the whole vocabulary again for every batch).
  """
  pa = _pyarrow()
  pc = pa.compute
  wanted, batches = _arrow_csv(path, delimiter, extra_columns)

  def items(key):
    enc = pc.dictionary_encode(key)
    local = enc.dictionary.to_pylist()  # the batch's distinct pairs
    ids = np.fromiter((item_of[k] for k in local), np.int64, len(local))
    return pa.array(ids[enc.indices.to_numpy(zero_copy_only=False)])

  carry = None  # the rows of the last session of the previous batch (it may go on)
  row0, index = 0, 0
  digits = "^[0-9]+$"
  for rb in batches():
    n = rb.num_rows
    col = {c: pc.utf8_trim_whitespace(rb.column(wanted[c])) for c in wanted}
    pos_s, clk_s = col["position"], col["click"]
    if not pc.all(pc.match_substring_regex(pos_s, digits)).as_py():
      raise _Fallback("a position that is not a plain integer")
    if not pc.all(pc.is_in(clk_s, value_set=pa.array(["0", "1"]))).as_py():
      raise _Fallback("a click that is not 0 or 1")
    pos = pc.subtract(pc.cast(pos_s, pa.int64()), position_base)
    if n and pc.min(pos).as_py() < 0:
      raise _Fallback("a position below the top")
    try:
      extras = [pc.cast(col[c], pa.float32()) for c in extra_columns]
    except pa.ArrowInvalid as e:
      raise _Fallback(str(e)) from None
    key = pc.binary_join_element_wise(col["query_id"], col["doc_id"], "\x1f")
    part = pa.table(
      {
        "sid": col["session_id"],
        "q": col["query_id"],
        "d": col["doc_id"],
        "item": items(key),
        "pos": pc.cast(pos, pa.int32()),
        "clk": pc.cast(clk_s, pa.int8()),
        "line": pa.array(np.arange(row0 + 2, row0 + 2 + n, dtype=np.int64)),
        **{f"x{k}": v for k, v in enumerate(extras)},
      }
    )
    row0 += n
    table = part if carry is None else pa.concat_tables([carry, part]).combine_chunks()
    sid = table.column("sid").combine_chunks()
    m = table.num_rows
    if not m:
      continue
    change = np.asarray(pc.not_equal(sid.slice(1), sid.slice(0, m - 1)).to_numpy(zero_copy_only=False), bool)
    starts = np.concatenate(([0], np.flatnonzero(change) + 1))
    owner = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, m)))
    q = table.column("q").combine_chunks()
    if not pc.all(pc.equal(q, pc.take(q, pa.array(starts[owner])))).as_py():
      raise _Fallback("a session that changes query")
    complete, carry = starts[-1], table.slice(starts[-1])
    yield from _session_rows(table.slice(0, complete), starts[:-1], index, max_sessions, check, schema, extra_columns)
    index += len(starts) - 1
    if max_sessions is not None and index >= max_sessions:
      return
  if carry is not None and carry.num_rows:
    yield from _session_rows(carry, np.array([0]), index, max_sessions, check, schema, extra_columns)


def _session_rows(table, starts, index, max_sessions, check, schema, extra_columns):
  """The shard rows of ``table``'s rows (one per document, sessions beginning at ``starts``)."""
  pa = _pyarrow()
  if not len(starts):
    return
  if max_sessions is not None:
    keep = max(0, min(len(starts), max_sessions - index))
    if keep < len(starts):
      table, starts = table.slice(0, int(starts[keep])), starts[:keep]
    if not keep:
      return
  offsets = pa.array(np.append(starts, table.num_rows).astype(np.int32))
  first = pa.array(starts)
  sid = pa.compute.take(table.column("sid"), first)
  check.extend(hash(x) for x in sid.to_pylist())

  def lists(name):
    return pa.ListArray.from_arrays(offsets, table.column(name).combine_chunks())

  columns = [
    pa.array(np.arange(index, index + len(starts), dtype=np.int64)),
    pa.compute.take(table.column("q"), first).combine_chunks(),
    lists("item"),
    lists("d"),
    lists("pos"),
    lists("clk"),
    lists("line"),
    *(lists(f"x{k}") for k in range(len(extra_columns))),
  ]
  yield pa.Table.from_arrays(columns, schema=schema)


class _Hashes:
  """``hash(session_id)`` of each session, 8 bytes each (Python ints in a list would take about 36)."""

  def __init__(self):
    self._chunks, self._buffer = [], []

  def extend(self, values):
    self._buffer.extend(values)
    if len(self._buffer) >= 1 << 16:
      self._chunks.append(np.asarray(self._buffer, np.int64))
      self._buffer = []

  def append(self, value):
    self.extend((value,))

  def sorted(self) -> np.ndarray:
    """All hashes, sorted (the chunks are released: 8 bytes per session at the peak, twice for the copy)."""
    out = np.concatenate([*self._chunks, np.asarray(self._buffer, np.int64)])
    self._chunks, self._buffer = [], []
    out.sort()
    return out


def _check_contiguous(paths, delimiter, hashes: _Hashes):
  """Raises for a session whose rows resume after another session began, in its file or a later one (a delimited
  log; a session continued from the end of one file at the top of the next is one of these)."""
  h = hashes.sorted()
  dup = np.flatnonzero(h[1:] == h[:-1])
  if not len(dup):
    return
  # A repeated hash: find the sessions with that id in the files (a hash collision is not an error).
  suspects = set(h[dup].tolist())
  seen = {}
  for path in paths:
    delim, num_fields, cols = _tsv_header(path, delimiter, ())
    sc = cols["session_id"]
    current = None
    for line_no, f in _tsv_rows(path, delim, num_fields):
      sid = f[sc]
      if sid == current:
        continue
      if sid in seen and hash(sid) in suspects:
        other, first = seen[sid]
        began = f"line {first}" if other == path else f"{other}:{first}"
        raise ValueError(
          f"{path}:{line_no}: field 'session_id': session {sid!r} (begun on {began}) resumes after other "
          "sessions; session shards need each session's rows together, in one file (sort the log by session_id)"
        )
      if hash(sid) in suspects:
        seen[sid] = (path, line_no)
      current = sid


def _page_sessions(path, pages, item_ids: dict, fields: tuple) -> Iterator[_Session]:
  """The sessions of a raw log's pages (:func:`~ultr_jax.data.baidu.baidu_pages`,
  :func:`~ultr_jax.data.yandex.yandex_pages`: the in-memory readers' own parsers, so the grammar and the
  errors are theirs); ids interned in ``item_ids``, ``fields`` the names of the query and document ids."""
  intern = item_ids.setdefault  # (query, document) -> dense id, shared by the files of one conversion
  qid_field, url_field = fields
  for index, page in enumerate(pages):
    s = _Session(index, decode_id(page.qid, path, qid_field, page.line))
    s.doc_ids = [intern((page.query, url), len(item_ids)) for url in page.urls]
    s.doc_names = [decode_id(url, path, url_field, line) for url, line in zip(page.urls, page.lines)]
    s.positions, s.clicks, s.lines = page.positions, [int(c) for c in page.clicks], page.lines
    yield s


@_shards.converts_into_out_dir  # the workdir lock: one writer; a failure leaves it incomplete
def convert_click_log(
  path: Union[PathLike, Sequence[PathLike]],
  out_dir: PathLike,
  *,
  format: str = "tsv",  # pylint: disable=redefined-builtin
  shard_size: int = 1 << 20,
  row_group_size: int = 4096,
  delimiter: Optional[str] = None,
  position_base: int = 1,
  query_key: str = "query",
  extra_columns: Sequence[str] = (),
  max_sessions: Optional[int] = None,
  overwrite: bool = False,
) -> list:
  r"""Converts a session click log to Parquet session shards, reading it line by line.

  The shards hold the log's sessions in file order (see the module docstring
  for the columns); :func:`read_session_shards` of them equals the in-memory
  reader of ``path`` (``read_click_log(path, format=format)``, with the same
  options), and :class:`~ultr_jax.data.SessionStream` batches them as
  :func:`~ultr_jax.data.click_log_sessions` lays out that log.

  Several files (the ``part-*.gz`` of Baidu-ULTR) convert as one log: one
  vocabulary of (query, document) ids over all of them (the ids the in-memory
  reader gives the files concatenated), sessions numbered on from file to
  file; a shard never spans two files, and its metadata names its file.

  Args:
    path: the log (``.gz`` is decompressed on the fly), or a list of files.
    out_dir: the directory for ``part-NNNNN.parquet`` and, written last, the
      manifest ``_manifest.json`` that every reader requires (created; it
      must hold no shards yet).
    format: one of :data:`~ultr_jax.data.CLICK_LOG_FORMATS` (``"tsv"``: the
      delimited rows of :func:`~ultr_jax.data.read_click_log`, with a
      ``session_id`` column; ``"baidu"``: a raw Baidu-ULTR session file;
      ``"yandex"``, ``"yandex_personalized"``: the Yandex logs).
    shard_size: sessions per shard file (the unit :class:`SessionStream`'s
      processes split by is the row group).
    row_group_size: sessions per Parquet row group: the unit of reading,
      shuffling and splitting over processes, and the converter's buffer.
    delimiter: the column separator, as in :func:`~ultr_jax.data.read_click_log`
      (None: a tab if the header has one, else a comma; ``"tsv"`` only).
    position_base: the rank of the top position in the file (1, or 0), as in
      :func:`~ultr_jax.data.read_click_log` (``"tsv"`` only).
    query_key: as in :func:`~ultr_jax.data.read_baidu_sessions` (``"baidu"``).
    extra_columns: further numeric columns of a ``"tsv"`` log, kept per
      document as ``list<float32>``.
    max_sessions: convert only the first this many sessions (over all files).
    overwrite: replace a conversion already in ``out_dir`` (complete, or
      interrupted: shards without a manifest); only its ``part-NNNNN.parquet``
      files and manifest are removed.

  Returns:
    The shard paths, in session order.

  Raises:
    ValueError: the in-memory reader's errors (naming the file, line and
      field); for ``"tsv"`` also a log without ``session_id``, a session that
      changes query, or whose rows resume after another session began;
      ``out_dir`` holding a conversion without ``overwrite``.

  >>> import pathlib, tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> _ = (d / "log.tsv").write_text("session_id\tquery_id\tdoc_id\tposition\tclick\n"
  ...                               "s1\tq\ta\t1\t0\ns1\tq\tb\t2\t1\ns2\tq\tb\t1\t1\n")
  >>> shards = convert_click_log(d / "log.tsv", d / "shards", row_group_size=1)
  >>> [pathlib.Path(p).name for p in shards]
  ['part-00000.parquet']
  >>> log = read_session_shards(d / "shards")
  >>> log.items.tolist(), log.positions.tolist(), log.sessions.tolist()
  ([0, 1, 1], [0, 1, 0], [0, 0, 1])
  """
  if format not in CLICK_LOG_FORMATS:
    raise ValueError(f"format must be one of {CLICK_LOG_FORMATS}, got {format!r}")
  if int(shard_size) < 1 or int(row_group_size) < 1:
    raise ValueError(f"shard_size and row_group_size must be >= 1, got {shard_size} and {row_group_size}")
  if format == "baidu" and query_key not in QUERY_KEYS:
    raise ValueError(f"query_key must be one of {QUERY_KEYS}, got {query_key!r}")
  if extra_columns and format != "tsv":
    raise ValueError(f"extra_columns: only a 'tsv' log has further columns, got format {format!r}")
  paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
  if not paths:
    raise ValueError("path: give at least one file")
  paths = [session_file(p, max_sessions) for p in paths]
  out_dir = _shards.prepare_out_dir(out_dir, overwrite)
  meta = {"format": format}
  if format == "tsv":
    meta["position_base"] = str(position_base)
  elif format == "baidu":
    meta["query_key"] = query_key
  tsv: dict[str, Any] = dict(delimiter=delimiter, extra_columns=tuple(extra_columns))  # the delimited logs' options

  def run(arrow: bool) -> list:
    writer = _ShardWriter(out_dir, int(shard_size), int(row_group_size), extra_columns, meta)
    try:
      if format == "tsv":
        item_of = (_tsv_vocabulary_arrow if arrow else _tsv_vocabulary)(paths, **tsv)
      item_ids: dict = {}
      offset = 0  # sessions of the files before
      hashes = _Hashes()  # of every file's sessions: a session id may not come back in a later file either
      done = []
      for p in paths:
        remaining = None if max_sessions is None else max_sessions - offset
        if remaining is not None and remaining <= 0:
          break
        writer.set_source(str(p))  # a shard holds one file's sessions
        done.append(p)
        if format == "tsv" and arrow:
          kw = dict(max_sessions=remaining, check=hashes, schema=writer.schema, item_of=item_of)
          count = 0
          for table in _tsv_tables(p, position_base=position_base, **tsv, **kw):
            count = table.column("session")[-1].as_py() + 1
            writer.add_table(table.set_column(0, "session", pa.compute.add(table.column("session"), offset)))
          offset += count
          continue
        if format == "tsv":
          sessions = _tsv_sessions(
            p, position_base=position_base, **tsv, max_sessions=remaining, check=hashes, item_of=item_of
          )
        elif format == "baidu":
          pages = baidu_pages(p, query_key=query_key, max_sessions=remaining)
          sessions = _page_sessions(p, pages, item_ids, ("qid", "url_md5"))
        else:
          layout = "personalized" if format == "yandex_personalized" else "relpred"
          pages = yandex_pages(p, layout=layout, max_sessions=remaining)
          sessions = _page_sessions(p, pages, item_ids, ("QueryID", "URLID"))
        count = 0
        for s in sessions:
          count = s.session + 1
          s.session += offset
          writer.add_session(s)
        offset += count
      if format == "tsv":
        _check_contiguous(done, delimiter, hashes)
      vocabulary = item_of if format == "tsv" else item_ids  # key -> id, in id order
      return writer.finish(vocabulary_digest=_shards.vocabulary_digest(vocabulary))
    except BaseException:
      writer.abort()
      raise

  pa = _pyarrow()
  if format == "tsv":  # Arrow's CSV reader first; the per-line parser where it meets anything irregular
    try:
      return run(arrow=True)
    except _Fallback:
      pass
  return run(arrow=False)


def session_shard_paths(source: Union[PathLike, Sequence[PathLike]]) -> list:
  """The shard files of ``source``: a file, a glob pattern, a directory or a list of them.

  A directory gives the shards its manifest (``_manifest.json``) lists, in the conversion's order; files and
  globs are sorted by path (the conversion's session order), without duplicates. The readers then check each
  file against its directory's manifest.

  Args:
    source: a shard file, a glob pattern, a directory of shards with its manifest, or a list of them.

  Returns:
    The shard paths (strings), in session order.

  Raises:
    FileNotFoundError: a file that does not exist, or a glob or directory that matches no shard.
    ValueError: a directory holding files its manifest does not list (another conversion's shards, or an
      interrupted one's temporary files), naming the file.

  >>> session_shard_paths("/nonexistent/*.parquet")
  Traceback (most recent call last):
  ...
  FileNotFoundError: /nonexistent/*.parquet: no session shards match
  """
  return _io.expand_sources(
    source,
    what="session shards",
    directory=lambda d: _shards.manifest_paths(d, "session shards"),
    missing="no such session shard",
    sort=True,
  )


def session_shard_set(paths: Sequence[str]) -> _shards.ShardSet:
  """The session shards ``paths``, checked against their manifest (:func:`~ultr_jax.data._shards.shard_set`),
  each with the session columns."""
  shards = _shards.shard_set(paths, "session shards")
  for path in shards.paths:
    names = shards.schemas[path].names
    missing = [c for c in SESSION_COLUMNS if c not in names]
    if missing:
      raise ValueError(f"{path}: field {missing[0]!r}: no such column; a session shard has {list(SESSION_COLUMNS)}")
  return shards


@_shards.converts_into_out_dir  # the workdir lock: one writer; a failure leaves it incomplete
def write_session_shards(
  batches,
  out_dir: PathLike,
  *,
  shard_size: int = 1 << 20,
  row_group_size: int = 4096,
  source: str = "arrays",
  overwrite: bool = False,
) -> list:
  r"""Writes sessions held as arrays (a simulated log, batch by batch) as session shards, in bounded memory.

  Each batch is a dict of ``doc_ids int[B, L]`` (dense ids, :math:`\ge 0`), ``clicks [B, L]`` (0/1), optional
  ``where bool[B, L]`` (the shown items; default all) and ``positions int[B, L]`` (0-based; default the item's
  index). A session's row holds its shown items in array order; a session with none is skipped. The ``session``
  column numbers the sessions of all batches from 0 (skipped ones included), ``query_id``, ``doc_names`` and
  ``lines`` are null (arrays have no names or source lines). The shards are those of :func:`convert_click_log`,
  so :class:`~ultr_jax.data.SessionStream` and :func:`~ultr_jax.data.open_click_log` read them; memory holds one
  batch and one row group.

  Args:
    batches: an iterable of batch dicts (above).
    out_dir: a new or empty directory.
    shard_size: sessions per shard file, as in :func:`convert_click_log`.
    row_group_size: sessions per Parquet row group, as in :func:`convert_click_log`.
    source: recorded as the shards' ``ultr_jax.source``.
    overwrite: replace a conversion already in ``out_dir`` (see :func:`convert_click_log`).

  Returns:
    The shard paths, in order.

  Raises:
    ValueError: ``shard_size`` or ``row_group_size`` < 1; a batch whose ``doc_ids`` and ``clicks`` are not of
      one ``[B, L]`` shape, whose shown ``doc_ids`` are not integers >= 0, or whose shown clicks are not 0 or 1
      (naming the batch, session, item and field); ``out_dir`` holding a conversion without ``overwrite``.

  >>> import tempfile
  >>> d = tempfile.mkdtemp()
  >>> b = {"doc_ids": np.array([[3, 1], [2, 0]]), "clicks": np.array([[1, 0], [0, 0]]),
  ...      "where": np.array([[True, True], [True, False]])}
  >>> log = read_session_shards(write_session_shards([b], d))
  >>> log.items.tolist(), log.positions.tolist(), log.clicks.tolist(), log.sessions.tolist(), log.num_items
  ([3, 1, 2], [0, 1, 0], [1.0, 0.0, 0.0], [0, 0, 1], 4)
  """
  pa = _pyarrow()
  if int(shard_size) < 1 or int(row_group_size) < 1:
    raise ValueError(f"shard_size and row_group_size must be >= 1, got {shard_size} and {row_group_size}")
  out_dir = _shards.prepare_out_dir(out_dir, overwrite)
  writer = _ShardWriter(out_dir, int(shard_size), int(row_group_size), (), {"source": source, "format": "arrays"})
  schema, start = writer.schema, 0
  try:
    for i, batch in enumerate(batches):
      ids, clicks = np.asarray(batch["doc_ids"]), np.asarray(batch["clicks"])
      if ids.ndim != 2 or ids.shape != clicks.shape:
        raise ValueError(f"batch {i}: doc_ids {ids.shape} and clicks {clicks.shape} must have one [B, L] shape")
      where = np.ones(ids.shape, bool) if batch.get("where") is None else np.asarray(batch["where"], bool)
      positions = batch.get("positions")
      positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape) if positions is None else np.asarray(positions)
      if not np.issubdtype(ids.dtype, np.integer) or (where.any() and ids[where].min() < 0):
        raise ValueError(f"batch {i}: doc_ids must be integers >= 0 where shown")
      bad = where & (clicks != 0) & (clicks != 1)
      if bad.any():
        b, r = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"batch {i}, session {b}, item {r}: field 'click': expected 0 or 1, got {clicks[b, r]!r}")
      lengths = where.sum(axis=1)
      rows = np.flatnonzero(lengths)
      offsets = pa.array(np.concatenate([[0], np.cumsum(lengths[rows])]).astype(np.int32))
      n = int(lengths.sum())
      shown = (lambda x: x.ravel()) if n == where.size else (lambda x: x[where])  # row-major: sessions in order
      lists = lambda values: pa.ListArray.from_arrays(offsets, values)
      table = pa.Table.from_arrays(
        [
          pa.array(start + rows, pa.int64()),
          pa.nulls(rows.shape[0], pa.string()),
          lists(pa.array(shown(ids).astype(np.int64, copy=False))),
          lists(pa.nulls(n, pa.string())),
          lists(pa.array(shown(positions).astype(np.int32, copy=False))),
          lists(pa.array(shown(clicks).astype(np.int8, copy=False))),
          lists(pa.nulls(n, pa.int64())),
        ],
        schema=schema,
      )
      writer.add_table(table)
      start += ids.shape[0]
    return writer.finish()
  except BaseException:
    writer.abort()
    raise


def read_session_shards(source: Union[PathLike, Sequence[PathLike]]) -> ClickLog:
  r"""Reads session shards whole, as the :class:`~ultr_jax.data.ClickLog` of the log they were converted from.

  For small logs and tests: it equals ``read_click_log(source_file, format=...)`` of the
  converted file (:attr:`~ultr_jax.data.ClickLog.lines` is None for the delimited layout, as
  there). Large logs are read with :class:`~ultr_jax.data.SessionStream`.

  Args:
    source: a shard, a glob, a directory of shards, or a list of them
      (:func:`session_shard_paths`).

  Returns:
    A :class:`~ultr_jax.data.ClickLog`, one row per shown document, ``sessions`` the
    ``session`` column.

  Raises:
    FileNotFoundError: a missing shard, or a glob or directory that matches none (naming it).
    ValueError: the checks of :func:`session_shard_paths` and :class:`~ultr_jax.data.SessionStream` (a shard
      its manifest does not list, shards of two conversions, a size or footer that is not the manifest's, an
      unreadable or truncated shard), naming the file.

  >>> import pathlib, tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp())
  >>> _ = (d / "log.tsv").write_text("session_id\tquery_id\tdoc_id\tposition\tclick\ns\tq\ta\t2\t1\n")
  >>> log = read_session_shards(convert_click_log(d / "log.tsv", d / "out"))
  >>> log.positions.tolist(), log.clicks.tolist(), log.num_positions
  ([1], [1.0], 2)
  """
  pa = _pyarrow()
  shards = session_shard_set(session_shard_paths(source))
  paths, tables = shards.paths, []
  metas = [shards.footers[p] for p in paths]
  for p in paths:
    f = _shards.open_parquet(p, "Parquet shard")
    for g in range(f.num_row_groups):
      table = _shards.read_row_group(f, p, g, 0, list(SESSION_COLUMNS), "session shard")
      tables.append(table.replace_schema_metadata(None))
  table = pa.concat_tables(tables) if tables else _schema(()).empty_table().select(list(SESSION_COLUMNS))
  lengths = pa.compute.list_value_length(table.column("doc_ids")).to_numpy(zero_copy_only=False).astype(np.int64)

  def flat(name, dtype):
    col = table.column(name).combine_chunks()
    return np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype)

  def source_lines():
    # An "arrays" log (write_session_shards) has no source lines: its nulls read as -1 (no line, as
    # click_log._line_of), not as a float NaN cast to int.
    col = table.column("lines").combine_chunks().flatten()
    return np.asarray(pa.compute.fill_null(col, -1).to_numpy(zero_copy_only=False), np.int32)

  positions = flat("positions", np.int32)
  fmt = metas[0].get("format", "tsv")
  query_ids = np.asarray(table.column("query_id").to_numpy(zero_copy_only=False), dtype=str)
  return ClickLog(
    items=flat("doc_ids", np.int32),
    positions=positions,
    clicks=flat("clicks", np.float32),
    weights=np.ones(len(positions), np.float32),
    query_ids=np.repeat(query_ids, lengths),
    doc_ids=np.asarray(table.column("doc_names").combine_chunks().flatten().to_numpy(zero_copy_only=False), dtype=str),
    num_items=int(shards.sizes.get("num_items", 0)),
    num_positions=int(positions.max()) + 1 if len(positions) else 0,
    sessions=np.repeat(table.column("session").to_numpy().astype(np.int32), lengths),
    path=metas[0].get("source", str(paths[0])),
    lines=None if fmt == "tsv" else source_lines(),
  )
