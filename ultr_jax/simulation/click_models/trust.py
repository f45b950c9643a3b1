r"""The trust-bias model (Agarwal et al. WWW'19; Vardasbi et al. CIKM'20; ULTRA).

Simulation: ULTRA's table, :math:`\epsilon^+_p = 1 - (p + 2)/100`, :math:`\epsilon^-_p = \epsilon^-_1/(p + 1)`.
Fitted: :math:`P(C) = o_k\,[a_d + \rho_k (1 - a_d)]` with examination and trust logits per rank
(:math:`o_k = \theta_k\epsilon^+_k`, :math:`\rho_k = \epsilon^-_k / \epsilon^+_k`).
"""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax._numerics import log1mexp
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.base import ClickModel, ItemStatistics, Parameter, Session, prepare, rank_table
from ultr_jax.simulation.click_models.pbm import PBMTable, table_kwargs
from ultr_jax.simulation.click_models.samplers import sample_clicks
from ultr_jax.types import Array, PRNGKey

__all__ = ["trust", "Trust"]


def trust(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  eta: float = 1.0,
  epsilon_1_neg: float = 0.65,
  table: Sequence[float] = P.ULTRA_EXAM_TABLE,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Trust-bias model (Agarwal et al. WWW'19; Vardasbi et al. CIKM'20; ULTRA).

  .. math::
      P(C_i = 1) = v_{p_i}^{\,\eta}\,\bigl[\epsilon^+_{p_i} r_i + \epsilon^-_{p_i}(1 - r_i)\bigr],
      \quad \epsilon^+_p = 1 - \tfrac{p + 2}{100},\ \epsilon^-_p = \tfrac{\epsilon^-_1}{p + 1}

  The output also holds ``eps_plus`` and ``eps_minus`` (the affine
  correction's oracle parameters).

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination :math:`r_i`.
    where: ``bool[..., L]`` valid items (default all); masked items never click.
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    eta: power of the examination table (position-bias severity).
    epsilon_1_neg: :math:`\epsilon^-_1`, the click probability of an unattractive item at the first position.
    table: per-position examination probabilities :math:`v` (default ULTRA's; positions beyond it reuse its last
      value).
    top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions and
      ``click_counts`` the counts.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob`` (sessions mode),
    ``click_counts`` (aggregated mode) and ``shown`` (with ``top_k``), ``eps_plus`` and ``eps_minus``.

  >>> out = trust(jax.random.key(0), jnp.array([1.0, 0.0]))
  >>> print(np.asarray(out["click_prob"]).round(4))
  [0.6664 0.1982]
  """
  return Trust().simulate(
    key,
    attraction,
    where=where,
    positions=positions,
    top_k=top_k,
    num_sessions=num_sessions,
    num_impressions=num_impressions,
    eta=eta,
    epsilon_1_neg=epsilon_1_neg,
    table=table,
  )


@dataclasses.dataclass(frozen=True)
class Trust(ItemStatistics, ClickModel):
  r"""The trust-bias model; fitted as :math:`q_i = \sigma(o_{r_i})\,[a_i + \sigma(t_{r_i})(1 - a_i)]`.

  >>> m = Trust()
  >>> q, _ = m.predict(None, jnp.array([1.0, 0.0]), {"examination": jnp.ones(2), "trust": jnp.full(2, 0.5)},
  ...                  where=None)
  >>> print(q)  # an unattractive item is clicked w.p. 1/2 of an attractive one
  [1.  0.5]
  """

  name = "trust"
  config_keys = {"eta": 1.0, "epsilon_1_neg": 0.65, "table": P.ULTRA_EXAM_TABLE}
  parameters = {
    "examination": Parameter(
      ("L",), r"examination :math:`o_r = \theta_r \epsilon^+_r`: the probability of a click on an attractive item"
    ),
    "trust": Parameter(
      ("L",), r"trust :math:`\rho_r = \epsilon^-_r / \epsilon^+_r`: an unattractive item's click rate, relative"
    ),
  }

  def simulation_kwargs(self, cfg):
    return {**table_kwargs(cfg), "epsilon_1_neg": float(cfg.get("epsilon_1_neg", 0.65))}

  def session(
    self, attraction, *, where=None, positions=None, top_k=None, eta=1.0, epsilon_1_neg=0.65, table=P.ULTRA_EXAM_TABLE
  ):
    r"""The trust-bias model's ``Session`` (:func:`trust`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      eta: power of the examination table (position-bias severity).
      epsilon_1_neg: :math:`\epsilon^-_1`, the click probability of an unattractive item at the first position.
      table: per-position examination probabilities :math:`v` (positions beyond it reuse its last value).

    Returns:
      The ``Session``.
    """
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    exam = PBMTable.examination(positions, eta=eta, table=table)
    eps_plus, eps_minus = self.epsilons(positions, epsilon_1_neg=epsilon_1_neg)
    click_prob = exam * (eps_plus * r + eps_minus * (1.0 - r))
    extras = {"eps_plus": jnp.where(shown, eps_plus, 0.0), "eps_minus": jnp.where(shown, eps_minus, 0.0)}
    return Session(exam, click_prob, shown, True, extras=extras, top_k=top_k)

  def log_probs(self, clicks, log_a, log_1ma, log_bias, *, ranks=None, where=None):
    # o_k (a + rho_k (1 - a)): a click on an unattractive item w.p. rho_k of an attractive one
    shape = jnp.shape(clicks)
    log_q = rank_table(log_bias["examination"], ranks, shape) + jnp.logaddexp(
      log_a, rank_table(log_bias["trust"], ranks, shape) + log_1ma
    )
    return log_q, log1mexp(log_q, one_branch=True)

  def predict(self, clicks, a, params, *, where):
    exam, rho = (jnp.broadcast_to(params[k][: a.shape[-1]], a.shape) for k in ("examination", "trust"))
    q = exam * (a + rho * (1.0 - a))
    return q, q

  def sample(self, key, a, params, *, where=None, num_sessions=None):
    exam, rho = (rank_table(params[k], None, a.shape) for k in ("examination", "trust"))
    return sample_clicks(key, exam * (a + rho * (1.0 - a)), where=where, num_sessions=num_sessions)

  @staticmethod
  def epsilons(positions: Array, *, epsilon_1_neg: float = 0.65) -> tuple[Array, Array]:
    r"""Per-position trust-bias click probabilities (Vardasbi et al. CIKM'20, ULTRA).

    .. math::
        \epsilon^+_p = 1 - \frac{p + 2}{100}, \qquad
        \epsilon^-_p = \frac{\epsilon^-_1}{p + 1} \quad (p \text{ 0-based})

    and :math:`P(C = 1) = o(p)\,[\epsilon^+_p\,r(y) + \epsilon^-_p\,(1 - r(y))]` (ULTRA
    ``TrustBiasedModel.getClickProb``; ``epsilon_1_neg = 0.65`` as in ULTRA's ``trust_bias.json``).

    Args:
      positions: ``int[..., L]`` 0-based positions.
      epsilon_1_neg: :math:`\epsilon^-` at the first position.

    Returns:
      ``(eps_plus, eps_minus)``, each ``float32[..., L]``.

    >>> ep, em = Trust.epsilons(jnp.array([0, 1]))
    >>> print(ep, em)
    [0.98 0.97] [0.65  0.325]
    """
    p = jnp.maximum(jnp.asarray(positions), 0).astype(jnp.float32)
    return 1.0 - (p + 2.0) / 100.0, epsilon_1_neg / (p + 1.0)
