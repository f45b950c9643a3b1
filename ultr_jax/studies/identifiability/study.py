r"""The fully synthetic study of "Identifiability Matters" (ICML'24): Table 1, Figures 3a-6, the context study.

Table 1 (K = 2: No debias, DLA / Regression-EM / Two-Tower, each raw, + node
intervention, + node merging; ``cfg.runs`` runs) from
:func:`ultr_jax.graph.study.table1`; the figures and the context-dependent PBM
study (section 5.2) on top. ``experiments/identifiability/main.py`` is the
binary; ``configs/default.py`` holds the config.

Writes ``results.json`` (row -> metric -> {mean, std}), ``table.md``,
``figures.json``, ``fig3a.png`` ... ``fig6.png`` and ``context_results.json``.
"""

import json
import os
import time

from absl import logging
import jax
import numpy as np

from ultr_jax.data import load_ultra
from ultr_jax.graph import (
  DESIGN_GRAPHS,
  apply_interventions,
  generate_design_dataset,
  read_svmlight_ranking,
)
from ultr_jax._schema import validate_config
from ultr_jax._state_files import read_state_file
from ultr_jax.studies.configs.identifiability import CONFIG_RULES, VARIANTS, default_config
from ultr_jax.studies.figures import save_figure
from ultr_jax.studies.identifiability import context as context_study
from ultr_jax.studies.identifiability import table1 as study
from ultr_jax.train.compilation import enable_compilation_cache
from ultr_jax.train.results import atomic_write_text

__all__ = [
  "CONFIG_RULES",
  "identifiability_figures",
  "identifiability_context_study",
  "run_identifiability_study",
  "VARIANTS",
  "default_config",
]

METRICS = ("mcc", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "click_mse")


def _dataset(cfg, k):
  if cfg.data_root:
    return load_ultra(os.path.join(cfg.data_root, f"K={k}"))
  return generate_design_dataset(DESIGN_GRAPHS[k], seed=cfg.seed, **cfg.gen)


def _table_md(summary):
  head = "| Method | " + " | ".join(METRICS) + " |"
  lines = [head, "|" + "---|" * (len(METRICS) + 1)]
  for row, m in summary.items():
    cells = []
    for k in METRICS:
      if k == "click_mse":
        cells.append(f"{m[k]['mean']:.1e}")
      else:
        cells.append(f"{m[k]['mean']:.3f}±{m[k]['std']:.3f}")
    lines.append(f"| {row} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _kw(cfg, method):
  return {"dla": {"o_update": cfg.dla_o_update}, "regression_em": {"variant": cfg.rem_variant}}.get(method, {})


def _dla(cfg, key, d, **kw) -> dict:
  """DLA's ``cfg.runs`` runs on dataset ``d`` for ``cfg.figure_epochs`` epochs (:func:`run_method`)."""
  return study.run_method(
    key,
    d,
    method="dla",
    runs=cfg.runs,
    epochs=cfg.figure_epochs,
    num_docs=None,
    dtype=cfg.dtype,
    **_kw(cfg, "dla"),
    **kw,
  )


def _figure_3a(cfg, key, data: dict, grid: list, workdir: str, plt, out: dict) -> None:
  """Figure 3a (DLA's MCC against the number of clicks, per K): its data into ``out["3a"]``, ``fig3a.png``."""
  res = {}
  for k in (1, 2, 3, 4):
    res[k] = [_dla(cfg, key, data[k], num_clicks=n)["mcc"] for n in grid]
    logging.info("fig3a K=%d done", k)
  out["3a"] = {
    f"K={k}": {"clicks": grid, "mean": [float(v.mean()) for v in r], "std": [float(v.std()) for v in r]}
    for k, r in res.items()
  }
  fig, ax = plt.subplots(figsize=(4.5, 3.2))
  for k, r in res.items():
    mu = np.array([v.mean() for v in r])
    sd = np.array([v.std() for v in r])
    ax.plot(grid, mu, marker="o", label=f"K={k}")
    ax.fill_between(grid, mu - sd, mu + sd, alpha=0.2)
  ax.set_xscale("log")
  ax.set_xlabel("clicks N")
  ax.set_ylabel("MCC")
  ax.set_title("Fig. 3a: DLA vs. clicks")
  ax.legend()
  fig.tight_layout()
  save_figure(fig, os.path.join(workdir, "fig3a.png"), dpi=120)


def _figures_3b_6(cfg, key, data: dict, grid: list, workdir: str, plt, out: dict) -> None:
  """Figures 3b (DLA, node merging, node intervention per K) and 6 (the examination DLA and merging recover)."""
  ep = cfg.figure_epochs
  res, obs = {}, {}
  for k in (1, 2, 3, 4):
    d = data[k]
    ni, _ = study.node_intervention_dataset(
      key, d, epochs=ep, num_clicks=cfg.num_clicks, dtype=cfg.dtype, **_kw(cfg, "dla")
    )
    r_dla = _dla(cfg, key, d, num_clicks=cfg.num_clicks)
    r_nm = _dla(cfg, key, d, num_clicks=cfg.num_clicks, canonical=study.node_merging_canonical(d))
    r_ni = _dla(cfg, key, ni, num_clicks=cfg.num_clicks)
    res[k] = {"DLA": r_dla["mcc"], "DLA + node merging": r_nm["mcc"], "DLA + node intervention": r_ni["mcc"]}
    obs[k] = {"DLA": r_dla["observation"], "NM": r_nm["observation"]}
    logging.info("fig3b K=%d done", k)
  out["3b"] = {
    name: {
      "K": [1, 2, 3, 4],
      "mean": [float(res[k][name].mean()) for k in res],
      "std": [float(res[k][name].std()) for k in res],
    }
    for name in res[1]
  }
  fig, ax = plt.subplots(figsize=(4.5, 3.2))
  for name in res[1]:
    ax.errorbar([1, 2, 3, 4], out["3b"][name]["mean"], yerr=out["3b"][name]["std"], marker="o", capsize=3, label=name)
  ax.set_xticks([1, 2, 3, 4])
  ax.set_xlabel("K (components)")
  ax.set_ylabel("MCC")
  ax.set_title("Fig. 3b")
  ax.legend(fontsize=7)
  fig.tight_layout()
  save_figure(fig, os.path.join(workdir, "fig3b.png"), dpi=120)
  gt = np.asarray(study.PBM_EXAMINATION)
  out["6"] = {"GT": (gt / gt[0]).tolist()}
  fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
  for ax, k in zip(axes, (2, 3, 4)):
    dl = obs[k]["DLA"] / obs[k]["DLA"][:, :1]
    nm = obs[k]["NM"] / obs[k]["NM"][:, :1]
    out["6"][f"K={k}"] = {"NM": nm.mean(0).tolist(), "DLA_mean": dl.mean(0).tolist()}
    ax.boxplot(dl, positions=np.arange(10), widths=0.5, showfliers=False)
    ax.plot(np.arange(10), gt / gt[0], "k-o", ms=3, label="GT")
    ax.plot(np.arange(10), nm.mean(0), "r-s", ms=3, label="NM")
    ax.set_title(f"Fig. 6: K={k}")
    ax.set_xlabel("position")
    ax.legend(fontsize=7)
  axes[0].set_ylabel("o'(p) / o'(0)")
  fig.tight_layout()
  save_figure(fig, os.path.join(workdir, "fig6.png"), dpi=120)


def _figure_4a(cfg, key, data: dict, grid: list, workdir: str, plt, out: dict) -> None:
  """Figure 4a (node intervention at minimal against random cost, K=2): ``out["4a"]``, ``fig4a.png``."""
  ep = cfg.figure_epochs
  d = data[2]
  ni_min, _ = study.node_intervention_dataset(
    key, d, epochs=ep, num_clicks=cfg.num_clicks, dtype=cfg.dtype, **_kw(cfg, "dla")
  )
  res = {"min cost": [], "random cost": []}
  for n in grid:
    res["min cost"].append(_dla(cfg, key, ni_min, num_clicks=n)["mcc"])
    # the random-cost plan is redrawn for every run
    vals = []
    for i in range(cfg.runs):
      ni_rand, _ = study.node_intervention_dataset(key, d, epochs=ep, random_cost=True, seed=cfg.seed * 1000 + i)
      vals.append(
        study.run_method(
          jax.random.fold_in(key, i),
          ni_rand,
          method="dla",
          runs=1,
          epochs=ep,
          num_clicks=n,
          dtype=cfg.dtype,
          **_kw(cfg, "dla"),
        )["mcc"][0]
      )
    res["random cost"].append(np.array(vals))
  out["4a"] = {
    name: {"clicks": grid, "mean": [float(v.mean()) for v in r], "std": [float(v.std()) for v in r]}
    for name, r in res.items()
  }
  fig, ax = plt.subplots(figsize=(4.5, 3.2))
  for name, r in res.items():
    mu = np.array([v.mean() for v in r])
    sd = np.array([v.std() for v in r])
    ax.plot(grid, mu, marker="o", label=name)
    ax.fill_between(grid, mu - sd, mu + sd, alpha=0.2)
  ax.set_xscale("log")
  ax.set_xlabel("clicks N")
  ax.set_ylabel("MCC")
  ax.set_title("Fig. 4a: intervention cost")
  ax.legend()
  fig.tight_layout()
  save_figure(fig, os.path.join(workdir, "fig4a.png"), dpi=120)


def _figure_4b(cfg, key, data: dict, grid: list, workdir: str, plt, out: dict, share=()) -> None:
  """Figure 4b (DLA with position pairs (1, 4), (2, 4), (3, 4) merged, K=2): ``out["4b"]``, ``fig4b.png``."""
  d = data[2]
  res = {}
  cans = {a: study.node_merging_canonical(d, pairs=[(a, 4)]) for a in (1, 2, 3)}
  for a, can in cans.items():  # one compiled fit for the three
    res[f"{a} & 4"] = _dla(
      cfg, key, d, num_clicks=cfg.num_clicks, canonical=can, share_shapes=[(d, c) for c in cans.values()] + list(share)
    )["mcc"]
  out["4b"] = {n: {"mean": float(v.mean()), "std": float(v.std())} for n, v in res.items()}
  fig, ax = plt.subplots(figsize=(4.0, 3.2))
  names = list(res)
  ax.bar(names, [res[n].mean() for n in names], yerr=[res[n].std() for n in names], capsize=3)
  ax.set_ylim(0.5, 1.0)
  ax.set_ylabel("MCC")
  ax.set_title("Fig. 4b: merged positions (K=2)")
  fig.tight_layout()
  save_figure(fig, os.path.join(workdir, "fig4b.png"), dpi=120)


def identifiability_figures(cfg, key, workdir, share=()):
  """Figures 3a, 3b, 4a, 4b and 6 (those in ``cfg.figures``) as PNGs in ``workdir``; returns their data.

  Args:
    cfg: the study's config (``figures``, ``figure_epochs``, ``click_grid``, ``num_clicks``, ``runs``,
      ``seed`` and the datasets' fields).
    key: the ``jax.random`` key every fit starts from.
    workdir: the directory the PNGs are written to.
    share: extra ``(dataset, canonical)`` pairs whose shapes Figure 4b's fits are padded to (so one
      compiled fit serves them too).

  Returns:
    Figure name (``"3a"``, ``"3b"``, ``"4a"``, ``"4b"``, ``"6"``) -> the numbers it plots (means and
    standard deviations over the runs).
  """
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  out = {}
  data = {k: _dataset(cfg, k) for k in (1, 2, 3, 4)}
  grid = [float(n) for n in cfg.click_grid]
  if "3a" in cfg.figures:
    _figure_3a(cfg, key, data, grid, workdir, plt, out)
  if "3b" in cfg.figures or "6" in cfg.figures:
    _figures_3b_6(cfg, key, data, grid, workdir, plt, out)
  if "4a" in cfg.figures:
    _figure_4a(cfg, key, data, grid, workdir, plt, out)
  if "4b" in cfg.figures:
    _figure_4b(cfg, key, data, grid, workdir, plt, out, share=share)
  return out


def identifiability_context_study(cfg, key):
  """Section 5.2 and Appendix C.2 (Chen et al., ICML 2024): the contextual PBM with random contexts, IG, merging
  (``cfg.context``).

  Args:
    cfg: the study's config; ``cfg.context`` sets the data (``svmlight`` file or the synthetic LETOR's
      ``num_queries``, ``num_docs``), ``num_contexts``, ``epochs``, ``runs`` and ``two_tower_epochs``;
      ``cfg.data_root``'s ``click_model.json`` (if any) gives the click model's ``w``.
    key: the PRNG key of the fits (the contexts and clicks follow ``cfg.seed``).

  Returns:
    ``"contexts=<n>"`` -> ``{"report", "merge_pairs", <row>: metric summaries}`` per number of contexts.
  """
  c = cfg.context
  if c.svmlight:
    features, labels, where, _ = read_svmlight_ranking(c.svmlight)
  else:
    features, labels, where = context_study.synthetic_letor(cfg.seed, num_queries=c.num_queries, num_docs=c.num_docs)
  root = cfg.data_root or os.path.dirname(cfg.data or "")
  path = os.path.join(root, "click_model.json")
  if root and os.path.exists(path):
    spec = {"w": [(int, float)]}
    what = "the context study's click model (a JSON object with 'w', the list of its weights)"
    recovery = "write it again, or remove it to draw w at random from the seed"
    w = np.asarray(read_state_file(path, spec, what=what, recovery=recovery)["w"])
  else:
    w = np.random.default_rng(cfg.seed).uniform(-1, 1, 10)
  out = {}
  for nc in c.num_contexts:
    res = context_study.context_study(
      key,
      features,
      labels,
      where,
      num_contexts=int(nc),
      w=w,
      seed=cfg.seed,
      epochs=c.epochs,
      runs=c.runs,
      two_tower_epochs=c.two_tower_epochs,
      log=logging.info,
      dtype=cfg.dtype,
    )
    out[f"contexts={nc}"] = {
      "report": res.pop("report"),
      "merge_pairs": res.pop("merge_pairs"),
      **{row: study.summarise(m) for row, m in res.items()},
    }
    logging.info(
      "contexts=%s: %s",
      nc,
      {
        row: round(v["mcc"]["mean"], 4)
        for row, v in out[f"contexts={nc}"].items()
        if isinstance(v, dict) and "mcc" in v
      },
    )
  return out


def run_identifiability_study(cfg, workdir: str) -> dict:
  """Table 1 (and the figures and the context study the config asks for); writes them to ``workdir``.

  Args:
    cfg: the study's config (:func:`default_config`): ``data``, ``runs``, ``epochs``, ``num_clicks``,
      ``seed``, ``figures`` and ``context``; its values are checked against ``CONFIG_RULES`` first.
    workdir: the output directory (``results.json``, the Table 1 Markdown, ``figures.json`` and the
      PNGs, ``context_results.json``).

  Returns:
    The Table 1 summary (row -> metric -> ``{"mean", "std"}``), as written to ``results.json``.
  """
  validate_config(cfg, CONFIG_RULES)  # every value in range before any work
  os.makedirs(workdir, exist_ok=True)
  cache = enable_compilation_cache(cfg.compilation_cache_dir, workdir)
  # a run that finds compiled programs in the cache skips their compiles
  cached = len(os.listdir(cache)) if cache and os.path.isdir(cache) else 0
  timing_note = f"XLA cache {cache}: {cached} entries at the start" if cache else "XLA cache off"
  key = jax.random.key(cfg.seed)
  ds = load_ultra(cfg.data) if cfg.data else _dataset(cfg, 2)
  t0 = time.time()
  rows = study.table1(
    key,
    ds,
    runs=cfg.runs,
    epochs=dict(cfg.epochs),
    num_clicks=cfg.num_clicks,
    method_kwargs={m: _kw(cfg, m) for m in ("dla", "regression_em")},
    log=logging.info,
    dtype=cfg.dtype,
  )
  plan = rows.pop("_plan")
  rows.pop("_canonical")
  summary = {name: study.summarise(m) for name, m in rows.items()}
  seconds = time.time() - t0
  table = _table_md(summary)
  logging.info(table)
  logging.info("intervention plan: %s", plan)
  atomic_write_text(os.path.join(workdir, "results.json"), json.dumps(summary, indent=1))
  atomic_write_text(
    os.path.join(workdir, "table.md"),
    table + f"\nIntervention plan: {plan}\nTable 1 time: {seconds:.1f}s ({timing_note})\n",
  )
  if cfg.figures:
    # Figure 4b pads its lists as Table 1 did (the + NI dataset has one list
    # more), so it reuses Table 1's compiled simulation and scoring
    share = [] if cfg.data else [(apply_interventions(ds, plan), None)]
    figs = identifiability_figures(cfg, key, workdir, share)
    atomic_write_text(os.path.join(workdir, "figures.json"), json.dumps(figs, indent=1))
  if cfg.context.enabled:
    atomic_write_text(
      os.path.join(workdir, "context_results.json"), json.dumps(identifiability_context_study(cfg, key), indent=1)
    )
  return summary


run = run_identifiability_study
