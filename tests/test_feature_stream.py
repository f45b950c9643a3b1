"""Tests for feature datasets as streams (ultr_jax.data.feature_stream): shards, the stream, fit on it."""

import gzip
import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="feature shards are Parquet files (the test extras)")
import pyarrow.parquet as pq  # noqa: E402

from ultr_jax import data, simulation  # noqa: E402
from ultr_jax.train import default_train_config, fit, get_method  # noqa: E402
from conftest import assert_batches_equal
from conftest import assert_same_fit as _assert_same
from conftest import fit_leaves as _leaves

EMB = 3


def stream(source, **kw):
  kw.setdefault("process_index", 0)
  kw.setdefault("process_count", 1)
  return data.FeatureStream(source, **kw)


def _qids(batches):
  return np.concatenate([b["qid"][b["where"].any(-1) | (b["qid"] >= 0)] for b in batches])


def synthetic(num=37, list_size=6, num_features=5, seed=0, gaps=True):
  """A RankingDataset with clicks, a per-query extra, doc_ids and unique qids; with ``gaps``, short lists, an
  empty one and masked items inside lists (so positions matter), else every list full (the reader's fast path)."""
  ds = data.make_synthetic(
    num_train=num, num_valid=1, num_test=1, list_size=list_size, num_features=num_features, seed=seed
  ).train
  rng = np.random.default_rng(seed)
  where = ds.where.copy() if gaps else np.ones_like(ds.where)
  if gaps:
    where[rng.random(where.shape) < 0.15] = False
    where[3] = False  # a list without documents
  features = np.where(where[..., None], ds.features, 0).astype(np.float32)
  labels = np.where(where, ds.labels, 0).astype(np.float32)
  return data.RankingDataset(
    features=features,
    labels=labels,
    where=where,
    qid=np.arange(num, dtype=np.int64) * 7 + 3,
    doc_ids=np.where(where, np.arange(where.size).reshape(where.shape), -1).astype(np.int32),
    extras={
      "clicks": np.where(where, rng.integers(0, 2, where.shape), 0).astype(np.float32),
      "bucket": rng.integers(0, 3, num).astype(np.int32),
    },
  )


# ----------------------------------------------------------------------------
# Stream == in memory.


@pytest.mark.parametrize("gaps", [True, False])
@pytest.mark.parametrize("batch_size", [1, 8, 100])
def test_written_shards_stream_the_in_memory_batches(tmp_path, batch_size, gaps):
  ds = synthetic(gaps=gaps)
  paths = data.write_feature_shards(ds, tmp_path, shard_size=15, row_group_size=4)
  assert len(paths) == 3
  s = stream(tmp_path, batch_size=batch_size)
  assert (s.list_size, s.num_features, s.num_lists) == (6, 5, 37)
  want = list(data.batches(ds, batch_size, shuffle=False))
  assert_batches_equal(list(s), want)
  assert s.num_batches == len(want)


def test_list_size_keeps_the_first_items(tmp_path):
  ds = synthetic()
  data.write_feature_shards(ds, tmp_path, row_group_size=5)
  assert_batches_equal(
    list(stream(tmp_path, batch_size=8, list_size=4)), list(data.batches(ds.first_items(4), 8, shuffle=False))
  )
  wider = data.take_queries(ds, np.arange(ds.num_queries))  # a copy, padded to 9 items below
  pad = lambda a, v: np.concatenate([a, np.full(a.shape[:1] + (3,) + a.shape[2:], v, a.dtype)], 1)  # noqa: E731
  wider = data.RankingDataset(
    features=pad(ds.features, 0),
    labels=pad(ds.labels, 0),
    where=pad(ds.where, False),
    qid=ds.qid,
    doc_ids=pad(ds.doc_ids, -1),
    extras={"clicks": pad(ds.extras["clicks"], 0), "bucket": ds.extras["bucket"]},
  )
  assert_batches_equal(list(stream(tmp_path, batch_size=8, list_size=9)), list(data.batches(wider, 8, shuffle=False)))


def test_batches_have_fixed_shapes_and_compile_once(tmp_path, assert_compiles_once):
  data.write_feature_shards(synthetic(), tmp_path, row_group_size=6)
  batches = list(stream(tmp_path, batch_size=8, shuffle=True))
  assert len({tuple((k, v.shape, v.dtype.name) for k, v in sorted(b.items())) for b in batches}) == 1

  def gain(b):
    return (b["features"].sum(-1) * b["labels"] * b["where"]).sum()

  outs = assert_compiles_once(gain, lambda i: ((batches[i],), {}), calls=len(batches))
  ds = synthetic()
  np.testing.assert_allclose(sum(float(o) for o in outs), gain(ds.as_batch()), rtol=1e-5)


# ----------------------------------------------------------------------------
# SVMlight, block by block.


def write_letor(path, seed=0, num_queries=25, query_file=False, comments=True):
  ds = data.make_synthetic(num_train=num_queries, num_valid=1, num_test=1, list_size=9, num_features=7, seed=seed)
  ds = ds.train
  rng = np.random.default_rng(seed)
  where = ds.where & (rng.random(ds.where.shape) < 0.8)
  where[:, 0] = True
  sparse = np.where(rng.random(ds.features.shape) < 0.5, ds.features, 0).astype(np.float32)
  ds = ds.replace(where=where, features=sparse, qid=rng.permutation(1000)[: ds.num_queries])
  data.write_svmlight(ds, path, query_file=query_file, doc_comments=comments)
  return path


@pytest.mark.parametrize("query_file", [False, True])
@pytest.mark.parametrize("block_size", [64, 1 << 20])
def test_svmlight_shards_stream_load_svmlight(tmp_path, query_file, block_size):
  src = write_letor(tmp_path / "train.txt", query_file=query_file)
  text = src.read_text().splitlines(keepends=True)
  text.insert(5, "\n# a comment line\n")
  src.write_text("".join(text))
  data.convert_svmlight(src, tmp_path / "o", shard_size=7, row_group_size=3, block_size=block_size)
  want = data.load_svmlight(src, cache=False)
  s = stream(tmp_path / "o", batch_size=4)
  assert (s.list_size, s.num_features) == (want.list_size, want.num_features)
  assert_batches_equal(list(s), list(data.batches(want, 4, shuffle=False)))
  short = data.load_svmlight(src, cache=False, list_size=3)
  assert_batches_equal(
    list(stream(tmp_path / "o", batch_size=4, list_size=3)), list(data.batches(short, 4, shuffle=False))
  )


def test_svmlight_gzip_query_path_and_num_features(tmp_path):
  src = write_letor(tmp_path / "t.txt", seed=3, query_file=True)
  gz = tmp_path / "data.gz"
  gz.write_bytes(gzip.compress(src.read_bytes()))
  kw = dict(query_path=str(src) + ".query", num_features=11, max_label=None)
  data.convert_svmlight(gz, tmp_path / "o", block_size=100, **kw)
  want = data.load_svmlight(gz, cache=False, **kw)
  assert want.num_features == 11
  assert_batches_equal(list(stream(tmp_path / "o", batch_size=16)), list(data.batches(want, 16, shuffle=False)))


def test_svmlight_shared_letor_sample(tmp_path, shared_data):
  src = shared_data / "letor-sample" / "rank.train"
  data.convert_svmlight(src, tmp_path / "o", row_group_size=16, block_size=1 << 18)
  want = data.load_svmlight(src, cache=False)
  assert_batches_equal(list(stream(tmp_path / "o", batch_size=32)), list(data.batches(want, 32, shuffle=False)))


BAD_LETOR = [
  "2 qid:1 1:0.5\n0 qid:1 2:x\n",  # a non-numeric value
  "2 qid:1 1:0.5\n0 2:1\n",  # a line without qid after lines with
  "2 qid:1 1:0.5\n7 qid:1 2:1\n",  # a label above max_label
  "2 qid:1 1:0.5\n1 qid:1 0:1\n",  # feature id 0
  "2 qid:1 1:0.5 1:2\n",  # an id twice on a line
  "2 qid:1 1:nan\n",  # non-finite
  "1 qid:1 1:1e39\n",  # beyond float32
  "2 qid:1 1:0.5 999999:1\n",  # an absurdly large id
  "# only a comment\n\n",  # no data lines
  "2 qid:1 1:0.5\n2 qid:1 1:0.5\n" * 40 + "0 2:1\n",  # the qid change in a later block
]


@pytest.mark.parametrize("text", BAD_LETOR)
def test_svmlight_errors_are_load_svmlight_s(tmp_path, text):
  src = tmp_path / "bad.txt"
  src.write_text(text)
  with pytest.raises(ValueError) as want:
    data.load_svmlight(src, cache=False)
  with pytest.raises(ValueError) as got:
    data.convert_svmlight(src, tmp_path / "o", block_size=16)
  assert str(got.value) == str(want.value)
  assert not list((tmp_path / "o").glob("*"))  # nothing half-written is left


@pytest.mark.parametrize(
  "text, query, match",
  [
    ("1 1:1\n0 2:1\n", None, r"bad\.txt:1: field 'qid': lines carry no qid: field and the \.query file"),
    ("1 1:1\n0 2:1\n", "1\n", r"bad\.txt\.query:2: field 'query count': \.query file too short"),
    ("1 1:1\n0 2:1\n", "1\nx\n", r"bad\.txt\.query:2: field 'query count': non-integer count 'x'"),
  ],
)
def test_svmlight_query_file_errors(tmp_path, text, query, match):
  src = tmp_path / "bad.txt"
  src.write_text(text)
  if query is not None:
    (tmp_path / "bad.txt.query").write_text(query)
  with pytest.raises(ValueError, match=match):
    data.load_svmlight(src, cache=False)
  with pytest.raises(ValueError, match=match):
    data.convert_svmlight(src, tmp_path / "o")


def test_svmlight_rows_of_a_qid_must_be_contiguous(tmp_path):
  src = tmp_path / "a.txt"
  src.write_text("1 qid:5 1:1\n0 qid:6 1:2\n# c\n2 qid:7 1:3\n1 qid:6 2:1\n1 qid:5 2:1\n")
  with pytest.raises(
    ValueError, match=r"a\.txt:5: field 'qid': qid 6 comes back after other queries \(its rows began on line 2\)"
  ):
    data.convert_svmlight(src, tmp_path / "o", block_size=8)
  assert not list((tmp_path / "o").glob("*"))


def test_svmlight_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"nothere\.txt: no such file"):
    data.convert_svmlight(tmp_path / "nothere.txt", tmp_path / "o")


# ----------------------------------------------------------------------------
# Baidu-ULTR Parquet (one row per result page), read directly.


def baidu_pages(seed=0, num_pages=23, max_len=8):
  rng = np.random.default_rng(seed)
  pages = []
  for p in range(num_pages):
    n = int(rng.integers(0 if p == 5 else 1, max_len + 1)) if p != 5 else 0  # page 5: no documents
    positions = rng.permutation(np.sort(rng.choice(np.arange(1, max_len + 1), n, replace=False)))
    pages.append(
      {
        "query_id": int(rng.integers(0, 1000)),
        "position": positions.tolist(),
        "click": rng.integers(0, 2, n).tolist(),
        "label": rng.integers(0, 5, n).astype(float).tolist(),
        "bm25": rng.normal(size=n).round(3).tolist(),
        "query_document_embedding": rng.normal(size=(n, EMB)).astype(np.float16).tolist(),
        "frequency_bucket": int(rng.integers(0, 10)),
        "media_type": rng.integers(0, 5, n).tolist(),
      }
    )
  return pages


def baidu_table(pages):
  cols = {k: [p[k] for p in pages] for k in pages[0] if k != "query_document_embedding"}
  emb = pa.array([p["query_document_embedding"] for p in pages], pa.list_(pa.list_(pa.float16())))
  return pa.table({**cols, "query_document_embedding": emb})


@pytest.mark.parametrize("statistics", [True, False])
def test_baidu_page_parquet_streams_load_baidu_ultr(tmp_path, statistics):
  """Two files, several row groups: doc_ids count the documents of the files before (from the row groups'
  statistics, or without them by reading the column)."""
  paths = []
  for i, seed in enumerate((1, 2)):
    paths.append(tmp_path / f"part-{i}.parquet")
    pq.write_table(baidu_table(baidu_pages(seed)), paths[-1], row_group_size=5, write_statistics=statistics)
  features = ["bm25", "query_document_embedding"]
  want = data.load_baidu_ultr(paths, features=features, extra_columns=["media_type"])
  s = stream(tmp_path, batch_size=6, features=features, extra_columns=["media_type"])
  assert (s.list_size, s.num_features) == (want.list_size, 1 + EMB)
  assert_batches_equal(list(s), list(data.batches(want, 6, shuffle=False)))
  short = data.load_baidu_ultr(paths, features=features, extra_columns=["media_type"], list_size=3)
  got = list(stream(tmp_path, batch_size=6, features=features, extra_columns=["media_type"], list_size=3))
  assert_batches_equal(got, list(data.batches(short, 6, shuffle=False)))


BAD_PAGES = [
  ("click", [0, 2], "row 1, document 1, field 'click': 2 is not an integer in [0, 1]"),
  ("position", [0, 1], "row 1, document 0, field 'position': 0 is not an integer >= 1"),
  ("position", [2, 2], "row 1, document 1, field 'position': its list already shows a document at 2"),
  ("label", [1.0, -1.0], "row 1, document 1, field 'label': -1.0 is not a finite relevance >= 0"),
  ("bm25", [1.0, float("inf")], "row 1, document 1, field 'bm25': value inf is not finite"),
  ("bm25", [1.0], "row 1, field 'bm25': 1 values, where 'label' has 2"),
  ("bm25", [1.0, None], "row 1, document 1, field 'bm25': missing value"),
  ("label", None, "row 1, field 'label': missing value"),
]


@pytest.mark.parametrize("field, value, message", BAD_PAGES)
def test_bad_page_names_file_row_document_and_field(tmp_path, field, value, message):
  good = {"query_id": 1, "position": [1, 2], "click": [0, 1], "label": [1.0, 0.0], "bm25": [0.5, 0.25]}
  pages = [good, {**good, field: value}, good]
  path = tmp_path / "p.parquet"
  schema = pa.schema(
    [
      ("query_id", pa.int64()),
      ("position", pa.list_(pa.int64())),
      ("click", pa.list_(pa.int64())),
      ("label", pa.list_(pa.float64())),
      ("bm25", pa.list_(pa.float64())),
    ]
  )
  pq.write_table(pa.Table.from_pylist([good, good] + pages, schema=schema), path, row_group_size=2)
  with pytest.raises(ValueError) as e:
    list(stream(path, batch_size=2, features=["bm25"]))
  assert str(e.value) == f"{path}, {message.replace('row 1', 'row 3')}", str(e.value)


def test_missing_truncated_and_foreign_files(tmp_path):
  data.write_feature_shards(synthetic(), tmp_path / "o", shard_size=20)
  paths = sorted((tmp_path / "o").glob("*.parquet"))
  with pytest.raises(FileNotFoundError, match=r"part-00009\.parquet: no such Parquet file"):
    stream([*paths, tmp_path / "o" / "part-00009.parquet"], batch_size=2)
  cut = tmp_path / "o" / "part-00002.parquet"
  cut.write_bytes(paths[1].read_bytes()[:-30])  # a shard cut short: its footer is gone
  with pytest.raises(ValueError, match=r"part-00002\.parquet: not listed in .*_manifest\.json"):
    stream(tmp_path / "o", batch_size=2)
  with pytest.raises(ValueError, match=r"part-00002\.parquet: not listed in .*_manifest\.json"):
    stream(cut, batch_size=2)
  cut.unlink()
  pq.write_table(pa.table({"query_id": [1]}), tmp_path / "x.parquet")
  with pytest.raises(ValueError, match=r"x\.parquet: not a feature shard of ultr_jax"):
    stream(tmp_path / "x.parquet", batch_size=2)
  with pytest.raises(ValueError, match=r"x\.parquet: field 'bm25': no such column"):
    stream(tmp_path / "x.parquet", batch_size=2, features="bm25")
  other = tmp_path / "p" / "part-1.parquet"
  other.parent.mkdir()
  pq.write_table(pq.read_table(paths[0]).drop_columns(["bucket"]), other)
  with pytest.raises(ValueError, match=r"part-00000\.parquet and .*part-1\.parquet: shards of two conversions"):
    stream([paths[0], other], batch_size=2)
  pq.write_table(pa.table({"query_id": [1], "bm25": [[1.0]]}), tmp_path / "w.parquet")  # two foreign files
  with pytest.raises(ValueError, match=r"x\.parquet: field 'bm25': no such column \(the first file"):
    stream([tmp_path / "w.parquet", tmp_path / "x.parquet"], batch_size=2, features="bm25")


def test_a_row_group_cut_short_names_the_file(tmp_path):
  """A shard whose data pages are damaged (its footer intact): the error names the file and row group."""
  data.write_feature_shards(synthetic(), tmp_path / "o", row_group_size=10)
  (path,) = sorted((tmp_path / "o").glob("*.parquet"))
  raw = bytearray(path.read_bytes())
  md = pq.ParquetFile(path).metadata.row_group(1).column(1)
  start = md.data_page_offset
  raw[start : start + md.total_compressed_size] = b"\xff" * md.total_compressed_size
  path.write_bytes(bytes(raw))
  s = stream(path, batch_size=10, prefetch=0, num_threads=0)
  next(s)
  with pytest.raises(ValueError, match=r"part-00000\.parquet, row group 1 \(rows from 10\): cannot read it"):
    next(s)


# ----------------------------------------------------------------------------
# Order: seeds, resume, processes, passes.


@pytest.mark.parametrize("gaps", [True, False])
def test_shuffle_is_seeded_and_keeps_each_list_whole(tmp_path, gaps):
  ds = synthetic(num=50, gaps=gaps)
  data.write_feature_shards(ds, tmp_path, shard_size=20, row_group_size=6)
  a = list(stream(tmp_path, batch_size=7, shuffle=True, seed=1))
  b = list(stream(tmp_path, batch_size=7, shuffle=True, seed=1))
  c = list(stream(tmp_path, batch_size=7, shuffle=True, seed=2))
  assert_batches_equal(a, b)
  qa, qc = _qids(a), _qids(c)
  assert not np.array_equal(qa, qc) and not np.array_equal(qa, ds.qid)
  np.testing.assert_array_equal(np.sort(qa), ds.qid)
  row = {int(q): i for i, q in enumerate(ds.qid)}
  for batch in a:
    for j, q in enumerate(batch["qid"]):
      if q >= 0:
        want = ds.as_batch([row[int(q)]])
        for k in want:
          np.testing.assert_array_equal(batch[k][j], want[k][0], err_msg=k)


@pytest.mark.parametrize("k", [0, 4, 9])
def test_resume_equals_the_uninterrupted_sequence(tmp_path, k):
  data.write_feature_shards(synthetic(num=40), tmp_path, shard_size=15, row_group_size=4)
  kw = dict(batch_size=9, shuffle=True, seed=5, num_epochs=2)
  whole = list(stream(tmp_path, **kw))
  assert len(whole) == 9  # 80 lists over two epochs: k = 4 and 9 resume inside the second epoch
  first = stream(tmp_path, **kw)
  head = [next(first) for _ in range(k)]
  state = json.loads(json.dumps(first.get_state()))
  resumed = stream(tmp_path, **kw)
  resumed.set_state(state)
  assert_batches_equal(head + list(resumed), whole)
  assert_batches_equal(list(resumed), whole)  # a new pass reads it all again
  with pytest.raises(ValueError, match="other arguments.*seed"):
    stream(tmp_path, **dict(kw, seed=6)).set_state(state)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_processes_read_disjoint_parts_that_cover_the_files(tmp_path, count, shuffle):
  ds = synthetic(num=45)
  data.write_feature_shards(ds, tmp_path, shard_size=20, row_group_size=4)
  row = {int(q): i for i, q in enumerate(ds.qid)}
  parts = []
  for p in range(count):
    s = data.FeatureStream(tmp_path, batch_size=4, shuffle=shuffle, seed=3, process_index=p, process_count=count)
    batches = list(s)
    assert len(batches) == s.num_batches
    assert {b["features"].shape for b in batches} == {(4, 6, 5)}
    parts.append(_qids(batches))
    for b in batches:
      for j, q in enumerate(b["qid"]):
        if q >= 0:
          np.testing.assert_array_equal(b["features"][j], ds.features[row[int(q)]])
  every = np.concatenate(parts)
  assert len(every) == len(set(every.tolist())) == ds.num_queries  # disjoint and complete
  assert all(len(p) for p in parts)


# ----------------------------------------------------------------------------
# fit on the stream == fit on the lists in memory.

B = 8


def _config(**kw):
  c = default_train_config()
  c.steps, c.batch_size, c.eval_every, c.progress, c.learning_rate, c.num_devices = 30, B, 10, False, 0.05, 1
  for k, v in kw.items():
    c[k] = v
  return c


def _method():
  return get_method("dla", {"ranker": "mlp", "hidden_sizes": [8]}, num_features=5, list_size=6)


@pytest.mark.parametrize("clicks", ["logged", "simulated"])
def test_fit_on_the_stream_equals_fit_on_the_lists_in_memory(tmp_path, clicks):
  """Logged clicks from the shards, or PBM clicks simulated inside the step on the streamed batches."""
  ds = synthetic(num=44)
  valid = data.make_synthetic(num_train=6, num_valid=1, num_test=1, list_size=6, num_features=5, seed=9).train
  data.write_feature_shards(ds, tmp_path, shard_size=20, row_group_size=5)
  click_fn = None if clicks == "logged" else simulation.make_click_fn({"name": "pbm"})
  # With num_epochs=None the epochs follow each other without padding between them: in memory, the lists repeated.
  repeated = data.concatenate([ds] * 6)
  memory = fit(_method(), data.batches(repeated, B, shuffle=False), valid, click_fn=click_fn, config=_config())
  streamed = fit(_method(), stream(tmp_path, batch_size=B, num_epochs=None), valid, click_fn=click_fn, config=_config())
  _assert_same(memory, streamed)
  assert np.isfinite(memory.history[-1]["train/loss"]).all()


def test_resuming_fit_mid_stream_equals_the_uninterrupted_run(tmp_path):
  ds = synthetic(num=44)
  valid = data.make_synthetic(num_train=6, num_valid=1, num_test=1, list_size=6, num_features=5, seed=9).train
  data.write_feature_shards(ds, tmp_path / "shards", shard_size=20, row_group_size=5)

  def make():
    return stream(tmp_path / "shards", batch_size=B, shuffle=True, seed=2, num_epochs=None)

  full = fit(_method(), make(), valid, config=_config())
  fit(_method(), make(), valid, config=_config(steps=20), workdir=str(tmp_path / "w"))
  resumed = fit(_method(), make(), valid, config=_config(), workdir=str(tmp_path / "w"))
  assert [h["step"] for h in resumed.history] == [10, 20, 30]  # 10 and 20 restored from the checkpoint
  _assert_same(full, resumed)
  again = fit(_method(), make(), valid, config=_config(steps=20), workdir=str(tmp_path / "x"))
  assert not np.allclose(_leaves(again)[0], _leaves(full)[0])  # 20 steps are not 30: the comparison can fail
