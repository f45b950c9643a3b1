"""Helpers for tests, benchmarks and users checking their runs.

* :func:`shared_data_dir` finds the read-only reference data.
* :func:`compare_to_expected` checks a run's ``results.json`` against a
  checked-in expected-metrics file (``expected_metrics/*.json``), the way
  allRank ships expected numbers, so a user can tell whether a run is right::

    python -m ultr_jax.testing /tmp/ultr_baselines/results.json baselines_default

  (a path to a file works too; an installed package carries the files, see :func:`expected_metrics_dir`). It
  exits 0 when every metric matches, 1 on a mismatch, and 2, with a message naming the file (and the line or
  field), when a file is missing or malformed.
"""

import math
import os
import pathlib
import sys
from typing import Any, Mapping, Optional

from ultr_jax._state_files import read_state_file

__all__ = [
  "shared_data_dir",
  "lookup",
  "compare_to_expected",
  "load_expected",
  "expected_from_results",
  "expected_metrics_dir",
  "expected_metrics_path",
  "assert_matches_expected",
]


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


#: The fields of an expected-metrics file and their types (:func:`load_expected` checks their values).
_EXPECTED_SPEC = {"config": str, "metrics": dict, "tolerance?": (float, dict), "fingerprint?": str}
_EXPECTED_RECOVERY = "fix it, or record it again from a run's results.json (ultr_jax.testing.expected_from_results)"


def load_expected(path: str) -> dict:
  """Reads an expected-metrics file, validating its fields.

  The file is JSON with

  * ``"config"`` (required): the run it describes, e.g.
    ``"experiments/baselines/configs/default.py:smoke"``;
  * ``"metrics"`` (required): ``{path: value}`` with :func:`lookup` paths
    (``"ips|ndcg@10"``) and finite numbers;
  * ``"tolerance"``: one absolute tolerance or ``{"default": t, path: t}``
    (all ``>= 0``; 0 when absent);
  * optional free-text provenance: ``"command"``, ``"source"``,
    ``"tolerance_rule"``, ``"notes"``;
  * optional ``"fingerprint"``: the hash of the run's fingerprints (``results["_fingerprint"]["hash"]``,
    written by :func:`~ultr_jax.train.write_results`); when both sides have one they must be equal.

  Raises:
    FileNotFoundError: no such file.
    ValueError: naming the file and the line (malformed JSON) or the field that is missing or malformed
      (:class:`~ultr_jax._state_files.StateFileError`, for the JSON and the fields' types).
  """
  expected = read_state_file(path, _EXPECTED_SPEC, what="an expected-metrics file", recovery=_EXPECTED_RECOVERY)
  metrics = expected["metrics"]
  if not isinstance(metrics, Mapping) or not metrics:
    raise ValueError(f"{path}: field 'metrics' must be a non-empty mapping of path -> number")
  for key, value in metrics.items():
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise ValueError(f"{path}: metrics[{key!r}] must be a finite number, got {value!r}")
  tolerance = expected.get("tolerance", 0.0)
  tols = tolerance.values() if isinstance(tolerance, Mapping) else [tolerance]
  for t in tols:
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0:
      raise ValueError(f"{path}: field 'tolerance' must hold numbers >= 0, got {t!r}")
  return expected


def expected_from_results(
  results: Mapping[str, Any], paths, *, config: str, tolerance: Any = 1e-3, **provenance: Any
) -> dict:
  """An expected-metrics mapping (the :func:`load_expected` format) from a run's results.

  ``tolerance`` is a number, a ``{"default": t, path: t}`` mapping, or a
  function ``tolerance(path) -> t`` (e.g. derived from the measured spread of
  that metric over seeds).

  >>> exp = expected_from_results({"ips": {"ndcg@10": 0.70}}, ["ips|ndcg@10"], config="c")
  >>> exp["metrics"], exp["tolerance"]
  ({'ips|ndcg@10': 0.7}, 0.001)
  """
  metrics = {p: float(lookup(results, p)) for p in paths}
  if callable(tolerance):
    per_path: Any = tolerance  # tolerance(path) -> a number
    tol: Any = {p: float(per_path(p)) for p in paths}
  else:
    tol = tolerance
  out = {"config": config, **provenance, "metrics": metrics, "tolerance": tol}
  fingerprint = _fingerprint(results)
  if fingerprint is not None:
    out["fingerprint"] = fingerprint
  return out


def _fingerprint(results: Mapping[str, Any]) -> Optional[str]:
  entry = results.get("_fingerprint")
  return entry.get("hash") if isinstance(entry, Mapping) else None


def compare_to_expected(results: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
  """Mismatches between ``results`` and an expected-metrics mapping.

  ``expected`` has ``"metrics": {path: value}`` and ``"tolerance"``: either
  one absolute tolerance (a number) or ``{"default": t, path: t, ...}``; a
  metric matches when ``|result - expected| <= tolerance``.

  Returns:
    One readable line per mismatch (empty when the run matches). When both ``results``
    (``"_fingerprint"``) and ``expected`` (``"fingerprint"``) carry a run fingerprint, a difference
    is a mismatch too (another configuration, data or click model made the results); a side
    without one is not compared. Seeds marked diverged (``"_diverged"``) are a mismatch.

  >>> compare_to_expected({"ips": {"ndcg@10": 0.71}},
  ...                     {"metrics": {"ips|ndcg@10": 0.70}, "tolerance": 0.02})
  []
  >>> compare_to_expected({"ips": {"ndcg@10": 0.60}},
  ...                     {"metrics": {"ips|ndcg@10": 0.70}, "tolerance": 0.02})
  ['ips|ndcg@10: got 0.6000, expected 0.7000 ± 0.0200']
  >>> compare_to_expected({"ips": {"ndcg@10": 0.70}, "_fingerprint": {"hash": "ab12"}},
  ...                     {"metrics": {"ips|ndcg@10": 0.70}, "fingerprint": "cd34"})
  ["fingerprint: the results' run fingerprint is 'ab12', the expected run's 'cd34' (another configuration)"]
  """
  tolerance = expected.get("tolerance", 0.0)
  problems = []
  got_fp, want_fp = _fingerprint(results), expected.get("fingerprint")
  if got_fp is not None and want_fp is not None and got_fp != want_fp:
    problems.append(
      f"fingerprint: the results' run fingerprint is {got_fp!r}, the expected run's {want_fp!r} (another configuration)"
    )
  if results.get("_diverged"):
    problems.append(f"diverged: {results['_diverged']} (run -> seeds with a non-finite loss or parameters)")
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


def expected_metrics_dir() -> pathlib.Path:
  """The folder of the expected-metrics files.

  An installed package carries them as ``ultr_jax/expected_metrics/`` (``setup.py``'s ``package_data``); a source
  checkout has them at the repository root, ``expected_metrics/``.

  >>> sorted(p.stem for p in expected_metrics_dir().glob("baselines_*.json"))
  ['baselines_default', 'baselines_smoke']
  """
  here = pathlib.Path(__file__).resolve().parent
  installed = here / "expected_metrics"
  return installed if installed.is_dir() else here.parent / "expected_metrics"


def expected_metrics_path(name: str) -> pathlib.Path:
  """The expected-metrics file ``name`` (``"baselines_smoke"``, with or without ``.json``).

  Args:
    name: a file name in :func:`expected_metrics_dir` (``<study>_<variant>``, e.g. ``"online_smoke"``).

  Returns:
    Its path.

  Raises:
    FileNotFoundError: there is no such file; the message lists the files there are.

  >>> expected_metrics_path("baselines_smoke").name
  'baselines_smoke.json'
  >>> expected_metrics_path("nope_smoke")
  Traceback (most recent call last):
  ...
  FileNotFoundError: no expected metrics 'nope_smoke.json' in ...
  """
  folder = expected_metrics_dir()
  path = folder / (name if name.endswith(".json") else name + ".json")
  if not path.is_file():
    known = ", ".join(sorted(p.stem for p in folder.glob("*.json"))) or "none"
    raise FileNotFoundError(
      f"no expected metrics {path.name!r} in {folder} (a study or variant without a recorded run); the files "
      f"there are: {known}"
    )
  return path


def _resolve_expected(expected: str) -> pathlib.Path:
  """A path to an existing file, else a name in :func:`expected_metrics_dir`."""
  path = pathlib.Path(expected)
  return path if path.is_file() else expected_metrics_path(path.name if path.suffix == ".json" else expected)


def assert_matches_expected(results: Mapping[str, Any], expected: Any) -> None:
  """Raises ``AssertionError`` listing every mismatch of ``results`` against ``expected``.

  ``expected`` is a mapping, a path, or a name in :func:`expected_metrics_dir` (``"online_smoke"``).

  >>> assert_matches_expected({"ips": {"ndcg@10": 0.60}},
  ...                         {"config": "c", "metrics": {"ips|ndcg@10": 0.70}, "tolerance": 0.02})
  Traceback (most recent call last):
  ...
  AssertionError: 1 of 1 metrics differ from c:
  ips|ndcg@10: got 0.6000, expected 0.7000 ± 0.0200
  """
  if not isinstance(expected, Mapping):
    expected = load_expected(str(_resolve_expected(str(expected))))
  problems = compare_to_expected(results, expected)
  if problems:
    raise AssertionError(
      f"{len(problems)} of {len(expected['metrics'])} metrics differ from {expected['config']}:\n" + "\n".join(problems)
    )


def _main(argv: list[str]) -> int:
  if len(argv) != 3:
    print(
      "usage: python -m ultr_jax.testing RESULTS_JSON EXPECTED (a file, or a name such as baselines_smoke)",
      file=sys.stderr,
    )
    return 2
  try:
    expected_path = _resolve_expected(argv[2])
  except FileNotFoundError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if not os.path.isfile(argv[1]):
    print(f"error: no results file {argv[1]!r} (a run writes results.json in its --workdir)", file=sys.stderr)
    return 2
  try:
    results = read_state_file(
      argv[1], {}, what="a run's results", recovery="pass the results.json a run writes in its --workdir"
    )
    expected = load_expected(str(expected_path))
  except ValueError as e:  # a malformed file: its path, and the line or field
    print(f"error: {e}", file=sys.stderr)
    return 2
  problems = compare_to_expected(results, expected)
  for line in problems:
    print("MISMATCH", line)
  print(
    f"{len(expected['metrics']) - len(problems)} of {len(expected['metrics'])} metrics match "
    f"{expected_path} ({expected['config']})"
  )
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(_main(sys.argv))
