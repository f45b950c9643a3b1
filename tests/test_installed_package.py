"""Every study runs from a non-editable install: its configs and code ship with the package (no checkout needed)."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

from ultr_jax import studies

ROOT = pathlib.Path(__file__).resolve().parent.parent

_RUN_ALL = textwrap.dedent(
  """
  import json, os, sys
  import ultr_jax
  from ultr_jax import studies
  venv, workdir = sys.argv[1], sys.argv[2]
  assert os.path.realpath(ultr_jax.__file__).startswith(os.path.realpath(venv)), ultr_jax.__file__
  done = {}
  for name in sorted(studies.STUDIES):
    out = studies.run(name, studies.default_config(name, "smoke"), os.path.join(workdir, name))
    done[name] = type(out).__name__
    print(f"[installed] {name}: ok", flush=True)
  # "Is my run right?" from the installed package: its own copy of the expected metrics.
  from ultr_jax.testing import _main, expected_metrics_dir
  assert os.path.realpath(expected_metrics_dir()).startswith(os.path.realpath(venv)), expected_metrics_dir()
  checks = {name: _main(["testing", os.path.join(workdir, name, "results.json"), name + "_smoke"]) for name in done}
  assert not any(checks.values()), checks
  print(json.dumps({"ultr_jax": ultr_jax.__file__, "studies": done}))
  """
)


def _install(venv: pathlib.Path, tmp_path: pathlib.Path) -> None:
  """A non-editable install of a copy of the package's sources (the build leaves nothing in the checkout)."""
  src = tmp_path / "src"
  shutil.copytree(ROOT / "ultr_jax", src / "ultr_jax", ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copytree(ROOT / "expected_metrics", src / "expected_metrics")  # shipped as ultr_jax/expected_metrics/
  for name in ("setup.py", "README.md"):
    shutil.copy(ROOT / name, src / name)
  pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
  proc = subprocess.run([*pip, "--no-build-isolation", str(src)], capture_output=True, text=True, timeout=600)
  if proc.returncode and "bdist_wheel" in proc.stderr:  # setuptools < 70.1 builds wheels with the `wheel` package
    proc = subprocess.run([*pip, str(src)], capture_output=True, text=True, timeout=600)  # an isolated build
  assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_every_study_runs_its_smoke_config_from_an_installed_package(tmp_path, default_xla_env):
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
  _install(venv, tmp_path)
  env = {
    k: v for k, v in default_xla_env.items() if k != "PYTHONPATH"
  }  # as a user runs (XLA defaults, the files' settings); no checkout
  outside = tmp_path / "elsewhere"
  outside.mkdir()
  proc = subprocess.run(
    [str(venv / "bin" / "python"), "-c", _RUN_ALL, str(venv), str(tmp_path / "runs")],
    capture_output=True,
    text=True,
    env=env,
    cwd=outside,
    timeout=3600,
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert not summary["ultr_jax"].startswith(str(ROOT)) and sorted(summary["studies"]) == sorted(studies.STUDIES)
  for name in studies.STUDIES:
    assert (tmp_path / "runs" / name / "results.json").is_file(), name
  assert not os.path.exists(outside / "experiments")
