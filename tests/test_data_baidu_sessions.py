"""Tests for the raw Baidu-ULTR session reader (ultr_jax.data.read_baidu_sessions) on files the tests write."""

import gzip

import numpy as np
import pytest

from ultr_jax import data


def _doc_line(pos, url, click, tail=27):
  return "\t".join([str(pos), url, "5\x016\x017", "8\x019", "0", str(click)] + ["0"] * tail)


def write_sessions(path, pages):
  """``pages``: (qid, query, [(pos, url, click), ...]) as the release's tab-separated lines."""
  text = "".join(f"{qid}\t{query}\t\n" + "".join(_doc_line(*d) + "\n" for d in docs) for qid, query, docs in pages)
  opener = gzip.open if str(path).endswith(".gz") else open
  with opener(path, "wt", encoding="utf-8") as f:
    f.write(text)
  return path


def random_pages(seed=0, num_pages=40):
  rng = np.random.default_rng(seed)
  queries = ["11\x0112", "13", "14\x0115\x0116"]
  pages = []
  for p in range(num_pages):
    n = int(rng.integers(1, 8))
    urls = rng.choice([f"u{j:02d}" for j in range(12)], n, replace=False)
    pos = rng.choice(np.arange(1, 11), n, replace=False)
    docs = [(int(a), str(u), int(rng.integers(0, 2))) for a, u in zip(pos, urls)]
    pages.append((str(1000 + p), queries[p % 3], docs))
  return pages


@pytest.mark.parametrize("suffix", [".gz", ".txt"])
@pytest.mark.parametrize("query_key", ["query", "qid"])
def test_sessions_match_a_python_reference(tmp_path, suffix, query_key):
  pages = random_pages()
  log = data.read_baidu_sessions(write_sessions(tmp_path / f"part-00000{suffix}", pages), query_key=query_key)
  ids, rows = {}, []
  for s, (qid, query, docs) in enumerate(pages):
    for pos, url, click in docs:
      key = (query if query_key == "query" else qid, url)
      rows.append((ids.setdefault(key, len(ids)), pos - 1, click, s, qid, url))
  items, positions, clicks, sessions, qids, urls = (np.array(c) for c in zip(*rows))
  np.testing.assert_array_equal(log.items, items)
  np.testing.assert_array_equal(log.positions, positions)
  np.testing.assert_array_equal(log.clicks, clicks)
  np.testing.assert_array_equal(log.sessions, sessions)
  np.testing.assert_array_equal(log.query_ids, qids)
  np.testing.assert_array_equal(log.doc_ids, urls)
  assert log.num_items == len(ids) and log.num_positions == positions.max() + 1
  # Lines: query line, then its documents.
  expected_lines = []
  line = 0
  for _, _, docs in pages:
    line += 1
    expected_lines += list(range(line + 1, line + 1 + len(docs)))
    line += len(docs)
  np.testing.assert_array_equal(log.lines, expected_lines)
  head = data.read_baidu_sessions(tmp_path / f"part-00000{suffix}", query_key=query_key, max_sessions=5)
  n = sum(len(d) for _, _, d in pages[:5])
  np.testing.assert_array_equal(head.positions, log.positions[:n])
  np.testing.assert_array_equal(head.sessions, log.sessions[:n])


def test_sessions_lay_out_as_pages_and_feed_the_identifiability_check(tmp_path):
  from ultr_jax.graph import check_identifiability  # noqa: PLC0415

  pages = random_pages(seed=1)
  log = data.read_baidu_sessions(write_sessions(tmp_path / "part-00001.gz", pages))
  out = data.click_log_sessions(log)
  for s, (_, _, docs) in enumerate(pages):
    for pos, url, click in docs:
      assert out["where"][s, pos - 1] and out["clicks"][s, pos - 1] == click
    assert out["where"][s].sum() == len(docs)
  report = check_identifiability(log.items, log.positions, num_items=log.num_items, num_factors=log.num_positions)
  assert report.num_components >= 1
  # A page that shows two documents at one position is named by its line in the file.
  bad = pages[:2] + [("9", "13", [(1, "a", 0), (2, "b", 1), (1, "c", 0)])]
  log = data.read_baidu_sessions(write_sessions(tmp_path / "dup.gz", bad))
  dup_line = 2 + len(bad[0][2]) + 1 + len(bad[1][2]) + 3
  with pytest.raises(ValueError, match=rf"dup\.gz:{dup_line}: field 'position': its session already shows"):
    data.click_log_sessions(log)


BAD_SESSION_FILES = [
  (_doc_line(1, "u", 0) + "\n", r":1: a document line before any query line"),
  ("1\tq\t\n1\tu\tt\ta\n", r":2: 4 fields: a query line has at most 3"),
  ("1\tq\t\n" + _doc_line(0, "u", 0) + "\n", r":2: field 'pos': '0' is not an integer >= 1"),
  ("1\tq\t\n" + _doc_line("x", "u", 0) + "\n", r":2: field 'pos': 'x' is not an integer >= 1"),
  ("1\tq\t\n" + _doc_line(1, "u", 2) + "\n", r":2: field 'click': '2' is not 0 or 1"),
  ("1\tq\t\n" + _doc_line(1, "", 1) + "\n", r":2: field 'url_md5': empty"),
  ("1\tq\t\n", r": no document lines"),
]


@pytest.mark.parametrize("text,message", BAD_SESSION_FILES)
def test_bad_session_files_name_the_line_and_field(tmp_path, text, message):
  path = tmp_path / "part-00002.txt"
  path.write_text(text, encoding="utf-8")
  with pytest.raises(ValueError, match=r"part-00002\.txt" + message):
    data.read_baidu_sessions(path)


def test_bad_session_arguments_and_files(tmp_path):
  path = write_sessions(tmp_path / "ok.txt", random_pages(num_pages=2))
  with pytest.raises(ValueError, match="query_key must be one of"):
    data.read_baidu_sessions(path, query_key="url")
  with pytest.raises(ValueError, match="max_sessions must be >= 1"):
    data.read_baidu_sessions(path, max_sessions=0)
  (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
  with pytest.raises(ValueError, match=r"broken\.gz: cannot read the session file"):
    data.read_baidu_sessions(tmp_path / "broken.gz")
  with pytest.raises(FileNotFoundError):
    data.read_baidu_sessions(tmp_path / "absent.gz")


def test_read_click_log_dispatches_the_baidu_format(tmp_path):
  path = write_sessions(tmp_path / "part-00003.gz", random_pages(num_pages=6))
  via, direct = data.read_click_log(path, format="baidu"), data.read_baidu_sessions(path)
  for field in ("items", "positions", "clicks", "sessions", "lines"):
    np.testing.assert_array_equal(getattr(via, field), getattr(direct, field))
  with pytest.raises(ValueError, match="format must be one of"):
    data.read_click_log(path, format="jsonl")
