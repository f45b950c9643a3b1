r"""Click models at scale: fits and scores over a stream of session batches, never the whole log in memory.

A stream is any iterable of session-batch dicts ``{"doc_ids": int[B, L], "clicks": [B, L], "where": bool[B, L]}``
(optionally ``valid: bool[B]``, the padding rows of a fixed-shape stream, as
:class:`~ultr_jax.data.SessionStream` yields them; other keys are ignored).

* :func:`gather_click_statistics` reduces the stream in one pass to the model's sufficient statistics
  (:class:`~ultr_jax.simulation.StatisticsReduction`: counts per (document, rank[, last click]) in
  one table for the item models, spilled to disk partitioned by document past a memory budget; distinct sessions
  merged across batches for the others), and the :class:`~ultr_jax.simulation.Statistics` solver of
  :func:`~ultr_jax.simulation.fit_click_model` maximises the same MAP objective on them (preconditioned L-BFGS, records padded to size buckets so that one program serves
  logs of similar sizes, refused before it runs where its working memory would pass the budget; on spilled
  statistics, Newton steps per document and on the bias with the documents eliminated, partition by partition,
  :mod:`~ultr_jax.simulation.partitioned_fit`), at a cost per step that does not grow with the number of sessions.
* :func:`evaluate_click_model_stream` accumulates the held-out scores of
  :func:`~ultr_jax.simulation.evaluate_click_model` per rank across batches.
"""

import functools
import os
from typing import Callable, Iterable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax import _processes
from ultr_jax._optim import lbfgs_minimize, table_curvature
from ultr_jax.metrics import clicks as click_metrics
from ultr_jax.simulation.click_models import ClickModel, statistics_reduction
from ultr_jax.simulation.click_models.statistics import (
  NUM_PARTITIONS,
  ClickStatistics,
  PartitionedStatistics,
  StatisticsTooLarge,
  merge_click_statistics,
  open_partitioned_statistics,
  write_statistics_runs,
)
from ultr_jax.simulation.fitting import (
  ClickModelFit,
  click_model_predict,
  fittable_model,
  logit_prior,
  validate_sessions,
)
from ultr_jax.simulation.partitioned_fit import padded_size, compact_documents

__all__ = [
  "ClickStatistics",
  "StatisticsTooLarge",
  "MEMORY_BUDGET_BYTES",
  "PartitionedStatistics",
  "open_partitioned_statistics",
  "merge_click_statistics",
  "gather_click_statistics",
  "evaluate_click_model_stream",
]

Batches = Iterable[Mapping]


def session_batch(batch: Mapping, model: Optional[ClickModel] = None, num_docs: Optional[int] = None):
  """``(doc_ids, clicks, where)`` of a batch dict (``where`` and ``valid`` combined), validated."""
  for k in ("doc_ids", "clicks"):
    if k not in batch:
      raise ValueError(f"session batch: missing {k!r} (keys: {sorted(batch)})")
  clicks = np.asarray(batch["clicks"], np.float32)
  where = batch.get("where")
  where = np.ones(clicks.shape, bool) if where is None else np.asarray(where, bool)
  if "valid" in batch:
    where = where & np.asarray(batch["valid"], bool).reshape(where.shape[:-1] + (1,))
  return validate_sessions(batch["doc_ids"], clicks, where, num_docs, model)


#: :func:`gather_click_statistics`' default memory budget for the records held at once (bytes): 1 GiB.
MEMORY_BUDGET_BYTES = 1 << 30


def gather_click_statistics(
  model: "str | ClickModel",
  batches: Batches,
  *,
  memory_budget_bytes: Optional[int] = MEMORY_BUDGET_BYTES,
  spill_dir=None,
  num_partitions: int = NUM_PARTITIONS,
  device: Optional[bool] = None,
  across_processes: bool = False,
) -> "ClickStatistics | PartitionedStatistics":
  r"""One pass over a stream: the model's sufficient statistics of all its sessions, in bounded memory.

  The batches go into the model's :class:`~ultr_jax.simulation.StatisticsReduction`: the item
  models (PBM, trust, UBM) count every item, per (document, rank[, last click]), in a single integer pass per
  batch; where those counts outgrow ``memory_budget_bytes`` (a long-tail log: the distinct (document, rank)
  pairs grow with the log) they are hash-partitioned by document and spilled to run files
  (:class:`~ultr_jax.simulation.PartitionedStatistics`), so memory stays within the
  budget. The other models reduce each batch to its distinct sessions and merge them as they grow.

  Args:
    model: a fittable click model (name or instance).
    batches: iterable of session-batch dicts (see the module docstring).
    memory_budget_bytes: the most bytes of records held at once (None: no limit).
    spill_dir: where spilled runs go (None: a temporary directory deleted with the statistics). Processes that
      share one merge by :func:`~ultr_jax.simulation.open_partitioned_statistics`.
    num_partitions: ``P``, the spilled records' partitions by document (a fit holds one at a time).
    device: count on the JAX device (None: on a GPU/TPU backend; the counts are the host's exactly).
    across_processes: ``batches`` are this process's part of the log (e.g. a
      :class:`~ultr_jax.data.SessionStream` with its ``process_index``); every process's statistics are merged
      through ``jax.distributed`` (an all-gather of the records), or, where a process spilled, through the
      partition files under ``spill_dir`` (which every process must share): each process returns the
      statistics of the whole log.

  Returns:
    :class:`ClickStatistics` (all in memory) or
    :class:`~ultr_jax.simulation.PartitionedStatistics` (spilled).

  Raises:
    StatisticsTooLarge: (a ``ValueError``) where session-pattern statistics (which read several documents each,
      so cannot be partitioned by document) outgrow the budget, saying after how many sessions; fit such a log
      with :class:`~ultr_jax.simulation.Minibatch`.

  >>> b = {"doc_ids": np.array([[0, 1], [0, 1]]), "clicks": np.array([[1.0, 0.0], [1.0, 0.0]])}
  >>> s = gather_click_statistics("pbm", [b, b])
  >>> s.kind, s.keys.tolist(), s.counts.tolist(), s.num_sessions
  ('items', [[0, 0], [1, 1]], [[4.0, 4.0], [4.0, 0.0]], 4.0)
  """
  m = fittable_model(model)
  if across_processes and spill_dir is not None:
    spill_dir = os.path.join(spill_dir, _run_token())  # one fresh directory that every process agrees on
  accumulator = (
    statistics_reduction(m)
    .statistics_accumulator()
    .configure(
      memory_budget_bytes=memory_budget_bytes, spill_dir=spill_dir, num_partitions=num_partitions, device=device
    )
  )
  seen = False
  for batch in batches:
    doc_ids, clicks, where, _ = session_batch(batch, m)
    try:
      accumulator.add(doc_ids, clicks, where)
    except StatisticsTooLarge as e:
      raise StatisticsTooLarge(f"gather_click_statistics: {m.name}'s {e}") from None
    seen = True
  if not seen and not across_processes:
    raise ValueError("gather_click_statistics: the stream is empty")
  stats = accumulator.result()
  return _merge_across_processes(stats, spill_dir, num_partitions) if across_processes else stats


def _run_token() -> str:
  """Process 0's random token, the same in every process."""
  token = np.asarray([np.random.default_rng().integers(1 << 62)], np.int64)
  return f"run_{int(_processes.allgather_rows(token)[0][0][0]):x}"


def _merge_across_processes(stats, spill_dir, num_partitions: int):
  """Every process's statistics merged: in memory by an all-gather of the records, or, where any process
  spilled, through the partition files in the shared ``spill_dir`` (the union of the writers' runs)."""
  if jax.process_count() == 1:
    return stats
  spilled = int(_processes.process_sum(np.asarray([isinstance(stats, PartitionedStatistics)], np.int64))[0])
  if not spilled:
    meta = np.asarray([[stats.num_sessions, stats.num_docs, stats.list_size]], np.float64)
    parts = [
      ClickStatistics(stats.kind, k, c, float(x[0, 0]), int(x[0, 2]), int(x[0, 1]))
      for (k, c), (x,) in zip(_processes.allgather_rows(stats.keys, stats.counts), _processes.allgather_rows(meta))
    ]
    return merge_click_statistics([p for p in parts if p.list_size] or parts)
  if spill_dir is None:
    raise ValueError(
      f"gather_click_statistics: {spilled} of {jax.process_count()} processes spilled their statistics past "
      "memory_budget_bytes; give a spill_dir on a file system every process shares (the processes merge through "
      "their partition files there)"
    )
  if isinstance(stats, ClickStatistics):  # this process stayed in memory: its records join the shared runs
    write_statistics_runs(stats, spill_dir, num_partitions)
  _processes.barrier("ultr_jax.gather_click_statistics")
  return open_partitioned_statistics(spill_dir)


@functools.partial(jax.jit, static_argnames=("model", "max_iters", "prior"))
def _fit_statistics(model, logits, keys, counts, num_sessions, l2, max_iters, tol, prior="zero"):
  n = jnp.maximum(num_sessions, 1.0)
  log_likelihood = statistics_reduction(model).statistics_log_likelihood

  def objective(theta):
    return (logit_prior(model, theta, l2, prior) - log_likelihood(theta, keys, counts)) / n

  # Curvatures differ by orders of magnitude (a document's few impressions, a rank's millions): precondition.
  scale = jax.tree.map(jnp.sqrt, table_curvature(objective, logits, jnp.maximum(l2, 1e-6) / n))
  theta, gnorm, iters = lbfgs_minimize(objective, logits, max_iters=max_iters, tol=tol, scale=scale)
  ll = log_likelihood(theta, keys, counts) / n
  return theta, model.to_probabilities(theta), ll, gnorm, iters


def _working_bytes(program) -> int:
  """The temporary memory a compiled program allocates beyond its arguments and outputs (0 if unknown)."""
  try:
    analysis = program.memory_analysis()
  except Exception:  # noqa: BLE001 (a backend without the analysis: no bound can be checked)
    return 0
  return int(getattr(analysis, "temp_size_in_bytes", 0) or 0)


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
  return np.concatenate([x, np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)]) if rows > x.shape[0] else x


def fit_records(m: ClickModel, statistics: ClickStatistics, *, num_docs, l2, max_iters, tol, init, budget, prior):
  r""":class:`~ultr_jax.simulation.Statistics`' fit on statistics in memory: preconditioned L-BFGS on the records.

  A document that no record reads has only the prior's term, so its optimum is the prior's centre: logit 0 under
  ``prior="zero"``; under ``prior="data_mean"`` the table's mean :math:`\mu`, and with the :math:`U` unread
  documents at :math:`\mu`

  .. math::
      \min_{\mu,\,u}\; \sum_{d\ \text{read}} (\theta_d - \mu)^2 + \sum_{j=1}^{U} (u_j - \mu)^2
        = \sum_{d\ \text{read}} (\theta_d - \bar\theta_{\text{read}})^2,

  the same prior over the read documents alone, whatever :math:`U`. So the item models' fit runs over the
  documents the records read and gives the others the centre: the table is the log's documents, not every id
  below ``num_docs``, and the optimum is the full table's.
  """
  per_doc = ("attraction",) + tuple(m.item_params)
  keys, seen = statistics.keys, None
  if statistics.kind in ("items", "ubm_items"):
    keys, seen = compact_documents(statistics.keys)
  # Records and documents padded to buckets (zero counts): one compilation serves logs of similar sizes. The
  # optimum of a document no record reads is the prior's centre whatever the number of such documents (see the
  # docstring), so the fit runs over the documents the records read alone (renumbered; at least one padded row,
  # which no record reads either, converges to the centre and gives the others' values), a table of the log's
  # documents rather than of every id.
  table_docs = num_docs if seen is None else seen.size + 1
  padded_docs = padded_size(table_docs)
  logits = m.init(num_docs=padded_docs, list_size=statistics.list_size)
  if init is not None:
    pick = (lambda v: v) if seen is None else (lambda v: _take_rows(v, seen))
    logits = {
      k: (_pad_rows(pick(np.asarray(v, np.float32)), padded_docs) if k in per_doc else v) for k, v in init.items()
    }
  rows = padded_size(statistics.num_records)
  keys = jnp.asarray(_pad_rows(keys, rows), jnp.int32)
  counts = jnp.asarray(_pad_rows(statistics.counts, rows), jnp.float32)
  n, l2_, tol_ = jnp.float32(statistics.num_sessions), jnp.float32(l2), jnp.float32(tol)
  # Compiled before it runs, so that a program whose working memory would outgrow the budget (session patterns of
  # a long-tail log: every record reads L documents) is refused before anything is allocated.
  program = _fit_statistics.lower(m, logits, keys, counts, n, l2_, int(max_iters), tol_, prior).compile()
  need = _working_bytes(program)
  if budget is not None and need > budget:
    raise StatisticsTooLarge(
      f"{m.name}: the fit on {statistics.num_records} records of kind {statistics.kind!r} needs {need:,} bytes of "
      f"working memory, over the budget of {budget:,} bytes"
    )
  theta, params, mean_ll, gnorm, iters = program(logits, keys, counts, n, l2_, tol_)
  if seen is None:
    cut = lambda tree: {k: jax.device_put(np.asarray(v)[:num_docs]) if k in per_doc else v for k, v in tree.items()}
  else:
    cut = lambda tree: {
      k: jax.device_put(_spread_rows(np.asarray(v), seen, num_docs)) if k in per_doc else v for k, v in tree.items()
    }
  theta, params = cut(theta), cut(params)  # on the host: no program per number of documents
  return ClickModelFit(
    model=m,
    params=params,
    logits=theta,
    log_likelihood=float(mean_ll),
    grad_norm=float(gnorm),
    iterations=int(iters),
    converged=bool(gnorm <= tol),
  )


def _take_rows(v: np.ndarray, seen: np.ndarray) -> np.ndarray:
  """The rows ``seen`` of a per-document table (rows past its end: 0, the start)."""
  inside = seen < v.shape[0]
  out = np.zeros((seen.size,) + v.shape[1:], v.dtype)
  out[inside] = v[seen[inside]]
  return out


def _spread_rows(v: np.ndarray, seen: np.ndarray, num_docs: int) -> np.ndarray:
  """A compacted per-document table back over ``num_docs`` documents: row ``i`` to document ``seen[i]``, every
  other document the first padded row's value (a document that no record reads: the prior's centre)."""
  out = np.repeat(v[seen.size : seen.size + 1], num_docs, axis=0)
  out[seen] = v[: seen.size]
  return out


def iterate_batches(batches: "Batches | Callable[[], Batches]") -> Batches:
  return batches() if callable(batches) else batches


@functools.partial(jax.jit, static_argnames=("model",))
def _score_batch(model, params, doc_ids, clicks, where):
  ll = model.session_log_likelihood(model.to_logits(params), doc_ids, clicks, where)
  pred = click_model_predict(model, params, doc_ids, clicks, where=where)
  cond = click_metrics.click_log_likelihood(pred["conditional"], clicks, where=where, reduce_fn=None)
  marg = click_metrics.click_log_likelihood(pred["marginal"], clicks, where=where, reduce_fn=None)
  sessions = jnp.any(where, axis=-1)
  return (
    jnp.sum(jnp.where(sessions, ll, 0.0)),
    jnp.sum(jnp.where(where, cond, 0.0), axis=0),
    jnp.sum(jnp.where(where, marg, 0.0), axis=0),
    jnp.sum(where, axis=0),
    jnp.sum(sessions),
  )


def evaluate_click_model_stream(
  model: "str | ClickModel", params: dict, batches: Batches, *, across_processes: bool = False
) -> dict:
  r""":func:`~ultr_jax.simulation.evaluate_click_model` over a stream, from sums per rank accumulated across batches.

  .. math::
      \mathrm{PPL}_r = \exp\Bigl(-\frac{\sum_b \sum_{s \in b} \log P(C_{s,r} = c_{s,r} \mid c_{s,<r})}
        {\sum_b N_{b,r}}\Bigr), \qquad \mathrm{PPL} = \frac{1}{|R|}\sum_{r \in R} \mathrm{PPL}_r

  (Dupret & Piwowarski SIGIR'08; :math:`R` the ranks with a shown item), the CTR perplexity the same with the
  marginal click probabilities, and the mean session log-likelihood.

  Args:
    model: a fittable click model.
    params: its fitted probabilities.
    batches: the held-out session batches.
    across_processes: ``batches`` are this process's part; the sums are added over the processes of
      ``jax.distributed`` (each process returns the whole log's scores).

  Returns:
    dict of ``log_likelihood``, ``perplexity``, ``perplexity_per_rank`` (a list), ``ctr_perplexity`` and
    ``num_sessions``.

  >>> p = {"attraction": jnp.array([0.5]), "examination": jnp.array([1.0])}
  >>> b = {"doc_ids": np.zeros((2, 1), int), "clicks": np.array([[1.0], [0.0]])}
  >>> print(round(evaluate_click_model_stream("pbm", p, [b, b])["perplexity"], 6))
  2.0
  """
  m = fittable_model(model)
  num_docs = int(params["attraction"].shape[0])
  params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  total_ll, per_rank, sessions = 0.0, None, 0.0  # per_rank: the sums per rank of (cond, marg, count)
  for batch in batches:
    doc_ids, clicks, where, _ = session_batch(batch, None, num_docs)
    out = [np.asarray(x, np.float64) for x in _score_batch(m, params, doc_ids, clicks, where)]
    total_ll += float(out[0])
    per_rank = out[1:4] if per_rank is None else [a + b for a, b in zip(per_rank, out[1:4])]
    sessions += float(out[4])
  if across_processes and jax.process_count() > 1:  # each process scored its part: add the sums
    if per_rank is None:
      raise ValueError(f"evaluate_click_model_stream: process {jax.process_index()}'s stream is empty")
    per_rank = [_processes.process_sum(x) for x in per_rank]
    total_ll, sessions = (float(v) for v in _processes.process_sum(np.asarray([total_ll, sessions])))
  if per_rank is None:
    raise ValueError("evaluate_click_model_stream: the stream is empty")
  cond, marg, count = per_rank
  ppl = np.exp(-cond / np.maximum(count, 1.0))
  ctr = np.exp(-marg / np.maximum(count, 1.0))
  shown = count > 0
  mean = lambda x: float(np.sum(np.where(shown, x, 0.0)) / max(shown.sum(), 1))
  return {
    "log_likelihood": total_ll / sessions if sessions else 0.0,
    "perplexity": mean(ppl),
    "perplexity_per_rank": [float(v) for v in ppl],
    "ctr_perplexity": mean(ctr),
    "num_sessions": sessions,
  }
