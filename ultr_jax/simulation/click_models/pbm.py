r"""Position-based models: :math:`P(C_i = 1) = o_{p_i}\, a_i` (Craswell et al. WSDM'08; Richardson et al. WWW'07).

Simulation: ``pbm`` with :math:`(1/\mathrm{rank})^\eta` examination (CLD Eq. 13) and ``pbm_table`` with ULTRA's
eye-tracking table to the power :math:`\eta`. Fitted: one examination logit per rank (``examination[L]``); a
``pbm`` log is simulated with ULTRA's table (:func:`pbm_table`).
"""

import dataclasses
from typing import Optional, Sequence


import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax._numerics import log1mexp
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, ItemStatistics, Parameter, Session, prepare, rank_table
from ultr_jax.simulation.click_models.samplers import sample_clicks
from ultr_jax.types import Array, PRNGKey

__all__ = ["pbm", "pbm_table", "PBM", "PBMTable"]


def _session(exam, r, shown, top_k, extras=None, click_prob=None):
  return Session(exam, exam * r if click_prob is None else click_prob, shown, True, extras=extras, top_k=top_k)


def pbm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Position-based model with :math:`(1/\mathrm{rank})^\eta` examination (CLD Eq. 13).

  .. math::
      P(C_i = 1) = (p_i + 1)^{-\eta}\,\mathbb{1}[p_i < k]\; r_i

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    eta: position-bias severity.
    top_k: display cut-off (``shown`` is returned).
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = pbm(jax.random.key(0), jnp.ones(3), eta=1.0)
  >>> print(np.asarray(out["examination"]).round(4))
  [1.     0.5    0.3333]
  """
  return PBM().simulate(
    key,
    attraction,
    where=where,
    positions=positions,
    top_k=top_k,
    num_sessions=num_sessions,
    num_impressions=num_impressions,
    eta=eta,
  )


def pbm_table(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""ULTRA's position-based model: eye-tracking table to the power :math:`\eta`.

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta}\; r_i

  (:meth:`PBMTable.examination`; positions beyond the table reuse its last value).

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination :math:`r_i`.
    where: ``bool[..., L]`` valid items (default all); masked items never click.
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    eta: power of the examination table (position-bias severity).
    table: per-position examination probabilities :math:`v` (default ULTRA's; positions beyond it reuse its last
      value).
    top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions and
      ``click_counts`` the counts.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob`` (sessions mode),
    ``click_counts`` (aggregated mode) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = pbm_table(jax.random.key(0), jnp.full(2, 0.5), eta=1.0)
  >>> print(out["click_prob"])
  [0.34  0.305]
  """
  return PBMTable().simulate(
    key,
    attraction,
    where=where,
    positions=positions,
    top_k=top_k,
    num_sessions=num_sessions,
    num_impressions=num_impressions,
    eta=eta,
    table=table,
  )


def table_kwargs(cfg) -> dict:
  r"""``eta`` (1.0) and, when given, ``table`` of a config: the simulation keywords of every model with a position
  table to the power :math:`\eta` (pbm's ``(1/rank)^eta`` takes ``eta`` alone)."""
  kwargs: dict[str, "float | tuple[float, ...]"] = {"eta": float(cfg.get("eta", 1.0))}
  if "table" in cfg:
    kwargs["table"] = tuple(float(v) for v in cfg["table"])
  return kwargs


@dataclasses.dataclass(frozen=True)
class PBM(ItemStatistics, ClickModel):
  r"""The position-based model.

  Simulated with :math:`o_p = (p + 1)^{-\eta}` (config ``eta``, 1.0); fitted with one examination logit
  per rank: :math:`q_i = \sigma(o_{r_i})\,a_i`, independent clicks.

  >>> m = PBM()
  >>> log_q, _ = m.log_probs(jnp.zeros(2), jnp.log(jnp.full(2, 0.5)), jnp.log(jnp.full(2, 0.5)),
  ...                        {"examination": jnp.log(jnp.array([1.0, 0.5]))})
  >>> print(jnp.exp(log_q))
  [0.5  0.25]
  """

  name = "pbm"
  config_keys = {"eta": 1.0}
  parameters = {
    "examination": Parameter(("L",), r"examination :math:`o_r`: the probability of examining rank :math:`r`")
  }
  propensity_table = "examination"

  def simulation_kwargs(self, cfg):
    return {"eta": float(cfg.get("eta", 1.0))}

  def session(self, attraction, *, where=None, positions=None, top_k=None, eta=1.0):
    r"""The PBM's ``Session``: :math:`(1/\mathrm{rank})^\eta`
    examination (:func:`pbm`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      eta: position-bias severity.

    Returns:
      The ``Session``.
    """
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    return _session(self.examination(positions, eta=eta), r, shown, top_k)

  def session_sampler(self, key, attraction, **kwargs):
    return pbm_table(key, attraction, **kwargs)  # ULTRA's eye-tracking table; pass table=... / eta=...

  def statistics_bias_index(self, bias, keys):
    """A record (document, rank) reads the examination of its rank alone (ranks past the table: its last).

    >>> PBM().statistics_bias_index({"examination": jnp.zeros(3)}, jnp.array([[7, 0], [7, 2], [8, 5]])).tolist()
    [0, 2, 2]
    """
    return jnp.clip(jnp.asarray(keys[:, 1], jnp.int32), 0, bias["examination"].shape[0] - 1)

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    log_q = rank_table(log_bias["examination"], ranks, jnp.shape(clicks)) + log_a
    return log_q, log1mexp(log_q, one_branch=True)

  def predict(self, clicks, a, params, *, where):
    q = a * jnp.broadcast_to(params["examination"][: a.shape[-1]], a.shape)
    return q, q

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    q = a * rank_table(params["examination"], None, a.shape)
    return sample_clicks(key, q, where=where, num_sessions=num_sessions)

  @staticmethod
  def examination(positions: Array, *, eta: float = 1.0, top_k: Optional[int] = None) -> Array:
    r"""Position-based examination :math:`(1/\mathrm{rank})^\eta` (CLD Eq. 13).

    .. math::
        o(p) = (p + 1)^{-\eta}\,\mathbb{1}[p < k] \quad (p \text{ 0-based})

    Args:
      positions: ``int[..., L]`` 0-based positions.
      eta: severity of position bias; ``eta = 0`` gives no bias.
      top_k: if set, positions ``>= top_k`` are not shown (examination 0).

    Returns:
      ``float32[..., L]``.

    >>> print(np.asarray(PBM.examination(jnp.arange(5), eta=1.0, top_k=4)).round(4))
    [1.     0.5    0.3333 0.25   0.    ]
    """
    p = jnp.asarray(positions)
    exam = jnp.exp(-eta * jnp.log1p(jnp.maximum(p, 0).astype(jnp.float32)))
    return P.cut_at(exam, p, top_k)


@dataclasses.dataclass(frozen=True)
class PBMTable(ClickModel):
  r"""ULTRA's position-based model, :math:`o_p = v_p^{\eta}` (config ``eta`` 1.0, ``table``); simulation only
  (its fitted form is :class:`PBM`).

  >>> PBMTable().fittable
  False
  """

  name = "pbm_table"
  config_keys = {"eta": 1.0, "table": P.ULTRA_EXAM_TABLE}
  fittable = False
  loss = False

  def simulation_kwargs(self, cfg):
    return table_kwargs(cfg)

  def session(self, attraction, *, where=None, positions=None, top_k=None, eta=1.0, table=P.ULTRA_EXAM_TABLE):
    """ULTRA's PBM's ``Session`` (:func:`pbm_table`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      eta: power of the examination table (position-bias severity).
      table: per-position examination probabilities :math:`v` (positions beyond it reuse its last value).

    Returns:
      The ``Session``.
    """
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    return _session(self.examination(positions, eta=eta, table=table), r, shown, top_k)

  @staticmethod
  def examination(
    positions: Array, *, eta: float = 1.0, table: Sequence[float] = P.ULTRA_EXAM_TABLE, top_k: Optional[int] = None
  ) -> Array:
    r"""Eye-tracking examination table raised to :math:`\eta` (ULTRA's PBM).

    .. math::
        o(p) = v_{\min(p, |v| - 1)}^{\,\eta}, \quad
        v = [0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06]

    Positions beyond the table reuse its last value (ULTRA ``getExamProb``). Used by the identifiability
    (C.2), LBD (4.3) and SIF (6.2) simulators.

    Args:
      positions: ``int[..., L]`` 0-based positions.
      eta: power applied to the table.
      table: per-position examination probabilities.
      top_k: if set, positions ``>= top_k`` get 0.

    Returns:
      ``float32[..., L]``.

    >>> print(np.asarray(PBMTable.examination(jnp.array([0, 9, 15]), eta=2.0)).round(4))
    [0.4624 0.0036 0.0036]
    """
    p = jnp.asarray(positions)
    return P.cut_at(jnp.exp(eta * P.log_table(table, p)), p, top_k)
