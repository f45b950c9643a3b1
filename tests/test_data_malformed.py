"""Malformed input to every loader is a ValueError naming the file and the line (or row) and field (issue 31).

One case per class of malformed input: bytes outside the grammar (non-ASCII, control bytes,
``_``, Unicode digits, ``nan``/``inf``), numbers outside float32, duplicate ids, labels outside the
declared range, absurdly large ids/positions, and every decoder error (UTF-8, JSON, gzip/zlib,
pyarrow), which must come back as a ValueError naming the file, raised ``from`` the decoder's error.
"""

import gzip
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from ultr_jax import data

ROOT = pathlib.Path(__file__).parent.parent


def _raises(fn, *needles):
  """Runs ``fn``; it must raise ValueError whose message contains every needle. Returns the error."""
  with pytest.raises(ValueError) as e:
    fn()
  msg = str(e.value)
  for needle in needles:
    assert needle in msg, msg
  return e.value


def _corrupt_gzip(text: bytes) -> bytes:
  """A gzip stream whose header is fine and whose deflate body is garbage (zlib.error when read)."""
  z = bytearray(gzip.compress(text * 20, mtime=0))
  for i in range(12, len(z) - 8, 3):
    z[i] ^= 0x5A
  return bytes(z)


# ---------------------------------------------------------------------------
# SVMlight (item 3).

SVM_CASES = [
  # (id, bytes, kwargs, line, field)
  ("no-break space after a value", "1 qid:1 1:1\n1 qid:1 1:0.5\u00a0\n".encode(), {}, 2, "value"),
  ("byte 0x80 as a value", b"1 qid:1 1:1\n0 qid:1 1:\x80\n", {}, 2, "value"),
  ("e-acute after a value", "1 qid:1 1:0.5\u00e9\n".encode(), {}, 1, "value"),
  ("non-ASCII label", "\u0661 qid:1 1:1\n".encode(), {}, 1, "label"),
  ("control byte in a value", b"1 qid:1 1:0.5\x07\n", {}, 1, "value"),
  ("NUL byte in a value", b"1 qid:1 1:0.\x005\n", {}, 1, "value"),
  ("underscore digits", b"1 qid:1 1:1_0\n", {}, 1, "value"),
  ("hex value", b"1 qid:1 1:0x10\n", {}, 1, "value"),
  ("nan label", b"1 qid:1 1:1\nnan qid:1 1:1\n", {}, 2, "label"),
  ("inf value", b"1 qid:1 1:inf\n", {}, 1, "value"),
  ("infinity label", b"-Infinity qid:1 1:1\n", {"max_label": None}, 1, "label"),
  ("value above float32", b"1 qid:1 1:1\n1 qid:1 1:1e39\n", {}, 2, "value"),
  ("value below -float32", b"1 qid:1 1:-3.5e38\n", {}, 1, "value"),
  ("label above float32", b"1e39 qid:1 1:1\n", {"max_label": None}, 1, "label"),
  ("duplicate feature id", b"1 qid:1 1:1 2:3\n1 qid:1 1:1 2:3 2:4\n", {}, 2, "feature id"),
  ("duplicate feature id, unsorted line", b"1 qid:1 3:1 1:3\n1 qid:1 3:1 2:3 3:4\n", {}, 2, "feature id"),
  ("feature id of 10^9", b"1 qid:1 1:1\n1 qid:1 1000000000:1\n", {}, 2, "feature id"),
  ("feature id beyond int32", b"1 qid:1 99999999999999999999:1\n", {"num_features": 5}, 1, "feature id"),
  ("qid beyond int64", b"1 qid:99999999999999999999999 1:1\n", {}, 1, "qid"),
  ("Unicode digit qid", "1 qid:\u0663 1:1\n".encode(), {}, 1, "qid"),
  ("label above max_label", b"1 qid:1 1:1\n4.5 qid:1 1:1\n", {}, 2, "label"),
  ("label glued to qid (found by the fuzz test)", b"1 qid:1 1:1\n2qid:1 1:1\n", {}, 2, "label"),
]


@pytest.mark.parametrize("case", SVM_CASES, ids=[c[0] for c in SVM_CASES])
def test_svmlight_malformed_names_file_line_and_field(tmp_path, case):
  _, raw, kwargs, line, field = case
  p = tmp_path / "f.txt"
  p.write_bytes(raw)
  _raises(lambda: data.load_svmlight(p, cache=False, **kwargs), f"{p}:{line}:", f"field {field!r}")


def test_svmlight_non_ascii_in_a_comment_is_fine(tmp_path):
  p = tmp_path / "f.txt"
  p.write_bytes("2 qid:1 1:0.5 # caf\u00e9 \x80\n0 qid:1 2:1\n".encode("utf-8", "surrogateescape"))
  rows = data.read_svmlight(p, cache=False)
  assert rows.values.tolist() == [0.5, 1.0] and rows.labels.tolist() == [2.0, 0.0]


def test_svmlight_big_feature_id_is_allowed_with_num_features(tmp_path):
  p = tmp_path / "f.txt"
  p.write_bytes(b"1 qid:1 100000:1\n")
  assert data.read_svmlight(p, cache=False, num_features=100_000).indices.tolist() == [99_999]


@pytest.mark.parametrize("layout", ["qid", "query file"])
def test_svmlight_gzip_is_read_like_the_plain_file(tmp_path, layout):
  text = b"2 qid:7 1:0.5 3:2\n0 qid:7 2:1\n1 qid:9 3:4\n"
  if layout == "query file":
    text = text.replace(b"qid:7 ", b"").replace(b"qid:9 ", b"")
    (tmp_path / "a.txt.query").write_bytes(b"2\n1\n")
    (tmp_path / "a.gz.query").write_bytes(gzip.compress(b"2\n1\n"))
  (tmp_path / "a.txt").write_bytes(text)
  (tmp_path / "a.gz").write_bytes(gzip.compress(text))
  plain = data.load_svmlight(tmp_path / "a.txt", cache=False)
  zipped = data.load_svmlight(tmp_path / "a.gz", cache=False)
  for field in ("features", "labels", "where", "qid", "doc_ids"):
    np.testing.assert_array_equal(getattr(plain, field), getattr(zipped, field))


@pytest.mark.parametrize("body", ["corrupt", "truncated"])
def test_svmlight_bad_gzip_names_the_file(tmp_path, body):
  p = tmp_path / "a.gz"
  good = gzip.compress(b"1 qid:1 1:1\n" * 50)
  p.write_bytes(_corrupt_gzip(b"1 qid:1 1:1\n") if body == "corrupt" else good[: len(good) // 2])
  err = _raises(lambda: data.read_svmlight(p, cache=False), f"{p}:", "gzip")
  assert err.__cause__ is not None  # raised from the decoder's error


def test_svmlight_query_file_with_non_ascii_count(tmp_path):
  p = tmp_path / "f.txt"
  p.write_bytes(b"1 1:1\n0 1:2\n")
  (tmp_path / "f.txt.query").write_bytes("1\n\u0661\n".encode())
  _raises(lambda: data.read_svmlight(p, cache=False), f"{p}.query:2:", "query count")


# ---------------------------------------------------------------------------
# ULTRA (item 4).

FEAT = "d0 0:1\nd1 1:1\nd2 2:1\nd3 3:1 0:0.5\n"
SETTINGS = {"feature_size": 4, "rank_cutoff": 3, "max_label": 4}


def _ultra(tmp_path, feature=FEAT, init_list="5 d3 d0\n6 d1 d2 d0\n", labels="5 2 1\n6 0 4 1\n", settings=SETTINGS):
  (tmp_path / "train").mkdir(exist_ok=True)
  if settings is not None:
    s = settings if isinstance(settings, (str, bytes)) else json.dumps(settings)
    (tmp_path / "settings.json").write_bytes(s if isinstance(s, bytes) else s.encode())
  for name, text in (("feature", feature), ("init_list", init_list), ("labels", labels)):
    (tmp_path / "train" / f"train.{name}").write_bytes(text if isinstance(text, bytes) else text.encode())
  return tmp_path


ULTRA_CASES = [
  # (id, overrides, file, line, field)
  ("nan label", {"labels": "5 2 1\n6 0 nan 1\n"}, "train.labels", 2, "labels"),
  ("inf label", {"labels": "5 inf 1\n6 0 4 1\n"}, "train.labels", 1, "labels"),
  ("label -1 (the old unset marker)", {"labels": "5 2 -1\n6 0 4 1\n"}, "train.labels", 1, "labels"),
  ("label above max_label", {"labels": "5 2 1\n6 0 4.5 1\n"}, "train.labels", 2, "labels"),
  ("non-ASCII label", {"labels": "5 2 1\n6 0 \u0664 1\n"}, "train.labels", 2, "labels"),
  ("nan feature", {"feature": "d0 0:1\nd1 1:nan\nd2 2:1\nd3 3:1\n"}, "train.feature", 2, "feature"),
  ("feature above float32", {"feature": "d0 0:1e39\nd1 1:1\nd2 2:1\nd3 3:1\n"}, "train.feature", 1, "feature"),
  ("duplicate feature index", {"feature": "d0 0:1\nd1 1:1 1:2\nd2 2:1\nd3 3:1\n"}, "train.feature", 2, "feature"),
  ("feature index beyond feature_size", {"feature": "d0 0:1\nd1 9:1\nd2 2:1\nd3 3:1\n"}, "train.feature", 2, "feature"),
  ("non-UTF-8 feature file", {"feature": b"d0 0:1\nd1 1:\xff\nd2 2:1\nd3 3:1\n"}, "train.feature", 2, "byte"),
  ("non-UTF-8 init_list", {"init_list": b"5 d3 d0\n6 d1 \xfe d0\n"}, "train.init_list", 2, "byte"),
  (
    "qid with a Unicode digit",
    {"init_list": "\u0665 d3 d0\n6 d1 d2 d0\n", "labels": "\u0665 2 1\n6 0 4 1\n"},
    "train.init_list",
    1,
    "qid",
  ),
]


@pytest.mark.parametrize("case", ULTRA_CASES, ids=[c[0] for c in ULTRA_CASES])
def test_ultra_malformed_names_file_line_and_field(tmp_path, case):
  _, overrides, name, line, field = case
  _ultra(tmp_path, **overrides)
  needle = f"field {field!r}" if field != "byte" else "is not UTF-8"
  _raises(lambda: data.load_ultra(tmp_path, with_features=True), f"{tmp_path / 'train' / name}:{line}:", needle)


def test_ultra_document_twice_in_one_list(tmp_path):
  _ultra(tmp_path, init_list="5 d3 d0\n6 d1 d1 d0\n", labels="5 2 1\n6 0 0 1\n")
  list_path = tmp_path / "train" / "train.init_list"
  _raises(lambda: data.load_ultra(tmp_path, repeated_docs="error"), f"{list_path}:2:", "field 'doc_id'", "twice")
  with pytest.warns(UserWarning, match=rf"{list_path}:2: field 'doc_id'.*twice"):
    ds = data.load_ultra(tmp_path)
  assert ds.doc_ids[1].tolist() == [1, 1, 0]  # kept, as the paper's data needs
  assert data.load_ultra(tmp_path, repeated_docs="allow").doc_ids[1].tolist() == [1, 1, 0]


SETTINGS_CASES = [
  ("missing", None, "missing"),
  ("malformed JSON", '{"feature_size": 4,', "malformed JSON"),
  ("a list", "[4, 3]", "expected a JSON object"),
  ("string rank_cutoff", {"feature_size": 4, "rank_cutoff": "3"}, "field 'rank_cutoff'"),
  ("bool feature_size", {"feature_size": True}, "field 'feature_size'"),
  ("no feature_size", {"rank_cutoff": 3}, "field 'feature_size'"),
  ("nan max_label", '{"feature_size": 4, "max_label": NaN}', "field 'max_label'"),
  ("non-UTF-8", b'{"feature_size": 4, "x": "\xff"}', "is not UTF-8"),
  ("absurd rank_cutoff", {"feature_size": 4, "rank_cutoff": 10**9}, "field 'rank_cutoff'"),
  ("absurd feature_size", {"feature_size": 10**9}, "field 'feature_size'"),
]


@pytest.mark.parametrize("case", SETTINGS_CASES, ids=[c[0] for c in SETTINGS_CASES])
def test_ultra_bad_settings_name_the_file(tmp_path, case):
  _, settings, needle = case
  _ultra(tmp_path, settings=settings)
  err = _raises(lambda: data.load_ultra(tmp_path, with_features=True), f"{tmp_path / 'settings.json'}", needle)
  if needle in ("malformed JSON", "is not UTF-8"):
    assert err.__cause__ is not None and f"{tmp_path / 'settings.json'}:1:" in str(err)


SETTINGS_CLASSES = [
  # (id, settings.json's text, needles after the file's path): each failure class names the file, and the line
  # (JSON syntax) or the field
  ("truncated JSON", '{"feature_size": 4,\n "rank_cutoff": 3,\n "max_la', [":3: malformed JSON at column 2"]),
  ("truncated to nothing", "", [":1: malformed JSON at column 1"]),
  ("nested too deeply to parse", "[" * 100_000, [": malformed JSON", "nested too deeply"]),
  ("missing field", '{"rank_cutoff": 3}', [": field 'feature_size': missing; expected an integer >= 1"]),
  ("misspelled field", '{"feature_sise": 4}', [": field 'feature_size': missing", "'feature_sise'"]),
  ("wrongly typed field", '{"feature_size": 4, "rank_cutoff": "3"}', [": field 'rank_cutoff': expected an integer"]),
  ("wrongly typed max_label", '{"feature_size": 4, "max_label": [4]}', [": field 'max_label': expected a finite"]),
  ("null required field", '{"feature_size": null}', [": field 'feature_size': expected an integer >= 1, got None"]),
]


@pytest.mark.parametrize("case", SETTINGS_CLASSES, ids=[c[0] for c in SETTINGS_CLASSES])
def test_ultra_settings_errors_name_the_file_and_the_line_or_field(tmp_path, case):
  _, text, needles = case
  _ultra(tmp_path, settings=text)
  path = tmp_path / "settings.json"
  _raises(lambda: data.load_ultra(tmp_path, with_features=True), f"{path}{needles[0]}", *needles[1:])


def test_ultra_gzip_feature_file_is_read(tmp_path):
  _ultra(tmp_path)
  want = data.load_ultra(tmp_path, with_features=True)
  path = tmp_path / "train" / "train.feature"
  path.write_bytes(gzip.compress(path.read_bytes()))
  got = data.load_ultra(tmp_path, with_features=True)
  np.testing.assert_array_equal(got.features, want.features)


# ---------------------------------------------------------------------------
# Session logs (item 5) and the click log.


def _doc(pos, url="u", click=0):
  return "\t".join([str(pos), url, "5\x016", "8\x019", "0", str(click)] + ["0"] * 27)


GOOD_PAGES = ["1\t11\x0112\t", _doc(1, "a"), _doc(2, "b"), _doc(3, "c"), "2\t13\t", _doc(1, "b"), _doc(2, "d")]

BAIDU_CASES = [
  # (id, lines, line, field)
  ("document cut to 3 fields mid-page", GOOD_PAGES[:3] + ["3\tc\t5\x016", _doc(4, "e")] + GOOD_PAGES[4:], 4, "qid"),
  ("document cut to 2 fields mid-page", GOOD_PAGES[:3] + ["3\tc", _doc(4, "e"), _doc(5, "f")], 4, "qid"),
  ("document cut to 1 field mid-page", GOOD_PAGES[:2] + ["2", _doc(3, "c")], 3, "qid"),
  ("document cut before the next page", GOOD_PAGES[:3] + ["3\tc"] + GOOD_PAGES[4:], 4, "qid"),
  ("document cut at the end of the file", GOOD_PAGES + ["3\td\t5"], 8, "qid"),
  ("absurd pos", GOOD_PAGES[:2] + [_doc(10**9, "z")], 3, "pos"),
]


@pytest.mark.parametrize("case", BAIDU_CASES, ids=[c[0] for c in BAIDU_CASES])
def test_baidu_sessions_malformed_names_file_line_and_field(tmp_path, case):
  _, lines, line, field = case
  p = tmp_path / "part-00000.txt"
  p.write_text("\n".join(lines) + "\n", encoding="utf-8")
  _raises(lambda: data.read_baidu_sessions(p), f"{p}:{line}:", f"field {field!r}")


def test_baidu_sessions_good_pages_still_read(tmp_path):
  p = tmp_path / "part-00000.txt"
  p.write_text("\n".join(GOOD_PAGES) + "\n", encoding="utf-8")
  log = data.read_baidu_sessions(p)
  assert log.positions.tolist() == [0, 1, 2, 0, 1] and log.sessions.tolist() == [0, 0, 0, 1, 1]


def test_baidu_sessions_non_utf8_url_names_file_and_line(tmp_path):
  p = tmp_path / "part-00000.txt"
  p.write_bytes(("\n".join(GOOD_PAGES[:2]) + "\n").encode() + _doc(2, "x").encode().replace(b"x", b"\xff") + b"\n")
  _raises(lambda: data.read_baidu_sessions(p), f"{p}:", "line 3", "url_md5")


YANDEX_GOOD = b"1\t0\tQ\t7\t213\tu1\tu2\tu3\n1\t5\tC\tu2\n2\t0\tQ\t8\t1\tu3\tu1\n"


@pytest.mark.parametrize("reader", ["baidu", "yandex"])
@pytest.mark.parametrize("body", ["corrupt", "truncated"])
def test_session_gzip_with_a_bad_body_names_the_file(tmp_path, reader, body):
  text = ("\n".join(GOOD_PAGES) + "\n").encode() if reader == "baidu" else YANDEX_GOOD
  good = gzip.compress(text * 30)
  p = tmp_path / "log.gz"
  p.write_bytes(_corrupt_gzip(text) if body == "corrupt" else good[: len(good) // 2])
  read = data.read_baidu_sessions if reader == "baidu" else data.read_yandex_sessions
  err = _raises(lambda: read(p), f"{p}: cannot read")
  assert err.__cause__ is not None


@pytest.mark.parametrize("reader", ["baidu", "yandex"])
def test_session_gzip_is_sniffed_not_named(tmp_path, reader):
  text = ("\n".join(GOOD_PAGES) + "\n").encode() if reader == "baidu" else YANDEX_GOOD
  read = data.read_baidu_sessions if reader == "baidu" else data.read_yandex_sessions
  (tmp_path / "plain.txt").write_bytes(text)
  (tmp_path / "zipped.txt").write_bytes(gzip.compress(text))
  np.testing.assert_array_equal(read(tmp_path / "plain.txt").items, read(tmp_path / "zipped.txt").items)


def test_yandex_non_utf8_query_names_the_line(tmp_path):
  p = tmp_path / "log.txt"
  p.write_bytes(YANDEX_GOOD + b"3\t0\tQ\t\xff\t1\tu3\tu1\n")
  _raises(lambda: data.read_yandex_sessions(p), f"{p}:", "line 4", "QueryID")


HEADER = "query_id\tdoc_id\tposition\tclick\n"
CLICK_CASES = [
  # (id, body, line, field)
  ("non-UTF-8 byte", b"q\ta\t1\t1\nq\t\xff\t2\t0\n", 3, None),
  ("position of 10^9", b"q\ta\t1\t1\nq\tb\t1000000000\t0\n", 3, "position"),
  ("underscore position", b"q\ta\t1\t1\nq\tb\t1_0\t0\n", 3, "position"),
  ("Unicode digit position", "q\ta\t1\t1\nq\tb\t\u0663\t0\n".encode(), 3, "position"),
  ("nan click", b"q\ta\t1\t1\nq\tb\t2\tnan\n", 3, "click"),
]


@pytest.mark.parametrize("case", CLICK_CASES, ids=[c[0] for c in CLICK_CASES])
def test_click_log_malformed_names_file_line_and_field(tmp_path, case):
  _, body, line, field = case
  p = tmp_path / "log.tsv"
  p.write_bytes(HEADER.encode() + body)
  needles = [f"{p}:{line}:"] + ([f"field {field!r}"] if field else ["is not UTF-8"])
  _raises(lambda: data.read_click_log(p), *needles)


def test_click_log_infinite_impressions(tmp_path):
  p = tmp_path / "log.tsv"
  p.write_text("query_id\tdoc_id\tposition\tclick\timpressions\nq\ta\t1\t1\t3\nq\tb\t2\t0\tinf\n")
  _raises(lambda: data.read_click_log(p), f"{p}:3:", "field 'impressions'")


def test_click_log_gzip_is_read(tmp_path):
  text = (HEADER + "q\ta\t1\t1\nq\tb\t2\t0\n").encode()
  (tmp_path / "a.tsv").write_bytes(text)
  (tmp_path / "b.tsv").write_bytes(gzip.compress(text))
  a, b = data.read_click_log(tmp_path / "a.tsv"), data.read_click_log(tmp_path / "b.tsv")
  np.testing.assert_array_equal(a.positions, b.positions)
  np.testing.assert_array_equal(a.clicks, b.clicks)


# ---------------------------------------------------------------------------
# Baidu-ULTR Parquet / Feather (items 3 and the decoder rule).


def _baidu_table(path, **overrides):
  pa = pytest.importorskip("pyarrow")
  pytest.importorskip("pyarrow.parquet")

  cols = {"query_id": [7, 7, 9], "position": [1, 2, 1], "click": [0, 1, 0], "bm25": [3.0, 2.0, 1.0]}
  cols.update(overrides)
  pa.parquet.write_table(pa.table(cols), path)
  return path


def test_baidu_parquet_absurd_position_names_the_row(tmp_path):
  p = _baidu_table(tmp_path / "a.parquet", position=[1, 10**9, 1])
  _raises(lambda: data.load_baidu_ultr(p, features=["bm25"]), f"{p}, row 1, field 'position'")
  assert data.load_baidu_ultr(p, features=["bm25"], list_size=3).where.sum() == 2  # explicit list_size


def test_baidu_parquet_label_outside_float32_names_the_row(tmp_path):
  p = _baidu_table(tmp_path / "a.parquet", label=[1.0, 1e39, 0.0])
  _raises(lambda: data.load_baidu_ultr(p, features=["bm25"]), f"{p}, row 1, field 'label'", "float32")


def test_baidu_parquet_corrupt_body_names_the_file(tmp_path):
  p = _baidu_table(tmp_path / "a.parquet")
  raw = bytearray(p.read_bytes())
  for i in range(4, len(raw) // 2):  # the column chunks; the footer (schema) stays readable
    raw[i] ^= 0xFF
  p.write_bytes(bytes(raw))
  err = _raises(lambda: data.load_baidu_ultr(p, features=["bm25"]), f"{p}")
  assert err.__cause__ is not None


# ---------------------------------------------------------------------------
# The identifiability check binary (items 3 and 8).


def _run_check(tmp_path, subprocess_env, *args):
  return subprocess.run(
    [sys.executable, "experiments/identifiability/check.py", *args],
    capture_output=True,
    text=True,
    env=subprocess_env,
    cwd=str(ROOT),
  )


def test_check_binary_reads_svmlight_with_the_library_loader(tmp_path, subprocess_env):
  good = tmp_path / "good.txt"
  good.write_text("2 1:0.5\n0 2:1\n0 2:1\n2 1:0.5\n")  # the two documents swap places: one component
  (tmp_path / "good.txt.query").write_text("2\n2\n")  # .query grouping: the old parser needed qid:
  out = tmp_path / "r.json"
  r = _run_check(tmp_path, subprocess_env, f"--data={good}", f"--out={out}", "--list_size=2")
  assert r.returncode == 0, r.stderr
  assert json.loads(out.read_text())["num_components"] == 1
  bad = tmp_path / "bad.txt"
  bad.write_text("2 qid:1 1:0.5\n0 qid:1 2:nan\n")  # the old parser read NaN
  r = _run_check(tmp_path, subprocess_env, f"--data={bad}", f"--out={tmp_path / 'bad.json'}")
  assert r.returncode != 0 and f"{bad}:2: field 'value'" in r.stderr, r.stderr
  assert not (tmp_path / "bad.json").exists()


def test_check_binary_removes_its_temporary_when_writing_fails(tmp_path, subprocess_env):
  code = (
    "import sys; sys.argv = ['check', '--data=x', '--out=' + sys.argv[1]]\n"
    "sys.path.insert(0, 'experiments/identifiability')\n"
    "import check\n"
    "from absl import flags\n"
    "flags.FLAGS(sys.argv)\n"
    "try:\n"
    "  check._write({'x': object()})\n"
    "except TypeError:\n"
    "  print('raised')\n"
  )
  out = tmp_path / "o" / "r.json"
  r = subprocess.run(
    [sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=subprocess_env, cwd=str(ROOT)
  )
  assert r.returncode == 0 and "raised" in r.stdout, r.stderr
  assert os.listdir(out.parent) == []
