r"""The simplified DBN (Chapelle & Zhang, WWW'09, perseverance :math:`\gamma = 1`; Chuklin, Markov & de Rijke,
*Click Models for Web Search*, 2015, Sections 3.7 and 4.2).

The user scans the list until satisfied: an examined item is clicked when attractive (:math:`a_d`), a click
satisfies with probability :math:`\sigma_d` (per document), and an unsatisfied user always goes on:

.. math::
    P(E_1 = 1) = 1, \qquad P(E_{i+1} = 1 \mid E_i = 1, C_i) = 1 - C_i\,\sigma_{d_i}, \qquad C_i = E_i A_i,

a click chain with :math:`c^0 = 1`, :math:`c^1 = 1 - \sigma`. Every item above the last click was examined,
which is why the book estimates it by counting; here it is fitted by the same likelihood as every model.
"""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation.click_models.base import Parameter, per_item, prepare
from ultr_jax.simulation.click_models.chain import ChainModel, chain_session, check_probabilities
from ultr_jax.types import Array, PRNGKey

__all__ = ["sdbn", "SDBN"]


def sdbn(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  satisfaction: Optional[Array | float | Sequence[float]] = None,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Simplified DBN sessions: :math:`P(E_{i+1} = 1 \mid E_i = 1) = 1 - a_i \sigma_i` (the DBN at :math:`\gamma = 1`).

  .. math::
      P(E_i = 1) = \prod_{j:\,p_j < p_i} (1 - a_j \sigma_j), \qquad P(C_i = 1) = P(E_i = 1)\, a_i

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]`` valid items (default all); masked items never click.
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions of each item's
      marginal click probability.
    satisfaction: :math:`\sigma`: None (the attraction), a scalar, ``[..., L]`` per item, or a per-position
      sequence.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob`` (sessions only) and
    ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = sdbn(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), satisfaction=0.5)
  >>> print(out["examination"])  # 1 - 0.5 * 0.5 = 0.75 per step
  [1.     0.75   0.5625]
  """
  session = SDBN().session(attraction, where=where, positions=positions, top_k=top_k, satisfaction=satisfaction)
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class SDBN(ChainModel):
  r"""The SDBN: :math:`c^0 = 1`, :math:`c^1 = 1 - \sigma_i` (config ``satisfaction``, default the attraction;
  fitted: an attraction and a satisfaction logit per document, no bias parameters).

  >>> c0, c1 = SDBN().continuations(jnp.array([0.5, 1.0]), satisfaction=jnp.array([0.2, 1.0]))
  >>> print(c0, c1)
  [1. 1.] [0.8 0. ]
  """

  name = "sdbn"
  config_keys = {"satisfaction": None}
  parameters = {
    "satisfaction": Parameter(("D",), r"satisfaction :math:`\sigma_d`: the probability that a click satisfies"),
  }

  def simulation_kwargs(self, cfg):
    return {"satisfaction": check_probabilities("satisfaction", cfg["satisfaction"])} if "satisfaction" in cfg else {}

  def session(self, attraction, *, where=None, positions=None, top_k=None, satisfaction=None):
    r"""The SDBN's ``Session`` (:func:`sdbn`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      satisfaction: :math:`\sigma`: None (the attraction), a scalar, a per-position sequence or ``[..., L]``.

    Returns:
      The ``Session``.
    """
    given_positions = positions is not None
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    sigma = r if satisfaction is None else per_item(satisfaction, positions, r.shape, "sdbn.satisfaction")
    return chain_session(r, shown, positions, given_positions, 1.0, 1.0 - sigma, top_k)

  def continuations(self, attraction, *, satisfaction=None, **_):
    r"""``(c0, c1) = (1, 1 - sigma)`` broadcast to the attraction's shape.

    Args:
      attraction: ``[..., L]`` click probability given examination.
      satisfaction: :math:`\sigma`, broadcasting to ``[..., L]`` (None: the attraction).

    Returns:
      ``(c0, c1)``, each ``float32[..., L]``.
    """
    a = jnp.asarray(attraction, jnp.float32)
    sigma = a if satisfaction is None else jnp.broadcast_to(jnp.asarray(satisfaction, jnp.float32), a.shape)
    return jnp.ones_like(a), 1.0 - sigma

  def fitted_continuations(self, a, params):
    return self.continuations(a, satisfaction=params["satisfaction"])

  def log_bias(self, bias_logits, items=None):
    super().log_bias(bias_logits, items)  # checks the satisfaction is given
    assert items is not None
    return {"no_satisfaction": items["satisfaction"][1]}

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    return jnp.zeros_like(log_a), jnp.broadcast_to(jnp.asarray(log_bias["no_satisfaction"], jnp.float32), log_a.shape)
