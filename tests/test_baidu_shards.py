"""Tests for Baidu-ULTR's per-document files converted to feature shards (ultr_jax.data.baidu_shards)."""

import warnings

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="Baidu-ULTR files are Arrow/Parquet files (the test extras)")
import pyarrow.feather  # noqa: E402,F401
import pyarrow.ipc  # noqa: E402,F401
import pyarrow.parquet as pq  # noqa: E402

from ultr_jax import data  # noqa: E402
from conftest import assert_batches_equal

EMB = 5
FEATURES = ("query_document_embedding", "bm25", "tf")


def documents(seed=0, num_pages=30, max_len=7, annotations=False, first_qid=0):
  """One row per shown document: pages of 1..max_len documents with unique, contiguous query ids.

  Click pages show a random subset of positions 1..max_len + 2 (gaps, and positions beyond a short list_size)
  in a shuffled row order; annotation pages have labels and a per-query frequency bucket and no positions (the
  file order is the list order).
  """
  rng = np.random.default_rng(seed)
  sizes = rng.integers(1, max_len + 1, num_pages)
  n = int(sizes.sum())
  cols = {"query_id": np.repeat(first_qid + rng.permutation(10 * num_pages)[:num_pages], sizes).astype(np.int64)}
  if annotations:
    cols["label"] = rng.integers(0, 5, n).astype(np.float64)
    cols["frequency_bucket"] = np.repeat(rng.integers(0, 10, num_pages), sizes)
  else:
    cols["position"] = np.concatenate(
      [rng.permutation(rng.choice(np.arange(1, max_len + 3), k, replace=False)) for k in sizes]
    ).astype(np.int32)
    cols["click"] = rng.integers(0, 2, n).astype(np.int32)
  cols["bm25"] = rng.normal(size=n)
  cols["tf"] = rng.integers(0, 50, n)
  cols["media_type"] = rng.integers(0, 5, n)
  emb = rng.normal(size=(n, EMB)).astype(np.float16)
  cols["query_document_embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), EMB)
  return pa.table(cols)


def write(path, table, chunk=None):
  """``table`` as ``path`` (by its suffix): Feather V2 / Parquet with record batches / row groups of ``chunk``
  rows, or, as ``.arrow``, an Arrow IPC stream."""
  if path.suffix == ".parquet":
    pq.write_table(table, path, row_group_size=chunk)
  elif path.suffix == ".arrow":
    with pa.ipc.new_stream(path, table.schema) as w:
      w.write_table(table, max_chunksize=chunk)
  else:
    pa.feather.write_feather(table, path, chunksize=chunk)
  return path


def stream(source, batch_size, **kw):
  return data.FeatureStream(source, batch_size=batch_size, process_index=0, process_count=1, **kw)


def assert_converts_to_load_baidu_ultr(tmp_path, paths, batch_size=8, **kw):
  out = tmp_path / "shards"
  shards = data.convert_baidu_ultr(paths, out, **kw)
  options = ("features", "list_size", "extra_columns")
  want = data.load_baidu_ultr(paths, **{k: v for k, v in kw.items() if k in options})
  got = list(stream(out, batch_size))
  assert_batches_equal(got, list(data.batches(want, batch_size, shuffle=False)))
  return shards, want


# ----------------------------------------------------------------------------
# The shards stream the in-memory batches.


@pytest.mark.parametrize("suffix", [".feather", ".parquet", ".arrow"])
@pytest.mark.parametrize("batch_rows", [3, 1 << 13])
@pytest.mark.parametrize("list_size", [None, 4])
def test_shards_stream_the_batches_of_load_baidu_ultr(tmp_path, suffix, batch_rows, list_size):
  """Record batches (row groups) of 7 rows and conversion 3 rows at a time: pages span both."""
  table = documents()
  path = write(tmp_path / f"part-0{suffix}", table, chunk=7)
  kw = dict(features=FEATURES, extra_columns=("media_type",), list_size=list_size)
  shards, want = assert_converts_to_load_baidu_ultr(tmp_path, path, batch_rows=batch_rows, row_group_size=4, **kw)
  assert want.extras["clicks"].any() and not want.where.all()  # gaps
  if list_size is not None:  # documents beyond it are not written
    assert stream(shards, 8).list_size == list_size and want.where.sum() < table.num_rows
    written = pa.concat_tables([pq.read_table(p, columns=["position"]) for p in shards])["position"]
    assert len(written.combine_chunks().flatten()) == want.where.sum()


@pytest.mark.parametrize("suffix", [".feather", ".parquet"])
def test_annotations_keep_file_order_across_record_batches(tmp_path, suffix):
  """No position column: a page's items are its rows in file order, counted on across record batches."""
  table = documents(seed=1, annotations=True)
  path = write(tmp_path / f"a{suffix}", table, chunk=5)
  _, want = assert_converts_to_load_baidu_ultr(tmp_path, path, features=["bm25", "query_document_embedding"])
  assert "frequency_bucket" in want.extras and "clicks" not in want.extras and want.labels.any()


def test_a_page_spanning_two_record_batches_is_one_list(tmp_path):
  table = pa.table({"query_id": [4, 4, 4, 5], "position": [3, 1, 2, 1], "click": [0, 0, 1, 1], "bm25": [3.0, 1, 2, 4]})
  path = write(tmp_path / "p.feather", table, chunk=2)
  assert pa.ipc.open_file(path).num_record_batches == 2
  data.convert_baidu_ultr(path, tmp_path / "s", features=["bm25"])
  (b,) = stream(tmp_path / "s", 2)
  np.testing.assert_array_equal(b["qid"], [4, 5])
  np.testing.assert_array_equal(b["features"][..., 0], [[1, 2, 3], [4, 0, 0]])
  np.testing.assert_array_equal(b["doc_ids"], [[1, 2, 0], [3, -1, -1]])


def test_several_files_glob_and_directory(tmp_path):
  """Files in order; doc_ids count the rows of the files before, as load_baidu_ultr numbers them."""
  d = tmp_path / "in"
  d.mkdir()
  paths = [
    write(d / "a.feather", documents(seed=2, first_qid=0), chunk=6),
    write(d / "b.parquet", documents(seed=3, first_qid=1000), chunk=6),
    write(d / "c.feather", documents(seed=4, num_pages=5, first_qid=2000)),
  ]
  kw = dict(features=FEATURES, shard_size=9, row_group_size=4)
  shards, want = assert_converts_to_load_baidu_ultr(tmp_path, paths, **kw)
  assert len(shards) == 8  # 65 pages, 9 a file
  for source in (d, str(d / "*")):
    out = tmp_path / f"again-{len(str(source))}"
    data.convert_baidu_ultr(source, out, **kw)
    assert_batches_equal(list(stream(out, 8)), list(data.batches(want, 8, shuffle=False)))


def test_the_stream_shuffles_and_splits_the_converted_pages(tmp_path):
  path = write(tmp_path / "p.feather", documents(seed=5), chunk=7)
  data.convert_baidu_ultr(path, tmp_path / "s", features="bert", row_group_size=4)
  want = data.load_baidu_ultr(path)
  parts = [list(stream(tmp_path / "s", 4, shuffle=True, seed=3)) for _ in range(2)]
  qids = [np.concatenate([b["qid"] for b in p]) for p in parts]
  np.testing.assert_array_equal(qids[0], qids[1])
  assert sorted(qids[0][qids[0] >= 0]) == sorted(want.qid) and list(qids[0][: len(want.qid)]) != list(want.qid)
  row = {q: i for i, q in enumerate(want.qid)}
  for b in parts[0]:
    for q, f, w in zip(b["qid"], b["features"], b["where"]):
      if q >= 0:
        np.testing.assert_array_equal(f, want.features[row[q]])
        np.testing.assert_array_equal(w, want.where[row[q]])


# ----------------------------------------------------------------------------
# Pages must be contiguous, and lie in one file.


def test_a_page_that_comes_back_names_file_row_and_field(tmp_path):
  table = pa.table(
    {"query_id": [1, 1, 2, 3, 3, 1, 4], "position": [1, 2, 1, 1, 2, 1, 1], "click": [0] * 7, "bm25": [1.0] * 7}
  )
  path = write(tmp_path / "p.feather", table, chunk=2)
  with pytest.raises(ValueError) as e:
    data.convert_baidu_ultr(path, tmp_path / "s", features=["bm25"], batch_rows=2)
  assert str(e.value).startswith(f"{path}, row 5, field 'query_id': query_id 1 comes back after other pages (its page")
  assert not list((tmp_path / "s").glob("*")), "nothing is left"


def test_a_page_spanning_two_files_is_refused(tmp_path):
  a = write(tmp_path / "a.feather", pa.table({"query_id": [1, 2, 2], "click": [0, 1, 0], "bm25": [1.0, 2, 3]}))
  b = write(tmp_path / "b.feather", pa.table({"query_id": [2, 3], "click": [1, 0], "bm25": [4.0, 5]}))
  with pytest.raises(ValueError) as e:
    data.convert_baidu_ultr([a, b], tmp_path / "s", features=["bm25"])
  assert str(e.value).startswith(f"{b}, row 0, field 'query_id': query_id 2 continues the last page of {a}")
  assert data.load_baidu_ultr([a, b], features=["bm25"]).qid.tolist() == [1, 2, 2, 3]  # two lists of page 2
  assert not list((tmp_path / "s").glob("*"))


# ----------------------------------------------------------------------------
# Bad input: the in-memory reader's errors (file, row, field), at their row in the file.

BAD_DOCUMENTS = [
  ("position", 0, "field 'position': 0 is not an integer >= 1"),
  ("position", 3, "field 'position': its page already shows a document at position 3"),
  ("click", 2, "field 'click': 2 is not an integer in [0, 1]"),
  ("bm25", float("nan"), "field 'bm25': value nan is not finite"),
  ("bm25", 1e300, "field 'bm25': value 1e+300 overflows the dtype float32"),
  ("bm25", None, "field 'bm25': missing value"),
  ("query_id", None, "field 'query_id': missing value"),
  ("label", -1.0, "field 'label': -1.0 is negative"),
  ("label", float("inf"), "field 'label': value inf is not finite"),
  ("media_type", 1e300, "field 'media_type': 1e+300 is outside the float32 range"),
]


@pytest.mark.parametrize("suffix", [".feather", ".parquet"])
@pytest.mark.parametrize("field, value, message", BAD_DOCUMENTS)
def test_bad_values_name_file_row_and_field_as_in_memory(tmp_path, suffix, field, value, message):
  """Row 9 of 12, in the third record batch: the message is load_baidu_ultr's, word for word."""
  cols = {
    "query_id": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4],
    "position": [1, 2, 3] * 2 + [1, 2, 3, 4, 1, 2],
    "click": [0, 1] * 6,
    "label": [1.0] * 12,
    "bm25": [0.5] * 12,
    "media_type": [1.0] * 12,
  }
  cols[field] = cols[field][:9] + [value] + cols[field][10:]
  path = write(tmp_path / f"bad{suffix}", pa.table(cols), chunk=4)
  kw = dict(features=["bm25"], extra_columns=["media_type"])
  with pytest.raises(ValueError) as in_memory:
    data.load_baidu_ultr(path, **kw)
  with pytest.raises(ValueError) as converted:
    data.convert_baidu_ultr(path, tmp_path / "s", batch_rows=3, row_group_size=1, **kw)
  assert str(converted.value).startswith(f"{path}, row 9, {message}"), str(converted.value)
  assert str(converted.value) == str(in_memory.value)
  assert not list((tmp_path / "s").glob("*")), "nothing is left"


def test_columns_only_some_files_have_are_checked_and_dropped_as_in_memory(tmp_path):
  """Clicks where only one file has them: not batched, but checked (load_baidu_ultr does both)."""
  a = write(tmp_path / "a.feather", pa.table({"query_id": [1, 1], "label": [1.0, 2.0], "bm25": [0.5, 0.25]}))
  b = write(tmp_path / "b.feather", pa.table({"query_id": [2], "click": [1], "label": [0.0], "bm25": [1.0]}))
  _, want = assert_converts_to_load_baidu_ultr(tmp_path, [a, b], features=["bm25"])
  assert "clicks" not in want.extras
  bad = write(tmp_path / "c.feather", pa.table({"query_id": [2], "click": [3], "label": [0.0], "bm25": [1.0]}))
  with pytest.raises(ValueError) as in_memory:
    data.load_baidu_ultr([a, bad], features=["bm25"])
  with pytest.raises(ValueError) as converted:
    data.convert_baidu_ultr([a, bad], tmp_path / "t", features=["bm25"])
  assert str(converted.value) == str(in_memory.value) == f"{bad}, row 0, field 'click': 3 is not an integer in [0, 1]"


def test_a_non_finite_feature_beyond_list_size_is_not_kept(tmp_path):
  table = pa.table({"query_id": [1, 1, 2], "position": [1, 5, 1], "click": [0, 1, 0], "bm25": [1.0, np.inf, 2.0]})
  path = write(tmp_path / "p.feather", table)
  with pytest.raises(ValueError, match=r"p\.feather, row 1, field 'bm25': value inf is not finite"):
    data.convert_baidu_ultr(path, tmp_path / "s", features=["bm25"])
  assert_converts_to_load_baidu_ultr(tmp_path, path, features=["bm25"], list_size=3)


def test_wrong_embedding_width_names_file_row_and_field(tmp_path):
  emb = pa.array([[1.0, 2.0]] * 5 + [[1.0]] + [[3.0, 4.0]], pa.list_(pa.float16()))
  table = pa.table({"query_id": [1, 1, 2, 2, 3, 3, 3], "click": [0] * 7, "query_document_embedding": emb})
  path = write(tmp_path / "w.feather", table, chunk=2)
  with pytest.raises(ValueError) as e:
    data.convert_baidu_ultr(path, tmp_path / "s", batch_rows=2)
  assert str(e.value) == f"{path}, row 5, field 'query_document_embedding': a vector of 1 values, where row 0's has 2"
  # A second file of another width: named against the first.
  good = write(tmp_path / "a.feather", table.slice(0, 4))
  other = pa.table({"query_id": [9], "click": [0], "query_document_embedding": pa.array([[1.0, 2.0, 3.0]])})
  wide = write(tmp_path / "b.feather", other)
  with pytest.raises(ValueError) as e:
    data.convert_baidu_ultr([good, wide], tmp_path / "s")
  assert str(e.value) == (
    f"{wide}, row 0, field 'query_document_embedding': a vector of 3 values, where {good}, row 0's has 2"
  )
  fixed = lambda w: pa.table(  # noqa: E731
    {
      "query_id": [9],
      "click": [0],
      "query_document_embedding": pa.FixedSizeListArray.from_arrays(pa.array([1.0] * w, pa.float16()), w),
    }
  )
  two, three = write(tmp_path / "f2.feather", fixed(2)), write(tmp_path / "f3.parquet", fixed(3))
  with pytest.raises(ValueError) as e:  # known from the types: before anything is read
    data.convert_baidu_ultr([two, three], tmp_path / "s")
  assert str(e.value) == (
    f"{three}, field 'query_document_embedding': vectors of 3 values (its Arrow type), where {two}'s have 2"
  )


def test_missing_column_page_layout_and_unreadable_files(tmp_path):
  table = documents(seed=6)
  path = write(tmp_path / "p.feather", table.drop_columns(["tf"]))
  with pytest.raises(ValueError, match=r"p\.feather: no column 'tf' \(the file has"):
    data.convert_baidu_ultr(path, tmp_path / "s", features=FEATURES)
  pages = pa.table({"query_id": [1], "position": [[1, 2]], "click": [[0, 1]], "bm25": [[0.1, 0.2]]})
  with pytest.raises(ValueError, match=r"pages\.parquet, field 'position': lists, one row per result page"):
    data.convert_baidu_ultr(write(tmp_path / "pages.parquet", pages), tmp_path / "s", features=["bm25"])
  with pytest.raises(FileNotFoundError, match=r"absent\.feather: no such file"):
    data.convert_baidu_ultr(tmp_path / "absent.feather", tmp_path / "s")
  with pytest.raises(ValueError, match=r"x\.csv: unknown file type"):
    data.convert_baidu_ultr(write(tmp_path / "x.parquet", table).rename(tmp_path / "x.csv"), tmp_path / "s")
  with warnings.catch_warnings():  # pyarrow >= 25 warns when writing Feather V1
    warnings.simplefilter("ignore", DeprecationWarning)
    pa.feather.write_feather(table.drop_columns(["query_document_embedding"]), tmp_path / "v1.feather", version=1)
  with pytest.raises(ValueError, match=r"v1\.feather: a Feather V1 file, which cannot be read a record batch"):
    data.convert_baidu_ultr(tmp_path / "v1.feather", tmp_path / "s", features=["bm25"])
  assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("suffix", [".feather", ".parquet", ".arrow"])
def test_a_truncated_file_names_the_file_and_nothing_is_written(tmp_path, suffix):
  good = write(tmp_path / f"a{suffix}", documents(seed=7), chunk=16)
  raw = write(tmp_path / f"b{suffix}", documents(seed=8, first_qid=1000), chunk=16).read_bytes()
  cut = tmp_path / f"b{suffix}"
  cut.write_bytes(raw[: len(raw) // 2])
  with pytest.raises(ValueError) as e:
    data.convert_baidu_ultr([good, cut], tmp_path / "s", features=FEATURES)
  if suffix == ".arrow":  # an IPC stream has no footer: the file reads until the record batch cut short
    assert str(e.value).startswith(f"{cut}, rows from ") and "cannot read them (a damaged or truncated" in str(e.value)
  else:  # the footer is gone: found before anything is converted
    assert str(e.value).startswith(f"{cut}: not a readable "), str(e.value)
  assert not list((tmp_path / "s").glob("*"))


def test_damaged_parquet_pages_name_the_rows(tmp_path):
  """A Parquet file whose footer is intact but whose second row group's data is not: the rows are named."""
  path = write(tmp_path / "d.parquet", documents(seed=9), chunk=40)
  raw = bytearray(path.read_bytes())
  md = pq.ParquetFile(path).metadata.row_group(1).column(0)
  start = md.data_page_offset
  raw[start : start + md.total_compressed_size] = b"\xff" * md.total_compressed_size
  path.write_bytes(bytes(raw))
  with pytest.raises(
    ValueError, match=r"d\.parquet, row group 1, rows from 40: cannot read them \(a damaged or truncated file"
  ):
    data.convert_baidu_ultr(path, tmp_path / "s", features=FEATURES)
  assert not list((tmp_path / "s").glob("*"))


def test_absurd_position_and_no_documents(tmp_path):
  table = pa.table({"query_id": [1, 1, 2], "position": [1, 70000, 1], "click": [0, 1, 0], "bm25": [1.0, 2, 3]})
  path = write(tmp_path / "p.feather", table)
  with pytest.raises(ValueError) as converted:
    data.convert_baidu_ultr(path, tmp_path / "s", features=["bm25"])
  with pytest.raises(ValueError) as in_memory:
    data.load_baidu_ultr(path, features=["bm25"])
  assert str(converted.value) == str(in_memory.value) and "row 1, field 'position': 70000 is absurdly" in str(
    in_memory.value
  )
  assert_converts_to_load_baidu_ultr(tmp_path, path, features=["bm25"], list_size=2)
  empty = write(tmp_path / "e.feather", table.slice(0, 0))
  with pytest.raises(ValueError, match=r"e\.feather: no documents"):
    data.convert_baidu_ultr(empty, tmp_path / "t", features=["bm25"])
