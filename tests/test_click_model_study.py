"""End-to-end tests of the click-model study binary (smoke config) and of its click-log mode."""

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from ultr_jax import simulation as sim
from ultr_jax.testing import assert_matches_expected
from ultr_jax.studies.click_models import run_click_model_study

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "experiments" / "click_models" / "configs" / "default.py"


def _config(arg):
  spec = importlib.util.spec_from_file_location("click_models_config", CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_default_config_fits_every_model_to_every_simulated_log():
  config = _config("")
  assert set(config.fit_models) <= set(sim.FITTABLE_CLICK_MODELS)
  assert set(config.ctr_models) <= set(sim.CTR_MODELS)
  assert set(config.true_models) == set(config.fit_models) - {"cascade"}
  assert config.num_seeds >= 3 and not config.click_log
  with pytest.raises(ValueError, match="unknown config variant"):
    _config("large")


def test_binary_smoke_run(tmp_path, subprocess_env):
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "click_models" / "main.py"),
      f"--config={CONFIG}:smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=subprocess_env,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert sorted(results) == ["true=dcm", "true=pbm"]
  for row in results.values():
    assert row["cascade"] is None  # these logs have sessions with two clicks
    for model in ("pbm", "ubm", "dcm", "dbn", "ccm"):
      entry = row[model]
      assert 1.0 <= entry["perplexity"]["mean"] < 2.0
      assert entry["log_likelihood"]["mean"] < 0.0
      assert 0.0 <= entry["attraction_mae"]["mean"] < 1.0
      assert len(entry["perplexity_per_rank"]) == 5
  assert "perplexity_minus_true_model" in results["true=pbm"]["dcm"]
  assert "perplexity_minus_true_model" not in results["true=pbm"]["pbm"]
  for row in results.values():  # the parameters that generated the log, scored on the same sessions
    truth = row["true parameters"]
    assert 1.0 <= truth["perplexity"]["mean"] < truth["ctr_perplexity"]["mean"] + 1e-6 < 2.0
    for model in ("pbm", "ubm", "dcm", "dbn", "ccm"):
      gap = row[model]["perplexity_minus_true_parameters"]["mean"]
      assert gap == pytest.approx(row[model]["perplexity"]["mean"] - truth["perplexity"]["mean"], abs=1e-6)
  table = (tmp_path / "table.md").read_text()
  assert "| true=pbm |" in table and "n/a" in table and "| true=pbm |" in proc.stderr
  assert table.splitlines()[2].endswith("| ccm | trust | rctr | dctr | drctr | true parameters |")
  for row in results.values():  # the CTR baselines: no attraction, conditional = marginal
    for model in ("rctr", "dctr", "drctr"):
      entry = row[model]
      assert entry["perplexity"]["mean"] == entry["ctr_perplexity"]["mean"] and "attraction_mae" not in entry
  assert (tmp_path / "table.csv").exists() and (tmp_path / "fig_perplexity_per_rank.png").stat().st_size > 0
  assert_matches_expected(results, "click_models_smoke")  # the recorded numbers of this config


@pytest.mark.parametrize("fmt", [pytest.param("tsv", marks=pytest.mark.slow), "baidu"])  # tsv: test_click_log_stream
def test_click_log_mode_fits_a_session_file(tmp_path, fmt):
  attraction = np.random.default_rng(0).uniform(0.1, 0.9, size=(4, 5)).astype(np.float32)
  log = sim.simulate_session_log(jax.random.key(0), "cascade", attraction, num_sessions=500)
  lines = ["session_id,query_id,doc_id,position,click"] if fmt == "tsv" else []
  for s, (ids, clicks) in enumerate(zip(np.asarray(log["doc_ids"]), np.asarray(log["clicks"]))):
    if fmt == "tsv":
      lines += [f"s{s},q{d // 5},d{d},{p + 1},{int(c)}" for p, (d, c) in enumerate(zip(ids, clicks))]
    else:  # Baidu-ULTR's raw session layout: a query line, then pos, url_md5, title, abstract, type, click, ...
      lines += [f"{s}\tq{ids[0] // 5}\t"] + [
        "\t".join([str(p + 1), f"d{d}", "1", "2", "0", str(int(c))] + ["0"] * 27)
        for p, (d, c) in enumerate(zip(ids, clicks))
      ]
  (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
  config = _config("smoke")
  config.click_log = str(tmp_path / "log.csv")
  config.click_log_format = fmt
  config.fit_models = ("pbm", "cascade", "dcm")
  results = run_click_model_study(config, str(tmp_path / "out"))
  assert list(results) == ["log"]
  # A cascade log: every model fits, and the cascade's held-out perplexity is within 1% of the best.
  ppl = {m: results["log"][m]["perplexity"]["mean"] for m in config.fit_models}
  assert ppl["cascade"] <= min(ppl.values()) * 1.01
  saved = json.loads((tmp_path / "out" / "results.json").read_text())
  assert saved["log"]["dcm"]["perplexity"]["mean"] == pytest.approx(ppl["dcm"])
  assert "attraction_mae" not in saved["log"]["pbm"]  # no truth for a real log


def test_simulated_run_logs_a_progress_line_per_fitted_model(monkeypatch):
  from ultr_jax.studies import _progress  # noqa: PLC0415

  lines = []
  monkeypatch.setattr(_progress.logging, "info", lambda msg, *a: lines.append(msg % a if a else msg))
  config = _config("smoke")
  config.true_models, config.num_seeds, config.num_queries, config.num_sessions = ("pbm", "dcm"), 1, 4, 200
  config.fit_models, config.ctr_models = ("pbm",), ("dctr",)
  run_click_model_study(config, None)
  ours = [line for line in lines if re.match(r"\[click models\] \d+/4 ", line)]
  assert [line.split(":")[0] for line in ours] == [
    "[click models] 1/4 true=pbm seed=0 pbm",
    "[click models] 2/4 true=pbm seed=0 dctr",
    "[click models] 3/4 true=dcm seed=0 pbm",
    "[click models] 4/4 true=dcm seed=0 dctr",
  ]
  assert all("perplexity 1." in line for line in ours)
  assert all(line.endswith("s left") for line in ours[:-1]) and ours[-1].endswith(", done")
