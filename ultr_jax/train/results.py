"""Summaries over seeds and atomic results writing (JSON, Markdown, CSV); a run's in-progress marker.

Files are written atomically (a temp file in the same directory, then ``os.replace``) with the usual
permissions (``0o666`` less the umask, as ``open`` gives; not the temp file's 0600). A run marks its
workdir ``IN_PROGRESS`` until its results are written (:func:`run_in_progress`), and the runs that
:func:`~ultr_jax.train.fit` trains in a workdir leave their fingerprints and diverged seeds with
:func:`write_results`, which adds them to ``results.json`` (``"_fingerprint"``, ``"_diverged"``).
"""

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import sys
import tempfile
import threading
import time
from typing import Any, Iterator, Mapping, Optional, Sequence, TextIO

import jax
import numpy as np
from scipy import stats as scipy_stats

from ultr_jax import _workdir as workdir_lock

__all__ = [
  "summarize",
  "atomic_write_text",
  "write_results",
  "write_run",
  "markdown_table",
  "run_in_progress",
  "record_run",
  "IN_PROGRESS",
  "default_file_mode",
]

IN_PROGRESS = "IN_PROGRESS"
#: The result files a run writes; a new run moves a previous run's aside, to ``stale/``.
RESULT_FILES = ("results.json", "table.md", "table.csv")
_UMASK_LOCK = threading.Lock()
# workdir (absolute) -> {"fingerprints": {run name: hash}, "diverged": {run name: [seeds]}}
_RUNS: dict[str, dict] = {}
_ACTIVE: list[str] = []  # the workdirs of the runs_in_progress entered, innermost last


def default_file_mode() -> int:
  """``0o666`` less the process umask: the mode ``open()`` gives a new file."""
  with _UMASK_LOCK:
    umask = os.umask(0)
    os.umask(umask)
  return 0o666 & ~umask


def _key(workdir: Optional[str]) -> Optional[str]:
  if workdir is None:
    workdir = _ACTIVE[-1] if _ACTIVE else None
  return None if workdir is None else os.path.abspath(workdir)


def record_run(
  workdir: Optional[str], name: str, *, fingerprint: Optional[str] = None, diverged: Optional[Sequence[int]] = None
) -> None:
  """Notes a trained run's fingerprint hash and diverged seeds for :func:`write_results` of ``workdir``
  (None: the innermost :func:`run_in_progress`; nothing when there is none). :func:`~ultr_jax.train.fit` calls it.

  >>> import tempfile
  >>> workdir = tempfile.mkdtemp()
  >>> record_run(workdir, "ips", fingerprint="0123abcd", diverged=[1])
  >>> write_results(workdir, {"ips": {"ndcg@10": 0.5}})
  >>> r = json.load(open(os.path.join(workdir, "results.json")))
  >>> r["_fingerprint"]["runs"], r["_diverged"]
  ({'ips': '0123abcd'}, {'ips': [1]})
  """
  key = _key(workdir)
  if key is None:
    return
  entry = _RUNS.setdefault(key, {"fingerprints": {}, "diverged": {}})
  if fingerprint is not None:
    entry["fingerprints"][name] = fingerprint
  if diverged:
    entry["diverged"][name] = [int(s) for s in diverged]


def run_diverged(workdir: str) -> dict:
  """``{run name: [seeds]}`` of the runs recorded as diverged in ``workdir`` (this process).

  >>> import tempfile
  >>> workdir = tempfile.mkdtemp()
  >>> record_run(workdir, "dla", diverged=[0, 2]); run_diverged(workdir)
  {'dla': [0, 2]}
  """
  return dict(_RUNS.get(os.path.abspath(workdir), {}).get("diverged", {}))


class _Run:
  """What :func:`run_in_progress` yields: ``diverged`` (run -> seeds), ``exit_code`` once the run is over, and
  ``report()``, what a binary prints on stdout at the end (its logs go to stderr)."""

  def __init__(self, workdir: str):
    self.workdir = workdir
    self.started = time.time()

  def written(self) -> list[str]:
    """The files the run wrote at the top of its workdir (results, tables, figures), sorted by name."""
    names = sorted(os.listdir(self.workdir)) if os.path.isdir(self.workdir) else []
    paths = [os.path.join(self.workdir, n) for n in names if n != workdir_lock.LOCK_NAME]
    return [p for p in paths if os.path.isfile(p) and os.path.getmtime(p) >= self.started - 1.0]

  def report(self, file: Optional[TextIO] = None) -> None:
    """Prints the run's ``table.md`` (when it wrote one) and the paths of the files it wrote, to ``file``
    (stdout by default), so a console shows the result apart from the logs on stderr; only process 0 (which
    writes the results) prints.

    >>> import tempfile
    >>> workdir = tempfile.mkdtemp()
    >>> with run_in_progress(workdir) as run:
    ...   _ = write_results(workdir, {"ips": {"ndcg@10": 0.5}}, table="| method | ndcg@10 |")
    >>> run.report()  # doctest: +ELLIPSIS
    | method | ndcg@10 |
    <BLANKLINE>
    wrote .../results.json
    wrote .../table.md
    """
    if jax.process_index() != 0:  # process 0 writes the results
      return
    out = file if file is not None else sys.stdout
    written = self.written()
    table = os.path.join(self.workdir, "table.md")
    if table in written:
      with open(table) as f:
        print(f.read().rstrip("\n") + "\n", file=out)
    for path in written:
      print(f"wrote {path}", file=out)
    out.flush()

  @property
  def diverged(self) -> dict:
    return run_diverged(self.workdir)

  @property
  def exit_code(self) -> int:
    """0, or 3 when some run diverged (its seeds marked, ``on_divergence="mark"``)."""
    return 3 if self.diverged else 0


@contextlib.contextmanager
def run_in_progress(workdir: str) -> Iterator[_Run]:
  """Marks ``workdir`` as holding a run in progress, for as long as the block runs.

  On entry the run takes the workdir's lock, the ``IN_PROGRESS`` file (created exclusively, with the
  run's PID, host, command and start time: ``ultr_jax._workdir.acquire``; another live run there is
  an error naming its PID and host, a stale marker is taken over with a warning); then a previous run's
  result files (``results.json``, ``table.md``, ``table.csv``) are moved to ``workdir/stale/``, so no stale
  result is ever read as this run's. On a normal exit the marker is removed; if the block raises, the
  marker stays, with the error appended. The yielded object's ``exit_code`` is non-zero
  when a run in the block diverged (:func:`~ultr_jax.train.fit` with ``on_divergence="mark"``).

  Args:
    workdir: the run's directory.

  Returns:
    A context manager yielding the run's handle (its ``exit_code``).

  >>> import tempfile
  >>> workdir = tempfile.mkdtemp()
  >>> write_results(workdir, {"old": 1})
  >>> with run_in_progress(workdir) as run:
  ...   print(sorted(os.listdir(workdir)))
  ...   write_results(workdir, {"new": 1})
  ['IN_PROGRESS', 'stale']
  >>> sorted(os.listdir(workdir)), os.listdir(os.path.join(workdir, "stale")), run.exit_code
  (['results.json', 'stale'], ['results.json'], 0)
  """
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  workdir_lock.acquire(workdir)  # first: a run refused here (another holds the workdir) touches nothing
  present = [f for f in RESULT_FILES if os.path.exists(os.path.join(workdir, f))]
  if present:
    stale = os.path.join(workdir, "stale")
    os.makedirs(stale, exist_ok=True)
    for f in present:
      os.replace(os.path.join(workdir, f), os.path.join(stale, f))
  _RUNS.pop(workdir, None)
  _ACTIVE.append(workdir)
  run = _Run(workdir)
  try:
    yield run
  except BaseException as e:
    workdir_lock.release(workdir, failure=f"{type(e).__name__}: {e}")
    raise
  else:
    workdir_lock.release(workdir)
  finally:
    _ACTIVE.remove(workdir)


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


def atomic_write_text(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` atomically (temp file + ``os.replace``).

  A reader sees the old file or the new one, never a half-written one; the directory is created; the
  file gets the usual permissions (``0o666`` less the umask); the temp file is removed on failure.

  Args:
    path: the file to write.
    text: its new content.

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
    os.chmod(tmp, default_file_mode())  # mkstemp's 0600 -> what open() would give
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

  Args:
    rows: ``{row name: {column: cell}}``.
    columns: the columns, in order.
    row_header: the first column's header.
    precision: decimals of a number.

  Returns:
    The table's Markdown text.

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
) -> Optional[str]:
  """Writes ``results.json`` (and ``table.md`` / ``table.csv``) atomically; returns the table as written.

  Args:
    workdir: output directory (created if needed).
    results: any JSON-able nested mapping (NumPy values are converted; NaN
      and inf become ``null``).
    table: Markdown text for ``table.md``; built from ``rows``/``columns``
      when omitted and those are given.
    rows, columns: a table to write as ``table.csv`` (and ``table.md``).
    row_header: the first column's name.

  Returns:
    The Markdown of ``table.md`` (with any diverged runs noted under it), or None when no table was written.

  >>> import tempfile
  >>> workdir = tempfile.mkdtemp()
  >>> table = write_results(workdir, {"naive": {"ndcg@10": np.float32(0.5), "bad": float("nan")}},
  ...                       rows={"naive": {"ndcg@10": 0.5}}, columns=["ndcg@10"])
  >>> sorted(os.listdir(workdir)), json.load(open(os.path.join(workdir, "results.json")))
  (['results.json', 'table.csv', 'table.md'], {'naive': {'ndcg@10': 0.5, 'bad': None}})

  The runs :func:`~ultr_jax.train.fit` trained with this ``workdir`` (or inside its
  :func:`run_in_progress`) add ``"_fingerprint"`` (``{"runs": {name: hash}, "hash": ...}``) and, when
  some diverged, ``"_diverged"`` (``{name: [seeds]}``, also noted under the table).
  """
  workdir_lock.check_not_held_by_another(workdir)  # results.json is the lock holder's
  recorded = _RUNS.get(os.path.abspath(workdir), {})
  if recorded.get("fingerprints"):
    runs = dict(sorted(recorded["fingerprints"].items()))
    digest = json.dumps(runs, sort_keys=True).encode()
    results = {**results, "_fingerprint": {"runs": runs, "hash": hashlib.sha256(digest).hexdigest()[:16]}}
  if recorded.get("diverged"):
    results = {**results, "_diverged": dict(recorded["diverged"])}
  atomic_write_text(
    os.path.join(workdir, "results.json"), json.dumps(_jsonable(results), indent=2, sort_keys=False) + "\n"
  )
  if table is None and rows is not None and columns is not None:
    table = markdown_table(rows, columns, row_header=row_header)
  if table is not None:
    if recorded.get("diverged"):
      runs = "; ".join(f"{name} (seeds {seeds})" for name, seeds in recorded["diverged"].items())
      table = table.rstrip("\n") + f"\n\n**Diverged** (non-finite loss or parameters): {runs}\n"
    atomic_write_text(os.path.join(workdir, "table.md"), table.rstrip("\n") + "\n")
  if rows is not None and columns is not None:
    atomic_write_text(os.path.join(workdir, "table.csv"), _csv_table(rows, columns, row_header))
  return table


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

  Returns:
    The number of lines written.

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
