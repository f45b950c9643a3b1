r"""SIF's position+trust simulator as a registered click model (Section VI-D of the SIF paper).

.. math::
    d^*_i = \alpha e^{-\delta p_i} \sigma(\gamma z_i),\qquad
    P(C_i = 1) = \min\bigl(1,\ v_{p_i}^{\eta}\, r_i\, (1 + d^*_i)\bigr)

with 0-based positions :math:`p_i`, ULTRA's examination table :math:`v`, and the standardised logging score
:math:`z_i` (``batch["logging_score"]``). Clicks are independent given the list. The sampler and its options
(``expected``, ``score_key``, the per-query ``alpha_key``) are :func:`position_trust`'s: the model builds its
click function with :func:`make_position_trust_click_fn` (:class:`~ultr_jax.simulation.OwnClickFunction`), so a config
names it like any other model. Simulation only: it is not fitted and has no likelihood loss.

This differs from :func:`~ultr_jax.simulation.trust` (the affine :math:`\epsilon^\pm` trust model of Agarwal
et al.), which has no content-sensitive, logging-score-driven channel.
"""

import dataclasses
import functools
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, Session, prepare
from ultr_jax.simulation.click_models.pbm import PBMTable, table_kwargs
from ultr_jax.types import Array, Batch, ClickFn, PRNGKey

__all__ = ["PositionTrust", "PositionTrustSimulator", "make_position_trust_click_fn", "position_trust"]


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
  r"""Position+trust clicks (SIF Section VI-D).

  .. math::
      d^*_i = \alpha e^{-\delta p_i} \sigma(\gamma z_i),\qquad
      P(C_i = 1) = \min\bigl(1,\ v_{p_i}^{\eta}\, r_i\, (1 + d^*_i)\bigr)

  with 0-based positions :math:`p_i` and standardised logging score :math:`z_i`.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` relevance click probability :math:`r_i`.
    logging_score: ``[..., L]`` standardised logging score :math:`z_i`.
    where: ``bool[..., L]`` valid items (default all).
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    alpha: trust strength :math:`\alpha`.
    delta: trust decay over positions :math:`\delta`.
    gamma: content sensitivity :math:`\gamma`.
    eta: PBM severity (power of the examination table).
    table: per-position examination probabilities :math:`v`.
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
  session = PositionTrust().session(
    attraction,
    where=where,
    positions=positions,
    top_k=top_k,
    logging_score=logging_score,
    alpha=alpha,
    delta=delta,
    gamma=gamma,
    eta=eta,
    table=table,
  )
  if not expected:
    return session.output(key, num_sessions, None)
  exam, click_prob = session.marginals()
  clicks = click_prob if num_sessions is None else jnp.broadcast_to(click_prob, (num_sessions,) + click_prob.shape)
  out = {"examination": exam, "click_prob": click_prob, "clicks": clicks, **(session.extras or {})}
  out["conditional_click_prob"] = jnp.broadcast_to(click_prob, clicks.shape)  # independent clicks
  if top_k is not None:
    out["shown"] = session.shown
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


def make_position_trust_click_fn(config: Any) -> ClickFn:
  r"""``click_fn(key, batch)`` for :func:`position_trust`, for the training loop.

  ``config`` (mapping or ``ml_collections.ConfigDict``) may hold ``alpha``
  (0.6), ``delta`` (0.3), ``gamma`` (1.0), ``eta`` (1.0), ``table``,
  relevance ``eps`` (0.1) / ``eps_plus`` (1.0) / ``ymax`` (4), ``top_k``,
  ``num_sessions``, ``expected`` (False) and ``score_key`` (the batch entry
  holding the standardised logging score, default ``"logging_score"``) and
  ``alpha_key``: when set and present in the batch, the per-query
  ``batch[alpha_key]`` (``[...]``) overrides ``alpha``, so one compiled step
  serves every trust strength.

  Args:
    config: the click-model config, a mapping or an ``ml_collections.ConfigDict`` (keys above).

  Returns:
    ``click_fn(key, batch) -> dict``: :func:`position_trust`'s dict for the batch's lists.

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


@dataclasses.dataclass(frozen=True)
class PositionTrust(ClickModel):
  """SIF's position+trust clicks (see the module docstring); simulation only.

  >>> import jax.numpy as jnp
  >>> s = PositionTrust().session(jnp.array([1.0, 0.1]), logging_score=jnp.zeros(2))
  >>> print(s.click_prob.round(4))
  [0.884  0.0746]
  """

  name = "position_trust"
  config_keys = {
    "alpha": 0.6,
    "delta": 0.3,
    "gamma": 1.0,
    "eta": 1.0,
    "table": None,
    "expected": False,
    "score_key": "logging_score",
    "alpha_key": None,
  }
  batch_inputs = ("logging_score",)
  fittable = False
  loss = False

  def click_function(self, cfg: Mapping[str, Any]) -> ClickFn:
    return make_position_trust_click_fn(cfg)

  def simulation_kwargs(self, cfg: Mapping[str, Any]) -> dict:
    kwargs = {k: float(cfg.get(k, self.config_keys[k])) for k in ("alpha", "delta", "gamma")}
    return {**kwargs, **table_kwargs({k: v for k, v in cfg.items() if v is not None})}

  def session(
    self,
    attraction: Array,
    *,
    where: Optional[Array] = None,
    positions: Optional[Array] = None,
    top_k: Optional[int] = None,
    logging_score: Array,
    alpha: float = 0.6,
    delta: float = 0.3,
    gamma: float = 1.0,
    eta: float = 1.0,
    table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  ) -> Session:
    r"""The position+trust model's ``Session`` (:func:`position_trust`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      logging_score: ``[..., L]`` standardised logging score :math:`z_i`.
      alpha: trust strength :math:`\alpha`.
      delta: trust decay over positions :math:`\delta`.
      gamma: content sensitivity :math:`\gamma` of the trust channel.
      eta: power of the examination table (position-bias severity).
      table: per-position examination probabilities :math:`v` (positions beyond it reuse its last value).

    Returns:
      The ``Session``.
    """
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    exam = PBMTable.examination(positions, eta=eta, table=table)
    trust_score = jax.nn.sigmoid(gamma * jnp.asarray(logging_score, jnp.float32))
    trust = alpha * jnp.exp(-delta * positions.astype(jnp.float32)) * trust_score
    zero = lambda v: jnp.where(shown, v, 0.0)
    extras = {"trust": zero(trust), "trust_score": zero(trust_score), "click_propensity": zero(exam * (1.0 + trust))}
    click_prob = jnp.minimum(1.0, exam * r * (1.0 + trust))
    return Session(exam, click_prob, shown, True, extras=extras, top_k=top_k)
