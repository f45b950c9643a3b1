r"""Affine corrections for trust bias (Vardasbi, Oosterhuis & de Rijke, CIKM'20).

Under trust bias a user clicks an examined document with probability
:math:`\epsilon^+_k` when it is relevant and :math:`\epsilon^-_k` when it is
not (Agarwal et al., WWW'19), so at position :math:`k` with examination
:math:`\theta_k`

.. math::
    P(C = 1 \mid r, k) = \theta_k\,[\epsilon^+_k r + \epsilon^-_k (1 - r)]
                       = \alpha_k r + \beta_k, \qquad
    \alpha_k = \theta_k (\epsilon^+_k - \epsilon^-_k),\ \beta_k = \theta_k \epsilon^-_k .

No reweighting of clicks alone can remove the :math:`\beta_k` term, which is
why IPS (:math:`c / \theta_k`) stays biased under trust bias (the paper's
Theorem 1). The affine estimate of relevance subtracts it first,

.. math::
    \hat r_i = \frac{c_i - \beta_{k_i}}{\alpha_{k_i}}, \qquad
    \mathbb{E}[\hat r_i] = r_i ,

and any loss that is linear in the relevance labels (the listwise softmax
cross-entropy, the pointwise sigmoid cross-entropy) is then unbiased in
expectation over clicks. :math:`\hat r` is negative for unclicked items, so
the loss of a single list is not bounded below; its expectation (and its
gradient's) is that of the loss on the true relevance. With
:math:`\theta = \epsilon^- = 0,\ \epsilon^+ = 1` the estimate is IPS.

The trust simulator (:func:`ultr_jax.simulation.trust`) reports the oracle
``examination``, ``eps_plus`` and ``eps_minus`` of every item, the same role
the oracle ``examination`` plays for IPS.
"""

from typing import Optional

import jax
import jax.numpy as jnp
from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["affine_sigmoid_loss", "affine_softmax_loss", "affine_targets"]


def affine_targets(
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  eps_plus: jax.Array,
  eps_minus: jax.Array,
  where: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
) -> jax.Array:
  r"""Stop-gradient affine estimates of relevance from clicks under trust bias.

  .. math::
      \hat r_i = \frac{c_i - \theta_i\epsilon^-_i}{\theta_i(\epsilon^+_i - \epsilon^-_i)}

  Vardasbi et al., "When Inverse Propensity Scoring does not Work: Affine
  Corrections for Unbiased Learning to Rank", CIKM'20, Eq. 13. An item whose
  clicks carry no relevance signal (:math:`\alpha_i = \theta_i(\epsilon^+_i -
  \epsilon^-_i) \le 0`: never examined, as a top-k log's unshown candidates,
  or :math:`\epsilon^+ \le \epsilon^-`) gets 0, as :func:`ips_weights` gives
  never-examined items; padding gets 0. ``max_weight`` clips the factor
  :math:`1/\alpha_i` (bias for variance, as IPS clipping does).

  Args:
    clicks: ``[..., L]`` clicks (or click-through rates).
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i`.
    eps_plus: ``[..., L]`` :math:`P(C = 1 \mid E = 1, R = 1)` at each item's position.
    eps_minus: ``[..., L]`` :math:`P(C = 1 \mid E = 1, R = 0)` at each item's position.
    where: ``[..., L]`` bool mask.
    max_weight: clip of :math:`1/\alpha_i` (None: ``DEFAULT_MAX_WEIGHT`` = 1e8; ``math.inf``: none).

  Returns:
    ``[..., L]`` targets, unbiased for the relevance probability :math:`r_i`.

  >>> c = jnp.array([1.0, 0.0, 1.0])
  >>> r = affine_targets(c, propensities=jnp.array([1.0, 0.5, 0.0]), eps_plus=jnp.array([1.0, 1.0, 1.0]),
  ...                    eps_minus=jnp.array([0.5, 0.2, 0.1]))
  >>> r.tolist()  # (1 - 0.5) / 0.5, (0 - 0.1) / 0.4, never examined
  [1.0, -0.25, 0.0]
  """
  where = _utils.as_where(where, clicks.shape)
  dtype = jnp.result_type(float, clicks, propensities, eps_plus, eps_minus)
  theta, e_plus, e_minus = (jnp.asarray(x, dtype) for x in (propensities, eps_plus, eps_minus))
  alpha, beta = theta * (e_plus - e_minus), theta * e_minus
  informative = where & (alpha > 0)
  log_w = _utils.clip_log_weights(-jnp.log(jnp.where(informative, alpha, 1.0)), max_weight)
  target = (jnp.asarray(clicks, dtype) - beta) * jnp.exp(log_w)
  return jax.lax.stop_gradient(jnp.where(informative, target, 0.0))


@register_loss("affine")
def affine_softmax_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  eps_plus: jax.Array,
  eps_minus: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Listwise softmax cross-entropy on the affine relevance estimates (:func:`affine_targets`).

  .. math::
      \ell = -\sum_i \hat r_i \log\frac{e^{s_i}}{\sum_j e^{s_j}}

  Linear in :math:`\hat r`, so unbiased for :math:`-\sum_i r_i
  \log\mathrm{softmax}(s)_i` under trust bias (Vardasbi et al., CIKM'20);
  it equals :func:`ips_softmax_loss` when :math:`\epsilon^- = 0` and
  :math:`\epsilon^+ = 1`. Arguments as :func:`affine_targets`; ``weights``
  multiply the targets (rax's convention); ``reduce_fn`` over lists with a
  valid item (None: per list ``[...]``).

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    eps_plus: ``[..., L]`` :math:`\epsilon^+`: the click probability of an examined relevant item at each item's
      position.
    eps_minus: ``[..., L]`` :math:`\epsilon^-`: the click probability of an examined non-relevant item (below
      ``eps_plus``).
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1); they multiply the clicks (rax's convention).
    max_weight: the cap of each affine weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    reduce_fn: ``jnp.mean`` over the lists with a valid item (rax's ``safe_reduce``), ``jnp.sum``, or None for the
      per-list values ``[...]``.

  Returns:
    The loss: a scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([0.0, 1.0])
  >>> kw = dict(propensities=jnp.array([1.0, 0.5]), eps_plus=jnp.ones(2), eps_minus=jnp.zeros(2))
  >>> round(float(affine_softmax_loss(s, c, **kw)), 4)  # IPS: 2 log 2
  1.3863
  """
  where = _utils.as_where(where, scores.shape)
  target = affine_targets(
    clicks, propensities=propensities, eps_plus=eps_plus, eps_minus=eps_minus, where=where, max_weight=max_weight
  )
  return _utils.softmax_loss(scores, target, where, weights, reduce_fn)


@register_loss("affine")
def affine_sigmoid_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  eps_plus: jax.Array,
  eps_minus: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Pointwise sigmoid cross-entropy on the affine relevance estimates (:func:`affine_targets`).

  .. math::
      \ell = -\sum_i \hat r_i \log\sigma(s_i) + (1 - \hat r_i)\log\sigma(-s_i)

  Linear in :math:`\hat r`, so its expectation over clicks is the BCE on the
  relevance probabilities; :func:`ips_sigmoid_loss` when :math:`\epsilon^- = 0,\
  \epsilon^+ = 1`. ``weights`` multiply the per-item losses; ``reduce_fn``
  over valid items (None: ``[..., L]``).

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    eps_plus: ``[..., L]`` :math:`\epsilon^+`: the click probability of an examined relevant item at each item's
      position.
    eps_minus: ``[..., L]`` :math:`\epsilon^-`: the click probability of an examined non-relevant item (below
      ``eps_plus``).
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1); they multiply the clicks (rax's convention).
    max_weight: the cap of each affine weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    reduce_fn: ``jnp.mean`` over the valid items (0 where none is valid), ``jnp.sum``, any other reduction, or None
      for the per-item values ``[..., L]``.

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values (0 where masked) with ``reduce_fn=None``.

  >>> s = jnp.array([1.0, -1.0]); c = jnp.array([1.0, 0.0])
  >>> kw = dict(propensities=jnp.ones(2), eps_plus=jnp.ones(2), eps_minus=jnp.full(2, 0.5))
  >>> round(float(affine_sigmoid_loss(s, c, **kw)), 4)  # targets 1 and -1
  -0.1867
  """
  where = _utils.as_where(where, scores.shape)
  target = affine_targets(
    clicks, propensities=propensities, eps_plus=eps_plus, eps_minus=eps_minus, where=where, max_weight=max_weight
  )
  return _utils.target_bce(scores, target, where, reduce_fn, weights)
