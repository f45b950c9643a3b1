r"""One report: every method under every simulated bias, with the identifiability check beside it.

:func:`run_report` generates one synthetic dataset (:func:`ultr_jax.data.make_synthetic`), orders it by
the logging policy of the baselines study (:func:`~ultr_jax.studies.experiment.prepare_logged_data`), and
then, for every bias (a click model of :mod:`ultr_jax.simulation`):

1. builds the logged dataset of that bias (the displayed top-k; for a bias with ``selection="topk"``,
   such as the ``topk`` column, every candidate, of which only the top k are shown; for ``context_pbm`` a
   random context per item);
2. runs the identifiability check (:func:`ultr_jax.graph.check_identifiability`, Theorem 1 of
   *Identifiability Matters*) on the logged ``(document, position)`` records, or ``(context, position)``
   bias factors for ``context_pbm``, counting only displayed records;
3. trains every method with the generic loop (:func:`~ultr_jax.train.fit`, clicks simulated afresh in
   every step) over several seeds and evaluates it on the full test lists
   (:func:`~ultr_jax.train.evaluate`);
4. with ``config.click_eval.sessions_per_list`` > 0, draws fresh sessions of the test queries shown as in
   training (:func:`held_out_click_log`) and scores every method that predicts clicks (``click_logits``:
   Regression-EM, the two-tower, the click-model learners) by held-out click perplexity and
   log-likelihood (:func:`~ultr_jax.train.evaluate_clicks`), beside the true click model's own
   perplexity on the same sessions (the floor). Real logs have no relevance labels, so held-out clicks
   are what a practitioner can select models by; the report shows whether that choice agrees with
   test nDCG@10 (Hager et al., SIGIR 2024, found on Baidu-ULTR that it need not).

Online learners (``config.online.methods``, e.g. ``("pdgd", "mgd")``; none by default) join as columns
``online_<method>``: under each bias's click model, cut to the same top k, they learn from the clicks on
their own rankings of the training queries' full candidate lists (with the bias's per-item contexts or
logging scores) for ``config.online.num_impressions`` impressions
(:func:`~ultr_jax.train.online_learning`), and report the same test nDCG@10 plus their online nDCG@10.
Users that need an input the lists lack read ``"n/a: <reason>"`` there (found by tracing them).

A method whose loss needs a batch entry that the bias's click model does not provide (CLD needs the
``shown`` mask of a top-k selection log; the oracle SIF baselines need the ``position_trust``
simulator's ``click_propensity`` / ``trust_score``) is not trained there: its cell reads
``"n/a: <reason>"``. Which entries a method needs is found by tracing its loss on a one-list batch
(:func:`method_inputs_missing`), not from a hand-kept list.

Outputs (atomically, :func:`~ultr_jax.train.write_results`): ``results.json`` (``results[bias][method]``
holds ``ndcg@1 ... err@10`` means plus ``std`` / ``ci90`` / ``per_seed``, or ``{"n/a": reason}``;
``results["_identifiability"][bias]`` the IG report), ``table.md`` / ``table.csv`` (one row per bias:
the IG verdict, then nDCG@10 mean ± 90% t-interval half-width per method), ``heatmap.png``
(method x bias, nDCG@10 annotated with the interval) and, with held-out clicks, ``clicks.md`` (click
perplexity, method x bias, the true model's row, and per bias the best method by perplexity and by
nDCG@10; in ``results.json``: ``click_ll`` / ``click_perplexity`` in the cells and
``results["_clicks"][bias]``), and ``curves/<bias>.png``: every trained method's learning curves under
that bias (train loss and the validation selection metric against the step, mean over seeds with the
seeds' range; :func:`~ultr_jax.studies.figures.plot_learning_curves`), whose records are each cell's ``history``.
"""

import os
import time
from typing import Any, Mapping, Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax import graph as graph_lib
from ultr_jax import metrics as metrics_lib
from ultr_jax import simulation
from ultr_jax.data import RankingDataset
from ultr_jax.train import methods as methods_lib
from ultr_jax.studies.baselines import CLICK_COLUMNS, METRIC_COLUMNS
from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.report import CONFIG_RULES, VARIANTS, default_config
from ultr_jax.studies.figures import plot_learning_curves, save_figure
from ultr_jax.studies.experiment import load_datasets
from ultr_jax.train.loop import evaluate, evaluate_clicks, fit
from ultr_jax.train.method import KEY_REASONS, method_inputs_missing
from ultr_jax.train.online import online_learning, online_users_missing
from ultr_jax.studies.tables import best_and_ties, summarize_metrics
from ultr_jax.studies._progress import Progress
from ultr_jax.train.results import (
  FitResult,
  atomic_write_text,
  markdown_table,
  write_results,
)

__all__ = [
  "CONFIG_RULES",
  "CLICK_TRUTH",
  "KEY_REASONS",
  "click_table",
  "held_out_click_log",
  "make_bias_data",
  "make_bias_click_fn",
  "logged_identifiability",
  "method_inputs_missing",
  "not_applicable_reason",
  "sampled_display_positions",
  "with_policy_examination",
  "online_columns",
  "online_not_applicable_reason",
  "plan_cells",
  "plot_heatmap",
  "run_report",
  "VARIANTS",
  "default_config",
]

# ----------------------------------------------------------------------------
# Data and clicks per bias.


def _standardised_logging_scores(weights, datasets) -> list[np.ndarray]:
  """The logging policy's score of every displayed item, standardised with training statistics."""
  raw = [np.where(ds.where, ds.features @ np.asarray(weights, np.float32), 0.0) for ds in datasets]
  ref = raw[0][datasets[0].where]
  mean, std = float(ref.mean()), float(ref.std()) + 1e-8
  return [np.where(ds.where, (r - mean) / std, 0.0).astype(np.float32) for r, ds in zip(raw, datasets)]


def make_bias_data(config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The raw splits ordered by the logging policy, in the two layouts the biases use.

  Returns ``{"display": (train, valid, test), "candidates": (train, valid, test), "weights"}``:
  ``display`` cuts train/valid lists to the displayed top-k (the baselines protocol); ``candidates``
  keeps every candidate in logging order (the top-k selection bias shows only the first k). Test lists
  keep every candidate in both. Every split carries ``extras["logging_score"]``, the standardised
  logging-policy score (SIF's bias source z).

  Args:
    config: the report's config (``data``, ``logging_policy``, ``seed``).

  Returns:
    ``{"display": (train, valid, test), "candidates": (train, valid, test), "weights"}`` as above.
  """
  lp = config.logging_policy
  train, valid, test = load_datasets(config)
  weights = simulation.train_logging_policy(train, fraction=lp.fraction, seed=lp.seed, steps=lp.steps)
  out: dict[str, Any] = {"weights": np.asarray(weights)}
  for layout, top_k in (("display", lp.top_k), ("candidates", None)):
    ordered = [
      simulation.apply_logging_policy(ds, simulation.logging_policy_scores(weights, ds), top_k=k)
      for ds, k in ((train, top_k), (valid, top_k), (test, None))
    ]
    scores = _standardised_logging_scores(weights, ordered)
    out[layout] = tuple(ds.with_extras(logging_score=z) for ds, z in zip(ordered, scores))
  return out


SELECTIONS = ("display", "topk")


def _layout(bias: ml_collections.ConfigDict) -> str:
  """The lists a bias trains on: ``"display"`` (the logged top k) or ``"candidates"`` (``selection="topk"``)."""
  selection = bias.get("selection", "display")
  if selection not in SELECTIONS:
    raise ValueError(f"bias_configs.<bias>.selection must be one of {SELECTIONS}, got {selection!r}")
  return "candidates" if selection == "topk" else "display"


def _batch_inputs(click_model: Mapping[str, Any]) -> tuple[str, ...]:
  """The batch entries a bias's click model reads besides the labels (its declared ``batch_inputs``)."""
  name = click_model.get("name")
  return simulation.get_click_model(name).batch_inputs if name in simulation.click_models() else ()


def _takes_crux_features(click_model: Mapping[str, Any]) -> bool:
  """Whether the click model reads feature columns it is given as ``crux_indices`` (LBD's individual bias)."""
  name = click_model.get("name")
  declared = simulation.get_click_model(name).config_keys if name in simulation.click_models() else {}
  return "features" in _batch_inputs(click_model) and "crux_indices" in declared


def _resolve_click_model(bias: ml_collections.ConfigDict, train, top_k: Optional[int] = None) -> dict:
  cm = bias.click_model.to_dict()
  if _layout(bias) == "candidates" and not cm.get("top_k"):  # every candidate listed, the top k shown
    if top_k is None:
      raise ValueError("a bias with selection='topk' needs click_model.top_k (or the logging policy's top_k)")
    cm["top_k"] = int(top_k)
  if _takes_crux_features(cm) and not cm.get("crux_indices"):
    from ultr_jax.studies.lbd import LBD_BASE_W, select_crux_features  # noqa: PLC0415

    k = int(bias.get("num_crux", 5))
    cm["crux_indices"] = [int(i) for i in select_crux_features(train, k)]
    cm["w"] = [float(v) for v in float(bias.get("w_scale", 0.3)) * LBD_BASE_W[:k]]
  return cm


def make_bias_click_fn(bias: ml_collections.ConfigDict, train, *, top_k: Optional[int] = None) -> tuple[Any, dict]:
  """``(click_fn, click_model_config)`` of one bias (``position_trust`` or any :func:`make_click_fn` model).

  A bias with ``selection="topk"`` lists every candidate and shows the top ``click_model.top_k``, else
  ``top_k`` (the report passes the logging policy's). With ``logging_temperature`` the logging policy is
  stochastic: each session shows a Plackett-Luce sample of the lists' ``logging_score`` at that temperature
  (:func:`~ultr_jax.simulation.stochastic_logging_click_fn`).

  Args:
    bias: one entry of ``config.bias_configs`` (``click_model``, ``selection``, ``logging_temperature``).
    train: the training split whose lists the clicks are drawn on.
    top_k: the number of positions shown when the bias does not set its own.

  Returns:
    ``(click_fn, click_model_config)``: the function ``(key, batch) -> clicks and their inputs`` and the
    click model's config as used (with ``top_k`` where one applies).
  """
  cm = _resolve_click_model(bias, train, top_k)
  click_fn = simulation.make_click_fn(cm)
  temperature = bias.get("logging_temperature")
  if temperature:
    click_fn = simulation.stochastic_logging_click_fn(click_fn, temperature=float(temperature))
  return click_fn, cm


def with_policy_examination(
  bias: ml_collections.ConfigDict, train, click_cfg: Mapping[str, Any], *, seed: int, num_samples: int = 2000
):
  """``train`` with ``extras["policy_examination"]`` under a stochastic logging policy, else ``train`` itself.

  Each candidate's expected examination over ``num_samples`` displays of the bias's logging policy
  (:func:`~ultr_jax.simulation.policy_examination`): the propensity of policy-aware IPS
  (``ips_policy_aware``), computed once per dataset.

  Args:
    bias: one entry of ``config.bias_configs``.
    train: the training split.
    click_cfg: the bias's click model config (:func:`make_bias_click_fn`).
    seed: the seed of the sampled displays.
    num_samples: how many displays the expectation averages over.

  Returns:
    ``train`` with ``extras["policy_examination"]`` (``float[Q, L]``), or ``train`` unchanged.
  """
  temperature = bias.get("logging_temperature")
  if not temperature:
    return train
  batch = {k: jnp.asarray(v) for k, v in train.as_batch().items() if k != "qid"}
  rho = simulation.policy_examination(
    jax.random.key(seed),
    simulation.make_click_fn(click_cfg),
    batch,
    num_samples=num_samples,
    temperature=float(temperature),
  )
  return train.with_extras(policy_examination=np.where(train.where, np.asarray(rho), 0.0).astype(np.float32))


def sampled_display_positions(bias: ml_collections.ConfigDict, train, *, seed: int, num_displays: int = 10):
  """``num_displays`` Plackett-Luce displays of every list under a stochastic logging policy: ``int[R, Q, L]``.

  The records the identifiability check sees for such a bias (None for a fixed logging order).

  Args:
    bias: one entry of ``config.bias_configs``.
    train: the training split.
    seed: the seed of the sampled displays.
    num_displays: how many displays of every list are drawn (R).

  Returns:
    ``int[R, Q, L]`` display positions, or None when the bias's logging order is fixed.
  """
  temperature = bias.get("logging_temperature")
  if not temperature:
    return None
  where = jnp.asarray(train.where)
  z = jnp.where(where, jnp.asarray(train.extras["logging_score"], jnp.float32), 0.0) / float(temperature)
  keys = jax.random.split(jax.random.key(seed), num_displays)
  return np.asarray(jax.vmap(lambda k: simulation.plackett_luce_sample(k, z, where=where))(keys))


def _bias_datasets(bias: ml_collections.ConfigDict, data: Mapping[str, Any], seed: int, layout: Optional[str] = None):
  if layout is None:
    layout = _layout(bias)
  train, valid, test = data[layout]
  num_contexts = bias.click_model.get("num_contexts")
  if "context" in _batch_inputs(bias.click_model) and num_contexts:
    ctx = []
    for i, ds in enumerate((train, valid, test)):
      c = graph_lib.random_contexts(ds.num_queries, ds.list_size, int(num_contexts), seed=seed + i)
      ctx.append(ds.with_extras(context=np.where(ds.where, c, 0).astype(np.int32)))
    train, valid, test = ctx
  return train, valid, test


# ----------------------------------------------------------------------------
# Held-out click prediction.

CLICK_TRUTH = "true click model"


def held_out_click_log(
  test: RankingDataset, click_fn, *, list_size: int, sessions: int, seed: int = 0
) -> tuple[RankingDataset, dict[str, float]]:
  r"""Fresh sessions of the test queries, shown as the training lists are, and the true model's click metrics.

  The test lists (every candidate, in logging order) are cut to the training lists' ``list_size`` (the
  logged top k of a ``display`` bias; a ``selection="topk"`` bias keeps every candidate and its click model
  shows the top k), each list is repeated ``sessions`` times, and ``click_fn`` draws one session for each
  (key ``seed``). Only shown items count (``where`` is the shown mask). Under a stochastic logging policy
  (the click function reports the sampled ``positions``) each session is stored in its display order.

  The second value holds the generating model's own ``click_ll`` (mean log-likelihood per shown item, nats)
  and ``click_perplexity`` (Dupret & Piwowarski, per rank, averaged) of these sessions, from its exact
  :math:`P(C_i = 1 \mid c_{<i})` (``conditional_click_prob``): the floor, in expectation, of a learned
  click model's held-out perplexity (:func:`~ultr_jax.train.evaluate_clicks`) on them.

  Args:
    test: the test split (every candidate, in logging order).
    click_fn: the bias's click function (:func:`make_bias_click_fn`).
    list_size: the training lists' size; the test lists are cut to it.
    sessions: how many sessions of each test list are drawn.
    seed: the seed of the clicks' key.

  Returns:
    ``(click log, {"click_ll", "click_perplexity"})``: the sessions as a :class:`~ultr_jax.data.RankingDataset`
    and the generating model's own click metrics on them.

  >>> from ultr_jax import data
  >>> test = data.make_synthetic(num_train=1, num_valid=1, num_test=3, list_size=6, num_features=2).test
  >>> log, truth = held_out_click_log(test, simulation.make_click_fn({"name": "dcm", "continuation": 0.5}),
  ...                                 list_size=4, sessions=2)
  >>> log.num_queries, log.list_size, sorted(truth)
  (6, 4, ['click_ll', 'click_perplexity'])
  >>> bool(1.0 < truth["click_perplexity"] < 2.0)
  True
  """
  if sessions < 1:
    raise ValueError(f"click_eval.sessions_per_list must be >= 1, got {sessions}")
  cut = test.first_items(min(int(list_size), test.list_size))
  log = cut.subset(np.repeat(np.arange(cut.num_queries), int(sessions)))
  batch = {name: jnp.asarray(v) for name, v in log.as_batch().items() if name != "qid"}
  out = jax.jit(click_fn)(jax.random.key(seed), batch)
  if "conditional_click_prob" not in out:
    raise ValueError(
      f"the click model returns no conditional_click_prob (keys: {sorted(out)}); held-out "
      "click metrics need sessions (no num_impressions)"
    )
  where = log.where & np.asarray(out.get("shown", log.where), bool)
  clicks = np.asarray(out["clicks"], np.float32)
  q = np.asarray(out["conditional_click_prob"], np.float32)
  if "positions" in out:  # a stochastic logging policy: store each session in the order it was displayed
    positions = np.asarray(out["positions"])
    order = np.argsort(positions, axis=-1, kind="stable")
    log = simulation.apply_logging_policy(log, -positions.astype(np.float64))
    where, clicks, q = (np.take_along_axis(a, order, axis=-1) for a in (where, clicks, q))
  truth = {
    "click_ll": float(metrics_lib.click_log_likelihood(jnp.asarray(q), jnp.asarray(clicks), where=jnp.asarray(where))),
    "click_perplexity": float(
      metrics_lib.click_perplexity(jnp.asarray(q), jnp.asarray(clicks), where=jnp.asarray(where))
    ),
  }
  return log.replace(where=where).with_extras(clicks=clicks), truth


def click_table(results: Mapping[str, Any], biases, methods) -> tuple[str, dict]:
  """The held-out click perplexity table (method x bias) and, per bias, the best method by perplexity
  and by test nDCG@10 among the methods that predict clicks.

  Returns ``(markdown, summary)``. ``summary[bias]`` holds ``best_by_perplexity`` and ``best_by_ndcg`` (by
  the means), ``tied_by_perplexity`` / ``tied_by_ndcg`` (the methods whose seed-paired difference to that
  best has a 90% t-interval including 0) and ``perplexity_pick_ranks_worse``: the perplexity pick's nDCG@10
  is below the nDCG pick's beyond that interval. Cells with a non-finite perplexity are left out.

  Args:
    results: the report's results (:func:`run_report`), with ``results["_clicks"]`` per bias.
    biases: the biases (rows of the click table, columns of ``summary``), in order.
    methods: the methods and online columns; those without a ``click_perplexity`` are left out.

  Returns:
    ``(markdown, summary)`` as above.

  >>> cell = lambda ppl, ndcg: {"click_perplexity": ppl, "ndcg@10": ndcg, "ci90": {"click_perplexity": 0.01},
  ...                           "per_seed": {"click_perplexity": [ppl - 0.01, ppl + 0.01],
  ...                                        "ndcg@10": [ndcg - 0.001, ndcg + 0.001]}}
  >>> results = {"pbm": {"a": cell(1.30, 0.80), "b": cell(1.35, 0.85), "c": {"ndcg@10": 0.9}},
  ...            "_clicks": {"pbm": {"true_model": {"click_perplexity": 1.25}}}}
  >>> text, summary = click_table(results, ["pbm"], ["a", "b", "c"])
  >>> pbm = summary["pbm"]
  >>> pbm["best_by_perplexity"], pbm["best_by_ndcg"], pbm["tied_by_ndcg"], pbm["perplexity_pick_ranks_worse"]
  ('a', 'b', [], True)
  >>> print(text.splitlines()[4])
  | true click model | 1.2500 |
  """
  rows: dict[str, dict] = {}
  summary: dict[str, dict] = {}
  click_methods = [m for m in methods if any("click_perplexity" in results.get(b, {}).get(m, {}) for b in biases)]
  for m in click_methods:
    rows[m] = {}
    for b in biases:
      cell = results.get(b, {}).get(m, {})
      rows[m][b] = (
        {"mean": cell["click_perplexity"], "ci90": cell["ci90"]["click_perplexity"]}
        if "click_perplexity" in cell
        else "n/a"
      )
  rows[CLICK_TRUTH] = {
    b: (results["_clicks"][b]["true_model"]["click_perplexity"] if b in results.get("_clicks", {}) else "n/a")
    for b in biases
  }
  for b in biases:
    cells = {
      m: results[b][m]
      for m in click_methods
      if np.isfinite(results.get(b, {}).get(m, {}).get("click_perplexity", np.nan))
    }
    if cells:
      seeds = lambda metric: {m: cell["per_seed"][metric] for m, cell in cells.items()}  # noqa: E731
      by_ppl, tied_ppl = best_and_ties(seeds("click_perplexity"), higher_is_better=False)
      by_ndcg, tied_ndcg = best_and_ties(seeds("ndcg@10"))
      summary[b] = {
        "best_by_perplexity": by_ppl,
        "tied_by_perplexity": tied_ppl,
        "best_by_ndcg": by_ndcg,
        "tied_by_ndcg": tied_ndcg,
        "perplexity_pick_ranks_worse": by_ppl != by_ndcg and by_ppl not in tied_ndcg,
      }
  text = markdown_table(rows, list(biases), row_header="method")
  text += (
    "\n\nHeld-out click perplexity (per rank, averaged; 1 is perfect, 2 a coin), mean ± 90% t-interval "
    f"half-width over seeds, on fresh sessions of the test queries shown as in training. '{CLICK_TRUTH}': "
    "the generating model's own perplexity on the same sessions, the floor. Only methods that "
    "predict clicks (click_logits) have a row.\n"
  )
  if summary:
    text += (
      "\nBest by held-out click perplexity, and by test nDCG@10, among these methods (tied: a seed-paired "
      "90% interval of the difference that includes 0):\n"
    )
    tied = lambda ms: f" (tied: {', '.join(ms)})" if ms else ""
    for b, s in summary.items():
      text += (
        f"- {b}: {s['best_by_perplexity']}{tied(s['tied_by_perplexity'])} by perplexity; "
        f"{s['best_by_ndcg']}{tied(s['tied_by_ndcg'])} by nDCG@10"
        + ("; the perplexity pick ranks worse beyond the interval" if s["perplexity_pick_ranks_worse"] else "")
        + "\n"
      )
  return text, summary


# ----------------------------------------------------------------------------
# Identifiability of a logged dataset.


def logged_identifiability(dataset, *, top_k: Optional[int] = None, contexts=None, positions=None):
  """IG check on the displayed ``(document, position)`` records of a logged dataset.

  Items are ``dataset.doc_ids`` (distinct feature vectors when absent); bias factors are the positions,
  or ``context * L + position`` with ``contexts`` (``int[Q, L]``). With ``top_k`` only the first
  ``top_k`` positions count (the others were never displayed). ``positions`` (``int[R, Q, L]``: R
  displays of every list, e.g. a stochastic logging policy's, :func:`sampled_display_positions`) replace
  the stored order (item ``i`` at position ``i``).

  Args:
    dataset: the logged :class:`~ultr_jax.data.RankingDataset`.
    top_k: how many leading positions were displayed, or None for all.
    contexts: ``int[Q, L]`` context of every record, or None for position-only bias factors.
    positions: ``int[R, Q, L]`` sampled display positions, or None for the stored order.

  Returns:
    The identifiability report of the records (``identifiable``, ``num_records`` and the graph's
    components; see :func:`~ultr_jax.graph.check_identifiability`).

  >>> from ultr_jax.data import RankingDataset
  >>> ds = RankingDataset(np.zeros((2, 2, 1), np.float32), np.zeros((2, 2), np.float32),
  ...                     np.ones((2, 2), bool), np.arange(2), doc_ids=np.array([[0, 1], [1, 0]]))
  >>> logged_identifiability(ds).identifiable   # both documents seen at both positions
  True
  """
  where = np.asarray(dataset.where, bool)
  q, l = where.shape
  if dataset.doc_ids is not None:
    items = np.asarray(dataset.doc_ids)
  else:
    items, _ = graph_lib.feature_vector_ids(dataset.features, where)
  if positions is None:
    positions = np.broadcast_to(np.arange(l, dtype=np.int32), (q, l))
  positions = np.asarray(positions, np.int32).reshape(-1, q, l)  # [R, Q, L]: R displays of every list
  r = positions.shape[0]
  positions = positions.reshape(r * q, l)
  where, items = np.tile(where, (r, 1)), np.tile(items, (r, 1))
  if contexts is not None:
    contexts = np.tile(np.asarray(contexts), (r, 1))
  if top_k is not None:
    where = where & (positions < int(top_k))
  factors = graph_lib.bias_factor_ids(positions, contexts, list_size=l)
  return graph_lib.check_identifiability(np.where(where, items, 0), np.where(where, factors, 0), where=where)


def _ig_label(rep) -> str:
  if rep.identifiable:
    return "yes (K=1)"
  return f"no (K={rep.num_components})"


# ----------------------------------------------------------------------------
# Applicability.


def not_applicable_reason(method, bias_name: str, batch: Mapping[str, Any]) -> Optional[str]:
  """``"n/a: <reason>"`` when ``method`` cannot be trained on the clicks of ``bias_name``, else None.

  Args:
    method: the method (:func:`~ultr_jax.train.get_method`).
    bias_name: the bias's name, as the reason names it.
    batch: a probe batch of the bias's clicks (its entries and their shapes).

  Returns:
    ``"n/a: <reason>; <bias> provides no '<entry>'"`` or None when the method can be trained.
  """
  missing = method_inputs_missing(method, batch)
  if missing is None:
    return None
  return _reason_text(missing, bias_name)


def _reason_text(missing: str, bias_name: str) -> str:
  why = KEY_REASONS.get(missing, f"needs batch entry {missing!r}")
  return f"n/a: {why}; {bias_name} provides no {missing!r}"


def online_columns(config: ml_collections.ConfigDict) -> list[str]:
  """The report's columns of the online learners: ``online_<method>`` per ``config.online.methods``.

  Args:
    config: the report's config.

  Returns:
    ``["online_<method>", ...]``, empty without ``config.online``.
  """
  online = config.get("online")
  return [f"online_{m}" for m in (online.methods if online is not None else ())]


def _online_users(click_cfg: Mapping[str, Any], config: ml_collections.ConfigDict) -> dict:
  """The bias's click model cut to its own top k, else the logging policy's (what the offline methods see)."""
  return {**click_cfg, "top_k": int(click_cfg.get("top_k") or config.logging_policy.top_k)}


def online_not_applicable_reason(
  click_cfg: Mapping[str, Any], train, config: ml_collections.ConfigDict
) -> Optional[str]:
  """``"n/a: <why>"`` where the online learners cannot face a bias's users on ``train``'s lists, else None.

  Args:
    click_cfg: the bias's click model config (:func:`make_bias_click_fn`).
    train: the candidate-list training split the online users would browse.
    config: the report's config (its ``logging_policy.top_k`` when the bias sets no ``top_k``).

  Returns:
    ``"n/a: online users: <why>"`` or None.
  """
  users = _online_users(click_cfg, config)
  why = online_users_missing(users, train, top_k=users["top_k"])
  return None if why is None else f"n/a: online users: {why}"


def _online_lists(bias, data, seed: int, click_cfg: Mapping[str, Any], config: ml_collections.ConfigDict):
  """``(candidate-list splits, n/a reason or None)`` for the online columns of one bias."""
  candidates = _bias_datasets(bias, data, seed, layout="candidates")
  return candidates, online_not_applicable_reason(click_cfg, candidates[0], config)


def _online_cell(method: str, click_cfg: Mapping[str, Any], datasets, config, seeds):
  """One online learner under one bias's users on the full candidate lists: ``(results entry, table cell)``."""
  users = _online_users(click_cfg, config)
  online_cfg = ml_collections.ConfigDict(config.online.to_dict())
  online_cfg.top_k = users["top_k"]
  train, _, test = datasets
  out = online_learning(method, train, test, click_model=users, config=online_cfg, seeds=seeds)
  entry, summaries = summarize_metrics(out, ("ndcg@10", "online_ndcg@10"))
  return entry, summaries["ndcg@10"]


def _probe_key(probe: Mapping[str, Any]) -> tuple:
  return tuple(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in probe.items()))


def _probe_batch(train, click_fn) -> dict:
  batch = {k: jnp.asarray(v) for k, v in train.as_batch(np.arange(1)).items() if k != "qid"}
  out = jax.eval_shape(click_fn, jax.random.key(0), batch)
  return {**batch, **{k: jnp.zeros(v.shape, v.dtype) for k, v in out.items()}}


def plan_cells(config: ml_collections.ConfigDict, data: Optional[Mapping[str, Any]] = None) -> dict:
  """``{bias: {method: None | "n/a: <reason>"}}`` for every cell of ``config``'s grid (None: trainable).

  Only traces (no training), so it checks a whole grid in seconds; ``data`` defaults to
  :func:`make_bias_data` of ``config``.

  Args:
    config: the report's config.
    data: :func:`make_bias_data` of ``config``, or None to build it.

  Returns:
    ``{bias: {column: None or "n/a: <reason>"}}``.
  """
  data = make_bias_data(config) if data is None else data
  plan: dict[str, dict] = {}
  memo: dict[tuple, Optional[str]] = {}
  for b_idx, bias_name in enumerate(config.biases):
    bias = config.bias_configs[bias_name]
    train, _, _ = _bias_datasets(bias, data, int(config.seed) + 1000 * b_idx)
    click_fn, click_cfg = make_bias_click_fn(bias, train, top_k=config.logging_policy.top_k)
    train = with_policy_examination(bias, train, click_cfg, seed=0, num_samples=1)  # its entry, for tracing
    probe = _probe_batch(train, click_fn)
    plan[bias_name] = {}
    for name in config.methods:
      memo_key = (name, _probe_key(probe))
      if memo_key not in memo:  # biases whose batches have the same entries share the trace
        method = methods_lib.get_method(
          name,
          config.method_configs.get(name, ml_collections.ConfigDict()),
          num_features=train.num_features,
          list_size=train.list_size,
        )
        memo[memo_key] = method_inputs_missing(method, probe)
      missing = memo[memo_key]
      plan[bias_name][name] = None if missing is None else _reason_text(missing, bias_name)
    if online_columns(config):
      _, reason = _online_lists(bias, data, int(config.seed) + 1000 * b_idx, click_cfg, config)
      plan[bias_name].update({column: reason for column in online_columns(config)})
  return plan


# ----------------------------------------------------------------------------
# The heatmap.


def plot_heatmap(results: Mapping[str, Any], biases, methods, path: str, *, metric: str = "ndcg@10") -> None:
  """Method x bias heatmap of ``metric`` (mean, 90% half-width annotated; n/a cells grey).

  Args:
    results: the report's results (:func:`run_report`).
    biases: the biases (columns), in order.
    methods: the methods and online columns (rows), in order.
    path: the PNG file to write.
    metric: the metric shown.
  """
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  values = np.full((len(methods), len(biases)), np.nan)
  text = [["" for _ in biases] for _ in methods]
  for j, b in enumerate(biases):
    for i, m in enumerate(methods):
      cell = results.get(b, {}).get(m, {})
      if metric in cell and cell[metric] is not None:
        values[i, j] = cell[metric]
        text[i][j] = f"{cell[metric]:.3f}\n±{cell['ci90'][metric]:.3f}"
        if cell.get("diverged"):
          text[i][j] += "\ndiverged"
      else:
        text[i][j] = "n/a"
  fig, ax = plt.subplots(figsize=(1.5 * len(biases) + 2.5, 0.5 * len(methods) + 1.5))
  cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
  finite = values[np.isfinite(values)]
  vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
  im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=max(vmax, vmin + 1e-6), aspect="auto")
  for i in range(len(methods)):
    for j in range(len(biases)):
      v = values[i, j]
      light = np.isfinite(v) and (v - vmin) < 0.5 * (vmax - vmin)
      ax.text(j, i, text[i][j], ha="center", va="center", fontsize=7, color="white" if light else "black")
  ig = results.get("_identifiability", {})
  xlabels = [f"{b}\nIG: {ig[b]['label']}" if b in ig else b for b in biases]
  ax.set_xticks(range(len(biases)), xlabels, rotation=30, ha="right")
  ax.set_yticks(range(len(methods)), methods)
  ax.set_title(f"test {metric}: mean ± 90% t-interval half-width over seeds")
  fig.colorbar(im, ax=ax, fraction=0.04)
  fig.tight_layout()
  save_figure(fig, path)


# ----------------------------------------------------------------------------
# The report.


def _write(workdir, results, rows, biases, methods, num_seeds, final: bool, fits=None) -> str:
  columns = ["identifiability (IG)", *methods]
  table = markdown_table(rows, columns, row_header="bias")
  table += (
    f"\n\nTest nDCG@10, mean ± 90% t-interval half-width over {num_seeds} seeds; "
    "identifiability: the IG check (Theorem 1 of Identifiability Matters) on the logged "
    "(document, position) records, (context, position) for context_pbm; K = connected "
    "components. n/a: the click model cannot provide an input the method needs. diverged: "
    "training left non-finite parameters, so the number is not the method's.\n"
  )
  if any(m.startswith("online_") for m in methods):
    table += (
      "online_<method>: an online learner under the same users, ranking the full candidate lists "
      "itself (its online nDCG@10 is in results.json).\n"
    )
  if not final:
    table += "\n(partial: the report is still running)\n"
  if workdir is not None:
    write_results(workdir, results, table=table, rows=rows, columns=columns, row_header="bias", fits=fits)
  return table


def _bias_identifiability(config, bias, train, click_cfg, b_idx: int) -> dict:
  """The logged-data identifiability entry of one bias (``results["_identifiability"][bias]``)."""
  contexts = train.extras.get("context") if "context" in _batch_inputs(click_cfg) else None
  rep = logged_identifiability(
    train,
    top_k=click_cfg.get("top_k"),
    contexts=contexts,
    positions=sampled_display_positions(bias, train, seed=int(config.seed) + 1000 * b_idx),
  )
  return {
    **rep.to_dict(),
    "label": _ig_label(rep),
    "bias_factors": "(context, position)" if contexts is not None else "position",
    "click_model": click_cfg,
  }


def _method_cell(config, name, bias_name, train, valid, test, click_fn, probe, held, seeds) -> tuple:
  """Fits and scores method ``name`` under one bias: ``(entry, table cell, FitResult)``.

  A method the bias's click log cannot serve gives ``({"n/a": reason}, reason, None)``.
  """
  method_cfg = config.method_configs.get(name, ml_collections.ConfigDict())
  method = methods_lib.get_method(name, method_cfg, num_features=train.num_features, list_size=train.list_size)
  reason = not_applicable_reason(method, bias_name, probe)
  if reason is not None:
    return {"n/a": reason}, reason, None
  fit_result = fit(
    method,
    train,
    valid if config.get("select_on_valid", True) else None,
    click_fn=click_fn,
    config=config.train,
    seeds=seeds,
    name=f"{bias_name}/{name}",
  )
  per_seed = evaluate(method, fit_result.params, test)
  if held is not None and method.click_logits is not None:  # the method predicts clicks: score them
    per_seed.update(evaluate_clicks(method, fit_result.params, fit_result.extra, held))
  entry, summaries = summarize_metrics(per_seed, [c for c in (*METRIC_COLUMNS, *CLICK_COLUMNS) if c in per_seed])
  entry["best_step"] = np.asarray(fit_result.best_step).tolist()
  entry["history"] = fit_result.history  # per evaluation: loss, validation metrics
  diverged = not all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(fit_result.final_params))
  cell = summaries["ndcg@10"]
  if diverged:  # NaN/inf weights: the scores tie, so the number is not the method's
    entry["diverged"] = True
    s = summaries["ndcg@10"]
    cell = f"{s['mean']:.4f} ± {s['ci90']:.4f} (diverged: non-finite parameters)"
  return entry, cell, fit_result


def _online_row(config, bias, bias_name, data, b_idx, click_cfg, seeds, results, row, timings) -> None:
  """Fills the online learners' cells of one bias into ``results[bias_name]``, ``row`` and ``timings``."""
  if online_columns(config):
    candidates, reason = _online_lists(bias, data, int(config.seed) + 1000 * b_idx, click_cfg, config)
  for column in online_columns(config):
    t0 = time.perf_counter()
    if reason is not None:
      results[bias_name][column], row[column] = {"n/a": reason}, reason
      continue
    results[bias_name][column], row[column] = _online_cell(
      column[len("online_") :], click_cfg, candidates, config, seeds
    )
    timings[bias_name][column] = time.perf_counter() - t0
    logging.info(
      f"[report] {bias_name}/{column}: ndcg@10 {results[bias_name][column]['ndcg@10']:.4f} "
      f"({timings[bias_name][column]:.1f}s)"
    )


def _report_meta(config, columns, biases, num_seeds, timings, t_start) -> dict:
  """``results["_meta"]`` after the biases ``biases`` (the ones done so far)."""
  return {
    "methods": columns,
    "biases": biases,
    "num_seeds": num_seeds,
    "data": config.data.to_dict(),
    "logging_policy": config.logging_policy.to_dict(),
    "train": config.train.to_dict(),
    "seconds_per_cell": timings,
    **({"online": config.online.to_dict()} if online_columns(config) else {}),
    "seconds": time.perf_counter() - t_start,
  }


def _run_bias(config, data, bias_name, b_idx, seeds, sessions_per_list, results, timings, fits, workdir) -> dict:
  """Trains every method and online learner under bias ``bias_name``; fills ``results`` and ``fits`` (run name ->
  :class:`~ultr_jax.train.FitResult`) and returns its row."""
  methods = list(config.methods)
  bias = config.bias_configs[bias_name]
  train, valid, test = _bias_datasets(bias, data, int(config.seed) + 1000 * b_idx)
  click_fn, click_cfg = make_bias_click_fn(bias, train, top_k=config.logging_policy.top_k)
  train = with_policy_examination(bias, train, click_cfg, seed=int(config.seed) + 1000 * b_idx + 2)
  ig = _bias_identifiability(config, bias, train, click_cfg, b_idx)
  results["_identifiability"][bias_name] = ig
  row: dict[str, Any] = {"identifiability (IG)": ig["label"]}
  results[bias_name] = {}
  timings[bias_name] = {}
  probe = _probe_batch(train, click_fn)
  logging.info(f"[report] bias {bias_name}: IG {ig['label']} ({ig['num_records']} records)")
  held = None
  if sessions_per_list:
    held, truth = held_out_click_log(
      test, click_fn, list_size=train.list_size, sessions=sessions_per_list, seed=int(config.seed) + 1000 * b_idx + 1
    )
    results["_clicks"][bias_name] = {"true_model": truth, "pages": held.num_queries}
  histories: dict[str, list] = {}
  for name in methods:
    t0 = time.perf_counter()
    entry, row[name], fit_result = _method_cell(
      config, name, bias_name, train, valid, test, click_fn, probe, held, seeds
    )
    results[bias_name][name] = entry
    if fit_result is None:
      continue
    fits[f"{bias_name}/{name}"] = fit_result
    histories[name] = fit_result.history
    timings[bias_name][name] = time.perf_counter() - t0
    logging.info(f"[report] {bias_name}/{name}: ndcg@10 {entry['ndcg@10']:.4f} ({timings[bias_name][name]:.1f}s)")
  _online_row(config, bias, bias_name, data, b_idx, click_cfg, seeds, results, row, timings)
  if workdir is not None and histories:
    plot_learning_curves(
      histories,
      os.path.join(workdir, "curves", f"{bias_name}.png"),
      relative=("train/loss",),
      metrics=("train/loss", f"valid/{config.train.select_metric}"),
    )
  return row


def run_report(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict:
  """Trains ``config.methods`` under every bias of ``config.biases`` and writes the report.

  The files are rewritten after every bias, so a long run shows its progress.

  Args:
    config: the report's config (:func:`default_config`): ``methods``, ``biases`` and their
      ``bias_configs``, ``data``, ``logging_policy``, ``train``, ``num_seeds``, ``seed``; its values are
      checked against ``CONFIG_RULES`` before any work.
    workdir: the output directory (``results.json``, ``report.md``, ``heatmap.png``, ``curves/``,
      ``clicks.md``), or None to write nothing.

  Returns:
    The mapping written to ``results.json`` (see the module docstring): bias -> method -> its metrics,
    plus ``_identifiability``, ``_meta`` and, with ``click_eval.sessions_per_list``, ``_clicks``.
  """
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  t_start = time.perf_counter()
  data = make_bias_data(config)
  columns = list(config.methods) + online_columns(config)
  biases = list(config.biases)
  seeds = [int(config.seed) + i for i in range(int(config.num_seeds))]
  sessions_per_list = int(config.get("click_eval", {}).get("sessions_per_list", 0) or 0)
  results: dict[str, Any] = {"_identifiability": {}, **({"_clicks": {}} if sessions_per_list else {})}
  rows: dict[str, dict] = {}
  timings: dict[str, dict] = {}
  fits: dict[str, FitResult] = {}
  progress = Progress("report", total=len(biases), start=t_start)
  for b_idx, bias_name in enumerate(biases):
    rows[bias_name] = _run_bias(
      config, data, bias_name, b_idx, seeds, sessions_per_list, results, timings, fits, workdir
    )
    results["_meta"] = _report_meta(config, columns, biases[: b_idx + 1], len(seeds), timings, t_start)
    _write(workdir, results, rows, biases, columns, len(seeds), final=b_idx == len(biases) - 1, fits=fits)
    progress.done(f"bias {bias_name}")
  table = _write(None, results, rows, biases, columns, len(seeds), final=True)
  if sessions_per_list:
    clicks_text, best = click_table(results, biases, columns)
    for bias_name, picks in best.items():
      results["_clicks"][bias_name].update(picks)
    if workdir is not None:
      atomic_write_text(os.path.join(workdir, "clicks.md"), clicks_text)
  if workdir is not None:
    plot_heatmap(results, biases, columns, os.path.join(workdir, "heatmap.png"))
    results["_meta"]["seconds"] = time.perf_counter() - t_start
    write_results(
      workdir,
      results,
      table=table,
      rows=rows,
      columns=["identifiability (IG)", *columns],
      row_header="bias",
      fits=fits,
    )
  logging.info(table)
  if sessions_per_list:
    logging.info(clicks_text)
  logging.info(f"total time {time.perf_counter() - t_start:.1f}s")
  return results


run = run_report
