r"""The LBD study (Chen, Liu, Liu & Sun, NeurIPS 2022, Section 6): data, individual-level clicks, the eta sweep.

Pieces, each usable on its own:

* :func:`make_lbd_synthetic`: our CPU stand-in for the paper's Yahoo!/Istella-S data (``x ~ U[-1,1]^F``,
  latent :math:`z = u^\top x + 0.5\sum_j \tanh(V_j^\top x)`, grades from
  z-quantiles) with the true ``u``.
* :func:`select_crux_features`: the ``k`` most relevance-predictive features
  (offline stand-in for the paper's ExtraTrees importance).
* :func:`make_individual_click_fn`: LBD's individual-level click model
  :math:`P(C=1) = r(y)\, v_p^{\max(1 + w^\top x_{crux}, 0)}` (Section 6.1: Eq. 3 and the
  observation formula after it) with
  :math:`w = \eta \cdot` the repo's base vector, on top of
  :func:`ultr_jax.simulation.make_click_fn` (``"individual"``), with lists
  without a click re-drawn (:func:`redraw_no_click`).
* :func:`stack_click_fn`: the click model once per eta, stacked, so one
  training step (:func:`~ultr_jax.train.methods.lbd.stack_runs`) trains a
  method at every eta at once.
* :func:`run_lbd_study`: the baselines and the LBD family (one vmapped
  :func:`~ultr_jax.train.methods.lbd.make_lbd_grid` per ranker holding
  Unlimited, every LBD_Lips / LBD_Ber / LBD grid point and Click Data on the
  LBD tower), each one :func:`ultr_jax.train.fit` over every eta; (lambda, t)
  chosen per eta on validation nDCG@10; ``results.json``, the Table 1
  analogue, the figures and the effects E1-E5 with seed-level intervals.

The effects are the paper's claims as this study tests them (our labels, the keys of ``results["_effects"]``):
E1 the coupling effect (Unlimited below LBD at eta >= 0.1; Table 1), E2 no harm at eta = 0 and a small gain at
0.1 (Table 1, Figure 3(a)), E3 robustness to eta (Figure 3(a)), E4 the two decouplings complement each other
(Figure 3(b)), E5 the validation-optimal (lambda, t) drifts with eta (Figure 4, Table 3).
"""

import concurrent.futures
import functools
import json
import os
import time
from typing import Any, NamedTuple, Optional, Sequence, Union

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from scipy import stats as scipy_stats

from ultr_jax import simulation
from ultr_jax.data import RankingDataset, Splits
from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.lbd import CONFIG_RULES, VARIANTS, default_config
from ultr_jax.studies.figures import save_figure
from ultr_jax.train.compilation import enable_compilation_cache
from ultr_jax.train.loop import evaluate, fit, make_optimizer
from ultr_jax.train.methods import get_method
from ultr_jax.train.methods.lbd import LBD_DEFAULTS, make_lbd, make_lbd_grid, stack_runs
from ultr_jax.studies.tables import best_and_ties
from ultr_jax.train.results import summarize, write_results

__all__ = [
  "CONFIG_RULES",
  "LBD_BASE_W",
  "YAHOO_CRUX",
  "ISTELLA_CRUX",
  "make_lbd_synthetic",
  "select_crux_features",
  "redraw_no_click",
  "make_individual_click_fn",
  "stack_click_fn",
  "grid_members",
  "select_on_validation",
  "effects",
  "welch_difference",
  "tied_with_best",
  "prepare_lists",
  "run_lbd_study",
  "VARIANTS",
  "default_config",
]

#: The authors' code's coupling vector at eta = 0.1, divided by eta (``w = eta * LBD_BASE_W``); the paper draws
#: ``w`` uniformly from ``[-eta, eta]`` (Section 6.1).
LBD_BASE_W = np.array(
  [-1.0, -0.05692682, -0.32078125, -0.61167928, 0.63807999, 1.0, 0.20537273, -0.61056782, 0.56496459, -0.15535264]
)
#: The repo's crux indices (0-based) for Yahoo! and Istella-S (ExtraTrees importance).
YAHOO_CRUX = (635, 374, 444, 593, 380, 15, 124, 448, 416, 479)
ISTELLA_CRUX = (192, 188, 219, 5, 209, 194, 35, 211, 183, 212)

METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "err@10")
BASELINES = {
  "labeled_data": "full_info",
  "click_data": "naive",
  "ips": "ips",
  "dla": "dla",
  "regression_em": "regression_em",
  "paird": "paird",
  "two_tower": "two_tower",
}
LBD_FAMILY = ("unlimited", "lbd_lips", "lbd_ber", "lbd")
METHOD_ORDER = tuple(BASELINES) + LBD_FAMILY


# ----------------------------------------------------------------------------------------------
# Data and clicks.


def make_lbd_synthetic(
  num_train: int = 3000,
  num_valid: int = 500,
  num_test: int = 500,
  *,
  list_size: int = 20,
  num_features: int = 50,
  num_linear: int = 15,
  num_tanh: int = 8,
  seed: int = 0,
  label_fractions: Sequence[float] = (0.50, 0.25, 0.15, 0.07, 0.03),
) -> tuple[Splits, np.ndarray]:
  r"""The synthetic default (our CPU stand-in for the paper's datasets) and its true linear relevance weights ``u``.

  .. math::
      x \sim U[-1, 1]^F, \qquad z = u^\top x + 0.5 \sum_{j=1}^{8} \tanh(V_j^\top x),

  with ``u`` sparse (``num_linear`` non-zero :math:`N(0, 1)` entries),
  :math:`V_{jf} \sim N(0, 3/F)` (so :math:`V_j^\top x` has unit variance) and
  grades ``0..4`` at the pooled z-quantiles ``label_fractions``
  (about 50/25/15/7/3%). Deterministic in ``seed``; ``extras["true_score"]`` is ``z``.

  Args:
    num_train: queries of the training split.
    num_valid: queries of the validation split.
    num_test: queries of the test split.
    list_size: documents per query (L).
    num_features: feature dimension (F).
    num_linear: non-zero entries of ``u``.
    num_tanh: ``tanh`` terms of ``z`` (the sum's upper limit, 8 by default).
    seed: the NumPy seed of every draw.
    label_fractions: the fractions of documents with grades 0, 1, 2, 3, 4 (they set the z-quantile cuts).

  Returns:
    ``(Splits(train, valid, test), u float64[F])``.

  >>> s, u = make_lbd_synthetic(40, 10, 10, num_features=20, seed=0)
  >>> print(s.train.features.shape, int((u != 0).sum()), round(float((s.train.labels == 0).mean()), 1))
  (40, 20, 20) 15 0.5
  """
  rng = np.random.default_rng(seed)
  f = num_features
  u = np.zeros(f)
  u[rng.choice(f, size=min(num_linear, f), replace=False)] = rng.standard_normal(min(num_linear, f))
  v = rng.standard_normal((num_tanh, f)) * np.sqrt(3.0 / f)
  sizes = (num_train, num_valid, num_test)
  q = sum(sizes)
  x = rng.uniform(-1.0, 1.0, (q, list_size, f))
  z = x @ u + 0.5 * np.tanh(x @ v.T).sum(-1)
  thresholds = np.quantile(z, np.cumsum(label_fractions)[:-1])
  labels = np.searchsorted(thresholds, z, side="right").astype(np.float32)
  doc_ids = np.arange(q * list_size, dtype=np.int32).reshape(q, list_size)
  full = RankingDataset(
    features=x.astype(np.float32),
    labels=labels,
    where=np.ones((q, list_size), bool),
    qid=np.arange(q, dtype=np.int64),
    doc_ids=doc_ids,
    extras={"true_score": z.astype(np.float32)},
  )
  bounds = np.cumsum((0,) + sizes)
  return Splits(*(full.subset(np.arange(bounds[i], bounds[i + 1])) for i in range(3))), u


def select_crux_features(dataset: RankingDataset, k: int = 10, *, l2: float = 1e-3) -> np.ndarray:
  r"""The ``k`` features with the largest standardised ridge importance for the graded labels.

  .. math::
      \beta = \arg\min_\beta \lVert \tilde X \beta - (y - \bar y) \rVert^2 + l_2 N \lVert\beta\rVert^2,
      \qquad \mathrm{imp}_f = |\beta_f|

  on z-scored real documents :math:`\tilde X`. This is our offline,
  dependency-free stand-in for the paper's ExtraTrees importance (its
  settings are not given in Section 6.1). On the synthetic default it recovers the
  features with the largest linear effect on the latent score ``z`` (``u``
  plus the average slope of the ``tanh`` terms), which is not always the
  largest :math:`|u_f|`.

  Args:
    dataset: the graded training lists (padding ignored).
    k: how many features to return.
    l2: the ridge penalty :math:`l_2` (scaled by the number of documents N).

  Returns:
    ``int64[k]`` feature indices, most important first.

  >>> s, u = make_lbd_synthetic(200, 10, 10, num_features=30, seed=1)
  >>> x = s.train.features.reshape(-1, 30)
  >>> z = s.train.extras["true_score"].reshape(-1)
  >>> slope = np.linalg.lstsq(np.c_[x, np.ones(len(x))], z, rcond=None)[0][:30]
  >>> crux = select_crux_features(s.train, k=5)
  >>> print(sorted(crux.tolist()) == sorted(np.argsort(-np.abs(slope))[:5].tolist()))
  True
  """
  x = dataset.features[dataset.where].astype(np.float64)
  y = dataset.labels[dataset.where].astype(np.float64)
  if k > x.shape[1]:
    raise ValueError(f"select_crux_features: k={k} exceeds the {x.shape[1]} features")
  sd = x.std(0)
  xs = (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)
  n = xs.shape[0]
  beta = np.linalg.solve(xs.T @ xs + l2 * n * np.eye(xs.shape[1]), xs.T @ (y - y.mean()))
  imp = np.where(sd > 0, np.abs(beta), 0.0)
  return np.argsort(-imp, kind="stable")[:k]


def redraw_no_click(click_fn, *, max_draws: int = 100):
  r"""Wraps ``click_fn`` so that a list without a click is re-simulated (up to ``max_draws`` times).

  Each list's clicks follow :math:`P(c \mid c \neq 0)`, as the repo's
  ``check_validation`` loop does (the authors' code) except that the same list is
  re-drawn rather than a new query (a fixed-shape batch); all-padding lists
  are left alone. Jittable: a ``lax.while_loop`` over the whole batch.

  Args:
    click_fn: a click function ``(key, batch) -> {"clicks", ...}``.
    max_draws: the most draws per list; a list still without a click after them keeps its last draw.

  Returns:
    The wrapped ``click_fn(key, batch)``, returning the same entries.

  >>> fn = lambda key, b: {"clicks": jax.random.bernoulli(key, 0.05, b["where"].shape).astype(jnp.float32)}
  >>> out = redraw_no_click(fn)(jax.random.key(0), {"where": jnp.ones((64, 5), bool)})
  >>> print(bool(jnp.all(out["clicks"].sum(-1) > 0)))
  True
  """

  def wrapped(key, batch):
    out = dict(click_fn(key, batch))
    where = jnp.asarray(batch["where"], bool)
    has_real = jnp.any(where, axis=-1)

    def need(clicks):
      return has_real & (jnp.sum(clicks, axis=-1) == 0)

    def cond(state):
      i, clicks = state
      return (i < max_draws) & jnp.any(need(clicks))

    def body(state):
      i, clicks = state
      new = click_fn(jax.random.fold_in(key, i + 1), batch)["clicks"]
      return i + 1, jnp.where(need(clicks)[..., None], new, clicks)

    _, out["clicks"] = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), out["clicks"]))
    return out

  return wrapped


def make_individual_click_fn(
  crux_indices: Union[Sequence[int], np.ndarray],
  eta: Optional[float] = None,
  *,
  base_w: Union[Sequence[float], np.ndarray] = LBD_BASE_W,
  eps: float = 0.1,
  redraw: bool = True,
  max_draws: int = 100,
  w_key: str = "lbd_w",
):
  r"""LBD's click simulator (Section 6.1, Eq. 3): ``click_fn(key, batch) -> {"clicks", "examination", ...}``.

  .. math::
      P(C = 1 \mid x, p) = \Big(\epsilon + (1-\epsilon)\frac{2^y - 1}{15}\Big)\;
      v_p^{\max\{1 + w^\top x_{crux},\ 0\}}, \qquad w = \eta\, w_0

  with :math:`w_0` = ``base_w`` (the repo's vector over 0.1) and ``v`` the
  eye-tracking table, through :func:`ultr_jax.simulation.individual`.
  ``eta = 0`` is ULTRA's PBM exactly. With ``eta=None`` the coupling vector
  is read from ``batch[w_key]`` (``[..., D]`` per list), so one compiled
  training step serves every eta.

  Args:
    crux_indices: the crux features :math:`x_{crux}` (:func:`select_crux_features`), in ``w``'s order.
    eta: the coupling level :math:`\eta`, or None to read ``w`` from ``batch[w_key]``.
    base_w: the base coupling vector :math:`w_0`, one entry per crux feature.
    eps: the click noise :math:`\epsilon` on irrelevant documents.
    redraw: re-simulate lists without a click (:func:`redraw_no_click`).
    max_draws: the most draws per list when ``redraw``.
    w_key: the batch entry holding ``w`` when ``eta`` is None.

  Returns:
    ``click_fn(key, batch) -> {"clicks", "examination", ...}`` (jittable).

  >>> fn = make_individual_click_fn([0], 0.5, base_w=[1.0], redraw=False)
  >>> out = fn(jax.random.key(0), {"labels": jnp.array([4.0, 0.0]), "where": jnp.ones(2, bool),
  ...                              "features": jnp.array([[1.0], [-1.0]])})
  >>> print(np.round(out["examination"], 5))   # 0.68^1.5, 0.61^0.5
  [0.56074 0.78102]
  """
  crux = np.asarray([int(i) for i in crux_indices], np.int32)
  w0 = np.asarray(base_w, np.float32)
  if w0.shape != crux.shape:
    raise ValueError(f"make_individual_click_fn: base_w has {w0.shape[0]} entries for {crux.size} crux features")
  fixed_w = None if eta is None else jnp.asarray(float(eta) * w0, jnp.float32)

  def click_fn(key, batch):
    where = jnp.asarray(batch["where"], bool)
    attraction = simulation.relevance_probability(batch["labels"], eps=eps)
    w = fixed_w if fixed_w is not None else jnp.asarray(batch[w_key], jnp.float32)[..., None, :]
    # sum_i w_i x_i as (w * x) @ 1, so w may differ per list.
    scaled = jnp.asarray(batch["features"], jnp.float32)[..., crux] * w
    return simulation.individual(
      key, attraction, scaled, jnp.ones(crux.size, jnp.float32), where=where, positions=batch.get("positions")
    )

  return redraw_no_click(click_fn, max_draws=max_draws) if redraw else click_fn


def stack_click_fn(click_fn, values, *, key_name: str = "lbd_w", runs_key: str = "runs"):
  r"""``click_fn`` once per row of ``values`` (e.g. one coupling vector per eta), stacked under ``runs_key``.

  Row ``r`` simulates with ``batch[key_name] = values[r]`` (broadcast over the
  lists) and the *same* key, so run ``r`` gets exactly the clicks a separate
  run with that value would get. Pair it with
  :func:`~ultr_jax.train.methods.lbd.stack_runs`.

  Args:
    click_fn: a click function reading ``batch[key_name]`` (``make_individual_click_fn(crux, None)``).
    values: ``[R, ...]`` one value of ``batch[key_name]`` per run.
    key_name: the batch entry each row of ``values`` is set as.
    runs_key: the entry the stacked outputs are returned under.

  Returns:
    ``click_fn(key, batch) -> {runs_key: {name: [R, ...]}}``.

  >>> fn = stack_click_fn(make_individual_click_fn([0], None, base_w=[1.0], redraw=False), [[0.0], [0.5]])
  >>> b = {"labels": jnp.array([[4.0, 0.0]]), "where": jnp.ones((1, 2), bool), "features": jnp.ones((1, 2, 1))}
  >>> print(np.round(fn(jax.random.key(0), b)["runs"]["examination"][:, 0], 4))   # 0.68^1, 0.68^1.5
  [[0.68   0.61  ]
   [0.5607 0.4764]]
  """
  values = jnp.asarray(values, jnp.float32)

  def fn(key, batch):
    lead = jnp.shape(batch["where"])[:-1]

    def one(v):
      return click_fn(key, {**batch, key_name: jnp.broadcast_to(v, lead + v.shape)})

    return {runs_key: jax.vmap(one)(values)}

  return fn


# ----------------------------------------------------------------------------------------------
# The (lambda, t) grid and its selection.


def grid_members(lams: Sequence[float], ts: Sequence[float]) -> list[tuple[str, float, float]]:
  """The LBD-family runs trained together: ``(variant, lam, t)`` (the ablations of Section 6.1: LBD_Lips is
  t = 0, LBD_Ber lambda = 0, Unlimited both; the paper gives no grid for the ablations, so they share LBD's).

  Args:
    lams: the grid's gradient-penalty weights lambda.
    ts: the grid's Bernoulli dropout rates t.

  Returns:
    ``[(variant, lam, t), ...]``: Unlimited ``(0, 0)``, LBD_Lips ``(lam, 0)`` per ``lam``, LBD_Ber
    ``(0, t)`` per ``t``, LBD on every ``(lam, t)``, then ``click_data_lbd_tower`` ``(0, 1)``.

  >>> [m[0] for m in grid_members([100.0], [0.1])]
  ['unlimited', 'lbd_lips', 'lbd_ber', 'lbd', 'click_data_lbd_tower']
  """
  out = [("unlimited", 0.0, 0.0)]
  out += [("lbd_lips", float(lam), 0.0) for lam in lams]
  out += [("lbd_ber", 0.0, float(t)) for t in ts]
  out += [("lbd", float(lam), float(t)) for lam in lams for t in ts]
  out.append(("click_data_lbd_tower", 0.0, 1.0))
  return out


def select_on_validation(members, valid_scores: np.ndarray) -> dict[str, int]:
  """For every variant, the member index with the best mean validation score (first on ties).

  Args:
    members: the grid's ``(variant, lam, t)`` members (:func:`grid_members`).
    valid_scores: ``[G]`` mean validation score of every member.

  Returns:
    ``{variant: index into members}``.

  >>> members = [("lbd", 1.0, 0.1), ("lbd", 100.0, 0.1), ("unlimited", 0.0, 0.0)]
  >>> select_on_validation(members, np.array([0.5, 0.7, 0.6]))
  {'lbd': 1, 'unlimited': 2}
  """
  best: dict[str, int] = {}
  for i, (variant, _, _) in enumerate(members):
    if variant not in best or valid_scores[i] > valid_scores[best[variant]]:
      best[variant] = i
  return best


# ----------------------------------------------------------------------------------------------
# Effects.


def _paired(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
  """Mean of ``a - b`` over seeds with its 90% t-interval half-width."""
  d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
  s = summarize(d)
  return {"diff": s["mean"], "ci90": s["ci90"]}


def welch_difference(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
  """``mean(a) - mean(b)`` of two independent samples with its 90% Welch t-interval.

  For comparing rankers, whose seeds are different models (unpaired).

  Args:
    a: the first sample (one value per seed).
    b: the second sample.

  Returns:
    ``{"diff": mean(a) - mean(b), "ci90": the interval's upper half-width, "interval": [low, high]}``.

  >>> r = welch_difference([1.0, 2.0, 3.0], [0.0, 0.5, 0.2])
  >>> round(r["diff"], 4), [round(v, 4) for v in r["interval"]]
  (1.7667, [0.154, 3.3793])
  """
  x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
  ci = scipy_stats.ttest_ind(x, y, equal_var=False).confidence_interval(0.90)
  diff = float(x.mean() - y.mean())
  return {"diff": diff, "ci90": float(ci.high) - diff, "interval": [float(ci.low), float(ci.high)]}


def tied_with_best(grid_rows: Sequence[dict], variant: str = "lbd") -> Optional[list[dict]]:
  """The ``variant`` grid members whose validation score the best member's does not beat.

  A member is tied when the 90% seed-level interval of (best - member),
  paired over seeds, includes 0: validation cannot tell it from the selected
  one (E5 reads the selection's drift only where it is outside such ties).
  None when the rows carry no ``valid_per_seed``.

  Args:
    grid_rows: the ``"grid"`` rows of one ranker and eta (``variant``, ``lam``, ``t``, ``valid_per_seed``).
    variant: the variant whose members are compared.

  Returns:
    The best member first, then the tied ones: ``{"lam", "t", "valid", "behind_best", "ci90"}`` each; or
    None.

  >>> rows = [{"variant": "lbd", "lam": 1.0, "t": 0.1, "valid_per_seed": [0.90, 0.91, 0.92]},
  ...         {"variant": "lbd", "lam": 1e4, "t": 0.4, "valid_per_seed": [0.91, 0.91, 0.93]},
  ...         {"variant": "lbd", "lam": 1e2, "t": 0.4, "valid_per_seed": [0.80, 0.81, 0.82]}]
  >>> [(r["lam"], r["t"]) for r in tied_with_best(rows)]
  [(10000.0, 0.4), (1.0, 0.1)]
  """
  rows = [r for r in grid_rows if r.get("variant") == variant]
  if not rows or any("valid_per_seed" not in r for r in rows):
    return None
  best, tied = best_and_ties({i: r["valid_per_seed"] for i, r in enumerate(rows)})
  out = []
  for i in (best, *tied):
    r = rows[i]
    d = _paired(rows[best]["valid_per_seed"], r["valid_per_seed"])
    out.append(
      {
        "lam": r["lam"],
        "t": r["t"],
        "valid": float(np.mean(r["valid_per_seed"])),
        "behind_best": d["diff"],
        "ci90": d["ci90"],
      }
    )
  return out


def _per_seed(results: dict, metric: str, eta: float, ranker: str, method: str) -> list:
  """The per-seed values of ``metric`` for one cell (``ranker/method`` at coupling ``eta``)."""
  return results[_eta_key(eta)][f"{ranker}/{method}"][metric]["per_seed"]


def _effect_e1(seeds, rankers: list, etas: Sequence[float]) -> dict:
  """E1: LBD against Unlimited for every ranker at every eta >= 0.1, and (both rankers) which gap is larger."""
  e1 = {}
  for ranker in rankers:
    e1[ranker] = {
      _eta_key(e): _paired(seeds(e, ranker, "lbd"), seeds(e, ranker, "unlimited")) for e in etas if e >= 0.1 - 1e-9
    }
  holds = all(v["diff"] - v["ci90"] > 0 for r in e1.values() for v in r.values())
  gap = {r: float(np.mean([v["diff"] for v in e1[r].values()])) if e1[r] else float("nan") for r in rankers}
  out = {
    "lbd_minus_unlimited": e1,
    "mean_gap": gap,
    "holds_all_significant": bool(holds),
    "linear_gap_larger": bool(gap.get("linear", np.nan) > gap.get("dnn", np.nan)),
  }
  if len(rankers) == 2:  # the ranker order, per eta: Welch (the two rankers' seeds are different models)
    order = {
      k: welch_difference(
        np.subtract(seeds(e, "linear", "lbd"), seeds(e, "linear", "unlimited")),
        np.subtract(seeds(e, "dnn", "lbd"), seeds(e, "dnn", "unlimited")),
      )
      for e in etas
      if e >= 0.1 - 1e-9
      for k in [_eta_key(e)]
    }
    out["linear_minus_dnn_gap"] = order
    out["linear_gap_larger_significant"] = bool(order) and all(v["interval"][0] > 0 for v in order.values())
  return out


def _effect_e2(results: dict, seeds, rankers: list, etas: Sequence[float]) -> dict:
  """E2: LBD against Two-Tower, DLA and Click Data at eta = 0 (and against DLA at eta = 0.1)."""
  e2 = {}
  for ranker in rankers:
    present = [n for n in ("two_tower", "dla", "click_data") if f"{ranker}/{n}" in results[_eta_key(etas[0])]]
    e2[ranker] = (
      {name: _paired(seeds(0.0, ranker, "lbd"), seeds(0.0, ranker, name)) for name in present} if 0.0 in etas else {}
    )
    if 0.1 in etas and "dla" in present:
      e2[ranker]["eta=0.1/lbd_minus_dla"] = _paired(seeds(0.1, ranker, "lbd"), seeds(0.1, ranker, "dla"))
  return e2


def _effect_e3(results: dict, seeds, rankers: list, etas: Sequence[float]) -> dict:
  """E3: the methods against Click Data along eta, and at the largest eta."""
  e3 = {}
  top = max(etas)
  for ranker in rankers:
    if f"{ranker}/click_data" not in results[_eta_key(top)] or f"{ranker}/two_tower" not in results[_eta_key(top)]:
      continue
    curve = {
      name: [float(np.mean(seeds(e, ranker, name))) for e in etas]
      for name in ("click_data", "two_tower", "unlimited", "lbd")
    }
    at_top = {
      f"{name}_minus_click_data": _paired(seeds(top, ranker, name), seeds(top, ranker, "click_data"))
      for name in ("two_tower", "unlimited", "lbd")
    }
    lbd_ge_click = [_paired(seeds(e, ranker, "lbd"), seeds(e, ranker, "click_data")) for e in etas]
    e3[ranker] = {
      "curves": curve,
      f"at_eta={top:g}": at_top,
      "two_tower_below_click_at_top": at_top["two_tower_minus_click_data"]["diff"] < 0,
      "unlimited_below_click_at_top": at_top["unlimited_minus_click_data"]["diff"] < 0,
      "lbd_not_significantly_below_click_at_every_eta": all(v["diff"] + v["ci90"] >= 0 for v in lbd_ge_click),
      "lbd_minus_click_data": lbd_ge_click,
    }
    # Click Data on the LBD tower itself (lambda = 0, t = 1): the authors' code has the baselines share the
    # LBD network, which the foundation's rankers do not (plain linear / post-LayerNorm MLP), so
    # this is the same-architecture comparator.
    if f"{ranker}/click_data_lbd_tower" in results[_eta_key(top)]:
      same = [_paired(seeds(e, ranker, "lbd"), seeds(e, ranker, "click_data_lbd_tower")) for e in etas]
      e3[ranker]["curves"]["click_data_lbd_tower"] = [
        float(np.mean(seeds(e, ranker, "click_data_lbd_tower"))) for e in etas
      ]
      e3[ranker]["lbd_minus_click_data_lbd_tower"] = same
      e3[ranker]["lbd_not_significantly_below_same_tower_click_at_every_eta"] = all(
        v["diff"] + v["ci90"] >= 0 for v in same
      )
      e3[ranker]["unlimited_below_same_tower_click_at_top"] = bool(
        np.mean(np.subtract(seeds(top, ranker, "unlimited"), seeds(top, ranker, "click_data_lbd_tower"))) < 0
      )
  return e3


def _effect_e4(seeds, rankers: list, etas: Sequence[float]) -> dict:
  """E4: LBD, LBD-LIPS and LBD-BER against each other at every eta."""
  return {
    ranker: {
      _eta_key(e): {
        "lbd_minus_lips": _paired(seeds(e, ranker, "lbd"), seeds(e, ranker, "lbd_lips")),
        "lbd_minus_ber": _paired(seeds(e, ranker, "lbd"), seeds(e, ranker, "lbd_ber")),
        "lips_minus_ber": _paired(seeds(e, ranker, "lbd_lips"), seeds(e, ranker, "lbd_ber")),
      }
      for e in etas
    }
    for ranker in rankers
  }


def _effect_e5(results: dict, rankers: list, etas: Sequence[float]) -> dict:
  """E5: how LBD's selected lambda and t drift with eta (Spearman), with the members tied with the best."""
  e5 = {}
  for ranker in rankers:
    sel = [results[_eta_key(e)]["selected"][ranker]["lbd"] for e in etas]
    log_lam = [np.log10(max(s["lam"], 1e-12)) for s in sel]
    t = [s["t"] for s in sel]
    # scipy declares spearmanr's result as a bare tuple class (_make_tuple_bunch), without its fields
    rho_lam = scipy_stats.spearmanr(etas, log_lam).statistic if len(set(log_lam)) > 1 else 0.0  # pyright: ignore[reportAttributeAccessIssue]
    rho_t = scipy_stats.spearmanr(etas, t).statistic if len(set(t)) > 1 else 0.0  # pyright: ignore[reportAttributeAccessIssue]
    e5[ranker] = {
      "selected": {_eta_key(e): s for e, s in zip(etas, sel)},
      "spearman_eta_log10_lambda": float(rho_lam),
      "spearman_eta_t": float(rho_t),
      "drift_as_paper": bool(rho_lam < 0 and rho_t > 0),
    }
    tied = {_eta_key(e): tied_with_best(results[_eta_key(e)].get("grid", {}).get(ranker, [])) for e in etas}
    if all(v is not None for v in tied.values()):
      e5[ranker]["tied_with_best"] = tied
  return e5


def effects(results: dict, etas: Sequence[float], *, metric: str = "ndcg@10") -> dict:
  """The effects E1-E5 (the module docstring) from ``results`` (per-seed values, paired over seeds).

  A difference is "significant" when its 90% seed-level interval excludes 0.

  Args:
    results: the study's results (:func:`run_lbd_study`): ``"eta=<v>"`` -> cell -> metric summaries with
      ``per_seed``.
    etas: the swept coupling levels.
    metric: the metric the effects compare.

  Returns:
    ``{"E1": ..., ..., "E5": ...}``: each effect's differences, their 90% intervals and whether they are
    significant.
  """

  seeds = functools.partial(_per_seed, results, metric)
  rankers = [r for r in ("linear", "dnn") if f"{r}/lbd" in results[_eta_key(etas[0])]]
  return {
    "E1": _effect_e1(seeds, rankers, etas),
    "E2": _effect_e2(results, seeds, rankers, etas),
    "E3": _effect_e3(results, seeds, rankers, etas),
    "E4": _effect_e4(seeds, rankers, etas),
    "E5": _effect_e5(results, rankers, etas),
  }


def _eta_key(eta: float) -> str:
  return f"eta={float(eta):g}"


# ----------------------------------------------------------------------------------------------
# The study.


def _load(config):
  d = config.data
  if d.source == "synthetic":
    splits, u = make_lbd_synthetic(
      d.num_train, d.num_valid, d.num_test, list_size=d.list_size, num_features=d.num_features, seed=d.seed
    )
    crux = np.argsort(-np.abs(u), kind="stable")[: len(LBD_BASE_W)]
    return splits.train, splits.valid, splits.test, crux, "top-|u| of the synthetic relevance"
  from ultr_jax.studies.experiment import load_datasets  # svmlight / ultra

  train, valid, test = load_datasets(config)
  if d.get("crux_indices"):
    return train, valid, test, np.asarray(d.crux_indices), "given"
  return train, valid, test, select_crux_features(train, len(LBD_BASE_W)), "standardised ridge importance"


def prepare_lists(config: ml_collections.ConfigDict):
  """``(train, valid, test, crux, crux_how)``: the logged training lists and the evaluation lists.

  Training lists are the logging policy's top ``logging_policy.top_k`` (the
  displayed slots, as the authors' code trains). Validation and test lists keep every candidate
  in logged order: the code scores the full candidate list (not only the
  top 10) of a test/validation query, and (lambda, t) is selected on
  validation nDCG@10 with the true labels (Appendix C.2).

  Args:
    config: the study's config: ``data`` (its source, sizes and optional ``crux_indices``) and
      ``logging_policy``.

  Returns:
    ``(train, valid, test, crux, crux_how)``: the three :class:`~ultr_jax.data.RankingDataset` splits, the
    crux feature indices and how they were chosen.
  """
  train, valid, test, crux, crux_how = _load(config)
  lp = config.logging_policy
  weights = simulation.train_logging_policy(train, fraction=lp.fraction, seed=lp.seed, steps=lp.steps)
  train, valid, test = (
    simulation.apply_logging_policy(ds, simulation.logging_policy_scores(weights, ds), top_k=k)
    for ds, k in ((train, lp.top_k), (valid, None), (test, None))
  )
  return train, valid, test, crux, crux_how


def _summ(values) -> dict:
  s = summarize(values)
  return {"mean": s["mean"], "std": s["std"], "ci90": s["ci90"], "per_seed": np.asarray(values, np.float64).tolist()}


def _ranker_cfg(config, ranker) -> ml_collections.ConfigDict:
  """The ranker of ``ranker``; the baselines use the LBD code's layout (the baseline Linear is
  LayerNorm then dense, the baseline DNN has a LayerNorm, eps 1e-3, before every dense layer), unless
  ``config.baseline_norm == "after"`` (the foundation's rankers)."""
  norm = {"norm_position": config.get("baseline_norm", "before"), "ln_epsilon": 1e-3}
  if ranker == "linear":
    return ml_collections.ConfigDict({"ranker": "linear", **norm})
  return ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": tuple(config.dnn_hidden_sizes), **norm})


def _train_cfg(config, ranker) -> ml_collections.ConfigDict:
  t = ml_collections.ConfigDict(config.train.to_dict())
  opt = config.optimizers[ranker]
  t.optimizer, t.learning_rate, t.grad_clip = opt.optimizer, opt.learning_rate, opt.grad_clip
  return t


def _flat_runs(tree: Any, lead: int) -> Any:
  """Merges the ``lead`` leading axes of every leaf into one run axis."""
  return jax.tree.map(lambda x: np.reshape(np.asarray(x), (-1,) + np.shape(x)[lead:]), tree)


def _evaluate_runs(
  method, params, dataset: RankingDataset, lead_shape: Sequence[int], *, budget: int = 20000
) -> dict[str, np.ndarray]:
  """``evaluate`` of every run of ``params`` (leading axes ``lead_shape``) in one jitted pass per chunk.

  Returns metrics shaped ``lead_shape``. ``budget`` caps runs x queries per chunk (memory).
  """
  lead_shape = tuple(int(v) for v in lead_shape)
  n = int(np.prod(lead_shape))
  chunk = int(max(8, min(512, budget // max(n, 1))))
  m = evaluate(method, _flat_runs(params, len(lead_shape)), dataset, batch_size=chunk)
  return {k: np.asarray(v).reshape(lead_shape) for k, v in m.items()}


class _Sweep(NamedTuple):
  """What every cell of one LBD eta sweep shares (built once by :func:`run_lbd_study`)."""

  config: ml_collections.ConfigDict
  train: RankingDataset
  valid: RankingDataset
  test: RankingDataset
  seeds: list
  members: list
  etas: list
  click_fn: Any
  ws: np.ndarray
  eta_click_fn: Any


def _keep(fits: Optional[dict], name: str, res) -> None:
  """Notes ``res``'s diverged seeds and fingerprint for :func:`~ultr_jax.train.write_results` (not its params)."""
  if fits is not None:
    fits[name] = res._replace(params=None, extra=None, final_params=None, history=[])


def _baseline_job(sweep: _Sweep, ranker: str, name: str, fits: Optional[dict] = None) -> dict:
  """One baseline ``name`` under ``ranker`` at every eta (one stacked fit): ``eta key -> {cell: metrics}``."""
  config, train, test, seeds, etas = sweep.config, sweep.train, sweep.test, sweep.seeds, sweep.etas
  n_eta, n_seed = len(etas), len(seeds)
  tcfg, rcfg = _train_cfg(config, ranker), _ranker_cfg(config, ranker)
  method = get_method(BASELINES[name], rcfg, num_features=train.num_features, list_size=train.list_size)
  if name == "labeled_data":  # trained on the labels: the same model at every eta
    res = fit(method, train, None, click_fn=None, config=tcfg, seeds=seeds, name=f"{name}[{ranker}]")
    _keep(fits, f"{name}[{ranker}]", res)
    m = _evaluate_runs(method, res.params, test, (n_seed,))
    cell = {k: _summ(m[k]) for k in METRICS}
    return {_eta_key(e): {f"{ranker}/{name}": cell} for e in etas}
  stacked = stack_runs(method, n_eta, optimizer=method.optimizer or make_optimizer(tcfg))
  res = fit(stacked, train, None, click_fn=sweep.eta_click_fn, config=tcfg, seeds=seeds, name=f"{name}[{ranker}]")
  _keep(fits, f"{name}[{ranker}]", res)
  m = _evaluate_runs(method, res.params, test, (n_seed, n_eta))
  return {_eta_key(e): {f"{ranker}/{name}": {k: _summ(m[k][:, i]) for k in METRICS}} for i, e in enumerate(etas)}


def _grid_config(sweep: _Sweep, ranker: str) -> tuple[ml_collections.ConfigDict, ml_collections.ConfigDict]:
  """The LBD tower's ranker config of ``ranker`` and the ``(lambda, t)`` grid's config built on it."""
  config, members = sweep.config, sweep.members
  tcfg = _train_cfg(config, ranker)
  # The LBD tower's ranker fields (the baselines' LayerNorm layout, norm_position and ln_epsilon, is not its).
  rcfg = ml_collections.ConfigDict({k: v for k, v in _ranker_cfg(config, ranker).items() if k in LBD_DEFAULTS})
  gcfg = ml_collections.ConfigDict(
    {
      **rcfg.to_dict(),
      "lams": [m[1] for m in members],
      "ts": [m[2] for m in members],
      "keep": config.keep,
      "gp_mode": config.gp_mode,
      "optimizer": tcfg.optimizer,
      "skip_zero_lambda_gp": config.get("skip_zero_lambda_gp", True),
      "learning_rate": tcfg.learning_rate,
      "grad_clip": tcfg.grad_clip,
    }
  )
  return rcfg, gcfg


def _grid_entry(sweep: _Sweep, ranker: str, i: int, valid_m: dict, test_m: dict) -> dict:
  """The cells, ``"selected"`` and ``"grid"`` of ``ranker``'s grid at the ``i``-th eta of its chunk."""
  members, select_metric = sweep.members, sweep.config.select_metric
  vscore = valid_m[select_metric][:, i, :].mean(0)
  chosen = select_on_validation(members, vscore)
  entry: dict[str, Any] = {
    f"{ranker}/{variant}": {k: _summ(test_m[k][:, i, g]) for k in METRICS} for variant, g in chosen.items()
  }
  entry["selected"] = {
    ranker: {
      v: {"lam": members[g][1], "t": members[g][2]} for v, g in chosen.items() if v in ("lbd", "lbd_lips", "lbd_ber")
    }
  }
  entry["grid"] = {
    ranker: [
      {
        "variant": v,
        "lam": lam,
        "t": t,
        "valid": float(vscore[g]),
        "valid_per_seed": valid_m[select_metric][:, i, g].tolist(),
        "test": float(np.mean(test_m["ndcg@10"][:, i, g])),
      }
      for g, (v, lam, t) in enumerate(members)
    ]
  }
  return entry


def _grid_job(sweep: _Sweep, ranker: str, chunk: tuple, fits: Optional[dict] = None) -> dict:
  """The (lambda, t) grid of ``ranker`` for the etas ``chunk`` (indices into ``etas``)."""
  train, etas = sweep.train, sweep.etas
  tcfg = _train_cfg(sweep.config, ranker)
  rcfg, gcfg = _grid_config(sweep, ranker)
  grid = make_lbd_grid(gcfg, num_features=train.num_features, list_size=train.list_size)
  assert grid.optimizer is not None  # make_lbd_grid's Method always carries its optimizer
  stacked = stack_runs(grid, len(chunk), optimizer=grid.optimizer)
  res = fit(
    stacked,
    train,
    None,
    click_fn=stack_click_fn(sweep.click_fn, sweep.ws[list(chunk)]),
    config=tcfg,
    seeds=sweep.seeds,
    name=f"lbd_grid[{ranker}, eta={','.join(f'{etas[i]:g}' for i in chunk)}]",
  )
  _keep(fits, f"lbd_grid[{ranker}, eta={','.join(f'{etas[i]:g}' for i in chunk)}]", res)
  single = make_lbd(rcfg, num_features=train.num_features, list_size=train.list_size)
  runs = {"tower": res.params["towers"]}  # leaves [S, E, G, ...]
  lead = (len(sweep.seeds), len(chunk), len(sweep.members))
  valid_m = _evaluate_runs(single, runs, sweep.valid, lead)
  test_m = _evaluate_runs(single, runs, sweep.test, lead)
  return {_eta_key(etas[j]): _grid_entry(sweep, ranker, i, valid_m, test_m) for i, j in enumerate(chunk)}


def _sweep_jobs(config: ml_collections.ConfigDict, n_eta: int) -> tuple[list, list]:
  """The sweep's eta chunks and its jobs ``(ranker, "lbd_grid" or baseline, eta indices)`` in run order."""
  # The grids first (the longest cells, the DNN's before the Linear's; ``grid_etas_per_job`` etas
  # each, so the worker threads share them), then the baselines. Chunking does not change a
  # number: each eta is its own run.
  per_job = int(config.get("grid_etas_per_job", 0)) or n_eta
  chunks = [tuple(range(i, min(i + per_job, n_eta))) for i in range(0, n_eta, per_job)]
  jobs = [(r, "lbd_grid", c) for r in sorted(config.rankers, key=lambda r: r == "linear") for c in chunks]
  jobs += [(r, n, tuple(range(n_eta))) for r in config.rankers for n in config.baselines]
  return chunks, jobs


def _run_job(
  sweep: _Sweep, job: tuple, num_chunks: int, jobs: list, timings: dict, t_start: float, fits: Optional[dict] = None
) -> dict:
  """Runs one job of :func:`_sweep_jobs`, records its time in ``timings`` (and its fits in ``fits``) and logs it."""
  ranker, name, chunk = job
  t0 = time.perf_counter()
  if name == "lbd_grid":
    out = _grid_job(sweep, ranker, chunk, fits)
  else:
    out = _baseline_job(sweep, ranker, name, fits)
  label = f"{ranker}/{name}" + (
    f"[eta={','.join(f'{sweep.etas[i]:g}' for i in chunk)}]" if num_chunks > 1 and name == "lbd_grid" else ""
  )
  timings[label] = time.perf_counter() - t0
  elapsed, done = time.perf_counter() - t_start, len(timings)  # jobs finished so far (the threads share them)
  logging.info(
    f"[lbd study] {label}: {len(chunk)} etas in {timings[label]:.0f}s "
    f"(done at {elapsed:.0f}s, job {jobs.index(job) + 1} of {len(jobs)}; {done} of {len(jobs)} finished, "
    f"~{elapsed / done * (len(jobs) - done):.0f}s left)"
  )
  return out


def _merge_jobs(config: ml_collections.ConfigDict, etas: list, jobs: list, outs: list) -> dict[str, Any]:
  """The jobs' outputs as ``eta key -> cells`` (plus ``"selected"``, ``"grid"``), in ranker/method order."""
  results: dict[str, Any] = {_eta_key(e): {"selected": {}, "grid": {}} for e in etas}
  order = {
    j: i for i, j in enumerate([(r, n) for r in config.rankers for n in tuple(config.baselines) + ("lbd_grid",)])
  }
  for job, out in sorted(zip(jobs, outs), key=lambda jo: (order[jo[0][:2]], jo[0][2])):
    for key, cells in out.items():
      for k, v in cells.items():
        if k in ("selected", "grid"):
          results[key][k].update(v)
        else:
          results[key][k] = v
  return results


def run_lbd_study(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict:
  """Runs the eta sweep of ``config`` (:func:`default_config`) and writes its outputs.

  Every ``(ranker, method)`` cell is *one* :func:`~ultr_jax.train.fit` over all etas at once: the
  coupling vector of each eta is a stacked run (:func:`stack_click_fn` +
  :func:`~ultr_jax.train.methods.lbd.stack_runs`), so each run sees exactly the clicks, batches,
  initialisation and loss keys that a separate fit per eta with the same seed would see, and the
  whole sweep compiles one training step per cell. Labeled Data ignores the clicks and is trained
  once. The ``(lambda, t)`` grid is one vmapped :func:`~ultr_jax.train.methods.lbd.make_lbd_grid`
  per ranker; all its members, etas and seeds are evaluated in one pass per split, and
  ``(lambda, t)`` is chosen per eta and variant on validation ``select_metric`` (true labels, as
  Appendix C.2). ``config.workers`` cells run concurrently (threads; JAX releases the GIL while compiling
  and running).

  Args:
    config: the study's config (:func:`default_config`): ``data``, ``etas``, ``rankers``, ``baselines``,
      the grid's ``lams`` and ``ts``, ``num_seeds``, ``seed``, ``workers``; its values are checked against
      ``CONFIG_RULES`` before any work.
    workdir: the output directory (``results.json``, the Table 1 Markdown, the figures), or None to write
      nothing.

  Returns:
    The ``results.json`` mapping: ``"eta=<v>"`` -> ``"<ranker>/<method>"`` -> metric ->
    ``{"mean", "std", "ci90", "per_seed"}``, plus ``"selected"`` ((lambda, t) per ranker and variant)
    and ``"grid"`` (validation/test nDCG@10 of every grid member) per eta; ``"_effects"`` and ``"_meta"``.
  """
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  t_start = time.perf_counter()
  c_start = time.process_time()
  train, valid, test, crux, crux_how = prepare_lists(config)
  seeds = [int(config.seed) + i for i in range(int(config.num_seeds))]
  members = grid_members(config.lams, config.ts)
  etas = [float(e) for e in config.etas]
  enable_compilation_cache(config.get("compilation_cache_dir", ""), workdir)
  click_fn = make_individual_click_fn(crux, None, max_draws=int(config.max_redraws))
  ws = np.stack([np.float32(eta) * LBD_BASE_W.astype(np.float32) for eta in etas])
  eta_click_fn = stack_click_fn(click_fn, ws)
  sweep = _Sweep(config, train, valid, test, seeds, members, etas, click_fn, ws, eta_click_fn)
  chunks, jobs = _sweep_jobs(config, len(etas))
  timings: dict[str, float] = {}
  fits: dict[str, Any] = {}  # each job writes its own keys (from its thread)
  run_job = functools.partial(
    _run_job, sweep, num_chunks=len(chunks), jobs=jobs, timings=timings, t_start=t_start, fits=fits
  )
  workers = max(1, int(config.get("workers", 1)))
  if workers == 1:
    outs = [run_job(j) for j in jobs]
  else:
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
      outs = list(pool.map(run_job, jobs))
  results = _merge_jobs(config, etas, jobs, outs)
  results["_effects"] = effects(results, etas)
  results["_meta"] = {
    "crux_indices": np.asarray(crux).tolist(),
    "crux_selection": crux_how,
    "base_w": LBD_BASE_W.tolist(),
    "seeds": seeds,
    "members": members,
    "config": config.to_dict(),
    "timings": timings,
    "seconds": time.perf_counter() - t_start,
    "process_cpu_seconds": time.process_time() - c_start,
  }
  table = table_1(results, etas, config.table_eta) + e5_ties_text(results["_effects"])
  logging.info(table)
  logging.info(json.dumps({k: results["_effects"][k] for k in ("E1", "E5")}, indent=1, default=float)[:4000])
  if workdir is not None:
    os.makedirs(workdir, exist_ok=True)
    write_results(workdir, results, table=table, fits=fits)
    plot_figures(results, etas, config, workdir)
  logging.info(f"total time {time.perf_counter() - t_start:.1f}s")
  return results


def e5_ties_text(effects_out: dict) -> str:
  """Markdown lines: per ranker and eta, the LBD (lambda, t) validation cannot tell from the selected one.

  >>> print(e5_ties_text({"E5": {"dnn": {"tied_with_best": {"eta=0.1": [{"lam": 1e4, "t": 0.4},
  ...                                                                  {"lam": 1.0, "t": 0.1}]}}}}))
  <BLANKLINE>
  E5, LBD (lambda, t) tied with the selected one on validation (paired 90% interval includes 0):
  - dnn eta=0.1: (10000, 0.4)*, (1, 0.1)
  """
  lines = []
  for ranker, e5 in effects_out.get("E5", {}).items():
    for key, rows in e5.get("tied_with_best", {}).items():
      members = ", ".join(f"({r['lam']:g}, {r['t']:g})" + ("*" if i == 0 else "") for i, r in enumerate(rows))
      lines.append(f"- {ranker} {key}: {members}")
  if not lines:
    return ""
  return (
    "\nE5, LBD (lambda, t) tied with the selected one on validation (paired 90% interval includes 0):\n"
    + "\n".join(lines)
  )


def table_1(results: dict, etas: Sequence[float], eta: float) -> str:
  """The Table 1/4 analogue at ``eta``: nDCG@1/3/5/10 and ERR@10, mean ± 90% CI over seeds (Markdown)."""
  key = _eta_key(eta if eta in etas else etas[min(1, len(etas) - 1)])
  entry = results[key]
  lines = [
    f"Table 1 analogue at {key} (test; mean ± 90% t-interval over seeds)",
    "",
    "| ranker | method | " + " | ".join(METRICS) + " |",
    "|---|---|" + "---|" * len(METRICS),
  ]
  for ranker in ("dnn", "linear"):
    for name in METHOD_ORDER:
      k = f"{ranker}/{name}"
      if k not in entry:
        continue
      cells = [f"{entry[k][m]['mean']:.4f} ± {entry[k][m]['ci90']:.4f}" for m in METRICS]
      lines.append(f"| {ranker} | {name} | " + " | ".join(cells) + " |")
  sel = entry.get("selected", {})
  lines.append("")
  lines.append("Selected (lambda, t) on validation: " + json.dumps(sel))
  return "\n".join(lines) + "\n"


def plot_figures(results: dict, etas: Sequence[float], config, workdir: str) -> list[str]:
  """Figure 3(a)/(b) analogues (nDCG@10 against eta) and Figure 4 heat maps ((lambda, t) per eta), as PNGs."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  written = []

  def save(fig, name):
    path = os.path.join(workdir, name)
    save_figure(fig, path, bbox_inches="tight")
    written.append(path)

  for ranker in config.rankers:
    for fig_name, names in (("fig3a", METHOD_ORDER), ("fig3b", ("click_data",) + LBD_FAMILY)):
      fig, ax = plt.subplots(figsize=(6.5, 4.2))
      for name in names:
        if name == "labeled_data":
          continue
        k = f"{ranker}/{name}"
        if k not in results[_eta_key(etas[0])]:
          continue
        mean = np.array([results[_eta_key(e)][k]["ndcg@10"]["mean"] for e in etas])
        ci = np.array([results[_eta_key(e)][k]["ndcg@10"]["ci90"] for e in etas])
        style = "-" if name in LBD_FAMILY else "--"
        ax.plot(etas, mean, style, marker="o", ms=3, label=name)
        ax.fill_between(etas, mean - ci, mean + ci, alpha=0.15)
      ax.set_xlabel("coupling level eta")
      ax.set_ylabel("test nDCG@10")
      ax.set_title(f"{fig_name} analogue ({ranker})")
      ax.legend(fontsize=7, ncol=2)
      save(fig, f"{fig_name}_{ranker}.png")
    lams = [0.0] + [float(v) for v in config.lams]
    ts = [0.0] + [float(v) for v in config.ts]
    fig, axes = plt.subplots(1, len(etas), figsize=(2.6 * len(etas), 2.8), squeeze=False)
    for ax, e in zip(axes[0], etas):
      grid = results[_eta_key(e)]["grid"][ranker]
      heat = np.full((len(lams), len(ts)), np.nan)
      for row in grid:
        if row["lam"] in lams and row["t"] in ts:
          heat[lams.index(row["lam"]), ts.index(row["t"])] = row["valid"]
      im = ax.imshow(heat, cmap="viridis", origin="lower", aspect="auto")
      ax.set_xticks(range(len(ts)), [f"{t:g}" for t in ts], fontsize=6)
      ax.set_yticks(range(len(lams)), [f"{lam:g}" for lam in lams], fontsize=6)
      ax.set_xlabel("t", fontsize=7)
      ax.set_ylabel("lambda", fontsize=7)
      ax.set_title(f"eta={e:g}", fontsize=8)
      sel = results[_eta_key(e)]["selected"][ranker]["lbd"]
      ax.plot(ts.index(sel["t"]), lams.index(sel["lam"]), "r*", ms=8)
      fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"Figure 4 analogue: validation nDCG@10 over (lambda, t), {ranker}; * = selected", fontsize=9)
    save(fig, f"fig4_{ranker}.png")
  return written


run = run_lbd_study
