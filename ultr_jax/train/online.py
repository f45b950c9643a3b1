r"""Online learning to rank: PDGD, DBGD, MGD and NSGD learning from the clicks on their own rankings.

Each impression draws a training query, shows it the current learner's
ranking (top ``k`` of the candidate list), simulates clicks on it and
updates the learner:

* **PDGD** (Oosterhuis & de Rijke, CIKM'18): the ranking is sampled from the
  Plackett-Luce model of the scores
  (:func:`~ultr_jax.simulation.plackett_luce_sample`); the update follows
  :func:`~ultr_jax.losses.pdgd_loss` with SGD. ``config.pdgd.display``
  (:data:`~ultr_jax.train.DISPLAYS`) can show other lists while the update
  stays the same, as a diagnostic: ``"logged"``, the lists' stored order (the
  logging policy's, the lists the counterfactual methods learn from), which
  cuts the feedback loop from the learner's ranking to its clicks, or
  ``"model"``, its own ranking without sampling; ``config.pdgd.pairs``,
  ``debias`` and ``surrogate`` switch the pieces of its update
  (:func:`~ultr_jax.losses.pdgd_loss`). The registered training-loop
  method ``pdgd`` is the same update on mini-batches;
* **DBGD** (Yue & Joachims, ICML'09): a candidate :math:`w + \delta u` (a random
  unit direction :math:`u`) is interleaved with the current ranker :math:`w`;
  when the candidate wins, :math:`w \leftarrow w + \alpha u`;
* **MGD** (Schuth et al., WSDM'16): ``n - 1`` candidates are multileaved with
  the current ranker; :math:`w` moves by :math:`\alpha` times the mean direction
  of the candidates that beat it;
* **NSGD** (Wang et al., SIGIR'18): MGD whose candidate directions are drawn
  from the null space of the recent directions that lost to :math:`w`, the
  most sensitive ones on the current query preselected, and whose ties are
  broken on the clicks of recent difficult queries. Where the authors' code
  (a fork of the PDGD authors' online LTR code) differs from the paper or is
  ambiguous we follow the paper: ties are broken whenever several candidates
  win (the code does so only while its queue of difficult queries is not
  full), the draws are uniform on the null space's unit sphere (the code
  weights a normalised, non-orthogonal basis), and a query without clicks is
  never stored as difficult. The preselection ranks directions by the mean
  score's directional derivative, the code's :math:`|u^\top \bar x|` for a
  linear ranker without bias (with one, the bias's step :math:`u_b` adds to it).

``config.<dbgd|mgd|nsgd>.multileave`` picks the comparison: ``"team_draft"``
(:func:`~ultr_jax.simulation.team_draft_multileave`; a candidate wins with more
clicks credited to its team than to :math:`w`'s) or ``"probabilistic"``
(:func:`~ultr_jax.simulation.probabilistic_multileave`; a candidate wins when
its expected outcome against :math:`w`,
:func:`~ultr_jax.simulation.multileave_preferences` over the assignment
posterior, is positive). Team-draft is the default: on the default study
probabilistic multileaving helps MGD only under noise-free clicks (README).

Clicks come from the cascade click models of the online LTR literature
(Hofmann et al. 2013; the PDGD paper's Table 1): a user scans the displayed
list top-down, clicks an item of grade :math:`y` with probability
:math:`P(c \mid y)` and stops after a click with probability
:math:`P(s \mid y)` (:data:`ONLINE_CLICK_MODELS`; the DBN sampler
:func:`~ultr_jax.simulation.dbn` with perseverance 1). Any click model of
:func:`~ultr_jax.simulation.make_click_fn` (or SIF's position+trust
simulator) can stand in for them (a config mapping instead of a name:
position bias, trust bias, the DCM, UBM, ...), applied to the displayed
order and cut to the top ``k``, so the online learners face the same users
as the counterfactual methods.

A whole run (every impression, with a test-set nDCG@10 every
``eval_every`` impressions) is one jitted ``lax.scan``, vmapped over seeds.
The metrics are the *offline* nDCG@10 of the final ranker on the test
queries and the *online* nDCG@10, the mean nDCG@10 of the rankings the users
were shown (what the learner cost them while learning).
"""

import dataclasses
import functools
import types
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import rax
from jax.flatten_util import ravel_pytree

from ultr_jax import losses as losses_lib
from ultr_jax import metrics as metrics_lib
from ultr_jax import simulation as sim
from ultr_jax.losses import pdgd as pdgd_lib
from ultr_jax.data import RankingDataset
from ultr_jax import models
from ultr_jax.models import make_ranker
from ultr_jax.train import sharding as sharding_lib
from ultr_jax.train.loop import DISPLAYS
from ultr_jax.types import ClickFn

__all__ = [
  "ONLINE_LEARNERS",
  "ONLINE_METHODS",
  "MULTILEAVE_METHODS",
  "ONLINE_CLICK_MODELS",
  "OnlineLearner",
  "register_online_learner",
  "online_click_model",
  "online_learner_config",
  "online_learning",
  "online_users_missing",
  "full_info_reference",
]

MULTILEAVE_METHODS = ("team_draft", "probabilistic")

#: ``name -> (P(click | grade), P(stop | click, grade))`` for grades 0..4 (PDGD paper, Table 1).
ONLINE_CLICK_MODELS: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
  "perfect": ((0.0, 0.2, 0.4, 0.8, 1.0), (0.0, 0.0, 0.0, 0.0, 0.0)),
  "navigational": ((0.05, 0.3, 0.5, 0.7, 0.95), (0.2, 0.3, 0.5, 0.7, 0.9)),
  "informational": ((0.4, 0.6, 0.7, 0.8, 0.9), (0.1, 0.2, 0.3, 0.4, 0.5)),
}

METRICS = ("ndcg@10", "online_ndcg@10")


_SDBN = sim.get_click_model("sdbn")  # the cascade users: a simplified DBN with per-grade tables


def _cascade_clicks(key, labels, *, positions, where, click, stop, top_k):
  grade = jnp.clip(jnp.asarray(labels), 0, click.shape[-1] - 1).astype(jnp.int32)
  out = _SDBN.simulate(key, click[grade], where=where, positions=positions, satisfaction=stop[grade], top_k=top_k)
  return out["clicks"]


def _click_tables(name: str) -> tuple[jax.Array, jax.Array]:
  if name not in ONLINE_CLICK_MODELS:
    raise ValueError(
      f"click_model: unknown online click model {name!r}; expected one of "
      f"{tuple(ONLINE_CLICK_MODELS)} or a make_click_fn config mapping"
    )
  click, stop = ONLINE_CLICK_MODELS[name]
  return jnp.asarray(click, jnp.float32), jnp.asarray(stop, jnp.float32)


def _as_dict(config: Mapping[str, Any]) -> dict:
  return dict(config.to_dict() if isinstance(config, ml_collections.ConfigDict) else config)


def _click_config(click_model: Mapping[str, Any], top_k: int) -> ClickFn:
  """A click-model config, cut to the top ``top_k``, as its click function: a frozen, hashable simulator
  (:func:`~ultr_jax.simulation.make_click_fn`), equal for equal configs, so it is the compiled
  program's cache key; building it validates the names and keys here.
  """
  cfg = _as_dict(click_model)
  if int(cfg.setdefault("top_k", top_k)) != top_k:
    raise ValueError(
      f"click_model.top_k ({cfg['top_k']}) differs from the learners' top_k ({top_k}): the users "
      "must see the ranking the learner shows"
    )
  return getattr(sim.make_click_fn(cfg), "__self__")  # the frozen simulator (a bound method compares by identity)


def _config_clicks(click_fn: ClickFn) -> Callable[..., jax.Array]:

  def clicks(key, labels, *, positions, where, features=None, **item_extras):
    batch = {**item_extras, "labels": labels, "where": where, "positions": positions}
    if features is not None:
      batch["features"] = features
    return click_fn(key, batch)["clicks"]

  return clicks


def online_click_model(click_model: Union[str, Mapping[str, Any]], *, top_k: int = 10) -> Callable[..., jax.Array]:
  r"""The online users ``click_model`` as ``fn(key, labels, *, positions, where, features=None) -> clicks``.

  A name in :data:`ONLINE_CLICK_MODELS` is a cascade user:

  .. math::
      P(E_1) = 1, \quad P(C_i \mid E_i) = P(c \mid y_i), \quad
      P(E_{i+1} \mid E_i) = 1 - C_i\,P(s \mid y_i)

  over the first ``top_k`` displayed positions (grades clipped to 0..4). A mapping is a
  :func:`~ultr_jax.simulation.make_click_fn` config, or a
  :func:`~ultr_jax.simulation.make_position_trust_click_fn` one (``name="position_trust"``); its
  ``top_k`` defaults to this one and must equal it. It is applied with item ``i`` displayed at
  ``positions[i]``; ``features`` and further per-item keyword arrays join the click model's batch (the
  individual-level model reads ``features``, ``context_pbm`` reads ``context``, ``position_trust`` reads
  ``logging_score``).

  Args:
    click_model: a name in :data:`ONLINE_CLICK_MODELS`, or a click-model config mapping.
    top_k: the number of displayed positions the users scan.

  Returns:
    ``fn(key, labels, *, positions, where, features=None, **item_extras) -> clicks`` (``[L]`` float, 0/1).

  Raises:
    ValueError: an unknown name, a config its click-model factory rejects, or another ``top_k``.

  >>> fn = online_click_model("perfect")
  >>> clicks = fn(jax.random.key(0), jnp.array([4.0, 0.0, 4.0]), positions=jnp.arange(3),
  ...             where=jnp.ones(3, bool))
  >>> print(clicks)  # grade 4 is always clicked, grade 0 never, and a perfect user never stops
  [1. 0. 1.]
  >>> pbm = online_click_model({"name": "pbm_table", "table": (1.0, 0.0, 0.0), "eps": 1.0}, top_k=2)
  >>> print(pbm(jax.random.key(0), jnp.zeros(3), positions=jnp.array([2, 0, 1]), where=jnp.ones(3, bool)))
  [0. 1. 0.]
  """
  if isinstance(click_model, str):
    click, stop = _click_tables(click_model)
    cascade = functools.partial(_cascade_clicks, click=click, stop=stop, top_k=int(top_k))
    return lambda key, labels, *, positions, where, features=None, **_: cascade(
      key, labels, positions=positions, where=where
    )
  return _config_clicks(_click_config(click_model, int(top_k)))


@dataclasses.dataclass(frozen=True)
class OnlineLearner:
  """One online learner of :data:`ONLINE_LEARNERS`.

  Attributes:
    name: its key in the registry and the name of its config section (``config.<name>``).
    defaults: its config section, every field it reads with its default.
    parse: ``parse(section) -> dict``: the static fields of a run the section sets (``learning_rate``,
      ``unit``, ``num_rankers``, ``multileave``, ``tau``, ``nsgd``, ``display``, ``pdgd``); raises
      ``ValueError`` naming ``config.<name>.<field>``.
    make_step: ``make_step(spec, apply_fn, clicks_of) -> (init, step)``: ``init(params, x)`` is the
      learner's state beyond its parameters (it rides in the scan's carry), ``step(params, state, key, x,
      y, where, extras, click, stop) -> (params, state, positions)`` one impression: the displayed
      ``positions``, the clicks on them and the update.
  """

  name: str
  defaults: Mapping[str, Any]
  parse: Callable[[Mapping[str, Any]], dict]
  make_step: Callable[..., tuple[Callable, Callable]]


#: Online learner name -> :class:`OnlineLearner`, filled by :func:`register_online_learner`.
ONLINE_LEARNERS: dict[str, OnlineLearner] = {}

#: The fields of an online run that every learner shares (``config.<field>``).
_RUN_DEFAULTS = {
  "top_k": 10,
  "ranker": "linear",
  "hidden_sizes": (32,),  # the mlp ranker's
  "zero_init": True,  # linear rankers start at w = 0 (the PDGD paper's setting)
  "num_impressions": 10000,
  "eval_every": 500,
}


def register_online_learner(name: str, *, defaults: Mapping[str, Any], make_step: Callable[..., tuple]):
  """Registers the decorated ``parse(section) -> dict`` as the online learner ``name`` (see :class:`OnlineLearner`).

  Args:
    name: the learner's name (``online_learning(name, ...)``) and its config section's.
    defaults: the section's fields and defaults (:func:`online_learner_config`).
    make_step: the learner's impression step factory, ``make_step(spec, apply_fn, clicks_of) -> (init, step)``.

  Returns:
    The decorator; it returns ``parse`` unchanged. A name registered twice is a ``ValueError``.

  >>> sorted(ONLINE_LEARNERS)
  ['dbgd', 'mgd', 'nsgd', 'pdgd']
  >>> ONLINE_LEARNERS["mgd"].defaults["num_candidates"]
  9
  """

  def wrap(parse: Callable[[Mapping[str, Any]], dict]) -> Callable[[Mapping[str, Any]], dict]:
    if name in ONLINE_LEARNERS:
      raise ValueError(f"online learner {name!r} is already registered")
    ONLINE_LEARNERS[name] = OnlineLearner(name, types.MappingProxyType(dict(defaults)), parse, make_step)
    return parse

  return wrap


def online_learner_config() -> ml_collections.ConfigDict:
  """The online learners' config: the run's fields and every registered learner's section with its defaults.

  ``top_k`` items shown, the ``ranker`` (``hidden_sizes`` for an MLP; ``zero_init`` starts a linear one at
  :math:`w = 0`), ``num_impressions`` per seed with a test nDCG@10 every ``eval_every``, then one section
  per learner of :data:`ONLINE_LEARNERS`. The online study's config adds its data, users and seeds.

  Returns:
    A fresh ``ml_collections.ConfigDict`` (``online_learning(..., config=...)`` takes it).

  >>> c = online_learner_config()
  >>> c.num_impressions, c.pdgd.learning_rate, c.nsgd.history
  (10000, 0.1, 60)
  """
  c = ml_collections.ConfigDict(dict(_RUN_DEFAULTS))
  for name, learner in ONLINE_LEARNERS.items():
    c[name] = ml_collections.ConfigDict(dict(learner.defaults))
  return c


def _unit_direction(key, params):
  """A uniformly random unit vector in parameter space, as a pytree like ``params``."""
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  u = jax.tree.unflatten(tree, [jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])
  norm = optax.tree.norm(u)
  return jax.tree.map(lambda x: x / norm, u)


class _Spec(NamedTuple):
  """The static part of a run: one compiled program per distinct spec."""

  method: str
  ranker: str
  hidden_sizes: tuple[int, ...]
  zero_init: bool
  top_k: int
  eval_every: int
  num_blocks: int
  click_config: Any  # a frozen make_click_fn simulator; None for the cascade users (their tables are arguments)
  learning_rate: float
  unit: float = 0.0
  num_rankers: int = 0  # DBGD 2, MGD candidates + 1
  multileave: str = ""  # "team_draft" or "probabilistic" (DBGD, MGD, NSGD)
  tau: float = 0.0  # probabilistic multileaving's steepness
  nsgd: tuple[int, ...] = ()  # NSGD's (history, worst, tie_queries, tie_window)
  display: str = "model_sample"  # PDGD's displayed lists (one of DISPLAYS)
  pdgd: tuple = ()  # PDGD's switches (pairs, debias, surrogate) of losses.pdgd_loss; () for the other methods


def _spec(method: str, config: ml_collections.ConfigDict, click_config: Any = None) -> _Spec:
  if method not in ONLINE_LEARNERS:
    raise ValueError(f"unknown online method {method!r}; expected one of {tuple(ONLINE_LEARNERS)}")
  every, total = int(config.eval_every), int(config.num_impressions)
  if every <= 0 or total <= 0 or total % every:
    raise ValueError(f"config.num_impressions ({total}) must be a positive multiple of config.eval_every ({every})")
  return _Spec(
    method=method,
    ranker=str(config.ranker),
    hidden_sizes=tuple(int(h) for h in config.hidden_sizes),
    zero_init=bool(config.zero_init),
    top_k=int(config.top_k),
    eval_every=every,
    num_blocks=total // every,
    click_config=click_config,
    **ONLINE_LEARNERS[method].parse(config[method]),
  )


def _positions_by_counting(scores, where):
  """0-based positions of a descending order of ``scores`` ``[..., L]`` (ties to the earlier item, masked items
  last), by counting the items placed above each: on the CPU backend a sort is much slower at these sizes."""
  s = jnp.where(where, scores, -jnp.inf)
  earlier = jnp.arange(s.shape[-1])[:, None] < jnp.arange(s.shape[-1])[None, :]  # [j, i]: j before i
  above = (s[..., :, None] > s[..., None, :]) | ((s[..., :, None] == s[..., None, :]) & earlier)
  return jnp.sum(above, axis=-2, dtype=jnp.int32)


def _pdgd_step(spec, apply_fn, clicks_of):
  opt = optax.sgd(spec.learning_rate)

  def step(params, opt_state, key, x, y, w, e, click, stop):
    k_rank, k_click = jax.random.split(key)
    if spec.display == "model_sample":
      positions = sim.plackett_luce_sample(k_rank, jax.lax.stop_gradient(apply_fn(params, x)), where=w)
    elif spec.display == "model":
      positions = _positions_by_counting(apply_fn(params, x), w)
    else:  # "logged": the stored order
      positions = _positions_by_counting(jnp.zeros(w.shape), w)
    clicks = clicks_of(k_click, x, y, w, e, positions, click, stop)
    pairs, debias, surrogate = spec.pdgd
    loss = lambda p: losses_lib.pdgd_loss(
      apply_fn(p, x),
      clicks,
      positions=positions,
      where=w,
      top_k=spec.top_k,
      pairs=pairs,
      debias=debias,
      surrogate=surrogate,
    )
    updates, opt_state = opt.update(jax.grad(loss)(params), opt_state, params)
    return optax.apply_updates(params, updates), opt_state, positions

  return (lambda params, x: opt.init(params)), step


class _NSGDMemory(NamedTuple):
  """NSGD's state: a ring of recent losing directions and the recent difficult queries."""

  directions: jax.Array  # [G, P] flattened parameter directions that lost to the current ranker
  margins: jax.Array  # [G] their credit minus the current ranker's (< 0; +inf marks an empty slot)
  head: jax.Array  # [] the next slot of the ring to write
  query_x: jax.Array  # [T, L, F] the difficult queries' lists
  query_where: jax.Array  # [T, L]
  query_clicked: jax.Array  # [T, L] bool: the items clicked on them
  query_rr: jax.Array  # [T] sum of 1 / rank of those clicks (lower: more difficult; +inf marks an empty slot)
  query_time: jax.Array  # [T] the impression that stored each
  time: jax.Array  # [] impressions so far


def _nsgd_memory(params, x, nsgd) -> _NSGDMemory:
  """An empty memory for ``params`` and lists like ``x`` ``[L, F]``."""
  history, worst, tie_queries, _ = nsgd
  size = ravel_pytree(params)[0].size
  if worst >= size:
    raise ValueError(
      f"config.nsgd.worst ({worst}) must be below the ranker's number of parameters ({size}): the "
      "null space of that many directions can be empty"
    )
  num_items = x.shape[0]
  return _NSGDMemory(
    jnp.zeros((history, size), jnp.float32),
    jnp.full((history,), jnp.inf, jnp.float32),
    jnp.int32(0),
    jnp.zeros((tie_queries,) + x.shape, x.dtype),
    jnp.zeros((tie_queries, num_items), bool),
    jnp.zeros((tie_queries, num_items), bool),
    jnp.full((tie_queries,), jnp.inf, jnp.float32),
    jnp.zeros((tie_queries,), jnp.int32),
    jnp.int32(0),
  )


def _nsgd_directions(pool, losers, num, *, sensitivity):
  r"""NSGD's candidate directions: ``num`` unit vectors ``[num, P]`` in the null space of ``losers`` ``[E, P]``.

  Projects the Gaussian draws ``pool`` ``[M, P]`` off the row space of ``losers`` (all zero rows: the whole
  space), which makes them uniform on the unit sphere of the null space, and keeps the ``num`` with
  the largest :math:`|\mathrm{sensitivity}(u)|`, the candidate preselection of Wang et al. (SIGIR'18):
  the authors' code ranks by :math:`|u^\top \bar x|`, the mean feature vector of the query's documents.

  The row space's basis comes from a QR decomposition of ``losers.T``, its columns with a vanishing
  :math:`R_{kk}` dropped: exact for independent rows followed by zero rows (empty slots), which is what
  the memory holds (each direction is a fresh random draw; an SVD costs 4x more per impression here).
  """
  if losers.shape[0]:
    q, r = jnp.linalg.qr(losers.T)
    diag = jnp.abs(jnp.diagonal(r))
    span = jnp.where(diag > jnp.max(diag) * max(losers.shape) * jnp.finfo(r.dtype).eps, q, 0.0)  # [P, E]
    pool = pool - (pool @ span) @ span.T
  pool = pool / jnp.linalg.norm(pool, axis=-1, keepdims=True)
  return pool[jax.lax.top_k(jnp.abs(jax.vmap(sensitivity)(pool)), num)[1]]


def _nsgd_remember_query(memory: _NSGDMemory, x, where, clicks, positions, window: int) -> _NSGDMemory:
  r"""Stores the impression's query among the difficult ones; advances the clock.

  Its difficulty is :math:`\sum_{\text{clicked } i} 1 / \mathrm{rank}_i` (a query without clicks is not
  stored). It takes an empty slot, else one stored more than ``window`` impressions ago, else the
  easiest stored query's if it is more difficult than that.
  """
  time = memory.time + 1
  if memory.query_rr.shape[0] == 0:
    return memory._replace(time=time)
  clicked = (clicks > 0) & where
  rr = jnp.sum(jnp.where(clicked, 1.0 / (positions + 1.0), 0.0))
  filled = jnp.isfinite(memory.query_rr)
  stale = filled & (memory.time - memory.query_time > window)
  full = jnp.all(filled)
  slot = jnp.where(~full, jnp.argmin(filled), jnp.where(jnp.any(stale), jnp.argmax(stale), jnp.argmax(memory.query_rr)))
  store = (rr > 0) & (~full | jnp.any(stale) | (jnp.max(memory.query_rr) > rr))
  put = lambda a, v: a.at[slot].set(jnp.where(store, v, a[slot]))
  return memory._replace(
    query_x=put(memory.query_x, x),
    query_where=put(memory.query_where, where),
    query_clicked=put(memory.query_clicked, clicked),
    query_rr=put(memory.query_rr, rr),
    query_time=put(memory.query_time, memory.time),
    time=time,
  )


def _nsgd_break_ties(wins, scores, memory: _NSGDMemory):
  """With several winners ``wins`` ``[C]``, keeps the one whose rankings of the difficult queries (``scores``
  ``[C, T, L]``) put their clicked items highest (largest sum of 1 / rank)."""
  valid = jnp.isfinite(memory.query_rr)
  ranks = 1 + _positions_by_counting(scores, memory.query_where)
  rr = jnp.sum(jnp.where(memory.query_clicked & valid[:, None], 1.0 / ranks, 0.0), axis=(-2, -1))
  best = jax.nn.one_hot(jnp.argmax(jnp.where(wins > 0, rr, -jnp.inf)), wins.shape[0], dtype=wins.dtype)
  return jnp.where((jnp.sum(wins) > 1) & jnp.any(valid), best, wins)


def _nsgd_remember_losers(memory: _NSGDMemory, directions, margin, keep: int = 4) -> _NSGDMemory:
  """Writes the directions ``[C, P]`` that lost (``margin < 0``) and rank among the ``keep`` lowest margins of
  all the compared rankers (the current one's margin is 0) into the ring, as the authors' code does."""
  everyone = jnp.sort(jnp.concatenate([jnp.zeros((1,), margin.dtype), margin]))
  lost = (margin < 0) & (margin <= everyone[min(keep, everyone.shape[0]) - 1])
  size = memory.margins.shape[0]
  slot = jnp.where(lost, (memory.head + jnp.cumsum(lost) - 1) % size, size)  # size: dropped
  return memory._replace(
    directions=memory.directions.at[slot].set(directions, mode="drop"),
    margins=memory.margins.at[slot].set(margin.astype(jnp.float32), mode="drop"),
    head=(memory.head + jnp.sum(lost).astype(jnp.int32)) % size,
  )


def _nsgd_candidates(key, params, memory: _NSGDMemory, apply_fn, x, where, num: int, worst: int):
  """NSGD's ``num`` directions, as a pytree batch like ``params`` and flattened ``[num, P]``."""
  flat, unravel = ravel_pytree(params)
  losers = memory.directions[jax.lax.top_k(-memory.margins, worst)[1]] if worst else memory.directions[:0]
  mean_score = lambda f: jnp.sum(jnp.where(where, apply_fn(unravel(f), x), 0.0)) / jnp.maximum(jnp.sum(where), 1)
  sensitivity = lambda u: jax.jvp(mean_score, (flat,), (u.astype(flat.dtype),))[1]
  pool = jax.random.normal(key, (2 * (num + 1), flat.size), jnp.float32)  # the authors draw twice the rankers
  flat_dirs = _nsgd_directions(pool, losers, num, sensitivity=sensitivity)
  return jax.vmap(unravel)(flat_dirs.astype(flat.dtype)), flat_dirs


def _dueling_step(spec, apply_fn, clicks_of):
  """DBGD (one candidate), MGD and NSGD (several): multileave, credit the clicks, step toward the winners."""
  n = spec.num_rankers
  nsgd = bool(spec.nsgd)  # NSGD's memory sizes: set by the nsgd learner only

  def init(params, x):
    return _nsgd_memory(params, x, spec.nsgd) if nsgd else ()

  def step(params, extra, key, x, y, w, e, click, stop):
    k_dir, k_leave, k_click = jax.random.split(key, 3)
    if nsgd:
      dirs, flat_dirs = _nsgd_candidates(k_dir, params, extra, apply_fn, x, w, n - 1, spec.nsgd[1])
    else:
      dirs = jax.vmap(lambda k: _unit_direction(k, params))(jax.random.split(k_dir, n - 1))
    cand = jax.tree.map(lambda p, u: p[None] + spec.unit * u, params, dirs)
    scores = jnp.concatenate([apply_fn(params, x)[None], jax.vmap(lambda p: apply_fn(p, x))(cand)], axis=0)
    if spec.multileave == "team_draft":
      positions, teams = sim.team_draft_multileave(k_leave, scores, where=w)
    else:
      positions = sim.probabilistic_multileave(k_leave, scores, where=w, tau=spec.tau)
    clicks = clicks_of(k_click, x, y, w, e, positions, click, stop)
    if spec.multileave == "team_draft":
      credit = sim.multileave_credit(clicks, teams, num_teams=n, where=w)
      margin = credit[1:] - credit[0]
    else:
      assignment = sim.probabilistic_multileave_assignment(scores, positions, where=w, tau=spec.tau)
      shown = jnp.argsort(positions)[: spec.top_k]  # only the displayed items can be clicked
      margin = sim.multileave_preferences(clicks[shown], assignment[:, shown], where=w[shown], against=0)[1:]
    wins = (margin > 0).astype(jnp.float32)
    if nsgd:
      extra = _nsgd_remember_query(extra, x, w, clicks, positions, spec.nsgd[3])
      wins = _nsgd_break_ties(wins, jax.vmap(lambda p: apply_fn(p, extra.query_x))(cand), extra)
      extra = _nsgd_remember_losers(extra, flat_dirs, margin)
    scale = spec.learning_rate * wins / jnp.maximum(jnp.sum(wins), 1.0)
    params = jax.tree.map(lambda p, u: p + jnp.tensordot(scale, u, axes=1), params, dirs)
    return params, extra, positions

  return init, step


def _field(name: str, section: Mapping[str, Any], key: str) -> Any:
  """``section[key]``, or learner ``name``'s default where the section leaves it out."""
  return section[key] if key in section else ONLINE_LEARNERS[name].defaults[key]


@register_online_learner(
  "pdgd",
  # PDGD's display: "model_sample" (Plackett-Luce samples of its scores: the method), or, as diagnostics,
  # "logged" (the lists' stored order, the logging policy's: cuts the feedback loop) or "model" (by score).
  # Its switches (losses.pdgd_loss) take its update apart: pairs="all", debias=False, surrogate="log_probability".
  defaults={
    "learning_rate": 0.1,
    "display": "model_sample",
    "pairs": "considered",
    "debias": True,
    "surrogate": "probability",
  },
  make_step=_pdgd_step,
)
def _pdgd(section: Mapping[str, Any]) -> dict:
  """PDGD (Oosterhuis & de Rijke, CIKM'18): SGD on :func:`~ultr_jax.losses.pdgd_loss` of its displayed lists."""
  display = str(_field("pdgd", section, "display"))
  if display not in DISPLAYS:
    raise ValueError(f"config.pdgd.display: unknown {display!r}; expected one of {DISPLAYS}")
  pairs, surrogate = str(_field("pdgd", section, "pairs")), str(_field("pdgd", section, "surrogate"))
  pdgd_lib.check_switches(pairs, surrogate)
  switches = (pairs, bool(_field("pdgd", section, "debias")), surrogate)
  return {"learning_rate": float(section["learning_rate"]), "display": display, "pdgd": switches}


def _dueling_fields(name: str, section: Mapping[str, Any], num_rankers: int) -> dict:
  """The fields DBGD, MGD and NSGD share: step size, exploration unit and the multileaved comparison."""
  multileave = str(_field(name, section, "multileave"))
  if multileave not in MULTILEAVE_METHODS:
    raise ValueError(f"config.{name}.multileave: unknown {multileave!r}; expected one of {MULTILEAVE_METHODS}")
  return {
    "learning_rate": float(section["learning_rate"]),
    "unit": float(_field(name, section, "unit")),
    "num_rankers": num_rankers,
    "multileave": multileave,
    # tau alone: no new program for team-draft
    "tau": float(_field(name, section, "tau")) if multileave == "probabilistic" else 0.0,
  }


def _num_rankers(name: str, section: Mapping[str, Any]) -> int:
  """The current ranker plus ``num_candidates`` (at least one)."""
  candidates = int(_field(name, section, "num_candidates"))
  if candidates < 1:
    raise ValueError(f"config.{name}.num_candidates must be >= 1, got {candidates}")
  return candidates + 1


# The dueling bandits' comparison: "team_draft" or "probabilistic" multileaving (tau: its steepness).
_DUELING = {"learning_rate": 0.01, "unit": 1.0, "multileave": "team_draft", "tau": 3.0}


@register_online_learner("dbgd", defaults=_DUELING, make_step=_dueling_step)
def _dbgd(section: Mapping[str, Any]) -> dict:
  """DBGD (Yue & Joachims, ICML'09): one candidate interleaved with the current ranker."""
  return _dueling_fields("dbgd", section, 2)


_MGD = {**_DUELING, "num_candidates": 9}
_NSGD = {**_DUELING, "num_candidates": 9, "history": 60, "worst": 25, "tie_queries": 10, "tie_window": 50}


@register_online_learner("mgd", defaults=_MGD, make_step=_dueling_step)
def _mgd(section: Mapping[str, Any]) -> dict:
  """MGD (Schuth et al., WSDM'16): ``num_candidates`` candidates multileaved with the current ranker."""
  return _dueling_fields("mgd", section, _num_rankers("mgd", section))


# NSGD: MGD plus the null space of the `worst` of the last `history` losing directions, and ties broken on
# the `tie_queries` most difficult recent queries (stored at most `tie_window` impressions ago); the
# settings of the authors' SIGIR'18 script.
@register_online_learner(
  "nsgd",
  defaults=_NSGD,
  make_step=_dueling_step,
)
def _nsgd(section: Mapping[str, Any]) -> dict:
  """NSGD (Wang et al., SIGIR'18): MGD's candidates drawn from the null space of recent losing directions."""
  n = _num_rankers("nsgd", section)
  nsgd = tuple(int(_field("nsgd", section, k)) for k in ("history", "worst", "tie_queries", "tie_window"))
  history, worst, tie_queries, _ = nsgd
  if history < n - 1 or not 0 <= worst <= history or tie_queries < 0:
    raise ValueError(
      f"config.nsgd: need history >= num_candidates, 0 <= worst <= history and tie_queries >= 0; "
      f"got history={history}, num_candidates={n - 1}, worst={worst}, tie_queries={tie_queries}"
    )
  return {**_dueling_fields("nsgd", section, n), "nsgd": nsgd}


#: The registered online learners' names, in registration order.
ONLINE_METHODS = tuple(ONLINE_LEARNERS)


@functools.lru_cache(maxsize=64)
def _compiled_run(spec: _Spec):
  """``run(keys [S], click, stop, train arrays, train extras, test arrays) -> (curve [S, E + 1], online [S])``."""
  model = make_ranker(spec.ranker, hidden_sizes=spec.hidden_sizes)
  apply_fn = lambda p, x: models.apply_array(model, p, x)
  if spec.click_config is not None:
    config_clicks = _config_clicks(spec.click_config)
    clicks_of = lambda key, x, y, w, e, positions, click, stop: config_clicks(
      key, y, positions=positions, where=w, features=x, **e
    )
  else:
    clicks_of = lambda key, x, y, w, e, positions, click, stop: _cascade_clicks(
      key, y, positions=positions, where=w, click=click, stop=stop, top_k=spec.top_k
    )
  init_extra, step = ONLINE_LEARNERS[spec.method].make_step(spec, apply_fn, clicks_of)

  def one_seed(key, click, stop, xs, ys, ws, es, xt, yt, wt):
    evaluate = lambda params: metrics_lib.ndcg(apply_fn(params, xt), yt, where=wt, topn=10)
    k_init, k_run = jax.random.split(key)
    params = model.init(k_init, xs[0])
    if spec.zero_init and spec.ranker == "linear":
      params = jax.tree.map(jnp.zeros_like, params)

    def impression(carry, key):
      params, extra = carry
      k_query, k_step = jax.random.split(key)
      q = jax.random.randint(k_query, (), 0, xs.shape[0])
      e = jax.tree.map(lambda a: a[q], es)
      params, extra, positions = step(params, extra, k_step, xs[q], ys[q], ws[q], e, click, stop)
      shown = metrics_lib.ndcg(-positions.astype(jnp.float32), ys[q], where=ws[q], topn=10)
      return (params, extra), shown

    def block(carry, key):
      carry, shown = jax.lax.scan(impression, carry, jax.random.split(key, spec.eval_every))
      return carry, (evaluate(carry[0]), jnp.mean(shown))

    first = evaluate(params)
    _, (curve, online) = jax.lax.scan(
      block, (params, init_extra(params, xs[0])), jax.random.split(k_run, spec.num_blocks)
    )
    return jnp.concatenate([first[None], curve]), jnp.mean(online)

  return jax.jit(jax.vmap(one_seed, in_axes=(0,) + (None,) * 9))


def _item_extras(dataset: RankingDataset) -> dict[str, jax.Array]:
  """The dataset's per-item extras (``[Q, L, ...]``: context, logging_score, ...), which users may read."""
  return {k: jnp.asarray(v) for k, v in dataset.extras.items() if v.shape[:2] == dataset.where.shape}


def online_users_missing(click_model: Mapping[str, Any], dataset: RankingDataset, *, top_k: int) -> Optional[str]:
  """Why ``click_model``'s users cannot click on ``dataset``'s lists (an input it lacks), or None.

  Traces the users on the first list (no clicks are drawn), so a grid can say why a cell is empty
  before any training.

  Args:
    click_model: a click-model config mapping (see :func:`online_click_model`).
    dataset: the lists the users would click on (its per-item extras join their batch).
    top_k: the number of displayed positions.

  Returns:
    The click model's message naming the missing input, or None when the users can click.

  >>> from ultr_jax.data import make_synthetic
  >>> d = make_synthetic(num_train=2, num_valid=1, num_test=1, list_size=4, num_features=3, seed=0).train
  >>> print(online_users_missing({"name": "pbm_table"}, d, top_k=3))
  None
  >>> print(online_users_missing({"name": "context_pbm", "num_contexts": 2}, d, top_k=3))
  click_fn: context_pbm needs batch['context']
  """
  fn = online_click_model(click_model, top_k=top_k)
  first = jax.tree.map(lambda a: a[0], _item_extras(dataset))
  positions = jnp.arange(dataset.list_size)
  try:
    jax.eval_shape(
      lambda key: fn(
        key,
        jnp.asarray(dataset.labels[0]),
        positions=positions,
        where=jnp.asarray(dataset.where[0]),
        features=jnp.asarray(dataset.features[0]),
        **first,
      ),
      jax.random.key(0),
    )
  except (KeyError, ValueError) as e:
    return str(e).strip("'\"")
  return None


def online_learning(
  method: str,
  train: RankingDataset,
  test: RankingDataset,
  *,
  click_model: Union[str, Mapping[str, Any]],
  config: Optional[ml_collections.ConfigDict] = None,
  seeds=(0,),
  mesh: Optional[jax.sharding.Mesh] = None,
) -> dict[str, np.ndarray]:
  r"""Runs one online learner for ``config.num_impressions`` impressions per seed (vmapped over seeds).

  One compiled program per method and static config: the cascade users, the data and the seeds are
  arguments, so a sweep over :data:`ONLINE_CLICK_MODELS` compiles each method once (a
  ``make_click_fn`` config is part of the program: one compile per config).

  Args:
    method: a name in :data:`ONLINE_LEARNERS`.
    train: queries the simulated users issue (uniformly at random; ``labels``
      drive the clicks).
    test: queries for the offline nDCG@10.
    click_model: a name in :data:`ONLINE_CLICK_MODELS`, or a click-model config (see
      :func:`online_click_model`); it also sees ``train``'s per-item extras (e.g. ``context``).
    config: :func:`online_learner_config` (or a variant; the online study's config holds its fields).
    seeds: one run per seed (query draws, rankings, clicks and initialisation).
    mesh: optional device mesh (:func:`~ultr_jax.train.make_mesh`); the seeds are split over its
      devices (their number must divide the number of seeds), the data is replicated.

  Returns:
    ``{"ndcg@10": [S], "online_ndcg@10": [S], "curve": [S, E + 1], "impressions": [E + 1]}``: the final
    test nDCG@10, the mean nDCG@10 of the displayed rankings, and the test nDCG@10 every
    ``eval_every`` impressions (from 0).

  >>> from ultr_jax.data import make_synthetic
  >>> s = make_synthetic(num_train=20, num_valid=1, num_test=10, list_size=6, num_features=4, seed=0)
  >>> c = online_learner_config()
  >>> c.num_impressions, c.eval_every, c.top_k = 40, 20, 5
  >>> out = online_learning("pdgd", s.train, s.test, click_model="perfect", config=c, seeds=(0, 1))
  >>> out["curve"].shape, out["impressions"].tolist()
  ((2, 3), [0, 20, 40])
  """
  config = online_learner_config() if config is None else config
  if isinstance(click_model, str):
    spec = _spec(method, config)
    click, stop = _click_tables(click_model)
    extras = {}
  else:
    spec = _spec(method, config, _click_config(click_model, int(config.top_k)))
    click, stop = _click_tables("perfect")  # unused by the program: the config's users click
    # The queries' per-item extras (context, logging_score, ...) join the click model's batch.
    extras = _item_extras(train)
  keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
  arrays = [jnp.asarray(a) for a in (click, stop, train.features, train.labels, train.where)]
  arrays += [extras] + [jnp.asarray(a) for a in (test.features, test.labels, test.where)]
  if mesh is not None:
    if len(seeds) % mesh.size:
      raise ValueError(f"online_learning: {len(seeds)} seeds do not split over the mesh's {mesh.size} devices")
    keys = jax.device_put(keys, sharding_lib.data_sharding(mesh))
    arrays = [jax.device_put(a, sharding_lib.replicated(mesh)) for a in arrays]
  curve, online = _compiled_run(spec)(keys, *arrays)
  curve, online = np.asarray(curve), np.asarray(online)
  return {
    "ndcg@10": curve[:, -1],
    "online_ndcg@10": online,
    "curve": curve,
    "impressions": np.arange(0, spec.num_blocks * spec.eval_every + 1, spec.eval_every),
  }


def full_info_reference(
  train: RankingDataset, test: RankingDataset, *, config: ml_collections.ConfigDict, seeds=(0,)
) -> dict[str, np.ndarray]:
  r"""The online learners' ceiling: the same ranker trained offline on the true labels.

  :func:`rax.softmax_loss` on the graded labels of every training query (full batch, Adam,
  ``config.full_info.steps`` steps), vmapped over seeds (the initialisation).

  Args:
    train: the training queries (their graded ``labels`` are the targets).
    test: the queries of the test nDCG@10.
    config: the learners' ``ranker`` and ``hidden_sizes`` and a ``full_info`` section (``steps``,
      ``learning_rate``), as the online study's config holds them.
    seeds: one initialisation per seed.

  Returns:
    ``{"ndcg@10": [S]}``, the test nDCG@10.
  """
  model = make_ranker(str(config.ranker), hidden_sizes=tuple(int(h) for h in config.hidden_sizes))
  opt = optax.adam(float(config.full_info.learning_rate))
  xs, ys, ws, xt, yt, wt = (
    jnp.asarray(a) for a in (train.features, train.labels, train.where, test.features, test.labels, test.where)
  )

  def one_seed(key):
    params = model.init(key, xs[0])
    loss = lambda p: rax.softmax_loss(models.apply_array(model, p, xs), ys, where=ws)

    def step(carry, _):
      params, state = carry
      updates, state = opt.update(jax.grad(loss)(params), state, params)
      return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=int(config.full_info.steps))
    return metrics_lib.ndcg(models.apply_array(model, params, xt), yt, where=wt, topn=10)

  keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
  return {"ndcg@10": np.asarray(jax.jit(jax.vmap(one_seed))(keys))}
