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
import os
from typing import Callable, Iterable, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ultr_jax._optim import lbfgs_minimize, table_curvature
from ultr_jax.simulation import minibatch, partitioned_fit
from ultr_jax.simulation.click_models import ClickChain, ClickModel, statistics_reduction
from ultr_jax.simulation.click_models.statistics import (
  NUM_PARTITIONS,
  ClickStatistics,
  PartitionedStatistics,
  StatisticsTooLarge,
)
from ultr_jax.simulation.fitting import (
  CTR_MODELS,
  ClickModelFit,
  ctr_tables,
  check_prior,
  fittable_model,
  logit_prior,
  validate_sessions,
)
from ultr_jax.simulation.streaming import (
  MEMORY_BUDGET_BYTES,
  fit_records,
  evaluate_click_model_stream,
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
    doc_ids, clicks, where, num_docs = validate_sessions(b["doc_ids"], b["clicks"], b["where"], num_docs, model)
    logits = model.init(num_docs=num_docs, list_size=clicks.shape[-1]) if init is None else init
    arrays = (doc_ids, clicks, where)
    if self.mesh is not None:
      axis = self.mesh.axis_names[0]
      pad = -clicks.shape[0] % self.mesh.shape[axis]
      arrays = tuple(np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)]) for x in arrays)
      shard = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec(axis))
      arrays = tuple(jax.device_put(x, shard) for x in arrays)
      logits = jax.device_put(logits, jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec()))
    l2_, tol_ = jnp.float32(l2), jnp.float32(self.tol)
    theta, mean_ll, gnorm, iters = _lbfgs_sessions(
      model, logits, *map(jnp.asarray, arrays), l2_, int(self.max_iters), tol_, prior
    )
    probs, converged = model.to_probabilities(theta), bool(gnorm <= self.tol)
    fit = ClickModelFit(model, probs, theta, float(mean_ll), float(gnorm), int(iters), converged, solver=self)
    return _stop(fit, f"max_iters = {self.max_iters} reached")


@functools.partial(jax.jit, static_argnames=("model", "max_iters", "prior"))
def _lbfgs_sessions(model, logits, doc_ids, clicks, where, l2, max_iters, tol, prior):
  """:class:`LBFGS`' program: ``(logits, mean log-likelihood per session, gradient norm, iterations)``."""
  num_sessions = jnp.maximum(jnp.sum(jnp.any(where, axis=-1)), 1)

  def objective(theta):
    ll = model.session_log_likelihood(theta, doc_ids, clicks, where)
    prior_value = logit_prior(model, theta, l2, prior)
    return (prior_value - jnp.sum(ll)) / num_sessions

  # Curvatures differ by orders of magnitude (a document's few impressions, a rank's thousands): precondition.
  scale = jax.tree.map(jnp.sqrt, table_curvature(objective, logits, jnp.maximum(l2, 1e-6) / num_sessions))
  theta, gnorm, iters = lbfgs_minimize(objective, logits, max_iters=max_iters, tol=tol, scale=scale)
  mean_ll = jnp.sum(model.session_log_likelihood(theta, doc_ids, clicks, where)) / num_sessions
  return theta, mean_ll, gnorm, iters


@dataclasses.dataclass(frozen=True)
class Statistics:
  r"""Sufficient statistics in one pass, then an exact fit on them, at a cost per step independent of the sessions.

  The log is reduced by :func:`~ultr_jax.simulation.gather_click_statistics` (the item models count per
  (document, rank[, last click]) and spill to ``spill_dir`` partitioned by document past ``budget``; the others
  merge distinct session patterns, refused past ``budget``), whose weighted record sum
  (:class:`~ultr_jax.simulation.StatisticsReduction`) equals the sessions' log-likelihood,

  .. math::
      \sum_s \log P_\theta(c^{(s)}_{1:L}) = \sum_r \sum_v n_{r,v}\, f_v(\theta; k_r),

  so the objective is the in-memory fit's (up to the order of float sums) at :math:`O(R)` per step for :math:`R`
  records. In-memory records are fitted by preconditioned L-BFGS over size-bucketed records (one program serves
  logs of similar sizes; compiled first, and refused where its working memory would pass ``budget``), spilled
  ones by Newton passes with the documents eliminated, one partition in memory at a time
  (:mod:`~ultr_jax.simulation.partitioned_fit`; ``max_iters`` then counts passes). Either way the tables hold the
  documents the records read, and every other document gets the prior's centre, its optimum. Gathered statistics
  must be of the model's kind, and ``num_docs`` at least theirs.

  >>> ids = np.array([[0, 1], [1, 0]] * 50); clicks = np.array([[1.0, 0.0], [0.0, 1.0]] * 50)
  >>> s = gather_click_statistics("cascade", [{"doc_ids": ids, "clicks": clicks}])
  >>> fit = fit_click_model("cascade", s, solver=Statistics(), l2=0.0)
  >>> print(s.num_records, fit.converged, [round(v, 3) for v in fit.params["attraction"].tolist()])
  2 True [1.0, 0.0]

  Attributes:
    budget: bytes for the statistics held at once and for the fit's working memory (None: no bound); past it
      the statistics spill (item models) or :class:`StatisticsTooLarge` is raised before anything is allocated
      (and :func:`fit_click_model`'s automatic choice moves to :class:`Minibatch`); on spilled statistics, the
      partitions kept in memory between passes (the others are read again from their files).
    spill_dir: where spilled counts go (None: a temporary directory).
    num_partitions: the spilled counts' partitions by document.
    device: count on the accelerator (None: on a GPU or TPU backend).
    across_processes: the data are this process's part of the log; the statistics are merged over the
      processes of ``jax.distributed`` (and a spilled fit shares its partitions among them, every process
      returning the whole fit).
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
    stats = self.gather(model, data)
    kind = statistics_reduction(model).statistics_kind
    if stats.kind != kind:
      raise ValueError(f"{model.name}: statistics of kind {stats.kind!r}, expected {kind!r}")
    args = dict(num_docs=_num_docs(num_docs, stats), l2=l2, max_iters=self.max_iters, tol=self.tol, init=init)
    if isinstance(stats, PartitionedStatistics):
      fit = partitioned_fit.newton_fit(
        model, stats, **args, budget=self.budget, prior=prior, across_processes=self.across_processes
      )
    else:
      fit = fit_records(model, stats, **args, budget=self.budget, prior=prior)
    return _stop(fit._replace(solver=self), f"max_iters = {self.max_iters} reached")


def _num_docs(num_docs: Optional[int], stats: "ClickStatistics | PartitionedStatistics") -> int:
  """``num_docs``, or the statistics' (at least 1); an error below the statistics' largest document id."""
  if num_docs is None:
    return max(stats.num_docs, 1)
  if num_docs < stats.num_docs:
    raise ValueError(f"num_docs = {num_docs} but the statistics hold document id {stats.num_docs - 1}")
  return int(num_docs)


@dataclasses.dataclass(frozen=True)
class Minibatch:
  r"""An elementwise optax optimiser over minibatches, each step updating only the rows its batch shows.

  Each batch :math:`b` of :math:`n_b` sessions takes one step on

  .. math::
      \frac{1}{2}\sum_{u \in b} \frac{\ell_2\, c_{u,b}}{n_b\, N_u}\, v_u^2
      + \frac{\ell_2}{2S}\lVert\beta\rVert^2 - \frac{1}{n_b}\sum_{s \in b}\log P_\theta(c^{(s)}),
      \qquad \theta_d = \mu + \sum_p v_{r_p(d)},

  over the rows :math:`u` of the per-document logit vectors :math:`v` the batch shows (:math:`c_{u,b}` of its
  items, :math:`N_u` of the stream's) and the bias logits :math:`\beta`: the prior of each row spread over its
  impressions, so the estimate is unbiased for the full objective per session, and over an epoch of equal
  batches its prior sums to the full objective's exactly; approximate where the exact solvers are exact. With
  ``sparse=False`` every row takes every step with :math:`\frac{\ell_2}{2S}\lVert v\rVert^2`, at a cost per step
  that grows with the number of documents. With ``prior="data_mean"`` each per-document table has a centre
  :math:`\mu`, a scalar every item's gradient reaches (the mean of :func:`~ultr_jax.simulation.logit_prior`,
  CLAX's baseline logit), so a rarely shown document is shrunk towards the log's typical logit rather than 0;
  ``prior="zero"`` fixes :math:`\mu = 0`. A per-document parameter given a
  :class:`~ultr_jax.simulation.FeatureTable` is computed from the document's features, :math:`\theta_d =
  f_\phi(x_d)` with a flax module's parameters :math:`\phi` (no centre), which take dense steps with the prior
  :math:`\frac{\ell_2}{2S}\lVert\phi\rVert^2`; a document no batch showed gets its logit from its features.
  CLAX (Hager et al. 2025, "CLAX: Fast and flexible neural click models in JAX") fits its click models by such
  minibatch steps (:mod:`~ultr_jax.simulation.minibatch` has the mechanics).

  The data must be re-iterable (a list, a stream, a function returning fresh batches, called once per epoch and
  once more for the counts); every batch must have ``L`` items per list. Memory: while the steps run, each
  table's vector of rows and its optimiser state, and when sparse each row's prior and an index entry, besides the
  batches in flight; then the optimiser state is let go and each per-document table's logits are built in one
  ``float32[D]`` array in place. The fit's ``log_likelihood`` is the mean of the last epoch's batch estimates,
  ``grad_norm`` NaN, ``iterations`` the steps, ``converged`` False (a stochastic fit checks none),
  ``feature_params`` each feature table's fitted module parameters; with a mesh whose size divides ``D`` the
  per-document logits stay split by rows over its devices.

  Attributes:
    optimizer: elementwise optax optimiser (None: ``optax.adam(0.05)``); sparse steps apply it to the shown rows
      with their own state (for Adam the "lazy" Adam of embedding tables).
    epochs: passes over the data.
    sparse: row-wise steps (None: when the logit vectors have more than 16 times as many rows as a batch has
      items).
    tables: per-document parameter name -> :class:`~ultr_jax.simulation.ParameterTable` (None: one row per
      document), e.g. ``{"attraction": HashedTable(2**20)}`` or ``{"attraction": FeatureTable(nn.Dense(1), x)}``
      (``x``: ``float[D, F]``); ``init`` then holds a feature table's module parameters.
    steps_per_call: batches per jitted call (a ``lax.scan``).
    mesh: optional device mesh: batches split by sessions over its first axis (padded with masked sessions), the
      per-document vectors and their optimiser state by rows, the bias replicated: the same steps up to the order
      of float sums. Every process of a multi-process mesh must pass the same batches.
    list_size, num_sessions: ``L`` and ``S`` if known (else counted in a first pass, which also counts
      :math:`N_u` when sparse with ``l2 > 0``).
    key: PRNG key of feature tables' initial module parameters (None: ``jax.random.key(0)``).
    checkpoint_dir: where the fit checkpoints its whole state (None: nowhere): the row vectors, centres, bias,
      feature modules' parameters and their optimiser states, and its position (epoch, batches done in it,
      steps, the batch log-likelihoods its ``log_likelihood`` averages), through orbax (atomic writes; the two
      newest kept). A fit given a directory that holds a checkpoint resumes from the newest readable one (an
      unreadable one is set aside, with a warning), skipping the batches of its epoch already done, and returns
      what the fit without interruption would (the same steps, and logits equal to the order of float sums);
      a checkpoint of another fit (another model, ``l2``, prior, ``init``, optimiser or its settings, epochs,
      tables, ``steps_per_call``, or data: ``D``, ``L``, ``S``, the first batch) is refused with a
      ``ValueError`` naming what differs. With a grid of ``l2`` values each value's fit checkpoints in its
      own subdirectory ``l2=<value>``.
    checkpoint_every: jitted calls (of ``steps_per_call`` batches each) between checkpoints; the fit also saves
      one when it ends.
    patience: early stopping on :func:`fit_click_model`'s ``validation`` sessions (None: none; also none without
      ``validation`` or with ``epochs = 1``). After each epoch :math:`e` the held-out conditional perplexity
      :math:`\mathrm{PPL}_e` (:func:`~ultr_jax.simulation.evaluate_click_model_stream`, of the probabilities the
      epoch's logits imply) is computed; the fit stops after epoch :math:`e` once :math:`e - e^* \ge`
      ``patience`` for the best epoch :math:`e^* = \arg\min_{e' \le e} \mathrm{PPL}_{e'}` (the first of
      equal ones; a NaN never improves), ``epochs`` being the most it runs. The fit returns epoch
      :math:`e^*`'s parameters (kept as a copy on the device, one more set of the tables' vectors, so nothing is
      re-run) and its ``log_likelihood``, ``iterations`` the steps run in all, and ``stop_reason`` e.g.
      ``"held-out perplexity stopped improving after epoch 3 of 10 (best 1.3812 at epoch 2; 30 steps run)"``,
      or ``"10 epoch(s) run (100 steps); held-out perplexity best 1.3812 at epoch 10"``. The default 1 stops
      at the first epoch that does not improve. With ``checkpoint_dir`` the checkpoints also hold the best
      epoch's parameters, its batch log-likelihoods and the perplexity of each epoch done (the fingerprint:
      ``patience`` and the held-out sessions' first batch), so a resumed fit returns what the uninterrupted
      one would.

  A step whose objective or updated parameters are not finite (a learning rate too large, a non-finite feature)
  stops the fit with a ``FloatingPointError`` naming its batch (0-based, counting from the fit's first batch) and
  the input or parameter that went non-finite, as :func:`~ultr_jax.train.fit` does: the check runs inside the
  jitted steps (each call returns its first non-finite step, read on the host a call later), and a checkpoint
  is saved only after its steps are checked. Sessions the model cannot take (clicks not 0/1, NaN among them)
  are a ``ValueError`` naming the batch, before any step.

  >>> b = {"doc_ids": np.array([[0, 1], [1, 0]] * 8), "clicks": np.array([[1.0, 0.0], [0.0, 1.0]] * 8)}
  >>> fit = fit_click_model("cascade", [b] * 10, solver=Minibatch(optimizer=optax.adam(0.1), epochs=5, sparse=True))
  >>> print(fit.iterations, fit.params["attraction"][0] > 0.9 > 0.1 > fit.params["attraction"][1])
  50 True
  >>> mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))  # with two devices each holds one row
  >>> fit2 = fit_click_model("cascade", [b] * 10, solver=Minibatch(optimizer=optax.adam(0.1), epochs=5, mesh=mesh))
  >>> a, a2 = fit.logits["attraction"], fit2.logits["attraction"]
  >>> print(a2.sharding.spec, np.allclose(a2, a, atol=1e-6))
  P('data',) True
  >>> import flax.linen as nn  # attraction from one feature: documents 0 and 1 have x = 1 and -1
  >>> from ultr_jax.simulation import FeatureTable
  >>> table = FeatureTable(nn.Dense(1), np.array([[1.0], [-1.0], [2.0]], np.float32))  # doc 2: never shown
  >>> fit3 = fit_click_model("cascade", [b] * 10, solver=Minibatch(epochs=5, tables={"attraction": table}), num_docs=3)
  >>> a3 = fit3.logits["attraction"]
  >>> print(a3.shape, bool(a3[2] > a3[0] > 0 > a3[1]), np.allclose(a3, table.logits(fit3.feature_params["attraction"], table.features)))
  (3,) True True
  """

  optimizer: Optional[optax.GradientTransformation] = None
  epochs: int = 1
  sparse: Optional[bool] = None
  tables: Optional[Mapping] = None
  steps_per_call: int = minibatch.STEPS_PER_CALL
  mesh: Optional[jax.sharding.Mesh] = None
  list_size: Optional[int] = None
  num_sessions: Optional[float] = None
  key: Optional[jax.Array] = None
  checkpoint_dir: Optional[str] = None
  checkpoint_every: int = 100
  patience: Optional[int] = 1

  def __post_init__(self):
    for name in ("epochs", "steps_per_call", "checkpoint_every", "patience"):
      value = getattr(self, name)
      if name == "patience" and value is None:
        continue
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        none = " or None" if name == "patience" else ""
        raise ValueError(f"Minibatch: {name} must be an integer >= 1{none}, got {value!r}")
    if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, (str, os.PathLike)):
      raise ValueError(f"Minibatch: checkpoint_dir must be a path or None, got {self.checkpoint_dir!r}")

  def fit(self, model, data, *, num_docs, l2, prior, init, validation=None):
    """Fits ``model`` to ``data`` (see :func:`fit_click_model`), stopping early on ``validation`` (held-out
    batches or a function returning them; None: every epoch runs)."""
    if isinstance(data, (ClickStatistics, PartitionedStatistics)):
      raise ValueError("Minibatch fits sessions; for gathered statistics use Statistics()")
    fit = minibatch.minibatch_fit(
      model, _batches(data), self, num_docs=num_docs, l2=l2, prior=prior, init=init, validation=validation
    )
    return fit._replace(
      solver=self, stop_reason=fit.stop_reason or f"{self.epochs} epoch(s) run ({fit.iterations} steps)"
    )


@dataclasses.dataclass(frozen=True)
class Counts:
  r"""The click-through-rate baselines by counting (PyClick's and CLAX's GCTR, RCTR, DCTR, DRCTR).

  Each rate is a smoothed mean of the clicks of its cell, shrunk toward its parent's rate by ``prior``
  pseudo-impressions:

  .. math::
      \hat p_{\text{cell}} = \frac{\sum_{\text{cell}} c + \text{prior}\cdot \hat p_{\text{parent}}}
                                  {N_{\text{cell}} + \text{prior}}

  =======  ===========================  ================================
  model    cell                         parent
  =======  ===========================  ================================
  gctr     every shown item             none (the plain mean)
  rctr     the rank                     gctr
  dctr     the document                 gctr
  drctr    the (document, rank) pair    the document's dctr
  =======  ===========================  ================================

  They ignore the clicks above an item, so their conditional and marginal click probabilities are equal; a click
  model that does not beat them on held-out sessions explains nothing the counts do not. A batch dict is counted
  on the host (NumPy); a stream in one pass through the PBM's statistics (impressions and clicks per (document,
  rank), the same tables up to the order of float sums), as are gathered ``"items"`` statistics. The fit's
  ``params`` are the ``float32`` rate tables, ``global[]`` always, ``rank[L]``, ``document[D]`` and
  ``document_rank[D, L]`` as the model needs (:func:`~ultr_jax.simulation.ctr_model_predict` scores them);
  ``logits`` is empty.

  Attributes:
    prior: pseudo-impressions of the parent's rate in each cell (0: plain means; negative: a ``ValueError``).

  >>> log = {"doc_ids": np.array([[0, 1], [1, 0]]), "clicks": np.array([[1.0, 0.0], [1.0, 1.0]])}
  >>> p = fit_click_model("drctr", log, solver=Counts(prior=0.0)).params
  >>> print(p["global"], fit_click_model("rctr", log, solver=Counts(0.0)).params["rank"], p["document"], p["document_rank"].tolist())
  0.75 [1.  0.5] [1.  0.5] [[1.0, 1.0], [1.0, 0.0]]
  >>> print(fit_click_model("drctr", [log], solver=Counts(prior=0.0)).params["document_rank"].tolist())  # a stream
  [[1.0, 1.0], [1.0, 0.0]]
  """

  prior: float = 1.0

  def __post_init__(self):
    if self.prior < 0:
      raise ValueError(f"Counts: prior must be >= 0, got {self.prior}")

  def fit(self, model, data, *, num_docs, l2, prior, init):
    del l2, prior, init  # counting has no optimiser
    name = model if isinstance(model, str) else model.name
    if isinstance(data, Mapping):
      b = _in_memory(data)
      doc_ids, clicks, where, num_docs = validate_sessions(b["doc_ids"], b["clicks"], b["where"], num_docs)
      length = clicks.shape[-1]
      docs, ranks = doc_ids[where].astype(np.int64), np.broadcast_to(np.arange(length), clicks.shape)[where]
      n, k = None, clicks[where].astype(np.float64)
      g = float(k.mean()) if k.size else 0.5
    else:
      stats = Statistics().gather(fittable_model("pbm"), data)
      if isinstance(stats, PartitionedStatistics):  # the rates read every record at once
        stats = stats.to_statistics()
      if stats.kind != "items":
        raise ValueError(f"{name}: statistics of kind {stats.kind!r}, expected 'items' (per document and rank)")
      num_docs, length = _num_docs(num_docs, stats), stats.list_size
      docs, ranks = (np.asarray(stats.keys[:, i], np.int64) for i in (0, 1))
      n, k = (np.asarray(stats.counts[:, v], np.float64) for v in (0, 1))
      g = float(k.sum()) / float(n.sum()) if float(n.sum()) > 0 else 0.5
    rates = ctr_tables(name, docs, ranks, n, k, g, num_docs=num_docs, length=length, prior=self.prior)
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


def _fit_one(m, data, solver, *, num_docs, l2, prior, init, source=None, validation=None) -> ClickModelFit:
  """``solver``'s fit, or its fallback's on ``source`` (the sessions ``data`` were gathered from; default ``data``)
  where the statistics or their fit would outgrow the budget; a :class:`Minibatch` fit (the fallback's included)
  stops early on ``validation``."""
  centre = lambda s: _default_prior(m, s) if prior is None else check_prior(prior)  # noqa: E731
  source = data if source is None else source
  try:
    if isinstance(solver, Statistics) and not isinstance(data, (ClickStatistics, PartitionedStatistics)):
      data = solver.gather(m, data)
    held_out = {"validation": validation} if validation is not None and isinstance(solver, Minibatch) else {}
    return solver.fit(m, data, num_docs=num_docs, l2=l2, prior=centre(solver), init=init, **held_out)
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
    fit = _fit_one(m, source, fallback, num_docs=num_docs, l2=l2, prior=prior, init=None, validation=validation)
    return fit._replace(stop_reason=f"{fit.stop_reason} (the fallback: {e})")


def _checkpoints_of(solver: Solver, l2: float) -> Solver:
  """``solver`` (or its fallback) checkpointing a grid's fit with ``l2`` in its own subdirectory."""
  if isinstance(solver, Minibatch) and solver.checkpoint_dir is not None:
    return dataclasses.replace(solver, checkpoint_dir=os.path.join(solver.checkpoint_dir, f"l2={l2!r}"))
  if isinstance(solver, Statistics) and solver.fallback is not None:
    return dataclasses.replace(solver, fallback=_checkpoints_of(solver.fallback, l2))
  return solver


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
      with one value its perplexity is reported too. A :class:`Minibatch` fit of more than one epoch (explicit,
      or the automatic choice's fallback) also stops early on them: after each epoch their conditional
      perplexity is computed, the fit stops once it has not improved for ``patience`` epochs and returns the
      best epoch's parameters (see :class:`Minibatch`; ``patience=None`` runs every epoch). With a grid, each
      value's fit stops early on the same sessions, and the grid's choice is then made among those fits as
      without early stopping.
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
    one = _checkpoints_of(solver, value) if len(grid) > 1 else solver
    args = dict(num_docs=num_docs, l2=value, prior=prior, init=init, source=source, validation=validation)
    fit = _fit_one(m, data, one, **args)
    init = fit.logits
    if validation is not None:
      held_out = validation() if callable(validation) else validation
      scores[value] = evaluate_click_model_stream(m, fit.params, held_out)["perplexity"]
    if best is None or (scores and scores[value] < scores[best.l2]):
      best = fit._replace(l2=value)
  assert best is not None
  return best._replace(model=model, perplexities=scores or None)
