"""The README's synopsis runs and its commands name files that exist."""

import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    return f.read()


def test_synopsis_runs(capsys):
  blocks = re.findall(r"```python\n(.*?)```", _readme(), re.S)
  assert blocks, "README has no python synopsis"
  exec(compile(blocks[0], "README.md:synopsis", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.split("\n")
  assert float(printed[-2]) == 1.0  # the ideal ordering's nDCG
  assert np.isfinite(float(printed[-3]))


def test_harvesting_example_runs(capsys):
  blocks = re.findall(r"```python\n(.*?)```", _readme(), re.S)
  assert len(blocks) >= 2 and "harvest_propensities" in blocks[1]
  namespace = {}
  exec(compile(blocks[1], "README.md:harvesting", "exec"), namespace)  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")[-1]
  estimate = np.array([float(v) for v in printed.strip("[]").split()])
  np.testing.assert_allclose(estimate, namespace["examination"], atol=0.03)
  assert namespace["ips"].name == "ips"


def test_click_model_example_runs(capsys):
  blocks = re.findall(r"```python\n(.*?)```", _readme(), re.S)
  assert len(blocks) >= 3 and "fit_click_model" in blocks[2]
  exec(compile(blocks[2], "README.md:click_models", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  scores = {line.split()[0]: (float(line.split()[1]), float(line.split()[2])) for line in printed[:3]}
  # The generating model (the DCM) beats the PBM on held-out sessions; the DBN nests it.
  assert scores["dcm"][0] < scores["pbm"][0] and scores["dcm"][1] > scores["pbm"][1]
  assert abs(scores["dbn"][0] - scores["dcm"][0]) < 0.01
  assert float(printed[-1]) >= 0.95  # the fitted DBN's perseverance


def test_commands_name_existing_files():
  commands = re.findall(r"```sh\n(.*?)```", _readme(), re.S)
  assert len(commands) >= 2
  for path in re.findall(r"(experiments/\S+?\.py)", "\n".join(commands)):
    assert os.path.exists(os.path.join(ROOT, path)), path
  # The test command is the one .ci/run runs, and it runs the linter and the tests.
  test_command = commands[1].strip()
  assert "python -m pytest -n auto" in test_command and "ruff check" in test_command
  with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
    assert test_command in f.read()


def test_online_example_runs(capsys):
  blocks = re.findall(r"```python\n(.*?)```", _readme(), re.S)
  assert len(blocks) >= 4 and "online_learning" in blocks[3]
  exec(compile(blocks[3], "README.md:online", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  curves = {
    line.split()[0]: np.array([float(v) for v in line.split(None, 1)[1].strip("[]").split()]) for line in printed
  }
  assert curves["pdgd"][0] == curves["dbgd"][0]  # both start at w = 0
  assert curves["pdgd"][-1] > curves["dbgd"][-1] > curves["dbgd"][0]  # both learn; PDGD faster
