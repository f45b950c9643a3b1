r"""Logged clicks from a delimited text file: one row per shown document.

The layout a search log is usually exported in: a header line, then one row
per (session, shown document) with columns

* ``query_id``, ``doc_id``: any strings (numbers, URLs, hashes);
* ``position``: the rank the document was shown at (1-based by default);
* ``click``: 0 or 1; or, with an ``impressions`` column (aggregated logs), the
  number of clicks out of that many impressions;
* optionally ``session_id``: rows with the same id are one result page shown
  to one user, consecutive in the file (a session that resumes after another
  began is an error) (:func:`click_log_sessions` lays them out for the session
  click models of :func:`ultr_jax.simulation.fit_click_model`).

Other columns are ignored. The delimiter is a tab if the header has one, else
a comma. :func:`read_click_log` turns the rows into the identifiability
graph's records (a dense item id per (query, document) pair, 0-based factor =
position), ready for :func:`ultr_jax.graph.check_identifiability` and
:func:`ultr_jax.graph.harvest_propensities`. Bad rows raise a ``ValueError``
naming the file, the line and the field.
"""

import contextlib
import io
import os
import pathlib
import warnings
from typing import Callable, NamedTuple, Optional

import numpy as np

from ultr_jax.data import _io

__all__ = ["CLICK_LOG_FORMATS", "ClickLog", "read_click_log", "click_log_sessions"]

_REQUIRED = ("query_id", "doc_id", "position", "click")


class ClickLog(NamedTuple):
  """Rows of a click log as flat ``[R]`` arrays.

  Attributes:
    items: ``int32[R]`` dense id of the row's (query, document) pair.
    positions: ``int32[R]`` 0-based position.
    clicks: ``float32[R]`` 0/1 clicks, or CTRs (clicks / impressions).
    weights: ``float32[R]`` impressions per row (1 without that column).
    query_ids, doc_ids: ``str[R]`` the ids as written.
    num_items: number of distinct (query, document) pairs.
    num_positions: largest position + 1.
    sessions: ``int32[R]`` dense session id of each row (in order of first
      appearance), or None without a ``session_id`` column.
    path: the file read (for error messages).
    lines: ``int32[R]`` the 1-based line of each row in ``path`` where it is
      not the delimited layout's (the Baidu-ULTR session files), else None.
  """

  items: np.ndarray
  positions: np.ndarray
  clicks: np.ndarray
  weights: np.ndarray
  query_ids: np.ndarray
  doc_ids: np.ndarray
  num_items: int
  num_positions: int
  sessions: Optional[np.ndarray] = None
  path: str = ""
  lines: Optional[np.ndarray] = None


def _row_line(log: ClickLog, row: int) -> int:
  """The 1-based line of data row ``row`` of ``log``'s file."""
  return int(log.lines[row]) if log.lines is not None else _line_of(log.path, row)


def _text(path) -> io.StringIO:
  """The file as text with universal newlines (gzip decompressed; ValueError naming a non-UTF-8 line)."""
  return io.StringIO(_io.read_text(path), newline=None)


def _line_of(path, row: int) -> int:
  """1-based line number of data row ``row`` (empty lines are skipped, as np.loadtxt does; a line of blanks
  is a row)."""
  seen = -1
  for line_no, line in enumerate(_text(path), start=1):
    if line_no == 1 or not line.rstrip("\r\n"):
      continue
    seen += 1
    if seen == row:
      return line_no
  return -1


def _ragged_row(path, delim: str, num_fields: int):
  """Raises for the first data line whose field count differs from the header's."""
  for line_no, line in enumerate(_text(path), start=1):
    if line_no > 1 and line.rstrip("\r\n"):
      n = len(line.rstrip("\r\n").split(delim))
      if n != num_fields:
        raise ValueError(f"{path}:{line_no}: {n} fields, but the header names {num_fields}")


def _numbers(path, column: np.ndarray, field: str, dtype) -> np.ndarray:
  """The column's decimal numbers (ASCII ``[+-]digits[.digits][e[+-]digits]``, integers for int64).

  NumPy's own conversion would take ``1_0``, Unicode digits, ``nan`` and ``inf``: each distinct
  string is checked against the grammar instead (a log column holds few distinct values).
  """
  uniq, inverse = np.unique(column, return_inverse=True)
  pattern = _io.INT_RE if dtype is np.int64 else _io.NUM_RE
  values = np.empty(len(uniq), np.float64)
  for k, value in enumerate(uniq.tolist()):
    ok = pattern.fullmatch(value.encode("utf-8", "replace"))
    if ok:
      values[k] = float(value)
    if not ok or not np.isfinite(values[k]) or (dtype is np.int64 and abs(values[k]) >= 2**53):
      row = int(np.flatnonzero(inverse.reshape(-1) == k)[0])
      kind = "an integer" if dtype is np.int64 else "a finite decimal number"
      raise ValueError(f"{path}:{_line_of(path, row)}: field {field!r}: {value!r} is not {kind}")
  out = values[inverse.reshape(-1)]
  return out.astype(np.int64) if dtype is np.int64 else out


def _first_bad(path, bad: np.ndarray, field: str, values: np.ndarray, msg: str):
  row = int(np.flatnonzero(bad)[0])
  raise ValueError(f"{path}:{_line_of(path, row)}: field {field!r}: {values[row]} {msg}")


def _check_contiguous_sessions(path, sid: np.ndarray, sessions: np.ndarray) -> None:
  """Raises for a session whose rows resume after another session began (the rule of the session shards'
  converter: a session is one result page, its rows together)."""
  resumed = np.flatnonzero(sessions[1:] < np.maximum.accumulate(sessions)[:-1]) + 1  # an earlier session again
  if not len(resumed):
    return
  row = int(resumed[0])
  began = int(np.flatnonzero(sessions == sessions[row])[0])
  raise ValueError(
    f"{path}:{_line_of(path, row)}: field 'session_id': session {str(sid[row])!r} (begun on line "
    f"{_line_of(path, began)}) resumes after other sessions; a session's rows must be together (sort the log "
    "by session_id)"
  )


#: The text formats :func:`read_click_log` reads (``format=``): ``"tsv"`` (delimited rows), ``"baidu"``
#: (Baidu-ULTR sessions), ``"yandex"`` and ``"yandex_personalized"`` (the two Yandex logs).
CLICK_LOG_FORMATS = ("tsv", "baidu", "yandex", "yandex_personalized")
# The readers of the formats with a module of their own (format -> ``read(path) -> ClickLog``): baidu.py and
# yandex.py register theirs when imported (``ultr_jax.data`` imports both), so this module imports neither.
_SESSION_READERS: dict[str, Callable] = {}


def register_session_reader(format: str, reader: Callable) -> None:  # pylint: disable=redefined-builtin
  """Makes ``read_click_log(path, format=format)`` return ``reader(path)`` (one of :data:`CLICK_LOG_FORMATS`)."""
  if format not in CLICK_LOG_FORMATS:
    raise ValueError(f"format must be one of {CLICK_LOG_FORMATS}, got {format!r}")
  _SESSION_READERS[format] = reader


def session_file(path, max_sessions: Optional[int]) -> pathlib.Path:
  """``path`` as a Path, after the checks every session-log reader makes (``max_sessions`` >= 1, the file exists)."""
  if max_sessions is not None and int(max_sessions) < 1:
    raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"{path}: no such file")
  return path


@contextlib.contextmanager
def session_lines(path: pathlib.Path):
  """The file's lines as bytes (gzip, recognised by its magic bytes, decompressed on the fly).

  The caller turns :data:`READ_ERRORS` raised while iterating (a corrupt or truncated gzip
  stream) into a ValueError naming the file.
  """
  with _io.binary_lines(path) as fh:
    yield fh


#: What reading a (gzip) file can raise besides the reader's own ValueErrors.
READ_ERRORS = _io.DECODER_ERRORS


def raise_absurd_position(path, line: int, position: int, num_rows: int, field: str = "position"):
  """Raises for a 0-based ``position`` (on ``line``) absurdly larger than a log of ``num_rows`` rows
  (beyond ``max(MAX_INFERRED_EXTENT, num_rows)``: the dense ``[S, L]`` arrays would be absurdly large)."""
  raise ValueError(
    f"{path}:{line}: field {field!r}: position {position + 1} (1-based) is absurdly large "
    f"for a log of {num_rows} rows (a page of more than {_io.extent_limit(num_rows)} positions)"
  )


class SessionPage(NamedTuple):
  """One result page of a raw session log, as the session readers' per-record parsers yield it.

  :func:`~ultr_jax.data.baidu.baidu_pages` and :func:`~ultr_jax.data.yandex.yandex_pages` parse the
  text (one grammar, one set of errors); the in-memory readers and the streaming converter
  (:func:`~ultr_jax.data.convert_click_log`) both consume their pages.

  Attributes:
    qid: the query id as written (bytes).
    query: what makes two pages the same query (bytes; the item ids are of ``(query, url)`` pairs).
    line: the line of the page's query (page) record.
    urls: the shown documents' ids (bytes), in the page's order.
    positions: their 0-based positions.
    clicks: their clicks (0/1).
    lines: the line of each document.
  """

  qid: bytes
  query: bytes
  line: int
  urls: list
  positions: list
  clicks: list
  lines: list


def decode_id(value: bytes, path, field: str, line: Optional[int] = None) -> str:
  """One byte-string id as text, with :func:`decode_ids`' error for one that is not UTF-8."""
  try:
    return value.decode("utf-8")
  except UnicodeDecodeError as e:
    at = f"line {int(line)}, " if line is not None else ""
    raise ValueError(f"{path}: a {field} is not UTF-8 ({at}field {field!r}: {value!r}: {e.reason})") from e


def decode_ids(ids, path, field: str, lines=None) -> np.ndarray:
  """A ``str`` array of the byte-string ids a session reader collected (ASCII fast, else UTF-8).

  Raises ValueError naming ``path``, ``field`` (and the line, given ``lines[i]`` of every id) for
  ids that are not UTF-8.
  """
  raw = np.asarray(ids, dtype=bytes)
  try:
    return raw.astype(np.str_)  # ASCII: several times faster than np.char.decode
  except UnicodeDecodeError:
    pass
  for i, value in enumerate(ids):  # error path: name the first id that is not UTF-8
    decode_id(value, path, field, None if lines is None else lines[i])
  return np.char.decode(raw, "utf-8")


def read_click_log(path, *, delimiter: Optional[str] = None, position_base: int = 1, format: str = "tsv") -> ClickLog:  # pylint: disable=redefined-builtin
  r"""Reads a click log (see the module docstring for the columns).

  Args:
    path: the text file (UTF-8; gzip is decompressed).
    delimiter: column separator (default: a tab if the header has one, else a
      comma).
    position_base: the rank of the top position in the file (1, or 0).
    format: ``"tsv"`` (the delimited rows above), ``"baidu"`` (a raw
      Baidu-ULTR session file, read by
      :func:`~ultr_jax.data.read_baidu_sessions`), ``"yandex"`` or
      ``"yandex_personalized"`` (the Yandex Relevance Prediction or
      Personalized Web Search Challenge log, read by
      :func:`~ultr_jax.data.read_yandex_sessions`); ``delimiter`` and
      ``position_base`` apply to ``"tsv"`` only.

  Returns:
    A :class:`ClickLog`.

  Raises:
    ValueError: a file that is not UTF-8 (gzip is decompressed), a missing
      column, a row with the wrong number of fields, a position that is not
      an ASCII integer, is below ``position_base`` or is absurdly large (more
      than ``max(65536, number of rows)``), a click or impression count that
      is not a finite decimal number, a click that is not 0/1 (or not in
      ``[0, impressions]``), a session whose rows resume after another
      session began (as :func:`~ultr_jax.data.convert_click_log` refuses it),
      naming the file and line.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.tsv"
  >>> _ = p.write_text("query_id\tdoc_id\tposition\tclick\nq1\ta\t1\t1\nq1\tb\t2\t0\nq1\tb\t1\t1\n")
  >>> log = read_click_log(p)
  >>> print(log.items.tolist(), log.positions.tolist(), log.clicks.tolist(), log.num_items)
  [0, 1, 1] [0, 1, 0] [1.0, 0.0, 1.0] 2
  """
  if format not in CLICK_LOG_FORMATS:
    raise ValueError(f"format must be one of {CLICK_LOG_FORMATS}, got {format!r}")
  if format in _SESSION_READERS:
    return _SESSION_READERS[format](path)
  path = os.fspath(path)
  text = _text(path)
  header = text.readline().rstrip("\r\n")
  text.seek(0)
  if not header:
    raise ValueError(f"{path}:1: empty file; expected a header with columns {list(_REQUIRED)}")
  delim = delimiter or ("\t" if "\t" in header else ",")
  names = [c.strip() for c in header.split(delim)]
  missing = [c for c in _REQUIRED if c not in names]
  if missing:
    raise ValueError(f"{path}:1: the header {names} lacks the column(s) {missing}")
  col = {c: names.index(c) for c in (*_REQUIRED, "impressions", "session_id") if c in names}
  if "impressions" in col and "session_id" in col:
    raise ValueError(
      f"{path}:1: a log has either session_id (one row per shown document and session) "
      "or impressions (aggregated counts), not both"
    )
  try:
    with warnings.catch_warnings():  # NumPy's note that blank lines are not counted
      warnings.simplefilter("ignore", UserWarning)
      raw = np.loadtxt(text, dtype=str, delimiter=delim, skiprows=1, ndmin=2, comments=None)
  except ValueError as e:
    _ragged_row(path, delim, len(names))
    raise ValueError(f"{path}: {e}") from None
  if raw.shape[0] == 0:
    raise ValueError(f"{path}: no data rows after the header")
  if raw.shape[1] != len(names):  # every row alike, but not as the header says
    _ragged_row(path, delim, len(names))
  raw = np.char.strip(raw)
  q, d = raw[:, col["query_id"]], raw[:, col["doc_id"]]
  position = _numbers(path, raw[:, col["position"]], "position", np.int64) - position_base
  if (position < 0).any():
    _first_bad(path, position < 0, "position", position + position_base, f"is below the top position {position_base}")
  limit = _io.extent_limit(len(position))
  if (position >= limit).any():
    _first_bad(
      path,
      position >= limit,
      "position",
      position + position_base,
      f"is absurdly large for a log of {len(position)} rows (more than {limit} positions)",
    )
  clicks = _numbers(path, raw[:, col["click"]], "click", np.float64)
  if "impressions" in col:
    imp = _numbers(path, raw[:, col["impressions"]], "impressions", np.float64)
    bad = ~(imp > 0)
    if bad.any():
      _first_bad(path, bad, "impressions", imp, "is not a positive count")
    bad = ~((clicks >= 0) & (clicks <= imp))
    if bad.any():
      _first_bad(path, bad, "click", clicks, "is not a click count in [0, impressions]")
    ctr, weights = clicks / imp, imp
  else:
    bad = ~((clicks == 0) | (clicks == 1))
    if bad.any():
      _first_bad(path, bad, "click", clicks, "is not 0 or 1 (add an impressions column for counts)")
    ctr, weights = clicks, np.ones_like(clicks)
  key = np.char.add(np.char.add(q, "\x1f"), d)
  _, items = np.unique(key, return_inverse=True)
  sessions = None
  if "session_id" in col:
    # Dense ids in order of first appearance, so sessions keep the file's order.
    sid = raw[:, col["session_id"]]
    _, first, inverse = np.unique(sid, return_index=True, return_inverse=True)
    sessions = np.argsort(np.argsort(first))[inverse.reshape(-1)]
    _check_contiguous_sessions(path, sid, sessions)
  return ClickLog(
    items=items.reshape(-1).astype(np.int32),
    positions=position.astype(np.int32),
    clicks=ctr.astype(np.float32),
    weights=weights.astype(np.float32),
    query_ids=q,
    doc_ids=d,
    num_items=int(items.max()) + 1,
    num_positions=int(position.max()) + 1,
    sessions=None if sessions is None else sessions.astype(np.int32),
    path=path,
  )


def click_log_sessions(log: ClickLog, *, list_size: Optional[int] = None) -> dict:
  r"""Lays a session click log out as ``[S, L]`` arrays, item ``i`` = position ``i``.

  The layout of :func:`ultr_jax.simulation.fit_click_model` and the session
  likelihoods: one row per session (in order of first appearance in the
  file), the document shown at position ``p`` in column ``p``; positions no
  row fills are masked (``where`` False), so a page with a gap keeps its
  ranks.

  Args:
    log: a :class:`ClickLog` read from a file with a ``session_id`` column.
    list_size: ``L`` (default: the log's largest position + 1).

  Returns:
    dict of ``doc_ids int32[S, L]`` (the (query, document) ids of
    :attr:`ClickLog.items`), ``clicks float32[S, L]``, ``where bool[S, L]``
    and ``num_docs``.

  Raises:
    ValueError: no ``session_id`` column; a session that spans two queries,
      shows two documents at one position, or a position beyond
      ``list_size`` (naming the file and line).

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.tsv"
  >>> _ = p.write_text("session_id\tquery_id\tdoc_id\tposition\tclick\n"
  ...                  "s1\tq\ta\t1\t0\ns1\tq\tb\t2\t1\ns2\tq\tb\t1\t1\n")
  >>> out = click_log_sessions(read_click_log(p))
  >>> print(out["doc_ids"].tolist(), out["clicks"].tolist(), out["where"].tolist())
  [[0, 1], [1, 0]] [[0.0, 1.0], [1.0, 0.0]] [[True, True], [True, False]]
  """
  if log.sessions is None:
    raise ValueError(
      f"{log.path}: the log has no session_id column; session click models need one row per (session, shown document)"
    )
  length = log.num_positions if list_size is None else int(list_size)
  bad = log.positions >= length
  if bad.any():
    row = int(np.flatnonzero(bad)[0])
    raise ValueError(
      f"{log.path}:{_row_line(log, row)}: field 'position': position {log.positions[row] + 1} "
      f"(1-based) is beyond list_size {length}"
    )
  num_sessions = int(log.sessions.max()) + 1
  # One query per session: the first row's query must be every row's.
  _, query = np.unique(log.query_ids, return_inverse=True)
  query = query.reshape(-1)
  first_row = np.full(num_sessions, len(query))
  np.minimum.at(first_row, log.sessions, np.arange(len(query)))
  bad = query != query[first_row[log.sessions]]
  if bad.any():
    row = int(np.flatnonzero(bad)[0])
    raise ValueError(
      f"{log.path}:{_row_line(log, row)}: field 'query_id': {str(log.query_ids[row])!r}, but "
      f"its session began with query {str(log.query_ids[first_row[log.sessions[row]]])!r}"
    )
  cell = log.sessions.astype(np.int64) * length + log.positions
  _, first = np.unique(cell, return_index=True)
  repeated = np.ones(len(cell), bool)
  repeated[first] = False  # every row but the first of its (session, position) cell
  if repeated.any():
    row = int(np.flatnonzero(repeated)[0])
    raise ValueError(
      f"{log.path}:{_row_line(log, row)}: field 'position': its session already shows a "
      f"document at position {log.positions[row] + 1}"
    )
  doc_ids = np.zeros((num_sessions, length), np.int32)
  clicks = np.zeros((num_sessions, length), np.float32)
  where = np.zeros((num_sessions, length), bool)
  doc_ids[log.sessions, log.positions] = log.items
  clicks[log.sessions, log.positions] = log.clicks
  where[log.sessions, log.positions] = True
  return {"doc_ids": doc_ids, "clicks": clicks, "where": where, "num_docs": log.num_items}
