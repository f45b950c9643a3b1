r"""Dual Learning Algorithm (DLA).

Ai, Bi, Luo, Guo, Croft, "Unbiased Learning to Rank with Unbiased Propensity
Estimation", SIGIR'18. A ranker :math:`s` and a propensity tower :math:`o`
(one logit per displayed item, usually a free logit per position) are
learned jointly with two symmetric listwise softmax losses:

.. math::
    \ell_R = -\sum_i c_i\,\frac{\theta_1}{\theta_i}\log\mathrm{softmax}(s)_i, \qquad
    \ell_E = -\sum_i c_i\,\frac{\gamma_1}{\gamma_i}\log\mathrm{softmax}(o)_i,

where :math:`\theta = \mathrm{softmax}(o)` and :math:`\gamma =
\mathrm{softmax}(s)` over the valid items of the list. As in ULTRA's
``DLA`` (``get_normalized_weights``), the weights are normalised to the
list's first item (position 1), :math:`\theta_1/\theta_i = e^{o_1 - o_i}`
(the softmax normaliser cancels; computed in log-space), clipped at
``max_weight`` and stop-gradiented: :math:`\ell_R` trains only the ranker,
:math:`\ell_E` only the propensity tower. The layout convention (item
``i`` displayed at position ``i``) makes item 0 position 1.
"""

from typing import Optional

import jax
import jax.numpy as jnp
from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["dla_weights", "dla_propensities", "dla_loss"]


def dla_weights(
  logits: jax.Array, *, where: Optional[jax.Array] = None, max_weight: Optional[float] = None
) -> jax.Array:
  r"""Stop-gradient inverse softmax-probability weights relative to item 0.

  .. math::
      w_i = \min\Big(\frac{\mathrm{softmax}(z)_1}{\mathrm{softmax}(z)_i}, w_{max}\Big)
          = \min(e^{z_1 - z_i}, w_{max})

  Args:
    logits: ``[..., L]`` tower logits :math:`z`.
    where: ``[..., L]`` bool mask (weights are 1 at padding).
    max_weight: clip (None: ``DEFAULT_MAX_WEIGHT`` = 1e8; ``math.inf``: none).

  Returns:
    ``[..., L]`` weights (1 at item 0).

  >>> dla_weights(jnp.log(jnp.array([0.5, 0.25, 0.25]))).tolist()
  [1.0, 2.0, 2.0]
  """
  where = _utils.as_where(where, logits.shape)
  valid = where & where[..., :1]
  diff = jnp.where(valid, logits[..., :1] - logits, 0.0)
  log_w = _utils.clip_log_weights(diff, max_weight)
  return jax.lax.stop_gradient(jnp.where(valid, jnp.exp(log_w), 1.0))


def dla_propensities(observation_logits: jax.Array, *, where: Optional[jax.Array] = None) -> jax.Array:
  r"""The examination propensities a DLA propensity tower has learned, relative to the first item.

  .. math::
      \hat p_i = \frac{\mathrm{softmax}(o)_i}{\mathrm{softmax}(o)_1} = e^{o_i - o_1}

  Ai et al., "Unbiased Learning to Rank with Unbiased Propensity Estimation", SIGIR'18: the tower's softmax
  over a list estimates the propensities up to one scale, fixed here by the first position's (the inverse of
  :func:`dla_weights`, unclipped and with gradients). The logits are usually those of a position tower,
  :class:`ultr_jax.models.PositionBias` applied to the positions ``0 .. L-1``, which gives the propensity of
  each rank.

  Args:
    observation_logits: ``[..., L]`` propensity-tower logits :math:`o` (the ``observation_logits`` of
      :func:`dla_loss`), item 0 first.
    where: ``[..., L]`` bool mask (0 at padding; all 0 where item 0 is padding).

  Returns:
    ``[..., L]`` propensities (1 at item 0).

  >>> dla_propensities(jnp.log(jnp.array([0.5, 0.25, 0.125]))).tolist()
  [1.0, 0.5, 0.25]
  >>> dla_propensities(jnp.zeros(3), where=jnp.array([True, True, False])).tolist()
  [1.0, 1.0, 0.0]
  """
  where = _utils.as_where(where, observation_logits.shape)
  valid = where & where[..., :1]
  diff = jnp.where(valid, observation_logits - observation_logits[..., :1], 0.0)
  return jnp.where(valid, jnp.exp(diff), 0.0)


@register_loss("dla", trains=("observation_logits",), parts=2)
def dla_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  observation_logits: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
  return_aux: bool = False,
):
  r"""DLA loss :math:`\ell_R + \ell_E` (see the module docstring).

  Args:
    scores: ``[..., L]`` ranker logits.
    clicks: ``[..., L]`` clicks.
    observation_logits: ``[..., L]`` propensity-tower logits of each item's
      displayed position (e.g. :class:`ultr_jax.models.PositionBias`; the propensities it learns:
      :func:`dla_propensities`).
    where: ``[..., L]`` bool mask.
    weights: optional ``[..., L]`` per-item weights (multiply the clicks of both parts).
    max_weight: clip of both weight vectors (ULTRA's ``max_propensity_weight``;
      None: ``DEFAULT_MAX_WEIGHT`` = 1e8, which keeps the loss finite at scores
      of :math:`\pm 10^{30}`; ``math.inf``: no clip).
    reduce_fn: reduction over lists (None: per-list ``[...]``).
    return_aux: if True return ``(loss, {"ranker_loss": ..., "propensity_loss": ...})``.

  Returns:
    The summed loss, or ``(loss, aux)``.

  With uniform towers both parts are the naive softmax loss:

  >>> z = jnp.zeros(2); c = jnp.array([1.0, 0.0])
  >>> round(float(dla_loss(z, c, observation_logits=z)), 4)  # 2 log 2
  1.3863
  >>> loss, aux = dla_loss(jnp.array([1e30, -1e30]), c, observation_logits=z, return_aux=True)
  >>> bool(jnp.isfinite(loss)), sorted(aux)
  (True, ['propensity_loss', 'ranker_loss'])
  """
  where = _utils.as_where(where, scores.shape)
  prop_w = dla_weights(observation_logits, where=where, max_weight=max_weight)
  return _dual_softmax_loss(
    scores, clicks, observation_logits, prop_w, where, weights, max_weight, reduce_fn, return_aux
  )


def _dual_softmax_loss(
  scores: jax.Array,
  clicks: jax.Array,
  observation_logits: jax.Array,
  propensity_weights: jax.Array,
  where: jax.Array,
  weights: Optional[jax.Array],
  max_weight: Optional[float],
  reduce_fn: Optional[ReduceFn],
  return_aux: bool,
):
  r"""DLA's two listwise softmax losses, given the ranker's (stop-gradient) IPS weights :math:`w`.

  .. math::
      \ell_R = -\sum_i c_i\,u_i\,w_i\log\mathrm{softmax}(s)_i, \qquad
      \ell_E = -\sum_i c_i\,u_i\,\min\Big(\frac{\gamma_1}{\gamma_i}, w_{max}\Big)\log\mathrm{softmax}(o)_i,
      \qquad \gamma = \mathrm{softmax}(s)

  (:math:`u` the per-item ``weights``, 1 when None). :func:`dla_loss` passes :math:`w_i = \theta_1/\theta_i`
  (:func:`dla_weights` of ``observation_logits``), :func:`~ultr_jax.losses.upe_loss` the backdoor-adjusted weights.
  ``where`` is the already-broadcast bool mask. Returns :math:`\ell_R + \ell_E`, or with ``return_aux``
  ``(loss, {"ranker_loss": ..., "propensity_loss": ...})``.
  """
  rel_w = dla_weights(scores, where=where, max_weight=max_weight)
  if weights is not None:
    propensity_weights, rel_w = propensity_weights * weights, rel_w * weights
  ranker = _utils.softmax_loss(scores, clicks, where, propensity_weights, reduce_fn)
  exam = _utils.softmax_loss(observation_logits, clicks, where, rel_w, reduce_fn)
  if return_aux:
    return ranker + exam, {"ranker_loss": ranker, "propensity_loss": exam}
  return ranker + exam
