"""Summaries over seeds and atomic results writing (JSON, Markdown, CSV)."""

import csv
import io
import json
import math
import os
import tempfile
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

__all__ = [
  "best_and_ties",
  "summarize",
  "summarize_metrics",
  "atomic_write_text",
  "write_results",
  "write_run",
  "markdown_table",
]


def summarize(values: Sequence[float], *, confidence: float = 0.9) -> dict[str, float]:
  r"""Mean, sample standard deviation and t-interval half-width over seeds.

  .. math::
      \bar v \pm t_{(1+c)/2,\,n-1} \, s / \sqrt{n}

  Args:
    values: ``[num_seeds]`` per-seed values.
    confidence: coverage of the interval (0.9 gives ``ci90``).

  Returns:
    ``{"mean", "std", "ci90"}`` (the last key is named after ``confidence``);
    with one seed, ``std`` and the half-width are 0.

  >>> s = summarize([0.5, 0.6, 0.7])
  >>> round(s["mean"], 3), round(s["std"], 3), round(s["ci90"], 3)
  (0.6, 0.1, 0.169)
  """
  v = np.asarray(values, dtype=np.float64).reshape(-1)
  n = v.size
  mean = float(v.mean()) if n else float("nan")
  std = float(v.std(ddof=1)) if n > 1 else 0.0
  half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * std / math.sqrt(n)) if n > 1 else 0.0
  return {"mean": mean, "std": std, f"ci{int(round(confidence * 100))}": half}


def best_and_ties(per_seed: Mapping[Any, Sequence[float]], *, higher_is_better: bool = True) -> tuple[Any, list]:
  """The key with the best mean, and the keys the best does not beat over seeds.

  A key is tied with the best when the 90% t-interval of its seed-paired difference to the best includes 0
  (the seeds cannot tell them apart); keys with another number of seeds, or a single seed, cannot be paired
  and are not tied. The ties come in order of their means, best first.

  >>> best_and_ties({"a": [0.90, 0.91, 0.92], "b": [0.91, 0.91, 0.93], "c": [0.80, 0.81, 0.82]})
  ('b', ['a'])
  >>> best_and_ties({"a": [1.30, 1.31], "b": [1.35, 1.36]}, higher_is_better=False)
  ('a', [])
  """
  sign = 1.0 if higher_is_better else -1.0
  means = {k: sign * float(np.mean(v)) for k, v in per_seed.items()}
  best = max(means, key=means.get)
  ref = np.asarray(per_seed[best], np.float64)
  tied = []
  for k in sorted(means, key=means.get, reverse=True):
    diff = np.asarray(per_seed[k], np.float64) - ref
    if k != best and diff.shape == ref.shape and diff.size > 1:
      s = summarize(diff)
      if abs(s["mean"]) <= s["ci90"]:
        tied.append(k)
  return best, tied


def summarize_metrics(per_seed: Mapping[str, Any], names: Sequence[str]) -> tuple[dict, dict]:
  """One method's ``results.json`` entry and table row from per-seed metric arrays.

  Returns ``(entry, row)``: ``entry`` maps each name to its mean and holds
  ``std``, ``ci90`` and ``per_seed`` dicts; ``row`` maps each name to its
  :func:`summarize` dict (for :func:`markdown_table`).

  >>> entry, row = summarize_metrics({"ndcg@10": [0.5, 0.7]}, ["ndcg@10"])
  >>> round(entry["ndcg@10"], 3), entry["per_seed"]["ndcg@10"], round(row["ndcg@10"]["std"], 4)
  (0.6, [0.5, 0.7], 0.1414)
  """
  entry: dict[str, Any] = {}
  row: dict[str, Any] = {}
  for name in names:
    s = summarize(per_seed[name])
    entry[name] = s["mean"]
    entry.setdefault("std", {})[name] = s["std"]
    entry.setdefault("ci90", {})[name] = s["ci90"]
    entry.setdefault("per_seed", {})[name] = np.asarray(per_seed[name]).tolist()
    row[name] = s
  return entry, row


def atomic_write_text(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` atomically (temp file + ``os.replace``).

  A reader sees the old file or the new one, never a half-written one; the directory is created.

  >>> import tempfile
  >>> path = os.path.join(tempfile.mkdtemp(), "out", "note.txt")
  >>> atomic_write_text(path, "done"); open(path).read(), os.listdir(os.path.dirname(path))
  ('done', ['note.txt'])
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def _jsonable(obj: Any) -> Any:
  if isinstance(obj, Mapping):
    return {str(k): _jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_jsonable(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return _jsonable(obj.tolist())
  if isinstance(obj, (np.floating, float)):
    f = float(obj)
    return f if math.isfinite(f) else None
  if isinstance(obj, (np.integer,)):
    return int(obj)
  if isinstance(obj, np.bool_):
    return bool(obj)
  return obj


def markdown_table(
  rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str], *, row_header: str = "method", precision: int = 4
) -> str:
  """Formats ``rows[name][column]`` as a Markdown table.

  Cells may be numbers, ``{"mean", "std"}``/``{"mean", "ci90"}`` dicts
  (printed as ``mean ± half-width``) or strings.

  >>> print(markdown_table({"ips": {"ndcg@10": 0.71234}}, ["ndcg@10"]))
  | method | ndcg@10 |
  |---|---|
  | ips | 0.7123 |
  """

  def cell(v):
    if v is None:
      return "–"
    if isinstance(v, Mapping) and "mean" in v:
      spread = v.get("ci90", v.get("std"))
      if spread is None:
        return f"{v['mean']:.{precision}f}"
      return f"{v['mean']:.{precision}f} ± {spread:.{precision}f}"
    if isinstance(v, (float, np.floating)):
      return f"{float(v):.{precision}f}"
    return str(v)

  lines = [
    "| " + " | ".join([row_header, *columns]) + " |",
    "|" + "---|" * (len(columns) + 1),
  ]
  for name, row in rows.items():
    lines.append("| " + " | ".join([name, *(cell(row.get(c)) for c in columns)]) + " |")
  return "\n".join(lines)


def _csv_table(rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str], row_header: str) -> str:
  out = io.StringIO()
  writer = csv.writer(out)
  header = [row_header]
  for c in columns:
    header += [c, f"{c}_std", f"{c}_ci90"]
  writer.writerow(header)
  for name, row in rows.items():
    line = [name]
    for c in columns:
      v = row.get(c)
      if isinstance(v, Mapping):
        line += [v.get("mean"), v.get("std"), v.get("ci90")]
      else:
        line += [v, None, None]
    writer.writerow(line)
  return out.getvalue()


def write_results(
  workdir: str,
  results: Mapping[str, Any],
  *,
  table: Optional[str] = None,
  rows: Optional[Mapping[str, Mapping[str, Any]]] = None,
  columns: Optional[Sequence[str]] = None,
  row_header: str = "method",
) -> None:
  """Writes ``results.json`` (and ``table.md`` / ``table.csv``) atomically.

  Args:
    workdir: output directory (created if needed).
    results: any JSON-able nested mapping (NumPy values are converted; NaN
      and inf become ``null``).
    table: Markdown text for ``table.md``; built from ``rows``/``columns``
      when omitted and those are given.
    rows, columns: a table to write as ``table.csv`` (and ``table.md``).
    row_header: the first column's name.

  >>> import tempfile
  >>> workdir = tempfile.mkdtemp()
  >>> write_results(workdir, {"naive": {"ndcg@10": np.float32(0.5), "bad": float("nan")}},
  ...               rows={"naive": {"ndcg@10": 0.5}}, columns=["ndcg@10"])
  >>> sorted(os.listdir(workdir)), json.load(open(os.path.join(workdir, "results.json")))
  (['results.json', 'table.csv', 'table.md'], {'naive': {'ndcg@10': 0.5, 'bad': None}})
  """
  atomic_write_text(
    os.path.join(workdir, "results.json"), json.dumps(_jsonable(results), indent=2, sort_keys=False) + "\n"
  )
  if table is None and rows is not None and columns is not None:
    table = markdown_table(rows, columns, row_header=row_header)
  if table is not None:
    atomic_write_text(os.path.join(workdir, "table.md"), table.rstrip("\n") + "\n")
  if rows is not None and columns is not None:
    atomic_write_text(os.path.join(workdir, "table.csv"), _csv_table(rows, columns, row_header))


def write_run(
  path: str,
  scores: np.ndarray,
  qid: np.ndarray,
  where: np.ndarray,
  *,
  doc_ids: Optional[np.ndarray] = None,
  run_name: str = "ultr_jax",
  depth: Optional[int] = None,
) -> int:
  """Writes a TREC run file (``trec_eval``, ``ir_measures``): ``qid Q0 docno rank score run_name`` per line.

  Each query's valid items (``where``) in descending ``scores``, ties in list order, ranks from 1, at
  most ``depth`` per query. ``docno`` is ``doc_ids[q, i]`` where given (a dataset's ids), else the item's
  index ``i`` in its list (the order of the query's lines in the source file). Scores are written with
  enough digits to round-trip float32. Written atomically. Returns the number of lines.

  Args:
    path: the run file.
    scores: ``[Q, L]`` one model's scores (e.g. ``train.predict(...)[seed]``).
    qid: ``[Q]`` query ids.
    where: ``bool[Q, L]``.
    doc_ids: optional ``[Q, L]`` document ids.
    run_name: the last column.
    depth: the cut-off per query (None: every valid item).

  >>> import tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "run.txt")
  >>> write_run(p, np.array([[0.1, 0.9, 0.5], [2.0, 2.0, -np.inf]]), np.array([7, 9]),
  ...           np.array([[True, True, True], [True, True, False]]), run_name="naive")
  5
  >>> print(open(p).read().strip())
  7 Q0 1 1 0.9 naive
  7 Q0 2 2 0.5 naive
  7 Q0 0 3 0.1 naive
  9 Q0 0 1 2.0 naive
  9 Q0 1 2 2.0 naive
  """
  scores = np.asarray(scores)
  where = np.asarray(where, bool)
  if scores.ndim != 2 or scores.shape != where.shape or np.shape(qid) != scores.shape[:1]:
    raise ValueError(
      f"write_run: scores {scores.shape} must be [Q, L] like where {where.shape}, qid {np.shape(qid)} "
      "[Q] (one model: index predict()'s seed axis)"
    )
  if not np.all(np.isfinite(scores[where])):
    q, i = np.argwhere(where & ~np.isfinite(scores))[0]
    raise ValueError(f"write_run: the score of query {qid[q]} item {i} is {scores[q, i]}: a run needs finite scores")
  lines = []
  for q in range(scores.shape[0]):
    items = np.flatnonzero(where[q])
    order = items[np.argsort(-scores[q, items], kind="stable")][:depth]
    for rank, i in enumerate(order, start=1):
      doc = int(doc_ids[q, i]) if doc_ids is not None else int(i)
      lines.append(f"{qid[q]} Q0 {doc} {rank} {str(np.float32(scores[q, i]))} {run_name}")
  atomic_write_text(path, "".join(line + "\n" for line in lines))
  return len(lines)
