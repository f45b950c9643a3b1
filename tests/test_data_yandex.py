"""Tests for the Yandex search-log reader (ultr_jax.data.read_yandex_sessions) on files the tests write.

The expected arrays come from the pages the tests generate (which results each page shows and which of
them the user clicked), not from parsing the file again.
"""

import gzip
import warnings

import numpy as np
import pytest

from ultr_jax import data


def random_sessions(seed=0, num_sessions=15):
  """[(session_id, [(serp_id, query_id, urls, clicked urls, stray click urls), ...]), ...]."""
  rng = np.random.default_rng(seed)
  sessions = []
  for s in range(num_sessions):
    pages = []
    for serp in range(int(rng.integers(1, 4))):
      n = int(rng.integers(1, 11))
      urls = [f"{u}" for u in rng.choice(np.arange(100, 130), n, replace=False)]
      clicked = [u for u in urls if rng.random() < 0.3]
      stray = [str(900 + serp)] if rng.random() < 0.2 else []  # a click on a URL the page does not show
      pages.append((str(serp), str(int(rng.integers(1, 5))), urls, clicked, stray))
    sessions.append((str(50 + s), pages))
  return sessions


def write_log(path, sessions, layout):
  lines, t = [], 0
  for sid, pages in sessions:
    if layout == "personalized":
      lines.append(f"{sid}\tM\t3\t77")
    for serp, qid, urls, clicked, stray in pages:
      if layout == "personalized":
        results = "\t".join(f"{u},{int(u) % 7}" for u in urls)
        lines.append(f"{sid}\t{t}\t{'T' if serp == '2' else 'Q'}\t{serp}\t{qid}\t5,6,7\t{results}")
      else:
        lines.append(f"{sid}\t{t}\tQ\t{qid}\t213\t" + "\t".join(urls))
      for u in clicked + stray + clicked[:1]:  # the first clicked result twice
        t += 1
        lines.append(f"{sid}\t{t}\tC\t{serp}\t{u}" if layout == "personalized" else f"{sid}\t{t}\tC\t{u}")
  opener = gzip.open if str(path).endswith(".gz") else open
  with opener(path, "wt", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return path


def expected(sessions, max_pages=None):
  pages = [p for _, ps in sessions for p in ps][:max_pages]
  keys = {}
  out = {k: [] for k in ("items", "positions", "clicks", "sessions", "query_ids", "doc_ids")}
  for page, (_, qid, urls, clicked, _) in enumerate(pages):
    for pos, u in enumerate(urls):
      out["items"].append(keys.setdefault((qid, u), len(keys)))
      out["positions"].append(pos)
      out["clicks"].append(float(u in clicked))
      out["sessions"].append(page)
      out["query_ids"].append(qid)
      out["doc_ids"].append(u)
  return out, len(keys), sum(len(p[4]) for p in pages)


@pytest.mark.parametrize("layout", ["relpred", "personalized"])
@pytest.mark.parametrize("suffix", [".gz", ".txt"])
def test_sessions_match_the_generated_pages(tmp_path, layout, suffix):
  sessions = random_sessions()
  path = write_log(tmp_path / f"log{suffix}", sessions, layout)
  want, num_items, stray = expected(sessions)
  assert stray > 0  # the case is exercised
  with pytest.warns(UserWarning, match=rf"{stray} click\(s\) on URLs their page does not show were skipped"):
    log = data.read_yandex_sessions(path, layout=layout)
  for key, value in want.items():
    np.testing.assert_array_equal(getattr(log, key), value, err_msg=key)
  assert log.num_items == num_items and log.num_positions == max(want["positions"]) + 1
  np.testing.assert_array_equal(log.weights, 1.0)
  # Each row's line is its page record's line.
  with gzip.open(path, "rt") if suffix == ".gz" else open(path) as f:
    text = f.read().splitlines()
  for row in range(len(log.items)):
    fields = text[log.lines[row] - 1].split("\t")
    assert fields[2] in ("Q", "T")
    assert fields[(6 if layout == "personalized" else 5) + log.positions[row]].split(",")[0] == log.doc_ids[row]
  # read_click_log reads the same.
  fmt = "yandex_personalized" if layout == "personalized" else "yandex"
  with pytest.warns(UserWarning):
    same = data.read_click_log(path, format=fmt)
  np.testing.assert_array_equal(same.items, log.items)
  np.testing.assert_array_equal(same.clicks, log.clicks)


def test_max_sessions_reads_the_first_pages(tmp_path):
  sessions = random_sessions(seed=1)
  path = write_log(tmp_path / "log.txt", sessions, "relpred")
  for n in (1, 4):
    want, num_items, _ = expected(sessions, max_pages=n)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)  # the stray clicks, counted in the test above
      log = data.read_yandex_sessions(path, max_sessions=n)
    np.testing.assert_array_equal(log.clicks, want["clicks"])
    np.testing.assert_array_equal(log.sessions, want["sessions"])
    assert log.num_items == num_items


@pytest.mark.parametrize(
  "layout,text,match",
  [
    ("relpred", "1\t0\tQ\t7\t213\n", r"log.txt:1: a page record without results"),
    ("relpred", "1\t0\tQ\t7\t213\ta\n1\t3\tC\ta\textra\n", r"log.txt:2: a click record has 4 fields, got 5"),
    ("relpred", "1\t0\tQ\t7\t213\ta\n2\t3\tC\ta\n", r"log.txt:2: field 'SessionID': a click in session '2' before"),
    ("relpred", "1\t0\tC\ta\n", r"log.txt:1: field 'SessionID'"),
    ("relpred", "1\tM\t3\t77\n", r"log.txt:1: unknown record type '3' in field 3 .*personalized layout"),
    ("relpred", "1\t0\tQ\t7\t213\ta\t\tb\n", r"log.txt:1: field 7 \(the URLID at position 2\): empty"),
    ("personalized", "1\tM\t3\n", r"log.txt:1: a metadata record has 4 fields"),
    (
      "personalized",
      "1\t0\tQ\t0\t7\t5,6\ta,1\n1\t3\tC\t1\ta\n",
      r"log.txt:2: field 'SERPID': '1' is not a page of session '1'",
    ),
    ("personalized", "1\t0\tQ\t7\t213\ta\tb\n1\t3\tC\ta\n", r"log.txt:2: a click record has 5 fields, got 4"),
    ("personalized", "1\tM\t3\t77\n", r"log.txt: no result pages"),
    ("relpred", "", r"log.txt: no result pages"),
  ],
)
def test_errors_name_the_file_line_and_field(tmp_path, layout, text, match):
  (tmp_path / "log.txt").write_text(text)
  with pytest.raises(ValueError, match=match):
    data.read_yandex_sessions(tmp_path / "log.txt", layout=layout)


def test_argument_errors(tmp_path):
  (tmp_path / "log.txt").write_text("1\t0\tQ\t7\t213\ta\n")
  with pytest.raises(ValueError, match="layout must be one of"):
    data.read_yandex_sessions(tmp_path / "log.txt", layout="kaggle")
  with pytest.raises(ValueError, match="max_sessions must be >= 1"):
    data.read_yandex_sessions(tmp_path / "log.txt", max_sessions=0)
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    data.read_yandex_sessions(tmp_path / "nope.txt")


def test_ids_that_are_not_utf8_are_named(tmp_path):
  (tmp_path / "log.txt").write_bytes(b"1\t0\tQ\t7\t213\ta\xff\n")
  with pytest.raises(ValueError, match=r"log.txt: a URLID is not UTF-8"):
    data.read_yandex_sessions(tmp_path / "log.txt")
  (tmp_path / "log.txt").write_bytes("1\t0\tQ\t7\t213\tпоиск\n".encode())  # UTF-8, not ASCII
  assert data.read_yandex_sessions(tmp_path / "log.txt").doc_ids.tolist() == ["поиск"]
