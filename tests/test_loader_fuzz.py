"""Fuzzing every loader: random bytes and mutations of small valid files (issue 31).

Each loader gets seeded random byte strings and random mutations (byte flips, truncations,
inserted non-ASCII or control bytes, deleted bytes, duplicated lines) of a small valid file
written here. The only outcomes accepted are a parsed result that is valid (finite, in range,
shapes consistent) or a ``ValueError`` whose message names the file; any other exception, or a
result that breaks an invariant, fails with the input that caused it. Bounded to a few seconds.
"""

import gzip
import json
import pathlib
import re
import warnings

import numpy as np
import pytest

from ultr_jax import data
from ultr_jax.data import _io

ROUNDS = 120  # inputs per loader
RANDOM_ALPHABETS = (
  None,  # any byte
  b"0123456789 .:-+e\nqid#",  # the SVMlight alphabet: reaches the fast path
  b"0123456789abc \t\n\x01QC,",  # the session logs' alphabet
)


def _mutate(rng: np.random.Generator, raw: bytes) -> bytes:
  """One to three random edits of ``raw``."""
  out = bytearray(raw)
  for _ in range(int(rng.integers(1, 4))):
    kind = int(rng.integers(8))
    at = int(rng.integers(0, len(out) + 1))
    if kind == 0 and out:  # flip a byte
      out[min(at, len(out) - 1)] ^= int(rng.integers(1, 256))
    elif kind == 1:  # truncate
      del out[at:]
    elif kind == 2:  # a non-ASCII byte, or a UTF-8 no-break space / e-acute
      out[at:at] = [bytes([int(rng.integers(0x80, 0x100))]), "\u00a0".encode(), "\u00e9".encode()][int(rng.integers(3))]
    elif kind == 3:  # duplicate a line
      lines = bytes(out).split(b"\n")
      k = int(rng.integers(len(lines)))
      lines.insert(k, lines[k])
      out = bytearray(b"\n".join(lines))
    elif kind == 4:  # a control byte or a character of another grammar
      out[at:at] = bytes([int(rng.choice([0, 7, 9, 11, 13, 0x1F, 0x5F, 0x3A, 0x23, 0x2D, 0x65, 0x6E]))])
    elif kind == 5 and out:  # delete a byte
      del out[min(at, len(out) - 1)]
    elif kind == 6:  # duplicate a token (a feature id:value, a field)
      toks = bytes(out).split(b" ")
      k = int(rng.integers(len(toks)))
      toks.insert(k, toks[k].strip())
      out = bytearray(b" ".join(toks))
    else:  # a digit, to grow an id or a count
      out[at:at] = str(int(rng.integers(10))).encode()
  return bytes(out)


def _random_bytes(rng: np.random.Generator) -> bytes:
  alphabet = RANDOM_ALPHABETS[int(rng.integers(len(RANDOM_ALPHABETS)))]
  n = int(rng.integers(0, 200))
  if alphabet is None:
    return rng.bytes(n)
  return bytes(np.frombuffer(alphabet, np.uint8)[rng.integers(0, len(alphabet), n)])


def _inputs(seed: int, valid: bytes):
  """``ROUNDS`` inputs: the valid file, random bytes (1 in 4) and mutations of the valid file."""
  rng = np.random.default_rng(seed)
  yield valid
  for _ in range(ROUNDS - 1):
    yield _random_bytes(rng) if rng.random() < 0.25 else _mutate(rng, valid)


def _fuzz(seed, valid: bytes, path: pathlib.Path, load, check, names=None):
  """Feeds every input to ``load()`` (after writing it to ``path``); see the module docstring."""
  names = [str(path)] if names is None else names
  parsed = 0
  for raw in _inputs(seed, valid):
    path.write_bytes(raw)
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. Yandex clicks on URLs a page does not show
        out = load()
    except ValueError as e:
      assert any(n in str(e) for n in names), f"error without the file name for input {raw!r}: {e}"
      continue
    except Exception as e:  # noqa: BLE001 - any other exception is the failure this test looks for
      pytest.fail(f"{type(e).__name__} (not ValueError) for input {raw!r}: {e}")
    try:
      check(out, raw)
    except AssertionError as e:
      pytest.fail(f"invalid result for input {raw!r}: {e}")
    parsed += 1
  assert parsed >= 1  # at least the valid file


# ---------------------------------------------------------------------------
# Validity of a parsed result.


_NUM = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _svmlight_reference(raw: bytes):
  """An independent strict parse of an SVMlight file the loader accepted: [(label, {id: value})]."""
  rows = []
  for line in raw.split(b"\n"):
    toks = line.split(b"#")[0].split()
    if not toks:
      continue
    assert _NUM.fullmatch(toks[0]), f"accepted the label {toks[0]!r}"
    feats = {}
    for tok in toks[1:]:
      if tok.startswith(b"qid:"):
        assert re.fullmatch(rb"[+-]?[0-9]+", tok[4:]), f"accepted {tok!r}"
        continue
      k, v = tok.split(b":")
      assert re.fullmatch(rb"[+-]?[0-9]+", k) and _NUM.fullmatch(v), f"accepted {tok!r}"
      assert int(k) not in feats, f"accepted feature id {int(k)} twice on a line"
      feats[int(k)] = float(np.float32(float(v)))
    rows.append((float(np.float32(float(toks[0]))), feats))
  return rows


def _check_rows(rows: data.SVMLightRows, raw: bytes, max_label=4):
  n = len(rows.labels)
  assert n >= 1 and rows.qid.shape == rows.group.shape == rows.line.shape == (n,)
  assert rows.indptr[0] == 0 and np.all(np.diff(rows.indptr) >= 0) and rows.indptr[-1] == len(rows.indices)
  assert rows.values.shape == rows.indices.shape
  assert np.isfinite(rows.labels).all() and np.all((rows.labels >= 0) & (rows.labels <= max_label))
  assert np.isfinite(rows.values).all()
  assert np.all((rows.indices >= 0) & (rows.indices < rows.num_features))
  assert rows.num_features <= _io.MAX_INFERRED_EXTENT
  for r in range(n):
    ids = rows.indices[rows.indptr[r] : rows.indptr[r + 1]]
    assert len(np.unique(ids)) == len(ids), f"duplicate feature id in row {r}"
  assert set(np.unique(rows.group).tolist()) == set(range(int(rows.group.max()) + 1))
  ds = data.rows_to_dataset(rows)
  assert np.isfinite(ds.features).all() and ds.where.sum() == n
  # The numbers are the file's (no silent misreading by the vectorised fast path).
  want = _svmlight_reference(raw)
  assert len(want) == n
  for r, (label, feats) in enumerate(want):
    got = dict(
      zip(
        (rows.indices[rows.indptr[r] : rows.indptr[r + 1]] + 1).tolist(),
        rows.values[rows.indptr[r] : rows.indptr[r + 1]].tolist(),
      )
    )
    assert rows.labels[r] == label and got == feats, f"row {r}: {rows.labels[r]}, {got} != {label}, {feats}"


def _check_dataset(ds: data.RankingDataset, raw=None, max_label=None):
  q, size = ds.labels.shape
  assert ds.where.shape == (q, size) and ds.features.shape[:2] == (q, size) and ds.qid.shape == (q,)
  assert np.isfinite(ds.features).all() and np.isfinite(ds.labels).all() and np.all(ds.labels >= 0)
  if max_label is not None:
    assert np.all(ds.labels <= max_label)
  if ds.doc_ids is not None:
    assert np.array_equal(ds.where, ds.doc_ids >= 0)


def _check_log(log: data.ClickLog, raw=None):
  r = len(log.items)
  assert r >= 1
  for a in (log.positions, log.clicks, log.weights, log.query_ids, log.doc_ids):
    assert len(a) == r
  assert np.all((log.items >= 0) & (log.items < log.num_items))
  assert np.all((log.positions >= 0) & (log.positions < log.num_positions))
  assert log.num_positions <= _io.extent_limit(r)
  assert np.isfinite(log.clicks).all() and np.all((log.clicks >= 0) & (log.clicks <= 1))
  assert np.isfinite(log.weights).all() and np.all(log.weights > 0)
  if log.sessions is not None:
    assert len(log.sessions) == r and np.all(log.sessions >= 0)
  if log.lines is not None:
    assert len(log.lines) == r and np.all(log.lines >= 1)


# ---------------------------------------------------------------------------
# One test per loader.

SVM = b"2 qid:7 1:0.5 3:2 # doc a\n0 qid:7 2:1\n1 qid:9 3:4 4:-1.5e2\n3 qid:9 1:.25 2:7\n"


@pytest.mark.parametrize("layout", ["qid", "query file"])
def test_fuzz_svmlight(tmp_path, layout):
  path = tmp_path / "f.txt"
  valid = SVM
  if layout == "query file":
    valid = SVM.replace(b"qid:7 ", b"").replace(b"qid:9 ", b"")
    (tmp_path / "f.txt.query").write_bytes(b"2\n2\n")
  _fuzz(0 if layout == "qid" else 1, valid, path, lambda: data.read_svmlight(path, cache=False), _check_rows)


def test_fuzz_svmlight_query_file(tmp_path):
  path = tmp_path / "f.txt"
  path.write_bytes(SVM.replace(b"qid:7 ", b"").replace(b"qid:9 ", b""))
  qpath = tmp_path / "f.txt.query"
  data_bytes = path.read_bytes()
  _fuzz(
    2,
    b"2\n2\n",
    qpath,
    lambda: data.read_svmlight(path, cache=False),
    lambda rows, raw: _check_rows(rows, data_bytes),
    [str(qpath)],
  )


ULTRA_FILES = {
  "settings.json": json.dumps({"feature_size": 4, "rank_cutoff": 3, "max_label": 4}).encode(),
  "train/train.feature": b"d0 0:1\nd1 1:1\nd2 2:1\nd3 3:1 0:0.5\n",
  "train/train.init_list": b"5 d3 d0\n6 d1 d2 d0\n",
  "train/train.labels": b"5 2 1\n6 0 4 1\n",
}


@pytest.mark.parametrize("target", list(ULTRA_FILES))
def test_fuzz_ultra(tmp_path, target):
  (tmp_path / "train").mkdir()
  for name, raw in ULTRA_FILES.items():
    (tmp_path / name).write_bytes(raw)
  names = [str(tmp_path / n) for n in ULTRA_FILES]
  _fuzz(
    3 + list(ULTRA_FILES).index(target),
    ULTRA_FILES[target],
    tmp_path / target,
    lambda: data.load_ultra(tmp_path, with_features=True, repeated_docs="allow"),
    lambda ds, raw: _check_dataset(ds, max_label=4),
    names,
  )


def _baidu_doc(pos, url, click):
  return "\t".join([str(pos), url, "5\x016", "8\x019", "0", str(click)] + ["0"] * 27)


BAIDU = (
  "\n".join(
    ["1\t11\x0112\t", _baidu_doc(1, "a1", 0), _baidu_doc(2, "b2", 1), "2\t13\t", _baidu_doc(1, "b2", 1)]
    + [_baidu_doc(2, "c3", 0)]
  )
  + "\n"
).encode()
YANDEX = {
  "relpred": b"1\t0\tQ\t7\t213\tu1\tu2\tu3\n1\t5\tC\tu2\n1\t9\tQ\t8\t213\tu2\tu4\n2\t0\tQ\t7\t1\tu3\tu1\n2\t3\tC\tu1\n",
  "personalized": b"1\tM\t3\t42\n1\t0\tQ\t0\t7\t1,2\tu1,d1\tu2,d2\n1\t5\tC\t0\tu2\n1\t9\tT\t1\t8\t3\tu4,d4\tu1,d1\n",
}


@pytest.mark.parametrize("compressed", [False, True])
def test_fuzz_baidu_sessions(tmp_path, compressed):
  path = tmp_path / "part-00000.gz"
  valid = gzip.compress(BAIDU, mtime=0) if compressed else BAIDU
  _fuzz(10 + compressed, valid, path, lambda: data.read_baidu_sessions(path), _check_log)


@pytest.mark.parametrize("layout", list(YANDEX))
def test_fuzz_yandex(tmp_path, layout):
  path = tmp_path / "log.txt"
  _fuzz(
    12 + (layout == "personalized"),
    YANDEX[layout],
    path,
    lambda: data.read_yandex_sessions(path, layout=layout),
    _check_log,
  )


def test_fuzz_click_log(tmp_path):
  path = tmp_path / "log.tsv"
  valid = b"session_id\tquery_id\tdoc_id\tposition\tclick\ns1\tq\ta\t1\t0\ns1\tq\tb\t2\t1\ns2\tq\tb\t1\t1\n"

  def load():
    log = data.read_click_log(path)
    return log, data.click_log_sessions(log)

  def check(out, raw):
    log, pages = out
    _check_log(log)
    assert pages["where"].sum() == len(log.items) and np.isfinite(pages["clicks"]).all()

  _fuzz(14, valid, path, load, check)


def test_fuzz_click_log_aggregated(tmp_path):
  path = tmp_path / "log.csv"
  valid = b"query_id,doc_id,position,click,impressions\nq,a,1,3,10\nq,b,2,0,4\nr,a,1,2.5,5\n"
  _fuzz(15, valid, path, lambda: data.read_click_log(path), _check_log)


def test_fuzz_baidu_parquet(tmp_path):
  pa = pytest.importorskip("pyarrow")
  pq = pytest.importorskip("pyarrow.parquet")
  path = tmp_path / "part-0.parquet"
  table = pa.table(
    {
      "query_id": [7, 7, 7, 9, 9],
      "position": [1, 2, 4, 2, 1],
      "click": [0, 1, 0, 1, 0],
      "label": [1.0, 0.0, 2.0, 3.0, 0.0],
      "bm25": [3.0, 2.0, 1.0, 5.0, 4.0],
    }
  )
  pq.write_table(table, path, compression="NONE")
  valid = path.read_bytes()
  _fuzz(16, valid, path, lambda: data.load_baidu_ultr(path, features=["bm25"]), _check_dataset)


# ---------------------------------------------------------------------------
# Parquet shards (issue 37): random edits of a valid shard give an error naming it, or the right data.


def _shard_fuzz(tmp_path, seed, write, read):
  paths = write(tmp_path / "shards")
  want = read()
  path = pathlib.Path(paths[-1])

  def check(got, raw):
    assert len(got) == len(want)
    for a, b in zip(got, want):
      assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)

  valid = path.read_bytes()
  _fuzz(seed, valid, path, read, check)
  # Single flipped bytes (the size unchanged): anywhere in the pages, their headers or the footer.
  rng = np.random.default_rng(seed)
  for offset in rng.choice(len(valid), min(len(valid), 150), replace=False):
    raw = bytearray(valid)
    raw[int(offset)] ^= int(rng.integers(1, 256))
    path.write_bytes(bytes(raw))
    try:
      got = read()
    except ValueError as e:
      assert str(path) in str(e), f"error without the file name for a flip at {offset}: {e}"
      continue
    except Exception as e:  # noqa: BLE001 - any other exception is the failure this test looks for
      pytest.fail(f"{type(e).__name__} (not ValueError) for a flip at {offset}: {e}")
    check(got, raw)


def test_fuzz_session_shards(tmp_path):
  text = "session_id\tquery_id\tdoc_id\tposition\tclick\n" + "".join(
    f"s{s}\tq{s % 3}\td{(s * 7 + p) % 5}\t{p}\t{(s + p) % 2}\n" for s in range(12) for p in range(1, 4)
  )
  (tmp_path / "log.tsv").write_text(text)

  def read():
    kw = dict(batch_size=5, process_index=0, process_count=1, num_threads=0, prefetch=0)
    return list(data.SessionStream(tmp_path / "shards", **kw))

  _shard_fuzz(tmp_path, 17, lambda d: data.convert_click_log(tmp_path / "log.tsv", d, row_group_size=4), read)


def test_fuzz_feature_shards(tmp_path):
  ds = data.make_synthetic(num_train=12, num_valid=1, num_test=1, list_size=3, num_features=2, seed=0).train

  def read():
    kw = dict(batch_size=5, process_index=0, process_count=1, num_threads=0, prefetch=0)
    return list(data.FeatureStream(tmp_path / "shards", **kw))

  _shard_fuzz(tmp_path, 18, lambda d: data.write_feature_shards(ds, d, row_group_size=4), read)


def test_fuzz_shard_manifest(tmp_path):
  ds = data.make_synthetic(num_train=6, num_valid=1, num_test=1, list_size=3, num_features=2, seed=0).train
  data.write_feature_shards(ds, tmp_path / "shards", shard_size=3)
  kw = dict(batch_size=4, process_index=0, process_count=1, num_threads=0, prefetch=0)
  want = list(data.FeatureStream(tmp_path / "shards", **kw))
  path = tmp_path / "shards" / "_manifest.json"

  def check(got, raw):  # an edit the manifest's own digest does not see (white space, key order) changes nothing
    assert len(got) == len(want) and all(np.array_equal(a[k], b[k]) for a, b in zip(got, want) for k in a)

  _fuzz(19, path.read_bytes(), path, lambda: list(data.FeatureStream(tmp_path / "shards", **kw)), check)
