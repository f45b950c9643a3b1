"""Reading files for the loaders: gzip read transparently, every decoder error a ``ValueError`` naming the file.

A loader must never hand back numbers it did not read: a byte that is not UTF-8, a gzip stream cut
short or corrupt, malformed JSON, all become ``ValueError("<file>[:<line>]: ...")`` raised ``from`` the
decoder's own error. Gzip input is recognised by its magic bytes (``1f 8b``), not by its name.
"""

import contextlib
import glob as globlib
import gzip
import io
import json
import os
import pathlib
import re
import zlib
from typing import Callable, Optional

import numpy as np

GZIP_MAGIC = b"\x1f\x8b"

#: An id or position inferred from the data (a feature id that sets ``F``, a position that sets ``L``)
#: may be at most ``max(MAX_INFERRED_EXTENT, number of values read)``: beyond it, the dense arrays the
#: loaders build would be absurdly large for the file (a feature id of 10^9 would ask for gigabytes).
#: Passing the size explicitly (``num_features=``, ``list_size=``) lifts the limit.
MAX_INFERRED_EXTENT = 1 << 16

#: A decimal number of the text formats: ``[+-]digits[.digits][e[+-]digits]`` (no nan, inf, hex, ``_``).
NUM_RE = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: An integer of the text formats.
INT_RE = re.compile(rb"[+-]?[0-9]+")
NONFINITE = (b"nan", b"inf", b"infinity")

# Errors a decoder raises on bad bytes (gzip.BadGzipFile is an OSError; EOFError: a stream cut short).
DECODER_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError)


def gunzip(data: bytes, path) -> bytes:
  """``data`` decompressed when it starts with the gzip magic, else unchanged; ValueError naming ``path``."""
  if not data.startswith(GZIP_MAGIC):
    return data
  try:
    return gzip.decompress(data)
  except (OSError, EOFError, zlib.error) as e:
    raise ValueError(f"{path}: a gzip file that cannot be decompressed ({type(e).__name__}: {e})") from e


def read_bytes(path) -> bytes:
  """The file's bytes (decompressed if gzip)."""
  path = pathlib.Path(path)
  return gunzip(path.read_bytes(), path)


def line_of_offset(data: bytes, offset: int) -> int:
  """1-based line of byte ``offset`` of ``data``."""
  return data.count(b"\n", 0, offset) + 1


def decode_utf8(data: bytes, path) -> str:
  """``data`` as UTF-8 text; ValueError naming ``path`` and the line of the first bad byte."""
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    column = e.start - data.rfind(b"\n", 0, e.start)
    bad = data[e.start : e.start + 1]
    raise ValueError(
      f"{path}:{line_of_offset(data, e.start)}: byte {bad!r} at column {column} is not UTF-8 ({e.reason})"
    ) from e


def read_text(path) -> str:
  """The file as UTF-8 text (decompressed if gzip)."""
  return decode_utf8(read_bytes(path), path)


def as_ids(values, dtype, where: Callable[[int], str]) -> np.ndarray:
  """Integer ids as ``dtype``, refusing any outside its range (a ``uint64`` of 2^64 - 1 is never wrapped to -1).

  Args:
    values: the ids read (any integer dtype, or numbers holding integers).
    dtype: the id type they are kept in (``np.int64``, ``np.int32``).
    where: ``where(i) -> str``, the location of value ``i`` (file, row, field) for the error.

  Returns:
    ``values`` as ``dtype``.

  >>> as_ids(np.array([3, 2**64 - 1], np.uint64), np.int64, lambda i: f"f.feather, row {i}, field 'query_id'")
  Traceback (most recent call last):
  ValueError: f.feather, row 1, field 'query_id': 18446744073709551615 is outside the int64 id range [-9223372036854775808, 9223372036854775807]; refused rather than wrapped
  """
  v = np.asarray(values)
  info = np.iinfo(dtype)
  if v.dtype.kind in "ui":
    src = np.iinfo(v.dtype)
    if src.min >= info.min and src.max <= info.max:
      return v.astype(dtype, copy=False)
    big = np.array(info.max, v.dtype) if src.max > info.max else None
    bad = (v > big) if big is not None else np.zeros(v.shape, bool)
    if v.dtype.kind == "i" and src.min < info.min:
      bad |= v < info.min
  else:
    bad = ~((v >= info.min) & (v <= info.max))
  if bad.any():
    i = int(np.flatnonzero(bad.reshape(-1))[0])
    raise ValueError(
      f"{where(i)}: {v.reshape(-1)[i]} is outside the {np.dtype(dtype).name} id range "
      f"[{info.min}, {info.max}]; refused rather than wrapped"
    )
  return v.astype(dtype, copy=False)


def read_json(path):
  """The parsed JSON of a UTF-8 (or gzip) file; ValueError naming the file, line and column."""
  text = read_text(path)
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{e.lineno}: malformed JSON at column {e.colno}: {e.msg}") from e
  except RecursionError as e:  # json's decoder recurses once per nested array or object
    raise ValueError(f"{path}: malformed JSON: nested too deeply to parse") from e


def is_gzip(path) -> bool:
  with open(path, "rb") as fh:
    return fh.read(2) == GZIP_MAGIC


@contextlib.contextmanager
def binary_lines(path: pathlib.Path):
  """The file's lines as bytes (gzip, recognised by its magic bytes, decompressed on the fly).

  GzipFile reads lines in Python; a 1 MiB buffer in front of it halves that. The caller turns
  :data:`DECODER_ERRORS` raised while iterating into a ValueError naming the file.
  """
  opener = gzip.open if is_gzip(path) else open
  with opener(path, "rb") as raw, io.BufferedReader(raw, 1 << 20) as fh:
    yield fh


def extent_limit(num_values: int) -> int:
  """The largest id or position the data of ``num_values`` values may set (see :data:`MAX_INFERRED_EXTENT`)."""
  return max(MAX_INFERRED_EXTENT, int(num_values))


def expand_sources(
  source,
  *,
  what: str,
  directory: Callable[[pathlib.Path], list],
  missing: Optional[str] = "no such file",
  sort: bool = False,
) -> list:
  """The files of ``source``: a path, a glob pattern, a directory (``directory(path)`` picks and orders its
  files) or a list of them; in the order given without duplicates, or sorted by path with ``sort``.

  Raises:
    FileNotFoundError: nothing given (``no <what> given``); a glob or directory that matches nothing
      (``<source>: no <what> match``); a named file that does not exist (``<file>: <missing>``; None: left to
      the reader).
  """
  sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
  if not sources:
    raise FileNotFoundError(f"no {what} given")
  out = []
  for s in sources:
    s = os.fspath(s)
    if os.path.isdir(s):
      found = [str(p) for p in directory(pathlib.Path(s))]
    elif globlib.has_magic(s):
      found = sorted(p for p in globlib.glob(s) if os.path.isfile(p))
    else:
      if missing is not None and not os.path.isfile(s):
        raise FileNotFoundError(f"{s}: {missing}")
      found = [s]
    if not found:
      raise FileNotFoundError(f"{s}: no {what} match")
    out.extend(found)
  out = list(dict.fromkeys(out))
  return sorted(out) if sort else out
