"""Tests for the Baidu-ULTR Arrow/Parquet loader (ultr_jax.data.baidu) on files the tests write."""

import jax
import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="the Baidu-ULTR loader reads Arrow files with pyarrow (the test extras)")
import pyarrow.feather  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401

from ultr_jax import data  # noqa: E402
from ultr_jax.data import baidu  # noqa: E402

EMB = 6  # a short stand-in for the 768-d embedding


def make_pages(seed=0, num_pages=9, max_len=7):
  """Random click pages as plain Python: each a dict of query_id and per-document lists.

  Positions are a random subset of 1..max_len (so some pages have gaps), listed in a shuffled
  order (the loader must place documents by position, not by row).
  """
  rng = np.random.default_rng(seed)
  pages = []
  for p in range(num_pages):
    n = int(rng.integers(1, max_len + 1))
    positions = rng.permutation(np.sort(rng.choice(np.arange(1, max_len + 1), n, replace=False)))
    pages.append(
      {
        "query_id": int(rng.integers(0, 4)) if p % 3 else 100 + p,  # repeated query ids on separate pages
        "position": positions.tolist(),
        "click": rng.integers(0, 2, n).tolist(),
        "bm25": rng.normal(size=n).round(3).tolist(),
        "tf": rng.integers(0, 50, n).tolist(),
        "query_document_embedding": rng.normal(size=(n, EMB)).astype(np.float16).tolist(),
        "media_type": rng.integers(0, 5, n).tolist(),
      }
    )
  # Two consecutive pages with the same query id are still two pages in the page layout only; keep
  # consecutive ids distinct so both layouts describe the same pages.
  for a, b in zip(pages, pages[1:]):
    if a["query_id"] == b["query_id"]:
      b["query_id"] += 1000
  return pages


def reference(pages, features, list_size=None):
  """The expected padded arrays, built page by page with Python loops."""
  L = list_size or max(max(p["position"]) for p in pages)
  width = sum(EMB if f == "query_document_embedding" else 1 for f in features)
  feats = np.zeros((len(pages), L, width), np.float32)
  where = np.zeros((len(pages), L), bool)
  clicks = np.zeros((len(pages), L), np.float32)
  for q, page in enumerate(pages):
    for d, pos in enumerate(page["position"]):
      if pos > L:
        continue
      row = []
      for f in features:
        v = page[f][d]
        row.extend(v if isinstance(v, list) else [v])
      feats[q, pos - 1] = row
      where[q, pos - 1] = True
      clicks[q, pos - 1] = page["click"][d]
  return feats, where, clicks, np.array([p["query_id"] for p in pages])


def document_table(pages):
  """One row per shown document (the hub's feather layout)."""
  cols = {k: [] for k in pages[0]}
  for page in pages:
    n = len(page["position"])
    for k, v in page.items():
      cols[k].extend(v if isinstance(v, list) else [v] * n)
  table = {k: v for k, v in cols.items() if k != "query_document_embedding"}
  emb = pa.FixedSizeListArray.from_arrays(
    pa.array(np.asarray(cols["query_document_embedding"], np.float16).reshape(-1)), EMB
  )
  return pa.table({**table, "query_document_embedding": emb})


def page_table(pages):
  """One row per page, per-document columns as lists (the hub builder's output)."""
  cols = {k: [p[k] for p in pages] for k in pages[0] if k != "query_document_embedding"}
  emb = pa.array(
    [np.asarray(p["query_document_embedding"], np.float16).tolist() for p in pages], pa.list_(pa.list_(pa.float16()))
  )
  return pa.table({**cols, "query_document_embedding": emb})


def write(tmp_path, table, suffix, name="part"):
  path = tmp_path / f"{name}{suffix}"
  if suffix == ".parquet":
    pa.parquet.write_table(table, path)
  else:
    pa.feather.write_feather(table, path)
  return path


LAYOUTS = [("document", ".feather"), ("document", ".parquet"), ("page", ".parquet"), ("page", ".arrow")]


@pytest.mark.parametrize("layout,suffix", LAYOUTS)
@pytest.mark.parametrize("features", [("bm25", "tf"), ("query_document_embedding", "bm25")])
def test_matches_the_python_reference(tmp_path, layout, suffix, features):
  pages = make_pages()
  table = document_table(pages) if layout == "document" else page_table(pages)
  ds = data.load_baidu_ultr(write(tmp_path, table, suffix), features=features, extra_columns=("media_type",))
  feats, where, clicks, qid = reference(pages, features)
  np.testing.assert_array_equal(ds.where, where)
  np.testing.assert_array_equal(ds.qid, qid)
  np.testing.assert_allclose(ds.features, feats, rtol=0, atol=0)
  np.testing.assert_array_equal(ds.extras["clicks"], clicks)
  assert ds.features.dtype == np.float32 and ds.extras["clicks"].dtype == np.float32
  assert not ds.labels.any()  # click data has no labels
  # Every document keeps its own row: doc_ids index the flattened documents in file order.
  flat_media = np.concatenate([p["media_type"] for p in pages])
  np.testing.assert_array_equal(ds.extras["media_type"][ds.where], flat_media[ds.doc_ids[ds.where]])
  assert np.all(ds.doc_ids[~ds.where] == -1)


@pytest.mark.parametrize("layout", ["document", "page"])
def test_list_size_truncation_equals_slicing(tmp_path, layout):
  pages = make_pages(seed=1)
  table = document_table(pages) if layout == "document" else page_table(pages)
  path = write(tmp_path, table, ".parquet")
  full = data.load_baidu_ultr(path, features=("bm25", "query_document_embedding"))
  cut = data.load_baidu_ultr(path, features=("bm25", "query_document_embedding"), list_size=3)
  np.testing.assert_array_equal(cut.features, full.features[:, :3])
  np.testing.assert_array_equal(cut.where, full.where[:, :3])
  np.testing.assert_array_equal(cut.extras["clicks"], full.extras["clicks"][:, :3])
  np.testing.assert_array_equal(cut.doc_ids, full.doc_ids[:, :3])
  wide = data.load_baidu_ultr(path, features=("bm25",), list_size=full.list_size + 2)
  assert not wide.where[:, full.list_size :].any()


@pytest.mark.parametrize("layout", ["document", "page"])
def test_several_files_and_max_sessions(tmp_path, layout):
  pages = make_pages(seed=2, num_pages=10)
  make = document_table if layout == "document" else page_table
  paths = [write(tmp_path, make(pages[:4]), ".feather", "a"), write(tmp_path, make(pages[4:]), ".feather", "b")]
  both = data.load_baidu_ultr(paths, features=("bm25", "tf"))
  one = data.load_baidu_ultr(write(tmp_path, make(pages), ".feather", "all"), features=("bm25", "tf"))
  np.testing.assert_array_equal(both.features, one.features)
  np.testing.assert_array_equal(both.qid, one.qid)
  np.testing.assert_array_equal(both.doc_ids, one.doc_ids)  # rows are counted over the files, in order
  for m in (1, 4, 6):
    head = data.load_baidu_ultr(paths, features=("bm25", "tf"), max_sessions=m, list_size=one.list_size)
    np.testing.assert_array_equal(head.features, one.features[:m])
    np.testing.assert_array_equal(head.qid, one.qid[:m])
    np.testing.assert_array_equal(head.extras["clicks"], one.extras["clicks"][:m])


def test_an_empty_page_row_stays_an_all_masked_page(tmp_path):
  table = pa.table(
    {"query_id": [1, 2, 3], "position": [[1, 2], [], [1]], "click": [[0, 1], [], [1]], "bm25": [[0.1, 0.2], [], [0.3]]}
  )
  ds = data.load_baidu_ultr(write(tmp_path, table, ".parquet"), features=("bm25",))
  np.testing.assert_array_equal(ds.qid, [1, 2, 3])
  np.testing.assert_array_equal(ds.where, [[True, True], [False, False], [True, False]])
  np.testing.assert_array_equal(ds.extras["clicks"], [[0, 1], [0, 0], [1, 0]])


def test_annotations_keep_file_order_and_query_buckets(tmp_path):
  """Annotation files have labels and a per-query frequency bucket, and no positions."""
  table = pa.table(
    {
      "query_id": [5, 5, 5, 8, 8],
      "label": [4, 0, 2, 1, 3],
      "frequency_bucket": [2, 2, 2, 7, 7],
      "bm25": [1.0, 2.0, 3.0, 4.0, 5.0],
    }
  )
  ds = data.load_baidu_ultr(write(tmp_path, table, ".feather"), features=("bm25",))
  np.testing.assert_array_equal(ds.labels, [[4, 0, 2], [1, 3, 0]])
  np.testing.assert_array_equal(ds.features[..., 0], [[1, 2, 3], [4, 5, 0]])
  np.testing.assert_array_equal(ds.where, [[True, True, True], [True, True, False]])
  np.testing.assert_array_equal(ds.extras["frequency_bucket"], [2, 7])
  assert "clicks" not in ds.extras
  page = pa.table(
    {
      "query_id": [5, 8],
      "label": [[4, 0, 2], [1, 3]],
      "frequency_bucket": [2, 7],
      "bm25": [[1.0, 2.0, 3.0], [4.0, 5.0]],
    }
  )
  ds2 = data.load_baidu_ultr(write(tmp_path, page, ".parquet"), features=("bm25",))
  for name in ("labels", "features", "where", "qid"):
    np.testing.assert_array_equal(getattr(ds2, name), getattr(ds, name))
  np.testing.assert_array_equal(ds2.extras["frequency_bucket"], [2, 7])


@pytest.mark.filterwarnings("ignore:Feather V1:DeprecationWarning")  # pyarrow >= 25 (V1 still reads)
def test_feather_v1_and_uncompressed_files_read_the_same(tmp_path):
  table = document_table(make_pages(seed=4))
  ref = data.load_baidu_ultr(write(tmp_path, table, ".feather"), features=("bm25", "tf"))
  for name, kwargs in (("v1", {"version": 1}), ("plain", {"compression": "uncompressed"})):
    path = tmp_path / f"{name}.feather"
    pa.feather.write_feather(table.drop(["query_document_embedding"]), path, **kwargs)
    ds = data.load_baidu_ultr(path, features=("bm25", "tf"))
    np.testing.assert_array_equal(ds.features, ref.features)
    np.testing.assert_array_equal(ds.extras["clicks"], ref.extras["clicks"])


def test_ltr_feature_set_and_dtype(tmp_path):
  n = 4
  table = pa.table(
    {
      "query_id": [1] * n,
      "position": [1, 2, 3, 4],
      "click": [0, 1, 0, 0],
      **{name: np.arange(n, dtype=np.float64) + i for i, name in enumerate(baidu.LTR_FEATURES)},
    }
  )
  ds = data.load_baidu_ultr(write(tmp_path, table, ".feather"), features="ltr", dtype=np.float16)
  assert ds.features.shape == (1, 4, len(baidu.LTR_FEATURES)) and ds.features.dtype == np.float16
  np.testing.assert_array_equal(ds.features[0, :, 3], np.arange(n) + 3)


def _doc_table(**overrides):
  cols = {"query_id": [1, 1, 2], "position": [1, 2, 1], "click": [0, 1, 1], "bm25": [0.5, 0.1, 0.2]}
  cols.update(overrides)
  return pa.table(cols)


BAD_DOCUMENT_FILES = [
  ({"position": [1, 0, 1]}, "row 1, field 'position': 0 is not an integer >= 1"),
  ({"position": [1, 1, 1]}, "row 1, field 'position': its page already shows a document at position 1"),
  ({"click": [0, 2, 1]}, "row 1, field 'click': 2 is not an integer in [0, 1]"),
  ({"bm25": [0.5, float("nan"), 0.2]}, "row 1, field 'bm25': value nan is not finite"),
  ({"bm25": [0.5, None, 0.2]}, "row 1, field 'bm25': missing value"),
  ({"bm25": ["a", "b", "c"]}, "row 0, field 'bm25': expected numbers"),
  ({"query_id": ["a", "a", "b"]}, "row 0, field 'query_id': expected integers"),
  ({"label": [1.0, -1.0, 0.0]}, "row 1, field 'label': -1.0 is negative"),
]


@pytest.mark.parametrize("overrides,message", BAD_DOCUMENT_FILES)
def test_bad_documents_name_file_row_and_field(tmp_path, overrides, message):
  path = write(tmp_path, _doc_table(**overrides), ".feather")
  with pytest.raises(ValueError) as err:
    data.load_baidu_ultr(path, features=("bm25",))
  assert str(path) in str(err.value) and message in str(err.value)


def test_non_finite_vectors_and_overflow_name_the_document(tmp_path):
  emb = pa.array([[1.0, 2.0], [1.0, float("inf")], [3.0, 4.0]], pa.list_(pa.float16()))
  path = write(tmp_path, _doc_table(query_document_embedding=emb), ".feather", "inf")
  with pytest.raises(ValueError, match=r"inf\.feather, row 1, field 'query_document_embedding': value inf is not"):
    data.load_baidu_ultr(path)
  path = write(tmp_path, _doc_table(bm25=[0.5, 0.1, 1e6]), ".feather", "big")
  assert data.load_baidu_ultr(path, features=("bm25",)).features.max() == 1e6
  with pytest.raises(ValueError, match=r"big\.feather, row 2, field 'bm25': value 1000000.0 overflows the dtype"):
    data.load_baidu_ultr(path, features=("bm25",), dtype=np.float16)


def test_bad_files_and_vectors(tmp_path):
  ragged = _doc_table(query_document_embedding=pa.array([[1.0, 2.0], [1.0], [3.0, 4.0]]))
  path = write(tmp_path, ragged, ".feather", "ragged")
  with pytest.raises(ValueError, match=r"ragged\.feather, row 1, field 'query_document_embedding': a vector of 1"):
    data.load_baidu_ultr(path)
  path = write(tmp_path, _doc_table(), ".feather", "nocol")
  with pytest.raises(ValueError, match=r"nocol\.feather: no column 'query_document_embedding'"):
    data.load_baidu_ultr(path)  # the default features are the embeddings
  empty = pa.table(
    {"query_id": pa.array([], pa.int32()), "click": pa.array([], pa.int32()), "bm25": pa.array([], pa.float32())}
  )
  with pytest.raises(ValueError, match=r"empty\.feather: no documents"):
    data.load_baidu_ultr(write(tmp_path, empty, ".feather", "empty"), features=("bm25",))
  no_clicks = pa.table({"query_id": [1], "bm25": [0.5]})
  with pytest.raises(ValueError, match="neither a 'click' nor a 'label' column"):
    data.load_baidu_ultr(write(tmp_path, no_clicks, ".feather", "nolabels"), features=("bm25",))
  # Page layout: list columns of one row must agree in length.
  page = pa.table(
    {"query_id": [1, 2], "position": [[1, 2], [1]], "click": [[0, 1], [1, 0]], "bm25": [[0.1, 0.2], [0.3]]}
  )
  with pytest.raises(ValueError, match=r"pages\.parquet, row 1, field 'click': 2 values where the other columns"):
    data.load_baidu_ultr(write(tmp_path, page, ".parquet", "pages"), features=("bm25",))
  page = pa.table(
    {"query_id": [1, 2], "position": [[1, 2], [1, 1]], "click": [[0, 1], [1, 0]], "bm25": [[0.1, 0.2], [0.3, 0.4]]}
  )
  with pytest.raises(ValueError, match=r"row 1, document 1, field 'position': its page already shows"):
    data.load_baidu_ultr(write(tmp_path, page, ".parquet", "dup"), features=("bm25",))
  (tmp_path / "x.csv").write_text("query_id\n1\n")
  with pytest.raises(ValueError, match=r"x\.csv: unknown file type '.csv'"):
    data.load_baidu_ultr(tmp_path / "x.csv")
  (tmp_path / "junk.feather").write_bytes(b"not arrow at all")
  with pytest.raises(ValueError, match=r"junk\.feather: not a readable feather file"):
    data.load_baidu_ultr(tmp_path / "junk.feather")
  with pytest.raises(FileNotFoundError, match="absent.parquet"):
    data.load_baidu_ultr(tmp_path / "absent.parquet")
  with pytest.raises(ValueError, match="unknown set 'bm25'"):
    data.load_baidu_ultr(path, features="bm25")


def test_logged_clicks_train_dla_like_arrays_in_memory(tmp_path):
  """End to end: PBM clicks written as a Baidu file, loaded, and trained on as logged clicks.

  Training on the loaded file equals training on the same arrays built in memory, and DLA's
  learned propensities follow the simulated examination 1/p.
  """
  from ultr_jax import train  # noqa: PLC0415

  rng = np.random.default_rng(0)
  num_pages, L, F = 256, 5, 4
  w = rng.normal(size=F)
  x = rng.normal(size=(num_pages, L, F)).astype(np.float32)
  relevance = 1 / (1 + np.exp(-(x @ w) * 2))
  exam = 1 / np.arange(1, L + 1)
  clicks = (rng.random((num_pages, L)) < relevance * exam).astype(np.int64)
  pages = [
    {
      "query_id": q,
      "position": list(range(1, L + 1)),
      "click": clicks[q].tolist(),
      **{f"f{j}": x[q, :, j].tolist() for j in range(F)},
    }
    for q in range(num_pages)
  ]
  cols = {k: [v for p in pages for v in (p[k] if isinstance(p[k], list) else [p[k]] * L)] for k in pages[0]}
  path = write(tmp_path, pa.table(cols), ".feather")
  loaded = data.load_baidu_ultr(path, features=[f"f{j}" for j in range(F)])
  in_memory = data.RankingDataset(
    features=x,
    labels=np.zeros((num_pages, L), np.float32),
    where=np.ones((num_pages, L), bool),
    qid=np.arange(num_pages),
    extras={"clicks": clicks.astype(np.float32)},
  )
  np.testing.assert_array_equal(loaded.features, in_memory.features)
  config = train.default_train_config()
  config.steps, config.batch_size, config.eval_every, config.learning_rate = 300, 64, 300, 0.05
  method = train.get_method("dla", {"ranker": "linear"}, num_features=F, list_size=L)
  runs = [train.fit(method, ds, config=config) for ds in (loaded, in_memory)]
  prop = [np.asarray(method.propensities(r.params, r.extra)) for r in runs]
  np.testing.assert_array_equal(prop[0], prop[1])
  jax.tree.map(np.testing.assert_array_equal, runs[0].params, runs[1].params)
  # The loaded clicks carry the position bias: the estimates are far nearer 1/p than no bias.
  error = np.abs(prop[0][0] - exam).mean()
  assert error < 0.5 * np.abs(1.0 - exam).mean(), prop[0]


def test_without_pyarrow_the_error_says_what_to_install(tmp_path, monkeypatch):
  path = write(tmp_path, _doc_table(), ".feather")
  monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)
  with pytest.raises(ImportError, match=r"pip install 'ultr_jax\[baidu\]'"):
    data.load_baidu_ultr(path, features=("bm25",))
