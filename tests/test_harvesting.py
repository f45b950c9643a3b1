"""Tests for ultr_jax.graph.harvesting (propensities by intervention harvesting)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import scipy.special

from ultr_jax.graph import check_identifiability, factor_components
from ultr_jax.graph import harvesting as hv

PBM = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])
ESTIMATORS = ("all_pairs", "pivot", "adjacent_chain")


def _reference_sets(items, factors, clicks, where, weights, num_factors):
  """The intervention sets by Python dictionaries and loops."""
  clk, imp = {}, {}
  for x, t, c, m, w in zip(items.ravel(), factors.ravel(), clicks.ravel(), where.ravel(), weights.ravel()):
    if m:
      clk[x, t] = clk.get((x, t), 0.0) + w * c
      imp[x, t] = imp.get((x, t), 0.0) + w
  by_item = {}
  for (x, t), n in imp.items():
    if n > 0:
      by_item.setdefault(x, {})[t] = clk[x, t] / n
  c_ref = np.zeros((num_factors, num_factors))
  n_ref = np.zeros((num_factors, num_factors))
  for ctrs in by_item.values():
    for k, ctr_k in ctrs.items():
      for k2 in ctrs:
        c_ref[k, k2] += ctr_k
        n_ref[k, k2] += 1
  f_clk = np.zeros(num_factors)
  f_imp = np.zeros(num_factors)
  for (x, t), n in imp.items():
    f_clk[t] += clk[x, t]
    f_imp[t] += n
  return c_ref, n_ref, f_clk, f_imp


def _pbm_log(seed, *, queries=2000, list_size=10, sessions=20, rankers=3, noise=1.0):
  """Sessions of several noisy logging rankers, with PBM clicks: records [S, L]."""
  rng = np.random.default_rng(seed)
  rel = rng.beta(1.0, 3.0, size=(queries, list_size))
  items = np.arange(queries * list_size).reshape(queries, list_size)
  orders = np.stack([np.argsort(-(rel + noise * rng.standard_normal(rel.shape)), axis=1) for _ in range(rankers)])
  pick = rng.integers(0, rankers, size=(queries, sessions))
  order = orders[pick, np.arange(queries)[:, None]]  # [Q, S, L]
  shown = np.take_along_axis(np.broadcast_to(items[:, None], order.shape), order, -1)
  r = np.take_along_axis(np.broadcast_to(rel[:, None], order.shape), order, -1)
  clicks = (rng.random(shown.shape) < PBM[:list_size] * r).astype(np.float32)
  positions = np.broadcast_to(np.arange(list_size), shown.shape)
  return (shown.reshape(-1, list_size), positions.reshape(-1, list_size), clicks.reshape(-1, list_size))


def _population_records(seed, num_items=40, num_factors=6, per_item=3):
  """Records with exact CTRs o(t) r(x): every item at ``per_item`` random factors."""
  rng = np.random.default_rng(seed)
  o = np.sort(rng.uniform(0.1, 1.0, num_factors))[::-1]
  r = rng.uniform(0.05, 0.9, num_items)
  factors = np.stack([rng.choice(num_factors, per_item, replace=False) for _ in range(num_items)])
  items = np.repeat(np.arange(num_items)[:, None], per_item, axis=1)
  ctr = o[factors] * r[items]
  weights = rng.integers(1, 50, factors.shape).astype(np.float32)
  return items, factors, ctr, weights, o / o[0]


@pytest.mark.parametrize("seed", range(4))
def test_intervention_sets_match_dictionary_reference(seed):
  rng = np.random.default_rng(seed)
  items = rng.integers(0, 15, (30, 5))
  factors = rng.integers(0, 5, (30, 5))
  clicks = (rng.random((30, 5)) < 0.4).astype(np.float32)
  where = rng.random((30, 5)) < 0.8
  weights = rng.integers(0, 4, (30, 5)).astype(np.float32)  # zero-weight records too
  # padding carries garbage ids and clicks that must be ignored
  items_p = np.where(where, items, 99)
  factors_p = np.where(where, factors, -3)
  clicks_p = np.where(where, clicks, np.nan)
  sets = hv.intervention_sets(items_p, factors_p, clicks_p, num_items=15, num_factors=5, where=where, weights=weights)
  ref = _reference_sets(items, factors, clicks, where, weights, 5)
  for got, want in zip(sets, ref):
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_aggregated_ctrs_with_weights_equal_sessions():
  items, factors, clicks = _pbm_log(0, queries=50, sessions=8)
  per_session = hv.intervention_sets(items, factors, clicks, num_items=500, num_factors=10)
  # one record per (item, factor) cell: its CTR, weighted by its impressions
  cell = items * 10 + factors
  imp = np.bincount(cell.ravel(), minlength=5000)
  clk = np.bincount(cell.ravel(), weights=clicks.ravel(), minlength=5000)
  keep = np.flatnonzero(imp)
  aggregated = hv.intervention_sets(
    keep // 10, keep % 10, clk[keep] / imp[keep], num_items=500, num_factors=10, weights=imp[keep]
  )
  for a, b in zip(per_session, aggregated):
    np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize("method", ESTIMATORS)
@pytest.mark.parametrize("seed", range(3))
def test_exact_recovery_from_population_ctrs(method, seed):
  items, factors, ctr, weights, truth = _population_records(seed)
  if method == "adjacent_chain":  # the chain needs every neighbouring pair shared
    extra_f = np.stack([np.arange(5), np.arange(1, 6)], 1)
    extra_i = np.repeat(np.arange(40, 45)[:, None], 2, 1)
    o = truth * 0.9
    items = np.concatenate([items.ravel(), extra_i.ravel()])
    factors = np.concatenate([factors.ravel(), extra_f.ravel()])
    ctr = np.concatenate([ctr.ravel(), o[extra_f].ravel() * 0.5])
    weights = np.concatenate([weights.ravel(), np.ones(10, np.float32)])
    truth = o / o[0]
  est = hv.harvest_propensities(items, factors, ctr, weights=weights, method=method)
  np.testing.assert_allclose(est.propensities, truth, rtol=2e-4)
  assert bool(np.all(est.identified)) and bool(est.converged)


@pytest.mark.parametrize("num_factors,per_item", [(4, 3), (10, 2)])
@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("seed", [9, 13, 14])
def test_all_pairs_converges_to_the_exact_propensities(num_factors, per_item, tie, seed):
  """Exact CTRs, ties of the largest propensity included: converged, and the truth to 1e-4."""
  rng = np.random.default_rng(seed)
  o = np.sort(rng.uniform(0.1, 1.0, num_factors))[::-1]
  if tie:
    o[1] = o[0]
  r = rng.uniform(0.05, 0.9, 40)
  factors = np.stack([rng.choice(num_factors, per_item, replace=False) for _ in range(40)])
  items = np.repeat(np.arange(40)[:, None], per_item, axis=1)
  weights = rng.integers(1, 50, factors.shape).astype(np.float32)
  est = hv.harvest_propensities(items, factors, o[factors] * r[items], weights=weights, allow_unidentified=True)
  ok = np.asarray(est.identified)
  assert bool(est.converged) and ok.sum() >= 2
  np.testing.assert_allclose(np.asarray(est.propensities)[ok], (o / o[0])[ok], rtol=1e-4)


def _scipy_all_pairs(sets, pivot=0):
  """The all-pairs likelihood maximised by scipy's L-BFGS-B in float64."""
  c = np.asarray(sets.clicks, np.float64)
  n = np.asarray(sets.items, np.float64)
  t = c.shape[0]
  off = ~np.eye(t, dtype=bool)
  n = np.where(off, n, 0.0)
  c = np.where(off, np.minimum(c, n), 0.0)
  iu = np.triu_indices(t, 1)

  def unpack(z):
    b = np.zeros((t, t))
    b[iu] = z[t:]
    return z[:t], b + b.T

  def f(z):
    a, b = unpack(z)
    logp = np.minimum(-np.logaddexp(0, -a)[:, None] - np.logaddexp(0, -b), -1e-12)
    ll = c * logp + (n - c) * np.log(-np.expm1(logp))
    return -np.sum(np.where(n > 0, ll, 0.0)) / n.sum()

  z0 = np.zeros(t + len(iu[0]))
  res = scipy.optimize.minimize(f, z0, method="L-BFGS-B", options={"maxiter": 20000, "gtol": 1e-10, "ftol": 1e-15})
  o = scipy.special.expit(res.x[:t])
  return o / o[pivot], res.fun


@pytest.mark.parametrize("seed", range(2))
def test_all_pairs_matches_scipy_maximum_likelihood(seed):
  items, factors, clicks = _pbm_log(seed, queries=300, sessions=10)
  sets = hv.intervention_sets(items, factors, clicks, num_items=3000, num_factors=10)
  est = hv.all_pairs_estimate(sets)
  want, _ = _scipy_all_pairs(sets)
  assert bool(est.converged)
  np.testing.assert_allclose(est.propensities, want, rtol=2e-3)


def test_monte_carlo_recovery_and_the_naive_ctr_bias():
  """Three noisy rankers that put relevant items first: the harvesting estimators recover the
  PBM within the relative MAE of 0.05 that the SIF spec's T8 asks of a propensity model; the
  pooled CTR is biased (relevant items sit at the top), which is why harvesting exists."""
  items, factors, clicks = _pbm_log(0)
  truth = PBM / PBM[0]

  def mae_rel(method):
    p = hv.harvest_propensities(items, factors, clicks, method=method).propensities
    return float(np.mean(np.abs(np.asarray(p) / truth - 1)))

  errors = {m: mae_rel(m) for m in ("all_pairs", "pivot", "ctr")}
  assert errors["all_pairs"] < 0.05, errors
  assert errors["pivot"] < 0.05, errors
  assert errors["ctr"] > 0.15, errors
  assert errors["all_pairs"] < errors["pivot"], errors  # it uses every pair, not only the pivot's


def test_ctr_estimate_is_unbiased_on_randomised_lists():
  """RandTop-n: every session shows its list in a uniformly random order, so position is independent
  of relevance and the pooled CTR recovers the PBM (the same rankers' logs bias it, see above)."""
  rng = np.random.default_rng(3)
  queries, sessions = 2000, 20
  rel = rng.beta(1.0, 3.0, size=(queries, 10))
  order = np.argsort(rng.random((queries, sessions, 10)), axis=-1)
  items = (np.arange(queries)[:, None, None] * 10 + order).reshape(-1, 10)
  clicks = (rng.random(items.shape) < PBM * rel.reshape(-1)[items]).astype(np.float32)
  positions = np.broadcast_to(np.arange(10), items.shape)
  est = hv.harvest_propensities(items, positions, clicks, method="ctr")
  assert float(np.mean(np.abs(np.asarray(est.propensities) / (PBM / PBM[0]) - 1))) < 0.05


def _two_component_log():
  """Rankers only swap within positions {0, 1, 2} and within {3, 4}."""
  rng = np.random.default_rng(5)
  q, s = 300, 6
  base = np.arange(q * 5).reshape(q, 5)
  perm = np.stack([np.concatenate([rng.permutation(3), 3 + rng.permutation(2)]) for _ in range(q * s)]).reshape(q, s, 5)
  items = np.take_along_axis(np.broadcast_to(base[:, None], perm.shape), perm, -1).reshape(-1, 5)
  factors = np.broadcast_to(np.arange(5), items.shape)
  clicks = (rng.random(items.shape) < 0.5 * PBM[:5]).astype(np.float32)
  return items, factors, clicks


def test_identification_is_the_ig_component_of_the_pivot():
  items, factors, clicks = _two_component_log()
  rep = check_identifiability(items, factors)
  assert rep.components == [[0, 1, 2], [3, 4]]
  sets = hv.intervention_sets(items, factors, clicks, num_items=1500, num_factors=5)
  for pivot in (0, 4):
    est = hv.all_pairs_estimate(sets, pivot=pivot)
    labels = np.asarray(factor_components(items, factors, num_items=1500, num_factors=5)[0])
    np.testing.assert_array_equal(est.identified, labels == labels[pivot])
    assert np.isnan(np.asarray(est.propensities)[~np.asarray(est.identified)]).all()
    assert np.isfinite(np.asarray(est.propensities)[np.asarray(est.identified)]).all()
  with pytest.raises(ValueError, match=r"factors \[3, 4\] are not identified"):
    hv.harvest_propensities(items, factors, clicks)
  est = hv.harvest_propensities(items, factors, clicks, allow_unidentified=True)
  assert np.asarray(est.identified).tolist() == [True, True, True, False, False]


def test_pairs_without_clicks_identify_nothing():
  items = np.array([[0, 1], [1, 0]])
  factors = np.array([[0, 1], [0, 1]])
  for method in ESTIMATORS:
    est = hv.harvest_propensities(items, factors, np.zeros((2, 2)), method=method, allow_unidentified=True)
    # the pivot (factor 0) is 1 by definition on any log; nothing else is identified without clicks
    assert np.asarray(est.identified).tolist() == [True, False], method
    assert np.asarray(est.propensities)[0] == 1.0 and np.isnan(np.asarray(est.propensities)[1])


def test_chain_breaks_at_a_missing_link():
  items, factors, ctr, weights, _ = _population_records(0, num_factors=4, per_item=2)
  keep = ~np.isin(factors, [2]).any(axis=1)  # no item is shown at factor 2
  est = hv.harvest_propensities(
    items[keep], factors[keep], ctr[keep], weights=weights[keep], method="adjacent_chain", allow_unidentified=True
  )
  assert np.asarray(est.identified).tolist() == [True, True, False, False]


@pytest.mark.parametrize("method", (*ESTIMATORS, "ctr"))
def test_mask_equals_dropping_records(method):
  items, factors, clicks = _pbm_log(1, queries=60, sessions=6)
  where = np.random.default_rng(0).random(items.shape) < 0.7
  masked = hv.harvest_propensities(
    np.where(where, items, -1), factors, clicks, where=where, method=method, num_items=600, allow_unidentified=True
  )
  kept = hv.harvest_propensities(
    items[where], factors[where], clicks[where], method=method, num_items=600, num_factors=10, allow_unidentified=True
  )
  np.testing.assert_array_equal(masked.identified, kept.identified)
  np.testing.assert_allclose(masked.propensities, kept.propensities, rtol=1e-5)


def test_vmap_over_logs_equals_loop_and_compiles_once(assert_compiles_once):
  logs = [_pbm_log(s, queries=80, sessions=5) for s in range(3)]
  sets = [hv.intervention_sets(*log, num_items=800, num_factors=10) for log in logs]
  batched = jax.vmap(hv.all_pairs_estimate)(jax.tree.map(lambda *a: jnp.stack(a), *sets))
  for i, s in enumerate(sets):
    np.testing.assert_allclose(batched.propensities[i], hv.all_pairs_estimate(s).propensities, rtol=1e-4)

  def estimate(items, factors, clicks):
    return hv.all_pairs_estimate(hv.intervention_sets(items, factors, clicks, num_items=800, num_factors=10))

  for i, out in enumerate(assert_compiles_once(estimate, lambda i: (logs[i], {}))):
    np.testing.assert_allclose(out.propensities, batched.propensities[i], rtol=1e-4)


def test_bad_records_get_clear_errors():
  items, factors = np.array([[0, 1]]), np.array([[0, 1]])
  with pytest.raises(ValueError, match=r"unknown harvesting method 'em'"):
    hv.harvest_propensities(items, factors, np.ones((1, 2)), method="em")
  with pytest.raises(ValueError, match="share one shape"):
    hv.harvest_propensities(items, factors, np.ones((1, 3)))
  with pytest.raises(ValueError, match=r"factors\[\(0, 1\)\] = 7 is outside \[0, 5\)"):
    hv.harvest_propensities(items, np.array([[0, 7]]), np.ones((1, 2)), num_factors=5)
  with pytest.raises(ValueError, match=r"clicks\[\(0, 1\)\] = nan"):
    hv.harvest_propensities(items, factors, np.array([[1.0, np.nan]]))
  with pytest.raises(ValueError, match=r"clicks\[\(0, 0\)\] = 2.0"):
    hv.harvest_propensities(items, factors, np.array([[2.0, 0.0]]))
  with pytest.raises(ValueError, match=r"weights\[\(0, 1\)\] = -1.0"):
    hv.harvest_propensities(items, factors, np.ones((1, 2)), weights=np.array([[1.0, -1.0]]))
  with pytest.raises(ValueError, match="integer ids"):
    hv.harvest_propensities(items.astype(float), factors, np.ones((1, 2)))
  with pytest.raises(ValueError, match="too many"):
    hv.harvest_propensities(items, factors, np.ones((1, 2)), num_items=2**20, num_factors=2**11)
  with pytest.raises(ValueError, match="pivot 3 is outside"):
    hv.harvest_propensities(items, factors, np.ones((1, 2)), pivot=3)


@pytest.mark.parametrize(
  "name,identified", [("K=1", list(range(10))), ("K=2", [0, 1, 2, 3]), ("K=2_node_intervention", list(range(10)))]
)
def test_identifiability_paper_datasets(shared_data, name, identified):
  """The paper's logs with their click model's exact CTRs: all-pairs harvesting recovers the
  examination table on the pivot's IG component, and only there."""
  import json

  from ultr_jax.data import load_ultra

  cm = json.loads((shared_data / "identifiability" / "click_model.json").read_text())
  exam = np.asarray(cm["exam_prob"])
  ds = load_ultra(shared_data / "identifiability" / name, repeated_docs="allow")  # as published
  pos = ds.extras["positions"]
  ctr = exam[pos] * np.asarray(cm["click_prob"])[ds.labels.astype(int)]
  est = hv.harvest_propensities(ds.doc_ids, pos, ctr, where=ds.where, allow_unidentified=True)
  assert np.flatnonzero(est.identified).tolist() == identified
  np.testing.assert_allclose(np.asarray(est.propensities)[identified], (exam / exam[0])[identified], rtol=1e-3)


def _write_log(path, items, positions, clicks, *, sep="\t"):
  with open(path, "w") as fh:
    fh.write(sep.join(["session", "query_id", "doc_id", "position", "click"]) + "\n")
    for s in range(items.shape[0]):
      for j in range(items.shape[1]):
        fh.write(
          sep.join(
            [str(s), f"q{items[s, j] // 10}", f"doc-{items[s, j]}", str(positions[s, j] + 1), str(int(clicks[s, j]))]
          )
          + "\n"
        )


def test_read_click_log_gives_the_records(tmp_path):
  from ultr_jax.data import read_click_log

  items, factors, clicks = _pbm_log(2, queries=30, sessions=4)
  _write_log(tmp_path / "log.tsv", items, factors, clicks)
  log = read_click_log(tmp_path / "log.tsv")
  assert log.num_positions == 10 and log.num_items == len(np.unique(items))
  np.testing.assert_array_equal(log.positions, factors.ravel())
  np.testing.assert_array_equal(log.clicks, clicks.ravel())
  # the dense ids are a relabelling of the (query, doc) pairs
  pairs = {}
  for a, b in zip(items.ravel(), log.items):
    assert pairs.setdefault(a, b) == b
  assert len(set(pairs.values())) == len(pairs)
  est = hv.harvest_propensities(log.items, log.positions, log.clicks, method="pivot")
  want = hv.harvest_propensities(items, factors, clicks, method="pivot")
  np.testing.assert_allclose(est.propensities, want.propensities, rtol=1e-6)


def test_read_click_log_aggregated_rows(tmp_path):
  from ultr_jax.data import read_click_log

  p = tmp_path / "agg.csv"
  p.write_text("query_id,doc_id,position,click,impressions\nq,a,1,3,4\nq,b,2,1,4\nq,b,1,2,2\nq,a,2,0,2\n")
  log = read_click_log(p)
  np.testing.assert_allclose(log.clicks, [0.75, 0.25, 1.0, 0.0])
  np.testing.assert_allclose(log.weights, [4, 4, 2, 2])
  est = hv.harvest_propensities(log.items, log.positions, log.clicks, weights=log.weights, method="pivot")
  # C[1,0] = ctr(a,2) + ctr(b,2) = 0.25; C[0,1] = ctr(a,1) + ctr(b,1) = 1.75
  np.testing.assert_allclose(est.propensities, [1.0, 0.25 / 1.75], rtol=1e-6)


@pytest.mark.parametrize(
  "text,match",
  [
    ("query_id,doc_id,click\nq,a,1\n", r"log.csv:1: the header .* lacks the column\(s\) \['position'\]"),
    ("query_id,doc_id,position,click\nq,a,1,1\n\nq,b,2\n", r"log.csv:4: 3 fields, but the header names 4"),
    ("query_id,doc_id,position,click\nq,a,1,1\nq,b,two,0\n", r"log.csv:3: field 'position': 'two' is not an integer"),
    ("query_id,doc_id,position,click\nq,a,0,1\n", r"log.csv:2: field 'position': 0 is below the top position 1"),
    ("query_id,doc_id,position,click\nq,a,1,1\nq,b,2,2\n", r"log.csv:3: field 'click': 2.0 is not 0 or 1"),
    ("query_id,doc_id,position,click,impressions\nq,a,1,5,4\n", r"log.csv:2: field 'click': 5.0 is not a click count"),
    (
      "query_id,doc_id,position,click,impressions\nq,a,1,0,0\n",
      r"log.csv:2: field 'impressions': 0.0 is not a positive",
    ),
    ("query_id,doc_id,position,click\n", r"no data rows"),
    ("", r"log.csv:1: empty file"),
  ],
)
def test_read_click_log_errors_name_file_line_and_field(tmp_path, text, match):
  from ultr_jax.data import read_click_log

  (tmp_path / "log.csv").write_text(text)
  with pytest.raises(ValueError, match=match):
    read_click_log(tmp_path / "log.csv")


def _write_baidu_sessions(path, items, positions, clicks):
  """The same log as Baidu-ULTR's raw session file: a query line, then one line per shown document."""
  with open(path, "w") as fh:
    for s in range(items.shape[0]):
      fh.write(f"{s}\tq{items[s, 0] // 10}\t\n")  # every row's items are one query's
      for j in range(items.shape[1]):
        fh.write(
          "\t".join(
            [str(positions[s, j] + 1), f"doc-{items[s, j]}", "1\x012", "3", "0", str(int(clicks[s, j]))] + ["0"] * 27
          )
          + "\n"
        )


def _write_yandex_sessions(path, items, positions, clicks):
  """The same log as a Yandex Relevance Prediction Challenge file: a page record, then its clicks."""
  assert np.all(positions == np.arange(items.shape[1]))  # the page order is the position
  with open(path, "w") as fh:
    for s in range(items.shape[0]):
      fh.write(f"{s}\t0\tQ\tq{items[s, 0] // 10}\t213\t" + "\t".join(f"doc-{i}" for i in items[s]) + "\n")
      fh.writelines(f"{s}\t1\tC\tdoc-{items[s, j]}\n" for j in np.flatnonzero(clicks[s]))


# Each format's reader has its own tests; the binary runs on all three in the slow run, on Yandex's in the default.
@pytest.mark.parametrize(
  "fmt", [pytest.param("tsv", marks=pytest.mark.slow), pytest.param("baidu", marks=pytest.mark.slow), "yandex"]
)
def test_check_binary_on_a_click_log(tmp_path, subprocess_env, fmt):
  import json
  import pathlib
  import subprocess
  import sys

  items, factors, clicks = _two_component_log()
  assert np.all(items // 10 == items[:, :1] // 10)
  path = tmp_path / {"tsv": "log.tsv", "baidu": "part-00000.txt", "yandex": "train.txt"}[fmt]
  {"tsv": _write_log, "baidu": _write_baidu_sessions, "yandex": _write_yandex_sessions}[fmt](
    path, items, factors, clicks
  )
  out = tmp_path / "r.json"
  subprocess.run(
    [
      sys.executable,
      "experiments/identifiability/check.py",
      f"--click_log={path}",
      f"--click_log_format={fmt}",
      f"--out={out}",
    ],
    check=True,
    capture_output=True,
    env=subprocess_env,
    cwd=str(pathlib.Path(__file__).parent.parent),
  )
  r = json.loads(out.read_text())
  assert r["identifiable"] is False and r["components"] == [[0, 1, 2], [3, 4]]
  want = hv.harvest_propensities(items, factors, clicks, allow_unidentified=True).propensities
  assert r["propensities"]["all_pairs"][3:] == [None, None]
  np.testing.assert_allclose(r["propensities"]["all_pairs"][:3], np.asarray(want)[:3], rtol=1e-5)
  assert r["propensities"]["ctr"][4] is not None  # the naive CTR always answers, biased or not


@pytest.mark.parametrize(
  "items, clicks",
  [
    ([[0, 2], [2, 1]], [[0.0, 0.0], [1.0, 1.0]]),  # item 2: clicked at factor 1 only, its pair with 0 one-sided
    ([[0, 1], [1, 0]], [[0.0, 1.0], [0.0, 0.0]]),  # the one pair's clicks all at factor 1
  ],
)
def test_all_pairs_without_a_finite_maximum_is_an_error_naming_the_pairs(items, clicks):
  """A tiny log whose pair likelihood has no finite maximum: the fit would run off (1e-9, 1e15), never a number."""
  items, clicks = np.array(items), np.array(clicks)
  factors = np.tile([0, 1], (len(items), 1))
  raw = hv.all_pairs_estimate(hv.intervention_sets(items, factors, clicks, num_items=3, num_factors=2))
  assert not 1e-6 < float(raw.propensities[1]) < 1e6  # what the estimator alone returns
  with pytest.raises(ValueError, match=r"all_pairs: the estimates of factors \[1\] ran off .* no finite maximum"):
    hv.harvest_propensities(items, factors, clicks, method="all_pairs")
  est = hv.harvest_propensities(items, factors, clicks, method="all_pairs", allow_unidentified=True)
  assert np.isnan(est.propensities[1]) and not bool(est.identified[1]) and float(est.propensities[0]) == 1.0
