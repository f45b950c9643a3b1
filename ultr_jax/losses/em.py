r"""Regression-EM (REM) for the position-based model.

Wang, Golbandi, Bendersky, Metzler, Najork, "Position Bias Estimation for
Unbiased Learning to Rank in Personal Search", WSDM'18. Under the PBM,
:math:`P(C=1) = \theta_k \gamma_d` with examination :math:`\theta_k` per
position and relevance :math:`\gamma_d = \sigma(s_d)` from the ranker.

**E-step** (posteriors, in log-space, stop-gradiented):

.. math::
    P(E{=}1,R{=}1 \mid C{=}1) = 1, \quad
    P(E{=}1 \mid C{=}0) = \frac{\theta(1-\gamma)}{1-\theta\gamma}, \quad
    P(R{=}1 \mid C{=}0) = \frac{(1-\theta)\gamma}{1-\theta\gamma}.

**M-step for the ranker**: sigmoid cross-entropy on the soft target
:math:`P(R{=}1\mid C) = c + (1-c)P(R{=}1\mid C{=}0)` (the expectation of
ULTRA's Bernoulli-sampled labels; the soft target removes that sampling
noise, as ultr-reproducibility's ``regression_em`` does).

**M-step for the propensities** (closed form, non-trained state): per
position the mean posterior examination over the batch,
:math:`\hat\theta_k = \mathrm{mean}_{i: k_i = k}[c_i + (1-c_i)P(E{=}1\mid C{=}0)]`,
applied as ULTRA's running update
:math:`\theta_k \leftarrow (1-\alpha)\theta_k + \alpha\hat\theta_k`
(``EM_step_size`` :math:`\alpha`). This is the standard (Wang et al. /
ULTRA) form; no propensity tower is trained by gradient. The propensities are
the state of :func:`regression_em_estimator`, an ``(init, update)`` pair
(:class:`~ultr_jax.losses.Estimator`); the loss only reads them.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.estimator import Estimator
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = [
  "em_posteriors",
  "regression_em_loss",
  "em_propensity_update",
  "RegressionEMState",
  "regression_em_estimator",
]

_LOG_EPS = 1e-6


def em_posteriors(
  scores: jax.Array, clicks: jax.Array, *, propensities: jax.Array, where: Optional[jax.Array] = None
) -> dict:
  r"""E-step posteriors of the PBM, stop-gradiented, ``[..., L]`` each.

  Returns a dict with ``"e1r1"`` :math:`P(E{=}1,R{=}1\mid C) = c`,
  ``"e1_c0"`` :math:`P(E{=}1\mid C{=}0)`, ``"r1_c0"`` :math:`P(R{=}1\mid C{=}0)`,
  ``"relevance"`` :math:`P(R{=}1\mid C)` and ``"examination"``
  :math:`P(E{=}1\mid C)`; masked items are 0.

  Args:
    scores: ``[..., L]`` relevance logits (:math:`\gamma = \sigma(s)`).
    clicks: ``[..., L]`` 0/1 clicks.
    propensities: ``[..., L]`` examination probabilities of each item's
      position, clipped into :math:`[10^{-6}, 1 - 10^{-6}]`.
    where: ``[..., L]`` bool mask.

  Returns:
    A dict of ``[..., L]`` arrays (0 where masked): ``relevance`` and ``examination``, each one's posterior given
    the click (1 where clicked), and ``r1_c0`` and ``e1_c0``, their posteriors given no click.

  >>> p = em_posteriors(jnp.array([0.0]), jnp.array([0.0]), propensities=jnp.array([0.5]))
  >>> round(float(p["e1_c0"][0]), 4), round(float(p["r1_c0"][0]), 4)  # .25/.75 each
  (0.3333, 0.3333)
  """
  where = _utils.as_where(where, scores.shape)
  s = jax.lax.stop_gradient(jnp.where(where, scores, 0.0))
  theta = jax.lax.stop_gradient(jnp.where(where, propensities, 0.5))
  theta = jnp.clip(theta, _LOG_EPS, 1.0 - _LOG_EPS)
  log_theta, log_1m_theta = jnp.log(theta), jnp.log1p(-theta)
  log_gamma, log_1m_gamma = jax.nn.log_sigmoid(s), jax.nn.log_sigmoid(-s)
  # log(1 - theta * gamma) = log((1 - theta) + theta (1 - gamma)): a sum of
  # positive terms, so no cancellation.
  log_no_click = jnp.logaddexp(log_1m_theta, log_theta + log_1m_gamma)
  e1_c0 = jnp.exp(log_theta + log_1m_gamma - log_no_click)
  r1_c0 = jnp.exp(log_1m_theta + log_gamma - log_no_click)
  c = jnp.where(where, clicks, 0.0)
  zero = lambda x: jnp.where(where, x, 0.0)
  return {
    "e1r1": zero(c),
    "e1_c0": zero(e1_c0),
    "r1_c0": zero(r1_c0),
    "relevance": zero(c + (1.0 - c) * r1_c0),
    "examination": zero(c + (1.0 - c) * e1_c0),
  }


@register_loss("regression_em")
def regression_em_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""REM ranker M-step: BCE of :math:`\sigma(s)` against :math:`P(R{=}1\mid C)`.

  .. math::
      \ell = -\sum_i \hat r_i\log\sigma(s_i) + (1-\hat r_i)\log\sigma(-s_i), \quad
      \hat r_i = \mathrm{sg}[c_i + (1-c_i)P(R{=}1\mid C{=}0)]

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` the current examination estimates of each item's position (e.g.
      ``state.propensities[positions]`` of :func:`regression_em_estimator`).
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1).
    reduce_fn: ``jnp.mean`` over the valid items (0 where none is valid), ``jnp.sum``, any other reduction, or None
      for the per-item values ``[..., L]``.

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values (0 where masked) with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([1.0, 0.0])
  >>> round(float(regression_em_loss(s, c, propensities=jnp.array([1.0, 1.0]))), 4)
  0.6931
  """
  where = _utils.as_where(where, scores.shape)
  target = em_posteriors(scores, clicks, propensities=propensities, where=where)["relevance"]
  return _utils.sigmoid_loss(scores, target, where, weights, reduce_fn)


def em_propensity_update(
  propensities: jax.Array,
  scores: jax.Array,
  clicks: jax.Array,
  positions: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  step_size: float = 0.05,
) -> jax.Array:
  r"""REM closed-form propensity M-step with ULTRA's running average.

  .. math::
      \theta_k \leftarrow (1-\alpha)\,\theta_k + \alpha\,
      \frac{\sum_{i: k_i = k} P(E{=}1 \mid C)_i}{|\{i : k_i = k\}|}

  Sums run over all leading dims; positions without a valid item keep
  their value.

  Args:
    propensities: ``[K]`` current :math:`\theta`.
    scores: ``[..., L]`` relevance logits.
    clicks: ``[..., L]`` clicks.
    positions: ``[..., L]`` int 0-based positions (clipped to ``K-1``).
    where: ``[..., L]`` mask.
    step_size: :math:`\alpha` (1 = plain EM).

  Returns:
    ``[K]`` updated propensities.

  >>> th = em_propensity_update(jnp.array([0.5, 0.5]), jnp.zeros(2), jnp.array([1.0, 0.0]),
  ...                           jnp.arange(2), step_size=1.0)
  >>> [round(float(x), 4) for x in th]
  [1.0, 0.3333]
  """
  where = _utils.as_where(where, scores.shape)
  k = propensities.shape[-1]
  pos = jnp.clip(positions, 0, k - 1)
  theta_items = jnp.take(propensities, pos)
  post = em_posteriors(scores, clicks, propensities=theta_items, where=where)["examination"]
  total = _utils.per_position_sum(post, pos, k, where)
  count = _utils.per_position_sum(jnp.ones_like(post), pos, k, where)
  mean = total / jnp.where(count > 0, count, 1.0)
  new = (1.0 - step_size) * propensities + step_size * mean
  return jax.lax.stop_gradient(jnp.where(count > 0, new, propensities))


class RegressionEMState(NamedTuple):
  """State of :func:`regression_em_estimator`: the per-position examination estimates ``[K]``."""

  propensities: jax.Array


def regression_em_estimator(num_positions: int, *, step_size: float = 0.05, init_value: float = 0.9) -> Estimator:
  r"""Regression-EM's propensity M-step as an ``(init, update)`` pair (Wang et al., WSDM'18, Section 4).

  ``init()`` gives :math:`\theta_k = ` ``init_value`` for every position;
  ``update(state, scores, clicks, *, positions, where=None)`` applies
  :func:`em_propensity_update`,

  .. math::
      \theta_k \leftarrow (1-\alpha)\,\theta_k + \alpha\,
      \mathrm{mean}_{i: k_i = k}\, P(E{=}1 \mid C)_i ,

  with the E-step of :func:`em_posteriors` at the current scores (stop-gradient).

  Args:
    num_positions: ``K``.
    step_size: :math:`\alpha` (ULTRA's ``EM_step_size``; 1 = plain EM).
    init_value: the initial propensity of every position, in (0, 1).

  Returns:
    An :class:`~ultr_jax.losses.Estimator` with state :class:`RegressionEMState`.

  >>> est = regression_em_estimator(2, step_size=1.0, init_value=0.5)
  >>> state = est.update(est.init(), jnp.zeros(2), jnp.array([1.0, 0.0]), positions=jnp.arange(2))
  >>> [round(float(x), 4) for x in state.propensities]
  [1.0, 0.3333]
  """
  if not 0.0 < init_value < 1.0:
    raise ValueError(f"regression_em_estimator: init_value must be in (0, 1), got {init_value}")

  def init() -> RegressionEMState:
    return RegressionEMState(jnp.full((int(num_positions),), init_value, jnp.float32))

  def update(state: RegressionEMState, scores, clicks, *, positions, where=None) -> RegressionEMState:
    return RegressionEMState(
      em_propensity_update(state.propensities, scores, clicks, positions, where=where, step_size=step_size)
    )

  return Estimator(init=init, update=update)
