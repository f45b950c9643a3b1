"""The online study: every online learner (PDGD, DBGD, MGD, NSGD) under every click model.

The learners are :func:`ultr_jax.train.online_learning`; this module runs the grid and writes
``results.json``, the tables and ``fig_online.png``.
"""

import math
import os
import time
from typing import Any, Mapping, Optional, Union

from absl import logging
import jax
import ml_collections
import numpy as np

from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.online import CONFIG_RULES, VARIANTS, default_config, default_online_config
from ultr_jax.studies.figures import save_figure
from ultr_jax.train import sharding as sharding_lib
from ultr_jax.studies.experiment import load_datasets
from ultr_jax.train.online import (
  METRICS,
  ONLINE_CLICK_MODELS,
  ONLINE_LEARNERS,
  _as_dict,
  _click_config,
  full_info_reference,
  online_learning,
)
from ultr_jax.studies.tables import summarize_metrics
from ultr_jax.train.results import markdown_table, summarize, write_results
from ultr_jax.studies._progress import Progress

__all__ = ["CONFIG_RULES", "VARIANTS", "default_config", "default_online_config", "run", "run_online_study"]


def _plot(results: Mapping[str, Any], path: str, ceiling: Optional[float] = None) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = [r for r in results if r.startswith("click_model=")]
  fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.2), squeeze=False)
  for ax, row in zip(axes[0], rows):
    for method, entry in results[row].items():
      x, y = np.asarray(entry["impressions"]), np.asarray(entry["curve"])
      ax.plot(x, y, label=method)
    if ceiling is not None:
      ax.axhline(ceiling, color="gray", ls="--", lw=1, label="full_info (labels)")
    ax.set_title(row)
    ax.set_xlabel("impressions")
    ax.set_ylabel("test nDCG@10")
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  save_figure(fig, path)


def _study_users(config: ml_collections.ConfigDict) -> dict[str, Union[str, dict]]:
  """``config.click_models`` -> a preset name or a checked ``config.click_model_configs`` entry each."""
  configs = config.get("click_model_configs") or {}
  shadowing = sorted(set(configs) & set(ONLINE_CLICK_MODELS))
  if shadowing:
    raise ValueError(f"config.click_model_configs: {shadowing} would shadow the cascade users of that name")
  users = {}
  for name in config.click_models:
    if name in configs:
      users[name] = _as_dict(configs[name])
      _click_config(users[name], int(config.top_k))
    elif name in ONLINE_CLICK_MODELS:
      users[name] = name
    else:
      raise ValueError(
        f"config.click_models: unknown online click model {name!r}; expected one of "
        f"{tuple(ONLINE_CLICK_MODELS)} or a name in config.click_model_configs {tuple(configs)}"
      )
  return users


def run_online_study(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict[str, Any]:
  """Every online method under every click model; writes ``results.json``, tables and ``fig_online.png``.

  ``config.click_models`` names cascade users (:data:`ONLINE_CLICK_MODELS`) or entries of
  ``config.click_model_configs`` (``make_click_fn`` configs).
  ``results.json`` maps ``click_model=<name>`` to methods, each with ``ndcg@10`` and ``online_ndcg@10``
  (means, with ``std``, ``ci90`` and ``per_seed``), the mean test-nDCG@10 ``curve`` and its
  ``impressions``; ``pdgd_minus_<method>`` holds the seed-paired differences of PDGD against the others,
  ``nsgd_minus_mgd`` those of NSGD against MGD.
  ``full_info`` holds the ceiling, :func:`full_info_reference` (with ``config.full_info.enabled``).

  Args:
    config: the study's config (:func:`default_config`): ``click_models``, ``methods``,
      ``num_impressions``, ``num_seeds``, ``full_info``; its values are checked against ``CONFIG_RULES``
      before any work.
    workdir: the output directory (``results.json``, tables, ``fig_online.png``), or None (or ``""``) to
      write nothing.

  Returns:
    The mapping written to ``results.json`` (above).
  """
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  for m in config.methods:
    if m not in ONLINE_LEARNERS:
      raise ValueError(f"config.methods: unknown online method {m!r} (expected {tuple(ONLINE_LEARNERS)})")
  users = _study_users(config)  # fails before any work on an unknown user
  train, _, test = load_datasets(config)
  devices = math.gcd(int(config.num_devices) or jax.device_count(), int(config.num_seeds))
  mesh = sharding_lib.make_mesh(devices) if devices > 1 else None
  seeds = [int(config.seed) + s for s in range(int(config.num_seeds))]
  if workdir:
    os.makedirs(workdir, exist_ok=True)
  results: dict[str, Any] = {}
  rows: dict[str, dict] = {}
  start = time.perf_counter()
  ceiling = None
  if config.full_info.enabled:
    out = full_info_reference(train, test, config=config, seeds=seeds)
    entry, row = summarize_metrics(out, ("ndcg@10",))
    results["full_info"] = entry
    rows["full_info (labels)"] = {**row, "online_ndcg@10": "n/a"}
    ceiling = entry["ndcg@10"]
    logging.info(f"[online] full_info (labels): ndcg@10 {ceiling:.4f}; {time.perf_counter() - start:.0f}s")
  progress = Progress("online", total=len(config.click_models) * len(config.methods), start=start)
  for click_model in config.click_models:
    row_key = f"click_model={click_model}"
    results[row_key] = {}
    raw = {}
    for method in config.methods:
      out = online_learning(method, train, test, click_model=users[click_model], config=config, seeds=seeds, mesh=mesh)
      raw[method] = out
      entry, row = summarize_metrics(out, METRICS)
      entry["curve"] = out["curve"].mean(axis=0).tolist()
      entry["impressions"] = out["impressions"].tolist()
      results[row_key][method] = entry
      rows[f"{click_model}/{method}"] = row
      progress.done(
        f"{click_model}/{method}: ndcg@10 {entry['ndcg@10']:.4f}, online ndcg@10 {entry['online_ndcg@10']:.4f}"
      )
    # Seed-paired gaps: PDGD against every other learner, and NSGD against MGD, the learner it extends.
    pairs = [("pdgd", m) for m in raw if m != "pdgd"] + [("nsgd", "mgd")]
    for a, b in pairs:
      if a in raw and b in raw:
        results[row_key][a][f"{a}_minus_{b}"] = {name: summarize(raw[a][name] - raw[b][name]) for name in METRICS}
    if workdir:
      write_results(workdir, results, rows=rows, columns=METRICS, row_header="click model/method")
  if workdir:
    write_results(workdir, results, rows=rows, columns=METRICS, row_header="click model/method")
    _plot(results, os.path.join(workdir, "fig_online.png"), ceiling)
    logging.info(markdown_table(rows, METRICS, row_header="click model/method"))
  return results


run = run_online_study
