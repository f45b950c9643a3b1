r"""What the estimators share: the :class:`Estimate` they return, the per-position rewards of a log, and the
(self-normalised, clipped) importance-weighted mean."""

import numbers
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from ultr_jax.types import Array

__all__ = ["Estimate"]


class Estimate(NamedTuple):
  r"""An estimate of a ranker's expected reward per session.

  Attributes:
    value: ``[]`` the estimate :math:`\hat V`.
    terms: ``[B]`` per-session terms whose (session-weighted) mean over the valid sessions is ``value``: the
      session's contribution for a plain estimator, its delta-method linearisation
      :math:`\sum_l [\rho_{il}(x_{il} - \hat V_l) / \bar\rho_l + \hat V_l]` over its positions for a self-normalised one (0 for an
      all-masked session). Normal intervals and paired differences use them.
    num_clipped: ``int32[]`` importance weights above the clip (set to it), over the valid sessions.
    num_sessions: ``[]`` the (weighted) number of valid sessions.
    session_weights: ``[B]`` each session's weight in the mean (1 for a valid session, 0 for an all-masked one;
      the bootstrap's counts when given).
    ratios: ``[B, P, 3]`` or None. None: ``value`` is the session-weighted mean of ``terms``. Otherwise (a
      self-normalised estimator) each session's numerator, denominator and share of each of ``P`` ratio
      components, with ``value`` :math:`= \sum_p \frac{\sum_i n_i u_{ip}}{\sum_i n_i v_{ip}}
      \cdot \frac{\sum_i n_i s_{ip}}{\sum_i n_i}` for the session weights :math:`n_i`
      (a ratio with a zero denominator counts 0), so a bootstrap reweights them jointly without re-running the
      estimator.
    effective_sample_size: ``[]`` Kish's effective number of sessions of the importance weights,
      :math:`(\sum_i n_i \bar\rho_i)^2 / \sum_i n_i \bar\rho_i^2` with :math:`\bar\rho_i` session :math:`i`'s mean
      weight over its positions (0 when every weight is 0; the number of sessions for the direct method). Far
      below ``num_sessions``: a few sessions carry the estimate, whatever its interval says.
    num_nonzero_weight: ``[]`` the (weighted) number of sessions with a non-zero weight at some position: 0
      means no logged session supports the target (the estimate is not identified from the log, and
      :func:`~ultr_jax.evaluation.normal_interval` refuses it). None for an :class:`Estimate` built by hand.
  """

  value: Array
  terms: Array
  num_clipped: Array
  num_sessions: Array
  session_weights: Array
  ratios: Optional[Array] = None
  effective_sample_size: Optional[Array] = None
  num_nonzero_weight: Optional[Array] = None


def check_options(*, temperature: Any = 0.0, top_k: Any = None, what: str = "estimator") -> None:
  r"""Refuses a target ``temperature`` outside :math:`[0, \infty]` (a negative one would rank by reversed scores; inf
  is the uniform policy) and a ``top_k`` that is not None or an integer >= 1 (0 would show nothing and estimate
  0). Values only known under ``jit`` are not checked.

  >>> check_options(temperature=-1.0)
  Traceback (most recent call last):
  ValueError: estimator: temperature=-1.0 is out of range; expected a number >= 0 (0: deterministic, inf: uniform)
  """
  try:
    t = float(temperature)
  except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
    t = None
  if t is not None and not t >= 0:  # NaN too
    raise ValueError(
      f"{what}: temperature={temperature!r} is out of range; expected a number >= 0 (0: deterministic, inf: uniform)"
    )
  if top_k is not None and not (
    isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool) and int(top_k) >= 1
  ):
    raise ValueError(f"{what}: top_k={top_k!r} is out of range; expected None (every position) or an integer >= 1")


def weight_support(rho: Array, active: Array, mass: Array) -> tuple[Array, Array]:
  r"""``(effective_sample_size, num_nonzero_weight)`` of importance weights ``rho [B, L]`` over the ``active``
  positions of sessions counted ``mass [B]`` times (:attr:`Estimate.effective_sample_size`)."""
  act = jnp.asarray(active, bool)
  r = jnp.where(act, jnp.asarray(rho, jnp.float32), 0.0)
  mean = safe_div(jnp.sum(r, axis=-1), jnp.sum(act, axis=-1).astype(jnp.float32))
  ess = safe_div(jnp.sum(mass * mean) ** 2, jnp.sum(mass * mean**2))
  nonzero = jnp.sum(jnp.where(jnp.any(act & (r != 0), axis=-1), mass, 0.0))
  return ess, nonzero


def ratio_parts(num: Array, den: Array, share: Array) -> Array:
  """``[..., P, 3]``: the (numerator, denominator, share) of each ratio component (:attr:`Estimate.ratios`)."""
  num, den, share = (jnp.asarray(x, jnp.float32) for x in (num, den, share))
  return jnp.stack(jnp.broadcast_arrays(num, den, share), axis=-1)


def plain_parts(terms: Array, mass: Array) -> Array:
  r"""A plain mean's terms ``[B]`` as one ratio component ``[B, 1, 3]``: :math:`\sum_i n_i t_i / \sum_i n_i`."""
  valid = (mass > 0).astype(jnp.float32)
  return ratio_parts(terms * valid, valid, valid)[..., None, :]


def ratios_value(sums: Array, total: Array) -> Array:
  r""":math:`\sum_p (U_p / V_p)(S_p / N)` from the session-weighted sums ``[..., P, 3]`` of
  :attr:`Estimate.ratios` and the sessions' total weight :math:`N` ``[...]``."""
  return jnp.sum(safe_div(sums[..., 0], sums[..., 1]) * safe_div(sums[..., 2], total[..., None]), axis=-1)


def mask_of(x: Array, where: Optional[Array]) -> Array:
  return jnp.ones(jnp.shape(x), bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), jnp.shape(x))


def shown_mask(where: Array, top_k: Optional[int]) -> Array:
  """Valid items displayed within ``top_k``."""
  if top_k is None:
    return where
  return where & (jnp.arange(where.shape[-1]) < top_k)


def position_weights(shape: tuple, weights: Optional[Array], top_k: Optional[int]) -> Array:
  """Per-position reward weights ``[..., L]`` (ones by default, 0 from ``top_k`` on)."""
  w = jnp.ones(shape, jnp.float32) if weights is None else jnp.broadcast_to(jnp.asarray(weights, jnp.float32), shape)
  if top_k is not None:
    w = jnp.where(jnp.arange(shape[-1]) < top_k, w, 0.0)
  return w


def rewards(clicks: Array, where: Array, weights: Optional[Array], top_k: Optional[int]) -> Array:
  r"""Per-position rewards :math:`r_{il} = w_l c_{il}` (0 where masked or beyond ``top_k``)."""
  c = jnp.asarray(clicks, jnp.float32)
  w = position_weights(c.shape, weights, top_k)
  return jnp.where(shown_mask(where, top_k), w * c, 0.0)


def session_mass(where: Array, session_weights: Optional[Array]) -> Array:
  """``[B]`` each session's weight (0 for an all-masked one; bootstrap counts when given)."""
  valid = jnp.any(where, axis=-1).astype(jnp.float32)
  if session_weights is None:
    return valid
  return valid * jnp.asarray(session_weights, jnp.float32)


class Prepared(NamedTuple):
  """What every estimator starts from: ``scores`` (float32), ``where``, per-position ``rewards``, the positions
  within ``top_k`` (``active``) and each session's weight (``mass``)."""

  scores: Array
  where: Array
  rewards: Array
  active: Array
  mass: Array


def prepare(
  scores: Array,
  clicks: Optional[Array],
  where: Optional[Array],
  weights: Optional[Array],
  top_k: Optional[int],
  session_weights: Optional[Array],
) -> Prepared:
  """The estimators' common preamble (``clicks`` None: zero rewards)."""
  check_options(top_k=top_k)
  scores = jnp.asarray(scores, jnp.float32)
  where = mask_of(scores, where)
  clicks = jnp.zeros(scores.shape, jnp.float32) if clicks is None else clicks
  r = rewards(clicks, where, weights, top_k)
  return Prepared(scores, where, r, shown_mask(where, top_k), session_mass(where, session_weights))


def clip_weights(rho: Array, clip: Optional[float], valid: Array) -> tuple[Array, Array]:
  """``(min(rho, clip), number clipped among valid)``; no clip: ``(rho, 0)``."""
  if clip is None:
    return rho, jnp.zeros((), jnp.int32)
  over = (rho > clip) & valid
  return jnp.minimum(rho, clip), jnp.sum(over).astype(jnp.int32)


def ratio(target: Array, logging: Array) -> Array:
  r""":math:`\pi_e / \pi_b` (0 where the logging probability is 0: the host-side checks refuse such logs)."""
  ok = logging > 0
  return jnp.where(ok, target / jnp.where(ok, logging, 1.0), 0.0)


def safe_div(a: Array, b: Array) -> Array:
  ok = b != 0
  return jnp.where(ok, a / jnp.where(ok, b, 1.0), 0.0)


def weighted_estimate(
  x: Array, rho: Array, active: Array, mass: Array, self_normalize: bool, num_clipped: Array, offset=None
) -> Estimate:
  r"""The importance-weighted mean of per-position values ``x [B, L]`` with weights ``rho [B, L]``.

  Plain: :math:`\hat V = \sum_i n_i \sum_l \rho_{il} x_{il} / \sum_i n_i`. Self-normalised per position (as
  Open Bandit Pipeline's ``SelfNormalizedSlate*``): :math:`\hat V = \sum_l (M_l / N)\, \hat V_l` with
  :math:`\hat V_l = \sum_i m_{il}\rho_{il} x_{il} / \sum_i m_{il} \rho_{il}` over the sessions that have position
  :math:`l` (:math:`m_{il} = n_i \mathbb{1}[\text{active}_{il}]`, :math:`M_l = \sum_i m_{il}`,
  :math:`N = \sum_i n_i`). ``offset [B]`` (a direct method's per-session value) is added to both.
  """
  total = jnp.sum(mass)
  m = mass[:, None] * active
  rx = jnp.where(active, rho * x, 0.0)
  ratios = None
  if self_normalize:
    num = jnp.sum(m * rx, axis=0)
    den = jnp.sum(m * jnp.where(active, rho, 0.0), axis=0)
    v_l = safe_div(num, den)
    bar = safe_div(den, jnp.sum(m, axis=0))  # the mean weight over the sessions that have position l
    lin = jnp.where(active, safe_div(rho * (x - v_l), bar) + v_l, 0.0)
    terms = jnp.sum(lin, axis=-1)
    valid = (mass > 0)[:, None]
    ratios = ratio_parts(jnp.where(valid, rx, 0.0), jnp.where(valid & active, rho, 0.0), valid & active)
    if offset is not None:
      ratios = jnp.concatenate([ratios, plain_parts(offset, mass)], axis=-2)
  else:
    terms = jnp.sum(rx, axis=-1)
  if offset is not None:
    terms = terms + offset
  terms = jnp.where(mass > 0, terms, 0.0)
  value = safe_div(jnp.sum(mass * terms), total)
  ess, nonzero = weight_support(rho, active, mass)
  return Estimate(value, terms, num_clipped, total, mass, ratios, ess, nonzero)
