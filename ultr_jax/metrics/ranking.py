r"""Ranking metrics on ``[..., list_size]`` with rax's calling convention.

``fn(scores, labels, *, where=None, topn=None, ..., reduce_fn=jnp.mean)``:
the metric of every list (``reduce_fn=None``: per list, ``[...]``, zero for
lists that do not count) or its reduction over the lists that count.

**Conventions** (the ULTRA / TF-Ranking / identifiability-repo ones):

* gain :math:`2^y - 1`, discount :math:`1/\log_2(1 + \mathrm{rank})`, IDCG
  from the same list's labels (all its valid items);
* ties in the scores keep the order of appearance (rax's ``ranks``; pass
  ``key`` for random tie-breaking); masked items are never ranked;
* a list with a NaN score on a valid item scores NaN (so does any mean over
  it): a diverged model never looks like a valid ranking (rax ranks NaN
  scores as if they were some number);
* a list whose IDCG is 0 (no relevant item) scores 0 and **is averaged in**
  by default; ``drop_no_relevant=True`` leaves such lists out of the
  reduction (SIF's resolution); an all-masked list never counts (rax's
  ``safe_reduce``).
"""

from typing import Literal, Optional, Sequence, Union, overload

import jax
import jax.numpy as jnp
import numpy as np
import rax

from ultr_jax.data.dataset import check_labels
from ultr_jax.types import Array, ReduceFn

__all__ = ["ndcg", "dcg", "err", "mrr", "average_precision", "precision", "mcc", "ranking_metrics", "query_mask"]


def query_mask(labels: Array, *, where: Optional[Array] = None, drop_no_relevant: bool = False) -> Array:
  r"""Which lists count in a metric's reduction.

  .. math::
      m_q = \bigl(\exists i: w_{qi}\bigr) \wedge
            \bigl(\neg\text{drop} \vee \exists i: w_{qi} \wedge y_{qi} > 0\bigr)

  Args:
    labels: ``[..., L]`` graded relevance.
    where: ``bool[..., L]``.
    drop_no_relevant: leave out lists without a relevant (``y > 0``) item.

  Returns:
    ``bool[...]``.

  >>> print(query_mask(jnp.array([[0., 0.], [1., 0.]]), drop_no_relevant=True))
  [False  True]
  """
  labels = jnp.asarray(labels)
  if where is None:
    where = jnp.ones(labels.shape, bool)
  mask = jnp.any(where, axis=-1)
  if drop_no_relevant:
    mask = mask & jnp.any(where & (labels > 0), axis=-1)
  return mask


def _nan_lists(scores, where):
  """``bool[...]``: lists with a NaN score on a valid item (their metric is NaN, never a ranking's value)."""
  nan = jnp.isnan(jnp.asarray(scores))
  if where is not None:
    nan = nan & jnp.asarray(where, bool)
  return jnp.any(nan, axis=-1)


def _check_labels(labels, where) -> None:
  """Graded labels finite and >= 0 (:func:`ultr_jax.data.check_labels`) when they are concrete; under ``jit`` the
  values are unknown here (the dataset checked them where they entered)."""
  try:
    y, w = np.asarray(labels), None if where is None else np.asarray(where)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return
  check_labels(y, w, what="metric labels")


def _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores):
  mask = query_mask(labels, where=where, drop_no_relevant=drop_no_relevant)
  values = jnp.where(_nan_lists(scores, where), jnp.nan, values)
  return rax.utils.safe_reduce(values, where=mask, reduce_fn=reduce_fn)


def ndcg(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  topn: Optional[int] = None,
  weights: Optional[Array] = None,
  key: Optional[Array] = None,
  drop_no_relevant: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""nDCG@k through :func:`rax.ndcg_metric` (Järvelin & Kekäläinen 2002).

  .. math::
      \mathrm{nDCG@k} = \frac{\sum_{i:\,\mathrm{rank}_i \le k} (2^{y_i} - 1)/\log_2(1 + \mathrm{rank}_i)}
                             {\mathrm{IDCG@k}}, \quad 0 \text{ if IDCG} = 0

  Args:
    scores: ``[..., L]``.
    labels: ``[..., L]`` graded relevance.
    where: ``bool[..., L]``.
    topn: cut-off ``k`` (None: the whole list).
    weights: optional per-item weights (rax).
    key: optional key for random tie-breaking.
    drop_no_relevant: leave lists with IDCG = 0 out of the reduction.
    reduce_fn: ``jnp.mean`` (default), ``jnp.sum`` or None (per list).

  Returns:
    scalar, or ``[...]`` with ``reduce_fn=None``.

  For example, scores ``[3, 2, 1, 0]`` and labels ``[0, 1, 0, 1]``:

  >>> print(round(float(ndcg(jnp.array([3., 2., 1., 0.]), jnp.array([0., 1., 0., 1.]), topn=3)), 5))
  0.38685
  >>> print(ndcg(jnp.array([[3., 2.], [jnp.nan, 0.]]), jnp.array([[1., 0.], [1., 0.]]), reduce_fn=None))
  [ 1. nan]
  """
  _check_labels(labels, where)  # before any work: names the list and position
  values = rax.ndcg_metric(scores, labels, where=where, topn=topn, weights=weights, key=key, reduce_fn=None)
  return _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores)


def dcg(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  topn: Optional[int] = None,
  weights: Optional[Array] = None,
  key: Optional[Array] = None,
  drop_no_relevant: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Unnormalised DCG@k through :func:`rax.dcg_metric`, the metric of Baidu-ULTR's expert annotations.

  .. math::
      \mathrm{DCG@k} = \sum_{i:\,\mathrm{rank}_i \le k} \frac{2^{y_i} - 1}{\log_2(1 + \mathrm{rank}_i)}

  Hager et al. (SIGIR 2024) and Baidu-ULTR's baselines report DCG@1/3/5/10 on
  the 0-4 annotations; unlike nDCG its scale depends on the labels, so compare
  it only on the same test set. Arguments as :func:`ndcg`.

  Args:
    scores: ``[..., L]`` the ranker's scores.
    labels: ``[..., L]`` graded relevance labels (Baidu-ULTR's 0-4 annotations).
    where: ``bool[..., L]`` the valid items (None: all).
    topn: the cut-off ``k`` (None: the whole list).
    weights: optional ``[..., L]`` per-item weights (rax's convention).
    key: an optional PRNG key that breaks ties in the scores at random (None: by position).
    drop_no_relevant: leave the lists without a relevant item out of the reduction.
    reduce_fn: ``jnp.mean`` (default), ``jnp.sum``, or None for the per-list values ``[...]``.

  Returns:
    A scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> print(round(float(dcg(jnp.array([3., 2., 1., 0.]), jnp.array([0., 1., 0., 2.]), topn=3)), 5))
  0.63093
  >>> print(round(float(dcg(jnp.array([3., 2., 1., 0.]), jnp.array([0., 1., 0., 2.]))), 4))  # + 3 / log2(5)
  1.923
  """
  _check_labels(labels, where)  # before any work: names the list and position
  values = rax.dcg_metric(scores, labels, where=where, topn=topn, weights=weights, key=key, reduce_fn=None)
  return _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores)


def precision(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  topn: Optional[int] = None,
  relevance_threshold: float = 1.0,
  key: Optional[Array] = None,
  drop_no_relevant: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Precision@k through :func:`rax.precision_metric`: the share of relevant items among the top k.

  .. math::
      \mathrm{P@k} = \frac{|\{i: \mathrm{rank}_i \le k,\ y_i \ge \tau\}|}{\min(k, n)}

  with :math:`n` the list's valid items (rax's convention for a list shorter
  than k). Arguments as :func:`average_precision`.

  Args:
    scores: ``[..., L]`` the ranker's scores.
    labels: ``[..., L]`` graded relevance labels.
    where: ``bool[..., L]`` the valid items (None: all).
    topn: the cut-off ``k`` (None: the whole list).
    relevance_threshold: the grade :math:`\tau` from which an item counts as relevant.
    key: an optional PRNG key that breaks ties in the scores at random (None: by position).
    drop_no_relevant: leave the lists without a relevant item out of the reduction.
    reduce_fn: ``jnp.mean`` (default), ``jnp.sum``, or None for the per-list values ``[...]``.

  Returns:
    A scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> print(round(float(precision(jnp.array([4., 3., 2., 1.]), jnp.array([1., 0., 1., 0.]), topn=3)), 4))
  0.6667
  """
  _check_labels(labels, where)  # before any work: names the list and position
  binary = (jnp.asarray(labels) >= relevance_threshold).astype(jnp.result_type(float))
  values = rax.precision_metric(scores, binary, where=where, topn=topn, key=key, reduce_fn=None)
  return _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores)


def err(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  topn: Optional[int] = None,
  max_label: float = 4.0,
  key: Optional[Array] = None,
  drop_no_relevant: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Expected reciprocal rank (Chapelle et al. CIKM'09).

  .. math::
      \mathrm{ERR@k} = \sum_{r=1}^{k} \frac{1}{r}\, R_{(r)} \prod_{j<r} (1 - R_{(j)}),
      \qquad R(y) = \frac{2^{y} - 1}{2^{y_{\max}}}

  with :math:`(r)` the item at rank :math:`r`. Vectorised: items are sorted
  by rank once and the product is an exclusive cumulative sum of
  :math:`\log(1 - R)`. ``max_label = 4`` as in ULTRA and TF-Ranking.

  Args:
    scores, labels, where, topn, key, drop_no_relevant, reduce_fn: as :func:`ndcg`.
    max_label: :math:`y_{\max}`; labels are clipped to it.

  Returns:
    scalar, or ``[...]`` with ``reduce_fn=None``.

  >>> print(float(err(jnp.array([2., 1.]), jnp.array([1., 2.]), max_label=2)))
  0.53125
  """
  scores = jnp.asarray(scores)
  _check_labels(labels, where)  # before any work: names the list and position
  labels = jnp.asarray(labels, jnp.result_type(float))
  if where is None:
    where = jnp.ones(scores.shape, bool)
  ranks = rax.utils.ranks(scores, where=where, key=key)  # 1-based, masked items last
  order = jnp.argsort(ranks, axis=-1)
  take = lambda x: jnp.take_along_axis(x, order, axis=-1)
  y = jnp.clip(labels, 0.0, max_label)
  r = jnp.where(where, (jnp.exp2(y) - 1.0) / (2.0**max_label), 0.0)
  r_sorted = take(r)
  valid = take(where)
  if topn is not None:
    valid = valid & (jnp.arange(r.shape[-1]) < topn)
  r_sorted = jnp.where(valid, r_sorted, 0.0)
  log_keep = jnp.log1p(-r_sorted)  # R < 1 always, finite
  csum = jnp.cumsum(log_keep, axis=-1)
  exclusive = csum - log_keep
  rank = jnp.arange(1, r.shape[-1] + 1, dtype=r.dtype)
  values = jnp.sum(r_sorted / rank * jnp.exp(exclusive), axis=-1)
  return _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores)


def mrr(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  topn: Optional[int] = None,
  relevance_threshold: float = 1.0,
  key: Optional[Array] = None,
  drop_no_relevant: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Mean reciprocal rank through :func:`rax.mrr_metric`.

  .. math::
      \mathrm{RR} = \max_{i:\, y_i \ge \tau,\ \mathrm{rank}_i \le k} 1/\mathrm{rank}_i \quad (0 \text{ if none})

  Args:
    scores, labels, where, topn, key, drop_no_relevant, reduce_fn: as :func:`ndcg`.
    relevance_threshold: :math:`\tau`, the smallest relevant grade.

  Returns:
    scalar, or ``[...]`` with ``reduce_fn=None``.

  >>> print(float(mrr(jnp.array([3., 2., 1.]), jnp.array([0., 0., 2.]))))
  0.3333333432674408
  """
  _check_labels(labels, where)  # before any work: names the list and position
  binary = (jnp.asarray(labels) >= relevance_threshold).astype(jnp.result_type(float))
  values = rax.mrr_metric(scores, binary, where=where, topn=topn, key=key, reduce_fn=None)
  return _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores)


def average_precision(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  topn: Optional[int] = None,
  relevance_threshold: float = 1.0,
  key: Optional[Array] = None,
  drop_no_relevant: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Average precision (MAP when averaged) through :func:`rax.ap_metric`.

  .. math::
      \mathrm{AP} = \frac{1}{|\{i: y_i \ge \tau\}|}
                    \sum_{i:\, y_i \ge \tau} \mathrm{Prec@rank}_i \quad (0 \text{ if none})

  Args:
    scores, labels, where, topn, key, drop_no_relevant, reduce_fn: as :func:`ndcg`.
    relevance_threshold: :math:`\tau` (CLD binarises at grade 2 or 3).

  Returns:
    scalar, or ``[...]`` with ``reduce_fn=None``.

  For example, the ranked binary list ``[1, 0, 1, 0]`` has AP (1 + 2/3)/2:

  >>> print(round(float(average_precision(jnp.array([4., 3., 2., 1.]), jnp.array([1., 0., 1., 0.]))), 4))
  0.8333
  """
  _check_labels(labels, where)  # before any work: names the list and position
  binary = (jnp.asarray(labels) >= relevance_threshold).astype(jnp.result_type(float))
  values = rax.ap_metric(scores, binary, where=where, topn=topn, key=key, reduce_fn=None)
  return _reduce(values, labels, where, drop_no_relevant, reduce_fn, scores)


def mcc(
  predicted: Array,
  true: Array,
  *,
  where: Optional[Array] = None,
  per_list: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Pearson correlation of true and predicted relevance (the identifiability paper's "MCC").

  .. math::
      \mathrm{MCC} = \frac{\sum_i (r_i - \bar r)(\hat r_i - \bar{\hat r})}
                          {\sqrt{\sum_i (r_i - \bar r)^2}\sqrt{\sum_i (\hat r_i - \bar{\hat r})^2}}

  over every valid item of the batch (``per_list=False``, the paper's
  definition, a scalar) or within each list (``per_list=True``, reduced
  with ``reduce_fn``). A constant side gives 0 (double-``where``, so the
  gradient is finite); a NaN on a valid item gives NaN.

  Args:
    predicted: ``[..., L]`` predicted relevance :math:`\hat r`.
    true: ``[..., L]`` true relevance :math:`r`.
    where: ``bool[..., L]``.
    per_list: correlation per list instead of over the whole batch.
    reduce_fn: reduction of the per-list values (``per_list=True`` only).

  Returns:
    scalar (or ``[...]`` with ``per_list=True, reduce_fn=None``).

  >>> print(round(float(mcc(jnp.array([1., 2., 3.]), jnp.array([2., 4., 7.]))), 4))
  0.9934
  """
  dtype = jnp.result_type(predicted, true, jnp.float32)  # float64 stays
  x = jnp.asarray(predicted, dtype)
  y = jnp.asarray(true, dtype)
  if where is None:
    where = jnp.ones(x.shape, bool)
  axis = -1 if per_list else None
  w = where.astype(dtype)
  n = jnp.sum(w, axis=axis, keepdims=True)
  n_safe = jnp.maximum(n, 1.0)
  dx = jnp.where(where, x - jnp.sum(w * x, axis=axis, keepdims=True) / n_safe, 0.0)
  dy = jnp.where(where, y - jnp.sum(w * y, axis=axis, keepdims=True) / n_safe, 0.0)
  sxy = jnp.sum(dx * dy, axis=axis)
  sxx = jnp.sum(dx * dx, axis=axis)
  syy = jnp.sum(dy * dy, axis=axis)
  denom2 = sxx * syy
  ok = denom2 > 0
  corr = jnp.where(ok, sxy / jnp.sqrt(jnp.where(ok, denom2, 1.0)), 0.0)
  corr = jnp.where(jnp.isnan(sxy) | jnp.isnan(denom2), jnp.nan, corr)  # NaN in, NaN out (never 0)
  if not per_list:
    return corr
  return rax.utils.safe_reduce(corr, where=jnp.any(where, axis=-1), reduce_fn=reduce_fn)


@overload
def ranking_metrics(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  cutoffs: Sequence[int] = (1, 3, 5, 10),
  err_topn: int = 10,
  max_label: float = 4.0,
  key: Optional[Array] = None,
  return_mask: Literal[False] = False,
  drop_no_relevant: bool = False,
  dcg_cutoffs: Sequence[int] = (),
) -> dict[str, Array]: ...


@overload
def ranking_metrics(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  cutoffs: Sequence[int] = (1, 3, 5, 10),
  err_topn: int = 10,
  max_label: float = 4.0,
  key: Optional[Array] = None,
  return_mask: Literal[True],
  drop_no_relevant: bool = False,
  dcg_cutoffs: Sequence[int] = (),
) -> tuple[dict[str, Array], Array]: ...


def ranking_metrics(
  scores: Array,
  labels: Array,
  *,
  where: Optional[Array] = None,
  cutoffs: Sequence[int] = (1, 3, 5, 10),
  err_topn: int = 10,
  max_label: float = 4.0,
  key: Optional[Array] = None,
  return_mask: bool = False,
  drop_no_relevant: bool = False,
  dcg_cutoffs: Sequence[int] = (),
) -> Union[dict[str, Array], tuple[dict[str, Array], Array]]:
  r"""Per-list nDCG@k for every cut-off, ERR@10, MRR and MAP (unreduced), and DCG@k if asked.

  The evaluation helper of the training loop:

  .. math::
      \{\mathrm{nDCG@k}\}_{k \in \text{cutoffs}},\ \mathrm{ERR@10},\ \mathrm{RR},\ \mathrm{AP}

  with the conventions of the module docstring (relevant means ``y >= 1``
  for MRR and AP). Values are per list, ``[...]``; lists that do not count
  (all-masked, or without relevant items when ``drop_no_relevant``) hold 0.

  Args:
    scores: ``[..., L]``.
    labels: ``[..., L]``.
    where: ``bool[..., L]``.
    cutoffs: nDCG cut-offs.
    err_topn: ERR cut-off.
    max_label: ERR's :math:`y_{\max}`.
    key: optional key for random tie-breaking.
    return_mask: also return ``bool[...]``, which lists count.
    drop_no_relevant: see :func:`query_mask`.
    dcg_cutoffs: cut-offs of the unnormalised :func:`dcg` (``"dcg@k"``; none by default).

  Returns:
    ``{"ndcg@1", ..., "err@10", "mrr", "map"}`` (and ``"dcg@k"``) of
    ``float32[...]`` arrays; ``(metrics, mask)`` with ``return_mask``.

  >>> m = ranking_metrics(jnp.array([[3., 2., 1., 0.]]), jnp.array([[0., 1., 0., 1.]]))
  >>> print(sorted(m), round(float(m["ndcg@3"][0]), 5))
  ['err@10', 'map', 'mrr', 'ndcg@1', 'ndcg@10', 'ndcg@3', 'ndcg@5'] 0.38685
  """
  w, d = where, drop_no_relevant  # every metric per list (reduce_fn=None), over the same lists
  out = {
    f"ndcg@{k}": ndcg(scores, labels, topn=int(k), where=w, key=key, drop_no_relevant=d, reduce_fn=None)
    for k in cutoffs
  }
  out[f"err@{err_topn}"] = err(
    scores, labels, topn=err_topn, max_label=max_label, where=w, key=key, drop_no_relevant=d, reduce_fn=None
  )
  out["mrr"] = mrr(scores, labels, where=w, key=key, drop_no_relevant=d, reduce_fn=None)
  out["map"] = average_precision(scores, labels, where=w, key=key, drop_no_relevant=d, reduce_fn=None)
  out.update(
    {
      f"dcg@{k}": dcg(scores, labels, topn=int(k), where=w, key=key, drop_no_relevant=d, reduce_fn=None)
      for k in dcg_cutoffs
    }
  )
  if return_mask:
    return out, query_mask(labels, where=where, drop_no_relevant=drop_no_relevant)
  return out
