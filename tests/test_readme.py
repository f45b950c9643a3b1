"""The README's synopsis runs and its commands name files that exist."""

import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    return f.read()


def _block(name: str) -> str:
  """The fenced code block right after the README's ``<!-- test: name -->`` marker (exactly one)."""
  blocks = re.findall(rf"^<!-- test: {re.escape(name)} -->\n```\w+\n(.*?)^```", _readme(), re.S | re.M)
  assert len(blocks) == 1, f"README.md has {len(blocks)} blocks marked <!-- test: {name} -->"
  return blocks[0]


def test_markers_are_unique_and_each_marks_a_code_block():
  names = re.findall(r"^<!-- test: (\S+) -->$", _readme(), re.M)
  assert sorted(names) == sorted(set(names)) and len(names) >= 6
  for name in names:
    assert _block(name)


def test_synopsis_runs(capsys):
  exec(compile(_block("synopsis"), "README.md:synopsis", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.split("\n")
  assert float(printed[-2]) == 1.0  # the ideal ordering's nDCG
  assert np.isfinite(float(printed[-3]))


def test_harvesting_example_runs(capsys):
  namespace = {}
  exec(compile(_block("harvesting"), "README.md:harvesting", "exec"), namespace)  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")[-1]
  estimate = np.array([float(v) for v in printed.strip("[]").split()])
  np.testing.assert_allclose(estimate, namespace["examination"], atol=0.03)
  assert namespace["ips"].name == "ips"


def test_click_model_example_runs(capsys):
  exec(compile(_block("click_models"), "README.md:click_models", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  scores = {line.split()[0]: (float(line.split()[1]), float(line.split()[2])) for line in printed[:3]}
  # The generating model (the DCM) beats the PBM on held-out sessions; the DBN nests it.
  assert scores["dcm"][0] < scores["pbm"][0] and scores["dcm"][1] > scores["pbm"][1]
  assert abs(scores["dbn"][0] - scores["dcm"][0]) < 0.01
  assert float(printed[-1]) >= 0.95  # the fitted DBN's perseverance


def test_commands_name_existing_files():
  commands = re.findall(r"```sh\n(.*?)```", _readme(), re.S)
  assert "experiments/baselines/main.py" in _block("main_job")
  for path in re.findall(r"(experiments/\S+?\.py)", "\n".join(commands)):
    assert os.path.exists(os.path.join(ROOT, path)), path
  # The test command is the one .ci/run runs, and it runs the linter and the tests.
  test_command = _block("test_command").strip()
  assert "python -m pytest -n auto" in test_command and "ruff check" in test_command
  with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
    assert test_command in f.read()


def test_online_example_runs(capsys):
  exec(compile(_block("online"), "README.md:online", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  curves = {
    line.split()[0]: np.array([float(v) for v in line.split(None, 1)[1].strip("[]").split()]) for line in printed
  }
  assert curves["pdgd"][0] == curves["dbgd"][0]  # both start at w = 0
  assert curves["pdgd"][-1] > curves["dbgd"][-1] > curves["dbgd"][0]  # both learn; PDGD faster
