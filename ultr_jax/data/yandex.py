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

import functools
import os
import warnings
from typing import Iterator, Optional, Union

import numpy as np

from ultr_jax.data.click_log import (
  READ_ERRORS,
  ClickLog,
  SessionPage,
  decode_ids,
  register_session_reader,
  session_file,
  session_lines,
)

__all__ = ["YANDEX_LAYOUTS", "read_yandex_sessions"]

PathLike = Union[str, os.PathLike]

#: The two layouts :func:`read_yandex_sessions` reads (``layout=``): ``"relpred"`` (the Relevance
#: Prediction Challenge) and ``"personalized"`` (the Personalized Web Search Challenge).
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
  path = session_file(path, max_sessions)
  item_ids: dict = {}  # (QueryID, URLID) -> dense id, in order of first appearance
  intern = item_ids.setdefault
  urls, items, clicks = [], [], []  # per row
  page_qids, page_lines, page_sizes = [], [], []  # per page (expanded to rows at the end)
  for page in yandex_pages(path, layout=layout, max_sessions=max_sessions):
    urls.extend(page.urls)
    items.extend([intern((page.query, url), len(item_ids)) for url in page.urls])
    clicks.extend(page.clicks)
    page_qids.append(page.qid)
    page_lines.append(page.line)
    page_sizes.append(len(page.urls))
  sizes = np.asarray(page_sizes, np.int64)
  sessions = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
  positions = (np.arange(len(urls)) - np.repeat(np.cumsum(sizes) - sizes, sizes)).astype(np.int32)
  row_lines = np.repeat(np.asarray(page_lines, np.int32), sizes)
  query_ids = decode_ids(page_qids, path, "QueryID", page_lines)[sessions]
  return ClickLog(
    items=np.asarray(items, np.int32),
    positions=positions,
    clicks=np.asarray(clicks, np.float32),
    weights=np.ones(len(urls), np.float32),
    query_ids=query_ids,
    doc_ids=decode_ids(urls, path, "URLID", row_lines),
    num_items=len(item_ids),
    num_positions=int(positions.max()) + 1,
    sessions=sessions,
    path=str(path),
    lines=row_lines,
  )


def yandex_pages(path, *, layout: str = "relpred", max_sessions: Optional[int] = None) -> Iterator[SessionPage]:
  r"""The result pages of a Yandex log with their clicks, one :class:`~ultr_jax.data.click_log.SessionPage` each.

  The per-record parser of both layouts (the grammar and the errors that :func:`read_yandex_sessions`
  documents), read line by line: :func:`read_yandex_sessions` collects its pages,
  :func:`~ultr_jax.data.convert_click_log` writes them to session shards. A page is yielded, in file
  order, once no later click can reach it: at the next page (``relpred``: a click counts for the
  session's latest page) or at the next session (``personalized``: a click names its page's SERPID),
  so memory holds one session's pages. The warning about clicks on URLs no page shows comes at the
  end. ``qid`` and ``query`` are the QueryID, ``lines`` the page record's line for every result.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "relpred.txt"
  >>> _ = p.write_text("1\t0\tQ\t7\t213\tu1\tu2\n1\t5\tC\tu2\n")
  >>> [(pg.query, pg.urls, pg.positions, pg.clicks, pg.lines) for pg in yandex_pages(p)]
  [(b'7', [b'u1', b'u2'], [0, 1], [0, 1], [1, 1])]
  """
  if layout not in YANDEX_LAYOUTS:
    raise ValueError(f"layout must be one of {YANDEX_LAYOUTS}, got {layout!r}")
  personalized = layout == "personalized"
  first_url = 6 if personalized else 5  # the field of a page record's first result
  pending: list = []  # pages that a click may still reach, in file order
  latest, row_of = None, {}  # the latest page and its URLID -> first index
  page_rows: dict = {}  # personalized: SERPID -> (page, row_of), within the current session
  num_pages, session_id = 0, None  # pages read; the latest page's SessionID
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
          if max_sessions is not None and num_pages >= max_sessions:
            break
          num_pages += 1
          if fields[0] != session_id or not personalized:  # the pending pages are complete
            if fields[0] != session_id:
              session_id, page_rows = fields[0], {}
            yield from pending
            pending = []
          query = fields[4] if personalized else fields[3]
          results = [u.split(b",", 1)[0] for u in fields[first_url:]] if personalized else fields[first_url:]
          n = len(results)
          row_of = dict(zip(reversed(results), range(n - 1, -1, -1)))  # the first index of each URL
          if b"" in row_of:
            pos = results.index(b"")
            raise ValueError(f"{path}:{line_no}: field {first_url + pos + 1} (the URLID at position {pos + 1}): empty")
          latest = SessionPage(query, query, line_no, results, list(range(n)), [0] * n, [line_no] * n)
          pending.append(latest)
          if personalized:
            page_rows[fields[3]] = (latest, row_of)
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
          target = page_rows.get(fields[3]) if personalized else (latest, row_of)
          if target is None:
            raise ValueError(
              f"{path}:{line_no}: field 'SERPID': {show(fields[3])} is not a page of session "
              f"{show(fields[0])} shown above"
            )
          i = target[1].get(fields[-1])
          if i is None:
            unmatched += 1
            first_unmatched = first_unmatched or line_no
          else:
            page = target[0]
            assert page is not None  # a page of the click's session was read (the SessionID check above)
            page.clicks[i] = 1
          continue
        raise ValueError(
          f"{path}:{line_no}: unknown record type {show(kind)} in field 3 (expected "
          f"{'M (in field 2), Q, T or C' if personalized else 'Q or C'}; is this the "
          f"{'relpred' if personalized else 'personalized'} layout?)"
        )
  except READ_ERRORS as e:
    raise ValueError(f"{path}: cannot read the log ({type(e).__name__}: {e})") from e
  if not num_pages:
    raise ValueError(f"{path}: no result pages")
  yield from pending
  if unmatched:
    warnings.warn(
      f"{path}: {unmatched} click(s) on URLs their page does not show were skipped (the first "
      f"on line {first_unmatched})",
      stacklevel=3,
    )


register_session_reader("yandex", functools.partial(read_yandex_sessions, layout="relpred"))
register_session_reader("yandex_personalized", functools.partial(read_yandex_sessions, layout="personalized"))
