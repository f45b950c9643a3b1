r"""The fully synthetic identifiability study (Chen et al., ICML 2024, 5.1, C.2).

Clicks follow a PBM, :math:`c(x, p) = r(x)\,o(p)`, with

.. math::
    r(x) = \epsilon + (1 - \epsilon)\frac{2^{y_x} - 1}{2^{y_{\max}} - 1},
    \quad \epsilon = 0.1,\ y_{\max} = 5 \quad (\text{Eq. C.1})

and the eye-tracking examination :data:`PBM_EXAMINATION`; every record
(list, position) gets an aggregated CTR :math:`\mathrm{Binomial}(N, r\,o) /
N`. An embedding model is fitted (:mod:`ultr_jax.graph.embedding`) and scored
by MCC (Pearson correlation of :math:`r` and :math:`r'` over documents),
nDCG@1/3/5/10 of :math:`r'` on the logged lists (gain :math:`2^y - 1`; a
list without relevant documents scores 0 and stays in the mean) and click
MSE :math:`\operatorname{mean}_i (r'(x_i)\,o'(t_i) - c_i)^2`.

:func:`run_method` runs ``runs`` independent click simulations and fits in
one jitted, vmapped call, in float64 by default as the paper's numbers need
(click MSE goes below float32 rounding); ``dtype="float32"`` runs the same
fits in float32, which a TPU runs natively (its figures against Table 1's are
on the study page).
"""

import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from ultr_jax import metrics
from ultr_jax.data.dataset import RankingDataset
from ultr_jax.studies.identifiability import embedding
from ultr_jax.studies._progress import Progress

__all__ = [
  "PBM_EXAMINATION",
  "NDCG_CUTOFFS",
  "DTYPES",
  "true_relevance",
  "simulate_ctr",
  "embedding_metrics",
  "run_method",
]

#: Eye-tracking examination probabilities o(p), p = 0..9: not printed in the paper (Appendix C.2 cites the
#: eye-tracking study); the values of the authors' code.
PBM_EXAMINATION = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)
NDCG_CUTOFFS = (1, 3, 5, 10)
#: The precisions :func:`run_method` and :func:`table1` run in.
DTYPES = ("float64", "float32")


def true_relevance(labels, *, eps: float = 0.1, y_max: int = 5):
  r"""Eq. C.1: :math:`r = \epsilon + (1-\epsilon)(2^y - 1)/(2^{y_{\max}} - 1)`.

  >>> print([round(float(v), 5) for v in true_relevance(np.arange(5.))])
  [0.1, 0.12903, 0.1871, 0.30323, 0.53548]
  """
  y = jnp.asarray(labels)
  return eps + (1.0 - eps) * (2.0**y - 1.0) / (2.0**y_max - 1.0)


def simulate_ctr(key, p, num_clicks: float):
  r"""Aggregated CTR per record: :math:`\mathrm{Binomial}(N, p) / N`.

  >>> with jax.enable_x64(True):
  ...   print(round(float(simulate_ctr(jax.random.key(0), jnp.full((2000,), 0.3), 1e4).mean()), 2))
  0.3
  """
  p = jnp.asarray(p)
  n = jnp.asarray(num_clicks, p.dtype)
  return jax.random.binomial(key, n, p, dtype=p.dtype) / n


def embedding_metrics(r_true_doc, r_pred_doc, doc_present, doc_ids, labels, where, clicks_pred, ctr):
  r"""MCC over documents, nDCG@1/3/5/10 over lists and click MSE over records.

  .. math::
      \mathrm{MCC} = \frac{\sum_x (r_x - \bar r)(r'_x - \bar r')}
        {\sqrt{\sum_x (r_x - \bar r)^2}\sqrt{\sum_x (r'_x - \bar r')^2}}

  Args:
    r_true_doc, r_pred_doc: ``float[num_docs]``; doc_present: ``bool``.
    doc_ids, labels, where: ``[Q, L]`` logged lists.
    clicks_pred, ctr: ``float[Q, L]`` predicted click probability and CTR.

  Returns:
    dict of scalars: ``mcc``, ``ndcg@k``, ``click_mse``.

  >>> m = embedding_metrics(jnp.array([.1, .5]), jnp.array([.2, 1.]),
  ...     jnp.array([True, True]), jnp.array([[1, 0]]), jnp.array([[2., 0]]),
  ...     jnp.array([[True, True]]), jnp.zeros((1, 2)), jnp.zeros((1, 2)))
  >>> print(round(float(m["mcc"]), 3), float(m["ndcg@1"]), float(m["click_mse"]))
  1.0 1.0 0.0
  """
  out = {"mcc": metrics.mcc(r_pred_doc, r_true_doc, where=doc_present)}
  scores = jnp.where(where, r_pred_doc[jnp.maximum(doc_ids, 0)], 0.0)
  for k in NDCG_CUTOFFS:
    out[f"ndcg@{k}"] = metrics.ndcg(scores, labels, where=where, topn=k)
  out["click_mse"] = metrics.click_mse(clicks_pred, ctr, where=where)
  return out


# Three jits, so that a Table 1 compiles the click simulation and the
# metrics once per list shape (they are per run: a one-run fit such as the
# node-intervention estimate reuses them) and only the fit once per row.


@functools.partial(jax.jit, static_argnames=("num_docs",))
def _simulate(key, doc_ids, positions, labels, where, exam, num_clicks, eps, y_max, *, num_docs):
  r_true = true_relevance(labels, eps=eps, y_max=y_max)
  docs = jnp.maximum(doc_ids, 0)
  r_true_doc = jax.ops.segment_max(jnp.where(where, r_true, -1.0).ravel(), docs.ravel(), num_segments=num_docs)
  p = jnp.where(where, r_true * exam[positions], 0.0)
  k_click, k_fit = jax.random.split(key)
  ctr = jnp.where(where, simulate_ctr(k_click, p, num_clicks), 0.0)
  return ctr, k_fit, r_true_doc


@functools.partial(embedding.backend_jit, static_argnames=("method", "num_docs", "num_factors", "epochs", "fit_kwargs"))
def _fit(k_fit, ctr, docs, where, layout, *, method, num_docs, num_factors, epochs, fit_kwargs):
  # ctr [R, n], docs / where [n]: flat records (padded with where False)
  if method == "no_debias":
    fit = embedding.fit_no_debias
    return jax.vmap(
      lambda c: fit(None, docs, jnp.zeros_like(docs), c, where=where, num_items=num_docs, num_factors=num_factors)
    )(ctr)
  return embedding.fit_runs(
    method,
    k_fit,
    ctr,
    where=where,
    layout=layout,
    num_items=num_docs,
    num_factors=num_factors,
    epochs=epochs,
    **dict(fit_kwargs),
  )


def _positions(ds):
  positions = ds.extras.get("positions")
  if positions is None:
    positions = np.broadcast_to(np.arange(ds.list_size), ds.where.shape)
  return np.asarray(positions)


@jax.jit
def _score(ctr, r, o_pos, r_true_doc, doc_ids, positions, labels, where):
  docs = jnp.maximum(doc_ids, 0)
  m = embedding_metrics(r_true_doc, r, r_true_doc >= 0, doc_ids, labels, where, r[docs] * o_pos[positions], ctr)
  m["observation"] = o_pos
  m["relevance"] = r
  return m


def run_method(
  key,
  ds: RankingDataset,
  *,
  method: str,
  runs: int,
  epochs: int,
  num_clicks: float = 1e6,
  canonical: Optional[np.ndarray] = None,
  examination=PBM_EXAMINATION,
  eps: float = 0.1,
  y_max: int = 5,
  num_docs: Optional[int] = None,
  share_shapes=(),
  num_lists: Optional[int] = None,
  click_cache: Optional[dict] = None,
  dtype: str = "float64",
  **fit_kwargs,
) -> dict[str, np.ndarray]:
  r"""Simulates PBM clicks and fits ``method`` ``runs`` times (vmapped, in ``dtype``).

  Args:
    key: PRNG key; run ``i`` uses ``split(key, runs)[i]`` for its clicks and
      its initialisation.
    ds: logged lists with ``doc_ids`` and ``labels``; the bias factor is the
      position (``extras["positions"]``, default ``arange(L)``).
    method: ``no_debias``, ``dla``, ``regression_em`` or ``two_tower``.
    runs, epochs: number of runs and of epochs per run.
    num_clicks: impressions ``N`` per record.
    canonical: ``int[L]`` merge map (node merging) or None.
    examination: true :math:`o(p)`.
    eps, y_max: Eq. C.1.
    num_docs: number of document ids (default: max id + 1).
    share_shapes: ``(dataset, canonical or None)`` pairs of other rows: the
      fit's record layout is padded to the shapes of theirs, so that rows
      with the same method and epochs share one compiled fit (same results
      up to float summation order).
    num_lists: pad the lists with all-masked ones up to this count (the
      shapes of other rows, so that they share the compiled simulation and
      scoring; the metrics are unchanged).
    click_cache: a dict shared by calls on the same ``ds`` object with the
      same ``key`` and click settings (e.g. the rows of :func:`table1`): the
      clicks are simulated once and reused (the same numbers).
    dtype: ``"float64"`` (the paper's precision; run under
      ``jax.enable_x64``) or ``"float32"`` (native on TPUs; x64 off).
    **fit_kwargs: passed to the fit function (e.g. ``o_update``, ``variant``).

  Returns:
    ``{"mcc", "ndcg@1", ..., "click_mse": float[runs], "observation":
    float[runs, L], "relevance": float[runs, num_docs]}`` (``observation`` is
    :math:`o'` per position, merged positions taking their representative's
    value; ``relevance`` is :math:`r'` per document).

  >>> from ultr_jax.graph.synthetic import generate_design_dataset, DESIGN_GRAPHS
  >>> ds = generate_design_dataset(DESIGN_GRAPHS[1], block_size=40,
  ...                              num_queries=60, borrow=3)
  >>> m = run_method(jax.random.key(0), ds, method="dla", runs=2,
  ...                epochs=300)
  >>> print(bool((m["mcc"] > 0.9).all()))
  True
  """
  if dtype not in DTYPES:
    raise ValueError(f"run_method: dtype={dtype!r} is not one of {DTYPES}")
  # pad the lists too: one compiled simulation and score
  q = max([d.where.shape[0] for d, _ in share_shapes] + [num_lists or 0])
  # by the dataset's identity: each entry keeps its dataset alive, so an id
  # is never reused while the cache holds it
  cache_key = (
    id(ds),
    tuple(np.asarray(jax.random.key_data(key)).ravel()),
    runs,
    float(num_clicks),
    tuple(examination),
    eps,
    y_max,
    num_docs,
    q,
    dtype,
  )
  ds_given, ds = ds, _pad_lists(ds, q)
  positions = _positions(ds)
  l = int(np.max(positions)) + 1
  canonical = np.arange(l) if canonical is None else np.asarray(canonical)
  exam = np.asarray(examination, dtype)[:l]
  if num_docs:
    nd = num_docs
  elif ds.doc_ids is not None:
    nd = int(ds.doc_ids.max()) + 1
  else:
    raise ValueError("run_method: the dataset has no doc_ids; pass num_docs")
  n, layout = _records_layout(ds, canonical, share_shapes, method=method, num_docs=nd, num_factors=l)
  with jax.enable_x64(dtype == "float64"):
    keys = jax.random.split(key, runs)
    doc_ids = jnp.asarray(ds.doc_ids)
    positions = jnp.asarray(positions, jnp.int32)
    labels = jnp.asarray(ds.labels, dtype)
    where = jnp.asarray(ds.where)
    if click_cache is not None and cache_key in click_cache:
      _, ctr, k_fit, r_true_doc = click_cache[cache_key]
    else:
      ctr, k_fit, r_true_doc = _simulate_runs(
        keys, doc_ids, positions, labels, where, exam, num_clicks, eps, y_max, num_docs=nd, dtype=dtype
      )
      if click_cache is not None:
        click_cache[cache_key] = ds_given, ctr, k_fit, r_true_doc
    pad = n - ds.where.size
    r, o = _fit(
      k_fit,
      jnp.pad(ctr.reshape(runs, -1), ((0, 0), (0, pad))),
      jnp.pad(jnp.maximum(doc_ids, 0).ravel(), (0, pad)),
      jnp.pad(where.ravel(), (0, pad)),
      layout,
      method=method,
      num_docs=nd,
      num_factors=l,
      epochs=epochs,
      fit_kwargs=tuple(sorted(fit_kwargs.items())),
    )
    o_pos = jnp.ones((runs, l), dtype) if method == "no_debias" else o[:, jnp.asarray(canonical, jnp.int32)]
    out = [_score(ctr[i], r[i], o_pos[i], r_true_doc, doc_ids, positions, labels, where) for i in range(runs)]
    return jax.tree.map(lambda *v: np.stack([np.asarray(x) for x in v]), *out)


def _records_layout(ds, canonical, share_shapes, *, method: str, num_docs: int, num_factors: int) -> tuple:
  """``(n, layout)``: the number of flat records the fit sees and their layout (None for ``no_debias``).

  The layout is built once, on the host (dense per-item and per-factor sums instead of scatters, see
  ``embedding.record_layout``); with ``share_shapes``, padded to the shapes of those rows' layouts (one compile).
  """
  if method == "no_debias":
    return ds.where.size, None
  l = num_factors
  group = [(ds, canonical)] + [(d, np.arange(l) if c is None else np.asarray(c)) for d, c in share_shapes]
  n = max(d.where.size for d, _ in group)
  lays = [
    embedding.record_layout(
      _pad(np.maximum(d.doc_ids, 0).ravel(), n),
      _pad(c[_positions(d)].ravel(), n),
      _pad(d.where.ravel(), n),
      num_items=num_docs,
      num_factors=l,
    )
    for d, c in group
  ]
  return n, embedding.pad_layouts(lays, n)[0] if len(lays) > 1 else lays[0]


def _simulate_runs(
  keys, doc_ids, positions, labels, where, exam, num_clicks, eps, y_max, *, num_docs: int, dtype: str
) -> tuple:
  """``(ctr [R, Q, L], fit keys [R], true relevance per document)``: one click simulation per key (in ``dtype``)."""
  scalar = lambda v: jnp.asarray(v, dtype)  # noqa: E731
  sims = [
    _simulate(
      k,
      doc_ids,
      positions,
      labels,
      where,
      jnp.asarray(exam),
      scalar(num_clicks),
      scalar(eps),
      scalar(y_max),
      num_docs=num_docs,
    )
    for k in keys
  ]
  return jnp.stack([c for c, _, _ in sims]), jnp.stack([k for _, k, _ in sims]), sims[0][2]


def _pad_lists(ds, q):
  """``ds`` with all-masked lists appended up to ``q`` lists (excluded
  from every metric: nDCG skips all-masked lists, MCC and click MSE are
  over present documents and records)."""
  extra = q - ds.where.shape[0]
  if extra <= 0:
    return ds
  pad = (
    lambda a, v: np.concatenate(  # noqa: E731
      [a, np.full((extra,) + a.shape[1:], v, a.dtype)]
    )
  )
  return dataclasses.replace(
    ds,
    features=pad(ds.features, 0),
    labels=pad(ds.labels, 0),
    where=pad(ds.where, False),
    qid=pad(ds.qid, -1),
    doc_ids=pad(ds.doc_ids, 0),
    extras={**ds.extras, "positions": pad(_positions(ds), 0)},
  )


def _pad(a, n):
  return np.concatenate([a, np.zeros(n - a.size, a.dtype)])


def summarise(metrics: dict) -> dict:
  """``{name: {"mean", "std"}}`` over runs, for the scalar metrics.

  >>> summarise({"mcc": np.array([0.5, 0.7]), "observation": np.ones((2, 3))})
  {'mcc': {'mean': 0.6, 'std': 0.1}}
  """
  return {
    k: {"mean": round(float(np.mean(v)), 12), "std": round(float(np.std(v)), 12)}
    for k, v in metrics.items()
    if np.ndim(v) == 1
  }


def position_components(ds: RankingDataset):
  """IG components over positions: ``(labels int[L], present bool[L], K)``.

  >>> from ultr_jax.graph.synthetic import generate_design_dataset, DESIGN_GRAPHS
  >>> ds = generate_design_dataset(DESIGN_GRAPHS[3], block_size=40,
  ...                              num_queries=60, borrow=3)
  >>> print(position_components(ds)[2])
  3
  """
  from ultr_jax.graph.connectivity import check_identifiability

  positions = ds.extras.get("positions", np.broadcast_to(np.arange(ds.list_size), ds.where.shape))
  rep = check_identifiability(ds.doc_ids, positions, where=ds.where, num_factors=int(np.max(positions)) + 1)
  return rep.labels, rep.present, rep.num_components


def node_merging_canonical(ds: RankingDataset, pairs=None) -> np.ndarray:
  r"""Merge map for position bias: Algorithm 3 with the position number as the
  bias feature (paper C.3), or the given ``pairs`` of positions.

  >>> from ultr_jax.graph.synthetic import generate_design_dataset, DESIGN_GRAPHS
  >>> ds = generate_design_dataset(DESIGN_GRAPHS[2], block_size=40,
  ...                              num_queries=60, borrow=3)
  >>> node_merging_canonical(ds).tolist()
  [0, 1, 2, 3, 3, 5, 6, 7, 8, 9]
  """
  from ultr_jax.graph.merging import merge_plan
  from ultr_jax.graph.mst import UnionFind

  labels, present, _ = position_components(ds)
  if pairs is None:
    return merge_plan(np.arange(labels.shape[0], dtype=np.float64), labels, present).canonical
  uf = UnionFind(labels.shape[0])
  for a, b in pairs:
    uf.union(a, b)
  return uf.canonical()


def node_intervention_dataset(
  key,
  ds: RankingDataset,
  *,
  epochs: int,
  num_clicks: float = 1e6,
  random_cost=False,
  seed: int = 0,
  num_docs=None,
  num_lists=None,
  **dla_kwargs,
):
  r"""Algorithm 2 applied to ``ds``: estimates :math:`\hat r, \hat o` from one
  DLA + node merging fit (paper C.3), the min-cost plan (or the random-cost
  ablation), and the dataset with the swapped lists appended.

  ``num_lists`` pads the estimate's lists (see :func:`run_method`); the
  estimate is the same.

  Returns ``(dataset, plan)``.
  """
  from ultr_jax.graph.intervention import apply_interventions, intervention_plan, random_intervention_plan

  labels, present, k = position_components(ds)
  if k == 1:
    return ds, []
  if random_cost:
    plan = random_intervention_plan(np.random.default_rng(seed), ds.doc_ids, ds.where, labels, present=present)
  else:
    m = run_method(
      key,
      ds,
      method="dla",
      runs=1,
      epochs=epochs,
      num_clicks=num_clicks,
      num_docs=num_docs,
      num_lists=num_lists,
      canonical=node_merging_canonical(ds),
      **dla_kwargs,
    )
    plan = intervention_plan(ds.doc_ids, ds.where, labels, m["relevance"][0], m["observation"][0], present=present)
  return apply_interventions(ds, plan), plan


TABLE1_METHODS = (("DLA", "dla"), ("Regression-EM", "regression_em"), ("Two-Tower", "two_tower"))


def table1(
  key,
  ds: RankingDataset,
  *,
  runs: int,
  epochs: dict,
  num_clicks: float = 1e6,
  method_kwargs: Optional[dict] = None,
  num_docs=None,
  log=print,
  dtype: str = "float64",
) -> dict:
  r"""Table 1: No debias, and each method raw, + node intervention and + node
  merging, ``runs`` runs each.

  Args:
    key: PRNG key (the same run keys are used for every row).
    ds: a dataset with position bias (the paper's K = 2).
    runs: runs per row.
    epochs: ``{"dla": ..., "regression_em": ..., "two_tower": ...}``.
    num_clicks: impressions per record.
    method_kwargs: extra fit arguments per method.
    num_docs: the id range of the documents (default: one more than the largest id).
    log: called with one progress line per finished row, ``[identifiability] 3/10 Table 1 <row>: mcc
      <mean>: <elapsed>s, ~<left>s left`` (``done`` on the last).
    dtype: ``"float64"`` (the paper's) or ``"float32"`` (see :func:`run_method`).

  Returns:
    ``{row name: metrics dict of float[runs] arrays}`` plus ``"_plan"``: the
    intervention plan and ``"_canonical"``: the merge map.
  """
  method_kwargs = method_kwargs or {}
  k_est, k_run = jax.random.split(key)
  canonical = node_merging_canonical(ds)
  # The intervention appends one swapped list per extra component: every
  # row's lists are padded to that count, so that the estimate below and all
  # rows share one compiled click simulation and one compiled scoring.
  num_lists = ds.where.shape[0] + position_components(ds)[2] - 1
  ds_ni, plan = node_intervention_dataset(
    k_est,
    ds,
    epochs=epochs["dla"],
    num_clicks=num_clicks,
    num_docs=num_docs,
    num_lists=num_lists,
    dtype=dtype,
    **method_kwargs.get("dla", {}),
  )
  # every row on `ds` (and every row on `ds_ni`) sees the same clicks:
  # simulated once per dataset
  common: dict[str, Any] = dict(runs=runs, num_clicks=num_clicks, num_docs=num_docs, click_cache={}, dtype=dtype)
  shared = ((ds, None), (ds_ni, None), (ds, canonical))
  rows = {}

  progress = Progress("identifiability", total=1 + 3 * len(TABLE1_METHODS))  # one line per row

  def finished(row):
    log(progress.line(f"Table 1 {row}: mcc {float(np.mean(rows[row]['mcc'])):.4f}"))

  rows["No debias"] = run_method(k_run, ds, method="no_debias", epochs=1, share_shapes=shared, **common)
  finished("No debias")
  # the three rows of a method share one compiled fit (padded layouts)
  for name, method in TABLE1_METHODS:
    kw: dict[str, Any] = dict(epochs=epochs[method], share_shapes=shared, **common, **method_kwargs.get(method, {}))
    rows[name] = run_method(k_run, ds, method=method, **kw)
    finished(name)
    rows[f"{name} + node intervention"] = run_method(k_run, ds_ni, method=method, **kw)
    finished(f"{name} + node intervention")
    rows[f"{name} + node merging"] = run_method(k_run, ds, method=method, canonical=canonical, **kw)
    finished(f"{name} + node merging")
  rows["_plan"] = plan
  rows["_canonical"] = canonical
  return rows
