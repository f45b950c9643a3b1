r"""Off-policy evaluation of rankers from click logs: which estimator to trust, under which users, with how much log.

A population of queries (``num_queries`` candidate lists of ``list_size`` documents, graded labels drawn with
``label_fractions``, ERR-style attraction) is shown by a **logging policy**: Plackett-Luce on a noisy ranker's
scores (the labels plus ``logging_noise`` Gaussian noise, fixed per query) at each of ``temperatures``, from
near-deterministic to uniform (``inf``). **Users** click by a click model of the registry (``users``: by
default the PBM, the cascade and the DBN, with ``user_params``). **Targets** are ``num_targets`` deterministic
rankers whose scores interpolate, per query, from the logging ranker's (standardised) scores to the ideal ones
(the attraction): :math:`s_t = (1 - \alpha_t) z(s_{\log}) + \alpha_t z(a)`, :math:`\alpha_t` evenly in
:math:`[0, 1]`. Each target's **true value** (expected reward per session: the clicks discounted by DCG's :math:`1 / \log_2(l + 2)` by default, their
number with ``reward_weights = "clicks"``) is exact, from the user model's exact marginals
(:func:`ultr_jax.evaluation.true_value`).

For every (user, temperature, log size in ``log_sizes``), ``num_replicates`` logs are simulated (vmapped over
replicate keys, ``replicate_chunk_sessions`` sessions at a time) and every estimator of ``estimators`` (names of
:data:`ultr_jax.evaluation.ESTIMATORS` that need only the log and the logging propensities) estimates every
target from every log, with a normal ``1 - alpha`` interval from its per-session terms. The model-based
estimators (``model_estimators``: the direct method, doubly robust, cascade doubly robust) use a click model
of ``fitted_models`` fitted to each log (on the host, to the log's sufficient statistics:
:func:`ultr_jax.simulation.fit_click_model` with :class:`ultr_jax.simulation.Statistics`), on the first ``model_replicates`` replicates;
their columns are ``<estimator>[<model>]``. The logging propensities of every (query, permutation) are
enumerated once per temperature (exact, :math:`L!` rankings per query) and gathered per session.

A session is one of :math:`Q \cdot L! \cdot 2^L` cells (query, ranking, click pattern), and every estimator's
per-session terms (and a self-normalised one's ratio components) depend on the cell alone, not on the user or
the rest of the log. So the model-free estimators' terms are computed once per logging temperature on every
cell (up to ``MAX_CELLS``; beyond, session by session), and a replicate log only gathers them per session,
or counts its sessions per cell when it has more sessions than there are cells; the model-based estimators read
a log's distinct cells weighted by their counts. Both give the estimators' own values and intervals on the
sessions (to float rounding).

Per estimator and cell, ``results.json`` holds: the **bias** (mean over targets of the absolute mean error;
``biased_targets``: the targets whose mean error is more than 3 standard errors from 0), the **standard
deviation** over replicates (mean over targets), the **RMSE** (over replicates and targets), the **coverage**
of the intervals (over replicates and targets) and **Kendall's tau** (scipy's tau-b) between the estimated and
the true values of the targets (mean over replicates); and the per-target arrays. ``table.md`` holds the
largest log size per user and temperature, ``table.csv`` every cell, ``fig_ope_rmse.png`` the RMSE against
the log size per estimator.
"""

import functools
import itertools
import math
import os
import time
from typing import Any, Mapping, NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from scipy import stats as scipy_stats

from ultr_jax import evaluation as ev
from ultr_jax import simulation as sim
from ultr_jax._schema import validate_config
from ultr_jax.studies.configs.ope import CONFIG_RULES, VARIANTS, default_config
from ultr_jax.studies.figures import save_figure
from ultr_jax.train.results import markdown_table, write_results
from ultr_jax.studies._progress import Progress

__all__ = [
  "CONFIG_RULES",
  "VARIANTS",
  "METRICS",
  "default_config",
  "study_queries",
  "target_scores",
  "true_values",
  "simulate_logs",
  "summarize_cell",
  "run_ope_study",
  "run",
]

#: The columns of the tables, per estimator.
METRICS = ("rmse", "bias", "std", "coverage", "kendall_tau", "biased_targets")


# ----------------------------------------------------------------------------
# The population: queries, the logging ranker, the users, the targets.


def _user_kwargs(config: ml_collections.ConfigDict, user: str, rng: np.random.Generator, shape) -> dict:
  """The sampler keyword arguments of ``user``; ``<name>_per_document = (lo, hi)`` drawn per document."""
  out = {}
  for name, value in dict(config.user_params.get(user, {})).items():
    if name.endswith("_per_document"):
      lo, hi = value
      out[name[: -len("_per_document")]] = rng.uniform(lo, hi, size=shape).astype(np.float32)
    else:
      out[name] = value
  return out


def study_queries(config: ml_collections.ConfigDict) -> dict:
  """The query population: ``labels``, ``attraction`` and ``logging_scores`` (each ``[Q, L]``) and each user's
  sampler keyword arguments (``users``: name -> dict, per-document arrays ``[Q, L]``).

  >>> q = study_queries(default_config("smoke"))
  >>> print(q["attraction"].shape, sorted(q["users"]), q["users"]["pbm"])
  (8, 4) ['cascade', 'pbm'] {'eta': 1.0}
  """
  rng = np.random.default_rng(config.seed)
  shape = (int(config.num_queries), int(config.list_size))
  p = np.asarray(config.label_fractions, np.float64)
  labels = rng.choice(p.size, size=shape, p=p / p.sum()).astype(np.float32)
  attraction = np.asarray(sim.relevance_probability(jnp.asarray(labels)), np.float32)
  logging_scores = (labels + float(config.logging_noise) * rng.standard_normal(shape)).astype(np.float32)
  users = {
    u: _user_kwargs(config, u, np.random.default_rng([config.seed, i]), shape) for i, u in enumerate(config.users)
  }
  return {"labels": labels, "attraction": attraction, "logging_scores": logging_scores, "users": users}


def _standardise(x: np.ndarray) -> np.ndarray:
  sd = x.std(axis=-1, keepdims=True)
  return (x - x.mean(axis=-1, keepdims=True)) / np.where(sd > 0, sd, 1.0)


def target_scores(config: ml_collections.ConfigDict, queries: Mapping[str, np.ndarray]) -> np.ndarray:
  r"""The targets' scores ``[T, Q, L]``: :math:`(1 - \alpha_t) z(s_{\log}) + \alpha_t z(a)`, :math:`\alpha_t`
  evenly spaced in :math:`[0, 1]` (the first target ranks as the logging ranker, the last is ideal).

  >>> c = default_config("smoke"); s = target_scores(c, study_queries(c))
  >>> print(s.shape, bool(np.all(np.argsort(-s[-1]) == np.argsort(-study_queries(c)["attraction"], kind="stable"))))
  (4, 8, 4) True
  """
  alphas = np.linspace(0.0, 1.0, int(config.num_targets), dtype=np.float32)[:, None, None]
  ideal = _standardise(queries["attraction"])
  # A relevance tie keeps the index order, as the ideal ranking's stable sort does.
  ideal = ideal - 1e-4 * np.arange(ideal.shape[-1], dtype=np.float32)
  return ((1.0 - alphas) * _standardise(queries["logging_scores"]) + alphas * ideal).astype(np.float32)


class _Settings(NamedTuple):
  """What every estimate of a run shares (hashable: a static argument of the jitted functions)."""

  dcg: bool  # DCG-weighted rewards (else the number of clicks)
  target_temperature: float
  alpha: float


def _settings(config: ml_collections.ConfigDict) -> _Settings:
  return _Settings(config.reward_weights == "dcg", float(config.target_temperature), float(config.alpha))


def _weights(settings: _Settings, list_size: int) -> Optional[jax.Array]:
  return ev.dcg_weights(list_size) if settings.dcg else None


def _split_user(kwargs: Mapping[str, Any]) -> tuple[dict, tuple]:
  """A user's sampler arguments as (per-document arrays ``[Q, L]``, hashable ``(name, value)`` scalars)."""
  arrays = {k: jnp.asarray(v) for k, v in kwargs.items() if np.ndim(v) == 2}
  scalars = tuple(
    sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items() if np.ndim(v) != 2)
  )
  return arrays, scalars


@functools.partial(jax.jit, static_argnames=("user", "scalars", "settings"))
def _truth(attraction, targets, arrays, *, user: str, scalars: tuple, settings: _Settings) -> jax.Array:
  def one(scores):
    weights = _weights(settings, scores.shape[-1])
    kwargs = {**arrays, **dict(scalars)}
    return ev.true_value(user, attraction, scores, temperature=settings.target_temperature, weights=weights, **kwargs)

  return jax.vmap(lambda s: one(s).value)(targets)


def true_values(
  config: ml_collections.ConfigDict, queries: Mapping[str, Any], user: str, targets: np.ndarray
) -> np.ndarray:
  """Each target's exact expected reward per session under ``user``: the mean over the queries (which sessions
  draw uniformly) of :func:`ultr_jax.evaluation.true_value`, from the click model's exact marginals.

  Args:
    config: the study's config (``target_temperature``, ``reward_weights``).
    queries: :func:`study_queries`.
    user: a click model of ``queries["users"]``.
    targets: ``[T, Q, L]`` :func:`target_scores`.

  Returns:
    ``float64[T]``.

  >>> c = default_config("smoke"); q = study_queries(c)
  >>> v = true_values(c, q, "cascade", target_scores(c, q))
  >>> print(v.shape, bool(v[-1] >= v.max() - 1e-6))  # the ideal ranking gets the most cascade clicks
  (4,) True
  """
  arrays, scalars = _split_user(queries["users"][user])
  values = _truth(
    jnp.asarray(queries["attraction"]),
    jnp.asarray(targets),
    arrays,
    user=user,
    scalars=scalars,
    settings=_settings(config),
  )
  return np.asarray(values, np.float64)


# ----------------------------------------------------------------------------
# The logs: Plackett-Luce displays, the users' clicks, the logging propensities of every (query, ranking).


def logging_logits(logging_scores: np.ndarray, temperature: float) -> np.ndarray:
  """The logging policy's Plackett-Luce logits, ``scores / temperature`` (zeros, uniform, for ``inf``)."""
  if math.isinf(temperature):
    return np.zeros_like(logging_scores)
  return (np.asarray(logging_scores) / float(temperature)).astype(np.float32)


def permutation_table(list_size: int) -> np.ndarray:
  """Every ranking of ``list_size`` items, ``int32[L!, L]`` in lexicographic order (item shown at each position).

  >>> print(permutation_table(3)[[0, 1, 5]])
  [[0 1 2]
   [0 2 1]
   [2 1 0]]
  """
  return np.array(list(itertools.permutations(range(list_size))), np.int32)


def permutation_index(order: jax.Array) -> jax.Array:
  r"""The lexicographic index of each ranking ``order [..., L]`` (its Lehmer code,
  :math:`\sum_j |\{k > j: o_k < o_j\}| \, (L - 1 - j)!`): the row of :func:`permutation_table` it is.

  >>> print(permutation_index(jnp.array([[0, 1, 2], [0, 2, 1], [2, 1, 0]])))
  [0 1 5]
  """
  size = order.shape[-1]
  smaller_after = jnp.triu(jnp.ones((size, size), bool), 1) & (order[..., None, :] < order[..., :, None])
  code = jnp.sum(smaller_after, axis=-1)
  factorials = jnp.asarray([math.factorial(size - 1 - j) for j in range(size)], jnp.int32)
  return jnp.sum(code * factorials, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("pairs",))
def logging_table(logits: jax.Array, *, pairs: bool) -> ev.Propensities:
  """The logging policy's :class:`~ultr_jax.evaluation.Propensities` of every ranking of every query
  (``[Q, L!, ...]``, exact by enumeration; with the pseudo-inverse's pair matrices when ``pairs``), to be
  gathered per session.

  Args:
    logits: ``[Q, L]`` :func:`logging_logits`.
    pairs: also the item-position and pairwise item-position matrices.

  Returns:
    :class:`~ultr_jax.evaluation.Propensities` with leading axes ``[Q, L!]``.

  >>> t = logging_table(jnp.zeros((1, 3)), pairs=False)
  >>> print(np.asarray(t.ranking * 6).round(4))  # uniform: each of the 3! rankings 1/6
  [[1. 1. 1. 1. 1. 1.]]
  """
  perms = permutation_table(logits.shape[-1])
  return ev.plackett_luce_propensities(logits[:, perms], temperature=1.0, matrix=pairs, pairs=pairs)


@functools.partial(jax.jit, static_argnames=("user", "scalars", "num_sessions"))
def _simulate(key, logits, attraction, arrays, *, user: str, scalars: tuple, num_sessions: int) -> dict:
  k_q, k_r, k_c = jax.random.split(key, 3)
  num_queries, size = logits.shape
  query = jax.random.randint(k_q, (num_sessions,), 0, num_queries)
  positions = sim.plackett_luce_sample(k_r, logits[query])
  order = jnp.argsort(positions, axis=-1).astype(jnp.int32)
  shown = lambda x: jnp.take_along_axis(x[query], order, axis=-1)  # noqa: E731
  kwargs = {**{k: shown(v) for k, v in arrays.items()}, **dict(scalars)}
  clicks = sim.get_click_model(user).simulate(k_c, shown(attraction), **kwargs)["clicks"]
  return {
    "query": query,
    "order": order,
    "permutation": permutation_index(order),
    "doc_ids": (query[:, None] * size + order).astype(jnp.int32),
    "clicks": jnp.asarray(clicks, jnp.float32),
  }


def simulate_logs(key: jax.Array, queries: Mapping[str, Any], user: str, temperature: float, num_sessions: int) -> dict:
  """One log of ``num_sessions`` sessions.

  Each session draws a query uniformly, a ranking from the logging policy (Plackett-Luce by the Gumbel-max
  trick, :func:`ultr_jax.simulation.plackett_luce_sample`) and clicks from ``user``'s sampler, all in display
  order.

  Args:
    key: PRNG key.
    queries: :func:`study_queries`.
    user: a click model of ``queries["users"]``.
    temperature: the logging policy's temperature (``inf``: uniform).
    num_sessions: ``S``.

  Returns:
    dict of ``query int32[S]``, ``order int32[S, L]`` (the query's item shown at each position),
    ``permutation int32[S]`` (the row of :func:`permutation_table`), ``doc_ids int32[S, L]``
    (``query * L + item``) and ``clicks float32[S, L]``.

  >>> c = default_config("smoke"); q = study_queries(c)
  >>> log = simulate_logs(jax.random.key(0), q, "cascade", 1.0, 6)
  >>> print(log["clicks"].shape, int(log["clicks"].sum(-1).max()) <= 1)
  (6, 4) True
  """
  arrays, scalars = _split_user(queries["users"][user])
  logits = jnp.asarray(logging_logits(queries["logging_scores"], temperature))
  attraction = jnp.asarray(queries["attraction"])
  return _simulate(key, logits, attraction, arrays, user=user, scalars=scalars, num_sessions=int(num_sessions))


def _session_propensities(table: ev.Propensities, log: Mapping[str, jax.Array]) -> ev.Propensities:
  """The logging propensities of each logged session, gathered from :func:`logging_table`."""
  return jax.tree.map(lambda x: x[log["query"], log["permutation"]], table)


def _shown_targets(targets: jax.Array, log: Mapping[str, jax.Array]) -> jax.Array:
  """The targets' scores of each session's items in display order, ``[T, S, L]``."""
  return jnp.take_along_axis(targets[:, log["query"]], log["order"][None], axis=-1)


# ----------------------------------------------------------------------------
# The estimates: every estimator on every target of every replicate log.


def _estimate(
  name: str, shown, clicks, inputs: Mapping[str, Any], settings: _Settings, session_weights=None
) -> jax.Array:
  """``[T, 3]``: estimator ``name``'s value and normal interval (lower, upper) for each target (each session
  counted ``session_weights`` times: the distinct sessions of a log with their counts give the log's estimate)."""
  spec = ev.get_estimator(name)
  weights = _weights(settings, clicks.shape[-1])
  kwargs = {k: inputs[k] for k in spec.inputs}
  if session_weights is not None:
    kwargs["session_weights"] = session_weights

  def one(scores):
    est = spec.fn(scores, clicks, weights=weights, temperature=settings.target_temperature, **kwargs)
    interval = ev.normal_interval(est, alpha=settings.alpha)
    return jnp.stack([est.value, interval.lower, interval.upper])

  return jax.vmap(one)(shown)


@functools.partial(jax.jit, static_argnames=("user", "scalars", "num_sessions", "names", "chunk", "settings"))
def _model_free_run(
  keys, logits, attraction, arrays, targets, table, *, user, scalars, num_sessions, names, chunk, settings
):
  """``[R, E, T, 3]``: the model-free estimators' values and intervals on every replicate log."""

  def replicate(key):
    log = _simulate(key, logits, attraction, arrays, user=user, scalars=scalars, num_sessions=num_sessions)
    inputs = {"logging": _session_propensities(table, log)}
    shown = _shown_targets(targets, log)
    return jnp.stack([_estimate(n, shown, log["clicks"], inputs, settings) for n in names])

  return jax.lax.map(replicate, keys, batch_size=chunk)


@functools.partial(jax.jit, static_argnames=("model", "names", "settings"))
def _model_based_run(log, counts, params, targets, table, *, model, names, settings):
  """``[E, T, 3]``: the model-based estimators with one fitted click model on one log, given as its distinct
  sessions (:func:`_distinct_sessions`) each weighted by its ``counts``."""
  inputs = {"logging": _session_propensities(table, log), "doc_ids": log["doc_ids"], "model": model, "params": params}
  shown = _shown_targets(targets, log)
  return jnp.stack([_estimate(n, shown, log["clicks"], inputs, settings, counts) for n in names])


# ----------------------------------------------------------------------------
# The model-free estimators from their terms on every distinct session ("cell"): a session is a (query,
# ranking, click pattern), Q * L! * 2^L of them. A plain estimator is the mean of per-session terms that depend on
# the cell alone, a self-normalised one a sum of ratios of such sums: each is computed once per cell and logging
# policy (the users do not enter), and a replicate log reduces to its cells (gathered, or counted where the log
# has more sessions than there are cells).

#: At most this many cells: beyond, every replicate log is estimated session by session (:func:`_model_free_run`).
MAX_CELLS = 4_000_000
_CELL_CHUNK = 40_000  # cells per compiled estimator call (the pseudo-inverse's pairs: ~2.5 KB per cell)


def _num_cells(num_queries: int, list_size: int) -> int:
  return num_queries * math.factorial(list_size) * 2**list_size


def _cell_index(log: Mapping[str, jax.Array], num_rankings: int) -> jax.Array:
  """``int32[S]`` each session's cell, ``(query * L! + ranking) * 2^L + sum_l c_l 2^l``."""
  size = log["clicks"].shape[-1]
  pattern = jnp.sum(log["clicks"].astype(jnp.int32) << jnp.arange(size, dtype=jnp.int32), axis=-1)
  return (log["query"] * num_rankings + log["permutation"]) * 2**size + pattern


def _cells(index: np.ndarray, list_size: int) -> dict:
  """The sessions of cells ``index`` (:func:`_cell_index`'s inverse), as :func:`simulate_logs` lays them out."""
  perms = permutation_table(list_size)
  index = np.asarray(index, np.int64)
  patterns, rankings = 2**list_size, perms.shape[0]
  query = (index // (rankings * patterns)).astype(np.int32)
  permutation = ((index // patterns) % rankings).astype(np.int32)
  order = perms[permutation]
  clicks = (((index % patterns)[:, None] >> np.arange(list_size)) & 1).astype(np.float32)
  return {
    "query": jnp.asarray(query),
    "order": jnp.asarray(order),
    "permutation": jnp.asarray(permutation),
    "doc_ids": jnp.asarray(query[:, None] * list_size + order),
    "clicks": jnp.asarray(clicks),
  }


@functools.partial(jax.jit, static_argnames=("names", "settings"))
def _cell_parts_chunk(cells, targets, table, *, names, settings) -> tuple:
  """Per estimator of ``names``: its terms ``[T, C]`` (plain) or ratio components ``[T, C, P, 3]``
  (self-normalised: :attr:`~ultr_jax.evaluation.Estimate.ratios`) of every cell."""
  inputs = {"logging": _session_propensities(table, cells)}
  shown = _shown_targets(targets, cells)
  weights = _weights(settings, cells["clicks"].shape[-1])
  out = []
  for name in names:
    spec = ev.get_estimator(name)
    kwargs = {k: inputs[k] for k in spec.inputs}

    def one(scores, spec=spec, kwargs=kwargs):
      est = spec.fn(scores, cells["clicks"], weights=weights, temperature=settings.target_temperature, **kwargs)
      return est.ratios if spec.self_normalize else est.terms

    out.append(jax.vmap(one)(shown))
  return tuple(out)


def _cell_parts(config, targets, table, names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
  """:func:`_cell_parts_chunk` over every cell, in chunks of whole queries (one compilation)."""
  size = int(config.list_size)
  per_query = _num_cells(1, size)
  num_queries = int(config.num_queries)
  step = max(d for d in range(1, num_queries + 1) if num_queries % d == 0 and (d == 1 or d * per_query <= _CELL_CHUNK))
  chunks = []
  for q0 in range(0, num_queries, step):
    cells = _cells(np.arange(q0 * per_query, (q0 + step) * per_query), size)
    chunks.append(jax.device_get(_cell_parts_chunk(cells, targets, table, names=names, settings=_settings(config))))
  return tuple(np.concatenate([c[i] for c in chunks], axis=1) for i in range(len(names)))


def _interval(value: jax.Array, terms: jax.Array, weights: jax.Array, alpha: float) -> jax.Array:
  """``[T, 3]``: value, lower, upper of the normal interval of ``terms [T, R]`` counted ``weights [R]`` times."""

  def one(v, t):
    est = ev.Estimate(v, t, jnp.zeros((), jnp.int32), jnp.sum(weights), weights)
    iv = ev.normal_interval(est, alpha=alpha)
    return jnp.stack([iv.value, iv.lower, iv.upper])

  return jax.vmap(one)(value, terms)


def _safe_div(a: jax.Array, b: jax.Array) -> jax.Array:
  ok = b != 0
  return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def _plain_from_cells(terms: jax.Array, weights: jax.Array, alpha: float) -> jax.Array:
  r"""A plain estimator from its terms ``[T, R]`` counted ``weights [R]``: :math:`\hat V = \sum_r n_r t_r / N`."""
  value = _safe_div(terms @ weights, jnp.sum(weights))
  return _interval(value, terms, weights, alpha)


def _ratio_from_cells(ratios: jax.Array, weights: jax.Array, alpha: float) -> jax.Array:
  r"""A self-normalised estimator from its ratio components ``[T, R, P, 3]`` (numerators :math:`u`,
  denominators :math:`v`, shares :math:`s`) counted ``weights [R]``:

  .. math::
      \hat V = \sum_p \frac{U_p}{V_p} \frac{S_p}{N}, \qquad
      t_r = \sum_p \Bigl[\Bigl(u_{rp} - \frac{U_p}{V_p} v_{rp}\Bigr) \frac{S_p}{V_p} + \frac{U_p}{V_p} s_{rp}\Bigr]

  (:math:`U_p = \sum_r n_r u_{rp}`, ...; :math:`t_r` the delta-method linearisation, the estimators' own
  :attr:`~ultr_jax.evaluation.Estimate.terms`)."""
  total = jnp.sum(weights)
  sums = jnp.einsum("trpk,r->tpk", ratios, weights)
  ratio = _safe_div(sums[..., 0], sums[..., 1])  # [T, P]
  share = _safe_div(sums[..., 2], sums[..., 1])
  value = jnp.sum(ratio * _safe_div(sums[..., 2], total), axis=-1)
  u, v, s = ratios[..., 0], ratios[..., 1], ratios[..., 2]
  terms = jnp.sum((u - ratio[:, None] * v) * share[:, None] + ratio[:, None] * s, axis=-1)
  return _interval(value, terms, weights, alpha)


@functools.partial(
  jax.jit, static_argnames=("user", "scalars", "num_sessions", "ratio", "chunk", "counted", "alpha", "rankings")
)
def _cells_run(
  keys, logits, attraction, arrays, parts, *, user, scalars, num_sessions, ratio, chunk, counted, alpha, rankings
):
  """``[R, E, T, 3]``: the model-free estimators on every replicate log from their cells' ``parts``
  (:func:`_cell_parts`); ``counted``: each log's cells counted, else gathered per session."""
  num_cells = parts[0].shape[1]

  def replicate(key):
    log = _simulate(key, logits, attraction, arrays, user=user, scalars=scalars, num_sessions=num_sessions)
    cell = _cell_index(log, rankings)
    if counted:
      weights = jax.ops.segment_sum(jnp.ones(num_sessions, jnp.float32), cell, num_segments=num_cells)
      rows = parts
    else:
      weights = jnp.ones(num_sessions, jnp.float32)
      rows = tuple(p[:, cell] for p in parts)
    return jnp.stack([(_ratio_from_cells if r else _plain_from_cells)(x, weights, alpha) for x, r in zip(rows, ratio)])

  return jax.lax.map(replicate, keys, batch_size=chunk)


def _distinct_sessions(log: Mapping[str, jax.Array], list_size: int) -> tuple[dict, np.ndarray]:
  """A log's distinct sessions (cells) and their counts, padded with uncounted cells to a power of 2 (one
  compilation serves logs of similar sizes)."""
  cell = np.asarray(_cell_index(log, math.factorial(list_size)))
  index, counts = np.unique(cell, return_counts=True)
  rows = 1 << max(int(index.size - 1).bit_length(), 4)
  index = np.concatenate([index, np.full(rows - index.size, index[0])])
  counts = np.concatenate([counts, np.zeros(rows - counts.size, counts.dtype)]).astype(np.float32)
  return _cells(index, list_size), counts


def summarize_cell(values: np.ndarray, lower: np.ndarray, upper: np.ndarray, truth: np.ndarray) -> dict[str, Any]:
  r"""An estimator's accuracy over replicate logs ``[R, T]`` of ``T`` targets with true values ``truth [T]``.

  .. math::
      \mathrm{bias} = \frac1T \sum_t \bigl|\bar e_t\bigr|, \quad
      \mathrm{std} = \frac1T \sum_t s_t, \quad
      \mathrm{RMSE} = \Bigl(\frac{1}{RT} \sum_{r,t} e_{rt}^2\Bigr)^{1/2}, \quad e_{rt} = \hat V_{rt} - V_t

  ``biased_targets``: the targets whose mean error is more than 3 standard errors :math:`s_t / \sqrt R` from 0;
  ``coverage``: the share of intervals ``[lower, upper]`` holding the truth; ``kendall_tau``: the mean over
  replicates of Kendall's tau-b (scipy) between the estimated and the true values (a replicate whose estimates
  are all equal has none and is left out; NaN when none has one).

  >>> truth = np.array([0.1, 0.2, 0.3]); v = truth + np.array([[0.01], [-0.01]])
  >>> s = summarize_cell(v, v - 0.05, v + 0.05, truth)
  >>> print(round(s["rmse"], 4), round(s["bias"], 4), s["coverage"], s["kendall_tau"], s["biased_targets"])
  0.01 0.0 1.0 1.0 0
  """
  values, truth = np.asarray(values, np.float64), np.asarray(truth, np.float64)
  num = values.shape[0]
  err = values - truth
  bias_t = err.mean(axis=0)
  std_t = values.std(axis=0, ddof=1) if num > 1 else np.zeros_like(bias_t)
  stderr = std_t / math.sqrt(num)
  biased = np.abs(bias_t) > 3.0 * stderr + 1e-12
  # scipy declares kendalltau's result as a bare tuple class (_make_tuple_bunch), without its fields
  taus = [scipy_stats.kendalltau(v, truth).statistic for v in values if np.ptp(v) > 0]  # pyright: ignore[reportAttributeAccessIssue]
  taus = [t for t in taus if np.isfinite(t)]
  return {
    "rmse": float(np.sqrt(np.mean(err**2))),
    "bias": float(np.mean(np.abs(bias_t))),
    "std": float(np.mean(std_t)),
    "coverage": float(np.mean((lower <= truth) & (truth <= upper))),
    "kendall_tau": float(np.mean(taus)) if taus else float("nan"),
    "biased_targets": int(np.sum(biased)),
    "replicates": int(num),
    "bias_per_target": bias_t.tolist(),
    "std_per_target": std_t.tolist(),
    "mean_per_target": values.mean(axis=0).tolist(),
  }


# ----------------------------------------------------------------------------
# The grid, its tables and its figure.


def _check_config(config: ml_collections.ConfigDict) -> None:
  """Every field's values (:data:`CONFIG_RULES`), then the checks across fields."""
  validate_config(config, CONFIG_RULES)
  for user in config.user_params.keys():
    sim.get_click_model(user)  # parameters of an unknown model: ValueError listing the registered
  if int(config.model_replicates) > int(config.num_replicates):
    raise ValueError(
      f"config.model_replicates: {config.model_replicates} > config.num_replicates ({config.num_replicates})"
    )
  if float(config.figure_temperature) not in [float(t) for t in config.temperatures]:
    raise ValueError(
      f"config.figure_temperature: {config.figure_temperature} is not one of config.temperatures "
      f"{tuple(config.temperatures)}"
    )


def _label(temperature: float) -> str:
  return f"temperature={temperature:g}"


def _reads_pairs(name: str) -> bool:
  """Whether estimator ``name`` reads the logging policy's pairwise item-position marginals."""
  fn = ev.get_estimator(name).fn
  return getattr(fn, "func", fn) is ev.pseudo_inverse


def _cell_names(config: ml_collections.ConfigDict, num_sessions: int) -> tuple[str, ...]:
  """The model-free estimators of a log size (the pseudo-inverse's only up to ``pairs_max_sessions``)."""
  pairs = num_sessions <= int(config.pairs_max_sessions)
  return tuple(n for n in config.estimators if pairs or not _reads_pairs(n))


def _model_based(config, queries, user: str, num_sessions: int, logits, keys, targets, table) -> dict[str, np.ndarray]:
  """``{"<estimator>[<model>]": [R', T, 3]}``: the model-based estimators with each fitted click model, on the
  first ``model_replicates`` replicate logs (the same logs as the model-free estimators'). Each click model is
  fitted on the host to the log's sufficient statistics (:func:`ultr_jax.simulation.gather_click_statistics`,
  the MAP fit of :func:`ultr_jax.simulation.fit_click_model`'s :class:`~ultr_jax.simulation.Statistics` solver), and the estimators read the log's
  distinct sessions with their counts."""
  names = tuple(config.model_estimators)
  size = int(config.list_size)
  num_docs = int(config.num_queries) * size
  arrays, scalars = _split_user(queries["users"][user])
  attraction = jnp.asarray(queries["attraction"])
  out: dict[str, list] = {f"{n}[{m}]": [] for m in config.fitted_models for n in names}
  for key in keys[: int(config.model_replicates)]:
    log = _simulate(key, logits, attraction, arrays, user=user, scalars=scalars, num_sessions=num_sessions)
    cells, counts = _distinct_sessions(log, size)
    batch = {"doc_ids": np.asarray(log["doc_ids"]), "clicks": np.asarray(log["clicks"])}
    for model in config.fitted_models:
      fit = sim.fit_click_model(
        model,
        batch,
        solver=sim.Statistics(max_iters=int(config.fit_max_iters)),
        num_docs=num_docs,
        l2=float(config.fit_l2),
        prior="zero",
      )
      values = _model_based_run(
        cells, jnp.asarray(counts), fit.params, targets, table, model=model, names=names, settings=_settings(config)
      )
      for i, n in enumerate(names):
        out[f"{n}[{model}]"].append(np.asarray(values[i], np.float64))
  return {k: np.stack(v) for k, v in out.items() if v}


def _model_free(config, queries, user, num_sessions, logits, keys, targets, table, parts) -> dict[str, np.ndarray]:
  """``{estimator: [R, T, 3]}``: the model-free estimators on every replicate log, from the cells' ``parts``
  (name -> :func:`_cell_parts`' array) where given, else session by session."""
  names = _cell_names(config, num_sessions)
  arrays, scalars = _split_user(queries["users"][user])
  chunk = max(1, min(len(keys), int(config.replicate_chunk_sessions) // num_sessions))
  common = dict(user=user, scalars=scalars, num_sessions=num_sessions, chunk=chunk)
  attraction = jnp.asarray(queries["attraction"])
  if parts is None:
    free = _model_free_run(
      keys, logits, attraction, arrays, targets, table, names=names, settings=_settings(config), **common
    )
  else:
    num_cells = _num_cells(int(config.num_queries), int(config.list_size))
    free = _cells_run(
      keys,
      logits,
      attraction,
      arrays,
      tuple(jnp.asarray(parts[n]) for n in names),
      ratio=tuple(ev.get_estimator(n).self_normalize for n in names),
      counted=num_sessions >= num_cells,
      alpha=float(config.alpha),
      rankings=math.factorial(int(config.list_size)),
      **common,
    )
  return dict(zip(names, np.moveaxis(np.asarray(free, np.float64), 1, 0)))


def _run_cell(config, queries, targets, truth, user, temperature, num_sessions, key, parts=None) -> dict[str, dict]:
  """Every estimator's summary (:func:`summarize_cell`) in one (user, temperature, log size); ``parts``: the
  model-free estimators' cell terms at this temperature (:func:`_cell_parts`), None to estimate session by
  session."""
  names = _cell_names(config, num_sessions)
  logits = jnp.asarray(logging_logits(queries["logging_scores"], temperature))
  table = logging_table(logits, pairs=any(_reads_pairs(n) for n in names))
  keys = jax.random.split(key, int(config.num_replicates))
  targets = jnp.asarray(targets)
  values = _model_free(config, queries, user, num_sessions, logits, keys, targets, table, parts)
  if config.model_estimators and config.fitted_models:
    values.update(_model_based(config, queries, user, num_sessions, logits, keys, targets, table))
  return {n: summarize_cell(v[..., 0], v[..., 1], v[..., 2], truth) for n, v in values.items()}


def _temperature_parts(config, queries, targets, temperature: float) -> Optional[dict[str, np.ndarray]]:
  """The model-free estimators' terms on every cell at ``temperature`` (:func:`_cell_parts`; None where there are
  more than ``MAX_CELLS`` cells or no estimator)."""
  names = tuple(dict.fromkeys(n for size in config.log_sizes for n in _cell_names(config, int(size))))
  if not names or _num_cells(int(config.num_queries), int(config.list_size)) > MAX_CELLS:
    return None
  logits = jnp.asarray(logging_logits(queries["logging_scores"], temperature))
  table = logging_table(logits, pairs=any(_reads_pairs(n) for n in names))
  return dict(zip(names, _cell_parts(config, jnp.asarray(targets), table, names)))


def _rows(results: Mapping[str, Any]) -> dict[str, dict]:
  rows = {}
  for user_key, by_temp in results.items():
    if not user_key.startswith("user="):
      continue
    for temp_key, by_size in by_temp.items():
      for size_key, by_est in by_size.items():
        for est, s in by_est.items():
          rows[f"{user_key[5:]}/{temp_key[12:]}/{size_key[9:]}/{est}"] = {m: s[m] for m in METRICS}
  return rows


def _markdown(results: Mapping[str, Any], config: ml_collections.ConfigDict) -> str:
  """One table per (user, temperature) at the largest log size: estimators x :data:`METRICS`."""
  size = max(int(n) for n in config.log_sizes)
  parts = [
    f"Off-policy estimates of {config.num_targets} target rankers, {config.num_replicates} replicate logs of "
    f"{size} sessions (model-based estimators: {config.model_replicates}); rmse/bias/std in "
    f"{'DCG-discounted clicks' if config.reward_weights == 'dcg' else 'clicks'} per session, coverage of {1 - config.alpha:.0%} normal intervals."
  ]
  for user in config.users:
    for temperature in config.temperatures:
      cell = results.get(f"user={user}", {}).get(_label(temperature), {}).get(f"sessions={size}")
      if cell:
        rows = {est: {m: s[m] for m in METRICS} for est, s in cell.items()}
        parts.append(
          f"### user={user}, logging {_label(temperature)}\n\n" + markdown_table(rows, METRICS, row_header="estimator")
        )
  return "\n\n".join(parts) + "\n"


def _plot(results: Mapping[str, Any], config: ml_collections.ConfigDict, path: str) -> None:
  """RMSE against the log size, one panel per user at ``figure_temperature``, one line per estimator."""
  import matplotlib  # noqa: PLC0415

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # noqa: PLC0415

  users = [u for u in config.users if f"user={u}" in results]
  fig, axes = plt.subplots(1, max(len(users), 1), figsize=(4.2 * max(len(users), 1) + 1.8, 3.4), squeeze=False)
  label = _label(float(config.figure_temperature))
  for ax, user in zip(axes[0], users):
    by_size = results[f"user={user}"].get(label, {})
    sizes = sorted(int(k[9:]) for k in by_size)
    names = list(dict.fromkeys(n for k in by_size for n in by_size[k]))
    for i, name in enumerate(names):
      pts = [(n, by_size[f"sessions={n}"][name]["rmse"]) for n in sizes if name in by_size[f"sessions={n}"]]
      style = "-" if i < 10 else "--"
      ax.plot(*zip(*pts), style, marker="o", ms=3, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"user={user}, logging {label}", fontsize=9)
    ax.set_xlabel("sessions in the log")
  axes[0][0].set_ylabel("RMSE (over targets and replicates)")
  right = 1 - 1.8 / fig.get_figwidth()
  fig.tight_layout(rect=(0, 0, right, 1))
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="center left", bbox_to_anchor=(right, 0.5), fontsize=7, frameon=False)
  save_figure(fig, path)


def run_ope_study(config: ml_collections.ConfigDict, workdir: Optional[str]) -> dict[str, Any]:
  """Runs the grid; writes ``results.json``, ``table.md`` / ``table.csv`` and ``fig_ope_rmse.png`` to ``workdir``.

  ``results.json`` maps ``user=<name>`` -> ``temperature=<tau>`` -> ``sessions=<n>`` -> estimator ->
  :func:`summarize_cell`'s summary; ``truth`` maps each user to the targets' true values and ``alphas`` holds
  the targets' interpolation weights. Results are rewritten (atomically) after every cell.
  """
  _check_config(config)
  queries = study_queries(config)
  targets = target_scores(config, queries)
  if workdir:
    os.makedirs(workdir, exist_ok=True)
  results: dict[str, Any] = {
    "alphas": np.linspace(0.0, 1.0, int(config.num_targets)).tolist(),
    "truth": {},
  }
  start = time.perf_counter()
  key = jax.random.key(int(config.seed))
  for user in config.users:
    results["truth"][user] = true_values(config, queries, user, targets).tolist()
  # Temperatures outermost: every user's curve over the log sizes is done at the first temperature before the next.
  # The time left from the sessions still to simulate (a cell's cost grows with its log).
  progress = Progress(
    "ope", total=len(config.temperatures) * len(config.users) * sum(int(n) for n in config.log_sizes), start=start
  )
  for t, temperature in enumerate(config.temperatures):
    parts = _temperature_parts(config, queries, targets, float(temperature))
    for u, user in enumerate(config.users):
      truth = np.asarray(results["truth"][user])
      for n, size in enumerate(config.log_sizes):
        cell_key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, u), t), n)
        cell = _run_cell(config, queries, targets, truth, user, float(temperature), int(size), cell_key, parts)
        results.setdefault(f"user={user}", {}).setdefault(_label(temperature), {})[f"sessions={size}"] = cell
        progress.done(f"{user} {_label(temperature)} sessions={size}", weight=int(size))
        if workdir:
          write_results(
            workdir,
            results,
            table=_markdown(results, config),
            rows=_rows(results),
            columns=METRICS,
            row_header="user/temperature/sessions/estimator",
          )
  results["seconds"] = time.perf_counter() - start
  if workdir:
    write_results(
      workdir,
      results,
      table=_markdown(results, config),
      rows=_rows(results),
      columns=METRICS,
      row_header="user/temperature/sessions/estimator",
    )
    _plot(results, config, os.path.join(workdir, "fig_ope_rmse.png"))
  return results


run = run_ope_study
