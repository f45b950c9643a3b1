r"""Yandex click logs: the Relevance Prediction Challenge and Personalized Web Search Challenge files.

The two public Yandex search logs that click-model papers train on (Chuklin, Markov & de Rijke's
*Click Models for Web Search*, PyClick, CLAX) are tab-separated text, one record per line, sessions
in order. Two layouts (``layout=``):

``"relpred"`` (the Relevance Prediction Challenge, WSCD 2011)::

    SessionID  TimePassed  Q  QueryID  RegionID  URLID_1 ... URLID_n     (a result page)
    SessionID  TimePassed  C  URLID                                      (a click)

``"personalized"`` (the Personalized Web Search Challenge, WSCD 2014)::

    SessionID  M  Day  UserID                                            (session metadata)
    SessionID  TimePassed  Q|T  SERPID  QueryID  Terms  URLID,DomainID ...  (a page; T: a test page)
    SessionID  TimePassed  C  SERPID  URLID                              (a click)

A click counts for the page it belongs to: in ``relpred`` the session's latest page (the records
carry no page id, as PyClick and CLAX read them), in ``personalized`` the page with its SERPID.
Repeated clicks on one result count once. A click on a URL that the page does not show (an ad, a
link elsewhere on the page) is not a click on a result: it is skipped, and a warning gives their
number and the first line.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional, Union

import numpy as np

from ultr_jax.data.click_log import READ_ERRORS, ClickLog, decode_ids, session_file, session_lines

__all__ = ["YANDEX_LAYOUTS", "read_yandex_sessions"]

PathLike = Union[str, os.PathLike]

YANDEX_LAYOUTS = ("relpred", "personalized")


def read_yandex_sessions(path: PathLike, *, layout: str = "relpred", max_sessions: Optional[int] = None) -> ClickLog:
  r"""Reads a Yandex search log as a session :class:`~ultr_jax.data.ClickLog` (one row per shown result).

  Args:
    path: the log (gzip, recognised by its magic bytes, is decompressed on
      the fly).
    layout: ``"relpred"`` (the Relevance Prediction Challenge's records) or
      ``"personalized"`` (the Personalized Web Search Challenge's); see the
      module docstring.
    max_sessions: read only the first this many result pages.

  Returns:
    A :class:`~ultr_jax.data.ClickLog`: ``items`` are dense ids of (QueryID,
    URLID) pairs, ``positions`` 0-based (the order on the page),
    ``sessions`` one id per result page in file order, ``clicks`` 0/1,
    ``query_ids`` and ``doc_ids`` the ids as written, ``lines`` the line of
    each row's page record.

  Raises:
    ValueError: a record of an unknown type or with the wrong number of
      fields, a page without results, a click before any page of its
      session, (``personalized``) a click naming a SERPID its session has
      not shown, or an id that is not UTF-8, naming the file, line and
      field; a file that does not decompress, naming the file.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "relpred.txt"
  >>> _ = p.write_text("1\t0\tQ\t7\t213\tu1\tu2\tu3\n1\t5\tC\tu2\n1\t9\tQ\t8\t213\tu2\tu4\n"
  ...                  "2\t0\tQ\t7\t1\tu3\tu1\n2\t3\tC\tu1\n2\t4\tC\tu1\n")
  >>> log = read_yandex_sessions(p)
  >>> log.items.tolist(), log.positions.tolist(), log.clicks.tolist(), log.sessions.tolist()
  ([0, 1, 2, 3, 4, 2, 0], [0, 1, 2, 0, 1, 0, 1], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0, 0, 0, 1, 1, 2, 2])
  """
  if layout not in YANDEX_LAYOUTS:
    raise ValueError(f"layout must be one of {YANDEX_LAYOUTS}, got {layout!r}")
  path = session_file(path, max_sessions)
  personalized = layout == "personalized"
  first_url = 6 if personalized else 5  # the field of a page record's first result
  item_ids: dict = {}  # (QueryID, URLID) -> dense id, in order of first appearance
  intern = item_ids.setdefault
  urls, items, clicked = [], [], []  # per row; clicked: the rows clicked
  page_qids, page_lines, page_sizes = [], [], []  # per page (expanded to rows at the end)
  page = -1  # the latest page's id
  session_id = None  # its SessionID
  row_of: dict = {}  # the latest page's URLID -> its row
  page_rows: dict = {}  # personalized: SERPID -> that page's row_of, within the current session
  unmatched, first_unmatched = 0, 0
  show = lambda b: repr(b.decode("utf-8", "replace"))  # noqa: E731
  try:
    with session_lines(path) as fh:
      for line_no, line in enumerate(fh, start=1):
        fields = line.rstrip(b"\r\n").split(b"\t")
        if len(fields) == 1 and not fields[0]:
          continue
        kind = fields[2] if len(fields) > 2 else b""
        if personalized and len(fields) > 1 and fields[1] == b"M":
          if len(fields) != 4:
            raise ValueError(
              f"{path}:{line_no}: a metadata record has 4 fields (SessionID, M, Day, UserID), got {len(fields)}"
            )
          continue
        if (kind in (b"Q", b"T")) if personalized else (kind == b"Q"):
          if len(fields) <= first_url:
            raise ValueError(
              f"{path}:{line_no}: a page record without results ({len(fields)} fields; the "
              f"results start at field {first_url + 1})"
            )
          if max_sessions is not None and page + 1 >= max_sessions:
            break
          page += 1
          if fields[0] != session_id:
            session_id, page_rows = fields[0], {}
          query = fields[4] if personalized else fields[3]
          results = [u.split(b",", 1)[0] for u in fields[first_url:]] if personalized else fields[first_url:]
          start, n = len(urls), len(results)
          row_of = dict(zip(reversed(results), range(start + n - 1, start - 1, -1)))  # first row of each URL
          if b"" in row_of:
            pos = results.index(b"")
            raise ValueError(f"{path}:{line_no}: field {first_url + pos + 1} (the URLID at position {pos + 1}): empty")
          urls.extend(results)
          items.extend([intern((query, url), len(item_ids)) for url in results])
          page_qids.append(query)
          page_lines.append(line_no)
          page_sizes.append(n)
          if personalized:
            page_rows[fields[3]] = row_of
          continue
        if kind == b"C":
          want = 5 if personalized else 4
          if len(fields) != want:
            raise ValueError(f"{path}:{line_no}: a click record has {want} fields, got {len(fields)}")
          if fields[0] != session_id:
            raise ValueError(
              f"{path}:{line_no}: field 'SessionID': a click in session {show(fields[0])} "
              "before any page of that session"
            )
          targets = page_rows.get(fields[3]) if personalized else row_of
          if targets is None:
            raise ValueError(
              f"{path}:{line_no}: field 'SERPID': {show(fields[3])} is not a page of session "
              f"{show(fields[0])} shown above"
            )
          row = targets.get(fields[-1])
          if row is None:
            unmatched += 1
            first_unmatched = first_unmatched or line_no
          else:
            clicked.append(row)
          continue
        raise ValueError(
          f"{path}:{line_no}: unknown record type {show(kind)} in field 3 (expected "
          f"{'M (in field 2), Q, T or C' if personalized else 'Q or C'}; is this the "
          f"{'relpred' if personalized else 'personalized'} layout?)"
        )
  except READ_ERRORS as e:
    raise ValueError(f"{path}: cannot read the log ({type(e).__name__}: {e})") from e
  if not items:
    raise ValueError(f"{path}: no result pages")
  if unmatched:
    warnings.warn(
      f"{path}: {unmatched} click(s) on URLs their page does not show were skipped (the first "
      f"on line {first_unmatched})",
      stacklevel=2,
    )
  sizes = np.asarray(page_sizes, np.int64)
  sessions = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
  positions = (np.arange(len(urls)) - np.repeat(np.cumsum(sizes) - sizes, sizes)).astype(np.int32)
  clicks = np.zeros(len(urls), np.float32)
  clicks[np.asarray(clicked, np.int64)] = 1.0
  row_lines = np.repeat(np.asarray(page_lines, np.int32), sizes)
  query_ids = decode_ids(page_qids, path, "QueryID", page_lines)[sessions]
  return ClickLog(
    items=np.asarray(items, np.int32),
    positions=positions,
    clicks=clicks,
    weights=np.ones(len(urls), np.float32),
    query_ids=query_ids,
    doc_ids=decode_ids(urls, path, "URLID", row_lines),
    num_items=len(item_ids),
    num_positions=int(positions.max()) + 1,
    sessions=sessions,
    path=str(path),
    lines=row_lines,
  )
