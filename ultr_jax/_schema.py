"""The one schema of config values: each field's type and range, for the binaries and the Python API alike.

:func:`~ultr_jax.train.fit`'s config declares its rules in :mod:`ultr_jax.train.schema` (checked at the start of
``fit``, and reused by every study's training section); a study declares, beside its defaults, ``CONFIG_RULES``: a dotted field path (``"data.num_train"``; a ``*``
segment matches every child of a section, ``"epochs.*"``) -> :class:`Rule`. :func:`validate_config` checks
them all before the study does any work and stops at the first field out of range with a ``ValueError``
naming the field, its value and what is allowed.

>>> rules = {"num_seeds": integer(1), "data.click_test_fraction": number(0, 1, lo_open=True, hi_open=True)}
>>> validate_config({"num_seeds": 2, "data": {"click_test_fraction": 1.5}}, rules)
Traceback (most recent call last):
ValueError: config.data.click_test_fraction: 1.5 is out of range; expected a number in (0, 1)
"""

import dataclasses
import math
import numbers
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

__all__ = [
  "Rule",
  "boolean",
  "fractions",
  "integer",
  "number",
  "one_of",
  "optional",
  "sequence",
  "unknown_variant",
  "validate_config",
  "rule_paths",
  "for_fields",
]


@dataclasses.dataclass(frozen=True)
class Rule:
  """The allowed values of one config field.

  Attributes:
    check: ``check(value) -> bool``, True when ``value`` is allowed.
    allowed: what is allowed, in words (the error's ``expected ...``).
    bad: a value of the field's type that ``check`` refuses (the tests set it and expect the error).
  """

  check: Callable[[Any], bool]
  allowed: str
  bad: Any


def _is_int(value: Any) -> bool:
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _interval(lo: Optional[float], hi: Optional[float], lo_open: bool, hi_open: bool) -> str:
  if lo is not None and hi is not None:
    return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
  if lo is not None:
    return f"{'>' if lo_open else '>='} {lo:g}"
  if hi is not None:
    return f"{'<' if hi_open else '<='} {hi:g}"
  return "any"


def _outside(lo: Optional[float], hi: Optional[float], lo_open: bool) -> Any:
  """An integer just outside the range (an int also fits a float field of an ``ml_collections`` config)."""
  if lo is not None:
    return math.floor(lo) if lo_open and float(lo).is_integer() else math.floor(lo) - 1
  if hi is None:
    raise ValueError("a rule with neither bound has no value outside its range; give lo or hi")
  return math.floor(hi) + 1


def integer(lo: Optional[int] = None, hi: Optional[int] = None) -> Rule:
  r"""An integer :math:`n` with ``lo`` :math:`\le n \le` ``hi`` (None: unbounded; a bool is no integer).

  >>> r = integer(1)
  >>> r.check(3), r.check(0), r.check(2.0), r.allowed, r.bad
  (True, False, False, 'an integer >= 1', 0)
  """
  check = lambda v: _is_int(v) and (lo is None or v >= lo) and (hi is None or v <= hi)
  return Rule(check, f"an integer {_interval(lo, hi, False, False)}".replace(" any", ""), _outside(lo, hi, False))


def number(
  lo: Optional[float] = None,
  hi: Optional[float] = None,
  *,
  lo_open: bool = False,
  hi_open: bool = False,
  finite: bool = True,
) -> Rule:
  r"""A real number :math:`x` in the interval from ``lo`` to ``hi`` (open ends where asked; finite unless not ``finite``).

  >>> r = number(0, 1, lo_open=True)
  >>> r.check(1), r.check(0.0), r.check(float("nan")), r.allowed, r.bad
  (True, False, False, 'a number in (0, 1]', 0)
  """

  def check(v: Any) -> bool:
    real = isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isnan(v)
    if not (_is_real(v) if finite else real):
      return False
    x = float(v)  # a real number (numbers.Real declares no comparison with float)
    above = lo is None or (x > lo if lo_open else x >= lo)
    below = hi is None or (x < hi if hi_open else x <= hi)
    return above and below

  return Rule(check, f"a number {_interval(lo, hi, lo_open, hi_open)}".replace(" any", ""), _outside(lo, hi, lo_open))


def boolean() -> Rule:
  """True or False (a NumPy bool too; an integer is no bool).

  >>> r = boolean()
  >>> r.check(True), r.check(1), r.allowed
  (True, False, 'a bool')
  """
  return Rule(lambda v: isinstance(v, (bool, np.bool_)), "a bool", None)


def one_of(*choices: Any) -> Rule:
  """One of ``choices``.

  >>> r = one_of("adam", "sgd")
  >>> r.check("sgd"), r.check("adamw"), r.allowed
  (True, False, "one of ('adam', 'sgd')")
  """
  bad = "<not one of them>" if all(isinstance(c, str) for c in choices) else None
  return Rule(lambda v: v in choices, f"one of {choices}", bad)


def optional(rule: Rule) -> Rule:
  """None (not set: the default applies) or a value ``rule`` allows.

  >>> r = optional(number(0))
  >>> r.check(None), r.check(2.0), r.check(-1.0), r.allowed
  (True, True, False, 'None or a number >= 0')
  """
  return Rule(lambda v: v is None or rule.check(v), f"None or {rule.allowed}", rule.bad)


def sequence(item: Rule, *, min_len: int = 0) -> Rule:
  """A tuple or list of at least ``min_len`` values, each one ``item`` allows.

  >>> r = sequence(integer(1), min_len=1)
  >>> r.check((2, 3)), r.check(()), r.check((2, 0)), r.allowed, r.bad
  (True, False, False, 'a sequence of at least 1 of: an integer >= 1', (0,))
  """
  check = lambda v: isinstance(v, (tuple, list)) and len(v) >= min_len and all(item.check(x) for x in v)
  length = f"at least {min_len} of" if min_len else "any number of"
  return Rule(check, f"a sequence of {length}: {item.allowed}", (item.bad,))


def fractions(*, min_len: int = 1) -> Rule:
  """At least ``min_len`` finite, non-negative numbers with a positive sum (shares to normalise: not all zero).

  >>> r = fractions()
  >>> r.check((0.5, 0.5)), r.check((0.0, 0.0)), r.check((1.0, -0.5)), r.allowed, r.bad
  (True, False, False, 'a sequence of at least 1 numbers >= 0, not all 0', (0.0,))
  """
  nonneg = number(0)
  check = lambda v: isinstance(v, (tuple, list)) and len(v) >= min_len and all(map(nonneg.check, v)) and sum(v) > 0
  return Rule(check, f"a sequence of at least {min_len} numbers >= 0, not all 0", (0.0,) * min_len)


def _children(node: Any) -> list[str]:
  return list(node.keys()) if hasattr(node, "keys") else []


def rule_paths(config: Any, path: str) -> Iterator[tuple[str, Any]]:
  """The ``(dotted path, value)`` of every field of ``config`` that ``path`` names (``*``: every child).

  A path the config does not hold names nothing (a section a variant leaves out).

  >>> list(rule_paths({"epochs": {"dla": 2, "em": 3}}, "epochs.*"))
  [('epochs.dla', 2), ('epochs.em', 3)]
  """

  def walk(node: Any, parts: Sequence[str], prefix: str) -> Iterator[tuple[str, Any]]:
    if not parts:
      yield prefix, node
      return
    head, rest = parts[0], parts[1:]
    keys = _children(node) if head == "*" else [head]
    for key in keys:
      if key in _children(node):
        yield from walk(node[key], rest, f"{prefix}.{key}" if prefix else str(key))

  yield from walk(config, path.split("."), "")


def for_fields(rules: Mapping[str, Rule], *configs: Any) -> dict[str, Rule]:
  """The ``rules`` that name a field of one of ``configs`` (a shared set of rules cut to a study's sections).

  >>> sorted(for_fields({"train.steps": integer(1), "train.patience": integer(0)}, {"train": {"steps": 3}}))
  ['train.steps']
  """
  return {path: rule for path, rule in rules.items() if any(next(rule_paths(c, path), None) for c in configs)}


def validate_config(config: Any, rules: Mapping[str, Rule], *, prefix: str = "config") -> None:
  """Checks every field that ``rules`` names against its rule; the first one out of range is an error.

  Args:
    config: a study's config (``ml_collections.ConfigDict`` or nested mappings).
    rules: dotted field path (``*``: every child of a section) -> :class:`Rule`.
    prefix: the config's name in the error.

  Raises:
    ValueError: ``"<prefix>.<field>: <value> is out of range; expected <allowed>"``.

  >>> validate_config({"runs": 0}, {"runs": integer(1)})
  Traceback (most recent call last):
  ValueError: config.runs: 0 is out of range; expected an integer >= 1
  """
  for path, rule in rules.items():
    for field, value in rule_paths(config, path):
      if not rule.check(value):
        raise ValueError(f"{prefix}.{field}: {value!r} is out of range; expected {rule.allowed}")


def unknown_variant(study: str, variant: str, variants: Sequence[str]) -> ValueError:
  """The error for a variant ``study`` does not have, naming the known ones.

  >>> print(unknown_variant("lbd", "large", ("default", "smoke")))
  unknown config variant 'large' of study 'lbd'; expected one of ('default', 'smoke')
  """
  return ValueError(f"unknown config variant {variant!r} of study {study!r}; expected one of {tuple(variants)}")
