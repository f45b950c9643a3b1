r"""Click models fitted by a stochastic optimiser over a stream of session batches, at a cost per step set by the
batch, not by the number of documents.

The :class:`~ultr_jax.simulation.Minibatch` solver (its objective and options are stated there) is the fallback of
:class:`~ultr_jax.simulation.Statistics` where no reduction to
sufficient statistics applies (a cascade-family model on a log whose lists rarely repeat): an optax optimiser over
minibatches, CLAX's way of fitting. A real click log holds millions of query-document pairs, of which a batch
shows a few thousand; so, as the optimisers of embedding tables do, each step

1. gathers the rows of the per-document logit vectors the batch shows (their distinct ids, found on the host
   while the previous step runs),
2. takes the gradient of the batch objective with respect to those rows and the small bias tables only,
3. applies the optimiser to those rows with their own optimiser state (gathered the same way) and scatters
   rows and state back in place.

Rows the batch does not show keep their values and optimiser state: for optimisers whose update of a zero
gradient is zero (SGD, Adagrad, RMSProp) this is the dense update exactly; for Adam it is the "lazy" Adam of
embedding tables (the moments of an absent row are not decayed). Several batches run in one jitted ``lax.scan``
and the next group is read and prepared in a background thread.

The per-document parameters may be compressed (:mod:`~ultr_jax.simulation.click_models.tables`: the hashing
trick, quotient-remainder rows), or computed from the documents' features by a flax module
(:class:`~ultr_jax.simulation.click_models.tables.FeatureTable`: each prepared batch carries its documents'
features ``[B, L, F]``, and the module's few parameters take dense steps); the fit returns the per-document
logits they imply.

Over a ``jax.sharding.Mesh`` the fit is data-parallel: each batch's sessions are split over the devices of the
mesh's first axis, while the per-document vectors and their optimiser state are split by rows (each device
holds ``1 / n`` of every table, the row count padded with never-shown rows to a multiple of ``n``) and the bias
logits are replicated. The jitted steps take and return those shardings; XLA's partitioner gathers each
batch's rows from the devices that hold them and scatters them back, so no device ever holds a whole table and
what moves between devices per step is the batch's rows, not the table.

With a ``checkpoint_dir`` the fit saves its whole state and its position (epoch, batches done in it, steps, the
batch log-likelihoods so far) every ``checkpoint_every`` calls and at the end, through the checkpoints the
training loop uses (:mod:`ultr_jax._checkpoint`, fingerprinted by :mod:`ultr_jax._fingerprint`), and resumes
from the newest readable one, skipping the batches of its epoch already done. Each step also reports whether its
objective and updated parameters are finite, and if not which inputs and parameters were not
(:mod:`ultr_jax._divergence`, as the training loop's steps do); the host reads each call's report one call later
and stops a diverged fit with a ``FloatingPointError`` naming the batch.
"""

import functools
import itertools
import queue
import sys
import threading
import types
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ultr_jax._checkpoint import Checkpointer, restore_checkpoint
from ultr_jax._fingerprint import arrays_digest, digest
from ultr_jax._divergence import diagnose, first_nonfinite, first_of_call, nonfinite
from ultr_jax.simulation.click_models import ClickModel
from ultr_jax.simulation.click_models.tables import FeatureTable, FullTable, ParameterTable, table_logits
from ultr_jax.simulation.fitting import ClickModelFit
from ultr_jax.simulation.streaming import evaluate_click_model_stream, session_batch, iterate_batches

__all__ = ["STEPS_PER_CALL"]

Batches = Iterable[Mapping]

#: Batches one jitted call of :class:`~ultr_jax.simulation.Minibatch`'s fit runs (a ``lax.scan`` over them).
STEPS_PER_CALL = 16


class _Counts(NamedTuple):
  num_docs: int
  list_size: int
  num_sessions: float
  impressions: Optional[dict]  # table name -> int64[<= num_rows] shown items per row (rows past its end: none)


def _check_list_size(index: int, got: int, list_size: int) -> None:
  if got != list_size:
    raise ValueError(
      f"Minibatch: batch {index} holds lists of {got} items, but the fit's list size is "
      f"{list_size} (the first batch's or list_size=); every batch of a fit must have the same list size"
    )


def _sessions(index: int, batch: Mapping, m: ClickModel, num_docs: Optional[int] = None):
  """:func:`~ultr_jax.simulation.streaming.session_batch` of the fit's batch ``index`` (its errors name it)."""
  try:
    return session_batch(batch, m, num_docs)
  except ValueError as e:
    raise ValueError(f"Minibatch: batch {index} (0-based, counting from the fit's first batch): {e}") from None


class _RowCounter:
  """Shown items per row, counted a few million at a time (a bincount per batch would sweep the whole table), into
  one ``int64`` total added to in place (no ``float64`` copy of it, no temporary of its size but the bincount's)."""

  #: Rows held before they are counted.
  flush_size = 1 << 24

  def __init__(self):
    self.total, self.pending, self.size = np.zeros(0, np.int64), [], 0

  def add(self, rows: np.ndarray) -> None:
    self.pending.append(rows.ravel())
    self.size += rows.size
    if self.size >= self.flush_size:
      self.flush()

  def flush(self) -> np.ndarray:
    if self.pending:
      counts = np.bincount(np.concatenate(self.pending))
      self.pending, self.size = [], 0
      if counts.shape[0] > self.total.shape[0]:
        counts[: self.total.shape[0]] += self.total
        self.total = counts
      else:
        self.total[: counts.shape[0]] += counts
    return self.total


def _count(m, batches, tables, list_size, need_impressions) -> _Counts:
  """One pass: the largest id, the list size (checked equal across batches), the sessions and, for the row-wise
  prior, the shown items per row of each table (equal tables counted once)."""
  owner = {k: next(j for j in tables if tables[j] == t) for k, t in tables.items()}
  counters = {k: _RowCounter() for k in set(owner.values())} if need_impressions else {}
  docs, count = 0, 0.0
  for i, batch in enumerate(iterate_batches(batches)):
    doc_ids, _, where, n = _sessions(i, batch, m)
    list_size = doc_ids.shape[-1] if list_size is None else list_size
    _check_list_size(i, doc_ids.shape[-1], list_size)
    docs = max(docs, n)
    count += float(np.any(where, axis=-1).sum())
    for k, counter in counters.items():
      counter.add(tables[k].rows(doc_ids[where]))
  if list_size is None:
    raise ValueError("Minibatch: the stream is empty")
  impressions = {k: counters[owner[k]].flush() for k in tables} if need_impressions else None
  return _Counts(docs, list_size, count, impressions)


class _Plan(NamedTuple):
  """What the host side needs to prepare a batch (hashable parts only matter to jit through shapes)."""

  model: ClickModel
  tables: Mapping[str, ParameterTable]  # the tables of rows
  num_rows: Mapping[str, int]
  num_docs: int
  list_size: int
  sparse: bool
  l2: float
  prior: Optional[dict]  # table name -> float32[num_rows + 1]: l2 / N_u, each row's prior per shown item
  scratch: Optional[dict]  # table name -> int32[num_rows + 1], the host's work space of _distinct
  batch_multiple: int = 1  # sessions per batch padded to a multiple of this (the mesh's devices)
  features: Mapping[str, FeatureTable] = types.MappingProxyType({})  # the tables computed from features


def _distinct(rows: np.ndarray, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(distinct rows, inverse, counts)`` of ``rows`` (any order of the distinct rows) in :math:`O(n)`, no sort:
  each item writes its position into ``scratch`` at its row, every item of a row reads back the same one of
  their positions, and the item at that position stands for the row. ``scratch`` is never cleared: each call
  writes the entries it reads."""
  pos = np.arange(rows.size, dtype=np.int32)
  scratch[rows] = pos
  representative = scratch[rows]
  first = representative == pos
  local = np.cumsum(first, dtype=np.int32) - 1
  inverse = local[representative]
  return rows[first], inverse, np.bincount(inverse, minlength=int(local[-1]) + 1 if rows.size else 0)


def _prepare(plan: _Plan, index: int, batch: Mapping, rows_per_batch: Optional[int]) -> dict:
  """A batch as the step reads it: ``clicks``, ``where``, ``rows`` (per table ``int32[B, L, P]``: rows of the
  logit vector, or of the batch's gathered rows when sparse), when sparse ``uniq`` (the distinct rows, padded
  with the out-of-range row ``num_rows``) and ``prior`` (each gathered row's prior precision this step), and
  ``features`` (per feature table ``float32[B, L, F]``, masked items' those of document 0)."""
  doc_ids, clicks, where, _ = _sessions(index, batch, plan.model, plan.num_docs)
  _check_list_size(index, doc_ids.shape[-1], plan.list_size)
  pad = (rows_per_batch or doc_ids.size // plan.list_size) - doc_ids.size // plan.list_size

  def sessions_of(x: np.ndarray) -> np.ndarray:  # [B, L], padded with masked sessions: they count for nothing
    x = x.reshape(-1, plan.list_size)
    return np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)]) if pad > 0 else x

  doc_ids, clicks, where = sessions_of(doc_ids), sessions_of(clicks), sessions_of(where)
  ids = np.where(where, doc_ids, 0)
  sessions = max(int(np.count_nonzero(np.any(where, axis=-1))), 1)
  out = {"clicks": clicks, "where": where, "rows": {}, "uniq": {}, "prior": {}}
  out["features"] = {k: t.lookup(ids) for k, t in plan.features.items()}
  done = {}  # tables equal to one already mapped share its rows
  for k, t in plan.tables.items():
    same = next((j for j in done if plan.tables[j] == t), None)
    if same is not None:
      for part in ("rows", "uniq", "prior"):
        if same in out[part]:
          out[part][k] = out[part][same]
      continue
    done[k] = True
    rows = t.rows(ids).astype(np.int32)
    if not plan.sparse:
      out["rows"][k] = rows
      continue
    assert plan.scratch is not None  # sparse plans have their work space
    uniq, inverse, counts = _distinct(rows[where].ravel(), plan.scratch[k])
    local = np.zeros(rows.shape, np.int32)
    local[where] = inverse.reshape(-1, rows.shape[-1])
    size = rows.size  # a static bound: every item of the batch a distinct row
    out["rows"][k] = local
    out["uniq"][k] = np.concatenate([uniq, np.full(size - uniq.size, plan.num_rows[k], np.int32)])
    prior = np.zeros(size, np.float32)
    if plan.l2 > 0:  # each shown item carries 1/n_r of its row's prior: unbiased, and exact summed over an epoch
      assert plan.prior is not None  # sparse plans with l2 > 0 have the rows' priors
      prior[: uniq.size] = counts * plan.prior[k][uniq] / sessions
    out["prior"][k] = prior
  return out


def _stack(prepared: list) -> dict:
  return jax.tree.map(lambda *x: np.stack(x), *prepared)


def _groups(plan: _Plan, batches: Batches, steps_per_call: int, start: int = 0) -> Iterator[dict]:
  """Prepared batches stacked ``steps_per_call`` at a time (a group ends early where the batch shape changes
  and at the end of the stream; a shorter batch is padded with masked sessions to its group's size); ``start``:
  the fit's number of the first batch (for messages)."""
  group, rows = [], 0
  for i, batch in enumerate(batches, start):
    n = int(np.asarray(batch["clicks"]).size // plan.list_size) if "clicks" in batch else 0
    if group and n > rows:
      yield _stack(group)
      group = []
    rows = -(-n // plan.batch_multiple) * plan.batch_multiple if not group else rows
    group.append(_prepare(plan, i, batch, rows))
    if len(group) == steps_per_call:
      yield _stack(group)
      group = []
  if group:
    yield _stack(group)


def _prefetch(items: Iterator, depth: int = 2) -> Iterator:
  """``items`` produced in a background thread, ``depth`` ahead (its exceptions re-raised here)."""
  q: queue.Queue = queue.Queue(maxsize=depth)
  done = object()

  def work():
    try:
      for item in items:
        q.put((item, None))
    except BaseException as e:  # noqa: BLE001 (handed to the consumer)
      q.put((None, e))
    q.put((done, None))

  threading.Thread(target=work, daemon=True).start()
  while True:
    item, error = q.get()
    if error is not None:
      raise error
    if item is done:
      return
    yield item


def _batch_log_likelihood(model, vectors, bias, rows, clicks, where, centre, modules, features):
  """The batch's mean session log-likelihood: each item's logits summed from its rows (plus its table's
  ``centre``, where the prior has one), or computed from its features by a feature table's module
  (``modules``: name -> (table, its parameters)), in log space."""
  logit = {k: jnp.sum(v[rows[k]], axis=-1) for k, v in vectors.items()}
  logit = {k: (v + centre[k] if k in centre else v) for k, v in logit.items()}
  logit.update({k: t.logits(p, features[k]) for k, (t, p) in (modules or {}).items()})
  items = {k: (jax.nn.log_sigmoid(logit[k]), jax.nn.log_sigmoid(-logit[k])) for k in model.item_params}
  log_bias = model.log_bias(bias, items)
  a = logit["attraction"]
  log_q, log_1mq = model.log_probs(clicks, jax.nn.log_sigmoid(a), jax.nn.log_sigmoid(-a), log_bias, where=where)
  # The Bernoulli sum over the shown items, by selection (0 * -inf of the outcome that did not happen is NaN).
  ll = jnp.sum(jnp.where(where, jnp.where(clicks > 0.5, log_q, log_1mq), 0.0))
  return ll / jnp.maximum(jnp.sum(jnp.any(where, axis=-1)), 1)


def _rows_of(tree, uniq, num_rows):
  """The optimiser-state leaves of a vector of ``num_rows`` rows, gathered at ``uniq`` (scalars as they are)."""
  return jax.tree.map(
    lambda a: a.at[uniq].get(mode="fill", fill_value=0) if a.ndim and a.shape[0] == num_rows else a, tree
  )


def _put_rows(tree, new, uniq, num_rows):
  return jax.tree.map(
    lambda a, b: a.at[uniq].set(b, mode="drop") if a.ndim and a.shape[0] == num_rows else b, tree, new
  )


def _step(model, optimizer, sparse, state, x, l2_bias, feature_tables=()):
  """One optimiser step on one prepared batch ``x``; returns the new state and the batch's mean log-likelihood.
  The state: the logit vectors, the bias logits, the prior's centres (empty without one), the feature tables'
  module parameters (``feature_tables``: ``(name, table)`` pairs) and their optimiser states."""
  vectors, (bias, centre, modules), vector_states, (bias_state, centre_state, module_state) = state
  tables = dict(feature_tables)
  if sparse:
    local = {k: v.at[x["uniq"][k]].get(mode="fill", fill_value=0.0) for k, v in vectors.items()}
    prior = x["prior"]
  else:
    local, prior = vectors, {k: l2_bias for k in vectors}

  def objective(local, bias, centre, modules):
    applied = {k: (tables[k], p) for k, p in modules.items()}
    ll = _batch_log_likelihood(model, local, bias, x["rows"], x["clicks"], x["where"], centre, applied, x["features"])
    penalty = sum(jnp.sum(prior[k] * v**2) for k, v in local.items())
    penalty += l2_bias * sum(jnp.sum(v**2) for v in jax.tree.leaves((bias, modules)))
    return 0.5 * penalty - ll, ll

  (loss, ll), grads = jax.value_and_grad(objective, argnums=(0, 1, 2, 3), has_aux=True)(local, bias, centre, modules)
  grad, bias_grad, centre_grad, module_grad = grads
  before = {"rows": local, "bias": bias, "centre": centre, "modules": modules}
  new_vectors, new_states, new_rows = {}, {}, {}
  for k, v in vectors.items():
    opt_state = _rows_of(vector_states[k], x["uniq"][k], v.shape[0]) if sparse else vector_states[k]
    updates, opt_state = optimizer.update(grad[k], opt_state, local[k])
    rows = new_rows[k] = optax.apply_updates(local[k], updates)
    if sparse:
      new_vectors[k] = v.at[x["uniq"][k]].set(rows, mode="drop")
      new_states[k] = _put_rows(vector_states[k], opt_state, x["uniq"][k], v.shape[0])
    else:
      new_vectors[k], new_states[k] = rows, opt_state
  updates, bias_state = optimizer.update(bias_grad, bias_state, bias)
  bias = optax.apply_updates(bias, updates)
  if centre:  # the prior's centres: dense scalars every item informs
    updates, centre_state = optimizer.update(centre_grad, centre_state, centre)
    centre = optax.apply_updates(centre, updates)
  if modules:  # the feature tables' modules: dense steps on their (few) parameters
    updates, module_state = optimizer.update(module_grad, module_state, modules)
    modules = optax.apply_updates(modules, updates)
  after = {"rows": new_rows, "bias": bias, "centre": centre, "modules": modules}
  new_state = (new_vectors, (bias, centre, modules), new_states, (bias_state, centre_state, module_state))
  return new_state, (ll, *_health(x, loss, before, after))


def _health(x, loss, before, after):
  """``(ok, diagnosis)`` of one step: whether its objective and the parameters it updated (the batch's rows, the
  bias, centres and modules) are finite, and when not (a ``lax.cond``: nothing computed on a finite step) which of
  the batch's inputs (shown entries only) and parameters held a non-finite value before and after it."""
  ok = ~nonfinite(loss) & ~jnp.any(jnp.stack([nonfinite(v) for v in jax.tree.leaves(after)]))
  inputs = {"clicks": x["clicks"], "features": x["features"], "prior": x["prior"]}

  def unhealthy():  # the masked entries (zeros, padding) do not count: masked here, in the branch alone
    shown = x["where"]
    masked = {
      "clicks": jnp.where(shown, x["clicks"], 0.0),
      "features": {k: jnp.where(shown[..., None], v, 0.0) for k, v in x["features"].items()},
      "prior": x["prior"],
    }
    return diagnose(masked, before, after, healthy=False)

  return ok, jax.lax.cond(ok, lambda: diagnose(inputs, before, after, healthy=True), unhealthy)


def _scan(model, optimizer, sparse, state, xs, l2_bias, feature_tables=()):
  """The steps on a group of prepared batches: ``(state, (log-likelihoods [K], the call's first non-finite step))``
  (:func:`~ultr_jax._divergence.first_of_call`)."""
  state, (ll, ok, diagnosis) = jax.lax.scan(
    lambda s, x: _step(model, optimizer, sparse, s, x, l2_bias, feature_tables), state, xs
  )
  return state, (ll, first_of_call(ok, diagnosis))


_steps = jax.jit(_scan, static_argnums=(0, 1, 2, 6), donate_argnums=(3,))


def _tables(m: ClickModel, tables: Optional[Mapping[str, ParameterTable]]) -> dict:
  names = ("attraction",) + tuple(m.item_params)
  tables = dict(tables or {})
  unknown = sorted(set(tables) - set(names))
  if unknown:
    raise ValueError(f"Minibatch: tables for {unknown}, but {m.name}'s per-document parameters are {names}")
  return {k: tables.get(k, FullTable()) for k in names}


def _initial_modules(features: Mapping[str, FeatureTable], init: Optional[dict], key: jax.Array) -> dict:
  """Each feature table's module parameters: ``init``'s where given (the same tree), else ``module.init``."""
  modules = {}
  for i, (k, t) in enumerate(sorted(features.items())):
    modules[k] = t.init(jax.random.fold_in(key, i))
    if init is not None and k in init:
      if jax.tree.structure(init[k]) != jax.tree.structure(modules[k]) or any(
        np.shape(a) != np.shape(b) for a, b in zip(jax.tree.leaves(init[k]), jax.tree.leaves(modules[k]))
      ):
        raise ValueError(f"Minibatch: init[{k!r}] is not its feature table's module parameters")
      modules[k] = jax.tree.map(lambda a: jnp.array(a, jnp.float32), init[k])
  return modules


def _initial_state(m, optimizer, tables, num_rows, list_size, init, prior, padded=None, modules=None):
  """The fit's state ``(vectors, (bias, centres, modules), vector optimiser states, (bias, centre, module)
  optimiser states)``; the vectors have ``padded`` rows (default ``num_rows``), the rows past ``num_rows`` zero (a
  mesh's padding, never shown); ``modules``: the feature tables' module parameters (their names in no table of
  rows, no centre: a module's own bias is its intercept)."""
  padded = num_rows if padded is None else padded
  modules = {} if modules is None else modules
  logits = m.init(num_docs=1, list_size=list_size)
  vectors = {k: jnp.zeros(padded[k], jnp.float32) for k in tables}
  bias = {k: v for k, v in logits.items() if k not in tables and k not in modules}
  if init is not None:
    for k, v in init.items():
      if k in modules:
        continue
      if k in tables and not isinstance(tables[k], FullTable):
        raise ValueError(f"Minibatch: init[{k!r}] given for a compressed table")
      target = vectors if k in tables else bias
      expected = (num_rows[k],) if k in tables else np.shape(target.get(k))
      if k not in target or np.shape(v) != expected:
        raise ValueError(f"Minibatch: init[{k!r}] of shape {np.shape(v)} does not fit this model")
      target[k] = jnp.array(v, jnp.float32)
      if k in tables and padded[k] != num_rows[k]:
        target[k] = jnp.pad(target[k], (0, padded[k] - num_rows[k]))
  centre = {k: jnp.zeros((), jnp.float32) for k in tables} if prior == "data_mean" else {}
  states = (optimizer.init(bias), optimizer.init(centre), optimizer.init(modules))
  return (vectors, (bias, centre, modules), {k: optimizer.init(v) for k, v in vectors.items()}, states)


class _Placement(NamedTuple):
  """Where a fit over a mesh keeps its arrays."""

  rows: NamedSharding  # the per-document vectors and their optimiser state, split by rows over the devices
  replicated: NamedSharding  # the bias logits, their optimiser state, each batch's distinct rows
  sessions: NamedSharding  # a group of batches [steps, sessions, ...], split by sessions
  size: int  # devices along the mesh's first axis


def _placement(mesh: Mesh) -> _Placement:
  axis = mesh.axis_names[0]
  return _Placement(
    NamedSharding(mesh, P(axis)), NamedSharding(mesh, P()), NamedSharding(mesh, P(None, axis)), mesh.shape[axis]
  )


def _state_shardings(state, placement: _Placement, padded: Mapping[str, int]):
  """The shardings of a state like ``state`` (arrays or shapes): the vectors and the row leaves of their
  optimiser states split by rows, everything else replicated."""
  vectors, bias, vector_states, bias_state = state
  rep = lambda tree: jax.tree.map(lambda _: placement.replicated, tree)  # noqa: E731
  by_rows = {
    k: jax.tree.map(lambda a, n=padded[k]: placement.rows if a.ndim and a.shape[0] == n else placement.replicated, t)
    for k, t in vector_states.items()
  }
  return ({k: placement.rows for k in vectors}, rep(bias), by_rows, rep(bias_state))


def _put_group(xs: dict, placement: _Placement) -> dict:
  """A group of prepared batches placed on the mesh (its sessions split, its distinct rows and their priors
  replicated), each device's part cut from the host arrays (every process of a multi-process mesh holds the
  same ones)."""

  def put(x, sharding):
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

  replicated = ("uniq", "prior")
  return {
    k: jax.tree.map(functools.partial(put, sharding=placement.replicated if k in replicated else placement.sessions), v)
    for k, v in xs.items()
  }


def _sharded_start(m, optimizer, tables, num_rows, padded, list_size, init, prior, placement: _Placement, modules=None):
  """The initial state created in place on the mesh (no device holds a whole table), and the jitted steps that
  take and return it with the same shardings (the batches split by sessions, their distinct rows replicated)."""
  make = functools.partial(
    _initial_state, m, optimizer, tables, num_rows, list_size, prior=prior, padded=padded, modules=modules
  )
  shardings = _state_shardings(jax.eval_shape(make, init), placement, padded)
  state = jax.jit(make, out_shardings=shardings)(init)
  rep, split = placement.replicated, placement.sessions
  batch = {"clicks": split, "where": split, "rows": split, "uniq": rep, "prior": rep, "features": split}
  steps = jax.jit(
    _scan,
    static_argnums=(0, 1, 2, 6),
    donate_argnums=(3,),
    in_shardings=(shardings, batch, rep),
    out_shardings=(shardings, rep),
  )
  return state, steps


def _shared(tables: Mapping[str, ParameterTable], make: Callable[[str], np.ndarray]) -> dict:
  """``make(k)`` for each table ``k``, made once per distinct table (equal tables share their rows)."""
  out = {}
  for k, t in tables.items():
    same = next((j for j in out if tables[j] == t), None)
    out[k] = out[same] if same is not None else make(k)
  return out


def _row_priors(tables, impressions: Mapping[str, np.ndarray], padded: Mapping[str, int], l2: float) -> dict:
  """Each row's prior per shown item, :math:`\\ell_2 / \\max(N_u, 1)`, ``float32[padded + 1]`` (the last entry:
  the padding row, never read with a count), one array per distinct table, converted from the counts a block at a
  time (no ``float64`` copy of them)."""

  def make(k: str) -> np.ndarray:
    n, prior, block = impressions[k], np.full(padded[k] + 1, np.float32(l2 / 1.0)), 1 << 20
    for start in range(0, n.shape[0], block):
      stop = min(start + block, n.shape[0])
      prior[start:stop] = (l2 / np.maximum(n[start:stop], 1.0)).astype(np.float32)
    return prior

  return _shared(tables, make)


class _Position(NamedTuple):
  """Where a fit is: the epoch, the batches done in it, the steps done in all, the batch log-likelihoods of this
  epoch so far and of the last complete one (``float32``)."""

  epoch: int = 0
  batch: int = 0
  steps: int = 0
  values: np.ndarray = np.zeros(0, np.float32)
  last: np.ndarray = np.zeros(0, np.float32)


def _check_finite(pending: list, epoch: int) -> None:
  """Raises ``FloatingPointError`` at the first non-finite step of the calls ``pending`` (``[(first batch,
  diagnosis)]``), naming its batch and what went non-finite first; ``pending`` is emptied."""
  first = first_nonfinite(pending)
  pending.clear()
  if first is None:
    return
  where = f"Minibatch: the fit diverged at batch {first['batch']} (0-based, counting from the fit's first batch; epoch {epoch})"
  if first["inputs"]:
    raise FloatingPointError(
      f"{where}: its input {', '.join(first['inputs'])} hold(s) non-finite values among the shown items; fix the data"
    )
  if first["params_before"]:
    raise FloatingPointError(f"{where}: parameter(s) {first['params_before']} were already non-finite")
  what = f"parameter(s) {first['params_after']}" if first["params_after"] else "the objective"
  raise FloatingPointError(
    f"{where}, with finite inputs and parameters: the update made {what} non-finite. Lower the optimizer's "
    "learning rate or clip its updates (optax.clip_by_global_norm)"
  )


class _EarlyStopping:
  """The held-out perplexity after each epoch (``score(state)``), the best epoch's parameters (a copy on the
  device of the state's vectors, bias, centres and modules) and its batch log-likelihoods; ``after_epoch`` says
  whether the fit stops: ``patience`` epochs without a strictly lower perplexity than the best."""

  def __init__(self, score: Callable, patience: int):
    self.score, self.patience = score, patience
    self.history: list[float] = []
    self.best_epoch, self.best_params, self.best_last = -1, None, np.zeros(0, np.float32)

  def after_epoch(self, state, last: np.ndarray) -> bool:
    ppl = float(self.score(state))
    self.history.append(ppl)
    rank = lambda v: v if np.isfinite(v) else np.inf  # noqa: E731 (a NaN perplexity never improves)
    if self.best_epoch < 0 or rank(ppl) < rank(self.history[self.best_epoch]):
      self.best_epoch = len(self.history) - 1
      self.best_params = jax.tree.map(jnp.copy, (state[0], state[1]))  # the steps donate the state's buffers
      self.best_last = last
    return self.stopped()

  def stopped(self) -> bool:
    return bool(self.history) and len(self.history) - 1 - self.best_epoch >= self.patience

  def stop_reason(self, epochs: int, steps: int) -> str:
    ran, best = len(self.history), f"best {self.history[self.best_epoch]:.4f} at epoch {self.best_epoch + 1}"
    if ran < epochs:
      return f"held-out perplexity stopped improving after epoch {ran} of {epochs} ({best}; {steps} steps run)"
    return f"{epochs} epoch(s) run ({steps} steps); held-out perplexity {best}"


def _epochs(step: Callable, plan: _Plan, state, batches, solver, placement, position: _Position, save=None, early=None):
  """The passes of ``step(state, group)`` over the prepared groups of batches up to ``solver.epochs``, from
  ``position`` (the batches it has done of its epoch skipped); returns the last state and position.

  Each call's first non-finite step is read one call later (the device keeps a call queued) and before a save:
  a non-finite step raises ``FloatingPointError``. ``save(state, position)``: every ``solver.checkpoint_every``
  calls (None: never). ``early``: an :class:`_EarlyStopping`, told of each epoch's end, which may end the passes
  (the position returned then names the epochs run)."""
  epoch, done, steps, values, last = position
  values, last, calls = [values], [last], 0
  for epoch in range(epoch, solver.epochs):
    pending = []
    batch_iter = itertools.islice(iterate_batches(batches), done, None) if done else iterate_batches(batches)
    groups = _groups(plan, batch_iter, solver.steps_per_call, steps)
    if placement is not None:
      groups = map(functools.partial(_put_group, placement=placement), groups)
    if early is not None and early.stopped():  # a resumed fit that had stopped
      return state, _Position(len(early.history), 0, steps, np.zeros(0, np.float32), _host(last))
    for xs in _prefetch(groups):
      state, (ll, first) = step(state, xs)
      if len(pending) > 0:  # the previous call's: it has finished or is about to, while this one runs
        _check_finite(pending, epoch)
      pending.append((steps, first))
      values.append(ll)
      n = int(xs["clicks"].shape[0])
      steps, done, calls = steps + n, done + n, calls + 1
      if save is not None and calls % solver.checkpoint_every == 0:
        _check_finite(pending, epoch)
        save(state, _Position(epoch, done, steps, _host(values), _host(last)))
    _check_finite(pending, epoch)
    last, values, done = values, [], 0
    if early is not None and early.after_epoch(state, _host(last)):
      return state, _Position(epoch + 1, 0, steps, np.zeros(0, np.float32), _host(last))
  return state, _Position(solver.epochs, 0, steps, np.zeros(0, np.float32), _host(last))


def _host(values: list) -> np.ndarray:
  """The batch log-likelihoods (host or device arrays) in one ``float32`` array."""
  return np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in values]) if values else np.zeros(0, np.float32)


@functools.partial(jax.jit, donate_argnums=(0,))
def _plus_in_place(v: jax.Array, c: jax.Array) -> jax.Array:
  """``v + c``, written over ``v`` (donated: the fit's own arrays only)."""
  return v + c


def _document_logits(tables, vectors: dict, modules: dict, centre: dict, num_docs: int) -> dict:
  """Each table's logits over the ``num_docs`` documents, :math:`\\theta_d = \\mu + \\sum_p v_{r_p(d)}` (a
  feature table's :math:`f_\\phi(x_d)`), in one ``float32[D]`` array each, the centre added in place. ``vectors``
  is emptied once they are built (a full table's vector of ``D`` rows becomes its logits in place)."""
  out = table_logits({k: tables[k] for k in vectors}, vectors, num_docs)
  vectors.clear()  # what a full table's logits share with its vector is held by the logits alone now
  out = {k: _plus_in_place(v, centre[k]) if k in centre else v for k, v in out.items()}
  out.update(table_logits({k: tables[k] for k in modules}, modules, num_docs))
  return out


def _sparse_pays(tables, num_docs, batches) -> bool:
  """Whether the logit vectors have more than 16 times as many rows as the first batch has items."""
  first = next(iter(iterate_batches(batches)), None)
  items = int(np.asarray(first["clicks"]).size) if first is not None and "clicks" in first else 1
  return max((t.num_rows(num_docs) for t in tables.values()), default=0) > 16 * items


#: The shape of a minibatch fit's checkpoint meta: its fingerprint and where it is.
_META_SPEC = {
  "fingerprint": dict,
  "position": {
    "epoch": int,
    "batch": int,
    "steps": int,
    "values": [(float, type(None))],
    "last": [(float, type(None))],
  },
  # An early-stopped fit's: the held-out perplexity of each epoch done, the best epoch and its batch values.
  "early?": {"history": [(float, type(None))], "best_epoch": int, "best_last": [(float, type(None))]},
}
_RECOVERY = (
  "the fit sets this step aside and resumes from the newest readable one; remove the checkpoint_dir to start over"
)


def _tree_digest(tree) -> str:
  """A digest of a tree's leaves: their paths, shapes, dtypes and values."""
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  return digest(*(x for p, v in leaves for x in (jax.tree_util.keystr(p), np.asarray(v))))


def _optimizer_digest(optimizer: optax.GradientTransformation) -> str:
  """What ``optimizer`` makes of a fixed probe: three steps from fixed parameters with fixed gradients (rounded
  to 6 decimals), so that another optimiser, or other settings of it (a learning rate), give another digest."""
  params = jnp.linspace(-1.0, 1.0, 5, dtype=jnp.float32)
  grad = jnp.array([0.3, -0.2, 0.1, 0.5, -0.4], jnp.float32)
  try:
    opt_state, path = optimizer.init(params), []
    for i in range(3):
      updates, opt_state = optimizer.update(grad * (i + 1), opt_state, params)
      params = optax.apply_updates(params, updates)
      path.append(np.asarray(params, np.float64))
    return digest(np.round(np.stack(path), 6))
  except Exception:  # noqa: BLE001 (an optimiser that needs more than (grads, state, params): its state's shapes)
    return digest(str(jax.tree.map(lambda x: (np.shape(x), str(np.asarray(x).dtype)), optimizer.init(params))))


def _table_digest(t: ParameterTable) -> object:
  if isinstance(t, FeatureTable):
    return {"module": repr(t.module), "features": arrays_digest({"features": np.asarray(t.features)})}
  return repr(t)


def _fingerprint(
  m,
  solver,
  plan: _Plan,
  optimizer,
  batches,
  state,
  *,
  l2,
  prior,
  init,
  data: dict,
  validation: "Batches | Callable[[], Batches] | None" = None,
) -> dict:
  """What shapes a minibatch fit's steps: the model, the solver's settings that change them, the optimiser (by
  :func:`_optimizer_digest`), ``l2``, the prior, ``init``, the data (``D``, ``L``, ``S`` and the first batch's
  content) and the state's shapes; a checkpoint of a fit whose fingerprint differs is not resumed."""
  first = next(iter(iterate_batches(batches)))
  doc_ids, clicks, where, _ = _sessions(0, first, m)
  fp = {
    "model": {"name": m.name, "repr": repr(m)},
    "solver": {
      "epochs": int(solver.epochs),
      "sparse": bool(plan.sparse),
      "steps_per_call": int(solver.steps_per_call),
      "tables": {k: _table_digest(t) for k, t in sorted({**plan.tables, **plan.features}.items())},
      "devices": int(plan.batch_multiple),
      "key": None if solver.key is None else digest(np.asarray(jax.random.key_data(solver.key))),
    },
    "optimizer": _optimizer_digest(optimizer),
    "l2": float(l2),
    "prior": str(prior),
    "init": None if init is None else _tree_digest(init),
    "data": {**data, "first_batch": arrays_digest({"doc_ids": doc_ids, "clicks": clicks, "where": where})},
    "state": digest(
      [
        (jax.tree_util.keystr(p), list(np.shape(x)), str(x.dtype))
        for p, x in jax.tree_util.tree_leaves_with_path(state)
      ]
    ),
  }
  if validation is not None:  # an early-stopped fit's: its patience and held-out sessions (their first batch)
    held_out = next(iter(iterate_batches(validation)))
    v_ids, v_clicks, v_where, _ = _sessions(0, held_out, m)
    fp["early_stopping"] = {
      "patience": int(solver.patience),
      "validation": arrays_digest({"doc_ids": v_ids, "clicks": v_clicks, "where": v_where}),
    }
  fp["hash"] = digest(fp)
  return fp


def _checkpointed(step: Callable, plan: _Plan, state, batches, solver, placement, fp: dict, early=None):
  """:func:`_epochs` from the newest readable checkpoint in ``solver.checkpoint_dir`` of the fit with
  fingerprint ``fp`` (another fit's refused with a ``ValueError`` naming what differs; an unreadable one set
  aside), saving every ``solver.checkpoint_every`` calls and at the end."""
  ckpt = Checkpointer(solver.checkpoint_dir, meta_spec=_META_SPEC, recovery=_RECOVERY)
  saved: list[Optional[int]] = [None]

  if early is not None and early.best_params is None:  # saved with the state: a copy until an epoch ends
    early.best_params = jax.tree.map(jnp.copy, (state[0], state[1]))

  def save(state, pos: _Position) -> None:
    where = {"epoch": pos.epoch, "batch": pos.batch, "steps": pos.steps}
    meta = {"fingerprint": fp, "position": {**where, "values": pos.values.tolist(), "last": pos.last.tolist()}}
    tree = state
    if early is not None:
      tree = (state, early.best_params)
      meta["early"] = {
        "history": list(early.history),
        "best_epoch": int(early.best_epoch),
        "best_last": np.asarray(early.best_last, np.float32).tolist(),
      }
    ckpt.save(pos.steps, tree, meta)
    saved[0] = pos.steps

  try:
    restored = restore_checkpoint(
      ckpt,
      state if early is None else (state, early.best_params),
      fp,
      max_step=sys.maxsize,
      name="Minibatch",
      start_over=f"rm -r {ckpt.directory}",
      elsewhere="another checkpoint_dir",
    )
    position = _Position()
    if restored is not None:
      saved[0], state, meta = restored
      if early is not None:
        state, early.best_params = state
        e = meta["early"]
        early.history, early.best_epoch = [float(v) for v in e["history"]], int(e["best_epoch"])
        early.best_last = np.asarray(e["best_last"], np.float32)
      p = meta["position"]
      values, last = (np.asarray(p[k], np.float32) for k in ("values", "last"))
      position = _Position(int(p["epoch"]), int(p["batch"]), int(p["steps"]), values, last)
    state, position = _epochs(step, plan, state, batches, solver, placement, position, save, early)
    if saved[0] != position.steps:
      save(state, position)
  finally:
    ckpt.close()
  return state, position


def _held_out_perplexity(
  m: ClickModel, tables, num_docs: int, validation: "Batches | Callable[[], Batches]"
) -> Callable:
  """``score(state)``: the held-out conditional perplexity
  (:func:`~ultr_jax.simulation.evaluate_click_model_stream`) on ``validation`` (batches, or a function returning
  them) of the probabilities the state's logits imply (built without touching the state's buffers)."""

  def score(state) -> float:
    vectors, (bias, centre, modules) = state[0], state[1]
    per_doc = table_logits({k: tables[k] for k in vectors}, vectors, num_docs)
    per_doc = {k: v + centre[k] if k in centre else v for k, v in per_doc.items()}
    per_doc.update(table_logits({k: tables[k] for k in modules}, modules, num_docs))
    params = m.to_probabilities({**per_doc, **bias})
    held_out = validation() if callable(validation) else validation
    return evaluate_click_model_stream(m, params, held_out)["perplexity"]

  return score


# The default optimiser, one object: it is a static argument of the jitted steps, so a fresh ``optax.adam`` per fit
# would compile them again for every fit (a GradientTransformation holds only functions, no state).
_DEFAULT_OPTIMIZER = optax.adam(0.05)


def minibatch_fit(
  m: ClickModel, batches, solver, *, num_docs, l2: float, prior: str, init, validation=None
) -> ClickModelFit:
  """``solver``'s fit of ``m`` to ``batches``: a :class:`~ultr_jax.simulation.Minibatch` (its objective and options
  are stated there; ``fit.py`` imports this module, so the class is not named here). With ``validation`` (held-out
  batches, or a function returning them), more than one epoch and ``solver.patience`` not None, the fit stops
  early on their perplexity and returns its best epoch's parameters, its ``stop_reason`` saying so."""
  stopping = validation is not None and solver.patience is not None and solver.epochs > 1
  optimizer = _DEFAULT_OPTIMIZER if solver.optimizer is None else solver.optimizer
  sparse, list_size, num_sessions = solver.sparse, solver.list_size, solver.num_sessions
  tables = _tables(m, solver.tables)
  features = {k: t for k, t in tables.items() if t.from_features}
  tables = {k: t for k, t in tables.items() if not t.from_features}
  if sparse is None and num_docs is not None:
    sparse = _sparse_pays(tables, num_docs, batches)
  need_impressions = sparse is not False and l2 > 0
  if num_docs is None or list_size is None or num_sessions is None or need_impressions:
    counts = _count(m, batches, tables, list_size, need_impressions=need_impressions)
    num_docs = counts.num_docs if num_docs is None else int(num_docs)
    list_size = counts.list_size if list_size is None else int(list_size)
    num_sessions = counts.num_sessions if num_sessions is None else float(num_sessions)
  else:
    counts, num_docs, list_size, num_sessions = None, int(num_docs), int(list_size), float(num_sessions)
  num_rows = {k: t.num_rows(num_docs) for k, t in tables.items()}
  placement = None if solver.mesh is None else _placement(solver.mesh)
  devices = 1 if placement is None else placement.size
  padded = {k: -(-n // devices) * devices for k, n in num_rows.items()}  # the mesh's rows past num_rows: zeros
  sparse = _sparse_pays(tables, num_docs, batches) if sparse is None else sparse
  row_prior = None
  if sparse and l2 > 0:
    assert counts is not None and counts.impressions is not None  # counted: sparse was not False
    row_prior = _row_priors(tables, counts.impressions, padded, l2)
  counts = None  # the shown items per row: their float64 tables are let go here
  plan = _Plan(m, tables, padded, num_docs, list_size, bool(sparse), float(l2), row_prior, None, devices, features)
  plan = plan._replace(scratch=_shared(tables, lambda k: np.full(padded[k] + 1, -1, np.int32)) if sparse else None)
  del row_prior
  modules = _initial_modules(features, init, jax.random.key(0) if solver.key is None else solver.key)
  if placement is None:
    state, run = _initial_state(m, optimizer, tables, num_rows, list_size, init, prior, modules=modules), _steps
  else:
    start = (m, optimizer, tables, num_rows, padded, list_size, init, prior, placement, modules)
    state, run = _sharded_start(*start)
  feature_tables = tuple(sorted(features.items()))
  l2_bias = jnp.float32(l2 / max(num_sessions, 1.0))
  sparse_steps = plan.sparse
  step = lambda s, xs: run(m, optimizer, sparse_steps, s, xs, l2_bias, feature_tables)  # noqa: E731
  early = None
  if stopping:
    assert solver.patience is not None and validation is not None  # stopping needs them
    score = _held_out_perplexity(m, {**tables, **features}, num_docs, validation)
    early = _EarlyStopping(score, int(solver.patience))
  if solver.checkpoint_dir is None:
    state, position = _epochs(step, plan, state, batches, solver, placement, _Position(), early=early)
  else:
    data = {"num_docs": num_docs, "list_size": list_size, "num_sessions": float(num_sessions)}
    saved_tree = state if early is None else (state, (state[0], state[1]))  # the best epoch's saved with it
    held_out = validation if early is not None else None
    fp = _fingerprint(
      m, solver, plan, optimizer, batches, saved_tree, l2=l2, prior=prior, init=init, data=data, validation=held_out
    )
    saved_tree = None
    state, position = _checkpointed(step, plan, state, batches, solver, placement, fp, early)
  steps, last = position.steps, position.last
  plan = None  # the rows' priors and the host's work space
  vectors, (bias, centre, modules) = state[0], state[1]
  if early is not None:  # the best epoch's parameters, and its batch log-likelihoods
    assert early.best_params is not None  # at least one epoch ran
    vectors, (bias, centre, modules) = early.best_params
    last, early.best_params = early.best_last, None
  state = None  # the optimiser's state: let go before the per-document tables are built
  per_doc = _document_logits({**tables, **features}, vectors, modules, centre, num_docs)
  if placement is not None and num_docs % placement.size == 0:  # split over the devices as the tables were
    per_doc = jax.device_put(per_doc, placement.rows)
  logits = {**per_doc, **bias}
  logits = {k: logits[k] for k in sorted(logits)}
  mean_ll = float(np.mean(last)) if last.size else float("nan")
  return ClickModelFit(
    model=m,
    params=m.to_probabilities(logits),
    logits=logits,
    log_likelihood=mean_ll,
    grad_norm=float("nan"),
    iterations=steps,
    converged=False,
    feature_params=modules or None,
    stop_reason="" if early is None else early.stop_reason(solver.epochs, steps),
  )
