"""The layers of the architecture table: imports only go down; the core never imports the studies or matplotlib.

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


# The architecture table, bottom up: a module may import its own layer and the layers below it, never above.
# ``types``, ``_numerics``, ``_optim`` and ``_processes`` (jax.distributed helpers) are the shared base; ``testing`` compares a study's results with the
# expected-metric files.
LAYERS = {
  "types": 0,
  "_numerics": 0,
  "_optim": 0,
  "_processes": 0,
  "_schema": 0,  # config value rules: the binaries', train.fit's and the studies'
  "_state_files": 0,  # the validating reader of run-state and side files
  "_workdir": 0,  # the IN_PROGRESS lock: runs and conversions
  "_checkpoint": 0,  # orbax checkpoints and their restoring: train.fit's and the minibatch click-model fit's
  "_fingerprint": 0,  # the digests and fingerprint_diff those checkpoints are refused by
  "_divergence": 0,  # the in-scan non-finite diagnosis and first_nonfinite: train's steps and the minibatch fit's
  "data": 1,
  "simulation": 2,
  "metrics": 2,
  "graph": 2,
  "evaluation": 2,
  "losses": 3,
  "models": 3,
  "train": 4,
  "studies": 5,
  "testing": 5,
}


def upward_imports(root: pathlib.Path = ROOT) -> list[str]:
  """Every import in ``ultr_jax/`` of a higher layer than the importing module's (or of an undeclared one)."""
  bad = []
  for path in sorted((root / "ultr_jax").rglob("*.py")):
    parts = path.relative_to(root / "ultr_jax").parts
    if parts == ("__init__.py",):
      continue  # the package's own namespace re-exports every layer
    source = parts[0].removesuffix(".py")
    for line, name in imported_names(path, root):
      target = name.split(".")[1] if name.startswith("ultr_jax.") else None
      if target is None or target == source:
        continue
      if source not in LAYERS or target not in LAYERS or LAYERS[target] > LAYERS[source]:
        bad.append(f"{path.relative_to(root)}:{line}: {source} imports {name}")
  return bad


def test_imports_follow_the_layers_of_the_architecture_table():
  assert upward_imports() == []
  assert {p.name.removesuffix(".py") for p in PACKAGE.iterdir() if not p.name.startswith(("__", "."))} <= set(LAYERS)


def test_the_layer_check_reports_an_upward_import(tmp_path):
  for name, text in {
    "data/loader.py": "from ultr_jax.train import fit\n",
    "losses/x.py": "import ultr_jax.data\n",
  }.items():
    path = tmp_path / "ultr_jax" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
  assert upward_imports(tmp_path) == [
    "ultr_jax/data/loader.py:1: data imports ultr_jax.train",
    "ultr_jax/data/loader.py:1: data imports ultr_jax.train.fit",
  ]


def _package_modules(package: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
  """Every module of the package by dotted name (a package by its ``__init__.py``)."""
  root = package.parent
  out = {}
  for path in sorted(package.rglob("*.py")):
    parts = path.relative_to(root).with_suffix("").parts
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


def _import_edges(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
  """The package's modules that ``name`` imports, at module level or inside functions (``ast``): ``import a.b``
  and ``from a import b`` name ``a.b`` when that is a module, else ``a`` (an object ``a`` re-exports)."""
  package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
  targets = set()
  for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
    if isinstance(node, ast.Import):
      targets.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
      for alias in node.names:
        targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
  return {t for t in targets if t in modules and t != name}


def _find_cycle(graph: dict[str, set[str]]) -> list[str]:
  """One import cycle of ``graph`` as ``[a, b, ..., a]`` (depth-first search), or ``[]`` if there is none."""
  state, stack = {}, []  # state: 1 on the current path, 2 done

  def visit(node):
    state[node] = 1
    stack.append(node)
    for nxt in sorted(graph[node]):
      if state.get(nxt) == 1:
        return stack[stack.index(nxt) :] + [nxt]
      if nxt not in state:
        found = visit(nxt)
        if found:
          return found
    state[node] = 2
    stack.pop()
    return []

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return []


def test_the_package_import_graph_has_no_cycle(tmp_path):
  """No module of ``ultr_jax`` imports, directly or through others (lazy imports inside functions included), a
  module that imports it back: a cycle hides a layering error (and breaks with a partly initialised module)."""
  toy = tmp_path / "pkg"
  (toy / "sub").mkdir(parents=True)
  (toy / "__init__.py").write_text("from pkg.sub import b\n")
  (toy / "sub" / "__init__.py").write_text("")
  (toy / "sub" / "b.py").write_text("def f():\n  from pkg import x  # a lazy import of the package re-exporting b\n")
  toy_modules = _package_modules(toy)
  toy_graph = {name: _import_edges(name, path, toy_modules) for name, path in toy_modules.items()}
  assert _find_cycle(toy_graph) == ["pkg", "pkg.sub.b", "pkg"]  # the check sees what it must reject
  modules = _package_modules()
  graph = {name: _import_edges(name, path, modules) for name, path in modules.items()}
  assert len(graph) > 100 and "ultr_jax.simulation.click_models.base" in graph["ultr_jax.simulation.click_models.ubm"]
  cycle = _find_cycle(graph)
  assert not cycle, "import cycle: " + " -> ".join(cycle)
