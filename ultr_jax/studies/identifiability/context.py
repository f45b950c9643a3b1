r"""The context-dependent (semi-synthetic) study (Chen et al., ICML 2024, 5.2).

Bias factors are (context type, position) pairs, with a random context per
displayed item; clicks follow a context-dependent PBM (Fang et al., 2019),

.. math::
    o(c, p) = o(p)^{\max(w^\top X_c + 1,\ 0)}, \qquad
    X_c \sim N(0, 0.35^2 I_{10}),

relevance :math:`r(y) \in [0.1, 0.16, 0.28, 0.52, 1.0]` and aggregated CTRs
:math:`\mathrm{Binomial}(N, r\,o)/N`. The IG over the
:math:`n_c \cdot L` bias factors is checked, node merging runs on the
11-dimensional bias features :math:`[X_c, 10 p]`, and embedding DLA (exact
least squares, :math:`o'_0 = 1`, 100 epochs) / Two-Tower are fitted with and
without merging. Items are distinct feature vectors.

The default dataset is synthetic LETOR-like data (a document pool sampled
into lists, so documents recur across queries); SVMlight files with a logged
ranking can be passed instead (:func:`ultr_jax.graph.read_svmlight_ranking`).

The fits run in float64 by default (``jax.enable_x64``), as Table 1's: the click MSE they drive down goes below
float32 rounding. ``dtype="float32"`` runs them with x64 off, as a TPU runs them natively (its figures against
float64's are on the study page).
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.graph.connectivity import check_identifiability
from ultr_jax.graph.merging import merge_plan
from ultr_jax.graph.records import bias_factor_ids, feature_vector_ids, random_contexts
from ultr_jax.studies.identifiability import embedding
from ultr_jax.studies.identifiability.table1 import DTYPES, PBM_EXAMINATION, embedding_metrics, simulate_ctr

__all__ = ["CLICK_PROB", "synthetic_letor", "cpbm_examination", "context_study"]

CLICK_PROB = (0.1, 0.16, 0.28, 0.52, 1.0)


def synthetic_letor(
  seed: int = 0, *, num_queries: int = 2000, num_docs: int = 5000, list_size: int = 10, num_features: int = 20
):
  r"""Toy LETOR data: ``num_queries`` lists of ``list_size`` documents drawn
  from a pool of ``num_docs`` feature vectors, labels from a linear score.

  Returns ``(features float32[Q, L, F], labels float32[Q, L], where)``.

  >>> f, y, w = synthetic_letor(num_queries=3, num_docs=20, num_features=4)
  >>> f.shape, y.shape, bool(w.all())
  ((3, 10, 4), (3, 10), True)
  """
  rng = np.random.default_rng(seed)
  pool = rng.normal(size=(num_docs, num_features)).astype(np.float32)
  score = pool @ rng.normal(size=num_features)
  labels = np.digitize(score, np.quantile(score, [0.4, 0.75, 0.93, 0.98]))
  idx = np.stack([rng.choice(num_docs, list_size, replace=False) for _ in range(num_queries)])
  return (pool[idx], labels[idx].astype(np.float32), np.ones(idx.shape, bool))


def cpbm_examination(context_features, w, exam=PBM_EXAMINATION):
  r""":math:`o(c, p) = o(p)^{\max(w^\top X_c + 1, 0)}` as ``[n_c, L]``.

  >>> print(cpbm_examination(np.zeros((1, 2)), np.ones(2), (0.5, 0.25)).tolist())
  [[0.5, 0.25]]
  """
  eta = np.maximum(np.asarray(context_features) @ np.asarray(w) + 1.0, 0.0)
  return np.asarray(exam)[None, :] ** eta[:, None]


def context_study(
  key,
  features,
  labels,
  where,
  *,
  num_contexts: int,
  w: np.ndarray,
  seed: int = 0,
  num_clicks: float = 1e6,
  epochs: int = 100,
  runs: int = 1,
  two_tower_epochs: int = 2000,
  context_features: Optional[np.ndarray] = None,
  log=print,
  dtype: str = "float64",
) -> dict:
  r"""IG check, node merging and DLA / Two-Tower with and without merging.

  Args:
    key: PRNG key.
    features, labels, where: logged lists ``[Q, L, F]``, ``[Q, L]``.
    num_contexts: number of context types :math:`n_c`.
    w: ``float[10]`` CPBM weights (``click_model.json``'s ``w``).
    seed: seed of contexts and context features.
    num_clicks, epochs, runs: simulation and fitting sizes.
    two_tower_epochs: the Two-Tower rows' epochs.
    context_features: ``float[n_c, 10]`` context features (default: drawn from ``seed``).
    log: called with each row's MCC.
    dtype: ``"float64"`` (under ``jax.enable_x64``) or ``"float32"`` (x64 off).

  Returns:
    dict with ``report`` (the IG summary dict), ``merge_pairs`` and, per row
    (``No debias``, ``DLA``, ``DLA + node merging``, ``Two-Tower``,
    ``Two-Tower + node merging``), metrics arrays over runs.
  """
  if dtype not in DTYPES:
    raise ValueError(f"context_study: dtype={dtype!r} is not one of {DTYPES}")
  q, l = where.shape
  rng = np.random.default_rng(seed)
  xc = rng.normal(0, 0.35, size=(num_contexts, len(w))) if context_features is None else context_features
  ctx = random_contexts(q, l, num_contexts, seed)
  pos = np.broadcast_to(np.arange(l), (q, l))
  factors = bias_factor_ids(pos, ctx, list_size=l)
  items, n_items = feature_vector_ids(features, where)
  num_factors = num_contexts * l
  report = check_identifiability(items, factors, where=where, num_items=n_items, num_factors=num_factors)
  log(f"IG: {report.num_components} components over {int(report.present.sum())} bias factors")
  bias_feat = np.concatenate([np.repeat(xc, l, axis=0), 10.0 * np.tile(np.arange(l), num_contexts)[:, None]], axis=1)
  plan = merge_plan(bias_feat, report.labels, report.present)
  exam = cpbm_examination(xc, w).reshape(-1)  # [n_c * L], id = c * L + p
  rel = np.asarray(CLICK_PROB)[labels.astype(int)]
  p_click = np.where(where, rel * exam[factors], 0.0)
  out = {"report": report.to_dict() | {"components": len(report.components)}, "merge_pairs": len(plan.pairs)}
  with jax.enable_x64(dtype == "float64"):
    keys = jax.random.split(key, runs)
    items_f = np.maximum(items, 0).ravel()
    rows = {
      "No debias": ("no_debias", None),
      "DLA": ("dla", None),
      "DLA + node merging": ("dla", plan.canonical),
      "Two-Tower": ("two_tower", None),
      "Two-Tower + node merging": ("two_tower", plan.canonical),
    }
    # Dense record layouts built on the host; a method's rows with and
    # without merging share their shapes, hence one compiled row function.
    raw = np.arange(num_factors, dtype=np.int32)
    lays = [
      embedding.record_layout(items_f, c[factors].ravel(), where, num_items=n_items, num_factors=num_factors)
      for c in (raw, plan.canonical)
    ]
    layouts = dict(zip(("raw", "merged"), embedding.pad_layouts(lays, items_f.size)))
    p_click, rel, labels = (np.asarray(a, dtype) for a in (p_click, rel, labels))
    common = [
      jnp.asarray(a)
      for a in (p_click, where, items_f, factors, rel, np.where(where, np.arange(q * l).reshape(q, l), -1), labels)
    ]
    # the same clicks for every row (one compiled simulation, per run)
    sims = [_clicks(k, common[0], common[1], jnp.asarray(num_clicks, dtype)) for k in keys]
    ctr = jnp.stack([c for c, _ in sims])  # [runs, Q, L]
    k_fit = jnp.stack([k for _, k in sims])  # [runs] keys
    for name, (method, canonical) in rows.items():
      can = raw if canonical is None else np.asarray(canonical, np.int32)
      f_ids = np.zeros_like(can[factors]) if method == "no_debias" else can[factors]
      kw = {
        "dla": dict(epochs=epochs, o_update="least_squares", init_obs=1.0),
        "two_tower": dict(epochs=two_tower_epochs),
        "no_debias": {},
      }[method]
      layout = None if method == "no_debias" else layouts["raw" if canonical is None else "merged"]
      # all runs of a row in one call (the fits batched over runs)
      out[name] = jax.tree.map(
        np.asarray,
        _row(
          ctr,
          k_fit,
          jnp.asarray(f_ids),
          jnp.asarray(can),
          layout,
          *common[1:],
          method=method,
          num_items=n_items,
          num_factors=num_factors,
          kw=tuple(sorted(kw.items())),
        ),
      )
      log(f"{name}: MCC {out[name]['mcc'].mean():.4f}")
  return out


@jax.jit
def _clicks(k, p_click, where, num_clicks):
  """Aggregated CTRs :math:`\\mathrm{Binomial}(N, p) / N` and the fit key."""
  k_click, k_fit = jax.random.split(k)
  return jnp.where(where, simulate_ctr(k_click, p_click, num_clicks), 0.0), k_fit


@functools.partial(embedding.backend_jit, static_argnames=("method", "num_items", "num_factors", "kw"))
def _row(
  ctr, k_fit, f_ids, can, layout, where, items_f, factors, rel, rec_ids, labels, *, method, num_items, num_factors, kw
):
  """All runs of one row (``ctr [R, Q, L]``, ``k_fit [R]``): the fits and the metrics."""
  runs, q, l = ctr.shape
  wh = where.ravel()
  if method == "no_debias":
    r, _ = jax.vmap(
      lambda c: embedding.fit_no_debias(
        None, items_f, f_ids.ravel(), c, where=wh, num_items=num_items, num_factors=num_factors
      )
    )(ctr.reshape(runs, -1))
    o_full = jnp.ones((runs, num_factors), ctr.dtype)
  else:
    r, o = embedding.fit_runs(
      method,
      k_fit,
      ctr.reshape(runs, -1),
      where=wh,
      layout=layout,
      num_items=num_items,
      num_factors=num_factors,
      **dict(kw),
    )
    o_full = o[:, can]

  def metrics(r, o_full, ctr):
    pred = r[items_f].reshape(q, l) * o_full[factors]
    # MCC over records (the paper's semi-synthetic convention)
    return embedding_metrics(rel.ravel(), r[items_f], wh, rec_ids, labels, where, pred, ctr)

  return jax.vmap(metrics)(r, o_full, ctr)
