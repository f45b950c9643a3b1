r"""The cascade model (Craswell, Zoeter, Taylor & Ramsey, WSDM'08): the user stops at the first click."""

import dataclasses
from typing import Optional

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np

from ultr_jax.simulation.click_models.chain import ChainModel
from ultr_jax.simulation.click_models.dcm import dcm, dcm_session
from ultr_jax.types import Array, PRNGKey

__all__ = ["cascade", "Cascade"]


def cascade(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Cascade model (Craswell et al. WSDM'08; ULTRA ``cascade_model``): stop at the first click.

  .. math::
      P(E_i = 1) = \prod_{j:\,p_j < p_i} (1 - r_j), \qquad P(C_i = 1) = P(E_i = 1)\, r_i

  :func:`dcm` with :math:`\lambda = 0`.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination :math:`r_i`.
    where: ``bool[..., L]`` valid items (default all); masked items never click.
    positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
    top_k: display cut-off (``shown`` is returned); None: every valid item is shown.
    num_sessions: if set, a leading axis of that many independent sessions.
    num_impressions: if set, aggregated mode: ``clicks`` are CTRs over that many impressions of each item's
      marginal click probability.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob`` (sessions mode),
    ``click_counts`` (aggregated mode) and ``shown`` (with ``top_k``); see
    :mod:`ultr_jax.simulation.click_models`.

  >>> out = cascade(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]))
  >>> print(out["click_prob"])
  [0.5   0.25  0.125]
  """
  return dcm(
    key,
    attraction,
    where=where,
    positions=positions,
    continuation=0.0,
    top_k=top_k,
    num_sessions=num_sessions,
    num_impressions=num_impressions,
  )


@dataclasses.dataclass(frozen=True)
class Cascade(ChainModel):
  r"""The cascade model: :math:`c^0 = 1`, :math:`c^1 = 0`; fitted: the attraction alone. It explains at most
  one click per session, so it is no click-model loss and refuses a log with more.

  >>> Cascade().check_sessions(np.array([[1.0, 1.0]]), np.ones((1, 2), bool))
  Traceback (most recent call last):
  ...
  ValueError: cascade: session [0] has 2 clicks; the cascade model explains at most one click per session (fit 'dcm' instead)
  """

  name = "cascade"
  loss = False

  def session(self, attraction, *, where=None, positions=None, top_k=None):
    return dcm_session(attraction, where=where, positions=positions, top_k=top_k, continuation=0.0)

  def continuations(self, attraction, **_):
    a = jnp.asarray(attraction, jnp.float32)
    full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), a.shape)
    return full(1.0), full(0.0)

  def fitted_continuations(self, a, params):
    return self.continuations(a)

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    return jnp.zeros_like(log_a), jnp.full_like(log_a, -jnp.inf)

  def check_sessions(self, clicks, where) -> None:
    """Raises ValueError naming the first session with more than one valid click.

    Args:
      clicks: ``[B, L]`` 0/1 clicks.
      where: ``bool[B, L]`` valid items.

    Raises:
      ValueError: naming the session and its number of clicks.
    """
    many = np.sum(np.where(where, clicks, 0.0), axis=-1) > 1
    if many.any():
      idx = tuple(int(i) for i in np.argwhere(many)[0])
      raise ValueError(
        f"cascade: session {list(idx)} has {int(np.sum(np.where(where, clicks, 0)[idx]))} clicks; "
        "the cascade model explains at most one click per session (fit 'dcm' instead)"
      )
