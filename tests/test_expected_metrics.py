"""The checked-in expected metrics (``expected_metrics/*.json``) and the comparison that uses them.

The smoke runs themselves are compared where they already run (no smoke binary runs twice):
``test_experiment_baselines.py`` (baselines), ``test_identifiability.py`` (identifiability),
``test_lbd_study.py`` (LBD), ``test_sif_study.py`` (SIF, slow) and ``test_report.py`` (report);
the CLD smoke binary runs here.
"""

import copy
import json
import math
import pathlib
import re
import subprocess
import sys

import pytest

from ultr_jax.testing import assert_matches_expected, compare_to_expected, expected_metrics_path, load_expected, lookup

from ultr_jax import studies
from ultr_jax.testing import _main, expected_metrics_dir

ROOT = pathlib.Path(__file__).resolve().parent.parent
FILES = sorted((ROOT / "expected_metrics").glob("*.json"))
#: Study runs with no file, and why (``python -m ultr_jax.testing`` says there is none, naming the files there are).
NOT_RECORDED = {
  "ope_default": "its 10^6-session logs (100 replicates, 3 users, 4 temperatures) take over 90 min on 2 CPUs;"
  " docs/studies/ope.md reports the grid variant instead",
}
REQUIRED = sorted({f"{s}_{v}" for s in studies.STUDIES for v in ("smoke", "default")} - set(NOT_RECORDED))


def _nested(metrics: dict) -> dict:
  """A results mapping whose ``lookup`` of every path gives ``metrics[path]``."""
  out: dict = {}
  for path, value in metrics.items():
    node = out
    *parents, leaf = path.split("|")
    for key in parents:
      node = node.setdefault(key, {})
    node[leaf] = {"mean": value, "std": 0.0}
  return out


def test_every_study_has_a_smoke_and_a_default_file():
  names = {f.stem for f in FILES}
  assert set(REQUIRED) <= names, sorted(set(REQUIRED) - names)
  assert not set(NOT_RECORDED) & names, "a file now exists: drop it from NOT_RECORDED"
  assert expected_metrics_dir() == ROOT / "expected_metrics"  # a checkout; a wheel carries ultr_jax/expected_metrics/


def test_the_guide_lists_every_study_with_a_smoke_file():
  # docs/guides/is_my_run_right.md names the studies whose smoke runs have a file; a study added since is named too.
  guide = (ROOT / "docs" / "guides" / "is_my_run_right.md").read_text(encoding="utf-8")
  listed = re.search(r"the smoke config of every study \(([^;]+);", " ".join(guide.split()))
  assert listed, "the guide no longer lists the studies"
  assert sorted(n.strip() for n in listed.group(1).split(",")) == sorted(studies.STUDIES)


def test_every_file_names_a_variant_of_its_study():
  for f in FILES:
    study, variant = f.stem.rsplit("_", 1)
    assert study in studies.STUDIES and variant in studies.variants(study), f.name
    assert load_expected(str(f))["config"].startswith(f"experiments/{study}/configs/default.py"), f.name


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_expected_file_is_valid_and_matches_itself(path):
  expected = load_expected(str(path))
  assert expected["config"].startswith("experiments/")
  assert "command" in expected and "tolerance_rule" in expected
  tol = expected["tolerance"]
  tols = list(tol.values()) if isinstance(tol, dict) else [tol]
  assert all(t > 0 for t in tols)  # float noise needs some room; 0 would make the check flaky
  assert compare_to_expected(_nested(expected["metrics"]), expected) == []


def test_perturbed_results_fail_the_comparison():
  expected = load_expected(str(expected_metrics_path("baselines_default")))
  results = _nested(expected["metrics"])
  path = "dla|ndcg@10"
  tol = expected["tolerance"][path]
  ok = copy.deepcopy(results)
  ok["dla"]["ndcg@10"]["mean"] += 0.9 * tol  # inside the band
  assert compare_to_expected(ok, expected) == []
  bad = copy.deepcopy(results)
  bad["dla"]["ndcg@10"]["mean"] -= 1.5 * tol  # e.g. a broken DLA
  problems = compare_to_expected(bad, expected)
  assert len(problems) == 1 and problems[0].startswith(path), problems
  with pytest.raises(AssertionError, match="dla\\|ndcg@10"):
    assert_matches_expected(bad, expected)
  missing = copy.deepcopy(results)
  del missing["ips"]
  assert sum(p.startswith("ips|") for p in compare_to_expected(missing, expected)) == 5
  nan = copy.deepcopy(results)
  nan["naive"]["ndcg@1"]["mean"] = math.nan
  assert compare_to_expected(nan, expected) == [
    f"naive|ndcg@1: got nan, expected {lookup(results, 'naive|ndcg@1'):.4f}"
  ]


def test_load_expected_rejects_malformed_files(tmp_path):
  cases = {
    "no_metrics.json": {"config": "c"},
    "empty.json": {"config": "c", "metrics": {}},
    "nan.json": {"config": "c", "metrics": {"a|b": None}},
    "negative.json": {"config": "c", "metrics": {"a|b": 0.5}, "tolerance": {"default": -0.1}},
  }
  for name, body in cases.items():
    (tmp_path / name).write_text(json.dumps(body))
    with pytest.raises(ValueError, match=name):
      load_expected(str(tmp_path / name))


EXPECTED_DAMAGE = [
  # (id, the expected-metrics file's text, what the error says after the file's path)
  ("truncated JSON", '{"config": "c",\n "metrics": {"a|b": 0.5', "got malformed JSON at line 2, column 24"),
  ("a JSON string", '"config metrics"', "got a string"),  # was a TypeError
  ("config of the wrong type", '{"config": 3, "metrics": {"a|b": 0.5}}', "got ['config'] holding an integer"),
]


@pytest.mark.parametrize("case", EXPECTED_DAMAGE, ids=[c[0] for c in EXPECTED_DAMAGE])
def test_load_expected_names_the_file_and_the_line_or_field(tmp_path, case):
  _, text, got = case
  path = tmp_path / "expected.json"
  path.write_text(text)
  with pytest.raises(ValueError) as e:
    load_expected(str(path))
  assert str(e.value).startswith(f"{path}: expected an expected-metrics file, ") and got in str(e.value), e.value


def test_cli_names_a_malformed_file_instead_of_a_traceback(tmp_path, capsys):
  (tmp_path / "results.json").write_text('{"ips": {"ndcg@10": 0.5')  # truncated
  proc = subprocess.run(
    [sys.executable, "-m", "ultr_jax.testing", "results.json", "baselines_smoke"],
    capture_output=True,
    text=True,
    cwd=tmp_path,
  )
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
  assert proc.stderr.startswith(
    "error: results.json: expected a run's results, a JSON object, got malformed JSON at line 1"
  )
  (tmp_path / "list.json").write_text("[0.5]")  # was an AttributeError
  assert _main(["testing", str(tmp_path / "list.json"), "baselines_smoke"]) == 2
  assert f"{tmp_path / 'list.json'}: expected a run's results, a JSON object, got a list" in capsys.readouterr().err
  (tmp_path / "expected.json").write_text('{"config": "c", "metrics": ')  # was a JSONDecodeError traceback
  assert _main(["testing", str(tmp_path / "results.json"), str(tmp_path / "expected.json")]) == 2
  (tmp_path / "results.json").write_text("{}")
  assert _main(["testing", str(tmp_path / "results.json"), str(tmp_path / "expected.json")]) == 2
  assert f"{tmp_path / 'expected.json'}: expected an expected-metrics file" in capsys.readouterr().err


def test_cli_exit_status(tmp_path, capsys):
  expected = expected_metrics_path("baselines_default")
  metrics = load_expected(str(expected))["metrics"]
  good = tmp_path / "good.json"
  good.write_text(json.dumps(_nested(metrics)))
  bad_metrics = dict(metrics, **{"ips|ndcg@10": metrics["ips|ndcg@10"] - 0.2})
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps(_nested(bad_metrics)))
  run = lambda p, e: subprocess.run(
    [sys.executable, "-m", "ultr_jax.testing", str(p), str(e)], capture_output=True, text=True, cwd=tmp_path
  )
  ok, fail = run(good, "baselines_default"), run(bad, expected)  # a name from any directory, or a path
  assert ok.returncode == 0 and f"{len(metrics)} of {len(metrics)} metrics match" in ok.stdout
  assert fail.returncode == 1 and "MISMATCH ips|ndcg@10" in fail.stdout
  assert _main(["testing", str(good), "ope_default"]) == 2  # a study run without a file: a message, no traceback
  err = capsys.readouterr().err
  assert "no expected metrics 'ope_default.json'" in err and "baselines_smoke" in err, err
  assert _main(["testing", str(tmp_path / "nope.json"), "baselines_default"]) == 2
  assert "no results file" in capsys.readouterr().err


@pytest.mark.slow
def test_cld_smoke_binary_matches_expected(tmp_path, default_xla_env):
  env = default_xla_env  # the file is recorded as a user runs the binary
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "cld" / "main.py"),
      f"--config={ROOT / 'experiments' / 'cld' / 'configs' / 'default.py'}:smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=1800,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert_matches_expected(json.loads((tmp_path / "results.json").read_text()), "cld_smoke")
