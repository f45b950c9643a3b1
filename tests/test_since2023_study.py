"""The since-2023 methods study: its simulated logs, the smoke binary, and (slow) every experiment."""

import json
import re
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from ultr_jax import data, studies
from ultr_jax.studies import since2023

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_fixed_log_clicks_follow_the_click_model_and_the_logger_sorts_by_its_weight():
  ds = data.make_synthetic(num_train=20, num_valid=1, num_test=1, list_size=5, num_features=3, seed=1).train
  shown = since2023.noisy_logger(ds, 1.0, seed=0, top_k=4)
  assert np.all(np.diff(shown.labels, axis=1) <= 0) and shown.list_size == 4
  log = since2023.fixed_log(shown, since2023.PBM, 20_000, seed=3)
  rel = 0.1 + 0.9 * (2.0**log.labels - 1.0) / 15.0  # P(click | examined) of the KDD'23 reproduction
  np.testing.assert_allclose(log.extras["examination"][0], 1.0 / np.arange(1, 5), rtol=1e-6)
  ctr = log.extras["clicks"][log.where].mean()
  want = (rel * log.extras["examination"])[log.where].mean()
  assert abs(ctr - want) < 0.01, (ctr, want)
  adversarial = since2023.fixed_log(shown, since2023.PBM, 20_000, seed=3, click_labels=4.0 - shown.labels)
  top = adversarial.extras["clicks"][:, 0].mean()  # the best document now draws the fewest clicks
  assert top < log.extras["clicks"][:, 0].mean()


def test_binary_smoke_run(tmp_path, subprocess_env):
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "since2023" / "main.py"),
      f"--config={ROOT / 'experiments' / 'since2023' / 'configs' / 'default.py'}:smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=subprocess_env,
    timeout=900,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  rows = results["dr_vs_ips"]["rows"]
  assert set(rows) == {"N=200 naive", "N=200 IPS (affine)", "N=200 DR"}
  for entry in rows.values():
    assert 0.0 <= entry["ndcg@10"] <= 1.0 and len(entry["per_seed"]["ndcg@10"]) == 2
  assert "DR - IPS" in results["dr_vs_ips"]["verdict"]
  assert "## dr_vs_ips" in (tmp_path / "table.md").read_text()
  assert re.search(r"\[since2023\] 1/1 dr_vs_ips: .*DR - IPS.*: \d+s, done", proc.stderr)  # the progress line
  # The smoke config runs only dr_vs_ips: its figure alone, a real PNG.
  assert sorted(p.name for p in tmp_path.glob("*.png")) == ["fig_dr_vs_ips.png"]
  assert (tmp_path / "fig_dr_vs_ips.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_every_experiment_runs_at_smoke_sizes(tmp_path):
  results = since2023.run(studies.default_config("since2023", "smoke_all"), str(tmp_path))
  assert set(since2023.CLAIMS) <= set(results)
  for claim in since2023.CLAIMS:
    assert results[claim]["rows"] and results[claim]["verdict"]
  assert "logger" in results["safety"]["rows"]
  assert any("click_ll" in e for e in results["loss_grid"]["rows"].values())
  assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(since2023.FIGURES.values())


@pytest.mark.slow
def test_default_run(tmp_path):
  """The default config end to end (the docs page's run): every experiment, every row finite."""
  results = since2023.run(studies.default_config("since2023"), str(tmp_path))
  for claim in since2023.CLAIMS:
    for entry in results[claim]["rows"].values():
      assert np.isfinite(entry["ndcg@10"])
