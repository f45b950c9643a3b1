r"""The dependent click model (Guo, Liu & Wang, WSDM'09): after a click the user goes on w.p. :math:`\lambda_r`."""

import dataclasses
from typing import Optional, Sequence

import jax  # noqa: F401 (the doctests')
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.simulation.click_models.base import Parameter, display_order, per_item, prepare
from ultr_jax.simulation.click_models.chain import ChainModel, exclusive_survival, sequential_session
from ultr_jax.types import Array, PRNGKey

__all__ = ["dcm", "DCM", "dcm_session"]


def dcm_session(
  attraction, *, where=None, positions=None, top_k=None, continuation: "Array | float | Sequence[float]" = 0.5
):
  """The DCM's ``Session`` (see :func:`dcm`)."""
  given_positions = positions is not None
  r, where, positions, shown = prepare(attraction, where, positions, top_k)
  lam = per_item(continuation, positions, r.shape, "dcm.continuation")
  if given_positions:
    order, inverse = display_order(positions, shown)
    take = lambda x, idx: jnp.take_along_axis(x, idx, axis=-1)
    r_s, shown_s = take(r, order), take(shown, order)
    lam_s = lam if isinstance(lam, float) else take(lam, order)
  else:
    r_s, shown_s, lam_s, order, inverse = r, shown, lam, None, None
  exam_s = _examination(r_s, continuation=lam_s, where=shown_s)
  sample = lambda key, num_sessions: ChainModel.sample_clicks(
    key, r_s, continue_no_click=1.0, continue_click=lam_s, where=shown_s, num_sessions=num_sessions
  )
  conditional = lambda c: ChainModel.conditional_click_prob(
    c, r_s, continue_no_click=1.0, continue_click=lam_s, where=shown_s
  )
  return sequential_session(exam_s, r, shown, sample, conditional, order, inverse, top_k)


def _examination(attraction: Array, *, continuation: Array | float, where: Array) -> Array:
  r"""Marginal examination of the DCM (the cascade at :math:`\lambda = 0`), items in displayed order.

  .. math::
      P(E_i = 1) = \prod_{j < i} \bigl(1 - r_j\,(1 - \lambda_j)\bigr)

  in log space with an exclusive cumulative sum (:meth:`ChainModel.examination` with :math:`c^0 = 1`,
  :math:`c^1 = \lambda`, written as a stop probability). Masked items neither stop the user nor get examined.
  """
  r = jnp.asarray(attraction, jnp.float32)
  stop = jnp.where(where, r * (1.0 - jnp.asarray(continuation, jnp.float32)), 0.0)
  log_keep = jnp.log1p(-jnp.minimum(stop, 1.0))  # may be -inf where stop == 1
  return exclusive_survival(log_keep, where, None)


def dcm(
  key: PRNGKey,
  attraction: Array,
  *,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
  continuation: Array | float | Sequence[float] = 0.5,
  top_k: Optional[int] = None,
  num_sessions: Optional[int] = None,
  num_impressions: Optional[int] = None,
) -> dict:
  r"""Dependent click model (Guo et al. WSDM'09); the cascade model at :math:`\lambda=0`.

  .. math::
      P(E_i = 1) = \prod_{j:\,p_j < p_i} \bigl(1 - r_j (1 - \lambda_{p_j})\bigr), \qquad
      P(C_i = 1) = P(E_i = 1)\, r_i

  Items are examined in order of ``positions`` (array order by default);
  items not shown (beyond ``top_k``) or masked are skipped. Sessions are
  sampled jointly (:meth:`ChainModel.sample_clicks`); in aggregated mode
  (``num_impressions``) each record's CTR is drawn from its marginal click
  probability, as for the other models.

  Args:
    key: PRNG key.
    attraction: ``[..., L]`` click probability given examination.
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default ``arange(L)``).
    continuation: :math:`\lambda`, a scalar, ``[..., L]`` per item, or a
      per-position sequence (positions beyond reuse the last value).
    top_k: display cut-off.
    num_sessions: leading sessions axis.
    num_impressions: aggregated CTR mode.

  Returns:
    dict with ``clicks``, ``examination``, ``click_prob``, ``conditional_click_prob``
    (sessions only) and ``shown`` (with ``top_k``); see :mod:`ultr_jax.simulation.click_models`.

  >>> out = dcm(jax.random.key(0), jnp.array([0.5, 0.5, 0.5]), continuation=0.5)
  >>> print(out["examination"])
  [1.     0.75   0.5625]
  """
  session = dcm_session(attraction, where=where, positions=positions, top_k=top_k, continuation=continuation)
  return session.output(key, num_sessions, num_impressions)


@dataclasses.dataclass(frozen=True)
class DCM(ChainModel):
  r"""The DCM: :math:`c^0 = 1`, :math:`c^1 = \lambda` (config ``continuation``, 0.5: a scalar or per position;
  fitted: one continuation logit per rank).

  >>> c0, c1 = DCM().continuations(jnp.full(2, 0.5), continuation=0.3)
  >>> print(c0, c1)
  [1. 1.] [0.3 0.3]
  """

  name = "dcm"
  config_keys = {"continuation": 0.5}
  parameters = {
    "continuation": Parameter(
      ("L",), r"continuation :math:`\lambda_r`: the probability of going on after a click at rank :math:`r`"
    ),
  }

  def simulation_kwargs(self, cfg):
    lam = cfg.get("continuation", 0.5)
    return {"continuation": tuple(float(v) for v in lam) if isinstance(lam, (list, tuple)) else float(lam)}

  def session(self, attraction, *, where=None, positions=None, top_k=None, continuation=0.5):
    r"""The DCM's ``Session`` (:func:`dcm`).

    Args:
      attraction: ``[..., L]`` click probability given examination.
      where: ``bool[..., L]`` valid items (default all).
      positions: ``int[..., L]`` 0-based display positions (default ``arange(L)``).
      top_k: display cut-off (None: every valid item is shown).
      continuation: :math:`\lambda`, a scalar or a per-position sequence (its last value reused beyond it).

    Returns:
      The ``Session``.
    """
    return dcm_session(attraction, where=where, positions=positions, top_k=top_k, continuation=continuation)

  def continuations(self, attraction, *, continuation=0.5, **_):
    r"""``(c0, c1) = (1, continuation)`` broadcast to the attraction's shape.

    Args:
      attraction: ``[..., L]`` click probability given examination (its shape).
      continuation: :math:`\lambda`, a scalar or an array broadcasting to ``[..., L]``.

    Returns:
      ``(c0, c1)``, each ``float32[..., L]``.
    """
    a = jnp.asarray(attraction, jnp.float32)
    full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), a.shape)
    return full(1.0), full(continuation)

  def fitted_continuations(self, a, params):
    return self.continuations(a, continuation=params["continuation"][: a.shape[-1]])

  def log_continuations(self, log_a, log_1ma, log_bias, ranks, table):
    return jnp.zeros_like(log_a), table("continuation")
