"""Tests for preprocessing, splits/batching and the synthetic generator (ultr_jax.data)."""

import numpy as np
import pytest
import scipy.stats

from ultr_jax import data


@pytest.fixture(scope="module")
def synth():
  return data.make_synthetic(
    num_train=120, num_valid=30, num_test=30, list_size=12, num_features=8, seed=5, min_list_size=3
  )


# ---------------------------------------------------------------- synthetic


def test_synthetic_same_seed_identical_different_seed_differs():
  a = data.make_synthetic(num_train=40, num_valid=5, num_test=5, list_size=6, num_features=4, seed=1)
  b = data.make_synthetic(num_train=40, num_valid=5, num_test=5, list_size=6, num_features=4, seed=1)
  c = data.make_synthetic(num_train=40, num_valid=5, num_test=5, list_size=6, num_features=4, seed=2)
  for x, y, z in zip(a, b, c):
    for name in ("features", "labels", "where", "qid", "doc_ids"):
      np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
    np.testing.assert_array_equal(x.extras["true_score"], y.extras["true_score"])
    assert not np.array_equal(x.features, z.features)


def test_synthetic_shapes_ids_and_masks(synth):
  for ds, q in zip(synth, (120, 30, 30)):
    assert ds.features.shape == (q, 12, 8) and ds.features.dtype == np.float32
    assert ds.where.dtype == np.bool_
    lengths = ds.where.sum(1)
    assert lengths.min() >= 3 and lengths.max() <= 12 and lengths.min() < 12  # some padding
    assert np.all(ds.features[~ds.where] == 0) and np.all(ds.doc_ids[~ds.where] == -1)
    # real items come first, padding last
    np.testing.assert_array_equal(ds.where, np.arange(12)[None] < lengths[:, None])
  ids = np.concatenate([ds.doc_ids[ds.where] for ds in synth])
  assert len(np.unique(ids)) == len(ids)
  qids = np.concatenate([ds.qid for ds in synth])
  assert len(np.unique(qids)) == len(qids)


def test_synthetic_label_histogram_and_relevance_signal():
  s = data.make_synthetic(num_train=2000, num_valid=200, num_test=200, list_size=20, num_features=16, seed=0)
  labels = np.concatenate([ds.labels[ds.where] for ds in s])
  hist = np.bincount(labels.astype(int), minlength=5) / len(labels)
  np.testing.assert_allclose(hist, data.DEFAULT_LABEL_FRACTIONS, atol=0.005)
  ds = s.train
  rho = scipy.stats.spearmanr(ds.extras["true_score"][ds.where], ds.labels[ds.where]).statistic
  assert 0.6 < rho < 0.99  # labels follow the latent score, with noise
  # the relevance function is the same across dataset sizes (it depends on the seed only)
  small = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=20, num_features=16, seed=0)
  assert small.train.extras["true_score"].std() > 0


def test_synthetic_rejects_bad_fractions():
  with pytest.raises(ValueError, match="label_fractions"):
    data.make_synthetic(num_train=5, label_fractions=(0.5, 0.6))


# ---------------------------------------------------------------- splits / batching


def test_split_deterministic_disjoint_and_complete(synth):
  ds = synth.train
  a = data.train_valid_test_split(ds, (0.7, 0.2, 0.1), seed=3)
  b = data.train_valid_test_split(ds, (0.7, 0.2, 0.1), seed=3)
  c = data.train_valid_test_split(ds, (0.7, 0.2, 0.1), seed=4)
  assert [len(x) for x in a] == [84, 24, 12]
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x.qid, y.qid)
  assert not np.array_equal(a.train.qid, c.train.qid)
  allq = np.concatenate([x.qid for x in a])
  np.testing.assert_array_equal(np.sort(allq), np.sort(ds.qid))
  assert all(np.all(np.diff(x.qid) > 0) for x in a)  # file order kept
  np.testing.assert_array_equal(
    a.valid.extras["true_score"], ds.extras["true_score"][np.searchsorted(ds.qid, a.valid.qid)]
  )
  with pytest.raises(ValueError, match="fractions"):
    data.train_valid_test_split(ds, (0.8, 0.3, 0.1))


@pytest.mark.parametrize("batch_size", [1, 7, 32, 500])
def test_batches_fixed_shape_cover_every_query_once(synth, batch_size):
  ds = synth.valid
  out = list(data.batches(ds, batch_size, seed=0, epochs=2))
  per_epoch = -(-ds.num_queries // batch_size)
  assert len(out) == 2 * per_epoch
  for b in out:
    assert b["features"].shape == (batch_size, 12, 8) and b["where"].shape == (batch_size, 12)
    assert set(b) == {"features", "labels", "where", "qid", "doc_ids", "true_score"}
    pad = b["qid"] < 0
    assert not b["where"][pad].any() and np.all(b["doc_ids"][pad] == -1) and np.all(b["features"][pad] == 0)
  for e in range(2):
    q = np.concatenate([b["qid"] for b in out[e * per_epoch : (e + 1) * per_epoch]])
    np.testing.assert_array_equal(np.sort(q[q >= 0]), np.sort(ds.qid))
  docs = sum(int(b["where"].sum()) for b in out)
  assert docs == 2 * ds.num_documents


def test_batches_shuffle_deterministic_and_unshuffled_order(synth):
  ds = synth.test
  first = [b["qid"] for b in data.batches(ds, 8, seed=11, epochs=2)]
  again = [b["qid"] for b in data.batches(ds, 8, seed=11, epochs=2)]
  other = [b["qid"] for b in data.batches(ds, 8, seed=12, epochs=2)]
  np.testing.assert_array_equal(np.concatenate(first), np.concatenate(again))
  assert not np.array_equal(np.concatenate(first), np.concatenate(other))
  n = len(first) // 2
  assert not np.array_equal(np.concatenate(first[:n]), np.concatenate(first[n:]))  # new order per epoch
  plain = np.concatenate([b["qid"] for b in data.batches(ds, 8, shuffle=False)])
  np.testing.assert_array_equal(plain[: ds.num_queries], ds.qid)
  forever = data.batches(ds, 8, seed=0, epochs=None)
  assert len([next(forever) for _ in range(3 * n + 1)]) == 3 * n + 1


@pytest.mark.parametrize("multiple", [1, 3, 8, 64])
def test_pad_queries(synth, multiple):
  ds = synth.valid
  p = data.pad_queries(ds, multiple)
  assert p.num_queries % multiple == 0 and p.num_queries - ds.num_queries < multiple
  assert p.num_documents == ds.num_documents
  np.testing.assert_array_equal(p.features[: ds.num_queries], ds.features)
  assert np.all(p.qid[ds.num_queries :] == -1) and not p.where[ds.num_queries :].any()


def test_concatenate(synth):
  c = data.concatenate([synth.valid, synth.test])
  assert c.num_queries == 60 and c.num_documents == synth.valid.num_documents + synth.test.num_documents
  np.testing.assert_array_equal(c.extras["true_score"][30:], synth.test.extras["true_score"])


# ---------------------------------------------------------------- preprocessing


def _padded_is_zero(ds):
  return np.all(ds.features[~ds.where] == 0)


def test_minmax_matches_sklearn_scaler_on_real_documents(synth):
  pre = pytest.importorskip("sklearn.preprocessing")
  ds = synth.train
  out = data.normalize_features(ds, method="minmax")
  ref = pre.MinMaxScaler().fit_transform(ds.features[ds.where].astype(np.float64))
  np.testing.assert_allclose(out.features[ds.where], ref, atol=1e-6)
  assert _padded_is_zero(out)


def test_lbd_pm1_global_fit_keeps_zeros():
  f = np.array([[[0.0, 1.0], [2.0, 5.0], [4.0, 5.0]]], np.float32)
  ds = data.RankingDataset(
    features=f, labels=np.zeros((1, 3), np.float32), where=np.ones((1, 3), bool), qid=np.array([0])
  )
  other = ds.replace(features=f * 2)  # a "test split" with larger values
  st = data.fit_normalizer([ds, other], "minmax_pm1")
  np.testing.assert_array_equal(st.min, [0, 1]) and np.testing.assert_array_equal(st.max, [8, 10])
  out = data.normalize_features(ds, method="minmax_pm1", stats=st)
  # x' = 2 (x - min) / (max - min) - 1; absent (zero) features stay 0
  np.testing.assert_allclose(out.features[0], [[0, -1], [2 * 2 / 8 - 1, 2 * 4 / 9 - 1], [0, 2 * 4 / 9 - 1]], rtol=1e-6)
  log = data.normalize_features(ds, method="log_minmax_pm1", stats=data.fit_normalizer([ds, other], "log_minmax_pm1"))
  np.testing.assert_allclose(log.features[0, 1, 0], 2 * np.log10(3) / np.log10(9) - 1, rtol=1e-6)
  with pytest.raises(ValueError, match="fit for"):
    data.normalize_features(ds, method="zscore", stats=st)


@pytest.mark.parametrize("method", data.NORMALIZATIONS)
def test_every_normalisation_finite_masked_and_constant_safe(synth, method):
  ds = synth.train
  f = ds.features.copy()
  f[..., 0] = np.where(ds.where, 3.0, 0.0)  # a constant feature
  out = data.normalize_features(ds.replace(features=f), method=method)
  assert np.all(np.isfinite(out.features)) and _padded_is_zero(out)
  np.testing.assert_array_equal(out.features[..., 0], 0)
  real = out.features[ds.where][:, 1:]
  if method in ("minmax", "query_minmax"):
    assert real.min() >= 0 and real.max() <= 1 + 1e-6
  if method in ("zscore", "log1p_zscore"):
    np.testing.assert_allclose(real.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(real.std(0), 1, atol=1e-3)


def test_query_minmax_per_query():
  f = np.array([[[1.0], [3.0], [9.0]], [[10.0], [20.0], [0.0]]], np.float32)
  w = np.array([[True, True, True], [True, True, False]])
  ds = data.RankingDataset(features=f, labels=np.zeros((2, 3), np.float32), where=w, qid=np.arange(2))
  out = data.normalize_features(ds, method="query_minmax")
  np.testing.assert_allclose(out.features[..., 0], [[0, 0.25, 1], [0, 1, 0]])


def test_drop_queries_without_relevant(synth):
  ds = synth.train
  labels = ds.labels.copy()
  labels[:5] = 0
  labels[5, 0] = 3
  kept = data.drop_queries_without_relevant(ds.replace(labels=labels))
  assert not np.isin(ds.qid[:5], kept.qid).any() and ds.qid[5] in kept.qid
  assert np.all(np.any((kept.labels > 0) & kept.where, 1))
  strict = data.drop_queries_without_relevant(ds, threshold=2)
  assert np.all(np.any((strict.labels > 2) & strict.where, 1)) and len(strict) <= len(ds)


def test_stats(synth):
  ds = synth.valid
  s = data.stats(ds)
  assert s.num_queries == 30 and s.num_documents == ds.where.sum() and s.num_features == 8
  assert sum(s.label_histogram.values()) == s.num_documents
  assert s.mean_list_length == pytest.approx(ds.where.sum(1).mean())
  text = str(s)
  assert "30 queries" in text and f"{s.num_documents} documents" in text and "labels: 0:" in text


def test_letor_sample_pipeline(shared_data, tmp_path):
  base = shared_data / "letor-sample"
  ds = data.load_svmlight(base / "rank.train", cache_dir=tmp_path)
  s = data.stats(ds)
  assert (s.num_queries, s.num_documents, s.num_features) == (201, 3005, 300)
  assert set(s.label_histogram) == {0.0, 1.0, 2.0, 3.0, 4.0}
  kept = data.drop_queries_without_relevant(ds)
  assert len(kept) == int(np.any((ds.labels > 0) & ds.where, 1).sum())
  norm = data.normalize_features(ds, method="minmax")
  assert norm.features[ds.where].max() <= 1 and norm.features[ds.where].min() >= 0
