"""The library/study boundary: the core never imports the studies or matplotlib.

The core packages (``data``, ``simulation``, ``metrics``, ``graph``, ``losses``, ``models``, ``train`` and
the top-level private modules) hold reusable pieces only; paper studies, their tables and figures live in
``ultr_jax/studies/``. Two checks: every core module's imports, read with ``ast`` (module level and inside
functions, so a lazy import counts too), and what a fresh interpreter loads for ``import ultr_jax.train,
ultr_jax.losses``.
"""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ultr_jax"
CORE = ("data", "simulation", "metrics", "graph", "evaluation", "losses", "models", "train")
FORBIDDEN = ("ultr_jax.studies", "matplotlib")
# Core packages whose imports within ultr_jax are limited to the layers below them (and the private helpers).
CORE_ALLOWED = {
  "evaluation": ("data", "simulation", "metrics", "evaluation", "types", "_numerics"),
}


def _core_modules() -> list[pathlib.Path]:
  files = [p for pkg in CORE for p in sorted((PACKAGE / pkg).rglob("*.py"))]
  files += [p for p in sorted(PACKAGE.glob("*.py")) if p.name != "__init__.py"]  # _numerics, types, testing, ...
  return files


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = path.relative_to(root).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[tuple[int, str]]:
  """Every module an ``import`` / ``from ... import`` in ``path`` names (relative imports resolved)."""
  tree = ast.parse(path.read_text(), filename=str(path))
  package = _module_name(path, root).split(".")
  if path.name != "__init__.py":
    package = package[:-1]
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out += [(node.lineno, alias.name) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
      out.append((node.lineno, base))
      out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]  # `from ultr_jax import studies`
  return out


def _forbidden(name: str) -> bool:
  return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_core_modules_exist():
  modules = _core_modules()
  assert len(modules) > 40 and PACKAGE / "train" / "loop.py" in modules


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_module_imports_no_study_and_no_matplotlib(path):
  bad = [f"line {line}: {name}" for line, name in imported_names(path) if _forbidden(name)]
  assert not bad, f"{path.relative_to(ROOT)} imports {bad}; move that code to ultr_jax/studies/"


@pytest.mark.parametrize(
  "path",
  [p for pkg in CORE_ALLOWED for p in sorted((PACKAGE / pkg).rglob("*.py"))],
  ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_core_package_imports_only_the_layers_below(path):
  allowed = CORE_ALLOWED[path.relative_to(PACKAGE).parts[0]]
  bad = [
    f"line {line}: {name}"
    for line, name in imported_names(path)
    if name.startswith("ultr_jax.") and name.split(".")[1] not in allowed
  ]
  assert not bad, f"{path.relative_to(ROOT)} imports {bad}; a core package imports only {allowed}"


def test_the_import_check_sees_lazy_and_relative_imports(tmp_path):
  pkg = tmp_path / "ultr_jax" / "train"
  pkg.mkdir(parents=True)
  mod = pkg / "m.py"
  mod.write_text("def f():\n  import matplotlib.pyplot as plt\n  from ..studies import lbd\n  from .. import studies\n")
  names = [n for _, n in imported_names(mod, tmp_path)]
  assert {"matplotlib.pyplot", "ultr_jax.studies.lbd", "ultr_jax.studies"} <= set(names)
  assert [n for n in names if _forbidden(n)] == [
    "matplotlib.pyplot",
    "ultr_jax.studies",
    "ultr_jax.studies.lbd",
    "ultr_jax.studies",
  ]


def test_importing_train_and_losses_loads_no_study_and_no_matplotlib():
  code = (
    "import sys, ultr_jax.train, ultr_jax.losses, ultr_jax.graph, ultr_jax.simulation, ultr_jax.models\n"
    "import ultr_jax.evaluation\n"
    "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib' or m.startswith('ultr_jax.studies'))\n"
    "print(bad)\n"
  )
  out = subprocess.run(
    [sys.executable, "-c", code],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=True,
    env={**os.environ, "JAX_PLATFORMS": "cpu"},
  )
  assert out.stdout.strip() == "[]", out.stdout + out.stderr
