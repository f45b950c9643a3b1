"""The baselines study: every method of ``config.methods`` under one simulated click model, side by side.

Data (synthetic default or SVMlight / ULTRA files) -> logging policy trained
on a small labelled fraction -> displayed top-k lists -> a click model
simulating fresh sessions inside every training step -> every requested
method trained over several seeds at once -> test metrics with intervals,
learned-propensity quality, ``results.json`` / ``table.md`` / ``table.csv``,
and ``curves.png`` (each method's training loss and validation metric over
the steps, :func:`~ultr_jax.studies.figures.plot_learning_curves`).

With real click logs (``config.data.source = "baidu"``: Baidu-ULTR's click
files for training, its expert annotations for validation and test) the
methods train on the logged clicks as shown, with no logging policy and no
click model. The data half (configs, loaders, the logging policy) is
:mod:`ultr_jax.studies.experiment`.
"""

import os
import time
from typing import Any, Optional

from absl import logging
import jax
import ml_collections
import numpy as np

from ultr_jax import simulation
from ultr_jax._schema import validate_config
from ultr_jax.studies._progress import Progress
from ultr_jax.studies.configs.baselines import CONFIG_RULES, VARIANTS, default_config
from ultr_jax.studies.figures import plot_learning_curves
from ultr_jax.train import methods as methods_lib
from ultr_jax.studies.experiment import (
  check_logged_click_method,
  by_frequency_bucket,
  hold_out_pages,
  load_datasets,
  prepare_logged_data,
  true_position_propensities,
)
from ultr_jax.train.loop import evaluate, evaluate_clicks, fit, predict
from ultr_jax.studies.tables import summarize_metrics
from ultr_jax.train.results import FitResult, markdown_table, summarize, write_results, write_run

__all__ = ["CONFIG_RULES", "METRIC_COLUMNS", "CLICK_COLUMNS", "train_and_evaluate", "run", "VARIANTS", "default_config"]

METRIC_COLUMNS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "err@10")
CLICK_COLUMNS = ("click_ll", "click_perplexity")


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.std() == 0 or b.std() == 0:
    return float("nan")
  return float(np.corrcoef(a, b)[0, 1])


def _study_data(config: ml_collections.ConfigDict) -> tuple:
  """``(train, valid, test, logged, held_clicks, click_fn, true_prop)``: the study's splits and how clicks arise.

  With logged clicks (``logged``: ``"clicks"`` in the loaded training split's extras) the methods train on them as shown
  (``click_fn`` and ``true_prop`` None), and ``config.data.click_test_fraction`` of the pages may be held out to
  score the methods that are click models (``held_clicks``); otherwise the logging policy displays the lists, the
  configured click model simulates clicks, and ``true_prop`` is its position propensities.
  """
  train, valid, test = load_datasets(config, logged_clicks=True)
  if "clicks" in train.extras:  # real click logs: trained on as shown, nothing simulated
    held_clicks = None
    fraction = float(config.data.get("click_test_fraction", 0.0) or 0.0)
    if fraction > 0:  # held-out pages score the methods that are click models
      train, held_clicks = hold_out_pages(train, fraction, seed=config.data.seed)
    return train, valid, test, True, held_clicks, None, None
  train, valid, test = prepare_logged_data(train, valid, test, config)
  click_fn = simulation.make_click_fn(config.click_model)
  true_prop = true_position_propensities(
    click_fn, train.subset(np.arange(min(256, train.num_queries))), jax.random.key(config.seed)
  )
  return train, valid, test, False, None, click_fn, true_prop


def _write_test_runs(method, params, test, workdir: str, name: str, first_seed: int) -> None:
  """Writes the TREC run file of the test lists for every seed (``runs/<name>.seed<seed>.txt``)."""
  scores = predict(method, params, test)
  for i, seed_scores in enumerate(scores):
    write_run(
      os.path.join(workdir, "runs", f"{name}.seed{first_seed + i}.txt"),
      seed_scores,
      test.qid,
      test.where,
      doc_ids=test.doc_ids,
      run_name=name,
    )


def _add_propensities(method, fit_result, true_prop: Optional[np.ndarray], entry: dict, row: dict) -> None:
  """Adds a method's learned position propensities (and, against ``true_prop``, their correlation) to its
  results ``entry`` and table ``row``."""
  if method.propensities is None:
    row["propensity_corr"] = "n/a"
    return
  learned = np.asarray(jax.vmap(method.propensities)(fit_result.params, fit_result.extra))
  if true_prop is None:
    entry["learned_propensities"] = learned.mean(0).tolist()
    row["propensity_corr"] = "n/a"
    return
  corr = [_pearson(learned[s, : len(true_prop)], true_prop[: learned.shape[1]]) for s in range(learned.shape[0])]
  summary = summarize(corr)
  entry["propensity_corr"] = summary["mean"]
  entry["std"]["propensity_corr"] = summary["std"]
  entry["ci90"]["propensity_corr"] = summary["ci90"]
  entry["learned_propensities"] = learned.mean(0).tolist()
  row["propensity_corr"] = summary


def _table_caption(config: ml_collections.ConfigDict, logged: bool, held_clicks) -> str:
  """The line under the table: what the numbers are and where the clicks came from."""
  clicks = f"logged clicks of {config.data.train_path}" if logged else f"click model {config.click_model.name}"
  if logged and config.data.get("propensities"):
    clicks += f", position propensities from {config.data.propensities}"
  if held_clicks is not None:
    clicks += (
      f"; click_ll (nats per shown document) and click_perplexity on {held_clicks.num_queries} held-out "
      "click pages, for the methods that are click models"
    )
  return f"\n\nTest metrics, mean ± 90% t-interval half-width over {config.num_seeds} seeds; {clicks}.\n"


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict:
  """Runs every method of ``config.methods`` and writes the comparison.

  Args:
    config: the study's config (:func:`default_config`): ``data``, ``methods`` and their
      ``method_configs``, ``train``, ``num_seeds``, ``seed``; its values are checked against
      ``CONFIG_RULES`` before any work.
    workdir: the output directory (``results.json``, the table, ``curves.png``, with ``write_runs`` the
      TREC run files under ``runs/``), or None to write nothing.

  Returns:
    The results mapping written to ``results.json``: method name ->
    ``{"ndcg@1": mean, ..., "std": {...}, "ci90": {...}, "per_seed": {...}}``
    plus ``"propensity_corr"`` for methods that learn position propensities,
    ``"history"`` (the fit's evaluations: step, train loss and validation
    metrics per seed), and a ``"_meta"`` entry describing the run.
  """
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  t_start = time.perf_counter()
  train, valid, test, logged, held_clicks, click_fn, true_prop = _study_data(config)
  results: dict[str, Any] = {}
  rows: dict[str, dict] = {}
  histories: dict[str, list] = {}
  fits: dict[str, FitResult] = {}
  built = {
    name: methods_lib.get_method(
      name,
      config.method_configs.get(name, ml_collections.ConfigDict()),
      num_features=train.num_features,
      list_size=train.list_size,
    )
    for name in config.methods
  }
  if logged:  # every method is checked before any trains
    for method in built.values():
      check_logged_click_method(method, train)
  dcg_cutoffs = tuple(int(k) for k in (config.get("dcg_cutoffs", ()) or ()))
  dcg_columns = tuple(f"dcg@{k}" for k in dcg_cutoffs)
  metric_columns = METRIC_COLUMNS + dcg_columns + (CLICK_COLUMNS if held_clicks is not None else ())
  progress = Progress("baselines", total=len(built), start=t_start)  # one line per trained method
  for name, method in built.items():
    fit_result = fit(
      method,
      train,
      valid,
      click_fn=click_fn,
      config=config.train,
      seeds=[config.seed + i for i in range(config.num_seeds)],
      workdir=workdir,
      name=name,
    )
    test_metrics = evaluate(method, fit_result.params, test, dcg_cutoffs=dcg_cutoffs)
    if workdir is not None and config.get("write_runs"):  # TREC run files of the test lists, one per seed
      _write_test_runs(method, fit_result.params, test, workdir, name, config.seed)
    if held_clicks is not None and method.click_logits is not None:
      test_metrics.update(evaluate_clicks(method, fit_result.params, fit_result.extra, held_clicks))
    entry, row = summarize_metrics(test_metrics, [c for c in metric_columns if c in test_metrics])
    row.update({c: "n/a" for c in metric_columns if c not in test_metrics})
    if "frequency_bucket" in test.extras:  # Baidu-ULTR's annotations: by query frequency, as Hager et al.
      entry["by_frequency_bucket"] = by_frequency_bucket(method, fit_result.params, test, dcg_cutoffs=dcg_cutoffs)
    _add_propensities(method, fit_result, true_prop, entry, row)
    entry["best_step"] = np.asarray(fit_result.best_step).tolist()
    entry["history"] = fit_result.history  # per evaluation: train loss and validation metrics, per seed
    histories[name] = fit_result.history
    fits[name] = fit_result
    results[name] = entry
    rows[name] = row
    progress.done(f"{name}: ndcg@10 {entry['ndcg@10']:.4f}" if "ndcg@10" in entry else name)
  columns = [*metric_columns, "propensity_corr"]
  results["_meta"] = {
    "true_propensities": None if true_prop is None else true_prop.tolist(),
    "click_model": "logged clicks" if logged else config.click_model.to_dict(),
    "num_seeds": config.num_seeds,
    "data": config.data.to_dict(),
    "seconds": time.perf_counter() - t_start,
  }
  table = markdown_table(rows, columns) + _table_caption(config, logged, held_clicks)
  if workdir is not None:
    table = write_results(workdir, results, table=table, rows=rows, columns=columns, fits=fits)  # + diverged runs
    plot_learning_curves(
      histories,
      os.path.join(workdir, "curves.png"),
      metrics=("train/loss", f"valid/{config.train.select_metric}"),
      relative=("train/loss",),
    )
  logging.info(table)
  logging.info(f"total time {time.perf_counter() - t_start:.1f}s")
  return results


run = train_and_evaluate
