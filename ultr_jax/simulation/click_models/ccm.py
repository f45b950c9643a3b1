r"""The click chain model (Guo, Liu, Kannan, Minka, Taylor, Wang & Faloutsos, WWW'09)."""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation.click_models.base import Parameter, prepare
from ultr_jax.simulation.click_models.chain import ChainModel, chain_session
from ultr_jax.types import Array, PRNGKey

__all__ = ["ccm", "CCM"]


def ccm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  alpha: Sequence[float] = (0.9, 0.8, 0.2),
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Click chain model (Guo, Liu, Kannan, Minka, Taylor, Wang & Faloutsos, WWW'09).

  Without a click the user goes on with probability :math:`\alpha_1`; after
  a click on an item of relevance :math:`r_i`, with probability
  :math:`\alpha_2 (1 - r_i) + \alpha_3 r_i` (a relevant click ends more
  sessions):

  .. math::
      P(E_{i+1} = 1 \mid E_i = 1) = (1 - r_i)\,\alpha_1
        + r_i\,\bigl(\alpha_2 (1 - r_i) + \alpha_3 r_i\bigr), \qquad C_i = E_i A_i

  with the attraction as :math:`r_i`
  (:meth:`ChainModel.examination`). Items are examined in
  order of ``positions``; items beyond ``top_k`` or masked are skipped.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    alpha: :math:`(\alpha_1, \alpha_2, \alpha_3)`, each in ``[0, 1]``.
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode (marginal click probabilities).

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = ccm(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), alpha=(0.9, 0.8, 0.2))
  >>> print([round(float(v), 6) for v in out["examination"]])  # 0.5 * 0.9 + 0.5 * 0.5 = 0.7 per step
  [1.0, 0.7, 0.49]
  """
  session = CCM().session(attraction, where=where, positions=positions, top_k=top_k, alpha=alpha)
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class CCM(ChainModel):
  r"""The CCM: :math:`c^0 = \alpha_1`, :math:`c^1 = \alpha_2 (1 - a_i) + \alpha_3 a_i` (config ``alpha``,
  (0.9, 0.8, 0.2); fitted: three logits).

  >>> c0, c1 = CCM().continuations(jnp.array([0.0, 1.0]), alpha=(0.9, 0.8, 0.2))
  >>> print(c0, c1)
  [0.9 0.9] [0.8 0.2]
  """

  name = "ccm"
  config_keys = {"alpha": (0.9, 0.8, 0.2)}
  parameters = {
    "alpha": Parameter(
      (3,), r"continuations: :math:`\alpha_1` without a click, :math:`\alpha_2 (1 - a) + \alpha_3 a` after one"
    ),
  }

  def simulation_kwargs(self, cfg):
    """The CCM's :meth:`session` keyword arguments: ``alpha`` (default (0.9, 0.8, 0.2)).

    Args:
      cfg: the (checked) simulation config, a mapping (None values: not set, the default applies).

    Returns:
      ``{"alpha": (alpha_1, alpha_2, alpha_3)}`` as floats.

    Raises:
      ValueError: unless ``alpha`` is three probabilities.
    """
    alpha = tuple(float(v) for v in cfg.get("alpha", (0.9, 0.8, 0.2)))
    if len(alpha) != 3 or any(not 0.0 <= v <= 1.0 for v in alpha):
      raise ValueError(f"click_model.alpha: expected three probabilities (alpha_1, alpha_2, alpha_3), got {alpha}")
    return {"alpha": alpha}

  def session(self, attraction, *, where=None, positions=None, top_k=None, alpha=(0.9, 0.8, 0.2)):
    r"""The CCM's ``Session`` (:func:`ccm`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      alpha: :math:`(\alpha_1, \alpha_2, \alpha_3)`, three floats.

    Returns:
      The ``Session``.
    """
    given_positions = positions is not None
    r, where, positions, shown = prepare(attraction, where, positions, top_k)
    a1, a2, a3 = (float(v) for v in alpha)
    return chain_session(r, shown, positions, given_positions, a1, a2 * (1.0 - r) + a3 * r, top_k)

  def continuations(self, attraction, *, alpha=(0.9, 0.8, 0.2), **_):
    r"""``(c0, c1) = (alpha_1, alpha_2 (1 - a) + alpha_3 a)`` broadcast to the attraction's shape.

    Args:
      attraction: ``[..., L]`` click probability given examination :math:`a`.
      alpha: :math:`(\alpha_1, \alpha_2, \alpha_3)`: an array ``[..., 3]`` whose leading axes broadcast with
        the attraction's.

    Returns:
      ``(c0, c1)``, each ``float32[..., L]``.

    Raises:
      ValueError: if ``alpha``'s last axis does not have 3 entries.
    """
    a = jnp.asarray(attraction, jnp.float32)
    full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), a.shape)
    alpha = jnp.asarray(alpha, jnp.float32)
    if alpha.shape[-1:] != (3,):
      raise ValueError(f"ccm: alpha must have 3 entries (alpha_1..3), got shape {alpha.shape}")
    a1, a2, a3 = (alpha[..., i, None] for i in range(3))
    return full(a1), full(a2 * (1.0 - a) + a3 * a)

  def fitted_continuations(self, a, params):
    return self.continuations(a, alpha=params["alpha"])

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    log_alpha = jnp.asarray(log_bias["alpha"], jnp.float32)
    log_c0 = jnp.broadcast_to(log_alpha[..., 0, None], log_a.shape)
    log_c1 = jnp.logaddexp(log_alpha[..., 1, None] + log_1ma, log_alpha[..., 2, None] + log_a)
    return log_c0, log_c1
