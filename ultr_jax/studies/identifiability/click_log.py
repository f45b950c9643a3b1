r"""The identifiability check of a click log and its harvested propensities, streamed (``check.py --click_log``).

Both read a log through its clicks and impressions per (query-document item, position) cell: the IG
(Chen et al., ICML 2024, Algorithm 1) joins the positions an item was shown at, and intervention
harvesting (Agarwal et al., WSDM 2019) reads each cell's CTR. So the log is reduced in one streaming
pass (:func:`click_log_counts`, :func:`~ultr_jax.graph.gather_click_counts`) in memory that grows with
the distinct cells, never with the sessions, and checked and harvested from the counts
(:func:`check_click_log`): the same components and propensities as the log read whole
(:func:`~ultr_jax.data.read_click_log`).
"""

import dataclasses
import os
from typing import Optional, Sequence, Union

import jax
import numpy as np

from ultr_jax import _processes
from ultr_jax import data as data_lib
from ultr_jax.graph import (
  HARVESTING_METHODS,
  ClickCounts,
  IdentifiabilityReport,
  check_identifiability,
  gather_click_counts,
  intervention_sets_from_counts,
  merge_click_counts,
)

__all__ = ["HARVEST", "click_log_counts", "merge_counts_across_processes", "check_click_log", "propensity_table"]

#: The estimators the check reports: all-pairs and pivot harvesting, and the naive CTR for contrast.
HARVEST = ("all_pairs", "pivot", "ctr")


def click_log_counts(
  source: Union[str, os.PathLike, Sequence],
  *,
  format: str = "tsv",  # pylint: disable=redefined-builtin
  batch_size: int = 4096,
  shard_dir: Optional[str] = None,
  tmp_dir: Optional[str] = None,
  delimiter: Optional[str] = None,
  position_base: int = 1,
  query_key: str = "query",
) -> ClickCounts:
  r"""A click log of any supported kind, reduced in one streaming pass to its :class:`~ultr_jax.graph.ClickCounts`.

  Items are the in-memory reader's (query, document) ids, factors the 0-based positions.

  * A delimited log (``"tsv"``) is read row by row (:class:`~ultr_jax.data.ClickLogRows`): every layout
    :func:`~ultr_jax.data.read_click_log` accepts, with or without sessions, aggregated counts included,
    and no conversion (the counts need no sessions).
  * Raw Baidu-ULTR or Yandex files, and Parquet session shards, are streamed as session batches
    (:func:`~ultr_jax.data.open_click_log`: converted to temporary shards first); in a run of several
    processes (``jax.distributed``) each reads its own row groups and the counts are merged
    (:func:`merge_counts_across_processes`). A delimited log is read whole by every process.

  Args:
    source: a file, a glob, a directory or a list of them (:func:`~ultr_jax.data.click_log_files`).
    format: the text logs' format (:data:`~ultr_jax.data.CLICK_LOG_FORMATS`).
    batch_size: sessions per batch of the session stream.
    shard_dir, tmp_dir: where a raw log's conversion goes (:func:`~ultr_jax.data.open_click_log`).
    delimiter, position_base: a delimited log's (:func:`~ultr_jax.data.read_click_log`).
    query_key: a Baidu log's (:func:`~ultr_jax.data.read_baidu_sessions`).

  Returns:
    The log's :class:`~ultr_jax.graph.ClickCounts` (clicks and impressions per (item, position) cell).

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.tsv"
  >>> _ = p.write_text("query_id\tdoc_id\tposition\tclick\nq\ta\t1\t1\nq\tb\t2\t0\nq\tb\t1\t1\nq\ta\t1\t0\n")
  >>> c = click_log_counts(p)
  >>> c.items.tolist(), c.factors.tolist(), c.clicks.tolist(), c.impressions.tolist(), c.num_records
  ([0, 1, 1], [0, 0, 1], [1.0, 1.0, 0.0], [2.0, 1.0, 1.0], 4)
  """
  files = data_lib.click_log_files(source)
  if format == "tsv" and not any(f.endswith(".parquet") for f in files):
    rows = data_lib.ClickLogRows(files, delimiter=delimiter, position_base=position_base)
    return gather_click_counts(rows, num_items=rows.num_items)
  with data_lib.open_click_log(
    files,
    format=format,
    shard_dir=shard_dir,
    tmp_dir=tmp_dir,
    delimiter=delimiter,
    position_base=position_base,
    query_key=query_key,
  ) as log:
    stream = log.stream(batch_size=batch_size, process_index=jax.process_index(), process_count=jax.process_count())
    counts = gather_click_counts(stream, num_items=log.num_docs, num_factors=log.list_size)
    return merge_counts_across_processes(counts)


def merge_counts_across_processes(counts: ClickCounts) -> ClickCounts:
  r"""Every process's :class:`~ultr_jax.graph.ClickCounts` (each from its own row groups) merged through
  ``jax.distributed`` (an all-gather of the cells, then :func:`~ultr_jax.graph.merge_click_counts`, which adds
  the counts of equal cells: the one-process counts); the counts themselves with one process.

  .. math::  k_{x,t} = \sum_{p} k^{(p)}_{x,t}, \qquad n_{x,t} = \sum_{p} n^{(p)}_{x,t}

  Args:
    counts: this process's counts.

  Returns:
    The whole log's counts (the same in every process).

  >>> from ultr_jax.graph import click_counts
  >>> c = click_counts(np.array([[0, 1]]), np.array([[0, 1]]), np.array([[1.0, 0.0]]))
  >>> merge_counts_across_processes(c).clicks.tolist()
  [1.0, 0.0]
  """
  if jax.process_count() == 1:
    return counts
  meta = np.asarray([[counts.num_items, counts.num_factors, counts.num_records]], np.int64)
  cells = _processes.allgather_rows(counts.items, counts.factors, counts.clicks, counts.impressions)
  parts = [
    ClickCounts(items, factors, clicks, impressions, int(m[0, 0]), int(m[0, 1]), int(m[0, 2]))
    for (items, factors, clicks, impressions), (m,) in zip(cells, _processes.allgather_rows(meta))
  ]
  return merge_click_counts(parts)


def check_click_log(counts: ClickCounts, *, methods: Sequence[str] = HARVEST) -> tuple[IdentifiabilityReport, dict]:
  r"""The IG check (Theorem 1: identifiable iff the graph of the positions is connected) and the harvested
  position propensities of a log's counts.

  Args:
    counts: the log's per-(item, position) counts (:func:`click_log_counts`).
    methods: the harvesting methods to run (names of :mod:`~ultr_jax.graph.harvesting`'s methods).

  Returns:
    ``(report, out)``: the :class:`~ultr_jax.graph.IdentifiabilityReport` (``num_records``: the log's
    records, not its cells) and the JSON-ready ``out``: the report's dict, ``num_rows`` and
    ``propensities``: ``{method: [one value per position, None where not identified]}``, 1 at the top.

  >>> from ultr_jax.graph import click_counts
  >>> c = click_counts(np.array([[0, 1], [1, 0]]), np.array([[0, 1], [0, 1]]), np.array([[1., 0.], [1., 1.]]))
  >>> report, out = check_click_log(c, methods=("pivot",))
  >>> out["identifiable"], out["num_rows"], out["propensities"]["pivot"]
  (True, 4, [1.0, 0.5])
  """
  for m in methods:
    if m not in HARVESTING_METHODS:
      raise ValueError(f"unknown harvesting method {m!r}; expected one of {sorted(HARVESTING_METHODS)}")
  report = check_identifiability(
    counts.items,
    counts.factors,
    num_items=max(counts.num_items, 1),
    num_factors=max(counts.num_factors, 1),
  )
  report = dataclasses.replace(report, num_records=counts.num_records)
  out = report.to_dict()
  out["num_rows"] = int(counts.num_records)
  out["propensities"] = {}
  sets = intervention_sets_from_counts(counts)  # built once: every estimator runs on them
  for m in methods:
    est = HARVESTING_METHODS[m](sets)
    out["propensities"][m] = [
      float(v) if ok else None for v, ok in zip(np.asarray(est.propensities), np.asarray(est.identified))
    ]
  return report, out


def propensity_table(out: dict) -> str:
  """The harvested propensities of :func:`check_click_log`'s ``out`` as a text table (one row per position).

  Args:
    out: the second value of :func:`check_click_log`.

  Returns:
    The table's text: a ``position`` column (1-based) and one column per method, ``-`` where not identified.

  >>> print(propensity_table({"propensities": {"pivot": [1.0, None]}}))
  position     pivot
         1    1.0000
         2         -
  """
  methods = list(out["propensities"])
  lines = [f"{'position':>8} " + " ".join(f"{m:>9}" for m in methods)]
  num_positions = max((len(v) for v in out["propensities"].values()), default=0)
  for k in range(num_positions):
    cells = (out["propensities"][m][k] for m in methods)
    lines.append(f"{k + 1:>8} " + " ".join("        -" if v is None else f"{v:9.4f}" for v in cells))
  return "\n".join(lines)
