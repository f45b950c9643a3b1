r"""Which click model explains a log? Fit every session click model, score them on held-out sessions.

On the embedded default, logs are simulated from each click model in turn
(a noisy logging ranker over synthetic queries, several seeds), every
fittable model (:data:`~ultr_jax.simulation.FITTABLE_CLICK_MODELS`) is fitted
to 80% of the sessions by :func:`~ultr_jax.simulation.fit_click_model` (:class:`~ultr_jax.simulation.LBFGS` on the sessions) and
scored on the rest (:func:`~ultr_jax.simulation.evaluate_click_model`): the
conditional perplexity, the CTR perplexity and the log-likelihood, as
PyClick and CLAX report, plus the attraction error against the simulator's
truth.

With ``config.click_log`` the same is done for a real session log, streamed
and never read whole, so it may be larger than memory: a file, a glob or a
directory of them, in ``config.click_log_format`` (the delimited rows of
:func:`~ultr_jax.data.read_click_log` with a ``session_id`` column; Baidu-ULTR's
raw ``part-*.gz`` session files with ``"baidu"``; the Yandex challenge logs with
``"yandex"`` or ``"yandex_personalized"``), or the Parquet session shards of
:func:`~ultr_jax.data.convert_click_log` (any format). :func:`score_click_log`
opens it with :func:`~ultr_jax.data.open_click_log` (a text log is converted
to temporary session shards first); the held-out sessions are those
:func:`~ultr_jax.data.held_out_sessions` picks (a hash of the session's index
in the log and ``config.seed``: the same split however the log is read or
batched); each model is fitted by :func:`~ultr_jax.simulation.fit_click_model` with the
:class:`~ultr_jax.simulation.Statistics` solver (one pass gathering its
sufficient statistics over the training sessions, then a fit whose cost does
not grow with the log; :class:`~ultr_jax.simulation.Minibatch` where they outgrow the budget) and scored over a second pass
(:func:`~ultr_jax.simulation.evaluate_click_model_stream`), the CTR baselines
from the impressions and clicks per (document, rank) of one pass
(:class:`~ultr_jax.simulation.Counts`). Memory holds a
few batches and the statistics, not the sessions.

``results.json`` maps ``true=<model>`` (or ``log``) to the fitted model's
metrics, each ``{"mean", "std", "ci90"}`` over seeds (and
``perplexity_minus_true_model``, the seed-paired perplexity gap to the
generating model's own fit, and ``perplexity_minus_true_parameters``, the gap
to the generating parameters); on simulated logs ``"true parameters"`` holds
the held-out scores of the parameters that generated the log (the sampler's
own click probabilities: the floor, in expectation, of any fitted model);
``table.md`` / ``table.csv`` hold the held-out perplexity (rows: the
generating model, columns: the fitted one, then the click-through-rate
baselines of ``config.ctr_models`` (:class:`~ultr_jax.simulation.Counts`:
what counting clicks per rank, document or both predicts), then the true parameters),
``fig_perplexity_per_rank.png`` the per-rank curves.
"""

import os
import time
from typing import Any, Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from ultr_jax import _processes
from ultr_jax import data as data_lib
from ultr_jax import simulation as sim
from ultr_jax.metrics import clicks as click_metrics
from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.click_models import CONFIG_RULES, VARIANTS, default_click_model_config, default_config
from ultr_jax.studies._progress import Progress
from ultr_jax.studies.figures import save_figure
from ultr_jax.train.results import markdown_table, summarize, write_results

__all__ = [
  "CONFIG_RULES",
  "TRUE_PARAMETERS",
  "default_click_model_config",
  "simulate_study_logs",
  "fit_and_score",
  "score_ctr_baseline",
  "score_true_parameters",
  "log_split",
  "fit_and_score_stream",
  "score_ctr_baseline_stream",
  "score_log_batches",
  "score_click_log",
  "run_click_model_study",
  "VARIANTS",
  "default_config",
]

METRICS = ("perplexity", "ctr_perplexity", "log_likelihood", "attraction_mae", "fit_seconds")
TRUE_PARAMETERS = "true parameters"


def _attraction(config, seed) -> np.ndarray:
  """ULTRA's ERR-style click probability of graded labels drawn with ``label_fractions``."""
  rng = np.random.default_rng(seed)
  labels = rng.choice(
    len(config.label_fractions),
    size=(config.num_queries, config.list_size),
    p=np.asarray(config.label_fractions) / np.sum(config.label_fractions),
  )
  return np.asarray(sim.relevance_probability(jnp.asarray(labels, jnp.float32)))


def simulate_study_logs(config: ml_collections.ConfigDict, true_model: str, seed: int) -> dict:
  """One seed's simulated log for ``true_model``, split into ``train`` / ``test`` sessions.

  Args:
    config: the study's config (``num_queries``, ``num_sessions``, ``test_fraction``, ``noise``,
      ``simulators``).
    true_model: the generating click model's name (a key of ``config.simulators`` sets its parameters).
    seed: the seed of the attraction table, the per-document parameters and the sessions.

  Returns:
    ``{"train": sessions, "test": sessions, "attraction": float[num_docs], "num_docs": int}``; the sessions
    are :func:`~ultr_jax.simulation.simulate_session_log`'s arrays (``doc_ids``, ``clicks``, ``where``, ...).

  >>> c = default_click_model_config(); c.num_queries, c.num_sessions = 4, 50
  >>> logs = simulate_study_logs(c, "dcm", 0)
  >>> print(logs["train"]["doc_ids"].shape, logs["test"]["doc_ids"].shape, logs["attraction"].shape)
  (40, 10) (10, 10) (40,)
  """
  attraction = _attraction(config, seed)
  params = {}
  rng = np.random.default_rng([seed, 1])
  for name, value in dict(config.simulators.get(true_model, {})).items():
    if name.endswith("_per_document"):
      lo, hi = value
      params[name[: -len("_per_document")]] = rng.uniform(lo, hi, size=attraction.shape).astype(np.float32)
    else:
      params[name] = value
  log = sim.simulate_session_log(
    jax.random.key(seed),
    true_model,
    jnp.asarray(attraction),
    num_sessions=int(config.num_sessions),
    noise=float(config.noise),
    **params,
  )
  log = {k: np.asarray(v) for k, v in log.items() if k != "queries"}
  n_train = int(round(config.num_sessions * (1 - config.test_fraction)))
  return {
    "train": {k: v[:n_train] for k, v in log.items()},
    "test": {k: v[n_train:] for k, v in log.items()},
    "attraction": attraction.reshape(-1),
    "num_docs": attraction.size,
  }


def fit_and_score(model: str, train: dict, test: dict, *, num_docs: int, config, attraction=None) -> Optional[dict]:
  """Fits ``model`` on ``train`` sessions and scores it on ``test``; None if the model cannot
  explain the log (the cascade on sessions with several clicks).

  Args:
    model: the click model to fit (one of :data:`~ultr_jax.simulation.FITTABLE_CLICK_MODELS`).
    train: the training sessions (``doc_ids``, ``clicks``, ``where``).
    test: the held-out sessions.
    num_docs: the id range of ``doc_ids``.
    config: the study's config (``l2``, ``max_iters``, ``tol``).
    attraction: the true ``float[num_docs]`` attraction, for ``attraction_mae``, or None.

  Returns:
    The held-out scores (``perplexity``, ``perplexity_per_rank``, ``ctr_perplexity``, ``log_likelihood``)
    with ``fit_seconds``, ``converged`` and ``attraction_mae`` (None without ``attraction``); or None.

  >>> c = default_click_model_config(); c.num_queries, c.num_sessions = 4, 200
  >>> logs = simulate_study_logs(c, "pbm", 0)
  >>> out = fit_and_score("pbm", logs["train"], logs["test"], num_docs=logs["num_docs"], config=c)
  >>> print(sorted(out))
  ['attraction_mae', 'converged', 'ctr_perplexity', 'fit_seconds', 'log_likelihood', 'perplexity', 'perplexity_per_rank']
  """
  try:  # the fit refuses a log the model cannot explain (the cascade: a second click)
    m = sim.get_click_model(model)
    if isinstance(m, sim.SessionChecker):
      m.check_sessions(np.asarray(train["clicks"]), np.asarray(train["where"], bool))
  except ValueError:
    return None
  start = time.perf_counter()
  fit = sim.fit_click_model(
    model,
    {k: train[k] for k in ("doc_ids", "clicks", "where")},
    solver=sim.LBFGS(max_iters=int(config.max_iters), tol=float(config.tol)),
    num_docs=num_docs,
    l2=float(config.l2),
    prior="zero",  # the prior this study's expected metrics were recorded with
  )
  seconds = time.perf_counter() - start
  out = sim.evaluate_click_model(model, fit.params, test["doc_ids"], test["clicks"], where=test["where"])
  out["fit_seconds"] = seconds
  out["converged"] = fit.converged
  out["attraction_mae"] = (
    float(np.abs(np.asarray(fit.params["attraction"]) - attraction).mean()) if attraction is not None else None
  )
  return out


def score_ctr_baseline(model: str, train: dict, test: dict, *, num_docs: int, config) -> dict:
  """A click-through-rate baseline (:class:`~ultr_jax.simulation.Counts`) counted on ``train``, scored on
  ``test`` in :func:`fit_and_score`'s form (its click probabilities are conditional and marginal at once).

  Args:
    model: the click-through-rate model (``"rctr"``, ``"dctr"``, ``"drctr"``: :class:`~ultr_jax.simulation.Counts`).
    train: the training sessions (``doc_ids``, ``clicks``, ``where``).
    test: the held-out sessions.
    num_docs: the id range of ``doc_ids``.
    config: the study's config (``ctr_prior``).

  Returns:
    :func:`fit_and_score`'s scores, with ``converged`` True and ``attraction_mae`` None.

  >>> c = default_click_model_config(); c.num_queries, c.num_sessions = 4, 200
  >>> logs = simulate_study_logs(c, "pbm", 0)
  >>> out = score_ctr_baseline("dctr", logs["train"], logs["test"], num_docs=logs["num_docs"], config=c)
  >>> bool(out["perplexity"] == out["ctr_perplexity"]), out["attraction_mae"]
  (True, None)
  """
  start = time.perf_counter()
  counts = sim.Counts(prior=float(config.ctr_prior))
  log = {k: train[k] for k in ("doc_ids", "clicks", "where")}
  params = sim.fit_click_model(model, log, solver=counts, num_docs=num_docs).params
  p = jnp.asarray(sim.ctr_model_predict(model, params, test["doc_ids"]))
  out = sim.click_prediction_scores(p, p, test["clicks"], where=test["where"])
  return {**out, "fit_seconds": time.perf_counter() - start, "converged": True, "attraction_mae": None}


def score_true_parameters(test: dict) -> dict:
  """Held-out scores of the parameters that generated a simulated log, in :func:`fit_and_score`'s form.

  From the sampler's own ``conditional_click_prob`` and ``click_prob``
  (:func:`~ultr_jax.simulation.simulate_session_log`) by
  :func:`~ultr_jax.simulation.click_prediction_scores`, as :func:`~ultr_jax.simulation.evaluate_click_model`
  scores a fit: no model fitted to the log can beat them in expectation, so a fitted model's gap to them is
  its estimation and misspecification error.

  Args:
    test: held-out sessions of :func:`simulate_study_logs` (with ``conditional_click_prob`` and
      ``click_prob``).

  Returns:
    :func:`fit_and_score`'s scores, with ``fit_seconds`` and ``attraction_mae`` None.

  >>> c = default_click_model_config(); c.num_queries, c.num_sessions = 4, 200
  >>> logs = simulate_study_logs(c, "dcm", 0)
  >>> out = score_true_parameters(logs["test"])
  >>> bool(1.0 < out["perplexity"] < out["ctr_perplexity"] < 2.0)  # the history helps the DCM
  True
  """
  out = sim.click_prediction_scores(
    test["conditional_click_prob"], test["click_prob"], test["clicks"], where=test["where"]
  )
  return {**out, "fit_seconds": None, "converged": True, "attraction_mae": None}


class _Unexplained(Exception):
  """A training session the model cannot explain (the cascade: a second click)."""


def _explained(model, batches):
  """The batches, after ``model.check_sessions`` of each (raising :class:`_Unexplained`)."""
  for b in batches:
    if not isinstance(model, sim.SessionChecker):
      yield b
      continue
    try:
      model.check_sessions(np.asarray(b["clicks"]), _where(b))
    except ValueError as e:
      raise _Unexplained(str(e)) from None
    yield b


def _where(batch) -> np.ndarray:
  where = np.asarray(batch["where"], bool)
  return where & np.asarray(batch["valid"], bool)[:, None] if "valid" in batch else where


def log_split(batches, *, held_out: bool, fraction: float, seed: int):
  """The training (``held_out=False``) or held-out sessions of a stream of session batches, batch by batch.

  A session is held out where :func:`~ultr_jax.data.held_out_sessions` of its ``session`` index says so;
  the others' ``valid`` becomes False (shapes unchanged, so a jitted step still compiles once).

  Args:
    batches: an iterable of session batches, each with ``session`` and ``valid``.
    held_out: yield the held-out sessions (True) or the training ones (False).
    fraction: the held-out fraction of sessions.
    seed: the seed of the split.

  Returns:
    A generator of the batches, ``valid`` restricted to the chosen sessions.

  >>> b = {"session": np.arange(4), "valid": np.ones(4, bool)}
  >>> [x["valid"].tolist() for x in log_split([b], held_out=True, fraction=0.5, seed=0)]
  [[False, True, False, False]]
  """
  for b in batches:
    test = data_lib.held_out_sessions(b["session"], fraction=fraction, seed=seed)
    yield {**b, "valid": np.asarray(b["valid"], bool) & (test if held_out else ~test)}


def fit_and_score_stream(model: str, train, test, *, num_docs: int, config) -> Optional[dict]:
  """:func:`fit_and_score` over streams: ``train()`` and ``test()`` return fresh iterables of session batches.

  The fit is :func:`~ultr_jax.simulation.fit_click_model` by :class:`~ultr_jax.simulation.Statistics` (one pass
  over ``train()``), the
  scores :func:`~ultr_jax.simulation.evaluate_click_model_stream` (one pass over ``test()``); None if
  the model cannot explain a training session (the cascade on a session with several clicks). Where the
  model's statistics outgrow ``config.statistics_memory_budget_bytes`` (a cascade-family model on a log whose lists
  rarely repeat), the solver's fallback :class:`~ultr_jax.simulation.Minibatch` fits it instead (Adam,
  ``config.minibatch_epochs`` passes over ``train()``), and ``fit`` says which.

  Args:
    model: the click model to fit (one of :data:`~ultr_jax.simulation.FITTABLE_CLICK_MODELS`).
    train: returns a fresh iterable of training session batches.
    test: returns a fresh iterable of held-out session batches.
    num_docs: the id range of ``doc_ids``.
    config: the study's config (``l2``, ``max_iters``, ``tol``, ``statistics_memory_budget_bytes``,
      ``minibatch_epochs``).

  Returns:
    :func:`fit_and_score`'s scores plus ``fit`` (how the model was fitted), or None.

  >>> c = default_click_model_config(); c.num_queries, c.num_sessions = 4, 200
  >>> logs = simulate_study_logs(c, "pbm", 0)
  >>> out = fit_and_score_stream("pbm", lambda: [logs["train"]], lambda: [logs["test"]], num_docs=logs["num_docs"],
  ...                            config=c)
  >>> print(sorted(out), out["fit"])  # doctest: +NORMALIZE_WHITESPACE
  ['attraction_mae', 'converged', 'ctr_perplexity', 'fit', 'fit_seconds', 'log_likelihood', 'num_sessions',
   'perplexity', 'perplexity_per_rank'] statistics
  """
  processes = jax.process_count()
  fallback = sim.Minibatch(
    optimizer=optax.adam(float(config.minibatch_learning_rate)), epochs=int(config.minibatch_epochs)
  )
  options = _statistics_options(config)
  solver = sim.Statistics(
    budget=options["memory_budget_bytes"],
    spill_dir=options["spill_dir"],
    across_processes=options["across_processes"],
    max_iters=int(config.max_iters),
    tol=float(config.tol),
    fallback=fallback if processes == 1 else None,  # the minibatch fit runs in one process
  )
  start = time.perf_counter()
  try:
    fit = sim.fit_click_model(
      model,
      lambda: _explained(sim.get_click_model(model), train()),
      solver=solver,
      num_docs=num_docs,
      l2=float(config.l2),
      prior="zero",  # the prior this study's expected metrics were recorded with
    )
  except _Unexplained:
    return None
  except sim.StatisticsTooLarge as e:
    raise ValueError(
      f"{model}: its statistics do not reduce this log and the fallback (Adam over the stream) runs in one "
      f"process only; run it with --num_processes=1 or leave {model} out of config.fit_models ({e})"
    ) from e
  how = "minibatch" if isinstance(fit.solver, sim.Minibatch) else "statistics"
  if how == "minibatch":
    logging.info("[click models] %s: %s", model, fit.stop_reason)
  seconds = time.perf_counter() - start
  out = sim.evaluate_click_model_stream(model, fit.params, test(), across_processes=jax.process_count() > 1)
  return {**out, "fit_seconds": seconds, "converged": fit.converged, "attraction_mae": None, "fit": how}


def _statistics_options(config) -> dict:
  """The statistics' memory budget and spill directory; in a run of several processes (each reading its own row
  groups) the statistics are merged across them (:func:`~ultr_jax.simulation.gather_click_statistics`)."""
  return {
    "memory_budget_bytes": int(config.statistics_memory_budget_bytes),
    "spill_dir": config.get("statistics_spill_dir", "") or None,
    "across_processes": jax.process_count() > 1,
  }


def _prediction_scores_stream(predict, batches) -> dict:
  """:func:`~ultr_jax.simulation.click_prediction_scores` of predictions equal conditionally and marginally (the
  CTR baselines'), from sums per rank accumulated over a stream (as
  :func:`~ultr_jax.simulation.evaluate_click_model_stream` accumulates a click model's)."""
  total, per_rank, count, sessions = 0.0, None, None, 0.0
  for b in batches:
    where = _where(b)
    clicks = np.asarray(b["clicks"], np.float32)
    ll = click_metrics.click_log_likelihood(
      jnp.asarray(predict(b["doc_ids"])), jnp.asarray(clicks), where=jnp.asarray(where), reduce_fn=None
    )
    ll = np.where(where, np.asarray(ll, np.float64), 0.0)
    total += float(ll.sum())
    per_rank = ll.sum(0) if per_rank is None else per_rank + ll.sum(0)
    count = where.sum(0) if count is None else count + where.sum(0)
    sessions += float(where.any(-1).sum())
  if per_rank is None or count is None:  # set together by the first batch
    raise ValueError("the held-out stream is empty")
  if jax.process_count() > 1:  # each process scored its own row groups: add the sums
    per_rank, count = _processes.process_sum(per_rank), _processes.process_sum(count)
    total, sessions = (float(v) for v in _processes.process_sum(np.asarray([total, sessions])))
  ppl = np.exp(-per_rank / np.maximum(count, 1.0))
  shown = count > 0
  mean = float(np.sum(np.where(shown, ppl, 0.0)) / max(shown.sum(), 1))
  return {
    "log_likelihood": total / sessions if sessions else 0.0,
    "perplexity": mean,
    "perplexity_per_rank": [float(v) for v in ppl],
    "ctr_perplexity": mean,
    "num_sessions": sessions,
  }


def score_ctr_baseline_stream(model: str, statistics, test, *, num_docs: int, config) -> dict:
  """:func:`score_ctr_baseline` over a stream: the rates from the training log's impressions and clicks per
  (document, rank) (``statistics``: :func:`~ultr_jax.simulation.gather_click_statistics` ``("pbm", ...)``, one
  pass shared by the baselines), the scores over ``test()`` (fresh session batches).

  ``fit_seconds`` counts the rates only (the shared pass is the caller's to add).

  Args:
    model: the click-through-rate model (as :func:`score_ctr_baseline`'s).
    statistics: the training log's ``("pbm", ...)`` click statistics.
    test: returns a fresh iterable of held-out session batches.
    num_docs: the id range of ``doc_ids``.
    config: the study's config (``ctr_prior``).

  Returns:
    :func:`fit_and_score`'s scores, with ``converged`` True and ``attraction_mae`` None.

  >>> c = default_click_model_config(); c.num_queries, c.num_sessions = 4, 200
  >>> logs = simulate_study_logs(c, "pbm", 0)
  >>> stats = sim.gather_click_statistics("pbm", [logs["train"]])
  >>> out = score_ctr_baseline_stream("dctr", stats, lambda: [logs["test"]], num_docs=logs["num_docs"], config=c)
  >>> want = score_ctr_baseline("dctr", logs["train"], logs["test"], num_docs=logs["num_docs"], config=c)
  >>> abs(out["perplexity"] - want["perplexity"]) < 1e-6
  True
  """
  start = time.perf_counter()
  counts = sim.Counts(prior=float(config.ctr_prior))
  params = sim.fit_click_model(model, statistics, solver=counts, num_docs=num_docs).params
  seconds = time.perf_counter() - start
  out = _prediction_scores_stream(lambda ids: sim.ctr_model_predict(model, params, ids), test())
  return {**out, "fit_seconds": seconds, "converged": True, "attraction_mae": None}


def score_log_batches(batches, *, num_docs: int, config, columns=None) -> dict:
  r"""Every model of ``columns`` (default ``config.fit_models`` then ``config.ctr_models``) fitted on the
  training sessions of ``batches()`` and scored on its held-out ones (:func:`log_split` with
  ``config.test_fraction`` and ``config.seed``).

  Args:
    batches: returns a fresh iterable of session batches (``doc_ids``, ``clicks``, ``where``, ``valid``,
      ``session``: :meth:`~ultr_jax.data.StreamedClickLog.stream`, or
      :func:`~ultr_jax.data.session_batches` of a log in memory: the same sessions give the same results).
    num_docs: the id range of ``doc_ids``.
    config: the study's config.
    columns: the models.

  Returns:
    ``{model: scores}`` (:func:`fit_and_score_stream`'s or :func:`score_ctr_baseline_stream`'s; None for a
    model that cannot explain the log).
  """
  ctr_models = tuple(config.ctr_models or ())
  columns = tuple(config.fit_models) + ctr_models if columns is None else tuple(columns)
  fraction, seed = float(config.test_fraction), int(config.seed)
  train = lambda: log_split(batches(), held_out=False, fraction=fraction, seed=seed)  # noqa: E731
  test = lambda: log_split(batches(), held_out=True, fraction=fraction, seed=seed)  # noqa: E731
  out, statistics, gather_seconds = {}, None, 0.0
  progress = Progress("click models", total=len(columns))  # one line per fitted model
  for m in columns:
    if m in ctr_models:
      if statistics is None:
        start = time.perf_counter()
        statistics = sim.gather_click_statistics("pbm", train(), **_statistics_options(config))
        if isinstance(statistics, sim.PartitionedStatistics):  # the CTR rates read every record at once
          statistics = statistics.to_statistics()
        gather_seconds = time.perf_counter() - start
      out[m] = score_ctr_baseline_stream(m, statistics, test, num_docs=num_docs, config=config)
      out[m]["fit_seconds"] += gather_seconds
    else:
      out[m] = fit_and_score_stream(m, train, test, num_docs=num_docs, config=config)
    progress.done(
      f"log {m} "
      + (
        "n/a (several clicks per session)"
        if out[m] is None
        else f"perplexity {out[m]['perplexity']:.4f}, LL {out[m]['log_likelihood']:.4f} ({out[m]['fit_seconds']:.1f}s"
        + (", by Adam over the stream: its statistics do not reduce)" if out[m].get("fit") == "minibatch" else ")")
      )
    )
  return out


def score_click_log(config, columns=None) -> dict:
  """:func:`score_log_batches` of ``config.click_log``, streamed (see the module docstring).

  The log is opened with :func:`~ultr_jax.data.open_click_log` (``config.click_log_format``; a text log
  converted into ``config.click_log_shard_dir``, or a temporary directory removed afterwards) and read in
  batches of ``config.click_log_batch_size`` sessions, lists of ``config.list_size_of_log`` (0: the longest).

  Args:
    config: the study's config (``click_log``, ``click_log_format``, ``click_log_shard_dir``,
      ``click_log_batch_size``, ``list_size_of_log`` and those of :func:`score_log_batches`).
    columns: the models to score, or None for ``config.fit_models`` then ``config.ctr_models``.

  Returns:
    :func:`score_log_batches`'s ``{model: scores}``.
  """
  shard_dir = config.get("click_log_shard_dir", "") or None
  with data_lib.open_click_log(config.click_log, format=config.click_log_format, shard_dir=shard_dir) as log:
    list_size = int(config.get("list_size_of_log", 0)) or None
    batch_size = int(config.get("click_log_batch_size", 4096))
    logging.info(f"[click models] log: {log}")
    batches = lambda: log.stream(  # noqa: E731 (each process its own row groups; the statistics are merged)
      batch_size=batch_size, list_size=list_size, process_index=jax.process_index(), process_count=jax.process_count()
    )
    return score_log_batches(batches, num_docs=log.num_docs, config=config, columns=columns)


def _summaries(per_seed: list[dict]) -> dict:
  entry = {}
  for m in METRICS:
    values = [r[m] for r in per_seed if r[m] is not None]
    if values:
      entry[m] = summarize(values)
  entry["perplexity_per_rank"] = np.mean([r["perplexity_per_rank"] for r in per_seed], axis=0).tolist()
  entry["converged"] = all(r["converged"] for r in per_seed)
  if any("fit" in r for r in per_seed):  # a streamed log: by its statistics, or by Adam where they did not reduce
    entry["fit"] = per_seed[0]["fit"]
  return entry


def _plot(results: dict, path: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = list(results)
  fig, axes = plt.subplots(1, len(rows), figsize=(4 * len(rows), 3.2), squeeze=False)
  for ax, row in zip(axes[0], rows):
    for model, entry in results[row].items():
      if entry is None or "perplexity_per_rank" not in entry:
        continue
      ppl = entry["perplexity_per_rank"]
      style = {"color": "k", "ls": "--"} if model == TRUE_PARAMETERS else {"marker": "o", "ms": 3}
      ax.plot(np.arange(1, len(ppl) + 1), ppl, label=model, **style)
    ax.set_title(row)
    ax.set_xlabel("rank")
    ax.set_ylabel("conditional perplexity")
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  save_figure(fig, path)


def _write(workdir, results, fit_models):
  rows = {row: {m: (e["perplexity"] if e else "n/a") for m, e in entry.items()} for row, entry in results.items()}
  ll_rows = {
    row: {m: (e["log_likelihood"] if e else "n/a") for m, e in entry.items()} for row, entry in results.items()
  }
  simulated = any(TRUE_PARAMETERS in entry for entry in results.values())
  columns = [*fit_models, *([TRUE_PARAMETERS] if simulated else [])]
  table = (
    "Held-out conditional perplexity (lower is better; rows: the log, columns: the fitted model"
    + (f"; '{TRUE_PARAMETERS}': the parameters that generated the log, the floor" if simulated else "")
    + ")\n\n"
    + markdown_table(rows, columns, row_header="log")
    + "\n\n"
    + "Held-out log-likelihood per session (nats; higher is better)\n\n"
    + markdown_table(ll_rows, columns, row_header="log")
  )
  write_results(workdir, results, table=table, rows=rows, columns=columns, row_header="log")
  return table


def run_click_model_study(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict[str, Any]:
  """Runs the study and writes ``results.json``, ``table.md``/``.csv`` and the figure to ``workdir``.

  Args:
    config: the study's config (:func:`default_config`): the simulated logs (``true_models``,
      ``num_queries``, ``num_sessions``, ``num_seeds``) or ``click_log``, ``fit_models``, ``ctr_models``;
      its values are checked against ``CONFIG_RULES`` before any work.
    workdir: the output directory, or None to write nothing.

  Returns:
    The results mapping (see the module docstring).
  """
  validate_config(config, CONFIG_RULES)  # every value in range before any work
  fit_models = tuple(config.fit_models)
  for m in fit_models:
    if m not in sim.FITTABLE_CLICK_MODELS:
      raise ValueError(f"config.fit_models: unknown click model {m!r} (expected {sim.FITTABLE_CLICK_MODELS})")
  ctr_models = tuple(config.ctr_models or ())
  for m in ctr_models:
    if m not in sim.CTR_MODELS:
      raise ValueError(f"config.ctr_models: unknown CTR model {m!r} (expected {sim.CTR_MODELS})")

  def score(m, train, test, num_docs, attraction=None):
    if m in ctr_models:
      return score_ctr_baseline(m, train, test, num_docs=num_docs, config=config)
    return fit_and_score(m, train, test, num_docs=num_docs, config=config, attraction=attraction)

  columns = fit_models + ctr_models
  if not columns:
    raise ValueError(
      "config.fit_models and config.ctr_models are both empty: the study has nothing to do; "
      f"name at least one click model ({sim.FITTABLE_CLICK_MODELS}) or CTR model ({sim.CTR_MODELS})"
    )
  if workdir:
    os.makedirs(workdir, exist_ok=True)
  results: dict[str, Any] = {}
  start = time.perf_counter()
  num_simulated = 0 if config.click_log else len(config.true_models) * int(config.num_seeds) * len(columns)
  progress = Progress("click models", total=num_simulated, start=start)  # one line per fitted model and log
  if config.click_log:
    scores = score_click_log(config, columns=columns)
    results["log"] = {m: None if out is None else _summaries([out]) for m, out in scores.items()}
  else:
    for true_model in config.true_models:
      per_model: dict[str, list] = {m: [] for m in columns}
      truth = []
      for s in range(int(config.num_seeds)):
        logs = simulate_study_logs(config, true_model, int(config.seed) + s)
        for m in columns:
          out = score(m, logs["train"], logs["test"], logs["num_docs"], logs["attraction"])
          per_model[m].append(out)
          line = "n/a (several clicks per session)" if out is None else f"perplexity {out['perplexity']:.4f}"
          progress.done(f"true={true_model} seed={s} {m}: {line}")
        truth.append(score_true_parameters(logs["test"]))
      row = {m: (None if any(r is None for r in v) else _summaries(v)) for m, v in per_model.items()}
      for m in columns:  # paired over seeds: the same logs score every model and the truth
        r = row[m]
        if r:
          r["perplexity_minus_true_parameters"] = summarize(
            [a["perplexity"] - b["perplexity"] for a, b in zip(per_model[m], truth)]
          )
          if row.get(true_model) and m != true_model:
            r["perplexity_minus_true_model"] = summarize(
              [a["perplexity"] - b["perplexity"] for a, b in zip(per_model[m], per_model[true_model])]
            )
      row[TRUE_PARAMETERS] = _summaries(truth)
      results[f"true={true_model}"] = row
      scored = {m: r for m in columns if (r := row[m])}
      best = min(scored, key=lambda m: scored[m]["perplexity"]["mean"])
      logging.info(
        f"[click models] true={true_model}: best held-out perplexity {best} "
        f"({scored[best]['perplexity']['mean']:.4f}); {time.perf_counter() - start:.0f}s"
      )
      if workdir:
        _write(workdir, results, columns)
  if workdir:
    table = _write(workdir, results, columns)
    _plot(results, os.path.join(workdir, "fig_perplexity_per_rank.png"))
    logging.info(table)
  return results


run = run_click_model_study
