r"""Inverse propensity scoring (IPS) and self-normalised IPS (SNIPS) losses.

Propensities :math:`\theta_i = P(E_i = 1)` are given (e.g. the simulator's
oracle ``examination``, or estimates). Weights are
:math:`w_i = 1/\theta_i`, set to 1 at padding, clipped at ``max_weight``
(equivalently, propensities clipped below at ``1/max_weight``), and wrapped
in ``stop_gradient``. **Default clip**: ``max_weight=None`` caps the weights
at :math:`10^8` (``losses.DEFAULT_MAX_WEIGHT``), far above any weight of the
expected-metrics runs, so a propensity of :math:`10^{-30}` gives a finite loss
and gradient; ``max_weight=math.inf`` switches clipping off.

SNIPS is self-normalised **within the batch** (over every leading dim at
once): the clicked items' weights are rescaled so that their total equals
the number of clicks,

.. math::
    \tilde w_i = w_i \, \frac{\sum_j c_j}{\sum_j c_j w_j},

i.e. the SNIPS estimator :math:`\sum_i c_i w_i \ell_i / \sum_i c_i w_i`
(Swaminathan & Joachims, "The Self-Normalized Estimator for Counterfactual
Learning", NeurIPS'15) scaled by the batch's click count so its magnitude is
that of the naive loss. Because the normaliser couples the lists of a batch,
SNIPS losses are not separable over lists (vmapping over queries normalises
per query instead).
"""

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = [
  "ips_pairwise_loss",
  "ips_weights",
  "snips_weights",
  "ips_sigmoid_loss",
  "ips_softmax_loss",
  "snips_sigmoid_loss",
  "snips_softmax_loss",
]


def ips_weights(
  propensities: jax.Array, *, where: Optional[jax.Array] = None, max_weight: Optional[float] = None
) -> jax.Array:
  r"""Stop-gradient inverse-propensity weights :math:`\min(1/\theta_i, w_{max})`.

  An item that cannot be examined (:math:`\theta_i = 0`, e.g. a candidate a
  top-k log never showed) gets weight 0: its IPS term :math:`c_i/\theta_i`
  is 0 because such an item is never clicked (a click there contradicts the
  propensities and is dropped rather than given an infinite weight).

  Args:
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i \ge 0`.
    where: ``[..., L]`` bool mask; weights are 1 at padding.
    max_weight: clip of the weights (None: ``DEFAULT_MAX_WEIGHT`` = 1e8; ``math.inf``: none).

  Returns:
    ``[..., L]`` weights.

  >>> ips_weights(jnp.array([1.0, 0.5, 0.01]), max_weight=10.0).tolist()
  [1.0, 2.0, 10.0]
  >>> ips_weights(jnp.array([1.0, 0.0])).tolist()  # never examined: no IPS weight
  [1.0, 0.0]
  >>> print(f"{float(ips_weights(jnp.array([1e-30]))[0]):.3g}")  # the default clip, 1e8
  1e+08
  """
  where = _utils.as_where(where, propensities.shape)
  examined = where & (propensities > 0)
  safe = jnp.where(examined, propensities, 1.0)
  log_w = _utils.clip_log_weights(-jnp.log(safe), max_weight)
  w = jnp.where(examined, jnp.exp(log_w), jnp.where(where, 0.0, 1.0))
  return jax.lax.stop_gradient(w)


def snips_weights(
  propensities: jax.Array, clicks: jax.Array, *, where: Optional[jax.Array] = None, max_weight: Optional[float] = None
) -> jax.Array:
  r"""IPS weights self-normalised within the batch: :math:`w_i \sum_j c_j / \sum_j c_j w_j`.

  Sums run over every leading dim and the list. Without clicks the plain IPS
  weights are returned.

  Args:
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    clicks: ``[..., L]`` clicks; their sums over the batch normalise the weights.
    where: ``bool[..., L]`` the valid items (None: all).
    max_weight: the cap of each inverse-propensity weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).

  Returns:
    ``[..., L]`` self-normalised weights (1 where masked), with their gradient stopped.

  >>> [round(float(w), 4) for w in snips_weights(jnp.array([1.0, 0.5]), jnp.array([1.0, 1.0]))]
  [0.6667, 1.3333]
  """
  where = _utils.as_where(where, propensities.shape)
  w = ips_weights(propensities, where=where, max_weight=max_weight)
  c = jnp.where(where, clicks, 0.0)
  num = jnp.sum(c)
  den = jnp.sum(c * w)
  scale = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)
  return jax.lax.stop_gradient(jnp.where(where, w * scale, 1.0))


def _unbiased_bce(scores, clicks, ips, where, weights, reduce_fn):
  return _utils.target_bce(scores, clicks * ips, where, reduce_fn, weights)


@register_loss("ips")
def ips_sigmoid_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Pointwise IPS sigmoid cross-entropy (unbiased BCE).

  .. math::
      \ell = -\sum_i \frac{c_i}{\theta_i}\log\sigma(s_i)
             + \Big(1 - \frac{c_i}{\theta_i}\Big)\log\sigma(-s_i)

  Its expectation over clicks :math:`c_i \sim \mathrm{Bernoulli}(\theta_i
  r_i)` is the BCE on true relevance :math:`r_i` (Saito et al., "Unbiased
  Recommender Learning from Missing-Not-At-Random Implicit Feedback",
  WSDM'20; Bekker et al. 2019). The negative term can make the loss
  unbounded below for large weights; clip with ``max_weight``.

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1); they multiply the clicks (rax's convention).
    max_weight: the cap of each inverse-propensity weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    reduce_fn: ``jnp.mean`` over the valid items (0 where none is valid), ``jnp.sum``, any other reduction, or None
      for the per-item values ``[..., L]``.

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values (0 where masked) with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([1.0, 0.0])
  >>> round(float(ips_sigmoid_loss(s, c, propensities=jnp.array([0.5, 0.5]))), 4)
  0.6931
  """
  where = _utils.as_where(where, scores.shape)
  w = ips_weights(propensities, where=where, max_weight=max_weight)
  return _unbiased_bce(scores, clicks, w, where, weights, reduce_fn)


@register_loss("ips")
def ips_softmax_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Listwise IPS softmax cross-entropy (ULTRA's ``IPWrank`` listwise loss).

  .. math::
      \ell = -\sum_i \frac{c_i}{\theta_i} \log\frac{e^{s_i}}{\sum_j e^{s_j}}

  Unbiased for :math:`-\sum_i r_i \log\mathrm{softmax}(s)_i` under the PBM
  (Joachims et al., WSDM'17; Ai et al., SIGIR'18).

  ``weights`` multiply the clicks (rax's convention). Returns the mean over
  lists (None: per-list ``[...]``).

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1); they multiply the clicks (rax's convention).
    max_weight: the cap of each inverse-propensity weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    reduce_fn: ``jnp.mean`` over the lists with a valid item (rax's ``safe_reduce``), ``jnp.sum``, or None for the
      per-list values ``[...]``.

  Returns:
    The loss: a scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([0.0, 1.0])
  >>> round(float(ips_softmax_loss(s, c, propensities=jnp.array([1.0, 0.5]))), 4)  # 2 log 2
  1.3863
  """
  where = _utils.as_where(where, scores.shape)
  w = ips_weights(propensities, where=where, max_weight=max_weight)
  return _utils.softmax_loss(scores, clicks, where, w if weights is None else w * weights, reduce_fn)


@register_loss("ips")
def ips_pairwise_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  lambdaweight_fn: Optional[Callable] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Pairwise IPS logistic (BPR) loss: clicked over unclicked items, weighted by the clicked one.

  .. math::
      \ell = \frac{\sum_{i \ne j} m_{ij} \frac{1}{\theta_i} \log(1 + e^{-(s_i - s_j)})}
                 {\sum_{i \ne j} m_{ij}}, \qquad m_{ij} = v_i\, c_i (1 - c_j)

  Joachims et al. (WSDM'17) weight each clicked item's pairs by
  :math:`1/\theta_i`; this is the IPS baseline of the CLD paper's code (BPR
  weight :math:`c_i/\theta_i - c_j/\theta_j` on its (clicked, unclicked)
  pairs, the CLD paper's Section 6), with the logistic loss in place of the hinge. With
  click-through rates of an aggregated log the pair mass is the expected
  session count, as in :func:`~ultr_jax.losses.naive_pairwise_loss`. Unlike
  :func:`ips_softmax_loss` it is not unbiased under the PBM: an unclicked
  ``j`` is a negative whether or not it was examined.
  It builds all ``L x L`` pairs of a list, as rax's pairwise losses do.

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position. Each pair is
      weighted by its clicked item's inverse propensity (see :func:`ips_weights`).
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights :math:`v_i` (None: 1).
    max_weight: the cap of each inverse-propensity weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    lambdaweight_fn: an optional rax lambdaweight of each pair from the scores and the clicks
      (:func:`lambdarank_weights`: propensity-weighted LambdaRank, the IPS weight on the clicked item only).
    reduce_fn: ``jnp.mean`` over the pair mass, ``jnp.sum``, or None for the ``[..., L, L]`` pair losses.

  Returns:
    The loss: a scalar, or the ``[..., L, L]`` pair losses with ``reduce_fn=None``.

  >>> s, c = jnp.array([0.0, 0.0]), jnp.array([0.0, 1.0])
  >>> round(float(ips_pairwise_loss(s, c, propensities=jnp.array([1.0, 0.5]))), 4)  # 2 log 2
  1.3863
  """
  where = _utils.as_where(where, scores.shape)
  w = ips_weights(propensities, where=where, max_weight=max_weight)
  return _utils.click_pair_loss(scores, clicks, w, where, weights, reduce_fn, lambdaweight_fn)


@register_loss("ips", per_list=False)
def snips_sigmoid_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Pointwise SNIPS sigmoid cross-entropy: :func:`ips_sigmoid_loss` with :func:`snips_weights`.

  .. math::
      \ell = -\sum_i c_i\tilde w_i\log\sigma(s_i) + (1 - c_i\tilde w_i)\log\sigma(-s_i)

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1); they multiply the clicks (rax's convention).
    max_weight: the cap of each inverse-propensity weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    reduce_fn: ``jnp.mean`` over the valid items (0 where none is valid), ``jnp.sum``, any other reduction, or None
      for the per-item values ``[..., L]``.

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values (0 where masked) with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([1.0, 0.0])
  >>> round(float(snips_sigmoid_loss(s, c, propensities=jnp.array([0.5, 0.5]))), 4)
  0.6931
  """
  where = _utils.as_where(where, scores.shape)
  w = snips_weights(propensities, clicks, where=where, max_weight=max_weight)
  return _unbiased_bce(scores, clicks, w, where, weights, reduce_fn)


@register_loss("ips", per_list=False)
def snips_softmax_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  propensities: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Listwise SNIPS softmax cross-entropy: :func:`ips_softmax_loss` with :func:`snips_weights`.

  .. math::
      \ell = -\sum_i c_i\tilde w_i \log\mathrm{softmax}(s)_i

  Args:
    scores: ``[..., L]`` the ranker's logits.
    clicks: ``[..., L]`` clicks (0/1), or click-through rates in [0, 1] for an aggregated log.
    propensities: ``[..., L]`` examination probabilities :math:`\theta_i` at each item's position.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1); they multiply the clicks (rax's convention).
    max_weight: the cap of each inverse-propensity weight (None: :data:`DEFAULT_MAX_WEIGHT`, ``math.inf``: none).
    reduce_fn: ``jnp.mean`` over the lists with a valid item (rax's ``safe_reduce``), ``jnp.sum``, or None for the
      per-list values ``[...]``.

  Returns:
    The loss: a scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> s = jnp.array([0.0, 0.0]); c = jnp.array([0.0, 1.0])
  >>> round(float(snips_softmax_loss(s, c, propensities=jnp.array([1.0, 0.5]))), 4)  # log 2
  0.6931
  """
  where = _utils.as_where(where, scores.shape)
  w = snips_weights(propensities, clicks, where=where, max_weight=max_weight)
  return _utils.softmax_loss(scores, clicks, where, w if weights is None else w * weights, reduce_fn)
