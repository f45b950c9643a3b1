r"""SVMlight / LETOR loaders (Yahoo!, MSLR-WEB10K/30K, Istella, LightGBM ``.query``).

A data line is ``label [qid:Q] id:value id:value ... [# comment]``: feature ids
are 1-based and may be sparse (absent features are 0), ``#`` starts a comment
(trailing or whole-line), blank lines are skipped. Without ``qid:`` fields the
lines are grouped into queries by a LightGBM-style ``.query`` file holding
one document count per query, in file order.

Parsing is vectorised over the whole file's bytes: tokens are located with
NumPy on the byte array, and numbers are decoded by a right-aligned
digit-matrix product, exact (correctly rounded, like ``strtod``) for tokens of
at most 15 significant characters; rarer tokens (exponents, long mantissas)
fall back to :func:`float`. The fast path takes only files whose bytes
(outside comments) are all in the grammar's alphabet (digits, ``.+-eE:``,
``qid:``, space, tab, CR, LF), checked in one pass; anything else is handed to
a line-by-line reference parser, which checks every token against the grammar
(tokens are separated by ASCII whitespace, vertical tab and form feed
included) and raises ``ValueError`` naming the file, the 1-based line and the
field.

Numbers are decimal (``[+-]digits[.digits][e[+-]digits]``; no ``nan``,
``inf``, hex or ``_``) and must fit float32; a feature id may appear once per
line. Gzip input (recognised by its magic bytes) is decompressed. Parsed arrays
are cached as ``.npz`` keyed by the content hash of the file(s) and the
options.
"""

import hashlib
import json
import os
import pathlib
import re
import tempfile
import warnings
from typing import NamedTuple, Optional, Union

import numpy as np

from ultr_jax.data import _io
from ultr_jax.data.dataset import RankingDataset

__all__ = ["SVMLightRows", "read_svmlight", "load_svmlight", "write_svmlight", "rows_to_dataset", "default_cache_dir"]

PathLike = Union[str, os.PathLike]
_CACHE_VERSION = 2  # 2: stricter checks (grammar bytes, float32 range, duplicate ids, absurd ids)
_F32_MAX = float(np.finfo(np.float32).max)
_I32_MAX = int(np.iinfo(np.int32).max)
# Bytes the fast path accepts once comments are cut and "qid:" is replaced by " \x01".
_FAST_BYTES = b"0123456789.+-eE: \t\n\r\x01"
_NUM_RE, _INT_RE, _NONFINITE = _io.NUM_RE, _io.INT_RE, _io.NONFINITE
_COMMENT_RE = re.compile(rb"[ \t]*#[^\n]*")
_POW10 = 10.0 ** np.arange(23)
_CHUNK = 1 << 16
_SWAR_CHUNK = 1 << 16


class SVMLightRows(NamedTuple):
  """The rows of an SVMlight file in CSR form (one row per data line).

  Attributes:
    labels: ``float32[N]`` relevance labels.
    qid: ``int64[N]`` query id of every row (the group index when the file
      has no ``qid:`` fields).
    group: ``int64[N]`` 0-based query index (order of first appearance).
    indptr: ``int64[N + 1]`` row pointers into ``indices`` / ``values``.
    indices: ``int32[nnz]`` 0-based feature indices (file id minus 1).
    values: ``float32[nnz]`` feature values.
    line: ``int64[N]`` 1-based line number of every row in the file.
    num_features: ``F``.
  """

  labels: np.ndarray
  qid: np.ndarray
  group: np.ndarray
  indptr: np.ndarray
  indices: np.ndarray
  values: np.ndarray
  line: np.ndarray
  num_features: int


def _err(path, line_no, field, msg) -> ValueError:
  return ValueError(f"{path}:{line_no}: field {field!r}: {msg}")


# ---------------------------------------------------------------------------
# Reference (line-by-line) parser: exact error messages.


def _show(tok: bytes) -> str:
  """A quoted token for an error message, non-ASCII and control bytes escaped: ``'0.5\\xc2\\xa0'``."""
  return repr(tok)[1:]


def _number(tok: bytes, path, line_no, field, what) -> float:
  """``tok`` as a float if it is a decimal number of the grammar, else ValueError naming the line and field."""
  if not _NUM_RE.fullmatch(tok):
    why = "non-finite" if tok.lstrip(b"+-").lower() in _NONFINITE else "non-numeric"
    raise _err(path, line_no, field, f"{why} {what} {_show(tok)} (expected a decimal number)")
  return float(tok)


def _parse_reference(data: bytes, path, first_line: int = 1):
  """Line-by-line parse; returns raw arrays (labels, qid or None, indptr, idx, val, line).

  ``first_line``: the line number of ``data``'s first line (a block of a file read block by block).
  """
  labels, qids, lines, indptr, idx, val = [], [], [], [0], [], []
  for line_no, raw in enumerate(data.split(b"\n"), start=first_line):
    text = raw.split(b"#", 1)[0].strip()
    if not text:
      continue
    toks = text.split()
    label = _number(toks[0], path, line_no, "label", "label")
    rest = toks[1:]
    q = None
    if rest and rest[0].startswith(b"qid:"):
      if not _INT_RE.fullmatch(rest[0][4:]) or abs(int(rest[0][4:])) >= 2**63:
        raise _err(path, line_no, "qid", f"bad qid {_show(rest[0])} (expected qid:<64-bit integer>)")
      q = int(rest[0][4:])
      rest = rest[1:]
    if qids and (q is None) != (qids[-1] is None):
      raise _err(path, line_no, "qid", "some lines have a qid: field and others do not")
    for tok in rest:
      shown = _show(tok)
      if tok.startswith(b"qid:"):
        raise _err(path, line_no, "qid", f"{shown} must directly follow the label")
      parts = tok.split(b":")
      if len(parts) != 2:
        raise _err(path, line_no, "feature", f"{shown} is not of the form id:value")
      if not _INT_RE.fullmatch(parts[0]):
        raise _err(path, line_no, "feature id", f"non-integer feature id in {shown}")
      fid = int(parts[0])
      if fid > _I32_MAX:
        raise _err(path, line_no, "feature id", f"feature id {fid} does not fit int32")
      fval = _number(parts[1], path, line_no, "value", f"value of {shown}:")
      idx.append(fid)
      val.append(fval)
    labels.append(label)
    qids.append(q)
    lines.append(line_no)
    indptr.append(len(idx))
  qid = None if not qids or qids[0] is None else np.array(qids, np.int64)
  return (
    np.array(labels, np.float64),
    qid,
    np.array(indptr, np.int64),
    np.array(idx, np.int64),
    np.array(val, np.float64),
    np.array(lines, np.int64),
  )


# ---------------------------------------------------------------------------
# Vectorised parser.


_U64 = np.uint64


def _rep(b: int) -> np.uint64:
  return _U64(int.from_bytes(bytes([b]) * 8, "little"))


_C30, _C76, _C80, _C7F, _C1E = _rep(0x30), _rep(0x76), _rep(0x80), _rep(0x7F), _rep(0x1E)
_MASK = _U64(0x000000FF000000FF)
_MUL1 = _U64(0x000F424000000064)  # 100 + (1000000 << 32)
_MUL2 = _U64(0x0000271000000001)  # 1 + (10000 << 32)
_P10U = 10 ** np.arange(20, dtype=np.uint64)


def _parse8(buf: np.ndarray, e: np.ndarray, lens: np.ndarray, integer: bool):
  """SWAR decoding of tokens of at most 8 bytes ending at ``e`` (see _parse_numbers).

  The 8 bytes ending at ``e`` are read as one little-endian uint64, bytes
  before the token are set to '0', non-digits ('.', a leading sign) are
  zeroed and the 8 digits are combined with the three multiply-shift steps
  of Lemire's ``parse_eight_digits_unrolled``.
  """
  win = np.lib.stride_tricks.as_strided(buf, shape=(len(buf) - 7, 8), strides=(1, 1))
  x = np.ascontiguousarray(win[e - 8]).view("<u8").ravel()  # buf has >= 8 leading pad bytes
  sh = ((8 - lens) * 8).astype(np.uint64)
  keep = np.left_shift(~_U64(0), sh)
  x = (x & keep) | (_C30 & ~keep)
  x ^= _C30
  hi = (x + _C76) & _C80  # 0x80 in every non-digit byte
  y = x ^ _C1E
  pm = ~(((y & _C7F) + _C7F) | y | _C7F)  # 0x80 in every '.' byte (exact)
  fb = (x >> sh) & _U64(0xFF)  # the token's first byte, xor 0x30
  neg = fb == 0x1D
  sgn = neg | (fb == 0x1B)
  sm = np.where(sgn, np.left_shift(_U64(0x80), sh), _U64(0))
  npt = np.bitwise_count(pm)
  ok = ((hi & ~pm & ~sm) == 0) & (npt <= 1) & (lens - npt - sgn > 0)
  if integer:
    ok &= (npt == 0) & ~sgn
  x &= ~((hi >> _U64(7)) * _U64(0xFF))
  v = x * _U64(10) + (x >> _U64(8))
  v = ((v & _MASK) * _MUL1 + ((v >> _U64(16)) & _MASK) * _MUL2) >> _U64(32)
  has = pm != 0
  if has.any():
    b = (np.log2(np.where(has, pm, _U64(1)).astype(np.float64)).astype(np.int64) - 7) // 8
    r = np.where(has, 7 - b, 0)
    pr = _P10U[r]
    v = np.where(has, (v // (pr * _U64(10))) * pr + v % pr, v)
    val = v.astype(np.float64) / pr.astype(np.float64)
  else:
    val = v.astype(np.float64)
  np.negative(val, out=val, where=neg)
  return val, ok


def _parse_wide(buf, e, lens, width, integer):
  """Digit-matrix decoding of tokens up to ``width`` <= 15 bytes (see _parse_numbers)."""
  cols = np.arange(-width, 0, dtype=np.int64)
  powers = _POW10[width - 1 :: -1]
  pos = e[:, None] + cols
  valid = cols >= -lens[:, None]
  m = np.where(valid, buf[np.maximum(pos, 0)], np.uint8(48))
  d = m - np.uint8(48)
  isdig = d < 10
  ispt = m == 46
  first = cols == -lens[:, None]
  issign = ((m == 45) | (m == 43)) & first
  npt = ispt.sum(1)
  ok = (isdig | ispt | issign).all(1) & (npt <= 1) & (isdig & valid).any(1)
  if integer:
    ok &= (npt == 0) & ~issign.any(1)
  mant = np.where(isdig, d, 0).astype(np.float64) @ powers
  r = np.where(npt > 0, width - 1 - np.argmax(ispt, axis=1), 0)
  pr = _POW10[r]
  mant = np.where(npt > 0, np.floor(mant / (pr * 10.0)) * pr + np.fmod(mant, pr), mant)
  val = mant / pr
  neg = (issign & (m == 45)).any(1)
  return np.where(neg, -val, val), ok


def _parse_numbers(buf: np.ndarray, s: np.ndarray, e: np.ndarray, integer: bool) -> Optional[np.ndarray]:
  """Decodes the tokens ``buf[s:e]`` as decimal numbers; None if one is invalid.

  A right-aligned token ``[sign] digits [. digits]`` has mantissa
  ``sum_j d_j 10^(W-1-j)`` with the point's column contributing 0; removing
  the point and dividing by ``10^r`` (``r`` fractional digits) is one
  correctly rounded float64 division while the mantissa is below 2^53, so the
  result equals ``strtod``'s. Tokens of <= 8 bytes use SWAR on uint64 words,
  up to 15 bytes a digit matrix; longer or exotic ones (exponents, ``nan``)
  go through :func:`float`. Integer fields accept digits only.
  """
  n = len(s)
  out = np.empty(n, np.float64)
  if n == 0:
    return out
  lens = e - s
  short = lens <= 8
  slow = []
  # Cache-sized chunks: small temporaries are reused by the allocator
  # instead of page-faulting fresh memory for every whole-file intermediate.
  if short.all():
    for a in range(0, n, _SWAR_CHUNK):
      out[a : a + _SWAR_CHUNK], ok = _parse8(buf, e[a : a + _SWAR_CHUNK], lens[a : a + _SWAR_CHUNK], integer)
      slow.append(a + np.flatnonzero(~ok))
  else:
    si = np.flatnonzero(short)
    for a in range(0, len(si), _SWAR_CHUNK):
      c = si[a : a + _SWAR_CHUNK]
      out[c], ok = _parse8(buf, e[c], lens[c], integer)
      slow.append(c[~ok])
    wi = np.flatnonzero(~short & (lens <= 15))
    for a in range(0, len(wi), _CHUNK):
      w = wi[a : a + _CHUNK]
      out[w], ok = _parse_wide(buf, e[w], lens[w], 15, integer)
      slow.append(w[~ok])
    slow.append(np.flatnonzero(lens > 15))
  slow = np.concatenate(slow)
  if len(slow):
    if integer:
      return None
    for i in slow.tolist():
      try:
        out[i] = float(buf[s[i] : e[i]].tobytes())
      except ValueError:
        return None
  return out


# Token types: plain (label), idx (before ':'), val (after ':'), qid.
_P, _I, _V, _Q = 0, 1, 2, 4
_PAD = 8
# _TRANS[prev_type * 16 + next_type * 2 + next_starts_a_line]: allowed successions.
_TRANS = np.zeros(128, bool)
for _a, _b in ((_P, _Q), (_P, _I), (_Q, _I), (_I, _V), (_V, _I)):
  _TRANS[_a * 16 + _b * 2] = True
for _a in (_P, _Q, _V):
  _TRANS[_a * 16 + _P * 2 + 1] = True


def _parse_fast(data: bytes):
  """Vectorised parse; None when the reference parser must decide.

  Tokens are the runs of bytes other than whitespace and ':'. Each is typed
  by its neighbours (``:`` after: feature id; ``:`` before: value; after the
  ``qid:`` marker: qid; else the label) and the succession of types is
  checked against the grammar ``label [qid] (id value)*`` per line with one
  table lookup per token.
  """
  if b"\x01" in data:
    return None
  if b"#" in data:
    data = _COMMENT_RE.sub(b"", data)
  nq = data.count(b"qid:")
  if nq:
    data = data.replace(b"qid:", b"   \x01")
  # One pass over the bytes: anything outside the grammar's alphabet (a byte >= 0x80, a control
  # byte, a letter other than e/E) goes to the reference parser, which names it.
  if data.translate(None, _FAST_BYTES):
    return None
  ncolon = data.count(b":")
  buf = np.frombuffer(b"\n" * _PAD + data + b"\n", np.uint8)
  notsep = ((buf > 32) & (buf != 58)).view(np.int8)
  edges = np.flatnonzero(np.diff(notsep))
  starts, ends = edges[0::2] + 1, edges[1::2] + 1
  if len(starts) == 0:
    return None
  prev, nxt = buf[starts - 1], buf[ends]
  t = (nxt == 58).view(np.uint8) | ((prev == 58).view(np.uint8) << 1) | ((prev == 1).view(np.uint8) << 2)
  nl = np.flatnonzero(buf == 10)[_PAD - 1 : -1]  # newlines ending lines 1..n of the file
  line_start = nl + 1
  first_tok = np.searchsorted(starts, line_start)
  counts = np.diff(np.append(first_tok, len(starts)))
  rows = np.flatnonzero(counts > 0)
  lab_t = first_tok[rows]
  # A data line must begin with its label (no leading whitespace).
  if np.any(starts[lab_t] != line_start[rows]):
    return None
  newline = np.zeros(len(starts), np.uint8)
  newline[lab_t] = 1
  code = (t[:-1].astype(np.int64) << 4) | (t[1:] << 1) | newline[1:]
  if not (_TRANS[code].all() and t[0] == _P and t[-1] in (_P, _Q, _V)):
    return None
  ii = np.flatnonzero(t == _I)
  if len(ii) != ncolon:
    return None
  qi = np.flatnonzero(t == _Q) if nq else None
  if qi is not None and (len(qi) != nq or nq != len(rows)):  # qi is None exactly when nq is 0
    return None
  # "qid:" must follow whitespace ("2qid:7" is not a label and a qid): the byte before its 4 blanks.
  if nq and not np.all((buf[starts[qi] - 5] == 32) | (buf[starts[qi] - 5] == 9)):
    return None
  vi = ii + 1
  labels = _parse_numbers(buf, starts[lab_t], ends[lab_t], integer=False)
  idx = _parse_numbers(buf, starts[ii], ends[ii], integer=True)
  val = _parse_numbers(buf, starts[vi], ends[vi], integer=False)
  if labels is None or idx is None or val is None:
    return None
  qid = None
  if nq:
    qid = _parse_numbers(buf, starts[qi], ends[qi], integer=True)
    if qid is None or np.any(qid > 2.0**53):
      return None
    qid = qid.astype(np.int64)
  indptr = np.append(np.searchsorted(ii, lab_t), len(ii)).astype(np.int64)
  return labels, qid, indptr, idx.astype(np.int64), val, (rows + 1).astype(np.int64)


# ---------------------------------------------------------------------------
# Validation, grouping, caching.


def _float32(x: np.ndarray) -> np.ndarray:
  with np.errstate(over="ignore", invalid="ignore"):
    return x.astype(np.float32)


def _validate(path, labels, indptr, idx, val, line, num_features, max_label):
  """Checks the parsed rows; returns ``(num_features, labels float32, values float32)``."""

  def row_of(k):
    return int(np.searchsorted(indptr, k, side="right") - 1)

  labels32 = _float32(labels)
  bad = np.flatnonzero(~np.isfinite(labels32))
  if len(bad):
    why = "non-finite label" if not np.isfinite(labels[bad[0]]) else "label outside the float32 range:"
    raise _err(path, line[bad[0]], "label", f"{why} {labels[bad[0]]}")
  if max_label is not None:
    bad = np.flatnonzero((labels < 0) | (labels > max_label))
    if len(bad):
      raise _err(path, line[bad[0]], "label", f"label {labels[bad[0]]:g} outside [0, {max_label}]")
  val32 = _float32(val)
  bad = np.flatnonzero(~np.isfinite(val32))
  if len(bad):
    why = "non-finite value" if not np.isfinite(val[bad[0]]) else "value outside the float32 range:"
    raise _err(path, line[row_of(bad[0])], "value", f"{why} {val[bad[0]]}")
  bad = np.flatnonzero(idx < 1)
  if len(bad):
    raise _err(path, line[row_of(bad[0])], "feature id", f"feature id {idx[bad[0]]} < 1 (ids are 1-based)")
  if num_features is None:
    limit = _io.extent_limit(len(idx))
    bad = np.flatnonzero(idx > limit)
    if len(bad):
      raise _err(
        path,
        line[row_of(bad[0])],
        "feature id",
        f"feature id {idx[bad[0]]} is absurdly large for a file of {len(idx)} values (more than {limit}); "
        "pass num_features= to allow it",
      )
    num_features = int(idx.max()) if len(idx) else 0
  bad = np.flatnonzero(idx > num_features)
  if len(bad):
    raise _err(path, line[row_of(bad[0])], "feature id", f"feature id {idx[bad[0]]} > num_features={num_features}")
  _check_duplicate_ids(path, indptr, idx, line)
  return num_features, labels32, val32


def _check_duplicate_ids(path, indptr, idx, line) -> None:
  """Raises for a feature id given twice on one line.

  Rows with increasing ids (the usual layout) are cleared with one ``diff``; only the rows that
  are not are sorted.
  """
  if len(idx) < 2:
    return
  down = np.diff(idx) <= 0
  starts = indptr[1:-1]
  starts = starts[(starts > 0) & (starts < len(idx))]
  down[starts - 1] = False  # a pair across two rows
  if not down.any():
    return
  n = len(indptr) - 1
  row_of_entry = np.repeat(np.arange(n), np.diff(indptr))
  suspect = np.zeros(n, bool)
  suspect[row_of_entry[1:][down]] = True
  e = np.flatnonzero(suspect[row_of_entry])
  key = row_of_entry[e] * (int(idx.max()) + 1) + idx[e]
  order = np.argsort(key, kind="stable")
  dup = np.flatnonzero(key[order][1:] == key[order][:-1])
  if len(dup):
    first = int(e[order[1:][dup]].min())  # the first repeat in file order
    raise _err(
      path, line[row_of_entry[first]], "feature id", f"feature id {idx[first]} appears more than once on the line"
    )


def _read_query_file(qpath, num_rows: int, data_path) -> np.ndarray:
  qpath = pathlib.Path(qpath)
  if not qpath.is_file():
    raise ValueError(f"{qpath}:0: field 'query count': .query file for {data_path} is missing")
  counts, total, last = [], 0, 0
  for line_no, raw in enumerate(_io.read_bytes(qpath).split(b"\n"), start=1):
    text = raw.strip()
    if not text:
      continue
    if not _INT_RE.fullmatch(text):
      raise _err(qpath, line_no, "query count", f"non-integer count {_show(text)}")
    c = int(text)
    if c < 1:
      raise _err(qpath, line_no, "query count", f"count {c} < 1")
    total += c
    if total > num_rows:
      raise _err(
        qpath, line_no, "query count", f".query file too long: counts reach {total} but {data_path} has {num_rows} rows"
      )
    counts.append(c)
    last = line_no
  if total != num_rows:
    raise _err(
      qpath,
      last + 1,
      "query count",
      f".query file too short: counts sum to {total} but {data_path} has {num_rows} rows",
    )
  return np.asarray(counts, np.int64)


def default_cache_dir() -> pathlib.Path:
  """The user cache directory for parsed files: ``$ULTR_JAX_CACHE`` or ``~/.cache/ultr_jax``.

  Returns:
    The cache directory (not created).

  >>> old = os.environ.get("ULTR_JAX_CACHE"); os.environ["ULTR_JAX_CACHE"] = "/tmp/uc"
  >>> print(default_cache_dir())
  /tmp/uc
  >>> _ = os.environ.pop("ULTR_JAX_CACHE") if old is None else os.environ.update(ULTR_JAX_CACHE=old)
  """
  env = os.environ.get("ULTR_JAX_CACHE")
  if env:
    return pathlib.Path(env)
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "ultr_jax"


def _atomic_savez(path: pathlib.Path, arrays: dict) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      np.savez(f, **arrays)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def read_svmlight(
  path: PathLike,
  *,
  query_path: Optional[PathLike] = None,
  num_features: Optional[int] = None,
  max_label: Optional[float] = 4,
  cache: bool = True,
  cache_dir: Optional[PathLike] = None,
) -> SVMLightRows:
  r"""Parses an SVMlight/LETOR file into CSR rows grouped by query.

  Queries come from the ``qid:`` fields (rows of a qid keep file order; a qid
  split over non-adjacent blocks is merged at its first appearance) or, when
  the lines carry no ``qid:``, from ``query_path`` (default ``path + ".query"``,
  one document count per query). An explicit ``query_path`` takes precedence
  over ``qid:`` fields for grouping.

  Args:
    path: the data file.
    query_path: LightGBM-style group file (counts per query, in order).
    num_features: ``F``; ids above it are an error (default: the largest id,
      which may be at most ``max(65536, number of values in the file)``:
      a larger one is taken for a typo and is an error unless ``F`` is given).
    max_label: labels outside ``[0, max_label]`` are an error (None: no check).
    cache: read/write a ``.npz`` cache keyed by the content hash + options.
    cache_dir: cache directory (default :func:`default_cache_dir`).

  Returns:
    :class:`SVMLightRows`.

  Raises:
    ValueError: naming the file, the 1-based line and the field, for a byte
      outside the grammar (non-ASCII, control bytes, ``nan``, ``inf``, ...),
      a bad label, ``qid``, feature id or value, a number outside the
      float32 range, an out-of-range label or id, a feature id given twice on
      a line, an empty file, a missing/short/long ``.query`` file, or gzip
      input that does not decompress.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
  >>> _ = p.write_text("2 qid:7 1:0.5 3:2 # doc a\n0 qid:7 2:1\n1 qid:9 3:4\n")
  >>> r = read_svmlight(p, cache=False)
  >>> print(r.num_features, r.group.tolist(), r.values.sum())
  3 [0, 0, 1] 7.5
  """
  path = pathlib.Path(path)
  if num_features is not None and not 0 <= int(num_features) <= _I32_MAX:
    raise ValueError(f"num_features must be in [0, {_I32_MAX}], got {num_features}")
  data = path.read_bytes()
  explicit_q = query_path is not None
  qpath = pathlib.Path(query_path) if explicit_q else pathlib.Path(str(path) + ".query")
  qdata = qpath.read_bytes() if qpath.is_file() else None
  cache_file = None
  if cache:
    h = hashlib.blake2b(data, digest_size=20)
    if qdata is not None:
      h.update(b"\0query\0" + qdata)
    opts = json.dumps(
      {"v": _CACHE_VERSION, "F": num_features, "max_label": max_label, "explicit_q": explicit_q, "q": qdata is not None}
    )
    h.update(opts.encode())
    cache_file = pathlib.Path(cache_dir or default_cache_dir()) / f"{path.name}.{h.hexdigest()}.npz"
    if cache_file.is_file():
      try:
        with np.load(cache_file) as z:
          arrays = {k: z[k] for k in z.files}
        return SVMLightRows(num_features=int(arrays.pop("num_features")), **arrays)
      except Exception:  # a corrupt cache entry is re-parsed
        pass

  data = _io.gunzip(data, path)
  parsed = _parse_fast(data)
  if parsed is None:
    parsed = _parse_reference(data, path)
  labels, qid, indptr, idx, val, line = parsed
  if len(labels) == 0:
    raise _err(path, 1, "label", "empty file (no data lines)")
  num_features, labels, val = _validate(path, labels, indptr, idx, val, line, num_features, max_label)
  n = len(labels)
  if explicit_q or qid is None:
    if qid is None and qdata is None:
      raise _err(path, int(line[0]), "qid", f"lines carry no qid: field and the .query file {qpath} is missing")
    counts = _read_query_file(qpath, n, path)
    group = np.repeat(np.arange(len(counts)), counts)
    if qid is None:
      qid = group.copy()
  else:
    uniq, first, inv = np.unique(qid, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    group = rank[inv.reshape(-1)]
  rows = SVMLightRows(
    labels=labels,
    qid=qid.astype(np.int64),
    group=group.astype(np.int64),
    indptr=indptr,
    indices=(idx - 1).astype(np.int32),
    values=val,
    line=line,
    num_features=int(num_features),
  )
  if cache_file is not None:
    try:
      _atomic_savez(cache_file, rows._asdict())
    except OSError as e:
      warnings.warn(f"could not write the parse cache {cache_file}: {e}")
  return rows


def rows_to_dataset(rows: SVMLightRows, *, list_size: Optional[int] = None) -> RankingDataset:
  r"""Pads/truncates CSR rows into a dense :class:`RankingDataset`.

  Query ``q`` holds its rows in file order; lists longer than ``list_size``
  (default: the longest list) keep their first ``list_size`` rows. ``doc_ids``
  are the 0-based row numbers in the file (-1 at padding).

  Args:
    rows: the parsed :class:`SVMLightRows`.
    list_size: pad or truncate every list to this size (None: the longest list).

  Returns:
    The dense :class:`RankingDataset`.

  Raises:
    ValueError: ``list_size`` < 1.

  >>> rows = SVMLightRows(labels=np.array([1, 0, 2], np.float32), qid=np.array([5, 5, 6]),
  ...     group=np.array([0, 0, 1]), indptr=np.array([0, 1, 2, 3]), indices=np.array([0, 1, 0], np.int32),
  ...     values=np.array([1., 2., 3.], np.float32), line=np.array([1, 2, 3]), num_features=2)
  >>> ds = rows_to_dataset(rows)
  >>> print(ds.features.shape, ds.features[1, 0, 0], ds.where.sum())
  (2, 2, 2) 3.0 3
  """
  n = len(rows.labels)
  num_q = int(rows.group.max()) + 1 if n else 0
  order = np.argsort(rows.group, kind="stable")
  g = rows.group[order]
  sizes = np.bincount(rows.group, minlength=num_q)
  starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
  pos_sorted = np.arange(n) - starts[g]
  pos = np.empty(n, np.int64)
  pos[order] = pos_sorted
  L = int(sizes.max()) if list_size is None else int(list_size)
  if L < 1:
    raise ValueError(f"list_size must be >= 1, got {L}")
  F = rows.num_features
  keep = pos < L
  features = np.zeros((num_q, L, F), np.float32)
  labels = np.zeros((num_q, L), np.float32)
  where = np.zeros((num_q, L), bool)
  doc_ids = np.full((num_q, L), -1, np.int32)
  r = np.flatnonzero(keep)
  labels[rows.group[r], pos[r]] = rows.labels[r]
  where[rows.group[r], pos[r]] = True
  doc_ids[rows.group[r], pos[r]] = r
  nnz_row = np.diff(rows.indptr)
  row_of_nz = np.repeat(np.arange(n), nnz_row)
  nz = np.flatnonzero(keep[row_of_nz])
  ro = row_of_nz[nz]
  flat = (rows.group[ro] * L + pos[ro]) * F + rows.indices[nz]
  features.reshape(-1)[flat] = rows.values[nz]
  qid = np.zeros(num_q, np.int64)
  qid[rows.group] = rows.qid
  return RankingDataset(features=features, labels=labels, where=where, qid=qid, doc_ids=doc_ids)


def load_svmlight(
  path: PathLike,
  *,
  query_path: Optional[PathLike] = None,
  num_features: Optional[int] = None,
  list_size: Optional[int] = None,
  max_label: Optional[float] = 4,
  cache: bool = True,
  cache_dir: Optional[PathLike] = None,
) -> RankingDataset:
  r"""Loads an SVMlight/LETOR file (``qid:`` or ``.query`` grouped) as a :class:`RankingDataset`.

  ``features`` is ``float32[Q, L, F]`` (absent features and padding are 0),
  ``labels`` ``float32[Q, L]``, ``where`` ``bool[Q, L]``, ``qid`` ``int64[Q]``
  and ``doc_ids`` the 0-based data row numbers. See :func:`read_svmlight` for
  the arguments and errors and :func:`rows_to_dataset` for padding.

  Args:
    path: the SVMlight/LETOR file (gzip read transparently).
    query_path: a LightGBM ``.query`` file of per-query counts (None: group by ``qid:``).
    num_features: the number of features (None: the largest index in the file).
    list_size: pad or truncate every list to this size (None: the longest list).
    max_label: the largest valid label (None: no check); a larger one is an error naming the line.
    cache: read and write the parsed ``.npz`` cache.
    cache_dir: where the cache lives (None: :func:`default_cache_dir`).

  Returns:
    The :class:`RankingDataset`.

  Raises:
    ValueError: the errors of :func:`read_svmlight` (naming the file, the 1-based line and the field), and
      ``list_size`` < 1.

  >>> import pathlib, tempfile
  >>> d = pathlib.Path(tempfile.mkdtemp()); p = d / "b.txt"
  >>> _ = p.write_text("2 1:0.5\n0 2:1\n1 1:4\n")
  >>> _ = (d / "b.txt.query").write_text("2\n1\n")  # documents per query
  >>> ds = load_svmlight(p, cache=False)
  >>> print(ds.features.shape, ds.labels.sum(), ds.where.sum())
  (2, 2, 2) 3.0 3
  """
  rows = read_svmlight(
    path, query_path=query_path, num_features=num_features, max_label=max_label, cache=cache, cache_dir=cache_dir
  )
  return rows_to_dataset(rows, list_size=list_size)


def _fmt(x) -> str:
  """Shortest decimal that round-trips the float32 ``x`` ("2", "0.1", "1e-30")."""
  x = np.float32(x)
  return str(int(x)) if x == int(x) and abs(x) < 2**24 else str(x)


def write_svmlight(ds: RankingDataset, path: PathLike, *, query_file: bool = False, doc_comments: bool = False) -> None:
  r"""Writes ``ds`` as SVMlight (atomically), omitting zero features.

  Lines carry ``qid:`` unless ``query_file`` is True, in which case a
  LightGBM ``path + ".query"`` file with per-query counts is written instead.
  ``doc_comments`` appends ``# doc=<doc_id>`` to every line. Float32 values
  are written with enough digits to round-trip exactly.

  Args:
    ds: a :class:`RankingDataset`.
    path: the file to write.
    query_file: write a LightGBM ``.query`` file instead of ``qid:`` fields.
    doc_comments: append ``# doc=<doc_id>`` to each line.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.txt"
  >>> ds = RankingDataset(features=np.array([[[0.5, 0.], [0., 2.]]], np.float32),
  ...     labels=np.array([[1., 0.]], np.float32), where=np.ones((1, 2), bool), qid=np.array([3]))
  >>> write_svmlight(ds, p)
  >>> print(p.read_text().strip().replace(chr(10), " | "))
  1 qid:3 1:0.5 | 0 qid:3 2:2
  """
  path = pathlib.Path(path)
  out, counts = [], []
  for q in range(ds.num_queries):
    items = np.flatnonzero(ds.where[q])
    counts.append(len(items))
    for i in items:
      f = ds.features[q, i]
      nz = np.flatnonzero(f)
      parts = [_fmt(ds.labels[q, i])]
      if not query_file:
        parts.append(f"qid:{int(ds.qid[q])}")
      parts += [f"{j + 1}:{_fmt(f[j])}" for j in nz]
      if doc_comments and ds.doc_ids is not None:
        parts.append(f"# doc={int(ds.doc_ids[q, i])}")
      out.append(" ".join(parts))
  _atomic_write_text(path, "\n".join(out) + "\n")
  if query_file:
    _atomic_write_text(pathlib.Path(str(path) + ".query"), "".join(f"{c}\n" for c in counts if c > 0))


def _atomic_write_text(path: pathlib.Path, text: str) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
