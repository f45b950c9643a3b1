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
      "baselines_config", ROOT / "experiments" / "baselines" / "configs" / "default.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_default_config_is_the_issue_protocol():
  config = _config("")
  assert tuple(config.methods) == EXPECTED_METHODS
  assert config.click_model.name.startswith("pbm") and config.click_model.eta == 1.0
  assert config.num_seeds >= 3
  assert (config.data.num_train, config.data.num_valid, config.data.num_test) == (1000, 200, 200)
  with pytest.raises(ValueError, match="unknown config variant"):
    _config("large")


def test_binary_smoke_run(tmp_path, subprocess_env):
  env = subprocess_env
  proc = subprocess.run(
      [sys.executable, str(ROOT / "experiments" / "baselines" / "main.py"),
       f"--config={ROOT / 'experiments' / 'baselines' / 'configs' / 'default.py'}:smoke",
       f"--workdir={tmp_path}"],
      capture_output=True, text=True, env=env, timeout=600)
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
  assert "| dla |" in proc.stdout  # the table is printed too
  assert (tmp_path / "table.csv").exists()
  # Checkpoints of every method, resumable.
  assert sorted(os.listdir(tmp_path / "checkpoints")) == sorted(EXPECTED_METHODS)
  true_prop = np.asarray(results["_meta"]["true_propensities"])
  assert true_prop[0] == 1.0 and np.all(np.diff(true_prop) <= 0)
  # The recorded numbers of this smoke config (expected_metrics/baselines_smoke.json).
  assert_matches_expected(results, "baselines_smoke")
