r"""The ULTR methods since 2023, each paper's claim run as a stated hypothesis on simulated data.

Six experiments (``config.claims``), on the synthetic generator's lists (graded labels 0-4 from a random MLP of
the features) or any SVMlight/ULTRA data, every number a mean over ``num_seeds`` seeds with its 90% t-interval:

1. ``dr_vs_ips`` (Oosterhuis, TOIS'23): fixed logs of :math:`N` sessions of a logger's top-k under trust bias
   (ULTRA's ``trust`` click model); naive, IPS (the affine correction: IPS for trust bias) and DR LTR, test
   nDCG@10 against :math:`N`. *Hypothesis*: DR reaches its plateau with far fewer sessions than IPS.
2. ``safety`` (Gupta et al., SIGIR'23 and CIKM'24): logs of 100 and 1000 sessions of a mediocre logger
   (:math:`w = 0.5`, below) under PBM clicks, truthful and adversarial (clicks from the inverted labels
   :math:`4 - y`); the logger, DR, safe DR and PRPO (the policies start from a random tower, not from the
   logger; PRPO's clip pushes back every document whose exposure exceeds :math:`1 + \epsilon` times the logger's).
   *Hypotheses*: safe DR and PRPO are never worse than the logger at small :math:`N`; PRPO is at least as good
   as safe DR; under adversarial clicks PRPO stays near the logger where safe DR does not.
3. ``disentangle`` (Zhang et al., KDD'23): the logged ranking sorts :math:`w y + (1 - w) U(0, 4)`, clicks
   :math:`P = (1/k)(0.1 + 0.9 (2^y - 1) / 15)` (PBM, :math:`\eta = 1`); the additive two-tower model with
   nothing, observation dropout, gradient reversal, both; test nDCG@5. *Hypothesis*: the plain two-tower
   model degrades as :math:`w \to 1` and both fixes recover it.
4. ``upe_vs_dla`` (Luo et al., SIGIR'24): the same logs at a weak and a strong logger; DLA and UPE; nDCG@5 and the
   learned propensities' error. *Hypothesis*: UPE is about DLA under a weak logger and better under a strong one.
5. ``identifiability`` (Hager et al., ICTIR'25): the feature-overlap condition of each log
   (:func:`~ultr_jax.graph.check_feature_overlap`, and the document graph's), the two-tower model with a linear
   (misspecified: the truth is an MLP) and an MLP relevance tower, with and without balancing weights, across
   logger strengths. *Hypotheses*: the logger adds no bias to the well-specified model; it hurts the
   misspecified one as it strengthens; weighting mitigates that.
6. ``loss_grid`` (Hager et al., SIGIR'24): on one fixed log, loss family (pointwise, listwise, LambdaRank) by
   correction (naive, IPS, DLA, two-tower, PairD, DR) where the library has the pair; test nDCG@10 and, for the
   methods that are click models, held-out click log-likelihood. *Hypothesis*: the loss family moves nDCG more
   than the correction does.

Every fixed log is simulated once per experiment (:func:`fixed_log`) and trained on for ``config.train.steps``
steps; the table rows are written to ``results.json`` and ``table.md`` with each hypothesis's verdict as
measured (a claim that does not reproduce is reported, never tuned), and the sweeps drawn as PNGs
(:func:`write_figures`, which also draws them from a saved ``results.json``).
"""

import os
import re
import time
from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import rax

from ultr_jax import graph, losses, simulation
from ultr_jax._schema import validate_config
from ultr_jax.studies._progress import Progress
from ultr_jax.studies.configs.since2023 import CLAIMS, CONFIG_RULES, VARIANTS, default_config
from ultr_jax.studies.experiment import load_datasets
from ultr_jax.studies.figures import save_figure
from ultr_jax.studies.tables import summarize_metrics
from ultr_jax.train import get_method
from ultr_jax.train.evaluation import evaluate, evaluate_clicks
from ultr_jax.train.loop import fit
from ultr_jax.train.results import markdown_table, write_results

__all__ = [
  "CLAIMS",
  "CONFIG_RULES",
  "VARIANTS",
  "default_config",
  "fixed_log",
  "noisy_logger",
  "run",
  "write_figures",
]

#: The click models: ULTRA's trust bias for DR, the KDD'23 reproduction's PBM for the rest.
TRUST = {"name": "trust"}
PBM = {"name": "pbm", "eta": 1.0, "eps": 0.1}


def noisy_logger(ds, weight: float, *, seed: int, top_k: Optional[int]):
  r"""The lists ordered by :math:`w y + (1 - w) U(0, 4)` (KDD'23 reproduction's logger), cut to ``top_k``.

  >>> from ultr_jax import data
  >>> ds = data.make_synthetic(num_train=4, num_valid=1, num_test=1, list_size=5, num_features=2).train
  >>> shown = noisy_logger(ds, 1.0, seed=0, top_k=3)
  >>> bool(np.all(np.diff(shown.labels, axis=1) <= 0)), shown.list_size
  (True, 3)
  """
  rng = np.random.default_rng(seed)
  scores = weight * ds.labels + (1.0 - weight) * rng.uniform(0.0, 4.0, ds.labels.shape)
  scores = np.where(ds.where, scores, -np.inf)
  return simulation.apply_logging_policy(ds, scores, top_k=top_k)


def fixed_log(ds, click_model, num_sessions: int, *, seed: int, click_labels=None):
  """A log of ``num_sessions`` sessions on lists drawn uniformly from ``ds``, clicks simulated once.

  The sessions' clicks and the simulator's oracle entries (``examination``, ``eps_plus``, ``eps_minus``) become
  extras, so a method trains on this log as on logged data. ``click_labels`` (default the labels) drive the
  clicks: the adversarial log passes the inverted labels.

  >>> from ultr_jax import data
  >>> ds = data.make_synthetic(num_train=4, num_valid=1, num_test=1, list_size=3, num_features=2).train
  >>> log = fixed_log(ds, PBM, 10, seed=0)
  >>> log.num_queries, sorted(set(log.extras) - set(ds.extras))
  (10, ['clicks', 'examination'])
  """
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, ds.num_queries, int(num_sessions))
  log = ds.subset(idx)
  labels = log.labels if click_labels is None else np.asarray(click_labels)[idx]
  click_fn = jax.jit(simulation.make_click_fn(click_model))
  out = click_fn(jax.random.key(seed), {"labels": jnp.asarray(labels), "where": jnp.asarray(log.where)})
  keep = ("clicks", "examination", "eps_plus", "eps_minus")
  return log.with_extras(**{k: np.asarray(v, np.float32) for k, v in out.items() if k in keep})


def _method_config(config, overrides):
  base = dict(config.ranker.to_dict())
  base["hidden_sizes"] = tuple(base["hidden_sizes"])
  return {**base, **overrides}


def _train_cell(config, name, overrides, train, valid, test, *, held=None) -> tuple[dict, dict]:
  """Fits one method over the seeds on ``train`` (logged clicks) and summarises its test metrics."""
  method = get_method(
    name, _method_config(config, overrides), num_features=train.num_features, list_size=train.list_size
  )
  seeds = [config.seed + i for i in range(config.num_seeds)]
  result = fit(method, train, valid, config=config.train, seeds=seeds)
  metrics = evaluate(method, result.params, test)
  columns = ["ndcg@5", "ndcg@10"]
  if held is not None and method.click_logits is not None:
    metrics.update(evaluate_clicks(method, result.params, result.extra, held))
    columns.append("click_ll")
  if method.propensities is not None:
    learned = np.asarray(jax.vmap(method.propensities)(result.params, result.extra))[:, : train.list_size]
    truth = 1.0 / np.arange(1, learned.shape[1] + 1)  # the PBM's 1/k (relative to position 1)
    metrics["prop_err"] = np.mean(np.abs(np.log(np.clip(learned, 1e-6, None)) - np.log(truth)), axis=1)
    columns.append("prop_err")
  return summarize_metrics(metrics, columns)


def _logger_cell(config, shown_test) -> tuple[dict, dict]:
  """The logging policy's own test metrics (its order, the same for every seed)."""
  pos = -np.arange(shown_test.list_size, dtype=np.float32)
  scores = jnp.broadcast_to(pos, shown_test.labels.shape)
  vals = {
    f"ndcg@{k}": float(
      rax.ndcg_metric(scores, jnp.asarray(shown_test.labels), where=jnp.asarray(shown_test.where), topn=k)
    )
    for k in (5, 10)
  }
  return summarize_metrics({k: [v] * config.num_seeds for k, v in vals.items()}, list(vals))


def _mean(row, col):
  cell = row.get(col)
  return float("nan") if not isinstance(cell, dict) else float(cell["mean"])


def _dr_vs_ips(config, train, valid, test):
  shown = noisy_logger(train, 0.5, seed=config.seed, top_k=config.top_k)
  shown_valid = noisy_logger(valid, 0.5, seed=config.seed + 1, top_k=config.top_k)
  valid_log = fixed_log(shown_valid, TRUST, shown_valid.num_queries, seed=config.seed + 1)
  entries, rows = {}, {}
  for n in config.dr_vs_ips.sessions:
    log = fixed_log(shown, TRUST, n, seed=config.seed + n)
    tau = losses.dr_clip_threshold(n)
    for label, name, over in (
      ("naive", "naive", {}),
      ("IPS (affine)", "affine", {}),
      ("DR", "dr_ltr", {"treatment": "trust", "dr_tau": tau}),
    ):
      key = f"N={n} {label}"
      entries[key], rows[key] = _train_cell(config, name, over, log, valid_log, test)
  sessions = list(config.dr_vs_ips.sessions)
  dr = [_mean(rows[f"N={n} DR"], "ndcg@10") for n in sessions]
  ips = [_mean(rows[f"N={n} IPS (affine)"], "ndcg@10") for n in sessions]
  verdict = (
    f"DR - IPS nDCG@10 at N = {', '.join(map(str, sessions))}: "
    + ", ".join(f"{d - i:+.4f}" for d, i in zip(dr, ips))
    + (
      "; DR ahead at the smallest N (supports the claim)"
      if dr[0] > ips[0]
      else "; DR not ahead at the smallest N (the claim is not reproduced here)"
    )
  )
  return entries, rows, ["ndcg@5", "ndcg@10"], verdict


def _safety(config, train, valid, test):
  w = float(config.safety.logger_weight)
  shown = noisy_logger(train, w, seed=config.seed, top_k=config.top_k)
  shown_valid = noisy_logger(valid, w, seed=config.seed + 1, top_k=config.top_k)
  shown_test = noisy_logger(test, w, seed=config.seed + 2, top_k=None)
  valid_log = fixed_log(shown_valid, PBM, shown_valid.num_queries, seed=config.seed + 1)
  entries, rows = {}, {}
  entries["logger"], rows["logger"] = _logger_cell(config, shown_test)
  s = config.safety
  methods = (
    ("DR", "dr_ltr", {}),
    ("safe DR", "safe_dr", {"delta": s.delta}),
    ("PRPO", "prpo", {"epsilon": s.epsilon}),
  )
  for clicks in ("true", "adversarial"):
    inverted = 4.0 - shown.labels if clicks == "adversarial" else None
    for n in s.sessions:
      log = fixed_log(shown, PBM, n, seed=config.seed + n, click_labels=inverted)
      for label, name, over in methods:
        if name == "safe_dr":
          over = {**over, "num_sessions": float(n)}
        key = f"{clicks} N={n} {label}"
        entries[key], rows[key] = _train_cell(config, name, over, log, valid_log, test)
  base = _mean(rows["logger"], "ndcg@10")
  parts = []
  for key in rows:
    if key != "logger":
      parts.append(f"{key}: {_mean(rows[key], 'ndcg@10') - base:+.4f}")
  verdict = "nDCG@10 minus the logger's: " + "; ".join(parts)
  return entries, rows, ["ndcg@5", "ndcg@10"], verdict


def _logger_logs(config, train, valid, w):
  shown = noisy_logger(train, w, seed=config.seed, top_k=config.top_k)
  shown_valid = noisy_logger(valid, w, seed=config.seed + 1, top_k=config.top_k)
  n = 10 * shown.num_queries
  return shown, fixed_log(shown, PBM, n, seed=config.seed), fixed_log(shown_valid, PBM, shown_valid.num_queries, seed=1)


def _disentangle(config, train, valid, test):
  p = float(config.disentangle.dropout)
  variants = (
    ("two-tower", {"observation_dropout": 0.0, "adversary_weight": 0.0}),
    ("+ dropout", {"observation_dropout": p, "adversary_weight": 0.0}),
    ("+ gradient reversal", {"observation_dropout": 0.0, "adversary_weight": 1.0}),
    ("+ both", {"observation_dropout": p, "adversary_weight": 1.0}),
  )
  entries, rows = {}, {}
  for w in config.disentangle.weights:
    _, log, valid_log = _logger_logs(config, train, valid, w)
    for label, over in variants:
      key = f"w={w:g} {label}"
      entries[key], rows[key] = _train_cell(config, "two_tower_disentangled", over, log, valid_log, test)
  ws = list(config.disentangle.weights)
  plain = [_mean(rows[f"w={w:g} two-tower"], "ndcg@5") for w in ws]
  both = [_mean(rows[f"w={w:g} + both"], "ndcg@5") for w in ws]
  degrades = plain[-1] < plain[0]
  verdict = (
    f"plain two-tower nDCG@5 from w={ws[0]:g} to w={ws[-1]:g}: {plain[0]:.4f} -> {plain[-1]:.4f} "
    + ("(degrades, as claimed)" if degrades else "(no degradation: the claim is not reproduced here)")
    + f"; both fixes at w={ws[-1]:g}: {both[-1] - plain[-1]:+.4f}"
  )
  return entries, rows, ["ndcg@5", "ndcg@10", "prop_err"], verdict


def _upe_vs_dla(config, train, valid, test):
  entries, rows = {}, {}
  for w in config.upe_vs_dla.weights:
    _, log, valid_log = _logger_logs(config, train, valid, w)
    for label, name in (("DLA", "dla"), ("UPE", "upe")):
      key = f"w={w:g} {label}"
      entries[key], rows[key] = _train_cell(config, name, {}, log, valid_log, test)
  parts = [
    f"w={w:g}: UPE - DLA nDCG@5 {_mean(rows[f'w={w:g} UPE'], 'ndcg@5') - _mean(rows[f'w={w:g} DLA'], 'ndcg@5'):+.4f}"
    for w in config.upe_vs_dla.weights
  ]
  return entries, rows, ["ndcg@5", "ndcg@10", "prop_err"], "; ".join(parts)


def _identifiability(config, train, valid, test):
  entries, rows = {}, {}
  notes = []
  for w in config.identifiability.weights:
    shown, log, valid_log = _logger_logs(config, train, valid, w)
    positions = np.broadcast_to(np.arange(shown.list_size), shown.where.shape)
    overlap = graph.check_feature_overlap(
      shown.features, positions, where=shown.where, num_bins=config.identifiability.num_bins
    )
    doc_ids, _ = graph.feature_vector_ids(shown.features, shown.where)
    docs = graph.check_identifiability(np.where(doc_ids >= 0, doc_ids, 0), positions, where=doc_ids >= 0)
    notes.append(
      f"w={w:g}: feature overlap {overlap.num_components} component(s), document graph {docs.num_components}"
    )
    for ranker in ("linear", "mlp"):
      for label, name in (("two-tower", "two_tower"), ("weighted", "two_tower_weighted")):
        key = f"w={w:g} {ranker} {label}"
        entries[key], rows[key] = _train_cell(config, name, {"ranker": ranker}, log, valid_log, test)
  return entries, rows, ["ndcg@5", "ndcg@10", "prop_err"], "; ".join(notes)


# The grid's cells: (loss family, correction) -> (method, its settings); a missing pair is "n/a".
GRID = {
  ("pointwise", "naive"): ("naive", {"loss_type": "pointwise"}),
  ("pointwise", "IPS"): ("ips", {"loss_type": "pointwise"}),
  ("pointwise", "two-tower"): ("two_tower", {}),
  ("listwise", "naive"): ("naive", {}),
  ("listwise", "IPS"): ("ips", {}),
  ("listwise", "DLA"): ("dla", {}),
  ("listwise", "DR"): ("dr_ltr", {}),
  ("lambdarank", "naive"): ("naive", {"loss_type": "lambdarank"}),
  ("lambdarank", "IPS"): ("ips", {"loss_type": "lambdarank"}),
  ("lambdarank", "PairD"): ("paird", {}),
}


def _loss_grid(config, train, valid, test):
  shown, _, valid_log = _logger_logs(config, train, valid, 0.6)
  g = config.loss_grid
  log = fixed_log(shown, PBM, g.sessions, seed=config.seed + 7)
  held = fixed_log(shown, PBM, g.held_out, seed=config.seed + 8)
  entries, rows = {}, {}
  for (family, correction), (name, over) in GRID.items():
    key = f"{family} {correction}"
    entries[key], rows[key] = _train_cell(config, name, over, log, valid_log, test, held=held)
  by_family = {
    f: [_mean(r, "ndcg@10") for k, r in rows.items() if k.startswith(f)]
    for f in ("pointwise", "listwise", "lambdarank")
  }
  family_spread = max(np.mean(v) for v in by_family.values()) - min(np.mean(v) for v in by_family.values())
  correction_spread = float(np.mean([max(v) - min(v) for v in by_family.values()]))
  verdict = (
    f"spread of the family means {family_spread:.4f} vs mean spread of the corrections within a family "
    f"{correction_spread:.4f}: "
    + (
      "the loss matters more (as claimed)" if family_spread > correction_spread else "the correction matters more here"
    )
  )
  return entries, rows, ["ndcg@5", "ndcg@10", "click_ll"], verdict


_EXPERIMENTS = {
  "dr_vs_ips": _dr_vs_ips,
  "safety": _safety,
  "disentangle": _disentangle,
  "upe_vs_dla": _upe_vs_dla,
  "identifiability": _identifiability,
  "loss_grid": _loss_grid,
}


#: The figures :func:`write_figures` draws, by the experiment they show.
FIGURES = {
  "dr_vs_ips": "fig_dr_vs_ips.png",
  "safety": "fig_safety.png",
  "disentangle": "fig_disentangle.png",
}


def _series(rows, pattern, metric):
  """``{label: (xs, means, ci90 half-widths)}`` from the rows whose key matches ``pattern`` (groups x, label)."""
  out: dict[str, Any] = {}
  for key, entry in rows.items():
    match = re.fullmatch(pattern, key)
    if match is None or metric not in entry:
      continue
    xs, means, cis = out.setdefault(match.group("label"), ([], [], []))
    xs.append(float(match.group("x")))
    means.append(float(entry[metric]))
    cis.append(float(entry.get("ci90", {}).get(metric, 0.0)))
  for label, (xs, means, cis) in out.items():
    order = np.argsort(xs)
    out[label] = tuple(np.asarray(v)[order] for v in (xs, means, cis))
  return out


def _draw(ax, series, *, log_x, dodge, band=True):
  """One line per label with its 90% interval as error bars (and a band); points dodged sideways by ``dodge``."""
  n = len(series)
  for i, (label, (xs, means, cis)) in enumerate(series.items()):
    shift = (i - (n - 1) / 2) * dodge
    x = xs * 10.0**shift if log_x else xs + shift
    line = ax.errorbar(x, means, yerr=cis, marker="o", ms=4, capsize=3, lw=1.2, label=label)
    if band and len(x) > 1:
      ax.fill_between(x, means - cis, means + cis, color=line[0].get_color(), alpha=0.12, lw=0)
  if log_x:
    ax.set_xscale("log")
  ax.grid(alpha=0.3)


def write_figures(results: Mapping[str, Any], outdir: str) -> list[str]:
  """Draws the sweeps of a run's results as PNGs in ``outdir``, one per experiment present (:data:`FIGURES`).

  ``fig_dr_vs_ips.png``: test nDCG@10 against the number of logged sessions, one line per method;
  ``fig_safety.png``: each method's nDCG@10 against the sessions, truthful and adversarial clicks side by side,
  the logger's level as a horizontal line; ``fig_disentangle.png``: nDCG@5 of the two-tower variants against the
  logger's quality ``w``. Every point is the mean over seeds with its 90% t-interval (the rows' ``ci90``
  half-widths) as error bar, and as a band in the two session sweeps; the methods' points are dodged slightly
  sideways so that equal ones stay visible.

  Args:
    results: :func:`run`'s return value, or the ``results.json`` it wrote (loaded with ``json.load``).
    outdir: the directory for the PNGs (created if missing).

  Returns:
    The paths written, in :data:`FIGURES` order.

  >>> import tempfile
  >>> row = lambda m: {"ndcg@10": m, "ci90": {"ndcg@10": 0.01}}
  >>> res = {"dr_vs_ips": {"rows": {"N=10 naive": row(0.5), "N=100 naive": row(0.6), "N=10 DR": row(0.55)}}}
  >>> [os.path.basename(p) for p in write_figures(res, tempfile.mkdtemp())]
  ['fig_dr_vs_ips.png']
  """
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  num_seeds = results.get("_meta", {}).get("num_seeds")
  over = f"{num_seeds} seeds" if num_seeds else "seeds"
  note = f"mean over {over}; bars and bands: 90% t-interval"
  paths = []

  def save(fig, claim):
    fig.tight_layout()
    paths.append(save_figure(fig, os.path.join(outdir, FIGURES[claim]), dpi=100))

  if "dr_vs_ips" in results:
    series = _series(results["dr_vs_ips"]["rows"], r"N=(?P<x>\d+) (?P<label>.+)", "ndcg@10")
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    _draw(ax, series, log_x=True, dodge=0.02)
    ax.set_xlabel("logged sessions N (trust-bias clicks)")
    ax.set_ylabel("test nDCG@10")
    ax.set_title(f"DR vs IPS\n{note}", fontsize=9)
    ax.legend(fontsize=8)
    save(fig, "dr_vs_ips")

  if "safety" in results:
    rows = results["safety"]["rows"]
    panels = [c for c in ("true", "adversarial") if any(k.startswith(f"{c} ") for k in rows)]
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.2 * max(len(panels), 1), 3.8), squeeze=False)
    for ax, clicks in zip(axes[0], panels):
      series = _series(rows, rf"{clicks} N=(?P<x>\d+) (?P<label>.+)", "ndcg@10")
      _draw(ax, series, log_x=True, dodge=0.02)
      if "logger" in rows:
        ax.axhline(float(rows["logger"]["ndcg@10"]), color="k", ls="--", lw=1, label="logger")
      ax.set_xlabel("logged sessions N (PBM clicks)")
      ax.set_title(f"{clicks} clicks", fontsize=10)
    axes[0][0].set_ylabel("test nDCG@10")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Safety: safe DR and PRPO against the logger ({note})", fontsize=9)
    save(fig, "safety")

  if "disentangle" in results:
    series = _series(results["disentangle"]["rows"], r"w=(?P<x>[0-9.e+-]+) (?P<label>.+)", "ndcg@5")
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    _draw(ax, series, log_x=False, dodge=0.012, band=False)  # four overlapping bands would hide each other
    ax.set_xlabel("logger quality w (ranking by w y + (1 - w) U(0, 4))")
    ax.set_ylabel("test nDCG@5")
    ax.set_title(f"Disentangled two-towers\n{note.replace('bars and bands', 'bars')}", fontsize=9)
    ax.legend(fontsize=8)
    save(fig, "disentangle")
  return paths


def run(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict[str, Any]:
  """Runs every experiment of ``config.claims``; writes ``results.json``, ``table.md`` and the figures to ``workdir``.

  Args:
    config: the study's config (:func:`default_config`), checked against ``CONFIG_RULES`` first.
    workdir: the output directory, or None to write nothing; the figures (:func:`write_figures`) are drawn after
      the results are written, from the same mapping.

  Returns:
    ``{claim: {"rows": {row: entry}, "verdict": str, "seconds": float}, "_meta": {...}}``.
  """
  validate_config(config, CONFIG_RULES)
  t0 = time.perf_counter()
  train, valid, test = load_datasets(config)
  results: dict[str, Any] = {}
  sections = []
  progress = Progress("since2023", total=len(config.claims), start=t0)  # one line per claim's experiment
  for claim in config.claims:
    t = time.perf_counter()
    entries, rows, columns, verdict = _EXPERIMENTS[claim](config, train, valid, test)
    seconds = time.perf_counter() - t
    results[claim] = {"rows": entries, "verdict": verdict, "seconds": seconds}
    for row in rows.values():
      row.update({c: "n/a" for c in columns if c not in row})
    sections.append(
      f"## {claim}\n\n{markdown_table(rows, columns, row_header='setting')}\n\n*Measured*: {verdict} ({seconds:.0f} s)\n"
    )
    progress.done(f"{claim}: {verdict}")
  results["_meta"] = {"num_seeds": config.num_seeds, "seconds": time.perf_counter() - t0, "config": config.to_dict()}
  tables = f"Test metrics, mean ± 90% t-interval half-width over {config.num_seeds} seeds.\n\n" + "\n".join(sections)
  if workdir is not None:
    os.makedirs(workdir, exist_ok=True)
    write_results(workdir, results, table=tables)
    write_figures(results, workdir)
  return results
