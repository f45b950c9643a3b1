r"""The MAP fit of an item click model (PBM, trust, UBM) on statistics partitioned by document, one partition in
memory at a time.

The objective of :func:`~ultr_jax.simulation.fit_click_model_from_statistics`,

.. math::
    J(\theta, \beta) = \frac{1}{S}\Bigl(\frac{\ell_2}{2}\bigl(\lVert\theta\rVert^2 + \lVert\beta\rVert^2\bigr)
      - \sum_r \sum_v n_{r,v} f_v(\theta_{d_r}, \beta; k_r)\Bigr),

separates over documents given the shared bias parameters :math:`\beta` (a record reads one document's
parameters :math:`\theta_d`). It is minimised by block-coordinate descent, streaming the partitions: per
partition, damped Newton steps on each document's parameters given :math:`\beta` (the Hessian in
:math:`\theta_d` is diagonal across documents, one Hessian-vector product gives it; a step is kept per document
only where that document's own objective decreases), and the gradient and Hessian in :math:`\beta` summed over
the partitions at the updated documents; then one Levenberg-damped Newton step on :math:`\beta`. Each pass reads
every partition once. A partition's tables hold the documents its records read alone (renumbered), so a pass
costs :math:`O(R)` for :math:`R` records, whatever the number of ids: a document that no record reads has the
prior's term only, and its optimum, the prior's centre, is set after the last pass. Everything goes through the
model's :meth:`~ultr_jax.simulation.ClickModel.statistics_log_likelihood`; a document's own log-likelihood comes from
its linearity in the counts (:math:`\sum_v n_{r,v}\,\partial \mathcal{L} / \partial n_{r,v}` per record, summed
per document).
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ultr_jax.simulation.click_models import ClickModel
from ultr_jax.simulation.click_models.statistics import PartitionedStatistics

__all__ = ["fit_partitioned_statistics"]


#: Passes in a row without a decrease of the objective (float rounding) after which the fit stops.
STALLED_PASSES = 3


def _bucket(n: int, minimum: int = 256) -> int:
  n = max(int(n), int(minimum))
  base = 1 << (n.bit_length() - 1)
  return next(b for b in (base, base * 5 // 4, base * 3 // 2, base * 7 // 4, 2 * base) if b >= n)


def _doc_objective(model, docs, bias, keys, counts, l2, num_local, centre):
  """Per-document objective ``[num_local]``: :math:`\\ell_2/2 \\lVert\\theta_d - \\mu\\rVert^2 - \\mathcal{L}_d`."""
  logits = {**docs, **bias}
  per_count = jax.grad(lambda c: model.statistics_log_likelihood(logits, keys, c))(counts)
  ll_record = jnp.sum(counts * per_count, axis=1)
  ll_doc = jax.ops.segment_sum(ll_record, keys[:, 0], num_segments=num_local)
  return 0.5 * l2 * sum((v - centre[k]) ** 2 for k, v in docs.items()) - ll_doc


@functools.partial(jax.jit, static_argnames=("model", "iters"))
def _doc_newton(model, docs, bias, keys, counts, l2, iters, centre):
  """``iters`` damped Newton steps on every document's parameters (one group at a time) given ``bias`` and the
  prior's ``centre`` (name -> scalar)."""
  num_local = next(iter(docs.values())).shape[0]

  def total(docs):
    return 0.5 * l2 * sum(jnp.sum((v - centre[k]) ** 2) for k, v in docs.items()) - model.statistics_log_likelihood(
      {**docs, **bias}, keys, counts
    )

  def step(carry, _):
    docs, value, scale = carry
    for name in sorted(docs):
      f = lambda x, name=name: total({**docs, name: x})
      grad, h = jax.jvp(jax.grad(f), (docs[name],), (jnp.ones_like(docs[name]),))  # h: the diagonal
      delta = jnp.clip(-grad / jnp.maximum(h, 1e-3 * jnp.maximum(l2, 1e-3)), -4.0, 4.0)
      trial = {**docs, name: docs[name] + scale * delta}
      new_value = _doc_objective(model, trial, bias, keys, counts, l2, num_local, centre)
      ok = new_value <= value
      docs = {**docs, name: jnp.where(ok, trial[name], docs[name])}
      value = jnp.where(ok, new_value, value)
      scale = jnp.where(ok, jnp.minimum(2.0 * scale, 1.0), 0.5 * scale)
    return (docs, value, scale), None

  value = _doc_objective(model, docs, bias, keys, counts, l2, num_local, centre)
  (docs, value, _), _ = jax.lax.scan(step, (docs, value, jnp.ones(num_local)), None, length=iters)
  doc_grad = jax.grad(total)(docs)
  return docs, jnp.sum(value), sum(jnp.sum(v**2) for v in doc_grad.values())


@functools.partial(jax.jit, static_argnames=("model",))
def _bias_terms(model, docs, bias, keys, counts):
  """Log-likelihood, its gradient and Hessian in the flattened bias parameters."""
  flat, unravel = ravel_pytree(bias)
  ll = lambda b: model.statistics_log_likelihood({**docs, **unravel(b)}, keys, counts)
  grad = jax.grad(ll)
  # Hessian-vector products with the basis vectors, 8 at a time: memory of 8 passes over the records, not of
  # one per bias parameter (the UBM has L (L + 1)).
  hess = jax.lax.map(lambda v: jax.jvp(grad, (flat,), (v,))[1], jnp.eye(flat.shape[0], dtype=flat.dtype), batch_size=8)
  return ll(flat), grad(flat), hess


class _Partitions:
  """The partitions' records as padded device arrays, their documents renumbered ``0..n-1`` in the order of
  ``seen`` (the sorted ids the partition's records read), all padded to one shape (one compiled program): kept in
  memory while they fit the budget and read again from their files otherwise."""

  def __init__(self, statistics: PartitionedStatistics, memory_budget_bytes: Optional[int]):
    self.statistics, parts = statistics, statistics.num_partitions
    sizes = [sum(_rows(path) for path in runs) for runs in statistics.runs]
    self.nonempty = [p for p in range(parts) if sizes[p]]
    self.rows = _bucket(max(sizes, default=0))
    self.width = self.rows  # a partition's records read at most as many documents as they are
    self.budget = memory_budget_bytes
    self.cache: dict = {}
    self.cached_bytes = 0

  def arrays(self, p: int):
    """``(keys, counts, seen)`` of partition ``p``."""
    if p in self.cache:
      return self.cache[p]
    stats = self.statistics.partition(p)
    keys, seen = _compact_documents(stats.keys)
    out = (
      jnp.asarray(_pad(keys, self.rows), jnp.int32),
      jnp.asarray(_pad(stats.counts, self.rows), jnp.float32),
      seen,
    )
    size = sum(int(x.nbytes) for x in out)
    if self.budget is None or self.cached_bytes + size <= self.budget:
      self.cache[p] = out
      self.cached_bytes += size
    return out


def _compact_documents(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _bias_step(flat, grad_ll, hess_ll, l2, max_step: float = 2.0):
  """A Levenberg-damped Newton step on :math:`\\ell_2/2 \\lVert\\beta\\rVert^2 - \\mathcal{L}(\\beta)`."""
  grad = l2 * flat - grad_ll
  hess = l2 * np.eye(flat.shape[0]) - hess_ll
  w, v = np.linalg.eigh(0.5 * (hess + hess.T))
  w = np.maximum(w, max(1e-8 * float(np.abs(w).max(initial=1.0)), 1e-12))
  step = -(v @ ((v.T @ grad) / w))
  norm = float(np.linalg.norm(step))
  return flat + (step * (max_step / norm) if norm > max_step else step), float(np.linalg.norm(grad))


def _centre(docs: dict, sums: Optional[dict], num_read: int, prior: str) -> dict:
  """The prior's centre per per-document table: 0 (``prior="zero"``), or (``"data_mean"``) the mean over the
  documents the records read (``sums`` of their logits over ``num_read`` documents; before the first pass, the
  mean of the start over all documents): with the unread documents at the centre, the table's mean over all
  ``D`` documents is the centre exactly when it is the read documents' mean."""
  if prior == "zero":
    return {k: 0.0 for k in docs}
  if prior != "data_mean":
    raise ValueError(f"prior must be 'data_mean' or 'zero', got {prior!r}")
  if sums is None or not num_read:
    return {k: float(np.mean(v, dtype=np.float64)) for k, v in docs.items()}
  return {k: sums[k] / num_read for k in docs}


def fit_partitioned_statistics(
  model: ClickModel,
  statistics: PartitionedStatistics,
  *,
  num_docs: int,
  l2: float = 1.0,
  max_iters: int = 200,
  tol: float = 1e-5,
  inner_iters: int = 4,
  init: Optional[dict] = None,
  memory_budget_bytes: Optional[int] = None,
  prior: str = "zero",
) -> tuple[dict, float, float, int]:
  r"""Minimises the MAP objective on partitioned item statistics (see the module docstring).

  .. math::
      \theta_d \leftarrow \theta_d - \frac{\partial_{\theta_d} J}{\partial^2_{\theta_d} J}\ \text{(per document,
      damped)}, \qquad \beta \leftarrow \beta - (\nabla^2_\beta J + \lambda I)^{-1} \nabla_\beta J,
      \qquad \mu_k \leftarrow \frac{1}{|R_D|} \sum_{d \in R_D} \theta^{(k)}_d

  With ``prior="data_mean"`` the prior on each per-document table :math:`\theta^{(k)}` is centred on
  :math:`\mu_k` (:func:`~ultr_jax.simulation.logit_prior`), the third block of the descent, exact given the
  documents: :math:`R_D` are the documents the records read, and the others, which sit at :math:`\mu_k` at the
  optimum, leave the mean over all :math:`D` equal to the mean over :math:`R_D`; with ``prior="zero"``
  :math:`\mu_k = 0` throughout. The documents outside :math:`R_D` are set to :math:`\mu_k` at the end.

  Args:
    model: an item click model (its statistics are per (document, rank[, state])).
    statistics: :class:`~ultr_jax.simulation.PartitionedStatistics` of its kind.
    num_docs: ``D``.
    l2: prior precision.
    max_iters: passes over the partitions.
    tol: stop when the gradient norm of :math:`J` is at most ``tol`` (or :math:`J` stops decreasing).
    inner_iters: Newton steps per document per pass.
    init: starting logits.
    memory_budget_bytes: partitions are kept in memory between passes while they fit this (None: all of
      them), and read from their files again otherwise.
    prior: ``"data_mean"`` or ``"zero"`` (:data:`~ultr_jax.simulation.LOGIT_PRIORS`).

  Returns:
    ``(logits, mean log-likelihood per session, gradient norm, passes)``.

  >>> from ultr_jax.simulation.click_models import get_click_model
  >>> from ultr_jax.simulation.click_models.statistics import ItemCounter
  >>> c = ItemCounter(memory_budget_bytes=0, num_partitions=2)
  >>> c.add(np.array([[0, 1], [1, 0]] * 50), np.array([[1.0, 0.0], [0.0, 0.0]] * 50), None)
  >>> logits, ll, gnorm, passes = fit_partitioned_statistics(get_click_model("pbm"), c.result(), num_docs=2)
  >>> print(gnorm < 1e-5, round(ll, 4))
  True -0.117
  """
  theta = model.init(num_docs=num_docs, list_size=statistics.list_size) if init is None else init
  per_doc = ("attraction",) + tuple(model.item_params)
  docs = {k: np.array(theta[k], np.float32) for k in per_doc}
  bias = {k: jnp.asarray(v, jnp.float32) for k, v in theta.items() if k not in per_doc}
  del theta  # the start's per-document tables: copied into ``docs`` (a table per copy of every id)
  n = max(float(statistics.num_sessions), 1.0)
  l2 = float(l2)
  prev, gnorm, passes, stalled = np.inf, np.inf, 0, 0
  source = _Partitions(statistics.compact(), memory_budget_bytes)
  read = np.zeros(num_docs, bool)  # the documents some record reads (each partition's, on the first pass)
  centre = _centre(docs, None, 0, prior)
  for passes in range(1, int(max_iters) + 1):
    obj, doc_sq, grad_ll, hess_ll = 0.0, 0.0, 0.0, 0.0
    mu = {k: jnp.float32(v) for k, v in centre.items()}
    sums, num_read = {k: 0.0 for k in per_doc}, 0
    for p in source.nonempty:
      keys, counts, seen = source.arrays(p)
      local = {k: jnp.asarray(_pad(v[seen], source.width, centre[k])) for k, v in docs.items()}
      local, value, sq = _doc_newton(model, local, bias, keys, counts, jnp.float32(l2), int(inner_iters), mu)
      for k in per_doc:
        docs[k][seen] = np.asarray(local[k])[: seen.size]
        sums[k] += float(np.sum(docs[k][seen], dtype=np.float64))
      if passes == 1:
        read[seen] = True
      num_read += seen.size
      _, g_b, h_b = _bias_terms(model, local, bias, keys, counts)
      obj += float(value)
      doc_sq += float(sq)
      grad_ll = grad_ll + np.asarray(g_b, np.float64)
      hess_ll = hess_ll + np.asarray(h_b, np.float64)
    flat, unravel = ravel_pytree(bias)
    flat = np.asarray(flat, np.float64)
    obj += 0.5 * l2 * float(flat @ flat)
    new_flat, bias_gnorm = _bias_step(flat, grad_ll, hess_ll, l2)
    gnorm = float(np.sqrt(doc_sq + bias_gnorm**2)) / n
    stalled = stalled + 1 if prev - obj <= 1e-12 * abs(obj) else 0
    if gnorm <= tol or stalled >= STALLED_PASSES:
      break
    bias = unravel(jnp.asarray(new_flat, jnp.float32))
    centre = _centre(docs, sums, num_read, prior)
    prev = obj
  centre = _centre(docs, sums, num_read, prior) if source.nonempty else centre
  for k in per_doc:  # documents that no record reads: at the centre (the read documents' mean), their optimum
    docs[k][~read] = centre[k]
  logits = {**{k: jnp.asarray(v) for k, v in docs.items()}, **bias}
  ll = 0.0
  for p in source.nonempty:
    keys, counts, seen = source.arrays(p)
    local = {k: (jnp.asarray(_pad(v[seen], source.width)) if k in per_doc else v) for k, v in logits.items()}
    ll += float(model.statistics_log_likelihood(local, keys, counts))
  return logits, ll / n, gnorm, passes
