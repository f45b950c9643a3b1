"""The SIF study driver: T6 in one compiled program, and the smoke binary (slow)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments", "sif"))

from configs.default import get_config  # noqa: E402

from ultr_jax.studies import sif as study  # noqa: E402


def test_t6_variants_and_checks():
  c = get_config("smoke")
  c.t6.steps = 200
  data = study.load_data(c)
  rows = study.run_t6(c, data, 0.6)
  assert set(rows) == {"naive", "ips_pos", "ips_full", "ips_pos+D(lambda=10)", "ips_pos+D(lambda=300)"}
  for r in rows.values():
    assert 0 < r["ndcg@10"] <= 1 and r["leakage_(k,y)"] >= 0 and r["leakage_(k)"] >= 0
  # Population clicks: IPS with the full oracle click propensity beats naive click training.
  assert rows["ips_full"]["ndcg@10"] > rows["naive"]["ndcg@10"]
  checks = study.t6_checks(rows)
  assert isinstance(checks["naive<ips_pos"], bool)


@pytest.mark.slow
def test_smoke_binary(tmp_path, default_xla_env):
  out = subprocess.run(
    [
      sys.executable,
      os.path.join(ROOT, "experiments/sif/main.py"),
      "--config=" + os.path.join(ROOT, "experiments/sif/configs/default.py") + ":smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    timeout=1800,
    env=default_xla_env,
  )
  assert out.returncode == 0, out.stderr[-3000:]
  res = json.loads((tmp_path / "results.json").read_text())
  for key in ("setting=position/alpha=0", "setting=trust/alpha=0.6"):
    for name in ("naive", "ips", "dla", "dr", "sif_dec", "sif_full"):
      row = res[key][name]
      assert set(row["ndcg@10"]) >= {"mean", "std"} and np.isfinite(row["ndcg@10"]["mean"])
      assert "leakage_d" in row
  assert "propensity_mae" in res["setting=trust/alpha=0.6"]["dla"]
  for fig in ("fig2_leakage_ess.png", "fig3_propensity_mae.png", "fig4_ndcg_ablation.png", "fig5_leakage_steps.png"):
    assert (tmp_path / fig).stat().st_size > 1000
  from ultr_jax.testing import assert_matches_expected  # noqa: PLC0415

  assert_matches_expected(res, "sif_smoke")  # expected_metrics/sif_smoke.json


def test_relative_mae_against_the_toy_click_model():
  """MAE_rel is 0 for the examination the toy's position-only clicks actually use, at any scale."""
  import jax  # noqa: PLC0415
  import jax.numpy as jnp  # noqa: PLC0415
  from ultr_jax.simulation import make_position_trust_click_fn  # noqa: PLC0415

  ds, _ = study.sif_toy_dataset(8, seed=0)
  batch = {
    "labels": jnp.asarray(ds.labels),
    "where": jnp.asarray(ds.where),
    "logging_score": jnp.asarray(ds.extras["logging_score"]),
  }
  exam = np.asarray(make_position_trust_click_fn({"alpha": 0.0})(jax.random.key(0), batch)["examination"])
  assert study.relative_mae(0.3 * exam[0]) == pytest.approx(0.0, abs=1e-7)
  table = exam[0] / exam[0, 0]
  p = table.copy()
  p[1:] += 0.1  # every non-first position off by 0.1
  assert study.relative_mae(p) == pytest.approx(0.09, abs=1e-6)
  np.testing.assert_allclose(study.relative_mae(np.stack([table, p])), [0.0, 0.09], atol=1e-6)
  hist = [{"step": 10, "train/propensities": [table.tolist(), p.tolist()]}, {"step": 20}]
  steps, traj = study.propensity_mae_trajectory(hist)
  assert steps == [10] and traj.shape == (1, 2)
  np.testing.assert_allclose(traj[0], [0.0, 0.09], atol=1e-6)


def test_shuffle_display_moves_items_with_their_data():
  ds, _ = study.sif_toy_dataset(50, seed=0)
  sh = study.shuffle_display(ds, 0)
  # Same items per list (feature rows travel with their label and logging score) ...
  for q in (0, 17, 49):
    a = np.concatenate([ds.features[q], ds.labels[q, :, None], ds.extras["logging_score"][q, :, None]], 1)
    b = np.concatenate([sh.features[q], sh.labels[q, :, None], sh.extras["logging_score"][q, :, None]], 1)
    np.testing.assert_array_equal(a[np.lexsort(a.T)], b[np.lexsort(b.T)])
  # ... but no longer displayed in logging order (the toy's lists are sorted by the logging score).
  z = ds.extras["logging_score"]
  assert np.all(np.diff(z, axis=1) <= 0)
  assert np.mean(np.diff(sh.extras["logging_score"], axis=1) <= 0) < 0.7


def test_second_half_change_reads_the_midpoint_and_the_end_per_seed():
  hist = [
    {"step": s, "train/oracle_I_D": [0.01 + 1e-4 * s, 0.02 + 2e-4 * s], "train/other": [0.0, 0.0]}
    for s in (1000, 2000, 2900, 4000, 5000, 6000)
  ]
  hist.insert(2, {"step": 3000, "train/loss": [1.0, 1.0]})  # rows without the key are skipped
  r = study.second_half_change(hist, "oracle_I_D")
  assert r["steps"] == [2900, 6000]  # the logged step nearest half of the last one
  np.testing.assert_allclose(r["values"], [(0.30 + 0.60) / 2, (0.61 + 1.22) / 2], rtol=1e-12)
  np.testing.assert_allclose(r["change"]["mean"], (0.31 + 0.62) / 2, rtol=1e-12)
  assert r["change"]["ci90"] > 0
  assert study.second_half_change(hist[:1], "oracle_I_D") is None


def test_t7_config_trains_longer_on_the_t7_runs_only():
  from ultr_jax.train import available_methods  # noqa: PLC0415

  c, default = get_config("t7"), get_config()
  assert c.train.steps > default.train.steps and not c.t6.enabled and not c.position_setting
  assert set(c.methods) <= set(available_methods()) and set(c.alphas) <= set(default.alphas)
  with pytest.raises(ValueError, match="t7"):
    get_config("t9")


def test_exposure_slope_size_finds_the_sif_tower_slopes():
  import jax  # noqa: PLC0415
  from ultr_jax.train import get_method  # noqa: PLC0415

  m = get_method("sif_exp", {"ranker": "linear"}, num_features=3, list_size=4)
  params, _ = m.init(jax.random.key(0), None)
  seeds = jax.tree.map(lambda v: np.stack([np.asarray(v), np.asarray(v) + 1.0]), params)
  size = study.exposure_slope_size(seeds)
  np.testing.assert_allclose(size, [0.0, 1.0])  # u starts at 0 (spec 5.2)
  dla = get_method("dla", {"ranker": "linear"}, num_features=3, list_size=4)
  assert study.exposure_slope_size(dla.init(jax.random.key(0), None)[0]) is None


def test_run_logs_a_progress_line_per_cell(tmp_path, monkeypatch):
  """One line per T6 alpha, per fitted T8 method and display, per fitted T7 method and setting, with the time left."""
  from ultr_jax.studies import _progress  # noqa: PLC0415

  lines = []
  monkeypatch.setattr(_progress.logging, "info", lambda msg, *a: lines.append(msg % a if a else msg))
  c = get_config("smoke")
  c.num_seeds = 1
  c.compilation_cache_dir = ""
  c.data.num_train, c.data.num_valid, c.data.num_test = 40, 20, 20
  c.t6.lambdas, c.t6.steps = (10.0,), 3
  c.methods, c.alphas, c.position_setting = ("naive", "dla"), (0.6,), False
  c.train.steps, c.train.eval_every = 4, 2
  c.t8.enabled, c.t8.displays, c.t8.methods, c.t8.steps, c.t8.eval_every = True, ("random",), ("ips",), 4, 2
  study.run(c, str(tmp_path))
  ours = [line for line in lines if line.startswith("[sif] ")]
  assert [line.split(":")[0] for line in ours] == [
    "[sif] 1/4 T6 alpha=0.6",
    "[sif] 2/4 T8 display=random ips",
    "[sif] 3/4 T7 trust alpha=0.6 naive",
    "[sif] 4/4 T7 trust alpha=0.6 dla",
  ]
  assert all(line.endswith("s left") for line in ours[:-1]) and ours[-1].endswith(", done")
  assert "T6 alpha=0.6: 4 variants" in ours[0] and "ndcg@10 0." in ours[-1]
