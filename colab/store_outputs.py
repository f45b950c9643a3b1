"""Runs the Colab notebooks in smoke mode on CPU and stores their outputs in them, for the documentation site.

    python colab/store_outputs.py                 # every colab/*.ipynb
    python colab/store_outputs.py quickstart ope  # some of them

Each notebook runs headlessly (``ULTR_JAX_SMOKE=1``, ``JAX_PLATFORMS=cpu``, cwd = the repository root), as
``tests/test_notebooks.py`` runs it, and is written back (atomically) with its outputs and, in its metadata
``ultr_jax.code_sha256``, a digest of its code cells: ``tests/test_notebooks.py`` fails when a code cell has changed
since its outputs were stored, so the site never shows outputs of code that is no longer there. Run it after
editing a notebook.
"""

import hashlib
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def code_digest(cells) -> str:
  """SHA-256 of the notebook's code cells' sources, in order (what its stored outputs were produced by)."""
  sources = [cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]) for cell in cells]
  code = [s for cell, s in zip(cells, sources) if cell["cell_type"] == "code"]
  return hashlib.sha256(json.dumps(code).encode("utf-8")).hexdigest()


def store_outputs(path: pathlib.Path, timeout: int = 600) -> float:
  """Executes ``path`` in smoke mode and writes it back with its outputs; returns the seconds it took."""
  import nbclient  # pylint: disable=import-outside-toplevel
  import nbformat  # pylint: disable=import-outside-toplevel

  nb = nbformat.read(path, as_version=4)
  env = {**os.environ, "ULTR_JAX_SMOKE": "1", "JAX_PLATFORMS": "cpu"}
  client = nbclient.NotebookClient(
    nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": str(ROOT)}}
  )
  start = time.perf_counter()
  client.execute(env=env)
  seconds = time.perf_counter() - start
  nb.metadata.setdefault("ultr_jax", {})["code_sha256"] = code_digest(nb.cells)
  nb.metadata["ultr_jax"]["outputs"] = "smoke mode, CPU (colab/store_outputs.py)"
  tmp = path.with_suffix(".ipynb.tmp")
  nbformat.write(nb, tmp)
  os.replace(tmp, path)
  return seconds


def main(names) -> None:
  paths = sorted((ROOT / "colab").glob("*.ipynb"))
  if names:
    paths = [p for p in paths if p.stem in names]
    missing = set(names) - {p.stem for p in paths}
    if missing:
      raise SystemExit(f"no notebook colab/<name>.ipynb for {sorted(missing)}")
  for path in paths:
    print(f"{path.name}: {store_outputs(path):.1f} s", flush=True)


if __name__ == "__main__":
  main(sys.argv[1:])
