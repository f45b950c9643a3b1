"""The one-report study: every method x bias cell, the identifiability column and the files."""

import csv
import importlib.util
import json
import pathlib

import numpy as np
import pytest

from ultr_jax import simulation
from ultr_jax.data import RankingDataset
from ultr_jax.testing import assert_matches_expected
from ultr_jax.train import available_methods
from ultr_jax.studies import report

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _config(arg):
  spec = importlib.util.spec_from_file_location(
    "report_config", ROOT / "experiments" / "report" / "configs" / "default.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_default_config_covers_every_method_family_and_bias():
  c = _config("")
  methods = set(c.methods)
  assert {
    "naive",
    "ips",
    "snips",
    "affine",
    "ips_policy_aware",
    "dla",
    "regression_em",
    "two_tower",
    "paird",
    "vectorization",
    "lbd",
    "cld",
    "cld_pair",
  } <= methods
  assert {"sif_full", "sif_dr", "dr", "sif_position", "ips_trust_oracle", "ips_dpenalty"} <= methods
  assert {"click_model_ubm", "click_model_dbn"} <= methods
  sif = {m for m in available_methods() if m.startswith("sif_")} | {"dr", "ips_trust_oracle", "ips_dpenalty"}
  assert sif <= set(_config("full").methods)  # + the SIF channel ablations
  assert set(_config("full").methods) <= set(available_methods())
  assert len(set(c.biases)) == len(c.biases)
  for bias in c.biases:  # every column has a bias config the report can lay out, and a click model
    report._layout(c.bias_configs[bias])
    assert c.bias_configs[bias].click_model.name
  # Every click model of the simulators has its column (pbm_table is the pbm column's model, the cascade is DCM
  # at continuation 0).
  assert set(simulation.click_models()) - {"pbm_table", "cascade", "sdbn", "mixture", "position_trust"} <= set(c.biases)
  assert c.num_seeds >= 2  # intervals need seeds
  with pytest.raises(ValueError, match="unknown config variant"):
    _config("big")


def _ds(doc_ids):
  doc_ids = np.asarray(doc_ids)
  q, l = doc_ids.shape
  return RankingDataset(
    np.zeros((q, l, 1), np.float32), np.zeros((q, l), np.float32), np.ones((q, l), bool), np.arange(q), doc_ids=doc_ids
  )


def test_logged_identifiability():
  # Every document shown at one fixed position: the IG has no edges, one component per position.
  rep = report.logged_identifiability(_ds([[0, 1, 2], [3, 4, 5]]))
  assert not rep.identifiable and rep.num_components == 3
  # Document 1 at positions 1 and 0, document 4 at 2 and 1: connected.
  assert report.logged_identifiability(_ds([[0, 1, 4], [1, 4, 5]])).identifiable
  # Only the displayed top 2 count: position 2 is no node, and 0-1 are joined by document 1.
  rep = report.logged_identifiability(_ds([[0, 1, 7], [1, 4, 5]]), top_k=2)
  assert rep.identifiable and rep.to_dict()["num_bias_factors"] == 2
  # (context, position) factors: position p under contexts 0 and 1 is two nodes, joined by the
  # document shown at p in both; nothing joins the positions.
  rep = report.logged_identifiability(_ds([[0, 1], [0, 1]]), contexts=np.array([[0, 0], [1, 1]]))
  assert rep.to_dict()["num_bias_factors"] == 4 and rep.components == [[0, 2], [1, 3]]


def test_a_stochastic_logging_policy_moves_documents_and_carries_policy_examination():
  # Two displays of one list, in order and rotated: each document at two positions, so identifiable; reversed,
  # the middle document never moves and its position stays apart.
  ds = _ds([[0, 1, 2]])
  assert not report.logged_identifiability(ds).identifiable
  assert report.logged_identifiability(ds, positions=np.array([[[0, 1, 2]], [[1, 2, 0]]])).identifiable
  rep = report.logged_identifiability(ds, positions=np.array([[[0, 1, 2]], [[2, 1, 0]]]))
  assert rep.components == [[0, 2], [1]]
  # With a top-2 cut only positions 0 and 1 are nodes; document 0 is at both.
  rep = report.logged_identifiability(ds, top_k=2, positions=np.array([[[0, 1, 2]], [[1, 2, 0]]]))
  assert rep.identifiable and rep.to_dict()["num_bias_factors"] == 2
  c = _config("smoke")
  bias = c.bias_configs.topk_sample
  data = report.make_bias_data(c)
  train, _, _ = report._bias_datasets(bias, data, 0)
  click_fn, cfg = report.make_bias_click_fn(bias, train, top_k=c.logging_policy.top_k)
  rho = report.with_policy_examination(bias, train, cfg, seed=0, num_samples=200).extras["policy_examination"]
  assert rho.shape == train.where.shape and np.all(rho[~train.where] == 0)
  assert np.all(rho[train.where] > 0)  # a Plackett-Luce display shows every candidate now and then
  pos = report.sampled_display_positions(bias, train, seed=0, num_displays=3)
  assert pos.shape == (3,) + train.where.shape
  np.testing.assert_array_equal(
    np.sort(pos[:, 0, : train.where[0].sum()], -1),
    np.broadcast_to(np.arange(train.where[0].sum()), (3, train.where[0].sum())),
  )
  assert report.with_policy_examination(c.bias_configs.topk, train, cfg, seed=0) is train  # a fixed order: none


def test_default_grid_plan_has_a_number_or_a_reason_for_every_cell():
  c = _config("smoke")
  full = _config("full")
  c.methods, c.biases = full.methods, full.biases
  plan = report.plan_cells(c)
  assert list(plan) == list(full.biases)
  for bias, row in plan.items():
    assert list(row) == list(full.methods)
    for method, reason in row.items():
      assert reason is None or reason.startswith("n/a: "), (bias, method, reason)
  trainable = {(b, m) for b, row in plan.items() for m, r in row.items() if r is None}
  for bias in full.biases:
    for m in (
      "naive",
      "ips",
      "dla",
      "regression_em",
      "two_tower",
      "paird",
      "lbd",
      "sif_full",
      "dr",
      "click_model_ubm",
      "click_model_dbn",
    ):
      assert (bias, m) in trainable
    for m in ("cld", "cld_pair"):
      assert ((bias, m) in trainable) == (bias in ("topk", "topk_sample")), (bias, m)
      if bias not in ("topk", "topk_sample"):
        assert "top-k selection log" in plan[bias][m]
    # Policy-aware IPS needs a stochastic logging policy's expected examination.
    assert ((bias, "ips_policy_aware") in trainable) == (bias == "topk_sample"), bias
    for m in ("ips_trust_oracle", "ips_dpenalty"):
      assert ((bias, m) in trainable) == (bias == "position_trust"), (bias, m)
    # The affine correction needs the affine trust model's eps+ / eps- (SIF's position_trust is another model).
    assert ((bias, "affine") in trainable) == (bias == "trust"), bias
    if bias != "trust":
      assert plan[bias]["affine"].startswith("n/a: " + report.KEY_REASONS["eps_plus"]), plan[bias]["affine"]


def test_smoke_run_writes_every_cell(tmp_path):
  c = _config("smoke")
  results = report.run_report(c, str(tmp_path))
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved.keys() == results.keys()
  for bias in c.biases:
    ig = saved["_identifiability"][bias]
    assert isinstance(ig["identifiable"], bool) and ig["num_components"] >= 1
    assert ig["label"].startswith("yes" if ig["identifiable"] else "no")
    for method in c.methods:
      cell = saved[bias][method]
      if "n/a" in cell:
        assert cell["n/a"].startswith("n/a: ")
      else:
        assert 0.0 <= cell["ndcg@10"] <= 1.0 and len(cell["per_seed"]["ndcg@10"]) == c.num_seeds
  assert "n/a" in saved["pbm"]["cld"] and "ndcg@10" in saved["topk"]["cld"]
  assert "n/a" in saved["topk"]["ips_trust_oracle"]
  table = (tmp_path / "table.md").read_text().splitlines()
  assert table[0] == "| bias | identifiability (IG) | " + " | ".join(c.methods) + " |"
  for bias in c.biases:
    row = next(line for line in table if line.startswith(f"| {bias} |"))
    cells = [x.strip() for x in row.strip("|").split("|")]
    assert len(cells) == len(c.methods) + 2
    assert cells[1] == saved["_identifiability"][bias]["label"]
    for method, text in zip(c.methods, cells[2:]):
      assert text.startswith("n/a: ") or "±" in text, (bias, method, text)
  with open(tmp_path / "table.csv") as f:
    rows = list(csv.reader(f))
  assert rows[0][:2] == ["bias", "identifiability (IG)"] and len(rows) == len(c.biases) + 1
  assert (tmp_path / "heatmap.png").stat().st_size > 1000
  # Learning curves: each trained cell keeps its fit's history (each evaluation, per seed); a PNG per bias.
  evals = list(range(c.train.eval_every, c.train.steps + 1, c.train.eval_every))
  for bias in c.biases:
    history = saved[bias]["two_tower"]["history"]
    assert evals and [h["step"] for h in history] == evals and all(len(h["train/loss"]) == c.num_seeds for h in history)
    assert all(("valid/ndcg@10" in h) == c.select_on_valid for h in history)  # smoke selects on nothing
    assert (tmp_path / "curves" / f"{bias}.png").stat().st_size > 1000
  assert "history" not in saved["pbm"]["cld"]  # n/a cells trained nothing
  # Held-out click prediction: the click model methods and the true model, per bias.
  for bias in c.biases:
    truth = saved["_clicks"][bias]["true_model"]["click_perplexity"]
    assert 1.0 < truth < 2.0 and "click_perplexity" in saved[bias]["two_tower"]
    assert saved["_clicks"][bias]["best_by_perplexity"] == "two_tower"  # the only method that predicts clicks
  assert "click_perplexity" not in saved["topk"]["cld"]  # CLD predicts no clicks
  clicks = (tmp_path / "clicks.md").read_text().splitlines()
  assert clicks[0] == "| method | pbm | topk |"
  assert clicks[2].startswith("| two_tower | ") and clicks[3].startswith(f"| {report.CLICK_TRUTH} | ")
  assert_matches_expected(saved, "report_smoke")  # expected_metrics/report_smoke.json


@pytest.mark.parametrize("selection", ["display", "topk"])
def test_held_out_click_log_and_the_true_models_perplexity_against_numpy(selection):
  """Sessions of the test lists shown as in training (the logged top k, or every candidate with the top
  k shown); the true PBM's click log-likelihood and perplexity against a NumPy loop over ranks."""
  rng = np.random.default_rng(0)
  q, l, k, sessions = 5, 6, 4, 300
  labels = rng.integers(0, 5, size=(q, l)).astype(np.float32)
  where = np.arange(l) < np.array([6, 6, 3, 5, 6])[:, None]
  test = RankingDataset(
    rng.normal(size=(q, l, 2)).astype(np.float32),
    np.where(where, labels, 0),
    where,
    np.arange(q),
    extras={"logging_score": rng.normal(size=(q, l)).astype(np.float32)},
  )
  cfg = {"name": "pbm_table", "eta": 1.0, "eps": 0.1, **({"top_k": k} if selection == "topk" else {})}
  log, truth = report.held_out_click_log(
    test, simulation.make_click_fn(cfg), list_size=k if selection == "display" else l, sessions=sessions, seed=3
  )
  size = k if selection == "display" else l
  assert log.num_queries == q * sessions and log.list_size == size
  np.testing.assert_array_equal(log.labels, np.repeat(test.labels[:, :size], sessions, axis=0))
  np.testing.assert_array_equal(
    log.extras["logging_score"], np.repeat(test.extras["logging_score"][:, :size], sessions, axis=0)
  )
  shown = np.repeat(where[:, :size], sessions, axis=0) & (np.arange(size) < k)
  np.testing.assert_array_equal(log.where, shown)
  clicks = log.extras["clicks"]
  assert clicks.shape == shown.shape and np.all(clicks[~shown] == 0) and clicks[shown].mean() > 0.05
  table = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20])
  p = (0.1 + 0.9 * (2**log.labels - 1) / 15) * table[:size]
  ll = clicks * np.log(p) + (1 - clicks) * np.log(1 - p)
  per_rank = [np.exp(-ll[shown[:, r], r].mean()) for r in range(size) if shown[:, r].any()]
  assert truth["click_ll"] == pytest.approx(ll[shown].mean(), rel=1e-5)
  assert truth["click_perplexity"] == pytest.approx(np.mean(per_rank), rel=1e-5)
  with pytest.raises(ValueError, match="sessions_per_list must be >= 1"):
    report.held_out_click_log(test, simulation.make_click_fn(cfg), list_size=k, sessions=0)


def test_any_bias_can_face_top_k_selection():
  """selection="topk" on the pbm users lists every candidate and shows the logging policy's top k: the topk column."""
  c = _config("smoke")
  c.methods, c.biases = ("naive", "cld"), ("pbm", "topk")
  c.bias_configs.pbm.selection = "topk"
  assert report.plan_cells(c) == {"pbm": {"naive": None, "cld": None}, "topk": {"naive": None, "cld": None}}
  saved = report.run_report(c, None)
  assert saved["_identifiability"]["pbm"] == saved["_identifiability"]["topk"]
  for method in c.methods:
    assert saved["pbm"][method]["per_seed"] == saved["topk"][method]["per_seed"], method
  c.bias_configs.pbm.selection = "shown"
  with pytest.raises(ValueError, match=r"selection must be one of \('display', 'topk'\), got 'shown'"):
    report.plan_cells(c)


def test_online_learners_as_columns(tmp_path):
  c = _config("smoke")
  c.methods, c.online.methods = ("naive",), ("pdgd", "nsgd")
  c.biases = ("pbm", "position_trust", "context_pbm", "topk")
  plan = report.plan_cells(c)
  for bias, row in plan.items():  # the lists carry the contexts and logging scores those users read
    assert row == {"naive": None, "online_pdgd": None, "online_nsgd": None}, (bias, row)
  lists = report.make_bias_data(c)["candidates"][0]  # no contexts drawn: context_pbm's users cannot click
  assert (
    report.online_not_applicable_reason({"name": "context_pbm", "num_contexts": 2}, lists, c)
    == "n/a: online users: click_fn: context_pbm needs batch['context']"
  )
  c.biases = ("pbm", "position_trust")
  saved = report.run_report(c, str(tmp_path))
  for column in ("online_pdgd", "online_nsgd"):
    for bias in c.biases:
      cell = saved[bias][column]
      assert 0.0 < cell["ndcg@10"] <= 1.0 and 0.0 < cell["online_ndcg@10"] <= 1.0
      assert len(cell["per_seed"]["ndcg@10"]) == c.num_seeds
  assert saved["_meta"]["online"]["num_impressions"] == 100
  table = (tmp_path / "table.md").read_text()
  assert table.splitlines()[0] == "| bias | identifiability (IG) | naive | online_pdgd | online_nsgd |"
  assert "online_<method>: an online learner" in table


def test_pdgd_observation_analysis_runs_and_its_pair_sets_add_up():
  spec = importlib.util.spec_from_file_location(
    "pdgd_observation", ROOT / "experiments" / "report" / "pdgd_observation.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  out = module.main(
    smoke=True, bias_name="individual", reps=3, variants=("pdgd considered/debias/probability", "naive listwise")
  )
  pairs = out["pairs"]
  # 'all' is 'considered' plus 'below'; 'above' is part of 'considered'.
  assert pairs["all"]["pairs_per_draw"] == pytest.approx(
    pairs["considered"]["pairs_per_draw"] + pairs["below"]["pairs_per_draw"]
  )
  assert 0 < pairs["above"]["pairs_per_draw"] <= pairs["considered"]["pairs_per_draw"]
  assert all(np.isfinite(v) for s in pairs.values() for v in s.values())
  assert len(out["learners"]) == 2
  for entry in out["learners"].values():
    assert all(np.isfinite(entry["b_g/b_y"])) and all(0 < v <= 1 for v in entry["ndcg@10"])
    assert sorted(entry["gradient_g_per_y"]) == ["log_probability", "probability"]
    assert all(np.isfinite(v) for r in entry["gradient_g_per_y"].values() for v in r)
  # Without individual observation there is no observation gap and no slope to report.
  pbm = module.main(smoke=True, bias_name="pbm", reps=2, variants=())
  assert all(s["observation_gap"] == 0.0 for s in pbm["pairs"].values()) and not pbm["learners"]
  rng = np.random.default_rng(0)
  scores, labels = rng.normal(size=(4, 5)), rng.integers(0, 3, (4, 5)).astype(float)
  where = np.ones((4, 5), bool)
  assert np.isnan(module.observation_slopes(scores, labels, np.ones((4, 5)), where))
  g = rng.normal(size=(4, 5))
  assert module.observation_slopes(2 * labels - 3 * g, labels, g, where) == pytest.approx(-1.5)


def test_held_out_sessions_of_a_stochastic_display_are_stored_in_display_order():
  from ultr_jax import data, simulation  # noqa: PLC0415

  test = data.make_synthetic(num_train=1, num_valid=1, num_test=4, list_size=6, num_features=2, seed=1).test
  test = test.with_extras(
    logging_score=np.where(test.where, np.random.default_rng(0).normal(size=test.where.shape), 0.0).astype(np.float32)
  )
  fn = simulation.stochastic_logging_click_fn(simulation.make_click_fn({"name": "pbm_table", "top_k": 3}))
  log, truth = report.held_out_click_log(test, fn, list_size=6, sessions=50, seed=3)
  # Each stored session shows its top 3 first: only the first 3 items of a list are shown (where).
  assert not log.where[:, 3:].any() and log.where[:, :3].sum() == 3 * log.num_queries
  # The displays differ between sessions of one query (a document moves), and clicks stay with documents.
  first = log.features[:50, 0, 0]
  assert len(np.unique(first)) > 1
  assert 1.0 < truth["click_perplexity"] < 2.0
