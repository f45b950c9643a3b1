"""Tests for the SVMlight/LETOR loader (ultr_jax.data.svmlight)."""

import numpy as np
import pytest

from ultr_jax import data
from ultr_jax.data import svmlight


def simple_parse(text: str):
  """Independent reference: (labels, qids, {row: {fid: val}}) skipping comments/blank lines."""
  labels, qids, feats = [], [], []
  for line in text.splitlines():
    line = line.split("#")[0].strip()
    if not line:
      continue
    toks = line.split()
    labels.append(float(toks[0]))
    rest = toks[1:]
    if rest and rest[0].startswith("qid:"):
      qids.append(int(rest[0][4:]))
      rest = rest[1:]
    feats.append({int(t.split(":")[0]): float(t.split(":")[1]) for t in rest})
  return np.array(labels), np.array(qids), feats


MESSY = (
  "# a whole-line comment\n"
  "2 qid:10 1:0.5 3:-1.25 7:3e-2 # trailing comment\n"
  "0 qid:10 2:1 4:.5 5:5. 6:+7\n"
  "\n"
  "   # indented comment\n"
  "1 qid:11 1:12345678.5 2:-0.000001 3:1.23456789012345678 7:1E5\r\n"
  "4 qid:11 5:99999999\n"
  "3 qid:12 1:2 6:0.333333\t 7:-42\n"
  "0 qid:12\n"
)


def write(tmp_path, text, name="f.txt"):
  p = tmp_path / name
  p.write_text(text)
  return p


def assert_rows_match_reference(rows, text):
  labels, qids, feats = simple_parse(text)
  np.testing.assert_array_equal(rows.labels, labels.astype(np.float32))
  if len(qids):
    np.testing.assert_array_equal(rows.qid, qids)
  assert len(rows.indptr) == len(labels) + 1
  for r, f in enumerate(feats):
    a, b = rows.indptr[r], rows.indptr[r + 1]
    got = dict(zip((rows.indices[a:b] + 1).tolist(), rows.values[a:b].tolist()))
    assert got == {k: float(np.float32(v)) for k, v in f.items()}, r


def test_messy_file_matches_reference_and_sklearn(tmp_path):
  p = write(tmp_path, MESSY)
  rows = data.read_svmlight(p, cache=False)
  assert_rows_match_reference(rows, MESSY)
  assert rows.num_features == 7
  assert rows.line.tolist() == [2, 3, 6, 7, 8, 9]
  assert rows.group.tolist() == [0, 0, 1, 1, 2, 2]
  sk = pytest.importorskip("sklearn.datasets")
  x, y, q = sk.load_svmlight_file(str(p), query_id=True, n_features=7, zero_based=False)
  np.testing.assert_array_equal(rows.labels, y.astype(np.float32))
  np.testing.assert_array_equal(rows.qid, q)
  dense = np.zeros((len(y), 7), np.float32)
  for r in range(len(y)):
    a, b = rows.indptr[r], rows.indptr[r + 1]
    dense[r, rows.indices[a:b]] = rows.values[a:b]
  np.testing.assert_array_equal(dense, x.toarray().astype(np.float32))


def _random_file(rng, n_lines, num_features, qid=True):
  lines, q = [], 0
  for i in range(n_lines):
    if rng.random() < 0.1:
      q += int(rng.integers(1, 5))
    ids = np.sort(rng.choice(num_features, size=rng.integers(0, num_features + 1), replace=False)) + 1
    vals = []
    for _ in ids:
      kind = rng.integers(5)
      v = rng.normal() * 10.0 ** rng.integers(-3, 6)
      vals.append([f"{v:.6f}", f"{v:.3g}", f"{int(v)}", f"{v:.12f}", f"{v:.17g}"][kind])
    head = f"{rng.integers(0, 5)}" + (f" qid:{q}" if qid else "")
    tail = " # doc" if rng.random() < 0.2 else ""
    lines.append(" ".join([head] + [f"{j}:{v}" for j, v in zip(ids, vals)]) + tail)
  return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_path_equals_reference_parser_and_sklearn(tmp_path, seed):
  rng = np.random.default_rng(seed)
  text = _random_file(rng, 300, 20)
  fast = svmlight._parse_fast(text.encode())
  assert fast is not None, "the vectorised path should handle well-formed files"
  ref = svmlight._parse_reference(text.encode(), "x")
  for a, b in zip(fast, ref):
    np.testing.assert_array_equal(a, b)
  p = write(tmp_path, text)
  rows = data.read_svmlight(p, cache=False, num_features=20)
  assert_rows_match_reference(rows, text)
  sk = pytest.importorskip("sklearn.datasets")
  x, y, q = sk.load_svmlight_file(str(p), query_id=True, n_features=20, zero_based=False)
  np.testing.assert_array_equal(rows.labels, y.astype(np.float32))
  np.testing.assert_array_equal(rows.qid, q)
  np.testing.assert_array_equal(rows.indptr, x.indptr)
  np.testing.assert_array_equal(rows.indices, x.indices)
  np.testing.assert_array_equal(rows.values, x.data.astype(np.float32))


def test_round_trip_through_writer(tmp_path):
  ds = data.make_synthetic(
    num_train=30, num_valid=1, num_test=1, list_size=9, num_features=6, seed=3, min_list_size=2
  ).train
  p = tmp_path / "rt.txt"
  data.write_svmlight(ds, p)
  back = data.load_svmlight(p, cache=False, list_size=ds.list_size, num_features=6)
  np.testing.assert_array_equal(back.features, ds.features)
  np.testing.assert_array_equal(back.labels, ds.labels)
  np.testing.assert_array_equal(back.where, ds.where)
  np.testing.assert_array_equal(back.qid, ds.qid)
  # doc_ids are the data row numbers: consecutive over real documents.
  np.testing.assert_array_equal(back.doc_ids[back.where], np.arange(ds.num_documents))


def test_query_file_variant_and_explicit_query_path(tmp_path):
  ds = data.make_synthetic(
    num_train=12, num_valid=1, num_test=1, list_size=5, num_features=4, seed=1, min_list_size=1
  ).train
  p = tmp_path / "lgb.txt"
  data.write_svmlight(ds, p, query_file=True)
  assert "qid" not in p.read_text()
  back = data.load_svmlight(p, cache=False, list_size=5)
  np.testing.assert_array_equal(back.features[..., : back.num_features], ds.features[..., : back.num_features])
  np.testing.assert_array_equal(back.where, ds.where)
  np.testing.assert_array_equal(back.qid, np.arange(12))
  other = tmp_path / "groups.txt"
  other.write_text(f"{ds.num_documents}\n")
  one = data.load_svmlight(p, query_path=other, cache=False)
  assert one.num_queries == 1 and one.list_size == ds.num_documents


def test_truncation_keeps_first_items_in_file_order(tmp_path):
  p = write(tmp_path, "".join(f"{i % 5} qid:1 1:{i}\n" for i in range(6)) + "1 qid:2 1:100\n")
  ds = data.load_svmlight(p, cache=False, list_size=4)
  assert ds.features.shape == (2, 4, 1)
  np.testing.assert_array_equal(ds.features[0, :, 0], [0, 1, 2, 3])
  np.testing.assert_array_equal(ds.where[1], [True, False, False, False])
  full = data.load_svmlight(p, cache=False)
  assert full.list_size == 6


def test_noncontiguous_qid_blocks_are_merged_in_first_appearance_order(tmp_path):
  p = write(tmp_path, "1 qid:5 1:1\n2 qid:3 1:2\n3 qid:5 1:3\n")
  ds = data.load_svmlight(p, cache=False)
  np.testing.assert_array_equal(ds.qid, [5, 3])
  np.testing.assert_array_equal(ds.labels, [[1, 3], [2, 0]])


def test_cache_hit_identical_and_invalidated(tmp_path, monkeypatch):
  cache = tmp_path / "cache"
  p = write(tmp_path, MESSY)
  first = data.load_svmlight(p, cache_dir=cache)
  files = list(cache.glob("*.npz"))
  assert len(files) == 1
  assert not list(cache.glob("*.tmp"))

  def boom(*a, **k):
    raise AssertionError("parsed again despite a cache hit")

  monkeypatch.setattr(svmlight, "_parse_fast", boom)
  monkeypatch.setattr(svmlight, "_parse_reference", boom)
  second = data.load_svmlight(p, cache_dir=cache)
  for name in ("features", "labels", "where", "qid", "doc_ids"):
    np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
  # Options are part of the key: another num_features is a miss.
  with pytest.raises(AssertionError, match="parsed again"):
    data.load_svmlight(p, cache_dir=cache, num_features=9)
  monkeypatch.undo()
  p.write_text(MESSY.replace("2 qid:10", "3 qid:10"))
  third = data.load_svmlight(p, cache_dir=cache)
  assert third.labels[0, 0] == 3 and first.labels[0, 0] == 2
  assert len(list(cache.glob("*.npz"))) == 2


def test_query_file_change_invalidates_cache(tmp_path):
  cache = tmp_path / "cache"
  p = write(tmp_path, "1 1:1\n0 1:2\n2 1:3\n")
  (tmp_path / "f.txt.query").write_text("2\n1\n")
  assert data.load_svmlight(p, cache_dir=cache).num_queries == 2
  (tmp_path / "f.txt.query").write_text("1\n2\n")
  ds = data.load_svmlight(p, cache_dir=cache)
  np.testing.assert_array_equal(ds.where.sum(1), [1, 2])


def test_unwritable_cache_warns_and_still_loads(tmp_path):
  p = write(tmp_path, "1 qid:1 1:1\n")
  blocker = tmp_path / "file_not_dir"
  blocker.write_text("x")
  with pytest.warns(UserWarning, match="could not write"):
    ds = data.load_svmlight(p, cache_dir=blocker / "sub")
  assert ds.num_documents == 1


MALFORMED = [
  ("bad qid", "1 qid:1 1:1\n0 qid:abc 1:2\n", {}, 2, "qid"),
  ("non-numeric label", "1 qid:1 1:1\nx qid:1 1:2\n", {}, 2, "label"),
  ("non-numeric value", "1 qid:1 1:1\n# c\n0 qid:1 1:2 2:zz\n", {}, 3, "value"),
  ("feature id zero", "1 qid:1 0:1\n", {}, 1, "feature id"),
  ("feature id too large", "1 qid:1 1:1\n1 qid:1 1:1 9:2\n", {"num_features": 8}, 2, "feature id"),
  ("non-integer feature id", "1 qid:1 1:1\n1 qid:1 1.5:2\n", {}, 2, "feature id"),
  ("not id:value", "1 qid:1 1:1\n1 qid:1 5\n", {}, 2, "feature"),
  ("label above max", "1 qid:1 1:1\n5 qid:1 1:1\n", {}, 2, "label"),
  ("negative label", "1 qid:1 1:1\n-1 qid:1 1:1\n", {}, 2, "label"),
  ("label above custom max", "2 qid:1 1:1\n", {"max_label": 1}, 1, "label"),
  ("mixed qid", "1 qid:1 1:1\n1 1:1\n", {}, 2, "qid"),
  ("qid not after label", "1 1:1 qid:3\n", {}, 1, "qid"),
  ("non-finite value", "1 qid:1 1:nan\n", {}, 1, "value"),
  ("empty file", "", {}, 1, "label"),
  ("comments only", "# nothing\n\n", {}, 1, "label"),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_input_names_file_line_and_field(tmp_path, case):
  _, text, kwargs, line, field = case
  p = write(tmp_path, text)
  with pytest.raises(ValueError) as e:
    data.load_svmlight(p, cache=False, **kwargs)
  msg = str(e.value)
  assert f"{p}:{line}:" in msg and f"field {field!r}" in msg, msg


def test_custom_max_label_accepts(tmp_path):
  p = write(tmp_path, "5 qid:1 1:1\n")
  assert data.load_svmlight(p, cache=False, max_label=5).labels[0, 0] == 5
  assert data.load_svmlight(p, cache=False, max_label=None).labels[0, 0] == 5


def test_missing_query_file_without_qids(tmp_path):
  p = write(tmp_path, "1 1:1\n0 1:2\n")
  with pytest.raises(ValueError) as e:
    data.load_svmlight(p, cache=False)
  msg = str(e.value)
  assert f"{p}:1: field 'qid'" in msg and f"{p}.query is missing" in msg, msg


@pytest.mark.parametrize(
  "counts,line,what",
  [("2\n", 2, "too short"), ("2\n2\n", 2, "too long"), ("1\nx\n", 2, "non-integer"), ("0\n3\n", 1, "< 1")],
)
def test_bad_query_file(tmp_path, counts, line, what):
  p = write(tmp_path, "1 1:1\n0 1:2\n2 1:3\n")
  q = tmp_path / "f.txt.query"
  if counts is not None:
    q.write_text(counts)
  with pytest.raises(ValueError) as e:
    data.load_svmlight(p, cache=False)
  msg = str(e.value)
  assert f"{q}:{line}:" in msg and "query count" in msg and what in msg, msg


def test_missing_explicit_query_file_with_qids(tmp_path):
  p = write(tmp_path, "1 qid:1 1:1\n")
  with pytest.raises(ValueError, match="missing"):
    data.load_svmlight(p, cache=False, query_path=tmp_path / "nope.query")


def test_letor_sample_exact_counts(shared_data, tmp_path):
  base = shared_data / "letor-sample"
  train = data.load_svmlight(base / "rank.train", cache_dir=tmp_path)
  assert (train.num_queries, train.num_documents, train.num_features) == (201, 3005, 300)
  assert sorted(np.unique(train.labels[train.where]).tolist()) == [0, 1, 2, 3, 4]
  assert train.where.sum(1).tolist() == [int(x) for x in (base / "rank.train.query").read_text().split()]
  test = data.load_svmlight(base / "rank.test", cache_dir=tmp_path, num_features=300)
  assert test.num_queries == 50 and test.num_features == 300
  assert test.num_documents == sum(int(x) for x in (base / "rank.test.query").read_text().split())
  sk = pytest.importorskip("sklearn.datasets")
  x, y = sk.load_svmlight_file(str(base / "rank.train"), n_features=300, zero_based=False)
  np.testing.assert_array_equal(train.features[train.where], x.toarray().astype(np.float32))
  np.testing.assert_array_equal(train.labels[train.where], y.astype(np.float32))
