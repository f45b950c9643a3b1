r"""The user browsing model (Dupret & Piwowarski, SIGIR'08): examination by rank and last-click distance."""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation import likelihood as LL
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import (
  ClickModel,
  display_order,
  full_mask,
  item_log_likelihood,
  log1mexp,
  prepare,
)
from ultr_jax.simulation.click_models.statistics import ItemCounter, item_statistics
from ultr_jax.simulation.click_models.chain import sequential_session
from ultr_jax.simulation.click_models.pbm import table_kwargs
from ultr_jax.simulation.click_models.samplers import sample_ubm_clicks
from ultr_jax.types import Array, PRNGKey

__all__ = ["ubm", "UBM"]


def ubm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  gamma: Optional[Array] = None,
  eta: float = 1.0,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""User browsing model (Dupret & Piwowarski SIGIR'08): examination by rank and last-click distance.

  .. math::
      P(E_i = 1 \mid r'_i) = \gamma_{r_i,\, r_i - r'_i}, \qquad C_i = E_i A_i,\quad
      A_i \sim \mathrm{Bern}(a_i)

  with :math:`r'_i` the rank of the last click above item ``i`` (0 if none).
  ``examination`` is the exact marginal over click histories
  (:func:`~ultr_jax.simulation.ubm_examination`), the oracle propensity an
  IPS learner would use; ``click_prob`` is ``examination * attraction``.
  Items are examined in order of ``positions``; items beyond ``top_k`` or
  masked are skipped (they break no distance: the rank is the position).

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    gamma: ``[K, K + 1]`` examination table (rank, last-click state);
      default :func:`~ultr_jax.simulation.ubm_gamma` of ``table`` and
      ``eta`` over ``L`` ranks (the PBM table before any click).
    eta, table: the default table's power and per-distance values.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = ubm(jax.random.key(0), jnp.array([0.0, 0.0, 0.0]))  # no clicks: the PBM table
  >>> print(out["examination"])
  [0.68 0.61 0.48]
  """
  session = UBM().session(attraction, where=where, positions=positions, top_k=top_k, gamma=gamma, eta=eta, table=table)
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class UBM(ClickModel):
  r"""The UBM (config ``gamma``, a ``[K, K + 1]`` table, or ``eta`` and ``table``; fitted: a ``gamma[L, L + 1]``
  logit per rank and last-click state, :math:`q_i = \sigma(\gamma_{r_i, l_i})\,a_i`).

  >>> UBM().bias_shapes(2)
  {'gamma': (2, 3)}
  """

  name = "ubm"
  config_keys = {"eta": 1.0, "table": P.ULTRA_EXAM_TABLE, "gamma": None}
  propensity_table = "gamma"

  def simulation_kwargs(self, cfg):
    kwargs = table_kwargs(cfg)
    if "gamma" in cfg:
      gamma = np.asarray(cfg["gamma"], np.float32)
      if gamma.ndim != 2 or gamma.shape[1] != gamma.shape[0] + 1 or np.any((gamma < 0) | (gamma > 1)):
        raise ValueError(f"click_model.gamma: expected a [K, K + 1] table of probabilities, got shape {gamma.shape}")
      kwargs["gamma"] = gamma
    return kwargs

  def session(
    self, attraction, *, where=None, positions=None, top_k=None, gamma=None, eta=1.0, table=P.ULTRA_EXAM_TABLE
  ):
    given_positions = positions is not None
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    g = jnp.asarray(P.ubm_gamma(r.shape[-1], eta=eta, table=table) if gamma is None else gamma, jnp.float32)
    if given_positions:
      order, inverse = display_order(positions, shown)
      take = lambda x, idx: jnp.take_along_axis(x, idx, axis=-1)
      r_s, shown_s, ranks_s = take(r, order), take(shown, order), take(positions, order)
    else:
      r_s, shown_s, ranks_s, order, inverse = r, shown, positions, None, None
    exam_s = P.ubm_examination(r_s, g, ranks=ranks_s, where=shown_s)
    sample = lambda key, num_sessions: sample_ubm_clicks(
      key, r_s, g, ranks=ranks_s, where=shown_s, num_sessions=num_sessions
    )
    conditional = lambda c: LL.ubm_conditional_click_prob(c, r_s, g, ranks=ranks_s, where=shown_s)
    return sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k)

  def bias_shapes(self, num_ranks):
    return {"gamma": (num_ranks, num_ranks + 1)}

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    c = jnp.asarray(clicks, jnp.float32)
    log_a = jnp.broadcast_to(jnp.asarray(log_a, jnp.float32), c.shape)
    return LL.ubm_log_probs(c, log_a, log_bias["gamma"], ranks=ranks, where=full_mask(c, where))

  statistics_kind = "ubm_items"

  def sufficient_statistics(self, doc_ids, clicks, where=None):
    """Impressions and clicks per (document, rank, last-click state)."""
    return item_statistics(doc_ids, clicks, where, last_click_state=True)

  def statistics_accumulator(self):
    return ItemCounter(last_click_state=True)

  def statistics_log_likelihood(self, logits, keys, counts):
    log_a, _, log_bias = self._gathered_logs(logits, keys[:, 0])
    k, s = log_bias["gamma"].shape
    log_q = log_bias["gamma"][jnp.clip(keys[:, 1], 0, k - 1), jnp.clip(keys[:, 2], 0, s - 1)] + log_a
    return item_log_likelihood(log_q, log1mexp(log_q), counts)

  def predict(self, clicks, a, params, *, where):
    cond = LL.ubm_conditional_click_prob(clicks, a, params["gamma"], where=where)
    marginal = P.ubm_examination(a, params["gamma"], where=where) * a
    return cond, marginal

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    return sample_ubm_clicks(key, a, params["gamma"], where=where, num_sessions=num_sessions)
