r"""Unconfounded propensity estimation (UPE; Luo, Zhang, Ai, ... , SIGIR'24).

Luo et al., "Unbiased Learning-to-Rank Needs Unconfounded Propensity Estimation", SIGIR'24. DLA
(:func:`~ultr_jax.losses.dla_loss`) learns :math:`P(E \mid k)` from clicks, but when the logger ranks by
relevance, relevance confounds position and the estimate absorbs it (DLA over-estimates position bias under a
strong logger). UPE's propensity model is *logging-policy aware*,

.. math::
    o(k, x) = g\big(\mathrm{emb}(k) + h(x)\big),

with :math:`h` pretrained to reproduce the logger's scores (so it carries what the logger knew about
:math:`x`), and the weights come from the backdoor adjustment over the documents (the paper's Eq. 9-11):

.. math::
    P(E \mid do(k)) = \mathbb{E}_{x}\big[\mathrm{softmax}(o(\cdot, x_{\sigma}))_k\big]
        \approx \frac{1}{P}\sum_{p=1}^{P} \mathrm{softmax}\big(o(\cdot, x_{\sigma_p})\big)_k ,

the propensity of position :math:`k` averaged over random permutations :math:`\sigma_p` of the list's
documents (16 in the released code), which cuts the path from relevance to position. The ranker is trained by
IPS with these weights relative to position 1 (as DLA's, :func:`~ultr_jax.losses.dla_weights`), the propensity
model by DLA's propensity loss on the observed placement.
"""

from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.dla import _dual_softmax_loss, dla_weights
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["backdoor_weights", "upe_loss"]


def backdoor_weights(
  permuted_observation_logits: jax.Array, *, where: Optional[jax.Array] = None, max_weight: Optional[float] = None
) -> jax.Array:
  r"""Stop-gradient IPS weights :math:`P(E \mid do(1)) / P(E \mid do(k))` from the permuted lists' logits.

  .. math::
      \log P(E \mid do(k)) = \log\frac{1}{P}\sum_p \mathrm{softmax}(o^{(p)})_k, \qquad
      w_k = \min\big(e^{\log P(E \mid do(1)) - \log P(E \mid do(k))}, w_{max}\big)

  (softmax over the valid items of each permuted list, in log space).

  Args:
    permuted_observation_logits: ``[..., P, L]`` :math:`o^{(p)}_k`, the propensity model's logit of position
      :math:`k` holding document :math:`\sigma_p(k)`.
    where: ``bool[..., L]`` valid items (None: all); weights are 1 at padding.
    max_weight: the cap (None: ``DEFAULT_MAX_WEIGHT``; ``math.inf``: none).

  Returns:
    ``[..., L]`` weights (1 at position 1).

  >>> o = jnp.log(jnp.array([[0.5, 0.25, 0.25], [0.5, 0.4, 0.1]]))
  >>> [round(v, 4) for v in backdoor_weights(o).tolist()]  # 0.5 / 0.325, 0.5 / 0.175
  [1.0, 1.5385, 2.8571]
  """
  logits = permuted_observation_logits
  where = _utils.as_where(where, logits.shape[:-2] + logits.shape[-1:])
  w = where[..., None, :]
  z = jnp.where(w, logits, -jnp.inf)
  log_theta = jax.nn.log_softmax(z, axis=-1, where=w)
  log_theta = jnp.where(w, log_theta, 0.0)
  num = logits.shape[-2]
  log_do = jax.nn.logsumexp(log_theta, axis=-2) - jnp.log(float(num))
  return dla_weights(log_do, where=where, max_weight=max_weight)


@register_loss("upe", trains=("observation_logits",), parts=2)
def upe_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  observation_logits: jax.Array,
  permuted_observation_logits: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
  return_aux: bool = False,
):
  r"""UPE: IPS on the backdoor-adjusted propensities plus DLA's propensity loss.

  .. math::
      \ell_R = -\sum_i c_i\,w_i\log\mathrm{softmax}(s)_i, \qquad
      \ell_E = -\sum_i c_i\,\frac{\gamma_1}{\gamma_i}\log\mathrm{softmax}(o)_i

  with :math:`w` = :func:`backdoor_weights` and :math:`\gamma = \mathrm{softmax}(s)` (Luo et al., SIGIR'24,
  Eq. 12 with DLA's Eq. 6 for the propensity model).

  Args:
    scores: ``[..., L]`` ranker logits.
    clicks: ``[..., L]`` clicks.
    observation_logits: ``[..., L]`` the propensity model's logits of the logged placement.
    permuted_observation_logits: ``[..., P, L]`` its logits over ``P`` permutations of the documents.
    where: ``bool[..., L]`` valid items (None: all).
    weights: ``[..., L]`` per-item weights (multiply the clicks of both parts).
    max_weight: cap of both weight vectors.
    reduce_fn: over lists (None: per list ``[...]``).
    return_aux: also return ``{"ranker_loss", "propensity_loss"}``.

  Returns:
    The summed loss, or ``(loss, aux)``.

  >>> z = jnp.zeros(2); c = jnp.array([1.0, 0.0])
  >>> round(float(upe_loss(z, c, observation_logits=z, permuted_observation_logits=jnp.zeros((3, 2)))), 4)
  1.3863
  """
  where = _utils.as_where(where, scores.shape)
  prop_w = backdoor_weights(permuted_observation_logits, where=where, max_weight=max_weight)
  return _dual_softmax_loss(
    scores, clicks, observation_logits, prop_w, where, weights, max_weight, reduce_fn, return_aux
  )
