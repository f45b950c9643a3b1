"""Helpers for tests, benchmarks and users checking their runs.

* :func:`shared_data_dir` finds the read-only reference data.
* :func:`compare_to_expected` checks a run's ``results.json`` against a
  checked-in expected-metrics file (``expected_metrics/*.json``), the way
  allRank ships expected numbers, so a user can tell whether a run is right::

    python -m ultr_jax.testing /tmp/ultr_baselines/results.json \\
        expected_metrics/baselines_default.json
"""

import json
import math
import os
import pathlib
import sys
from typing import Any, Mapping, Optional

__all__ = ["shared_data_dir", "lookup", "compare_to_expected", "load_expected"]


def shared_data_dir() -> Optional[pathlib.Path]:
  """Locates the read-only reference data (``../shared/data``), or None.

  Looks at ``$ULTR_JAX_SHARED_DATA`` first, then ``../shared/data`` relative
  to the repository root. The data is read in place and never copied.
  """
  env = os.environ.get("ULTR_JAX_SHARED_DATA")
  candidates = [pathlib.Path(env)] if env else []
  root = pathlib.Path(__file__).resolve().parent.parent
  candidates.append(root.parent / "shared" / "data")
  for path in candidates:
    if path.is_dir():
      return path
  return None


def lookup(results: Mapping[str, Any], path: str) -> Any:
  """``results[a][b][c]`` for ``path = "a|b|c"``; a value dict yields its ``mean``.

  Keys may contain ``/`` and ``=`` (``"eta=0.1|linear/lbd|ndcg@10"``), so the
  separator is ``|``.

  >>> lookup({"ips": {"ndcg@10": {"mean": 0.7, "std": 0.1}}}, "ips|ndcg@10")
  0.7
  """
  node: Any = results
  for key in path.split("|"):
    if not isinstance(node, Mapping) or key not in node:
      raise KeyError(f"{path!r}: no key {key!r}")
    node = node[key]
  if isinstance(node, Mapping) and "mean" in node:
    node = node["mean"]
  return node


def load_expected(path: str) -> dict:
  """Reads an expected-metrics file, validating its fields."""
  with open(path) as f:
    expected = json.load(f)
  for field in ("config", "metrics"):
    if field not in expected:
      raise ValueError(f"{path}: missing field {field!r}")
  return expected


def compare_to_expected(results: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
  """Mismatches between ``results`` and an expected-metrics mapping.

  ``expected`` has ``"metrics": {path: value}`` and ``"tolerance"``: either
  one absolute tolerance (a number) or ``{"default": t, path: t, ...}``; a
  metric matches when ``|result - expected| <= tolerance``.

  Returns:
    One readable line per mismatch (empty when the run matches).

  >>> compare_to_expected({"ips": {"ndcg@10": 0.71}},
  ...                     {"metrics": {"ips|ndcg@10": 0.70}, "tolerance": 0.02})
  []
  >>> compare_to_expected({"ips": {"ndcg@10": 0.60}},
  ...                     {"metrics": {"ips|ndcg@10": 0.70}, "tolerance": 0.02})
  ['ips|ndcg@10: got 0.6000, expected 0.7000 ± 0.0200']
  """
  tolerance = expected.get("tolerance", 0.0)
  problems = []
  for path, want in expected["metrics"].items():
    tol = tolerance if not isinstance(tolerance, Mapping) else tolerance.get(path, tolerance.get("default", 0.0))
    try:
      got = lookup(results, path)
    except KeyError as e:
      problems.append(f"{path}: missing from results ({e})")
      continue
    if got is None or not isinstance(got, (int, float)) or not math.isfinite(got):
      problems.append(f"{path}: got {got!r}, expected {want:.4f}")
    elif abs(got - want) > tol:
      problems.append(f"{path}: got {got:.4f}, expected {want:.4f} ± {tol:.4f}")
  return problems


def _main(argv: list[str]) -> int:
  if len(argv) != 3:
    print("usage: python -m ultr_jax.testing RESULTS_JSON EXPECTED_JSON", file=sys.stderr)
    return 2
  with open(argv[1]) as f:
    results = json.load(f)
  expected = load_expected(argv[2])
  problems = compare_to_expected(results, expected)
  for line in problems:
    print("MISMATCH", line)
  print(f"{len(expected['metrics']) - len(problems)} of {len(expected['metrics'])} metrics match "
        f"{argv[2]} ({expected['config']})")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(_main(sys.argv))
