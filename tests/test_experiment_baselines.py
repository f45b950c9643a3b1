"""End-to-end test of the baselines binary on its smoke config."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from ultr_jax.testing import assert_matches_expected

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXPECTED_METHODS = ("naive", "ips", "snips", "dla", "regression_em", "two_tower", "paird", "full_info")
METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "err@10")


def _config(arg):
  spec = importlib.util.spec_from_file_location(
    "baselines_config", ROOT / "experiments" / "baselines" / "configs" / "default.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_default_config_builds_every_method_and_simulates_clicks_on_its_data():
  """Every method of the default config builds from its method_configs on the configured data, and the
  click model clicks on those lists (position-biased: the top is clicked more than the bottom)."""
  import jax  # noqa: PLC0415

  from ultr_jax import simulation  # noqa: PLC0415
  from ultr_jax.studies import experiment
  from ultr_jax.train import get_method  # noqa: PLC0415

  config = _config("")
  train, valid, test = experiment.load_datasets(config)
  assert min(ds.num_queries for ds in (train, valid, test)) > 0
  for name in config.methods:
    method = get_method(
      name, config.method_configs.get(name, {}), num_features=train.num_features, list_size=train.list_size
    )
    assert method.name == name
  batch = jax.tree.map(jax.numpy.asarray, train.as_batch(np.arange(256)))
  clicks = simulation.make_click_fn(config.click_model)(jax.random.key(0), batch)["clicks"]
  assert clicks.shape == batch["where"].shape and not np.any(np.asarray(clicks)[~np.asarray(batch["where"])])
  ctr = np.asarray(clicks).mean(0)
  assert ctr[0] > ctr[train.list_size - 1]
  assert config.num_seeds >= 2  # intervals need seeds
  with pytest.raises(ValueError, match="unknown config variant"):
    _config("large")


def test_binary_smoke_run(tmp_path, subprocess_env):
  env = subprocess_env
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "baselines" / "main.py"),
      f"--config={ROOT / 'experiments' / 'baselines' / 'configs' / 'default.py'}:smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert set(EXPECTED_METHODS) <= set(results)
  for name in EXPECTED_METHODS:
    for metric in METRICS:
      value = results[name][metric]
      assert 0.0 <= value <= 1.0, (name, metric, value)
      assert len(results[name]["per_seed"][metric]) == 2
  # Methods that learn position propensities report how well they match.
  for name in ("dla", "regression_em", "two_tower", "paird"):
    assert "propensity_corr" in results[name]
  assert "propensity_corr" not in results["naive"]
  table = (tmp_path / "table.md").read_text()
  assert all(f"| {name} |" in table for name in EXPECTED_METHODS)
  assert "| dla |" in proc.stderr  # the table is logged too (absl, INFO to stderr)
  assert (tmp_path / "table.csv").exists()
  # Learning curves: per evaluation (steps 10 and 20), the train loss and validation metrics per seed.
  for name in EXPECTED_METHODS:
    history = results[name]["history"]
    assert [r["step"] for r in history] == [10, 20], name
    assert all(len(r["train/loss"]) == 2 and len(r["valid/ndcg@10"]) == 2 for r in history), name
  assert (tmp_path / "curves.png").stat().st_size > 1000
  # Checkpoints of every method, resumable.
  assert sorted(os.listdir(tmp_path / "checkpoints")) == sorted(EXPECTED_METHODS)
  true_prop = np.asarray(results["_meta"]["true_propensities"])
  assert true_prop[0] == 1.0 and np.all(np.diff(true_prop) <= 0)
  # The recorded numbers of this smoke config (expected_metrics/baselines_smoke.json).
  assert_matches_expected(results, "baselines_smoke")


def _write_baidu(ds, path, clicks=None):
  """A RankingDataset as a Baidu-ULTR file: one row per document, the features as the embedding."""
  pa = pytest.importorskip("pyarrow")
  import pyarrow.feather  # noqa: F401,PLC0415

  q, i = np.nonzero(ds.where)
  cols = {"query_id": ds.qid[q].astype(np.int32), "position": (i + 1).astype(np.int32)}
  if clicks is None:  # annotations: labels and each query's frequency bucket
    cols["label"] = ds.labels[q, i].astype(np.int32)
    cols["frequency_bucket"] = (ds.qid[q] % 3).astype(np.int32)
  else:
    cols["click"] = clicks[q, i].astype(np.int32)
  x = ds.features[q, i].astype(np.float16)
  emb = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
  pa.feather.write_feather(pa.table({**cols, "query_document_embedding": emb}), path)


@pytest.mark.slow  # the loader's part: test_data_baidu's logged-click tests, in the default run
def test_trains_on_logged_baidu_clicks(tmp_path):
  """``data.source="baidu"``: click files train, annotation files validate and test; nothing is simulated.

  IPS needs propensities, which only a simulator knows: it is refused, unless they are given.
  """
  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax.studies import baselines  # noqa: PLC0415
  from ultr_jax.studies import experiment  # noqa: PLC0415

  splits = data.make_synthetic(num_train=48, num_valid=12, num_test=12, list_size=6, num_features=5, seed=3)
  rng = np.random.default_rng(0)
  exam = 1.0 / np.arange(1, 7)
  clicks = rng.random(splits.train.where.shape) < exam * (0.1 + 0.9 * splits.train.labels / 4)
  _write_baidu(splits.train.subset(np.arange(24)), tmp_path / "part-0_split-0.feather", clicks[:24])
  _write_baidu(splits.train.subset(np.arange(24, 48)), tmp_path / "part-0_split-1.feather", clicks[24:])
  _write_baidu(splits.test, tmp_path / "annotations.feather")
  config = _config("smoke")
  config.data.source = "baidu"
  config.data.train_path = str(tmp_path / "part-0_split-*.feather")
  config.data.test_path = str(tmp_path / "annotations.feather")
  config.methods = ("naive", "dla", "two_tower")
  config.dcg_cutoffs = (1, 10)  # Baidu-ULTR's annotations are compared by DCG@k (Hager et al.)
  config.write_runs = True
  workdir = tmp_path / "work"
  results = baselines.train_and_evaluate(config, str(workdir))
  assert results["_meta"]["click_model"] == "logged clicks" and results["_meta"]["true_propensities"] is None
  for name in config.methods:
    assert all(np.isfinite(results[name][m]) for m in METRICS)
  assert len(results["dla"]["learned_propensities"]) == 6 and results["dla"]["learned_propensities"][0] == 1.0
  # 10% of the click pages (5 of 48) are held out and score the click model among the methods.
  assert results["two_tower"]["click_ll"] < 0 and 1 < results["two_tower"]["click_perplexity"] < 2
  assert "click_ll" not in results["naive"] and "click_ll" not in results["dla"]
  # The annotated queries by frequency bucket: their query-weighted mean is the overall nDCG@10.
  buckets = results["naive"]["by_frequency_bucket"]
  assert set(buckets) <= {"0", "1", "2"} and sum(b["queries"] for b in buckets.values()) == 6
  for metric in ("ndcg@10", "dcg@10"):
    weighted = sum(b[metric] * b["queries"] for b in buckets.values()) / 6
    assert weighted == pytest.approx(results["naive"][metric], rel=1e-6)
  # DCG@k is the unnormalised nDCG: at most the ideal DCG, and DCG@1 of a list is 2^y - 1 of its top item.
  assert 0 < results["naive"]["dcg@1"] <= 15 and results["naive"]["dcg@1"] <= results["naive"]["dcg@10"]
  table = (workdir / "table.md").read_text()
  assert "| dcg@1 | dcg@10 |" in table
  # One TREC run file per method and seed, a line per annotated document, ranks 1.. per query.
  _, _, test = experiment.load_datasets(config, logged_clicks=True)
  for name in config.methods:
    for seed in (0, 1):
      rows = [line.split() for line in (workdir / "runs" / f"{name}.seed{seed}.txt").read_text().splitlines()]
      assert len(rows) == int(test.where.sum()) and {r[5] for r in rows} == {name}
      first = [r for r in rows if r[0] == str(test.qid[0])]
      assert [int(r[3]) for r in first] == list(range(1, int(test.where[0].sum()) + 1))
  assert "logged clicks of" in table and "part-0_split-*.feather" in table and "on 5 held-out click pages" in table
  assert "| click_ll | click_perplexity |" in table and table.count("| n/a | n/a |") == 2
  train, valid, test = experiment.load_datasets(config, logged_clicks=True)
  assert train.num_queries == 48 and valid.num_queries + test.num_queries == 12
  np.testing.assert_array_equal(train.extras["clicks"], clicks)
  config.data.feature_dtype = "float16"
  half = experiment.load_datasets(config, logged_clicks=True)
  assert all(ds.features.dtype == np.float16 for ds in half)
  np.testing.assert_array_equal(half[0].features, train.features.astype(np.float16))
  # A method that reads the simulator's propensities is refused by name; other studies refuse the source.
  config.methods = ("ips",)
  with pytest.raises(ValueError, match=r"method 'ips' reads batch\['examination'\]"):
    baselines.train_and_evaluate(config, None)
  config.methods = ("full_info",)  # a click log has no labels to train on
  with pytest.raises(ValueError, match=r"method 'full_info' reads batch\['labels'\].*graded relevance labels"):
    baselines.train_and_evaluate(config, None)
  config.methods = ("ips",)
  # With given propensities IPS trains (they are the position's, 0 at padding).
  config.data.propensities = ",".join(str(p) for p in exam)
  results = baselines.train_and_evaluate(config, None)
  assert all(np.isfinite(results["ips"][m]) for m in METRICS)
  train, _, _ = experiment.load_datasets(config, logged_clicks=True)
  np.testing.assert_allclose(train.extras["examination"], np.where(train.where, exam, 0), rtol=1e-6)
  table = tmp_path / "propensities.csv"
  table.write_text("position,propensity\n" + "".join(f"{i + 1},{p}\n" for i, p in enumerate(exam)))
  config.data.propensities = str(table)
  train_from_file, _, _ = experiment.load_datasets(config, logged_clicks=True)
  np.testing.assert_allclose(train_from_file.extras["examination"], train.extras["examination"], rtol=1e-6)
  for spec, message in (
    ("1,0.5", "2 propensities for lists of 6 positions"),
    ("1,0.5,x", "neither comma"),
    ("1,0.5,0,1,1,1", "must be finite and > 0"),
  ):
    config.data.propensities = spec
    with pytest.raises(ValueError, match=message):
      experiment.load_datasets(config, logged_clicks=True)
  # The JSON of the identifiability check's harvest (here written by hand; None: not identified).
  report = tmp_path / "check.json"
  report.write_text(
    json.dumps({"propensities": {"all_pairs": [float(p) for p in exam], "pivot": [1.0, None] + [0.5] * 4}})
  )
  config.data.propensities = str(report)
  from_json, _, _ = experiment.load_datasets(config, logged_clicks=True)
  np.testing.assert_allclose(from_json.extras["examination"], train.extras["examination"], rtol=1e-6)
  for spec, message in (
    (f"{report}:pivot", r"does not identify the pivot propensities of positions \[2\]"),
    (f"{report}:ctr", "no propensities of 'ctr'"),
    (str(tmp_path / "absent.json"), "no such file"),
  ):
    config.data.propensities = spec
    with pytest.raises(ValueError, match=message):
      experiment.load_datasets(config, logged_clicks=True)
  table.write_text("position,propensity\n1,1.0\n2,oops\n")
  config.data.propensities = str(table)
  with pytest.raises(ValueError, match=r"propensities\.csv:3: field 'propensity': 'oops' is not a number"):
    experiment.load_datasets(config, logged_clicks=True)
  with pytest.raises(ValueError, match="holds logged clicks and no training labels"):
    experiment.load_datasets(config)
  config.data.train_path = str(tmp_path / "absent-*.feather")
  with pytest.raises(ValueError, match="config.data.train_path: no file matches"):
    experiment.load_datasets(config, logged_clicks=True)


def test_train_and_evaluate_logs_a_progress_line_per_method(monkeypatch):
  from ultr_jax.studies import _progress, baselines  # noqa: PLC0415

  lines = []
  monkeypatch.setattr(_progress.logging, "info", lambda msg, *a: lines.append(msg % a if a else msg))
  config = _config("smoke")
  config.methods, config.num_seeds = ("naive", "ips"), 1
  config.train.steps = config.train.eval_every = 4
  baselines.train_and_evaluate(config, None)
  ours = [line for line in lines if line.startswith("[baselines] ")]
  assert [line.split(":")[0] for line in ours] == ["[baselines] 1/2 naive", "[baselines] 2/2 ips"]
  assert "ndcg@10 0." in ours[0] and ours[0].endswith("s left") and ours[1].endswith(", done")
