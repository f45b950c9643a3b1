r"""The MAP fit of an item click model (PBM, trust, UBM) on statistics partitioned by document, one partition in
memory at a time.

The objective of :class:`~ultr_jax.simulation.Statistics`' fit,

.. math::
    J(\theta, \beta) = \frac{1}{S}\Bigl(\frac{\ell_2}{2}\bigl(\lVert\theta\rVert^2 + \lVert\beta\rVert^2\bigr)
      - \sum_r \sum_v n_{r,v} f_v(\theta_{d_r}, \beta; k_r)\Bigr),

separates over documents given the shared bias parameters :math:`\beta` (a record reads one document's
parameters :math:`\theta_d`), so its Hessian's document block :math:`H_{\theta\theta}` is block-diagonal, one
small block per document. It is minimised pass by pass, streaming the partitions: per partition, damped Newton
steps on each document's parameters given :math:`\beta` (one Hessian-vector product per per-document table gives
every document's block; a step is kept per document only where that document's own objective decreases); then
the partition's gradient and Hessian in :math:`\beta` with its documents eliminated,

.. math::
    g = \nabla_\beta J - H_{\beta\theta} H_{\theta\theta}^{-1} \nabla_\theta J, \qquad
    S = H_{\beta\beta} - H_{\beta\theta} H_{\theta\theta}^{-1} H_{\theta\beta},

(the Schur complement of the documents' block, in Hessian-vector products; a document whose log-likelihood is
not convex there is held instead), summed over the partitions; then one Newton step
:math:`\beta \leftarrow \beta - (S + \lambda\,\mathrm{diag}\,H_{\beta\beta})^{-1} g`, Levenberg-Marquardt damped
(:math:`\lambda` grows 10x after a pass that raised :math:`J`, whose step is taken back, and shrinks 3x after one
that did not) within a trust region. That is the Newton step of the joint
objective in :math:`\beta`, the documents following it, so the passes converge like Newton's method in
:math:`\beta` rather than like block-coordinate descent, which zig-zags between the documents' attraction and the
bias it trades off against (Schur-complement elimination of the per-point variables, as in bundle adjustment:
B. Triggs et al., *Bundle Adjustment -- A Modern Synthesis*, 1999, Sec. 6.1). Each pass reads every partition
once. A partition's tables hold the documents its records read alone (renumbered), so a pass costs :math:`O(R)`
for :math:`R` records, and memory holds the read documents' logits, whatever the number of ids: a document that
no record reads has the prior's term only, and its optimum, the prior's centre, is written into the full tables
after the last pass. Everything goes through the model's
:class:`~ultr_jax.simulation.StatisticsReduction`; a document's own log-likelihood comes from its
linearity in the counts (:math:`\sum_v n_{r,v}\,\partial \mathcal{L} / \partial n_{r,v}` per record, summed per
document).

With ``prior="data_mean"`` the prior on each per-document table :math:`\theta^{(k)}` is centred on :math:`\mu_k`
(:func:`~ultr_jax.simulation.logit_prior`), a third block of the descent, exact given the documents:
:math:`\mu_k \leftarrow \frac{1}{|R_D|} \sum_{d \in R_D} \theta^{(k)}_d` over the documents :math:`R_D` the records
read (the others sit at :math:`\mu_k` at the optimum, so the mean over all :math:`D` is the mean over :math:`R_D`);
with ``prior="zero"`` :math:`\mu_k = 0` throughout. With ``across_processes`` every process of a
``jax.distributed`` run holds the same statistics (partition files in a shared directory): each fits the documents
of its share of the partitions, the bias terms are summed over the processes each pass, and every process returns
the whole fit.
"""

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ultr_jax import _processes
from ultr_jax.simulation.click_models import BiasIndexed, ClickModel, statistics_reduction
from ultr_jax.simulation.click_models.statistics import PartitionedStatistics
from ultr_jax.simulation.fitting import ClickModelFit

__all__ = []


#: Newton steps per document per pass.
INNER_ITERS = 4
#: Passes in a row without a decrease of the objective (float rounding) after which the fit stops.
STALLED_PASSES = 3
#: The bias step's trust region (the norm of the change of the bias logits): its first radius and its largest; it
#: doubles after each accepted pass.
START_RADIUS, MAX_RADIUS = 2.0, 64.0
#: A pass whose objective exceeds the last accepted one by more than this (relative; float32 sums are noisier
#: below it) takes its bias step back; the fit stops after more than ``MAX_REJECTIONS`` in a row.
REJECT_RTOL, MAX_REJECTIONS = 1e-6, 6
#: The bias step's Levenberg-Marquardt damping (times the bias's own curvature): its start and floor. A reduced
#: Hessian summed in float32 over hundreds of millions of records can lose its smallest eigenvalues (the documents'
#: attraction and the examination trade off along a nearly flat direction); the damping keeps that direction's
#: step to the size the bias's own curvature allows, and relaxes 3x per accepted pass.
START_DAMPING, MIN_DAMPING = 1e-3, 1e-6


def padded_size(n: int, minimum: int = 256) -> int:
  """The smallest of :math:`2^k, 1.25 \\cdot 2^k, 1.5 \\cdot 2^k, 1.75 \\cdot 2^k` that is at least ``n`` (and
  ``minimum``): padded to it, a fit compiles once per bucket, at most a quarter more work.

  >>> [padded_size(n) for n in (1, 256, 257, 1000, 1025)]
  [256, 256, 320, 1024, 1280]
  """
  n = max(int(n), int(minimum))
  base = 1 << (n.bit_length() - 1)
  return next(b for b in (base, base * 5 // 4, base * 3 // 2, base * 7 // 4, 2 * base) if b >= n)


def _doc_objective(model, docs, bias, keys, counts, l2, num_local, centre):
  """Per-document objective ``[num_local]``: :math:`\\ell_2/2 \\lVert\\theta_d - \\mu\\rVert^2 - \\mathcal{L}_d`."""
  logits = {**docs, **bias}
  per_count = jax.grad(lambda c: statistics_reduction(model).statistics_log_likelihood(logits, keys, c))(counts)
  ll_record = jnp.sum(counts * per_count, axis=1)
  ll_doc = jax.ops.segment_sum(ll_record, keys[:, 0], num_segments=num_local)
  return 0.5 * l2 * sum((v - centre[k]) ** 2 for k, v in docs.items()) - ll_doc


@functools.partial(jax.jit, static_argnames=("model", "iters"))
def _doc_newton(model, docs, bias, keys, counts, l2, iters, centre):
  """``iters`` damped Newton steps on every document's parameters (one group at a time) given ``bias`` and the
  prior's ``centre`` (name -> scalar)."""
  num_local = next(iter(docs.values())).shape[0]

  def total(docs):
    return 0.5 * l2 * sum(jnp.sum((v - centre[k]) ** 2) for k, v in docs.items()) - statistics_reduction(
      model
    ).statistics_log_likelihood({**docs, **bias}, keys, counts)

  def step(carry, _):
    docs, value, scale = carry
    for name in sorted(docs):
      f = lambda x, name=name: total({**docs, name: x})
      grad, h = jax.jvp(jax.grad(f), (docs[name],), (jnp.ones_like(docs[name]),))  # h: the diagonal
      delta = jnp.clip(-grad / jnp.maximum(h, 1e-3 * jnp.maximum(l2, 1e-3)), -4.0, 4.0)
      trial = {**docs, name: docs[name] + scale * delta}
      new_value = _doc_objective(model, trial, bias, keys, counts, l2, num_local, centre)
      ok = new_value <= value + 1e-6 * jnp.abs(value)  # float32 noise: a converging step may not show a decrease
      docs = {**docs, name: jnp.where(ok, trial[name], docs[name])}
      value = jnp.where(ok, new_value, value)
      scale = jnp.where(ok, jnp.minimum(2.0 * scale, 1.0), 0.5 * scale)
    return (docs, value, scale), None

  value = _doc_objective(model, docs, bias, keys, counts, l2, num_local, centre)
  (docs, value, _), _ = jax.lax.scan(step, (docs, value, jnp.ones(num_local)), None, length=iters)
  doc_grad = jax.grad(total)(docs)
  return docs, value, sum(jnp.sum(v**2) for v in doc_grad.values())


def _negative_log_posterior(model, docs, bias, keys, counts, l2, centre):
  r""":math:`\ell_2/2 \lVert\theta - \mu\rVert^2 - \mathcal{L}(\theta, \beta)` of a partition (the bias's own prior
  term is added once, outside the partitions)."""
  prior = 0.5 * l2 * sum(jnp.sum((v - centre[k]) ** 2) for k, v in docs.items())
  return prior - statistics_reduction(model).statistics_log_likelihood({**docs, **bias}, keys, counts)


def _doc_blocks(grad_docs, docs):
  """Each document's Hessian block in its ``k`` parameters, ``[N, k, k]`` (documents are independent, so one
  Hessian-vector product with a table of ones per parameter gives every document's column at once)."""
  names = sorted(docs)
  cols = [jax.jvp(grad_docs, (docs,), ({k: jnp.ones_like(v) * (k == j) for k, v in docs.items()},))[1] for j in names]
  return jnp.stack([jnp.stack([c[i] for i in names], axis=-1) for c in cols], axis=-1)


def _solve_blocks(blocks, rhs, threshold):
  """``blocks^{-1} rhs`` per document (``[N, k, k]``, ``[N, k]``) over the blocks' eigenvalues above
  ``threshold`` (0 along the others: a document whose log-likelihood is not convex there is held, not eliminated,
  as its Schur complement would not be positive semi-definite)."""
  if blocks.shape[-1] == 1:
    h = blocks[..., 0]
    return jnp.where(h > threshold, rhs / jnp.where(h > threshold, h, 1.0), 0.0)
  w, v = jnp.linalg.eigh(blocks)
  inverse = jnp.where(w > threshold, 1.0 / jnp.where(w > threshold, w, 1.0), 0.0)
  return jnp.einsum("nij,nj->ni", v, jnp.einsum("nji,nj->ni", v, rhs) * inverse)


@functools.partial(jax.jit, static_argnames=("model",))
def _bias_terms_dense(model, docs, bias, keys, counts, l2, centre):
  r"""``(g_beta, g, S, h)``: the gradient :math:`\nabla_\beta J` in the flattened bias parameters :math:`\beta` of the
  partition's part of :math:`J`, and its gradient and Hessian with the documents eliminated (the Schur complement
  of their block), and :math:`h` the diagonal of :math:`H_{\beta\beta}` (the damping's scale):

  .. math::
      g = \nabla_\beta J - H_{\beta\theta} H_{\theta\theta}^{-1} \nabla_\theta J, \qquad
      S = H_{\beta\beta} - H_{\beta\theta} H_{\theta\theta}^{-1} H_{\theta\beta},

  :math:`H_{\theta\theta}` block-diagonal over documents. Summed over the partitions they give the Newton step
  of the joint objective in :math:`\beta` (the documents following it), not the step with the documents held.
  """
  names = sorted(docs)
  flat, unravel = ravel_pytree(bias)
  objective = lambda d, b: _negative_log_posterior(model, d, unravel(b), keys, counts, l2, centre)
  grad = jax.grad(objective, argnums=(0, 1))
  g_docs, g_bias = grad(docs, flat)
  blocks = _doc_blocks(lambda d: grad(d, flat)[0], docs)
  threshold = 2.0 * l2  # the data's own curvature above the prior's
  stack = lambda tree: jnp.stack([tree[k] for k in names], axis=-1)
  unstack = lambda x: {k: x[:, i] for i, k in enumerate(names)}
  zero_docs = jax.tree_util.tree_map(jnp.zeros_like, docs)

  def reduced_column(v):
    # H v for the direction (0, v): the documents' rows H_{theta beta} v and the bias's H_{beta beta} v; then the
    # documents' response -H_{theta theta}^{-1} H_{theta beta} v, and its coupling back into the bias.
    h_docs, h_bias = jax.jvp(grad, (docs, flat), (zero_docs, v))[1]
    response = unstack(-_solve_blocks(blocks, stack(h_docs), threshold))
    return h_bias + jax.jvp(lambda d: grad(d, flat)[1], (docs,), (response,))[1], jnp.vdot(v, h_bias)

  # Columns 8 at a time: memory of 8 passes over the records, not of one per bias parameter (the UBM has L (L + 1)).
  schur, h_diag = jax.lax.map(reduced_column, jnp.eye(flat.shape[0], dtype=flat.dtype), batch_size=8)
  shift = unstack(_solve_blocks(blocks, stack(g_docs), threshold))
  newton = g_bias - jax.jvp(lambda d: grad(d, flat)[1], (docs,), (shift,))[1]
  return g_bias, newton, schur, h_diag


def _bias_terms(model, docs, bias, keys, counts, l2, centre, max_run):
  """:func:`_bias_terms_dense`'s terms; by :func:`_bias_terms_sparse` where each record reads one bias parameter
  (:class:`~ultr_jax.simulation.BiasIndexed`) and a document has one parameter."""
  if len(docs) == 1 and isinstance(model, BiasIndexed):
    return _bias_terms_sparse(model, docs, bias, keys, counts, l2, centre, max_run)
  return _bias_terms_dense(model, docs, bias, keys, counts, l2, centre)


@functools.partial(jax.jit, static_argnames=("model",))
def _bias_terms_sparse(model, docs, bias, keys, counts, l2, centre, max_run):
  r""":func:`_bias_terms_dense`'s terms when record :math:`r` reads one bias parameter :math:`b_r` and document
  :math:`d_r` one parameter. Then :math:`H_{\beta\beta}` is diagonal, :math:`H_{\theta\beta}` has one entry per
  record, :math:`c_r = \partial^2 J / \partial\theta_{d_r} \partial\beta_{b_r}`, and with
  :math:`w_r = c_r / \sqrt{h_{d_r}}` (:math:`h_d` the document's curvature)

  .. math::
      S = H_{\beta\beta} - \sum_d v_d v_d^\top, \quad v_d = \sum_{r: d_r = d} w_r e_{b_r}, \qquad
      g = \nabla_\beta J - \sum_r c_r \frac{\partial_{\theta_{d_r}} J}{h_{d_r}} e_{b_r}:

  two Hessian-vector products over the records, whatever the number of bias parameters, and the pairs of records
  of one document (``keys`` sorted by document, at most ``max_run`` records each).
  """
  (name,) = docs
  flat, unravel = ravel_pytree(bias)
  size = flat.shape[0]
  doc_of, index = keys[:, 0], model.statistics_bias_index(bias, keys)
  per_record = keys.at[:, 0].set(jnp.arange(keys.shape[0], dtype=keys.dtype))  # each record its own copy

  def nll(t, b):
    return -statistics_reduction(model).statistics_log_likelihood({name: t, **unravel(b)}, per_record, counts)

  t = docs[name][doc_of]
  grad = jax.grad(nll, argnums=(0, 1))
  (_, g_bias), (cross, h_bias) = jax.jvp(grad, (t, flat), (jnp.zeros_like(t), jnp.ones_like(flat)))
  doc_objective = lambda d: _negative_log_posterior(model, d, bias, keys, counts, l2, centre)
  g_docs = jax.grad(doc_objective)(docs)
  h_docs = _doc_blocks(jax.grad(doc_objective), docs)[:, 0, 0]
  # 1 / h_d where the data's own curvature is above the prior's, else 0 (as _solve_blocks: the document held).
  scale = _solve_blocks(h_docs[:, None, None], jnp.ones_like(h_docs)[:, None], 2.0 * l2)[:, 0][doc_of]
  newton = g_bias - jax.ops.segment_sum(cross * g_docs[name][doc_of] * scale, index, num_segments=size)
  w = cross * jnp.sqrt(scale)
  return g_bias, newton, jnp.diag(h_bias) - _grouped_outer(w, doc_of, index, size, max_run), h_bias


def _grouped_outer(w, group, index, size: int, max_run):
  r""":math:`\sum_d v_d v_d^\top`, :math:`v_d = \sum_{r: g_r = d} w_r e_{i_r}` (``[size, size]``), for records sorted
  by ``group`` in runs of at most ``max_run``: the pairs :math:`(r, r + o)` of one group, offset by offset."""
  cell = lambda i, j: i * size + j
  first = jax.ops.segment_sum(w * w, cell(index, index), num_segments=size * size)
  rows = jnp.arange(w.shape[0])

  def offset(o, acc):
    pair = (jnp.roll(group, -o) == group) & (rows < w.shape[0] - o)
    prod = jnp.where(pair, w * jnp.roll(w, -o), 0.0)
    other = jnp.roll(index, -o)
    return (
      acc
      + jax.ops.segment_sum(prod, cell(index, other), num_segments=size * size)
      + jax.ops.segment_sum(prod, cell(other, index), num_segments=size * size)
    )

  return jax.lax.fori_loop(1, max_run, offset, first).reshape(size, size)


class _Partitions:
  """The partitions' records as padded device arrays, their documents renumbered ``0..n-1`` in the order of
  ``seen`` (the sorted ids the partition's records read), all padded to one shape (one compiled program): kept in
  memory while they fit the budget and read again from their files otherwise."""

  def __init__(self, statistics: PartitionedStatistics, memory_budget_bytes: Optional[int]):
    self.statistics, parts = statistics, statistics.num_partitions
    sizes = [sum(_rows(path) for path in runs) for runs in statistics.runs]
    self.nonempty = [p for p in range(parts) if sizes[p]]
    self.rows = padded_size(max(sizes, default=0))
    self.width = self.rows  # a partition's records read at most as many documents as they are
    self.budget = memory_budget_bytes
    self.cache: dict = {}
    self.cached_bytes = 0

  def arrays(self, p: int):
    """``(keys, counts, seen, max_run)`` of partition ``p``: its records sorted by document, ``max_run`` the most
    records of one document."""
    if p in self.cache:
      return self.cache[p]
    stats = self.statistics.partition(p)
    keys, counts = stats.keys, stats.counts
    if keys.shape[0] > 1 and np.any(keys[1:, 0] < keys[:-1, 0]):
      order = np.argsort(keys[:, 0], kind="stable")
      keys, counts = keys[order], counts[order]
    keys, seen = compact_documents(keys)
    starts = np.flatnonzero(np.r_[True, keys[1:, 0] != keys[:-1, 0]]) if keys.shape[0] else np.zeros(0, np.int64)
    max_run = int(np.max(np.diff(np.r_[starts, keys.shape[0]]), initial=1))
    out = (
      jnp.asarray(_pad(keys, self.rows), jnp.int32),
      jnp.asarray(_pad(counts, self.rows), jnp.float32),
      seen,
      max_run,
    )
    size = sum(int(x.nbytes) for x in out[:3])
    if self.budget is None or self.cached_bytes + size <= self.budget:
      self.cache[p] = out
      self.cached_bytes += size
    return out


def compact_documents(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """``(keys renumbered, seen)``: ``seen`` the sorted ids of the documents that records ``keys [R, K]`` (column 0:
  the document) read, each record's document replaced by its index in ``seen``."""
  docs = np.asarray(keys[:, 0])
  sorted_docs = bool(docs.size < 2 or np.all(docs[1:] >= docs[:-1]))
  seen = docs[np.r_[True, docs[1:] != docs[:-1]]] if sorted_docs and docs.size else np.unique(docs)
  out = np.array(keys, copy=True)
  out[:, 0] = np.searchsorted(seen, docs)
  return out, seen


def _rows(path: str) -> int:
  """Records in a run file (read from its header only)."""
  with np.load(path, mmap_mode="r") as z:
    return int(z["counts"].shape[0])


def _pad(x: np.ndarray, rows: int, value: float = 0.0) -> np.ndarray:
  return np.concatenate([x, np.full((rows - x.shape[0],) + x.shape[1:], value, x.dtype)]) if rows > x.shape[0] else x


def _bias_step(flat, terms: "_PassTerms", l2, damping: float):
  """The Levenberg-Marquardt step on :math:`\\ell_2/2 \\lVert\\beta\\rVert^2` plus the partitions' terms: the
  reduced Newton system (:func:`_bias_terms`: the reduced gradient and Hessian summed) damped by ``damping`` times
  the bias's own curvature, :math:`(S + \\lambda\\,\\mathrm{diag}(H_{\\beta\\beta}))\\,\\delta = -g` (large
  :math:`\\lambda`: the step with the documents held), eigenvalues floored (a positive-definite step)."""
  grad = l2 * flat + terms.grad_terms
  hess = l2 * np.eye(flat.shape[0]) + terms.hess_terms + damping * np.diag(l2 + np.abs(terms.hess_diag))
  w, v = np.linalg.eigh(0.5 * (hess + hess.T))
  w = np.maximum(w, max(1e-8 * float(np.abs(w).max(initial=1.0)), 1e-12))
  return -(v @ ((v.T @ grad) / w))


def _within(step, radius: float):
  """``step`` shortened to norm ``radius`` where it is longer (a trust region)."""
  norm = float(np.linalg.norm(step))
  return step * (radius / norm) if norm > radius else step


def _centre(start: Optional[dict], per_doc: tuple, sums: Optional[dict], num_read: float, prior: str) -> dict:
  """The prior's centre per per-document table: 0 (``prior="zero"``), or (``"data_mean"``) the mean over the
  documents the records read (``sums`` of their logits over ``num_read`` documents; before the first pass, the
  mean of the ``start`` over all documents): with the unread documents at the centre, the table's mean over all
  ``D`` documents is the centre exactly when it is the read documents' mean."""
  if prior == "zero":
    return {k: 0.0 for k in per_doc}
  if prior != "data_mean":
    raise ValueError(f"prior must be 'data_mean' or 'zero', got {prior!r}")
  if sums is None or not num_read:
    assert start is not None  # given before the first pass
    return {k: float(np.mean(np.asarray(start[k]), dtype=np.float64)) for k in per_doc}
  return {k: sums[k] / num_read for k in per_doc}


def _start_rows(start: dict, per_doc: tuple, seen: np.ndarray) -> dict:
  """The start's rows of the documents ``seen`` (a table of one row: the start of every document; ids past a
  table's end start at 0)."""
  out = {}
  for k in per_doc:
    v = np.asarray(start[k], np.float32)
    if v.shape[0] == 1:
      out[k] = np.full(seen.size, v[0], np.float32)
    else:
      out[k] = np.zeros(seen.size, np.float32)
      inside = seen < v.shape[0]
      out[k][inside] = v[seen[inside]]
  return out


@functools.partial(jax.jit, static_argnums=0)
def _full(num_docs: int, value):
  return jnp.full((num_docs,), value, jnp.float32)


@functools.partial(jax.jit, donate_argnums=0)
def _scatter(table, rows, values):
  """``table`` with ``rows`` set to ``values`` (rows past its end dropped: the padding), in place."""
  return table.at[rows].set(values, mode="drop")


@dataclasses.dataclass
class _PassTerms:
  """One pass's sums over the partitions: the objective, the documents' squared gradient norm, the bias's gradient,
  reduced gradient, reduced Hessian and its own Hessian's diagonal (:func:`_bias_terms`), and per per-document table the sum of the read
  documents' logits and their number (the ``data_mean`` prior's centre)."""

  objective: float
  doc_sq: float
  grad_bias: np.ndarray
  grad_terms: np.ndarray
  hess_terms: np.ndarray
  hess_diag: np.ndarray
  sums: np.ndarray
  num_read: float

  def across_processes(self) -> "_PassTerms":
    """The sums over every process's partitions (one all-reduce of the packed terms)."""
    parts = [np.atleast_1d(np.asarray(getattr(self, f.name), np.float64)) for f in dataclasses.fields(self)]
    total = _processes.process_sum(np.concatenate([x.ravel() for x in parts]))
    out, i = [], 0
    for x in parts:
      out.append(total[i : i + x.size].reshape(x.shape))
      i += x.size
    objective, doc_sq, grad_bias, grad_terms, hess_terms, hess_diag, sums, num_read = out
    scalar = lambda v: float(v[0])  # noqa: E731
    return _PassTerms(
      scalar(objective), scalar(doc_sq), grad_bias, grad_terms, hess_terms, hess_diag, sums, scalar(num_read)
    )


def _pass(model, source, mine, tables, bias, l2, inner_iters, centre, per_doc) -> _PassTerms:
  """Newton steps on the documents of the partitions ``mine`` (``tables`` updated in place), and the pass's terms
  over them."""
  mu = {k: jnp.float32(v) for k, v in centre.items()}
  num_bias = ravel_pytree(bias)[0].shape[0]
  terms = _PassTerms(
    0.0,
    0.0,
    np.zeros(num_bias),
    np.zeros(num_bias),
    np.zeros((num_bias, num_bias)),
    np.zeros(num_bias),
    np.zeros(len(per_doc)),
    0.0,
  )
  for p in mine:
    keys, counts, seen, max_run = source.arrays(p)
    local = {k: jnp.asarray(_pad(v, source.width, centre[k])) for k, v in tables[p].items()}
    local, value, sq = _doc_newton(model, local, bias, keys, counts, jnp.float32(l2), int(inner_iters), mu)
    tables[p] = {k: np.asarray(local[k])[: seen.size] for k in per_doc}
    g_true, g_b, h_b, h_d = _bias_terms(model, local, bias, keys, counts, jnp.float32(l2), mu, max_run)
    terms.objective += float(np.sum(np.asarray(value), dtype=np.float64))
    terms.doc_sq += float(sq)
    terms.grad_bias += np.asarray(g_true, np.float64)
    terms.grad_terms += np.asarray(g_b, np.float64)
    terms.hess_terms += np.asarray(h_b, np.float64)
    terms.hess_diag += np.asarray(h_d, np.float64)
    terms.sums += [float(np.sum(tables[p][k], dtype=np.float64)) for k in per_doc]
    terms.num_read += seen.size
  return terms


def _full_tables(source, mine, tables, per_doc, centre, num_docs, across_processes: bool) -> dict:
  """The per-document tables over all ``num_docs`` ids: every document at the ``centre`` (the optimum of one
  that no record reads), the read ones' logits scattered in place, partition by partition (with several
  processes, every process's partitions, gathered)."""
  docs = {k: _full(int(num_docs), jnp.float32(centre[k])) for k in per_doc}

  def put(seen, values):
    rows = jnp.asarray(_pad(seen, source.width, num_docs), jnp.int32)
    for i, k in enumerate(per_doc):
      docs[k] = _scatter(docs[k], rows, jnp.asarray(_pad(values[:, i], source.width)))

  if not across_processes:
    for p in mine:
      put(source.arrays(p)[2], np.stack([tables.pop(p)[k] for k in per_doc], axis=1))
    return docs
  seen = [source.arrays(p)[2] for p in mine]
  values = [np.stack([tables.pop(p)[k] for k in per_doc], axis=1) for p in mine]
  empty = (np.zeros(0, np.int64), np.zeros((0, len(per_doc)), np.float32))
  ids, vals = (np.concatenate(x) if x else e for x, e in zip((seen, values), empty))
  for ids_p, vals_p in _processes.allgather_rows(ids.astype(np.int64), vals):
    for i in range(0, ids_p.shape[0], source.width):
      put(ids_p[i : i + source.width], vals_p[i : i + source.width])
  return docs


def newton_fit(
  model: ClickModel,
  statistics: PartitionedStatistics,
  *,
  num_docs,
  l2,
  max_iters,
  tol,
  init,
  budget,
  prior,
  across_processes,
) -> ClickModelFit:
  """:class:`~ultr_jax.simulation.Statistics`' fit on partitioned statistics (the module docstring): ``max_iters``
  passes at most, ``budget`` the bytes of partitions kept in memory between passes (None: all)."""
  per_doc = ("attraction",) + tuple(model.item_params)
  start = model.init(num_docs=1, list_size=statistics.list_size) if init is None else init
  start = {k: np.asarray(v, np.float32) for k, v in start.items()} if init is not None else start
  bias = {k: jnp.asarray(v, jnp.float32) for k, v in start.items() if k not in per_doc}
  n = max(float(statistics.num_sessions), 1.0)
  l2 = float(l2)
  prev, gnorm, passes, stalled, rejections = np.inf, np.inf, 0, 0, 0
  radius, damping = START_RADIUS, START_DAMPING
  source = _Partitions(statistics.compact(), budget)
  across_processes = bool(across_processes) and jax.process_count() > 1
  mine = source.nonempty[jax.process_index() :: jax.process_count()] if across_processes else source.nonempty
  # The read documents' logits, partition by partition (partitions hold disjoint documents): memory of the
  # documents the records read, not of every id.
  tables = {p: _start_rows(start, per_doc, source.arrays(p)[2]) for p in mine}
  centre = _centre(start, per_doc, None, 0, prior)
  del start
  for passes in range(1, int(max_iters) + 1):
    terms = _pass(model, source, mine, tables, bias, l2, INNER_ITERS, centre, per_doc)
    terms = terms.across_processes() if across_processes else terms
    flat, unravel = ravel_pytree(bias)
    flat = np.asarray(flat, np.float64)
    obj = terms.objective + 0.5 * l2 * float(flat @ flat)
    bias_gnorm = float(np.linalg.norm(l2 * flat + terms.grad_bias))
    gnorm = float(np.sqrt(terms.doc_sq + bias_gnorm**2)) / n
    rejected = obj > prev + REJECT_RTOL * abs(prev)
    stalled = stalled + 1 if not rejected and prev - obj <= 1e-12 * abs(obj) else 0
    rejections = rejections + 1 if rejected else 0
    centre = _centre(None, per_doc, dict(zip(per_doc, terms.sums)), terms.num_read, prior) if terms.num_read else centre
    if gnorm <= tol or stalled >= STALLED_PASSES or rejections > MAX_REJECTIONS:
      break
    if not rejected:  # accept: a damped Newton step from here, the damping relaxed, the trust region grown
      accepted, kept, prev = flat, terms, obj
      damping = max(damping / 3.0, MIN_DAMPING)
      radius = min(2.0 * radius, MAX_RADIUS) if passes > 1 else radius
    else:  # reject: back to the last accepted bias, a step damped 10x more (towards the documents-held step)
      damping *= 10.0
    bias = unravel(jnp.asarray(accepted + _within(_bias_step(accepted, kept, l2, damping), radius), jnp.float32))
  ll = 0.0
  for p in mine:
    keys, counts = source.arrays(p)[:2]
    local = {k: jnp.asarray(_pad(v, source.width)) for k, v in tables[p].items()}
    ll += float(statistics_reduction(model).statistics_log_likelihood({**local, **bias}, keys, counts))
  ll = float(_processes.process_sum(np.asarray([ll]))[0]) if across_processes else ll
  docs = _full_tables(source, mine, tables, per_doc, centre, num_docs, across_processes)
  theta = {**docs, **bias}
  return ClickModelFit(model, model.to_probabilities(theta), theta, ll / n, gnorm, passes, bool(gnorm <= tol))
