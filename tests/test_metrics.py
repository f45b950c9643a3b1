"""Tests of ultr_jax.metrics against explicit-loop NumPy references and hand values."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import test_util as jtu

from ultr_jax import metrics


def _jit(fn, **static):
  """``fn`` with ``static`` keyword arguments fixed, under ``jax.jit``.

  Called eagerly, a metric compiles each of its primitives separately for every new shape (about
  20 ms each on CPU); jitted, it compiles once.
  """
  return jax.jit(functools.partial(fn, **static))


# ----------------------------------------------------------------------------
# NumPy references: one list at a time, explicit loops.


def _ranked(scores, where):
  """Valid item indices by descending score, ties in order of appearance."""
  idx = [i for i in range(len(scores)) if where[i]]
  return sorted(idx, key=lambda i: -scores[i])


def np_ndcg(scores, labels, where, k):
  order = _ranked(scores, where)
  k = len(order) if k is None else k
  dcg = sum((2.0 ** labels[i] - 1) / np.log2(r + 2) for r, i in enumerate(order[:k]))
  ideal = sorted((labels[i] for i in order), reverse=True)
  idcg = sum((2.0**y - 1) / np.log2(r + 2) for r, y in enumerate(ideal[:k]))
  return 0.0 if idcg == 0 else dcg / idcg


def np_dcg(scores, labels, where, k):
  order = _ranked(scores, where)
  k = len(order) if k is None else k
  return sum((2.0 ** labels[i] - 1) / np.log2(r + 2) for r, i in enumerate(order[:k]))


def np_precision(scores, labels, where, k, thr=1):
  order = _ranked(scores, where)
  k = len(order) if k is None else k
  top = order[:k]
  return 0.0 if not top else sum(labels[i] >= thr for i in top) / len(top)


def np_err(scores, labels, where, k, max_label=4):
  order = _ranked(scores, where)[:k]
  out, keep = 0.0, 1.0
  for r, i in enumerate(order):
    rel = (2.0 ** min(labels[i], max_label) - 1) / 2.0**max_label
    out += keep * rel / (r + 1)
    keep *= 1 - rel
  return out


def np_rr(scores, labels, where, k=None, thr=1):
  order = _ranked(scores, where)
  for r, i in enumerate(order[: (len(order) if k is None else k)]):
    if labels[i] >= thr:
      return 1.0 / (r + 1)
  return 0.0


def np_ap(scores, labels, where, thr=1):
  order = _ranked(scores, where)
  n_rel = sum(labels[i] >= thr for i in order)
  if n_rel == 0:
    return 0.0
  hits, total = 0, 0.0
  for r, i in enumerate(order):
    if labels[i] >= thr:
      hits += 1
      total += hits / (r + 1)
  return total / n_rel


def _lists(q=30, l=11, seed=0):
  rng = np.random.default_rng(seed)
  scores = rng.integers(0, 5, size=(q, l)).astype(np.float64)  # many ties
  labels = rng.integers(0, 5, size=(q, l)).astype(np.float64) * (rng.random((q, l)) < 0.6)
  n = rng.integers(1, l + 1, size=q)
  where = np.arange(l)[None] < n[:, None]
  where[0] = False  # an all-masked list
  labels[1] = 0  # a list without relevant items
  return scores, labels, where


@pytest.mark.parametrize("k", [1, 3, 5, 10, None])
def test_ndcg_err_mrr_ap_match_numpy(k):
  s, y, w = _lists()
  with jax.enable_x64(True):
    js, jy, jw = jnp.asarray(s), jnp.asarray(y), jnp.asarray(w)

    @jax.jit  # the six metrics in one program
    def six(js, jy, jw):
      return (
        metrics.ndcg(js, jy, where=jw, topn=k, reduce_fn=None),
        metrics.err(js, jy, where=jw, topn=k if k else 11, reduce_fn=None),
        metrics.mrr(js, jy, where=jw, topn=k, reduce_fn=None),
        metrics.average_precision(js, jy, where=jw, reduce_fn=None),
        metrics.dcg(js, jy, where=jw, topn=k, reduce_fn=None),
        metrics.precision(js, jy, where=jw, topn=k, reduce_fn=None),
      )

    nd, er, rr, ap, dc, pr = six(js, jy, jw)
  for q in range(s.shape[0]):
    assert dc[q] == pytest.approx(np_dcg(s[q], y[q], w[q], k), abs=1e-12)
    assert pr[q] == pytest.approx(np_precision(s[q], y[q], w[q], k), abs=1e-12)
    assert nd[q] == pytest.approx(np_ndcg(s[q], y[q], w[q], k), abs=1e-12)
    assert er[q] == pytest.approx(np_err(s[q], y[q], w[q], k or 11), abs=1e-12)
    assert rr[q] == pytest.approx(np_rr(s[q], y[q], w[q], k), abs=1e-12)
    assert ap[q] == pytest.approx(np_ap(s[q], y[q], w[q]), abs=1e-12)


def test_hand_values():
  # spec-cld 7 / 10.1: NDCG@3 and AP.
  s, y = jnp.array([3.0, 2.0, 1.0, 0.0]), jnp.array([0.0, 1.0, 0.0, 1.0])
  expected = (1 / np.log2(3)) / (1 + 1 / np.log2(3))
  assert float(metrics.ndcg(s, y, topn=3)) == pytest.approx(0.38685, abs=1e-5)
  assert float(metrics.ndcg(s, y, topn=3)) == pytest.approx(expected, rel=1e-6)
  assert float(metrics.average_precision(s, jnp.array([1.0, 0.0, 1.0, 0.0]))) == pytest.approx(
    (1 + 2 / 3) / 2, rel=1e-6
  )
  # ERR of [4, 0, 2] ranked in order: R = 15/16, 0, 3/16.
  e = metrics.err(jnp.array([3.0, 2.0, 1.0]), jnp.array([4.0, 0.0, 2.0]))
  assert float(e) == pytest.approx(15 / 16 + (1 / 16) * (3 / 16) / 3, rel=1e-6)
  assert float(metrics.mrr(s, y)) == pytest.approx(0.5)


def test_no_relevant_convention():
  s = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
  y = jnp.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
  w = jnp.array([[True, True], [True, True], [False, False]])
  # Averaged in (default): (1 + 0) / 2; the all-masked list never counts.
  assert float(metrics.ndcg(s, y, where=w)) == pytest.approx(0.5)
  assert float(metrics.ndcg(s, y, where=w, drop_no_relevant=True)) == pytest.approx(1.0)
  per = metrics.ndcg(s, y, where=w, drop_no_relevant=True, reduce_fn=None)
  np.testing.assert_array_equal(per, [1.0, 0.0, 0.0])
  np.testing.assert_array_equal(metrics.query_mask(y, where=w), [True, True, False])


ALL_RANKING = [metrics.ndcg, metrics.dcg, metrics.err, metrics.mrr, metrics.average_precision, metrics.precision]


@functools.cache
def _per_list(fn):
  """``fn`` per list (``reduce_fn=None``) under one ``jax.jit`` shared by the tests of ``fn``."""
  return _jit(fn, reduce_fn=None)


@pytest.mark.parametrize("fn", ALL_RANKING)
def test_mask_equals_truncation(fn):
  s, y, _ = _lists(q=6, l=8, seed=3)
  w = np.ones_like(s, bool)
  w[:, 5:] = False
  f = _per_list(fn)
  long_ = f(jnp.asarray(s), jnp.asarray(y), where=jnp.asarray(w))
  short = f(jnp.asarray(s[:, :5]), jnp.asarray(y[:, :5]))
  np.testing.assert_allclose(long_, short, rtol=1e-6)


@pytest.mark.parametrize("fn", ALL_RANKING)
def test_vmap_equals_batched(fn):
  s, y, w = (jnp.asarray(a) for a in _lists(q=6, l=8, seed=4))  # test_mask_equals_truncation's shapes and program
  f = _per_list(fn)
  batched = f(s, y, where=w)
  vm = jax.jit(jax.vmap(lambda a, b, c: f(a, b, where=c)))(s, y, w)
  np.testing.assert_allclose(vm, batched, rtol=1e-6)


def test_ranking_metrics_keys_and_values(assert_compiles_once):
  s, y, w = (jnp.asarray(a, jnp.float32) for a in _lists())
  w = w.astype(bool)
  fn = lambda a, b, c: metrics.ranking_metrics(a, b, where=c, return_mask=True)  # noqa: E731
  # New scores, labels and masks of the same shapes: one trace.
  assert_compiles_once(fn, lambda i: ((s + i, jnp.roll(y, i, axis=-1), jnp.roll(w, i, axis=0)), {}))
  out, mask = jax.jit(fn)(s, y, w)
  assert set(out) == {"ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "err@10", "mrr", "map"}
  np.testing.assert_allclose(out["ndcg@5"], _jit(metrics.ndcg, topn=5, reduce_fn=None)(s, y, where=w))
  np.testing.assert_allclose(out["err@10"], _jit(metrics.err, topn=10, reduce_fn=None)(s, y, where=w))
  np.testing.assert_array_equal(mask, np.asarray(w).any(-1))
  assert out["ndcg@1"].shape == (s.shape[0],)
  assert float(out["ndcg@10"][0]) == 0.0  # all-masked list holds 0
  with_dcg = jax.jit(lambda a, b, c: metrics.ranking_metrics(a, b, where=c, cutoffs=(10,), dcg_cutoffs=(1, 5)))(s, y, w)
  assert set(with_dcg) == {"ndcg@10", "err@10", "mrr", "map", "dcg@1", "dcg@5"}
  np.testing.assert_allclose(with_dcg["dcg@5"], _jit(metrics.dcg, topn=5, reduce_fn=None)(s, y, where=w))


def test_mcc_matches_numpy():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(4, 6)), rng.normal(size=(4, 6))
  w = rng.random((4, 6)) < 0.8
  got = float(metrics.mcc(jnp.asarray(x), jnp.asarray(y), where=jnp.asarray(w)))
  assert got == pytest.approx(np.corrcoef(x[w], y[w])[0, 1], rel=1e-5)
  per = metrics.mcc(jnp.asarray(x), jnp.asarray(y), where=jnp.asarray(w), per_list=True, reduce_fn=None)
  for q in range(4):
    assert float(per[q]) == pytest.approx(np.corrcoef(x[q][w[q]], y[q][w[q]])[0, 1], rel=1e-4)
  # Scale and shift invariance; a constant side gives 0 with finite gradient.
  assert float(metrics.mcc(jnp.asarray(3 * x + 1), jnp.asarray(y), where=jnp.asarray(w))) == pytest.approx(
    got, rel=1e-5
  )
  g = jax.grad(lambda a: metrics.mcc(a, jnp.asarray(y)))(jnp.ones((4, 6)))
  assert float(metrics.mcc(jnp.ones((4, 6)), jnp.asarray(y))) == 0.0
  assert np.all(np.isfinite(g))


def test_click_metrics_match_numpy():
  rng = np.random.default_rng(1)
  p = rng.uniform(0.05, 0.95, size=(50, 6))
  c = (rng.random((50, 6)) < p).astype(np.float64)
  w = np.ones((50, 6), bool)
  w[:, 5] = False
  jp, jc, jw = jnp.asarray(p, jnp.float32), jnp.asarray(c, jnp.float32), jnp.asarray(w)
  assert float(metrics.click_mse(jp, jc, where=jw)) == pytest.approx(((p - c) ** 2)[w].mean(), rel=1e-5)
  ll = c * np.log(p) + (1 - c) * np.log(1 - p)
  assert float(metrics.click_log_likelihood(jp, jc, where=jw)) == pytest.approx(ll[w].mean(), rel=1e-5)
  logit = np.log(p) - np.log1p(-p)
  assert float(
    metrics.click_log_likelihood(jnp.asarray(logit, jnp.float32), jc, where=jw, logits=True)
  ) == pytest.approx(ll[w].mean(), rel=1e-4)
  ppl = metrics.click_perplexity_per_rank(jp, jc, where=jw)
  ref = 2.0 ** (-(ll / np.log(2)).mean(0))
  np.testing.assert_allclose(ppl[:5], ref[:5], rtol=1e-5)
  assert float(ppl[5]) == 1.0  # no valid item at that rank
  assert float(metrics.click_perplexity(jp, jc, where=jw)) == pytest.approx(ref[:5].mean(), rel=1e-5)
  # A perfect (near-deterministic) model has perplexity ~1.
  perfect = metrics.click_perplexity(jnp.asarray(c, jnp.float32), jc)
  assert float(perfect) == pytest.approx(1.0, abs=1e-5)


def test_click_log_likelihood_grads():
  logits = jnp.array([[0.3, -1.2, 2.0]])
  c = jnp.array([[1.0, 0.0, 0.5]])
  jtu.check_grads(
    lambda x: metrics.click_log_likelihood(x, c, logits=True), (logits,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2
  )
  masked = jnp.zeros((1, 3), bool)
  val, g = jax.value_and_grad(lambda x: metrics.click_log_likelihood(x, c, where=masked, logits=True))(logits)
  assert float(val) == 0.0 and np.all(g == 0)


RANKING_FNS = {
  "ndcg": metrics.ndcg,
  "dcg": metrics.dcg,
  "err": metrics.err,
  "mrr": metrics.mrr,
  "map": metrics.average_precision,
  "precision": functools.partial(metrics.precision, topn=2),
}


@pytest.mark.parametrize("name", sorted(RANKING_FNS))
def test_nan_scores_give_nan_never_a_valid_rankings_value(name):
  """A diverged model (NaN scores) must not score like the all-zero (tied) ranking rax would make of it."""
  fn = RANKING_FNS[name]
  y = jnp.array([[2.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 2.0]])
  w = jnp.array([[True, True, True, False], [True, True, True, True]])
  s = jnp.array([[0.3, 0.1, 0.2, 0.0], [0.5, 0.2, 0.1, 0.4]])
  nan_list = s.at[1].set(jnp.nan)
  per = _jit(fn, reduce_fn=None)(nan_list, y, where=w)
  assert np.isnan(per[1]) and np.isfinite(per[0])
  np.testing.assert_allclose(per[0], _jit(fn, reduce_fn=None)(s, y, where=w)[0])  # other lists unchanged
  for reduce_fn in (jnp.mean, jnp.sum):
    assert np.isnan(float(_jit(fn, reduce_fn=reduce_fn)(nan_list, y, where=w)))
  # A single NaN item is enough; a NaN on a padded item is not (it is never ranked).
  assert np.isnan(float(fn(s.at[0, 1].set(jnp.nan), y, where=w)))
  np.testing.assert_allclose(fn(s.at[0, 3].set(jnp.nan), y, where=w), fn(s, y, where=w))
  all_nan = jnp.full_like(s, jnp.nan)
  assert np.isnan(float(fn(all_nan, y, where=w))) and np.isfinite(float(fn(jnp.zeros_like(s), y, where=w)))


def test_nan_scores_in_ranking_metrics_and_mcc():
  y = jnp.array([[2.0, 0.0, 1.0], [0.0, 1.0, 2.0]])
  s = jnp.array([[jnp.nan, 0.1, 0.2], [0.5, 0.2, 0.1]])
  out = metrics.ranking_metrics(s, y)
  for key, values in out.items():
    assert np.isnan(values[0]) and np.isfinite(values[1]), key
  assert np.isnan(float(metrics.mcc(s, y)))
  per = metrics.mcc(s, y, per_list=True, reduce_fn=None)
  assert np.isnan(per[0]) and np.isfinite(per[1])
  assert float(metrics.mcc(jnp.zeros(3), jnp.arange(3.0))) == 0.0  # a constant (valid) prediction still gives 0
