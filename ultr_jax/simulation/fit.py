r"""The one way to fit a click model to a log: :func:`fit_click_model`, which picks its solver.

.. code-block:: python

    fit = simulation.fit_click_model("dbn", stream)  # arrays, batches, a function of batches or a stream
    print(fit.solver, fit.iterations, fit.stop_reason)

Every solver maximises the same posterior over a model's logits :math:`\theta`,

.. math::
    \hat\theta = \arg\min_\theta\; \frac{1}{S}\Bigl(\Omega_{\ell_2}(\theta) - \sum_{s} \log P_\theta(c^{(s)}_{1:L})\Bigr)

(the sessions' log-likelihood, :meth:`~ultr_jax.simulation.ClickModel.session_log_likelihood`, and the
Gaussian prior :math:`\Omega_{\ell_2}` of :func:`~ultr_jax.simulation.logit_prior`), and differs only in how it
reaches it:

================  ============================================================================================
solver            how
================  ============================================================================================
:class:`Statistics`  one pass reducing the log to the model's sufficient statistics
                  (:func:`~ultr_jax.simulation.gather_click_statistics`, spilled to disk by document past
                  ``budget``), then preconditioned L-BFGS on the records, or on spilled records Newton passes
                  with the documents eliminated (:mod:`~ultr_jax.simulation.partitioned_fit`): exact.
:class:`LBFGS`    preconditioned L-BFGS on the sessions held in memory (sharded over a ``mesh``): exact.
:class:`Minibatch`  an optax optimiser over minibatches of a re-iterable stream, updating only the shown rows
                  (:mod:`~ultr_jax.simulation.minibatch`), CLAX's way: approximate, for logs no reduction
                  shrinks.
:class:`Counts`   the click-through-rate baselines (``gctr``, ``rctr``, ``dctr``, ``drctr``) by counting.
================  ============================================================================================

With ``solver=None`` the choice is the model's and the data's (:func:`choose_solver`): the CTR baselines count;
every other model reduces to statistics, and where a model's statistics would outgrow the memory budget (session
patterns of a long-tail log, which cannot be split by document) or their fit's program would, the fit switches to
:class:`Minibatch` before allocating, over the same data. The solver that ran is ``fit.solver``.
"""

import dataclasses
import logging
from typing import Callable, Iterable, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

import jax
import numpy as np
import optax

from ultr_jax.simulation.click_models import ClickChain, ClickModel
from ultr_jax.simulation.click_models.statistics import (
  NUM_PARTITIONS,
  ClickStatistics,
  PartitionedStatistics,
  StatisticsTooLarge,
)
from ultr_jax.simulation.fitting import (
  CTR_MODELS,
  ClickModelFit,
  check_prior,
  count_ctr_model,
  count_ctr_model_from_statistics,
  fit_sessions_lbfgs,
  fittable_model,
)
from ultr_jax.simulation.minibatch import STEPS_PER_CALL, fit_minibatch
from ultr_jax.simulation.streaming import (
  MEMORY_BUDGET_BYTES,
  evaluate_click_model_stream,
  fit_statistics,
  gather_click_statistics,
  iterate_batches,
)

__all__ = ["SessionData", "Solver", "LBFGS", "Statistics", "Minibatch", "Counts", "choose_solver", "fit_click_model"]

#: What :func:`fit_click_model` fits: one batch dict of arrays held in memory (``doc_ids``, ``clicks``, optional
#: ``where``/``valid``), an iterable of such batches (a list, a :class:`~ultr_jax.data.SessionStream`, a
#: generator: read once unless the solver needs more passes), a function returning a fresh iterable of them, or
#: the statistics :func:`~ultr_jax.simulation.gather_click_statistics` already gathered.
SessionData = Union[Mapping, Iterable[Mapping], Callable[[], Iterable[Mapping]], ClickStatistics, PartitionedStatistics]

_log = logging.getLogger(__name__)


@runtime_checkable
class Solver(Protocol):
  """How :func:`fit_click_model` reaches the posterior's optimum: a small, frozen object with one method."""

  def fit(
    self, model: ClickModel, data: SessionData, *, num_docs: Optional[int], l2: float, prior: str, init: Optional[dict]
  ) -> ClickModelFit:
    """Fits ``model`` to ``data`` (see :func:`fit_click_model` for the arguments)."""
    ...


def _mask(b: Mapping) -> np.ndarray:
  """A batch's displayed items: ``where`` (default all) and its ``valid`` sessions."""
  where = np.ones(np.shape(b["clicks"]), bool) if b.get("where") is None else np.asarray(b["where"], bool)
  return where & np.asarray(b["valid"], bool)[..., None] if "valid" in b else where


def _in_memory(data) -> dict:
  """A batch dict of the whole log: ``data`` itself, or its batches concatenated (their masks combined)."""
  batches = [data] if isinstance(data, Mapping) else list(iterate_batches(data))
  if not batches:
    raise ValueError("fit_click_model: the log is empty (no session batches)")
  for i, b in enumerate(batches):
    for k in ("doc_ids", "clicks"):
      if k not in b:
        raise ValueError(f"fit_click_model: session batch {i} has no {k!r} (keys: {sorted(b)})")
  if len(batches) == 1:
    b = batches[0]
    return {"doc_ids": b["doc_ids"], "clicks": b["clicks"], "where": _mask(b)}
  cat = lambda k: np.concatenate([np.asarray(b[k]) for b in batches])  # noqa: E731
  return {"doc_ids": cat("doc_ids"), "clicks": cat("clicks"), "where": np.concatenate([_mask(b) for b in batches])}


def _batches(data) -> Union[Iterable[Mapping], Callable[[], Iterable[Mapping]]]:
  return [data] if isinstance(data, Mapping) else data


@dataclasses.dataclass(frozen=True)
class LBFGS:
  """Preconditioned L-BFGS on the sessions held in memory (one jitted ``lax.while_loop``).

  The objective's diagonal curvature preconditions the steps (a document seen ten times and a rank seen ten
  thousand times differ in curvature by orders of magnitude); it stops when the gradient norm and the step are
  both at most ``tol``. A stream is read into memory first.

  Attributes:
    max_iters: iteration cap (static: one program per value).
    tol: gradient-norm tolerance.
    mesh: optional device mesh: the sessions are sharded over its first axis (padded with masked sessions), the
      parameters replicated, so each step is data-parallel (the same fit up to the order of float sums).
  """

  max_iters: int = 500
  tol: float = 1e-5
  mesh: Optional[jax.sharding.Mesh] = None

  def fit(self, model, data, *, num_docs, l2, prior, init):
    if isinstance(data, (ClickStatistics, PartitionedStatistics)):
      raise ValueError("LBFGS fits sessions; for gathered statistics use Statistics()")
    b = _in_memory(data)
    fit = fit_sessions_lbfgs(
      model,
      b["doc_ids"],
      b["clicks"],
      where=b.get("where"),
      num_docs=num_docs,
      l2=l2,
      max_iters=self.max_iters,
      tol=self.tol,
      init=init,
      mesh=self.mesh,
      prior=prior,
    )
    return _stop(fit._replace(solver=self), f"max_iters = {self.max_iters} reached")


@dataclasses.dataclass(frozen=True)
class Statistics:
  """Sufficient statistics in one pass, then an exact fit on them, at a cost per step independent of the sessions.

  The log is reduced by :func:`~ultr_jax.simulation.gather_click_statistics` (the item models count per
  (document, rank[, last click]) and spill to ``spill_dir`` partitioned by document past ``budget``; the others
  merge distinct session patterns, refused past ``budget``); in-memory records are fitted by preconditioned
  L-BFGS over size-bucketed records (one program serves logs of similar sizes), spilled ones by Newton passes
  with the documents eliminated, one partition in memory at a time (``max_iters`` then counts passes).

  Attributes:
    budget: bytes for the statistics held at once and for the fit's working memory (None: no bound); past it
      the statistics spill (item models) or :class:`StatisticsTooLarge` is raised before anything is allocated
      (and :func:`fit_click_model`'s automatic choice moves to :class:`Minibatch`).
    spill_dir: where spilled counts go (None: a temporary directory).
    num_partitions: the spilled counts' partitions by document.
    device: count on the accelerator (None: on a GPU or TPU backend).
    across_processes: the data are this process's part of the log; the statistics are merged over the
      processes of ``jax.distributed`` (and a spilled fit shares its partitions among them).
    max_iters: L-BFGS iterations, or Newton passes on spilled statistics.
    tol: gradient-norm tolerance.
    fallback: the solver to use instead where the statistics or their fit would outgrow ``budget`` (None: raise
      :class:`~ultr_jax.simulation.StatisticsTooLarge`); it reads the data again, so they must be re-iterable.
  """

  budget: Optional[int] = MEMORY_BUDGET_BYTES
  spill_dir: Optional[str] = None
  num_partitions: int = NUM_PARTITIONS
  device: Optional[bool] = None
  across_processes: bool = False
  max_iters: int = 500
  tol: float = 1e-5
  fallback: Optional[Solver] = None

  def gather(self, model: ClickModel, data) -> "ClickStatistics | PartitionedStatistics":
    """The statistics of ``data`` (themselves if already gathered)."""
    if isinstance(data, (ClickStatistics, PartitionedStatistics)):
      return data
    return gather_click_statistics(
      model,
      iterate_batches(_batches(data)),
      memory_budget_bytes=self.budget,
      spill_dir=self.spill_dir,
      num_partitions=self.num_partitions,
      device=self.device,
      across_processes=self.across_processes,
    )

  def fit(self, model, data, *, num_docs, l2, prior, init):
    fit = fit_statistics(
      model,
      self.gather(model, data),
      num_docs=num_docs,
      l2=l2,
      max_iters=self.max_iters,
      tol=self.tol,
      init=init,
      memory_budget_bytes=self.budget,
      prior=prior,
      across_processes=self.across_processes,
    )
    return _stop(fit._replace(solver=self), f"max_iters = {self.max_iters} reached")


@dataclasses.dataclass(frozen=True)
class Minibatch:
  """An elementwise optax optimiser over minibatches, each step updating only the rows its batch shows.

  The objective per batch is the posterior's unbiased estimate (each row's prior spread over its impressions),
  so over an epoch its prior sums to the full objective's (``ultr_jax.simulation.minibatch.fit_minibatch``
  states it); approximate where the exact solvers are exact. The data must be re-iterable (a list, a stream, a
  function returning fresh batches): one counting pass, then ``epochs`` passes.

  Attributes:
    optimizer: elementwise optax optimiser (None: ``optax.adam(0.05)``).
    epochs: passes over the data.
    sparse: row-wise steps (None: when the tables have many more rows than a batch has items).
    tables: per-document parameter name -> :class:`~ultr_jax.simulation.ParameterTable` (hashed, compressed, or
      computed from features by a flax module).
    steps_per_call: batches per jitted call.
    mesh: optional device mesh: batches split by sessions, tables by rows.
    list_size, num_sessions: ``L`` and ``S`` if known (else counted in the first pass).
    key: PRNG key of feature tables' initial module parameters.
  """

  optimizer: Optional[optax.GradientTransformation] = None
  epochs: int = 1
  sparse: Optional[bool] = None
  tables: Optional[Mapping] = None
  steps_per_call: int = STEPS_PER_CALL
  mesh: Optional[jax.sharding.Mesh] = None
  list_size: Optional[int] = None
  num_sessions: Optional[float] = None
  key: Optional[jax.Array] = None

  def fit(self, model, data, *, num_docs, l2, prior, init):
    if isinstance(data, (ClickStatistics, PartitionedStatistics)):
      raise ValueError("Minibatch fits sessions; for gathered statistics use Statistics()")
    fit = fit_minibatch(
      model,
      _batches(data),
      optimizer=self.optimizer,
      epochs=self.epochs,
      num_docs=num_docs,
      list_size=self.list_size,
      num_sessions=self.num_sessions,
      l2=l2,
      init=init,
      sparse=self.sparse,
      tables=self.tables,
      steps_per_call=self.steps_per_call,
      mesh=self.mesh,
      prior=prior,
      key=self.key,
    )
    return fit._replace(solver=self, stop_reason=f"{self.epochs} epoch(s) run ({fit.iterations} steps)")


@dataclasses.dataclass(frozen=True)
class Counts:
  r"""The click-through-rate baselines by counting (PyClick's and CLAX's GCTR, RCTR, DCTR, DRCTR).

  Each rate is a smoothed mean of its cell's clicks, shrunk towards its parent's rate by ``prior``
  pseudo-impressions, :math:`\hat p = (\sum_{\text{cell}} c + \text{prior}\,\hat p_{\text{parent}}) /
  (N_{\text{cell}} + \text{prior})` (``ultr_jax.simulation.fitting.count_ctr_model``); a stream is counted in
  one pass through the PBM's statistics. The fit's ``params`` are the rate tables
  (:func:`~ultr_jax.simulation.ctr_model_predict` scores them), ``logits`` is empty.

  Attributes:
    prior: pseudo-impressions of the parent's rate in each cell (0: plain means).
  """

  prior: float = 1.0

  def fit(self, model, data, *, num_docs, l2, prior, init):
    del l2, prior, init  # counting has no optimiser
    name = model if isinstance(model, str) else model.name
    if isinstance(data, Mapping):
      b = _in_memory(data)
      rates = count_ctr_model(name, b["doc_ids"], b["clicks"], where=b["where"], num_docs=num_docs, prior=self.prior)
    else:
      stats = Statistics().gather(fittable_model("pbm"), data)
      if isinstance(stats, PartitionedStatistics):  # the rates read every record at once
        stats = stats.to_statistics()
      rates = count_ctr_model_from_statistics(name, stats, num_docs=num_docs, prior=self.prior)
    nan = float("nan")
    return ClickModelFit(name, rates, {}, nan, nan, 0, True, solver=self, stop_reason="counted")


def choose_solver(model: "str | ClickModel", data: SessionData) -> Solver:
  """The solver :func:`fit_click_model` uses with ``solver=None``: :class:`Counts` for a CTR baseline,
  :class:`Statistics` for every other model (exact, and the fastest wherever the records reduce); the fit itself
  moves to :class:`Minibatch` where the statistics outgrow their budget.

  Args:
    model: a click model or CTR baseline (as :func:`fit_click_model` takes it).
    data: the log (unused today: the data decide at fit time, by the size of their statistics).

  Returns:
    The :class:`Solver`: ``Counts()`` or ``Statistics(fallback=Minibatch())``.

  >>> choose_solver("dctr", {})
  Counts(prior=1.0)
  >>> s = choose_solver("dbn", [])
  >>> print(type(s).__name__, s.budget, type(s.fallback).__name__)
  Statistics 1073741824 Minibatch
  """
  del data  # the data decide at fit time, by the statistics' size
  if isinstance(model, str) and model in CTR_MODELS:
    return Counts()
  return Statistics(fallback=Minibatch())


def _reiterable(data) -> bool:
  return callable(data) or isinstance(data, (Mapping, Sequence)) or hasattr(data, "__len__") or _is_stream(data)


def _is_stream(data) -> bool:
  return type(data).__name__ in ("SessionStream", "ShardedSessionStream") or hasattr(data, "num_sessions")


def _stop(fit: ClickModelFit, cap: str) -> ClickModelFit:
  return fit._replace(stop_reason="converged: gradient norm <= tol" if fit.converged else cap)


def _default_prior(m: ClickModel, solver: Solver) -> str:
  """``"data_mean"`` where nothing absorbs an offset of the document logits (a chain model examines its first
  rank always) or for the minibatch fit, else ``"zero"`` (see :func:`~ultr_jax.simulation.logit_prior`)."""
  return "data_mean" if isinstance(m, ClickChain) or isinstance(solver, Minibatch) else "zero"


def _fit_one(m, data, solver, *, num_docs, l2, prior, init, source=None) -> ClickModelFit:
  """``solver``'s fit, or its fallback's on ``source`` (the sessions ``data`` were gathered from; default ``data``)
  where the statistics or their fit would outgrow the budget."""
  centre = lambda s: _default_prior(m, s) if prior is None else check_prior(prior)  # noqa: E731
  source = data if source is None else source
  try:
    if isinstance(solver, Statistics) and not isinstance(data, (ClickStatistics, PartitionedStatistics)):
      data = solver.gather(m, data)
    return solver.fit(m, data, num_docs=num_docs, l2=l2, prior=centre(solver), init=init)
  except StatisticsTooLarge as e:
    fallback = getattr(solver, "fallback", None)
    if fallback is None:
      raise
    if isinstance(source, (ClickStatistics, PartitionedStatistics)) or not _reiterable(source):
      raise StatisticsTooLarge(
        f"{e}; the fallback {type(fallback).__name__} needs to read the sessions again: pass a list, a stream or a "
        "function returning fresh batches"
      ) from None
    _log.info("fit_click_model: %s; fitting by %s instead", e, fallback)
    fit = _fit_one(m, source, fallback, num_docs=num_docs, l2=l2, prior=prior, init=None)
    return fit._replace(stop_reason=f"{fit.stop_reason} (the fallback: {e})")


def fit_click_model(
  model: "str | ClickModel",
  data: SessionData,
  *,
  solver: Optional[Solver] = None,
  num_docs: Optional[int] = None,
  l2: "float | Sequence[float]" = 1.0,
  validation: "Iterable[Mapping] | Callable[[], Iterable[Mapping]] | None" = None,
  prior: Optional[str] = None,
  init: Optional[dict] = None,
) -> ClickModelFit:
  r"""Fits a click model to a session log by maximum a posteriori: the one entry point.

  .. math::
      \hat\theta = \arg\min_\theta\; \frac{1}{S}\Bigl(\Omega_{\ell_2}(\theta)
        - \sum_{s} \log P_\theta(c^{(s)}_{1:L})\Bigr)

  over the logits of :meth:`~ultr_jax.simulation.ClickModel.init` (every probability the sigmoid of a free logit),
  with :func:`~ultr_jax.simulation.logit_prior`'s Gaussian prior :math:`\Omega_{\ell_2}` (at ``l2 = 1`` a
  unit-variance prior per logit, which keeps never-clicked documents finite; 0 is plain maximum likelihood).
  Parameters a log cannot inform (a rank never shown) stay at the prior's centre. With a sequence of ``l2``
  values and ``validation`` sessions, the fits run from the strongest prior to the weakest, each starting where
  the last stopped, and the one with the lowest held-out conditional perplexity
  (:func:`~ultr_jax.simulation.evaluate_click_model_stream`) is returned, the perplexity of each in
  ``fit.perplexities`` (the statistics are gathered once).

  Args:
    model: a fittable click model (a name of :func:`~ultr_jax.simulation.click_models` ``("fittable")`` or an
      instance, e.g. ``Mixture(("ubm", "dbn"))``), or a CTR baseline of :data:`~ultr_jax.simulation.CTR_MODELS`.
    data: :data:`SessionData`: a batch dict of ``[S, L]`` arrays in displayed order (``doc_ids`` dense ids per
      query-document pair, 0/1 ``clicks``, optional bool ``where``), an iterable of such batches (a list, a
      :class:`~ultr_jax.data.SessionStream`), a function returning a fresh iterable, or gathered statistics.
    solver: a :class:`Solver` (:class:`Statistics`, :class:`LBFGS`, :class:`Minibatch`, :class:`Counts`), or
      None to let :func:`choose_solver` pick (and fall back to :class:`Minibatch` past the memory budget).
    num_docs: number of ids ``D`` (default the largest id + 1).
    l2: prior precision on the logits, or a grid of them chosen on ``validation``.
    validation: held-out session batches (re-iterable, or a function returning them): required with a grid;
      with one value its perplexity is reported too.
    prior: the per-document logits' prior centre, one of :data:`~ultr_jax.simulation.LOGIT_PRIORS` (None:
      ``"data_mean"`` for the chain models (:class:`~ultr_jax.simulation.ClickChain`: the cascade family,
      whose first rank is always examined) and for :class:`Minibatch`, a fallback included; ``"zero"`` for the
      exact solvers of the others; see :func:`~ultr_jax.simulation.logit_prior` for why).
    init: starting logits (default every probability 1/2).

  Returns:
    :class:`~ultr_jax.simulation.ClickModelFit`: probabilities, logits, mean training log-likelihood, the
    solver that ran (``fit.solver``), its iterations (L-BFGS iterations, Newton passes or minibatch steps),
    ``stop_reason``, and with a grid the chosen ``l2`` and every tried value's ``perplexities``.

  Raises:
    ValueError: unknown model (or a :class:`Counts` solver for a name that is no CTR baseline, or ``l2``,
      ``prior``, ``init`` or ``validation`` for one); bad sessions (shape mismatch, clicks not 0/1, ids out of range, a session the
      model cannot explain, naming the first bad entry); a grid without ``validation``; an explicit solver's
      statistics past its budget (:class:`~ultr_jax.simulation.StatisticsTooLarge`).

  >>> import numpy as np
  >>> log = {"doc_ids": np.array([[0, 1], [1, 0]] * 50), "clicks": np.array([[1.0, 0.0], [0.0, 1.0]] * 50)}
  >>> fit = fit_click_model("pbm", log)  # document 0 is always clicked, document 1 never
  >>> print(type(fit.solver).__name__, fit.converged, fit.params["attraction"][0] > 0.9 > 0.1 > fit.params["attraction"][1])
  Statistics True True
  >>> print(fit_click_model("dctr", log).params["document"].round(3))  # counted: (clicks + 1/2) / (shown + 1)
  [0.995 0.005]
  """
  if isinstance(solver, Counts) or (solver is None and isinstance(model, str) and model in CTR_MODELS):
    if not isinstance(model, str) or model not in CTR_MODELS:
      raise ValueError(f"fit_click_model: unknown CTR model {model!r} (expected one of {CTR_MODELS})")
    if prior is not None or init is not None or validation is not None or np.ndim(l2) or l2 != 1.0:
      raise ValueError(
        f"fit_click_model: {model!r} is counted (Counts(prior=...) sets its pseudo-impressions); l2, prior, init "
        "and validation apply to the click models"
      )
    return (Counts() if solver is None else solver).fit(model, data, num_docs=num_docs, l2=0.0, prior="zero", init=None)
  m = fittable_model(model)
  solver = choose_solver(model, data) if solver is None else solver
  if not isinstance(solver, Solver):
    raise TypeError(f"fit_click_model: solver must be a Solver (Statistics(), LBFGS(), ...), got {solver!r}")
  grid = [float(l2)] if np.ndim(l2) == 0 else sorted({float(v) for v in l2}, reverse=True)  # type: ignore[arg-type]
  if not grid or min(grid) < 0 or not all(np.isfinite(grid)):
    raise ValueError(f"fit_click_model: l2 must be finite and >= 0, got {l2}")
  if len(grid) > 1 and validation is None:
    raise ValueError("fit_click_model: a grid of l2 values needs validation sessions to choose among them")
  source, data = data, data
  if isinstance(solver, Statistics) and len(grid) > 1:
    try:
      data = solver.gather(m, data)  # once for the whole grid
    except StatisticsTooLarge:
      if solver.fallback is None:
        raise
      solver = solver.fallback
  scores, best = {}, None
  for value in grid:
    fit = _fit_one(m, data, solver, num_docs=num_docs, l2=value, prior=prior, init=init, source=source)
    init = fit.logits
    if validation is not None:
      held_out = validation() if callable(validation) else validation
      scores[value] = evaluate_click_model_stream(m, fit.params, held_out)["perplexity"]
    if best is None or (scores and scores[value] < scores[best.l2]):
      best = fit._replace(l2=value)
  assert best is not None
  return best._replace(model=model, perplexities=scores or None)
