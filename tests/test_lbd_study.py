"""Tests of the LBD study pieces: the individual-level click simulator (spec-lbd 5.1.1), crux selection,
the grid selection and the smoke binary."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as scipy_stats

from ultr_jax import simulation
from ultr_jax.testing import assert_matches_expected
from ultr_jax.studies import lbd as S

V = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])
R = np.array([0.1, 0.16, 0.28, 0.52, 1.0])


def _batch(q=6, l=10, f=12, seed=0):
  rng = np.random.default_rng(seed)
  return {
    "features": jnp.asarray(rng.uniform(-1, 1, (q, l, f)), jnp.float32),
    "labels": jnp.asarray(rng.integers(0, 5, (q, l)), jnp.float32),
    "where": jnp.ones((q, l), bool),
  }


CRUX = list(range(10))


def test_eta_zero_is_the_pbm_exactly():
  b = _batch()
  ind = S.make_individual_click_fn(CRUX, 0.0, redraw=False)(jax.random.key(3), b)
  pbm = simulation.make_click_fn({"name": "pbm_table", "eta": 1.0, "eps": 0.1})(jax.random.key(3), b)
  np.testing.assert_array_equal(ind["examination"], pbm["examination"])
  np.testing.assert_array_equal(ind["click_prob"], pbm["click_prob"])
  np.testing.assert_array_equal(ind["clicks"], pbm["clicks"])


def test_examination_formula_and_w_from_batch():
  b = _batch()
  eta = 0.3
  out = S.make_individual_click_fn(CRUX, eta, redraw=False)(jax.random.key(0), b)
  x = np.asarray(b["features"], np.float64)[..., CRUX]
  e = np.maximum(1 + x @ (eta * S.LBD_BASE_W), 0)
  expected = V[None, :] ** e
  np.testing.assert_allclose(out["examination"], expected, rtol=1e-5)
  np.testing.assert_allclose(out["click_prob"], expected * R[np.asarray(b["labels"], int)], rtol=1e-5)
  b2 = {**b, "lbd_w": jnp.tile(jnp.float32(eta) * S.LBD_BASE_W.astype(np.float32), (6, 1))}
  out2 = S.make_individual_click_fn(CRUX, None, redraw=False)(jax.random.key(0), b2)
  np.testing.assert_allclose(out2["examination"], out["examination"], rtol=1e-6)


def test_exponent_bounds_at_eta_0_1():
  # x' at +-1: the exponent spans [1 - |w|_1, 1 + |w|_1] = [0.484, 1.516] (spec 4.3).
  w = 0.1 * S.LBD_BASE_W
  np.testing.assert_allclose(np.abs(w).sum(), 0.5164, atol=1e-4)
  f = np.zeros((2, 10, 10), np.float32)
  f[0] = np.sign(w)  # maximises w.x
  f[1] = -np.sign(w)
  b = {"features": jnp.asarray(f), "labels": jnp.full((2, 10), 4.0), "where": jnp.ones((2, 10), bool)}
  exam = np.asarray(S.make_individual_click_fn(CRUX, 0.1, redraw=False)(jax.random.key(0), b)["examination"])
  np.testing.assert_allclose(exam[0], V**1.5164, rtol=1e-4)
  np.testing.assert_allclose(exam[1], V**0.4836, rtol=1e-4)
  assert exam[1, 0] < 0.831 and exam[0, 0] > 0.556 and exam[0, 9] > 0.013 and exam[1, 9] < 0.257
  # the clip at 0 binds for large eta: o = 1
  exam6 = np.asarray(S.make_individual_click_fn(CRUX, 0.6, redraw=False)(jax.random.key(0), b)["examination"])
  np.testing.assert_allclose(exam6[1], 1.0)


def test_monte_carlo_ctr_per_grade_and_position():
  # one document per grade at every position, eta = 0.2, many sessions
  eta, sessions = 0.2, 20000
  rng = np.random.default_rng(1)
  f = rng.uniform(-1, 1, (5, 10, 10)).astype(np.float32)
  labels = np.repeat(np.arange(5, dtype=np.float32)[:, None], 10, axis=1)
  b = {"features": jnp.asarray(f), "labels": jnp.asarray(labels), "where": jnp.ones((5, 10), bool)}
  fn = jax.jit(jax.vmap(S.make_individual_click_fn(CRUX, eta, redraw=False), in_axes=(0, None)))
  out = fn(jax.random.split(jax.random.key(0), sessions), b)
  ctr = np.asarray(out["clicks"]).mean(0)
  e = np.maximum(1 + f @ (eta * S.LBD_BASE_W), 0)
  p = R[:, None] * V[None, :] ** e
  se = np.sqrt(p * (1 - p) / sessions)
  z = np.abs(ctr - p) / se
  assert z.max() < 4.5 and np.mean(z < 3) > 0.98


def test_lists_without_clicks_are_redrawn_and_keep_the_conditional_law():
  b = _batch(q=400, l=3)
  b["labels"] = jnp.zeros_like(b["labels"])  # low CTR: most raw draws have no click
  fn = jax.jit(S.make_individual_click_fn(CRUX[:10], 0.1))
  raw = S.make_individual_click_fn(CRUX, 0.1, redraw=False)(jax.random.key(0), b)
  assert np.mean(np.asarray(raw["clicks"]).sum(-1) == 0) > 0.5
  out = fn(jax.random.key(0), b)
  assert np.all(np.asarray(out["clicks"]).sum(-1) > 0)
  # all-padding lists stay without clicks and do not loop forever
  b["where"] = b["where"].at[0].set(False)
  out = fn(jax.random.key(1), b)
  assert float(out["clicks"][0].sum()) == 0.0


def test_redraw_conditional_click_rate_single_item():
  # one item with click probability p: after re-drawing every click is 1; with two items the
  # conditional probability P(c1 = 1 | c != 0) = p1 / (1 - (1-p1)(1-p2)).
  p = jnp.array([0.3, 0.2])
  fn = S.redraw_no_click(lambda k, b: {"clicks": (jax.random.uniform(k, b["where"].shape) < p).astype(jnp.float32)})
  out = jax.jit(fn)(jax.random.key(0), {"where": jnp.ones((40000, 2), bool)})
  rate = float(out["clicks"][:, 0].mean())
  expected = 0.3 / (1 - 0.7 * 0.8)
  assert abs(rate - expected) < 3 * np.sqrt(expected * (1 - expected) / 40000)


def test_synthetic_data_and_crux_selection():
  splits, u = S.make_lbd_synthetic(300, 50, 50, num_features=50, seed=0)
  assert splits.train.features.shape == (300, 20, 50)
  x = splits.train.features
  assert x.min() >= -1 and x.max() <= 1
  hist = np.bincount(splits.train.labels.astype(int).ravel(), minlength=5) / splits.train.labels.size
  np.testing.assert_allclose(hist, [0.5, 0.25, 0.15, 0.07, 0.03], atol=0.03)
  top = set(np.argsort(-np.abs(u))[:10].tolist())
  got = set(S.select_crux_features(splits.train, 10).tolist())
  assert len(top & got) >= 8, (sorted(top), sorted(got))


def test_grid_members_and_selection():
  members = S.grid_members([1.0, 100.0], [0.1, 0.2])
  assert len(members) == 1 + 2 + 2 + 4 + 1
  scores = np.arange(len(members), dtype=float)
  chosen = S.select_on_validation(members, scores)
  assert members[chosen["lbd"]] == ("lbd", 100.0, 0.2)
  assert members[chosen["lbd_lips"]] == ("lbd_lips", 100.0, 0.0)
  assert members[chosen["unlimited"]] == ("unlimited", 0.0, 0.0)


def test_smoke_binary_writes_results(tmp_path, subprocess_env):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = subprocess_env
  cmd = [
    sys.executable,
    os.path.join(root, "experiments/lbd/main.py"),
    "--config=" + os.path.join(root, "experiments/lbd/configs/default.py:smoke"),
    f"--workdir={tmp_path}",
    "--config.etas=(0.0, 0.6)",
    "--config.lams=(100.0,)",
    "--config.ts=(0.2,)",
    "--config.baselines=('labeled_data', 'click_data', 'two_tower')",
    "--config.rankers=('linear',)",
    f"--config.compilation_cache_dir={tmp_path}/cache",
    # one grid job per eta: the recorded (unsplit) numbers must not change
    "--config.grid_etas_per_job=1",
  ]
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.load(open(tmp_path / "results.json"))
  for eta in ("eta=0", "eta=0.6"):
    for m in ("labeled_data", "click_data", "two_tower", "unlimited", "lbd_lips", "lbd_ber", "lbd"):
      cell = res[eta][f"linear/{m}"]["ndcg@10"]
      assert 0 <= cell["mean"] <= 1 and cell["std"] >= 0
    assert res[eta]["selected"]["linear"]["lbd"] == {"lam": 100.0, "t": 0.2}
  assert "E1" in res["_effects"] and "E5" in res["_effects"]
  for name in ("fig3a_linear.png", "fig3b_linear.png", "fig4_linear.png", "table.md"):
    assert (tmp_path / name).exists()
  # The reduced grid's own numbers (expected_metrics/lbd_smoke.json is the plain smoke config's).
  assert_matches_expected(res, str(pathlib.Path(__file__).parent / "data" / "lbd_smoke_test_grid.json"))


def test_effects_compare_lbd_with_click_data_on_the_same_tower():
  # fake per-seed results: LBD below the foundation's Click Data but above Click Data on the LBD tower
  etas = [0.0, 0.6]
  methods = {
    "lbd": 0.80,
    "unlimited": 0.70,
    "lbd_lips": 0.79,
    "lbd_ber": 0.78,
    "click_data": 0.85,
    "click_data_lbd_tower": 0.75,
    "two_tower": 0.72,
    "dla": 0.74,
  }
  noise = np.array([0.0, 0.001, -0.001])
  res = {
    f"eta={e:g}": {
      **{f"linear/{m}": {"ndcg@10": {"per_seed": (v + noise).tolist()}} for m, v in methods.items()},
      "selected": {"linear": {"lbd": {"lam": 100.0 if e == 0 else 1.0, "t": 0.1 if e == 0 else 0.4}}},
    }
    for e in etas
  }
  e3 = S.effects(res, etas)["E3"]["linear"]
  assert not e3["lbd_not_significantly_below_click_at_every_eta"]
  assert e3["lbd_not_significantly_below_same_tower_click_at_every_eta"]
  np.testing.assert_allclose([v["diff"] for v in e3["lbd_minus_click_data_lbd_tower"]], [0.05, 0.05], atol=1e-12)
  assert e3["unlimited_below_same_tower_click_at_top"]
  assert S.effects(res, etas)["E5"]["linear"]["drift_as_paper"]


def test_effects_e1_ranker_order_is_a_welch_interval_per_eta():
  etas = [0.1, 0.6]
  rng = np.random.default_rng(0)
  gaps = {"linear": [0.20, 0.30], "dnn": [0.05, 0.35]}
  res = {}
  for i, e in enumerate(etas):
    cells = {}
    for r in ("linear", "dnn"):
      unl = 0.7 + 0.01 * rng.normal(size=3)
      cells[f"{r}/unlimited"] = {"ndcg@10": {"per_seed": unl.tolist()}}
      cells[f"{r}/lbd"] = {"ndcg@10": {"per_seed": (unl + gaps[r][i] + 0.002 * rng.normal(size=3)).tolist()}}
      cells[f"{r}/lbd_lips"] = cells[f"{r}/lbd_ber"] = cells[f"{r}/unlimited"]
    cells["selected"] = {r: {"lbd": {"lam": 1.0, "t": 0.4}} for r in ("linear", "dnn")}
    res[f"eta={e:g}"] = cells
  e1 = S.effects(res, etas)["E1"]
  order = e1["linear_minus_dnn_gap"]
  for i, e in enumerate(etas):
    lin = np.subtract(
      res[f"eta={e:g}"]["linear/lbd"]["ndcg@10"]["per_seed"],
      res[f"eta={e:g}"]["linear/unlimited"]["ndcg@10"]["per_seed"],
    )
    dnn = np.subtract(
      res[f"eta={e:g}"]["dnn/lbd"]["ndcg@10"]["per_seed"], res[f"eta={e:g}"]["dnn/unlimited"]["ndcg@10"]["per_seed"]
    )
    ref = scipy_stats.ttest_ind(lin, dnn, equal_var=False).confidence_interval(0.90)
    np.testing.assert_allclose(order[f"eta={e:g}"]["interval"], [ref.low, ref.high], rtol=1e-12)
    np.testing.assert_allclose(order[f"eta={e:g}"]["diff"], lin.mean() - dnn.mean(), rtol=1e-12)
  assert order["eta=0.1"]["interval"][0] > 0 and order["eta=0.6"]["interval"][1] < 0
  assert not e1["linear_gap_larger_significant"]  # holds at 0.1, reversed at 0.6


def test_tied_with_best_keeps_the_members_validation_cannot_separate():
  base = np.array([0.90, 0.92, 0.91])
  rows = [
    {"variant": "lbd", "lam": lam, "t": t, "valid_per_seed": (base + off).tolist()}
    for lam, t, off in (
      (1.0, 0.1, np.array([-0.002, 0.003, -0.002])),  # tied: differences change sign
      (1e4, 0.4, np.array([0.0, 0.0, 0.0])),  # the best
      (1e2, 0.2, np.array([-0.010, -0.011, -0.009])),
    )
  ]  # behind in every seed
  rows.append({"variant": "lbd_ber", "lam": 0.0, "t": 0.4, "valid_per_seed": (base + 1).tolist()})
  tied = S.tied_with_best(rows)
  assert [(r["lam"], r["t"]) for r in tied] == [(1e4, 0.4), (1.0, 0.1)]
  np.testing.assert_allclose(tied[1]["behind_best"], 0.001 / 3, rtol=1e-9)
  assert S.tied_with_best([{k: v for k, v in r.items() if k != "valid_per_seed"} for r in rows]) is None
  # effects() reports the tie sets per eta when every grid row carries per-seed validation scores.
  cell = {"ndcg@10": {"per_seed": base.tolist()}}
  res = {
    f"eta={e:g}": {
      **{f"linear/{m}": cell for m in ("lbd", "unlimited", "lbd_lips", "lbd_ber")},
      "selected": {"linear": {"lbd": {"lam": 1e4, "t": 0.4}}},
      "grid": {"linear": rows},
    }
    for e in (0.1, 0.6)
  }
  e5 = S.effects(res, [0.1, 0.6])["E5"]["linear"]
  assert [(r["lam"], r["t"]) for r in e5["tied_with_best"]["eta=0.6"]] == [(1e4, 0.4), (1.0, 0.1)]


def test_validation_and_test_lists_keep_every_candidate():
  # spec 2.7: validation/test queries are scored over the full candidate list; only training
  # lists are cut to the displayed top k. (The validation set used to be cut to the top 10,
  # so (lambda, t) was selected on a re-ranking of the logged top 10 only.)
  import importlib.util

  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  spec = importlib.util.spec_from_file_location(
    "lbd_default_config", os.path.join(root, "experiments/lbd/configs/default.py")
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  cfg = module.get_config("smoke")
  train, valid, test, crux, _ = S.prepare_lists(cfg)
  assert train.list_size == cfg.logging_policy.top_k < cfg.data.list_size
  assert valid.list_size == test.list_size == cfg.data.list_size
  assert valid.where.all() and len(crux) == 10
