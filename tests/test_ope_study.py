"""The off-policy evaluation study: the binary's smoke run, the simulated logs against the exact truth, and the
standard IPS's unbiasedness over replicate logs."""

import json
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from ultr_jax import simulation as sim
from ultr_jax import studies
from ultr_jax.studies import ope
from ultr_jax.testing import assert_matches_expected

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "experiments" / "ope" / "configs" / "default.py"


def _tiny(**changes):
  config = studies.default_config("ope", "smoke")
  with config.unlocked():
    config.update(changes)
  return config


def test_binary_smoke_run(tmp_path, subprocess_env):
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "ope" / "main.py"),
      f"--config={CONFIG}:smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=subprocess_env,
    timeout=900,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  config = studies.default_config("ope", "smoke")
  results = json.loads((tmp_path / "results.json").read_text())
  assert sorted(results["truth"]) == sorted(config.users)
  expected = set(config.estimators) | {f"{e}[{m}]" for e in config.model_estimators for m in config.fitted_models}
  for user in config.users:
    for temperature in config.temperatures:
      for size in config.log_sizes:
        cell = results[f"user={user}"][f"temperature={temperature:g}"][f"sessions={size}"]
        assert set(cell) == expected
        for s in cell.values():
          assert s["rmse"] >= 0 and 0 <= s["coverage"] <= 1 and s["std"] >= 0
  table = (tmp_path / "table.md").read_text()
  header = "| estimator | " + " | ".join(ope.METRICS) + " |"
  assert table.count(header) == len(config.users) * len(config.temperatures)
  csv_header = (tmp_path / "table.csv").read_text().splitlines()[0].split(",")
  assert csv_header[0] == "user/temperature/sessions/estimator" and set(ope.METRICS) <= set(csv_header)
  assert (tmp_path / "fig_ope_rmse.png").stat().st_size > 0
  assert not (tmp_path / "IN_PROGRESS").exists()
  assert header in proc.stdout and f"wrote {tmp_path / 'results.json'}" in proc.stdout  # the table on stdout
  assert header not in proc.stderr and "[ope]" not in proc.stdout  # the logs on stderr
  assert_matches_expected(results, "ope_smoke")  # expected_metrics/ope_smoke.json, recorded at XLA's defaults


def test_logged_clicks_average_to_the_exact_value_of_the_logging_policy():
  """The simulator and the truth agree: a Plackett-Luce target equal to the logging policy has the value the
  log's mean number of clicks estimates (within 4 standard errors on 40k sessions)."""
  config = _tiny(target_temperature=1.0, reward_weights="clicks")
  queries = ope.study_queries(config)
  for user in ("pbm", "cascade"):
    truth = ope.true_values(config, queries, user, queries["logging_scores"][None])[0]
    log = ope.simulate_logs(jax.random.key(3), queries, user, 1.0, 40_000)
    clicks = np.asarray(log["clicks"]).sum(-1)
    assert abs(clicks.mean() - truth) < 4 * clicks.std() / np.sqrt(clicks.size), (user, clicks.mean(), truth)


def test_standard_ips_is_unbiased_over_replicate_logs():
  """On a tiny grid the standard IPS's mean error over 60 replicate logs is within 3 standard errors of zero
  for every target (it is unbiased under any click model when the logging policy covers every ranking)."""
  config = _tiny(
    users=("cascade",),
    temperatures=(1.0,),
    log_sizes=(400,),
    num_replicates=60,
    estimators=("sips", "iips"),
    model_estimators=(),
    figure_temperature=1.0,
  )
  results = ope.run_ope_study(config, None)
  cell = results["user=cascade"]["temperature=1"]["sessions=400"]
  sips = cell["sips"]
  stderr = np.asarray(sips["std_per_target"]) / np.sqrt(sips["replicates"])
  assert np.all(np.abs(sips["bias_per_target"]) <= 3 * stderr), (sips["bias_per_target"], stderr)
  assert sips["biased_targets"] == 0 and sips["replicates"] == 60
  assert 0.0 <= sips["coverage"] <= 1.0 and -1.0 <= sips["kendall_tau"] <= 1.0


def test_summary_of_a_biased_estimator_flags_its_targets():
  truth = np.array([0.2, 0.5, 0.9])
  rng = np.random.default_rng(0)
  values = truth + np.array([0.0, 0.0, 0.1]) + 0.01 * rng.standard_normal((50, 3))
  s = ope.summarize_cell(values, values - 0.02, values + 0.02, truth)
  assert s["biased_targets"] == 1 and s["kendall_tau"] == 1.0
  np.testing.assert_allclose(s["rmse"], np.sqrt(np.mean((values - truth) ** 2)))
  assert s["coverage"] == pytest.approx(np.mean(np.abs(values - truth) <= 0.02))


def test_permutation_index_inverts_the_table():
  table = ope.permutation_table(4)
  np.testing.assert_array_equal(np.asarray(ope.permutation_index(table)), np.arange(24))


def test_config_checks_across_fields():
  with pytest.raises(ValueError, match=r"config.model_replicates: 9 > config.num_replicates \(8\)"):
    ope.run_ope_study(_tiny(model_replicates=9), None)
  with pytest.raises(ValueError, match="config.figure_temperature: 3.0 is not one of config.temperatures"):
    ope.run_ope_study(_tiny(figure_temperature=3.0), None)
  with pytest.raises(ValueError, match=r"config.estimators: \('dm',\) is out of range"):
    ope.run_ope_study(_tiny(estimators=("dm",)), None)


@pytest.mark.parametrize("num_sessions", [300, 4000])  # fewer sessions than the 3072 cells (gathered), more (counted)
def test_estimates_from_the_cells_equal_the_estimates_session_by_session(num_sessions):
  """A log's model-free estimates and intervals from its cells' terms (computed once per logging policy) are
  the estimators' own on its sessions; the model-based ones on its distinct sessions, each counted, with the
  click model fitted to its sufficient statistics, are those on the whole log with the in-memory fit."""
  config = _tiny(num_replicates=3, model_replicates=1)
  queries = ope.study_queries(config)
  targets = jax.numpy.asarray(ope.target_scores(config, queries))
  logits = jax.numpy.asarray(ope.logging_logits(queries["logging_scores"], 1.0))
  table = ope.logging_table(logits, pairs=True)
  keys = jax.random.split(jax.random.key(num_sessions), 3)
  parts = ope._temperature_parts(config, queries, targets, 1.0)
  session = ope._model_free(config, queries, "cascade", num_sessions, logits, keys, targets, table, None)
  cells = ope._model_free(config, queries, "cascade", num_sessions, logits, keys, targets, table, parts)
  assert sorted(cells) == sorted(config.estimators)
  for name in config.estimators:
    np.testing.assert_allclose(cells[name], session[name], atol=2e-6, err_msg=name)
  log = ope.simulate_logs(keys[0], queries, "cascade", 1.0, num_sessions)
  fit = sim.fit_click_model(
    "pbm",
    {"doc_ids": log["doc_ids"], "clicks": log["clicks"]},
    solver=sim.LBFGS(max_iters=50),
    num_docs=32,
    l2=1.0,
    prior="zero",
  )
  names = tuple(config.model_estimators)
  whole = ope._model_based_run(
    log,
    jax.numpy.ones(num_sessions),
    fit.params,
    targets,
    table,
    model="pbm",
    names=names,
    settings=ope._settings(config),
  )
  distinct = ope._model_based(config, queries, "cascade", num_sessions, logits, keys, targets, table)
  for i, name in enumerate(names):
    np.testing.assert_allclose(distinct[f"{name}[pbm]"][0], whole[i], atol=2e-5, err_msg=name)
