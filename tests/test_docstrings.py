"""Every public function documents every argument and what it returns, as the API reference renders them.

A docstring is read as the site reads it (napoleon's Google style): its ``Args:`` entries become the parameter list
(one entry may name several arguments, ``a, b: ...``), its ``Returns:`` (or ``Yields:``) section the return
section. Every public callable of every package's ``__all__`` needs an entry for each argument (``*args`` and
``**kwargs`` excepted) and a return section unless it returns None; a class is checked through its constructor's
arguments only where its docstring has an ``Args:`` section (NamedTuples and dataclasses list ``Attributes:``).
"""

import importlib
import inspect
import re

import pytest
from sphinx.ext.napoleon import Config, GoogleDocstring

PACKAGES = ("data", "simulation", "metrics", "graph", "evaluation", "losses", "models", "train", "studies")
_CONFIG = Config(napoleon_use_param=True, napoleon_use_rtype=False, napoleon_use_ivar=True)


def documented(doc: str) -> tuple[set, bool]:
  """The argument names a docstring's parameter list covers, and whether it has a return section."""
  text = str(GoogleDocstring(inspect.cleandoc(doc or ""), _CONFIG))
  names = set()
  for match in re.finditer(r"^:param ([^:]+):", text, re.M):
    names.update(n.strip().lstrip("*").split(" ")[-1] for n in match.group(1).split(","))
  return names, bool(re.search(r"^:(returns?|yields?):", text, re.M | re.I))


def undocumented(fn) -> list[str]:
  """What ``fn``'s docstring leaves out: ``"argument x"`` for each undocumented argument, ``"returns"``."""
  fn = inspect.unwrap(fn)
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return []
  names, has_returns = documented(fn.__doc__)
  skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
  missing = [f"argument {p.name}" for p in signature.parameters.values() if p.kind not in skip and p.name not in names]
  if not has_returns and signature.return_annotation not in (None, "None"):
    missing.append("returns")
  return missing


def public_functions():
  seen, out = set(), []
  for package in PACKAGES:
    module = importlib.import_module(f"ultr_jax.{package}")
    for name in module.__all__:
      obj = getattr(module, name)
      if inspect.isfunction(inspect.unwrap(obj)) and id(obj) not in seen:
        seen.add(id(obj))
        out.append((f"{package}.{name}", obj))
  return out


FUNCTIONS = public_functions()


@pytest.mark.parametrize("name, fn", FUNCTIONS, ids=[n for n, _ in FUNCTIONS])
def test_every_argument_and_the_return_value_is_documented(name, fn):
  assert undocumented(fn) == [], f"{name}: document these in its Args/Returns sections"


def test_the_check_reports_what_a_docstring_leaves_out():
  def scaled(x, factor, *, where=None):
    """Scales ``x``.

    Args:
      x, factor: the array and its factor.
    """
    return x * factor

  assert undocumented(scaled) == ["argument where", "returns"]

  def written(path: str) -> None:
    """Writes.

    Args:
      path: where.
    """

  assert undocumented(written) == []
  assert len(FUNCTIONS) > 200
