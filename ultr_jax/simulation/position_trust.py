r"""SIF's position+trust click simulator (spec-sif 6.2, Section VI-D) and its toy data.

The post-exposure trust decision multiplies the click probability:

.. math::
    P(C = 1 \mid x, k) = \min\bigl(1,\ \pi^*_k\, r(y)\,
        (1 + \alpha e^{-\delta(k-1)} \sigma(\gamma \tilde R_s))\bigr)

with :math:`\pi^*_k` the ULTRA PBM table (to the power :math:`\eta`),
:math:`r(y)` the ULTRA relevance mapping, :math:`\tilde R_s` the globally
standardised logging score (the bias source :math:`Z`), trust strength
:math:`\alpha`, decay :math:`\delta` and content sensitivity :math:`\gamma`
(paper defaults 0.6, 0.3, 1.0). :math:`\alpha = 0` is the plain PBM
(position-only setting).

This differs from :func:`~ultr_jax.simulation.trust` (the affine
:math:`\epsilon^\pm` trust model of Agarwal et al.), which has no
content-sensitive, logging-score-driven channel. The module is named
``position_trust`` so that it does not shadow that function's export.
"""

import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.data import RankingDataset
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models import make_click_fn
from ultr_jax.types import Array, Batch, PRNGKey

__all__ = [
  "position_trust",
  "make_position_trust_click_fn",
  "PositionTrustSimulator",
  "make_any_click_fn",
  "sif_toy_dataset",
]


def position_trust(
  key: PRNGKey,
  attraction: Array,
  logging_score: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  alpha: float = 0.6,
  delta: float = 0.3,
  gamma: float = 1.0,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  expected: bool = False,
) -> dict:
  r"""Position+trust clicks (SIF Section VI-D, spec 6.2).

  .. math::
      d^*_i = \alpha e^{-\delta p_i} \sigma(\gamma z_i),\qquad
      P(C_i = 1) = \min\bigl(1,\ v_{p_i}^{\eta}\, r_i\, (1 + d^*_i)\bigr)

  with 0-based positions :math:`p_i` and standardised logging score :math:`z_i`.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` relevance click probability :math:`r_i`.
    logging_score: ``[..., L]`` standardised logging score :math:`z_i`.
    where: ``bool[..., L]``; positions: ``int[..., L]`` (default ``arange(L)``).
    alpha, delta, gamma: trust strength, decay, content sensitivity.
    eta, table: PBM severity and examination table.
    top_k: display cut-off (``shown`` is returned).
    num_sessions: leading sessions axis.
    expected: return the click probabilities as ``clicks`` (population
      clicks without sampling noise, as the T6 toy uses).

  Returns:
    dict with ``clicks``, ``examination`` (the exposure oracle
    :math:`\pi^*`), ``click_prob``, ``trust`` (:math:`d^*`),
    ``trust_score`` (:math:`\sigma(\gamma z)`, the oracle trust-channel
    probability), ``click_propensity`` (:math:`\pi^*(1 + d^*)`) and
    ``conditional_click_prob`` (``click_prob`` shaped like ``clicks``: the
    clicks are independent given the list); all 0 where not shown.

  >>> out = position_trust(jax.random.key(0), jnp.array([1.0, 0.1]), jnp.zeros(2), expected=True)
  >>> print(np.asarray(out["click_prob"]).round(4))
  [0.884  0.0746]
  """
  r = jnp.asarray(attraction, jnp.float32)
  where = jnp.ones(r.shape, bool) if where is None else jnp.asarray(where, bool)
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(r.shape[-1], dtype=jnp.int32), r.shape)
  shown = where if top_k is None else where & (positions < top_k)
  exam = P.pbm_table_examination(positions, eta=eta, table=table)
  trust_score = jax.nn.sigmoid(gamma * jnp.asarray(logging_score, jnp.float32))
  trust = alpha * jnp.exp(-delta * positions.astype(jnp.float32)) * trust_score
  click_prob = jnp.minimum(1.0, exam * r * (1.0 + trust))
  zero = lambda v: jnp.where(shown, v, 0.0)
  out = {
    "examination": zero(exam),
    "click_prob": zero(click_prob),
    "trust": zero(trust),
    "trust_score": zero(trust_score),
    "click_propensity": zero(exam * (1.0 + trust)),
  }
  if expected:
    clicks = out["click_prob"]
    if num_sessions is not None:
      clicks = jnp.broadcast_to(clicks, (num_sessions,) + clicks.shape)
  else:
    shape = r.shape if num_sessions is None else (num_sessions,) + r.shape
    clicks = jnp.where(shown, jax.random.uniform(key, shape) < click_prob, False).astype(jnp.float32)
  out["clicks"] = clicks
  out["conditional_click_prob"] = jnp.broadcast_to(out["click_prob"], clicks.shape)  # independent clicks
  if top_k is not None:
    out["shown"] = shown
  return out


_KEYS = {
  "alpha",
  "alpha_key",
  "delta",
  "gamma",
  "eta",
  "eps",
  "eps_plus",
  "ymax",
  "table",
  "top_k",
  "num_sessions",
  "expected",
  "score_key",
  "name",
}


def make_position_trust_click_fn(config: Any) -> Callable[[PRNGKey, Batch], dict]:
  r"""``click_fn(key, batch)`` for :func:`position_trust`, for the training loop.

  ``config`` (mapping or ``ml_collections.ConfigDict``) may hold ``alpha``
  (0.6), ``delta`` (0.3), ``gamma`` (1.0), ``eta`` (1.0), ``table``,
  relevance ``eps`` (0.1) / ``eps_plus`` (1.0) / ``ymax`` (4), ``top_k``,
  ``num_sessions``, ``expected`` (False) and ``score_key`` (the batch entry
  holding the standardised logging score, default ``"logging_score"``) and
  ``alpha_key``: when set and present in the batch, the per-query
  ``batch[alpha_key]`` (``[...]``) overrides ``alpha``, so one compiled step
  serves every trust strength.

  Raises:
    ValueError: on an unknown key, or (when called) a batch without
      ``labels``, ``where`` or the logging score.

  >>> fn = make_position_trust_click_fn({"alpha": 0.0, "expected": True})
  >>> b = {"labels": jnp.array([4.0, 0.0]), "where": jnp.ones(2, bool), "logging_score": jnp.zeros(2)}
  >>> print(fn(jax.random.key(0), b)["clicks"])
  [0.68  0.061]
  """
  cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  cfg = {k: v for k, v in cfg.items() if v is not None}
  unknown = set(cfg) - _KEYS
  if unknown:
    raise ValueError(
      f"position_trust click_model: unknown keys {sorted(unknown)}; known keys: {', '.join(sorted(_KEYS))}"
    )
  kwargs = dict(
    alpha=float(cfg.get("alpha", 0.6)),
    delta=float(cfg.get("delta", 0.3)),
    gamma=float(cfg.get("gamma", 1.0)),
    eta=float(cfg.get("eta", 1.0)),
    expected=bool(cfg.get("expected", False)),
  )
  if "table" in cfg:
    kwargs["table"] = tuple(float(v) for v in cfg["table"])
  for k in ("top_k", "num_sessions"):
    if k in cfg:
      kwargs[k] = int(cfg[k])
  rel = dict(eps=float(cfg.get("eps", 0.1)), eps_plus=float(cfg.get("eps_plus", 1.0)), ymax=int(cfg.get("ymax", 4)))
  simulator = PositionTrustSimulator(
    tuple(sorted(kwargs.items())),
    tuple(sorted(rel.items())),
    cfg.get("score_key", "logging_score"),
    cfg.get("alpha_key"),
  )
  return simulator.__call__


@dataclasses.dataclass(frozen=True)
class PositionTrustSimulator:
  """:func:`make_position_trust_click_fn`'s click function: frozen and hashable by value (a compile-cache key).

  Attributes:
    kwargs: :func:`position_trust`'s keyword arguments, sorted pairs.
    relevance: the relevance mapping's ``eps``, ``eps_plus``, ``ymax``, sorted pairs.
    score_key: the batch entry with the standardised logging score.
    alpha_key: the batch entry overriding ``alpha`` per query (None: none).
  """

  kwargs: tuple
  relevance: tuple
  score_key: str = "logging_score"
  alpha_key: Optional[str] = None

  def __call__(self, key: PRNGKey, batch: Batch) -> dict:
    return _position_trust_clicks(self, key, batch)


@functools.partial(jax.jit, static_argnums=0)
def _position_trust_clicks(simulator: PositionTrustSimulator, key: PRNGKey, batch: Batch) -> dict:
  for k in ("labels", "where", simulator.score_key):
    if k not in batch:
      raise ValueError(f"position_trust click_fn: batch needs {k!r}")
  attraction = P.relevance_probability(batch["labels"], **dict(simulator.relevance))
  kw = dict(simulator.kwargs)
  if simulator.alpha_key is not None and simulator.alpha_key in batch:
    kw["alpha"] = jnp.asarray(batch[simulator.alpha_key], jnp.float32)[..., None]
  return position_trust(
    key,
    attraction,
    batch[simulator.score_key],
    where=jnp.asarray(batch["where"], bool),
    positions=batch.get("positions"),
    **kw,
  )


def make_any_click_fn(config: Any) -> Callable[[PRNGKey, Batch], dict]:
  """:func:`~ultr_jax.simulation.make_click_fn`, kept under this name for existing callers: ``position_trust`` is
  a registered click model (``PositionTrust`` in ``ultr_jax/simulation/click_models/position_trust.py``), so the one factory builds
  every simulator (either way the bound ``__call__`` of a frozen, hashable simulator, ``fn.__self__``).

  >>> b = {"labels": jnp.array([4.0, 0.0]), "where": jnp.ones(2, bool), "logging_score": jnp.zeros(2)}
  >>> sorted(make_any_click_fn({"name": "position_trust"})(jax.random.key(0), b)) == sorted(
  ...     make_position_trust_click_fn({})(jax.random.key(0), b))
  True
  >>> print(make_any_click_fn({"name": "pbm_table", "eps": 0.1})(jax.random.key(0), b)["click_prob"])
  [0.68  0.061]
  """
  return make_click_fn(config)


def sif_toy_dataset(
  num_queries: int,
  *,
  seed: int = 0,
  num_features: int = 20,
  list_size: int = 10,
  logging_corr: float = 0.7,
  noise: float = 0.5,
  quantiles: Sequence[float] = (0.5, 0.75, 0.9, 0.97),
  params: Optional[dict] = None,
) -> tuple[RankingDataset, dict]:
  r"""The synthetic toy of spec-sif 7.1 (T6/T7), displayed in logging order.

  .. math::
      x \sim N(0, I_F),\quad u = x^\top w^* + 0.5\,\xi,\quad
      R_s = x^\top w_{log},\quad w_{log} = \rho\,w^* + \sqrt{1-\rho^2}\,n

  with unit :math:`w^*` and unit :math:`n \perp w^*` (so
  :math:`\mathrm{corr}(R_s, x^\top w^*) = \rho` exactly). Grades
  :math:`y \in \{0..4\}` are the bins of :math:`u` at the global quantiles
  ``quantiles``; each list is sorted by :math:`R_s` (item ``i`` is displayed
  at position ``i``). The extra ``logging_score`` is :math:`R_s`
  standardised with global statistics.

  Args:
    num_queries: lists to draw.
    seed: NumPy seed for the documents (the ground-truth vectors and
      quantile thresholds come from ``params`` when given).
    num_features, list_size, logging_corr, noise, quantiles: as above.
    params: ``{"w_star", "w_log", "thresholds", "rs_mean", "rs_std"}`` from a
      previous call (to draw test lists from the same world); None draws new
      ones from ``seed``.

  Returns:
    ``(dataset, params)``; the dataset's extras hold ``logging_score``.

  >>> ds, world = sif_toy_dataset(200, seed=0)
  >>> ds.features.shape, round(float(np.corrcoef(ds.features.reshape(-1, 20) @ world["w_log"],
  ...     ds.features.reshape(-1, 20) @ world["w_star"])[0, 1]), 1)
  ((200, 10, 20), 0.7)
  """
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((num_queries, list_size, num_features))
  if params is None:
    wrng = np.random.default_rng([seed, 1])
    w_star = wrng.standard_normal(num_features)
    w_star /= np.linalg.norm(w_star)
    n = wrng.standard_normal(num_features)
    n -= (n @ w_star) * w_star
    n /= np.linalg.norm(n)
    w_log = logging_corr * w_star + np.sqrt(1.0 - logging_corr**2) * n
  else:
    w_star, w_log = params["w_star"], params["w_log"]
  u = x @ w_star + noise * rng.standard_normal((num_queries, list_size))
  rs = x @ w_log
  if params is None:
    thresholds = np.quantile(u, quantiles)
    rs_mean, rs_std = float(rs.mean()), float(rs.std())
  else:
    thresholds, rs_mean, rs_std = params["thresholds"], params["rs_mean"], params["rs_std"]
  labels = np.searchsorted(thresholds, u, side="right").astype(np.float32)
  order = np.argsort(-rs, axis=-1, kind="stable")
  take = lambda a: np.take_along_axis(a, order, axis=1)
  x = np.take_along_axis(x, order[..., None], axis=1)
  labels, rs = take(labels), take(rs)
  ds = RankingDataset(
    features=x.astype(np.float32),
    labels=labels,
    where=np.ones((num_queries, list_size), bool),
    qid=np.arange(num_queries),
    extras={"logging_score": ((rs - rs_mean) / rs_std).astype(np.float32)},
  )
  world = {"w_star": w_star, "w_log": w_log, "thresholds": thresholds, "rs_mean": rs_mean, "rs_std": rs_std}
  return ds, world
