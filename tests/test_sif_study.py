"""The SIF study driver: T6 in one compiled program, and the smoke binary (slow)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments", "sif"))

import study  # noqa: E402
from configs.default import get_config  # noqa: E402


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
def test_smoke_binary(tmp_path):
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments/sif/main.py"),
                        "--config=" + os.path.join(ROOT, "experiments/sif/configs/default.py") + ":smoke",
                        f"--workdir={tmp_path}"], capture_output=True, text=True, timeout=1800)
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
