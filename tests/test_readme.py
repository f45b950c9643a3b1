"""The README's synopsis and the docs' tested examples run, and their commands name files that exist.

The README keeps the two fresh-machine commands and the synopsis; the other tested examples live in the
docs' Markdown pages (``docs/**/*.md``). A tested block is the fenced code block right after a
``<!-- test: name -->`` marker, and each name is used once across the README and the docs.
"""

import glob
import os
import re

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sources() -> dict:
  """README.md and every tracked Markdown page under docs/ (not the build output): path -> text."""
  paths = [os.path.join(ROOT, "README.md")] + sorted(
    glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
  )
  paths = [p for p in paths if os.sep + "_build" + os.sep not in p]
  out = {}
  for path in paths:
    with open(path, encoding="utf-8") as f:
      out[os.path.relpath(path, ROOT)] = f.read()
  return out


def _readme():
  return _sources()["README.md"]


def _block(name: str) -> str:
  """The fenced code block right after the ``<!-- test: name -->`` marker (exactly one in README and docs)."""
  blocks = []
  for text in _sources().values():
    blocks += re.findall(rf"^<!-- test: {re.escape(name)} -->\n```\w+\n(.*?)^```", text, re.S | re.M)
  assert len(blocks) == 1, f"README.md and docs/ have {len(blocks)} blocks marked <!-- test: {name} -->"
  return blocks[0]


def test_markers_are_unique_and_each_marks_a_code_block():
  names = [n for text in _sources().values() for n in re.findall(r"^<!-- test: (\S+) -->$", text, re.M)]
  assert sorted(names) == sorted(set(names)) and len(names) >= 6
  for name in names:
    assert _block(name)


def test_every_python_block_of_the_guides_is_a_tested_example():
  """Each ```python block of ``docs/guides/*.md`` follows a ``<!-- test: name -->`` marker that a test runs,
  or a ``<!-- not run: reason -->`` marker (a block that reads a dataset's own files); these are counted."""
  tests = ""
  for path in glob.glob(os.path.join(ROOT, "tests", "test_*.py")):
    with open(path, encoding="utf-8") as f:
      tests += f.read()
  run_here = {a or b for a, b in re.findall(r'_block\("(\w+)"\)|<!-- test: (\w+) -->', tests)}  # by a test
  not_run = []
  for path, text in _sources().items():
    if not path.startswith(os.path.join("docs", "guides")):
      continue
    for preceding in re.findall(r"^(.*)\n```python\n", text, re.M):
      if re.fullmatch(r"<!-- not run: \S.* -->", preceding):
        not_run.append(path)
        continue
      marker = re.fullmatch(r"<!-- test: (\S+) -->", preceding)
      assert marker, f"{path}: a python block without a <!-- test: name --> marker (after {preceding!r})"
      assert marker.group(1) in run_here, f"{path}: no test runs the block {marker.group(1)!r}"
  assert not_run == [os.path.join("docs", "guides", "multi_device.md")], not_run  # Baidu-ULTR's feather files


def test_guides_that_stream_name_the_stream_extra():
  for path, text in _sources().items():
    blocks = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    if path.startswith(os.path.join("docs", "guides")) and re.search(r"SessionStream|FeatureStream|convert_", blocks):
      assert "pip install 'ultr_jax[stream]'" in text, f"{path}: its examples need the stream extra; say so"


def test_readme_keeps_the_commands_and_the_synopsis_and_stays_short():
  readme = _readme()
  for name in ("main_job", "test_command", "synopsis"):
    assert f"<!-- test: {name} -->" in readme, name
  assert len(readme.encode("utf-8")) <= 10 * 1024, "README.md is over 10 KB: move material to docs/"
  # Its links into the docs (relative paths, as GitHub renders them) name files that exist.
  links = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t]
  assert any(link.startswith("docs/") for link in links)
  for link in links:
    assert os.path.exists(os.path.join(ROOT, link)), link


def test_readme_layout_names_every_study():
  # The layout table's `ultr_jax/studies` row lists every study module (what `ultr_jax.studies.run` dispatches on).
  from ultr_jax import studies

  row = next(line for line in _readme().splitlines() if line.startswith("| `ultr_jax/studies` |"))
  listed = re.search(r"one module or folder each \(([^)]+)\)", row)
  assert listed, row
  assert sorted(n.strip(" `") for n in listed.group(1).split(",")) == sorted(studies.STUDIES)


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
  commands = [c for text in _sources().values() for c in re.findall(r"```sh\n(.*?)```", text, re.S)]
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


def test_scale_example_runs(capsys):
  """docs/guides/multi_device.md: a click log converted to shards, streamed, a PBM fitted from its counts and
  scored on held-out sessions; then the same log opened as it is (``open_click_log``)."""
  namespace: dict = {}
  exec(compile(_block("scale"), "docs:scale", "exec"), namespace)  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  ratios = [float(v) for v in printed[-2].strip("[]").split(",")]
  np.testing.assert_allclose(ratios, [1.0, 0.6, 0.4, 0.3, 0.2], atol=0.05)  # the generating examination
  held_out = int(namespace["data"].held_out_sessions(np.arange(4000), fraction=0.25, seed=0).sum())
  assert 900 < held_out < 1100 and float(printed[-1].split()[1]) == held_out  # only the held-out sessions scored
  exec(compile(_block("open_click_log"), "docs:open_click_log", "exec"), namespace)  # pylint: disable=exec-used
  assert capsys.readouterr().out.split() == ["8", "(5,)"]  # eight documents of one query, five ranks


def test_long_tail_example_runs(capsys):
  """docs/guides/multi_device.md: a long-tail log spilled past a memory budget, fitted one partition at a time."""
  exec(compile(_block("long_tail"), "docs:long_tail", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  assert printed[-2] == "PartitionedStatistics 64 20000.0"
  spilled, whole = (float(v) for v in printed[-1].split())
  assert abs(spilled - whole) <= 2e-4


def test_minibatch_mesh_example_runs(capsys):
  """docs/guides/multi_device.md: the minibatch fit over a mesh of every device, tables split by rows."""
  exec(compile(_block("minibatch_mesh"), "docs:minibatch_mesh", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  n = len(jax.devices())
  assert printed[-2] == f"(16000,) {n} ({16000 // n},)"
  on_mesh, one = (float(v) for v in printed[-1].split())
  assert abs(on_mesh - one) <= 1e-4


def test_feature_table_example_runs(capsys):
  """docs/guides/multi_device.md: attraction from features by a linear module, against one row per document."""
  exec(compile(_block("feature_table"), "docs:feature_table", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  from_features, one_row_each = (float(v) for v in printed[-3:-1])
  assert 1 < from_features < one_row_each, printed
  assert printed[-1] == "(1,)"


def test_feature_stream_example_runs(capsys):
  """docs/guides/multi_device.md: an SVMlight file converted to feature shards, streamed, and a ranker trained."""
  namespace: dict = {}
  exec(compile(_block("feature_stream"), "docs:feature_stream", "exec"), namespace)  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  assert printed[-2] == "500 10 16"  # lists, list size, features: those of the file
  ndcg = [float(v) for v in printed[-1].strip("[]").split(",")]
  assert len(ndcg) == 3 and ndcg[-1] > ndcg[0]  # three evaluations; the ranker learns from the stream
  exec(compile(_block("my_batches"), "docs:my_batches", "exec"), namespace)  # pylint: disable=exec-used
  ndcg = [float(v) for v in capsys.readouterr().out.strip().strip("[]").split(",")]
  assert len(ndcg) == 1 and 0.0 < ndcg[0] <= 1.0  # one evaluation at step 100 of a generator's batches


def test_rax_weights_example_runs(capsys):
  """docs/guides/rax_losses.md: rax's losses with IPS weights are the library's IPS losses."""
  exec(compile(_block("rax_weights"), "docs:rax_weights", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  for line in printed[:2]:  # rax's softmax and pairwise logistic losses, IPS-weighted, against ultr_jax's
    a, b = (float(v) for v in line.split())
    assert abs(a - b) < 1e-4 and a > 0, line
  np.testing.assert_allclose(eval(printed[2]), [1.0, 0.5 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0.1 / 0.9], atol=1e-3)
  assert np.isfinite(float(printed[3]))


def test_optax_click_model_example_runs(capsys):
  """docs/guides/optax_click_model.md: a UBM trained by a plain optax loop on its own log-likelihood."""
  exec(compile(_block("optax_click_model"), "docs:optax_click_model", "exec"), {})  # pylint: disable=exec-used
  printed = capsys.readouterr().out.strip().split("\n")
  assert printed[0] == "{'attraction': (800,), 'gamma': (5, 6)}"
  nll, perplexity = (float(v) for v in printed[1].split())
  # Zero logits (every probability 1/2) give perplexity 2; the library's fit_click_model reaches 1.539 on this
  # split (measured); a few epochs of Adam get close.
  assert nll > 0 and 1.5 < perplexity < 1.58, perplexity
