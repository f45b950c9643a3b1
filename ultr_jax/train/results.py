"""Summaries over seeds and atomic results writing (JSON, Markdown, CSV); a run's in-progress marker.

Files are written atomically (a temp file in the same directory, then ``os.replace``) with the usual
permissions (``0o666`` less the umask, as ``open`` gives; not the temp file's 0600). A run marks its
workdir ``IN_PROGRESS`` until its results are written (:func:`run_in_progress`); :func:`write_results` adds the
fingerprints and diverged seeds of the :class:`FitResult` values it is given to ``results.json``
(``"_fingerprint"``, ``"_diverged"``).
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
from typing import Any, Iterator, Mapping, NamedTuple, Optional, Sequence, TextIO, Union

import jax
import numpy as np
import scipy.special

from ultr_jax import _workdir as workdir_lock
from ultr_jax._state_files import read_state_file

__all__ = [
  "FitResult",
  "summarize",
  "atomic_write_text",
  "write_results",
  "write_run",
  "markdown_table",
  "run_in_progress",
  "IN_PROGRESS",
  "default_file_mode",
]

IN_PROGRESS = "IN_PROGRESS"
#: The result files a run writes; a new run moves a previous run's aside, to ``stale/``.
RESULT_FILES = ("results.json", "table.md", "table.csv")
_UMASK_LOCK = threading.Lock()


class FitResult(NamedTuple):
  """What :func:`~ultr_jax.train.fit` returns. Arrays have a leading seed axis ``[S, ...]``.

  :func:`write_results` takes them (``fits=``) to record the runs' fingerprints and diverged seeds.

  >>> r = FitResult(params={}, extra={}, history=[], best_step=np.zeros(2, int), best_metric=np.zeros(2),
  ...               final_params={}, diverged=np.array([False, True]))
  >>> r.diverged.tolist(), r.fingerprint is None
  ([False, True], True)
  """

  params: Any  # best-on-validation params per seed (final params without validation)
  extra: Any  # the matching non-trained method state
  history: list  # one dict per evaluation
  best_step: np.ndarray  # int [S]
  best_metric: np.ndarray  # float [S] (validation select_metric)
  final_params: Any  # params at the last step
  diverged: Optional[np.ndarray] = None  # bool [S]: the seed's loss or parameters went non-finite
  fingerprint: Optional[dict] = None  # what shaped the run (run_fingerprint), with a workdir
  seeds: Optional[Sequence[int]] = None  # the runs' seeds, in the order of the seed axis


def default_file_mode() -> int:
  """``0o666`` less the process umask: the mode ``open()`` gives a new file."""
  with _UMASK_LOCK:
    umask = os.umask(0)
    os.umask(umask)
  return 0o666 & ~umask


class _Run:
  """What :func:`run_in_progress` yields: ``diverged`` (run -> seeds) and ``exit_code`` once the run is over, read
  from the ``results.json`` the run wrote (a previous run's was moved aside when the block began), and
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
    path = os.path.join(self.workdir, "results.json")
    if not os.path.exists(path):
      return {}
    spec = {"_diverged?": (dict, type(None))}  # {run name: [seeds]}, as write_results writes it
    results = read_state_file(path, spec, what="the run's results", recovery="run it again")
    return dict(results.get("_diverged") or {})

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
  when the ``results.json`` written in the block records diverged seeds (:func:`write_results` of a
  :func:`~ultr_jax.train.fit` with ``on_divergence="mark"``).

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
  run = _Run(workdir)
  try:
    yield run
  except BaseException as e:
    workdir_lock.release(workdir, failure=f"{type(e).__name__}: {e}")
    raise
  else:
    workdir_lock.release(workdir)


def summarize(values: Union[Sequence[float], np.ndarray], *, confidence: float = 0.9) -> dict[str, float]:
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
  half = float(scipy.special.stdtrit(n - 1, 0.5 + confidence / 2) * std / math.sqrt(n)) if n > 1 else 0.0
  return {"mean": mean, "std": std, f"ci{int(round(confidence * 100))}": half}


def atomic_write_text(path: str, text: str) -> None:
  """Writes ``text`` to ``path`` atomically (temp file + ``os.replace``).

  A reader sees the old file or the new one, never a half-written one; the directory is created; the
  file gets the usual permissions (``0o666`` less the umask); the temp file is removed on failure.

  Args:
    path: the file to write.
    text: its new content.

  >>> import pathlib, tempfile
  >>> path = os.path.join(tempfile.mkdtemp(), "out", "note.txt")
  >>> atomic_write_text(path, "done"); pathlib.Path(path).read_text(), os.listdir(os.path.dirname(path))
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
  fits: Optional[Mapping[str, FitResult]] = None,
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
    fits: ``{run name: FitResult}`` of the runs behind the results: their fingerprints (those trained with a
      workdir) go to ``"_fingerprint"`` (``{"runs": {name: hash}, "hash": ...}``) and, when some seeds
      diverged, ``"_diverged"`` (``{name: [seeds]}``, also noted under the table).

  Returns:
    The Markdown of ``table.md`` (with any diverged runs noted under it), or None when no table was written.

  >>> import pathlib, tempfile
  >>> workdir = tempfile.mkdtemp()
  >>> table = write_results(workdir, {"naive": {"ndcg@10": np.float32(0.5), "bad": float("nan")}},
  ...                       rows={"naive": {"ndcg@10": 0.5}}, columns=["ndcg@10"])
  >>> sorted(os.listdir(workdir)), json.loads(pathlib.Path(workdir, "results.json").read_text())
  (['results.json', 'table.csv', 'table.md'], {'naive': {'ndcg@10': 0.5, 'bad': None}})

  The fits behind the results record their fingerprints and diverged seeds:

  >>> fit = FitResult({}, {}, [], np.zeros(2, int), np.zeros(2), {}, diverged=np.array([False, True]),
  ...                 fingerprint={"hash": "0123abcd"}, seeds=[3, 4])
  >>> _ = write_results(workdir, {"ips": {"ndcg@10": 0.5}}, fits={"ips": fit})
  >>> r = json.loads(pathlib.Path(workdir, "results.json").read_text())
  >>> r["_fingerprint"]["runs"], r["_diverged"]
  ({'ips': '0123abcd'}, {'ips': [4]})
  """
  workdir_lock.check_not_held_by_another(workdir)  # results.json is the lock holder's
  fingerprints, diverged = _fit_records(fits or {})
  if fingerprints:
    runs = dict(sorted(fingerprints.items()))
    digest = json.dumps(runs, sort_keys=True).encode()
    results = {**results, "_fingerprint": {"runs": runs, "hash": hashlib.sha256(digest).hexdigest()[:16]}}
  if diverged:
    results = {**results, "_diverged": diverged}
  atomic_write_text(
    os.path.join(workdir, "results.json"), json.dumps(_jsonable(results), indent=2, sort_keys=False) + "\n"
  )
  if table is None and rows is not None and columns is not None:
    table = markdown_table(rows, columns, row_header=row_header)
  if table is not None:
    if diverged:
      runs = "; ".join(f"{name} (seeds {seeds})" for name, seeds in diverged.items())
      table = table.rstrip("\n") + f"\n\n**Diverged** (non-finite loss or parameters): {runs}\n"
    atomic_write_text(os.path.join(workdir, "table.md"), table.rstrip("\n") + "\n")
  if rows is not None and columns is not None:
    atomic_write_text(os.path.join(workdir, "table.csv"), _csv_table(rows, columns, row_header))
  return table


def _fit_records(fits: Mapping[str, FitResult]) -> tuple[dict[str, str], dict[str, list[int]]]:
  """``({name: fingerprint hash}, {name: [diverged seeds]})`` of ``fits`` (those with a fingerprint / a diverged
  seed)."""
  fingerprints, diverged = {}, {}
  for name, r in fits.items():
    if r.fingerprint is not None:
      fingerprints[name] = str(r.fingerprint["hash"])
    if r.diverged is not None and np.any(r.diverged):
      seeds = list(r.seeds) if r.seeds is not None else list(range(len(r.diverged)))
      diverged[name] = [int(seeds[i]) for i in np.flatnonzero(r.diverged)]
  return fingerprints, diverged


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

  >>> import pathlib, tempfile
  >>> p = os.path.join(tempfile.mkdtemp(), "run.txt")
  >>> write_run(p, np.array([[0.1, 0.9, 0.5], [2.0, 2.0, -np.inf]]), np.array([7, 9]),
  ...           np.array([[True, True, True], [True, True, False]]), run_name="naive")
  5
  >>> print(pathlib.Path(p).read_text().strip())
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
