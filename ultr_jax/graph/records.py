r"""Records :math:`(x_i, t_i)` of the identifiability graph from ranked lists.

The IG (Chen et al., ICML 2024, Section 3) has one node per bias factor
:math:`t` and joins two factors shown with the same feature :math:`x`. For
logged lists ``[Q, L]`` the bias factor of the item at position :math:`p` is

* :math:`t = p` (position-based model), or
* :math:`t = c \cdot L + p` with a context type :math:`c` per displayed item
  (context-dependent PBM, Section 5.2; the paper draws
  :math:`c \sim U\{0..n_c-1\}` per query-document pair).

The feature :math:`x` is a document id, or the full feature vector (two
documents with identical vectors are one node of the bipartite graph).
"""

from typing import Iterable, NamedTuple, Optional, Sequence

import numpy as np

__all__ = [
  "ClickCounts",
  "click_counts",
  "merge_click_counts",
  "gather_click_counts",
  "feature_vector_ids",
  "random_contexts",
  "bias_factor_ids",
  "bias_factor_names",
  "read_svmlight_ranking",
]


def feature_vector_ids(features: np.ndarray, where: Optional[np.ndarray] = None) -> tuple[np.ndarray, int]:
  r"""Ids of distinct feature vectors: :math:`x_i = x_j \iff f_i = f_j`.

  Args:
    features: ``float[..., F]`` feature vectors.
    where: optional ``bool[...]``; masked rows get id ``-1``.

  Returns:
    ``(ids int32[...], num_distinct)``, ids in ``[0, num_distinct)``.

  >>> f = np.array([[[1., 0.], [0., 1.]], [[1., 0.], [2., 2.]]])
  >>> ids, n = feature_vector_ids(f)
  >>> print(ids.tolist(), n)
  [[0, 1], [0, 2]] 3
  """
  f = np.ascontiguousarray(np.asarray(features, np.float32))
  lead = f.shape[:-1]
  rows = f.reshape(-1, f.shape[-1])
  m = np.ones(rows.shape[0], bool) if where is None else np.asarray(where, bool).reshape(-1)
  keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))
  keys = keys.reshape(-1)
  out = np.full(rows.shape[0], -1, np.int32)
  if m.any():
    _, first, inv = np.unique(keys[m], return_index=True, return_inverse=True)
    # Number the distinct vectors in order of first appearance.
    order = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    out[m] = order[inv.reshape(-1)]
    n = int(first.size)
  else:
    n = 0
  return out.reshape(lead), n


def random_contexts(num_queries: int, list_size: int, num_contexts: int, seed: int = 0) -> np.ndarray:
  r"""A random context type per displayed item, :math:`c \sim U\{0..n_c-1\}`.

  As in the paper's code: ``randint(0, n_context, size=(Q, L))`` with a seed.

  Args:
    num_queries: the number of lists :math:`Q`.
    list_size: the list size :math:`L`.
    num_contexts: the number of context types :math:`n_c`.
    seed: NumPy's seed.

  Returns:
    ``int[Q, L]`` context types.

  >>> random_contexts(2, 3, 5, seed=0).shape
  (2, 3)
  """
  rng = np.random.RandomState(seed)
  return rng.randint(0, num_contexts, size=(num_queries, list_size)).astype(np.int32)


def bias_factor_ids(positions: np.ndarray, contexts: Optional[np.ndarray] = None, *, list_size: int) -> np.ndarray:
  r"""Bias factor of each item: :math:`t = p` or :math:`t = c \cdot L + p`.

  Args:
    positions: ``int[...]`` 0-based displayed positions.
    contexts: optional ``int[...]`` context types (None: positions only).
    list_size: the number of positions :math:`L`.

  Returns:
    ``int[...]`` the bias factor of each item.

  >>> bias_factor_ids(np.array([[0, 1, 2]]), np.array([[0, 2, 1]]), list_size=3)
  array([[0, 7, 5]], dtype=int32)
  """
  p = np.asarray(positions, np.int64)
  if contexts is None:
    return p.astype(np.int32)
  return (np.asarray(contexts, np.int64) * list_size + p).astype(np.int32)


def bias_factor_names(num_factors: int, *, list_size: int, with_contexts: bool) -> list[str]:
  """Readable names: ``"p3"`` or ``"c12#p3"`` (context 12, position 3).

  Args:
    num_factors: the number of factors.
    list_size: the number of positions :math:`L`.
    with_contexts: whether the factors include a context.

  Returns:
    A list of ``num_factors`` names.

  >>> bias_factor_names(4, list_size=2, with_contexts=True)
  ['c0#p0', 'c0#p1', 'c1#p0', 'c1#p1']
  """
  if not with_contexts:
    return [f"p{t}" for t in range(num_factors)]
  return [f"c{t // list_size}#p{t % list_size}" for t in range(num_factors)]


def read_svmlight_ranking(path, *, list_size: int = 10, num_features: Optional[int] = None):
  r"""Reads an SVMlight/LETOR file whose line order per query is the ranking.

  Lines are ``label qid:Q idx:val ...`` (1-based indices, as in LETOR); the
  first ``list_size`` lines of every query are its displayed list, position
  ``i`` being its ``i``-th line. Comments after ``#`` are ignored.

  Args:
    path: the SVMlight/LETOR file.
    list_size: the number of displayed positions per query.
    num_features: the number of features (None: the largest index in the file).

  Returns:
    ``(features float32[Q, L, F], labels float32[Q, L], where bool[Q, L], qid int64[Q])``.

  Raises:
    ValueError: naming the file, line and field on malformed input.

  >>> import pathlib, tempfile
  >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.txt"
  >>> _ = p.write_text("2 qid:1 1:0.5 3:1\n0 qid:1 2:1\n1 qid:4 1:1\n")
  >>> f, y, w, q = read_svmlight_ranking(p, list_size=2)
  >>> print(f.shape, y.tolist(), q.tolist())
  (2, 2, 3) [[2.0, 0.0], [1.0, 0.0]] [1, 4]
  """
  order, per_q = [], {}
  width = 0
  with open(path) as fh:
    for line_no, line in enumerate(fh, 1):
      line = line.split("#", 1)[0].split()
      if not line:
        continue
      try:
        label = float(line[0])
      except ValueError:
        raise ValueError(f"{path}:{line_no}: field 'label': {line[0]!r}") from None
      if len(line) < 2 or not line[1].startswith("qid:"):
        raise ValueError(f"{path}:{line_no}: field 'qid': missing qid:")
      try:
        q = int(line[1][4:])
      except ValueError:
        raise ValueError(f"{path}:{line_no}: field 'qid': {line[1]!r}") from None
      feats = []
      for tok in line[2:]:
        k, sep, v = tok.partition(":")
        try:
          if not sep:
            raise ValueError
          k, v = int(k), float(v)
          if k < 1:
            raise ValueError
        except ValueError:
          raise ValueError(f"{path}:{line_no}: field 'feature': bad token {tok!r}") from None
        feats.append((k - 1, v))
        width = max(width, k)
      if q not in per_q:
        per_q[q] = []
        order.append(q)
      if len(per_q[q]) < list_size:
        per_q[q].append((label, feats))
  f_dim = num_features or width
  nq = len(order)
  features = np.zeros((nq, list_size, f_dim), np.float32)
  labels = np.zeros((nq, list_size), np.float32)
  where = np.zeros((nq, list_size), bool)
  for i, q in enumerate(order):
    for j, (y, feats) in enumerate(per_q[q]):
      labels[i, j] = y
      where[i, j] = True
      for k, v in feats:
        if k < f_dim:
          features[i, j, k] = v
  return features, labels, where, np.asarray(order, np.int64)


class ClickCounts(NamedTuple):
  r"""Clicks and impressions per (item, bias factor) cell of a click log: what the IG and harvesting read.

  The identifiability graph joins the factors an item was shown at, and intervention harvesting
  (:mod:`~ultr_jax.graph.harvesting`) reads each cell's CTR :math:`\bar c(x, t) = k_{x,t} / n_{x,t}`:
  both are functions of these counts, which reduce a log of any length in one pass
  (:func:`gather_click_counts`), in memory that grows with the distinct cells, not the records.
  As records they are ``(items, factors, clicks / impressions)`` with ``weights = impressions``
  (:func:`~ultr_jax.graph.intervention_sets`, :func:`~ultr_jax.graph.check_identifiability`).

  Attributes:
    items: ``int64[R]`` the cells' item ids, sorted by (item, factor).
    factors: ``int64[R]`` their bias factors.
    clicks: ``float64[R]`` weighted clicks :math:`k` (a CTR record of weight :math:`w` adds :math:`w c`).
    impressions: ``float64[R]`` weighted impressions :math:`n > 0`.
    num_items: the id range of ``items`` (one more than the largest id seen, or as given).
    num_factors: the id range of ``factors``.
    num_records: the records (shown documents, or rows of an aggregated log) counted.
  """

  items: np.ndarray
  factors: np.ndarray
  clicks: np.ndarray
  impressions: np.ndarray
  num_items: int
  num_factors: int
  num_records: int

  @property
  def ctr(self) -> np.ndarray:
    """``float64[R]`` each cell's click-through rate :math:`k / n`."""
    return self.clicks / self.impressions


def _grouped(items, factors, clicks, impressions, num_items, num_factors, num_records) -> ClickCounts:
  """Equal (item, factor) cells merged (their counts added), sorted; cells without impressions dropped."""
  width = int(factors.max()) + 1 if len(factors) else 1
  key = items.astype(np.int64) * width + factors
  uniq, inverse = np.unique(key, return_inverse=True)
  inverse = inverse.ravel()
  n = np.bincount(inverse, weights=impressions, minlength=len(uniq))
  k = np.bincount(inverse, weights=clicks, minlength=len(uniq))
  keep = n > 0
  uniq = uniq[keep]
  return ClickCounts(uniq // width, uniq % width, k[keep], n[keep], num_items, num_factors, num_records)


def click_counts(
  items,
  factors,
  clicks,
  *,
  where=None,
  weights=None,
  num_items: Optional[int] = None,
  num_factors: Optional[int] = None,
) -> ClickCounts:
  r"""The :class:`ClickCounts` of records of any shape ``[...]`` (the IG's: items, factors, clicks, ``where``).

  Per cell :math:`(x, t)`: :math:`k_{x,t} = \sum w\,c`, :math:`n_{x,t} = \sum w` over its valid
  records (``clicks`` 0/1, or CTRs with ``weights`` = impressions).

  Args:
    items: ``int[...]`` item ids of the records.
    factors: ``int[...]`` bias factor ids of the records.
    clicks: ``[...]`` clicks (0/1) or CTRs.
    where: ``bool[...]`` the valid records (None: all).
    weights: ``[...]`` record weights (impressions; None: 1).
    num_items: the number of items (None: the largest id + 1).
    num_factors: the number of factors (None: the largest id + 1).

  Returns:
    The records' :class:`ClickCounts`.

  >>> c = click_counts(np.array([[0, 1], [1, 0]]), np.array([[0, 1], [0, 1]]), np.array([[1., 0.], [1., 1.]]))
  >>> c.items.tolist(), c.factors.tolist(), c.clicks.tolist(), c.impressions.tolist(), c.num_records
  ([0, 0, 1, 1], [0, 1, 0, 1], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], 4)
  """
  x, t = np.asarray(items), np.asarray(factors)
  c = np.asarray(clicks, np.float64)
  m = np.ones(x.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), x.shape)
  w = np.ones(x.shape) if weights is None else np.broadcast_to(np.asarray(weights, np.float64), x.shape)
  if x.shape != t.shape or x.shape != c.shape:
    raise ValueError(f"items {x.shape}, factors {t.shape} and clicks {c.shape} must have one shape")
  if not (np.issubdtype(x.dtype, np.integer) and np.issubdtype(t.dtype, np.integer)):
    raise ValueError(f"items and factors must be integer ids, got {x.dtype} and {t.dtype}")
  x, t, c, w = (a[m] for a in (x, t, c, w))
  for name, ids in (("items", x), ("factors", t)):
    if len(ids) and ids.min() < 0:
      raise ValueError(f"{name}: id {int(ids.min())} is negative where valid")
  bad = ~((c >= 0) & (c <= 1)) | ~(np.isfinite(w) & (w >= 0))
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(f"record {i} (valid ones, in order): click {c[i]} and weight {w[i]} are not a CTR and a count")
  seen_items = int(x.max()) + 1 if len(x) else 0
  seen_factors = int(t.max()) + 1 if len(t) else 0
  out = _grouped(
    x.astype(np.int64),
    t.astype(np.int64),
    w * c,
    w,
    seen_items if num_items is None else int(num_items),
    seen_factors if num_factors is None else int(num_factors),
    int(m.sum()),
  )
  for name, seen, given in (("items", seen_items, out.num_items), ("factors", seen_factors, out.num_factors)):
    if seen > given:
      raise ValueError(f"{name}: id {seen - 1} is outside [0, {given})")
  return out


def merge_click_counts(counts: Sequence[ClickCounts]) -> ClickCounts:
  """The counts of the union of the logs (cells added; id ranges the largest).

  Args:
    counts: the :class:`ClickCounts` of several logs.

  Returns:
    The :class:`ClickCounts` of their union.

  >>> a = click_counts(np.array([0, 1]), np.array([0, 1]), np.array([1., 0.]))
  >>> m = merge_click_counts([a, a])
  >>> m.clicks.tolist(), m.impressions.tolist(), m.num_records
  ([2.0, 0.0], [2.0, 2.0], 4)
  """
  counts = list(counts)
  if not counts:
    raise ValueError("merge_click_counts: nothing to merge")
  cat = lambda name: np.concatenate([getattr(c, name) for c in counts])  # noqa: E731
  return _grouped(
    cat("items"),
    cat("factors"),
    cat("clicks"),
    cat("impressions"),
    max(c.num_items for c in counts),
    max(c.num_factors for c in counts),
    sum(c.num_records for c in counts),
  )


def gather_click_counts(
  batches: Iterable[dict], *, num_items: Optional[int] = None, num_factors: Optional[int] = None
) -> ClickCounts:
  r"""One pass over a stream of record batches: their :class:`ClickCounts`, in memory bounded by the cells.

  A batch is a dict with ``doc_ids`` (the items) and ``clicks`` of one shape ``[..., L]``, and optionally
  ``positions`` (the bias factors; default: the index on the last axis, item ``i`` of a list being
  position ``i``), ``where``, ``valid`` (``[...]``, the padding lists of a fixed-shape stream) and
  ``weights`` (impressions of CTR records): the batches of :class:`~ultr_jax.data.SessionStream` and
  :func:`~ultr_jax.data.session_batches`, or the flat record chunks of
  :class:`~ultr_jax.data.ClickLogRows`. Each batch is reduced (:func:`click_counts`) and the reductions
  merged whenever the pending ones outgrow the merged cells.

  Args:
    batches: iterable of batch dicts.
    num_items, num_factors: the id ranges (default: the largest ids seen + 1).

  Returns:
    :class:`ClickCounts`.

  >>> b = {"doc_ids": np.array([[0, 1], [1, 0]]), "clicks": np.array([[1., 0.], [1., 1.]]),
  ...      "valid": np.array([True, False])}
  >>> c = gather_click_counts([b, b])
  >>> c.items.tolist(), c.factors.tolist(), c.clicks.tolist(), c.impressions.tolist(), c.num_records
  ([0, 1], [0, 1], [2.0, 0.0], [2.0, 2.0], 4)
  """
  merged, pending, pending_cells = None, [], 0
  for batch in batches:
    for k in ("doc_ids", "clicks"):
      if k not in batch:
        raise ValueError(f"record batch: missing {k!r} (keys: {sorted(batch)})")
    ids = np.asarray(batch["doc_ids"])
    where = batch.get("where")
    where = np.ones(ids.shape, bool) if where is None else np.asarray(where, bool)
    if "valid" in batch:
      where = where & np.asarray(batch["valid"], bool).reshape(ids.shape[:-1] + (1,))
    factors = batch.get("positions")
    if factors is None:
      factors = np.broadcast_to(np.arange(ids.shape[-1]), ids.shape)
    c = click_counts(ids, np.asarray(factors), batch["clicks"], where=where, weights=batch.get("weights"))
    pending.append(c)
    pending_cells += len(c.items)
    if pending_cells > max(len(merged.items) if merged is not None else 0, 1 << 16):
      merged = merge_click_counts(([merged] if merged is not None else []) + pending)
      pending, pending_cells = [], 0
  if merged is None and not pending:
    raise ValueError("gather_click_counts: the stream is empty")
  out = merge_click_counts(([merged] if merged is not None else []) + pending)
  for name, given, seen in (("items", num_items, out.num_items), ("factors", num_factors, out.num_factors)):
    if given is not None and seen > given:
      raise ValueError(f"{name}: id {seen - 1} is outside [0, {given})")
  return out._replace(
    num_items=out.num_items if num_items is None else int(num_items),
    num_factors=out.num_factors if num_factors is None else int(num_factors),
  )
