"""Executes every colab/*.ipynb headlessly on CPU in smoke mode and checks one real value per notebook.

The kernel runs with ``ULTR_JAX_SMOKE=1`` (each notebook's form default is overridden) and
``JAX_PLATFORMS=cpu``, one CPU device, cwd = the repo root (so the study notebooks find
``experiments/``, and the setup cells skip the pip install because ``ultr_jax`` imports).
"""

import importlib.util
import json
import os
import pathlib
import re
import time

import pytest


nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "colab").glob("*.ipynb"))


def _store_outputs_module():
  """``colab/store_outputs.py``, the script that stores the notebooks' outputs (loaded by path)."""
  spec = importlib.util.spec_from_file_location("store_outputs", ROOT / "colab" / "store_outputs.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


code_digest = _store_outputs_module().code_digest


def _kernel_name(tmp_path_factory):
  """``python3`` if registered (jupyter_client falls back to ipykernel's native spec); else ipykernel's
  spec installed into a temporary prefix, returned as an extra ``JUPYTER_PATH`` entry."""
  from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

  try:
    KernelSpecManager().get_kernel_spec("python3")
    return "python3", None
  except NoSuchKernel:
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("jupyter")
    install(prefix=str(prefix), kernel_name="python3")
    return "python3", str(prefix / "share" / "jupyter")


def _text(nb):
  out = []
  for cell in nb.cells:
    for o in cell.get("outputs", []):
      if o.get("output_type") == "stream":
        out.append(o["text"])
      elif "data" in o and "text/plain" in o["data"]:
        out.append(o["data"]["text/plain"])
  return "".join(out)


def _table_rows(text):
  return {m.group(1).strip() for m in re.finditer(r"^\| ([^|]+?) \|", text, re.M)}


def _check(name, text, value):
  value = json.loads(value)
  if name == "quickstart":
    assert set(value) == {"ndcg@10", "err@10", "mrr"} and all(0 <= v <= 1 for v in value.values()), value
    assert "one fixed ranking:  identifiable False  K = 10" in text
    assert "pdgd: test nDCG@10" in text and "dbgd: test nDCG@10" in text
    assert "plus a shuffle:     identifiable True  K = 1" in text
    # The click-model cell: the DCM's own log is best explained by the DCM (or the DBN, which nests it).
    assert re.search(r"best held-out perplexity: (dcm|dbn)\b", text), text[-2000:]
    floor = float(re.search(r"the true DCM's own perplexity \(the floor\): ([0-9.]+)", text).group(1))
    fitted = float(re.search(r"^\| dcm \| ([0-9.]+) \|", text, re.M).group(1))
    assert 1.0 < floor < fitted, (floor, fitted)  # no fit beats the parameters that generated the log
    return
  if name == "identifiability":  # harvesting identifies exactly position 1's IG component
    assert "design K=1: harvested 10/10 positions" in text
    assert "design K=2: harvested 4/10 positions [0, 1, 2, 3]" in text
    assert "design K=4: harvested 3/10 positions [0, 1, 2]" in text
  # Study notebooks expose RESULT = {row: ndcg-like metric in [0, 1]} and print it as a table.
  assert value, f"{name}: empty RESULT"
  assert all(0.0 <= v <= 1.0 for v in value.values()), value
  assert set(value) <= _table_rows(text), (sorted(value), sorted(_table_rows(text)))
  expected = {
    "identifiability": {"DLA", "DLA + node merging"},
    "lbd": {"linear/click_data", "linear/lbd"},
    "cld": {"naive", "ips", "cld"},
    "sif": {"naive", "sif_full"},
    "ope": {"sips", "iips", "rips", "dm[pbm]"},  # RESULT: each estimator's interval coverage
  }[name]
  assert expected <= set(value), (name, sorted(value))


def test_there_are_six_notebooks():
  assert [p.stem for p in NOTEBOOKS] == ["cld", "identifiability", "lbd", "ope", "quickstart", "sif"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_valid_nbformat_4_5(path):
  """Every cell has a unique id (nbformat 4.5; a missing id is to become a hard validation error)."""
  raw = json.loads(path.read_text(encoding="utf-8"))
  assert (raw["nbformat"], raw["nbformat_minor"]) >= (4, 5)
  ids = [cell.get("id") for cell in raw["cells"]]
  assert None not in ids and len(set(ids)) == len(ids), ids
  nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))


# The quickstart runs in the default run; the study notebooks, whose studies the default run tests through their
# smoke binaries, are slow (their stored outputs are still checked against their code by the digest test below).
@pytest.mark.parametrize(
  "path",
  [pytest.param(p, marks=() if p.stem == "quickstart" else pytest.mark.slow) for p in NOTEBOOKS],
  ids=[p.stem for p in NOTEBOOKS],
)
def test_notebook_runs_in_smoke_mode(path, tmp_path_factory, monkeypatch, subprocess_env):
  nb = nbformat.read(path, as_version=4)
  assert nb.metadata["accelerator"] == "TPU" and nb.metadata["kernelspec"]["name"] == "python3"
  source = "\n".join(c.source for c in nb.cells)
  assert f"https://colab.research.google.com/github/ultr-jax/ultr_jax/blob/main/colab/{path.name}" in source
  # Outside a Python that has ultr_jax, the setup cell installs the checkout the notebook sits in, else a wheel or
  # requirement named by ULTR_JAX_INSTALL, else the repository's main branch (no tag that may not exist).
  assert '["-e", str(checkout)]' in source and 'os.environ.get("ULTR_JAX_INSTALL"' in source
  assert "ultr_jax@v" not in source and "git clone" not in source
  assert "setup_tpu" not in source and "tensorflow" not in source.lower()
  kernel, extra_path = _kernel_name(tmp_path_factory)
  if extra_path:  # the kernel spec manager of this process must see the temporary spec too
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(p for p in (extra_path, os.environ.get("JUPYTER_PATH")) if p))
  # The last cell of the test exports the checked value as JSON.
  probe = "RESULT" if path.stem != "quickstart" else "METRIC_VALUES"
  nb.cells.append(nbformat.v4.new_code_cell(f"import json as _json; print('@@' + _json.dumps({probe}))"))
  client = nbclient.NotebookClient(nb, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(ROOT)}})
  t0 = time.perf_counter()
  client.execute(env={**subprocess_env, "ULTR_JAX_SMOKE": "1"})  # raises CellExecutionError on any cell error
  seconds = time.perf_counter() - t0
  print(f"{path.name}: {seconds:.1f} s")  # shown with -s; budget: well under 60 s on 2 loaded cores
  text = _text(nb)
  if path.stem == "quickstart":  # the training cell shows its learning curves inline
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])), text[-1000:]
  value = text.rsplit("@@", 1)[1].strip()
  _check(path.stem, text, value)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_outputs_belong_to_the_code(path):
  """The site shows each notebook's stored outputs: they must come from its current code cells, run in full.

  ``colab/store_outputs.py`` runs a notebook in smoke mode and records a digest of its code cells; a code cell
  edited since then (or a notebook never run) fails here until the outputs are stored again.
  """
  raw = json.loads(path.read_text(encoding="utf-8"))
  stored = raw["metadata"].get("ultr_jax", {}).get("code_sha256")
  assert stored == code_digest(raw["cells"]), (
    f"{path.name}: outputs are stale; run python colab/store_outputs.py {path.stem}"
  )
  code = [cell for cell in raw["cells"] if cell["cell_type"] == "code"]
  assert all(cell.get("execution_count") for cell in code), f"{path.name}: a code cell was not run"
  errors = [o for cell in code for o in cell.get("outputs", []) if o.get("output_type") == "error"]
  assert not errors, f"{path.name}: stored outputs hold an error"
  assert any(cell.get("outputs") for cell in code)


def test_the_digest_changes_with_the_code_only():
  cells = [{"cell_type": "markdown", "source": "# A"}, {"cell_type": "code", "source": ["x = 1\n", "print(x)"]}]
  digest = code_digest(cells)
  assert code_digest([{**cells[0], "source": "# B"}, cells[1]]) == digest  # prose is not code
  assert code_digest([cells[0], {**cells[1], "source": "x = 2\nprint(x)"}]) != digest
