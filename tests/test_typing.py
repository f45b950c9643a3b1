"""The interfaces of ``ultr_jax.types`` stand in the signatures: no bare ``Callable`` where one of its Protocols
applies, and no local alias shadowing one; pyright (``pyrightconfig.json``) then checks the calls against them."""

import ast
import pathlib
import shutil
import subprocess

import pytest

from ultr_jax import types

# One worker: the probe test below writes a file into the package for a moment, which pyright must not read.
pytestmark = pytest.mark.xdist_group("typing")

ROOT = pathlib.Path(__file__).resolve().parent.parent / "ultr_jax"
PROTOCOLS = {n for n in types.__all__ if isinstance(getattr(types, n), type) and n not in ("Array",)}
# A parameter or field of this name is one of these interfaces (a reduction, a click simulator).
NAMED = {"reduce_fn": "ReduceFn", "click_fn": "ClickFn"}
# A function of this name returns a click simulator.
RETURNS = {"make_click_fn": "ClickFn", "make_position_trust_click_fn": "ClickFn", "click_function": "ClickFn"}


def _sources():
  return sorted(p for p in ROOT.rglob("*.py") if "typings" not in p.parts)


def _problems(path: pathlib.Path) -> list[str]:
  tree = ast.parse(path.read_text(), filename=str(path))
  where = lambda node: f"{path.relative_to(ROOT.parent)}:{node.lineno}"
  out = []
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
      for a in args:
        if a.arg in NAMED and a.annotation is not None and "Callable" in ast.unparse(a.annotation):
          out.append(f"{where(a)}: {node.name}({a.arg}: {ast.unparse(a.annotation)}), use {NAMED[a.arg]}")
      if node.name in RETURNS and node.returns is not None and "Callable" in ast.unparse(node.returns):
        out.append(f"{where(node)}: {node.name} -> {ast.unparse(node.returns)}, use {RETURNS[node.name]}")
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
      if node.target.id in NAMED and "Callable" in ast.unparse(node.annotation):
        out.append(f"{where(node)}: {node.target.id}: {ast.unparse(node.annotation)}, use {NAMED[node.target.id]}")
    if isinstance(node, ast.Assign) and path.name != "types.py":  # a local alias of a Protocol's name
      for t in node.targets:
        if isinstance(t, ast.Name) and t.id in PROTOCOLS:
          out.append(f"{where(node)}: {t.id} = {ast.unparse(node.value)} shadows ultr_jax.types.{t.id}")
  return out


def test_protocols_stand_where_they_apply():
  problems = [p for path in _sources() for p in _problems(path)]
  assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
  "source, expected",
  [
    ("def f(x, *, reduce_fn: Optional[Callable] = None): ...", "use ReduceFn"),
    ("def g(click_fn: Callable[[Array, Batch], dict]): ...", "use ClickFn"),
    ("def make_click_fn(config) -> Callable[[PRNGKey, Batch], dict]: ...", "use ClickFn"),
    ("ClickFn = Callable[[Array, Batch], dict]", "shadows ultr_jax.types.ClickFn"),
  ],
)
def test_the_check_finds_a_bare_callable(tmp_path, source, expected):
  path = ROOT / "_probe_for_test.py"
  try:
    path.write_text(source + "\n")
    assert any(expected in p for p in _problems(path))
  finally:
    path.unlink()


def test_the_protocols_are_the_library_types():
  assert {"ReduceFn", "ClickFn", "LossFn", "ScoreFn", "MethodInitFn", "MethodLossFn"} <= PROTOCOLS


def test_pyright_reports_no_errors():
  """The type checker over the whole package (``pyrightconfig.json``), as a test: it runs beside the other tests."""
  pyright = shutil.which("pyright")
  if pyright is None:
    pytest.skip("pyright is in the test extra: pip install -e '.[test]'")
  proc = subprocess.run([pyright], cwd=ROOT.parent, capture_output=True, text=True, timeout=1200)
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
