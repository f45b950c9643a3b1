"""Small top-level functions: none in ``ultr_jax/`` is longer than 120 lines of code, and ``fit`` is under 100.

A function's length is its lines from ``def`` to its last line, less its docstring's (a long Args section is
documentation, not code); nested functions count in the function that holds them.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 120


def code_lines(node: ast.AST) -> int:
  """The lines of a function definition, not counting its docstring."""
  lines = node.end_lineno - node.lineno + 1
  first = node.body[0] if node.body else None
  if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
    lines -= first.end_lineno - first.lineno + 1
  return lines


def function_lengths(root: pathlib.Path) -> list[tuple[int, str]]:
  """``(code lines, "path:line name")`` of every function under ``root``, longest first."""
  out = []
  for path in sorted(root.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        out.append((code_lines(node), f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"))
  return sorted(out, reverse=True)


def test_no_function_is_longer_than_120_lines():
  lengths = function_lengths(ROOT / "ultr_jax")
  print("the longest functions:", *lengths[:10], sep="\n  ")  # shown with -s
  assert [f for f in lengths if f[0] > MAX_LINES] == []


def test_fit_composes_its_pieces_in_under_100_lines():
  (fit,) = [f for f in function_lengths(ROOT / "ultr_jax" / "train") if f[1].split(" ")[-1] == "fit"]
  assert "loop.py" in fit[1] and fit[0] < 100, fit


def test_the_count_leaves_out_the_docstring(tmp_path):
  body = "\n".join(f"  x{i} = {i}" for i in range(3))
  (tmp_path / "m.py").write_text(f'def f():\n  """Doc.\n\n  More doc.\n  """\n{body}\n\n\ndef g():\n  return 1\n')
  assert function_lengths(tmp_path) == [(4, f"{tmp_path.name}/m.py:1 f"), (2, f"{tmp_path.name}/m.py:11 g")]
