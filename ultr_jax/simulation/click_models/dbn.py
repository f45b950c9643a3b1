r"""The dynamic Bayesian network click model (Chapelle & Zhang, WWW'09)."""

import dataclasses
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation.click_models.base import Parameter, per_item, prepare
from ultr_jax.simulation.click_models.chain import ChainModel, chain_session, check_probabilities
from ultr_jax.types import Array, PRNGKey

__all__ = ["dbn", "DBN"]


def dbn(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  perseverance: float = 0.9,
  satisfaction: Optional[Array | float | Sequence[float]] = None,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Dynamic Bayesian network click model (Chapelle & Zhang, WWW'09).

  An examined item is clicked when attractive (:math:`a_i`); a click
  satisfies the user with probability :math:`\sigma_i`, who then leaves;
  an unsatisfied user goes on with probability :math:`\gamma` (the
  perseverance):

  .. math::
      P(E_1 = 1) = 1, \qquad
      P(E_{i+1} = 1 \mid E_i = 1) = \gamma\,(1 - a_i \sigma_i), \qquad C_i = E_i A_i

  (:meth:`ChainModel.examination` with :math:`c^0 = \gamma`,
  :math:`c^1 = \gamma (1 - \sigma_i)`). By default the satisfaction is the
  attraction (a relevant document both attracts and satisfies, as in the
  usual DBN simulations); with :math:`\gamma = 1, \sigma = 1` it is the
  cascade model. Items are examined in order of ``positions``; items beyond
  ``top_k`` or masked are skipped.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    perseverance: :math:`\gamma`, in ``[0, 1]``.
    satisfaction: :math:`\sigma`: None (the attraction), a scalar,
      ``[..., L]`` per item, or a per-position sequence.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = dbn(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), perseverance=0.9)
  >>> print([round(float(v), 6) for v in out["examination"]])  # 0.9 * (1 - 0.25) = 0.675 per step
  [1.0, 0.675, 0.455625]
  """
  session = DBN().session(
    attraction, where=where, positions=positions, top_k=top_k, perseverance=perseverance, satisfaction=satisfaction
  )
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class DBN(ChainModel):
  r"""The DBN: :math:`c^0 = \gamma`, :math:`c^1 = \gamma (1 - \sigma_i)` (config ``perseverance`` 0.9,
  ``satisfaction``: default the attraction; fitted: a satisfaction logit per document and one perseverance
  logit).

  >>> c0, c1 = DBN().continuations(jnp.array([0.5, 1.0]), perseverance=0.9)
  >>> print(c0, c1)
  [0.9 0.9] [0.45 0.  ]
  """

  name = "dbn"
  config_keys = {"perseverance": 0.9, "satisfaction": None}
  parameters = {
    "perseverance": Parameter((), r"perseverance :math:`\gamma`: the probability that an unsatisfied user goes on"),
    "satisfaction": Parameter(("D",), r"satisfaction :math:`\sigma_d`: the probability that a click satisfies"),
  }

  def simulation_kwargs(self, cfg):
    """The DBN's :meth:`session` keyword arguments: ``perseverance`` (0.9) and ``satisfaction`` when set.

    Args:
      cfg: the (checked) simulation config, a mapping (None values: not set, the default applies).

    Returns:
      dict with ``perseverance`` (a float) and, when set, ``satisfaction``.

    Raises:
      ValueError: if ``perseverance`` or ``satisfaction`` is not a probability (or a sequence of them).
    """
    gamma = float(cfg.get("perseverance", 0.9))
    if not 0.0 <= gamma <= 1.0:
      raise ValueError(f"click_model.perseverance: expected a probability, got {gamma}")
    kwargs: dict[str, "float | tuple[float, ...]"] = {"perseverance": gamma}
    if "satisfaction" in cfg:
      kwargs["satisfaction"] = check_probabilities("satisfaction", cfg["satisfaction"])
    return kwargs

  def session(self, attraction, *, where=None, positions=None, top_k=None, perseverance=0.9, satisfaction=None):
    r"""The DBN's ``Session`` (:func:`dbn`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      perseverance: :math:`\gamma`, a scalar probability.
      satisfaction: :math:`\sigma`: None (the attraction), a scalar, a per-position sequence or ``[..., L]``.

    Returns:
      The ``Session``.
    """
    given_positions = positions is not None
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    sigma = r if satisfaction is None else per_item(satisfaction, positions, r.shape, "dbn.satisfaction")
    gamma = float(perseverance)
    return chain_session(r, shown, positions, given_positions, gamma, gamma * (1.0 - sigma), top_k)

  def continuations(self, attraction, *, perseverance=0.9, satisfaction=None, **_):
    r"""``(c0, c1) = (gamma, gamma * (1 - sigma))`` broadcast to the attraction's shape.

    Args:
      attraction: ``[..., L]`` click probability given examination.
      perseverance: :math:`\gamma`, a scalar or an array broadcasting to ``[..., L]``.
      satisfaction: :math:`\sigma`, broadcasting to ``[..., L]`` (None: the attraction).

    Returns:
      ``(c0, c1)``, each ``float32[..., L]``.
    """
    a = jnp.asarray(attraction, jnp.float32)
    full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), a.shape)
    sigma = a if satisfaction is None else full(satisfaction)
    gamma = full(perseverance)
    return gamma, gamma * (1.0 - sigma)

  def fitted_continuations(self, a, params):
    return self.continuations(a, perseverance=params["perseverance"], satisfaction=params["satisfaction"])

  def log_bias(self, bias_logits, items=None):
    super().log_bias({}, items)  # checks the satisfaction is given
    assert items is not None
    return {
      "perseverance": jax.nn.log_sigmoid(jnp.asarray(bias_logits["perseverance"], jnp.float32)),
      "no_satisfaction": items["satisfaction"][1],
    }

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    log_gamma = jnp.asarray(log_bias["perseverance"], jnp.float32)
    return jnp.broadcast_to(log_gamma, log_a.shape), log_gamma + jnp.asarray(log_bias["no_satisfaction"], jnp.float32)
