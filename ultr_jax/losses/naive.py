r"""Naive click losses: clicks taken as relevance labels (biased baseline).

Both follow rax's calling convention and reduce like rax: the pointwise loss
averages over valid items, the listwise loss over lists with a valid item.
"""

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import rax

from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["lambdarank_weights", "naive_pairwise_loss", "naive_sigmoid_loss", "naive_softmax_loss"]


@register_loss("naive")
def naive_sigmoid_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Pointwise sigmoid cross-entropy on clicks (:func:`rax.pointwise_sigmoid_loss`).

  .. math::
      \ell(s, c) = -\sum_i c_i \log\sigma(s_i) + (1 - c_i)\log\sigma(-s_i)

  Treats every click as a relevance label, so it inherits position bias
  (Joachims et al., "Unbiased Learning-to-Rank with Biased Feedback",
  WSDM'17, the naive estimator).

  Args:
    scores: ``[..., L]`` logits.
    clicks: ``[..., L]`` 0/1 clicks.
    where: ``[..., L]`` bool mask.
    weights: optional ``[..., L]`` per-item weights.
    reduce_fn: reduction over valid items; None returns ``[..., L]``.

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values (0 where masked) with ``reduce_fn=None``.

  >>> s, c = jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0])
  >>> round(float(naive_sigmoid_loss(s, c)), 4)  # log 2
  0.6931
  """
  where = _utils.as_where(where, scores.shape)
  return _utils.sigmoid_loss(scores, clicks, where, weights, reduce_fn)


@register_loss("naive")
def naive_softmax_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Listwise softmax cross-entropy on clicks (:func:`rax.softmax_loss`).

  .. math::
      \ell(s, c) = -\sum_i c_i \log \frac{e^{s_i}}{\sum_j e^{s_j}}

  (unnormalised click counts as in ULTRA's ``softmax_loss``; a list without
  clicks contributes 0 and still counts in the mean over lists).

  Args:
    scores: ``[..., L]`` logits.
    clicks: ``[..., L]`` clicks.
    where: ``[..., L]`` bool mask.
    weights: optional ``[..., L]`` per-item label weights.
    reduce_fn: reduction over lists; None returns per-list losses ``[...]``.

  Returns:
    The loss: a scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> s, c = jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0])
  >>> round(float(naive_softmax_loss(s, c)), 4)  # log 2
  0.6931
  """
  where = _utils.as_where(where, scores.shape)
  return _utils.softmax_loss(scores, clicks, where, weights, reduce_fn)


@register_loss("naive")
def naive_pairwise_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  lambdaweight_fn: Optional[Callable] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Pairwise logistic (BPR) loss of clicked over unclicked items.

  .. math::
      \ell(s, c) = \frac{\sum_{i \ne j} m_{ij} \log(1 + e^{-(s_i - s_j)})}{\sum_{i \ne j} m_{ij}},
      \qquad m_{ij} = v_i\, c_i (1 - c_j)

  With 0/1 clicks this is the mean over (clicked, unclicked) pairs, the
  Naive baseline of the CLD paper's code (BPR with weight :math:`c_i - c_j`
  on its tag-1 pairs; the CLD paper's Section 6). With click-through rates
  :math:`c_i = n_i / n` of ``n`` sessions (an aggregated log) the mass
  :math:`n\,c_i(1 - c_j)` is the expected number of sessions with ``i``
  clicked and ``j`` not when clicks are independent given the query, so the
  aggregated loss is the per-session loss in expectation.
  It builds all ``L x L`` pairs of a list, as rax's pairwise losses do.

  Args:
    scores: ``[..., L]`` logits.
    clicks: ``[..., L]`` clicks or click-through rates in [0, 1].
    where: ``[..., L]`` bool mask.
    weights: optional ``[..., L]`` weight :math:`v_i` of the clicked item
      (e.g. a list's session count broadcast over its items).
    lambdaweight_fn: optional lambdaweight multiplying each pair's loss,
      computed from the scores and the clicks, with rax's signature:
      :func:`lambdarank_weights` gives LambdaRank on clicks (the naive
      LambdaRank baseline of ULTRA's PyTorch port and of Hager et al.'s
      Baidu-ULTR study).
    reduce_fn: ``jnp.mean`` (over pair mass), ``jnp.sum``, or None for the
      ``[..., L, L]`` pair losses.

  Returns:
    The loss: a scalar, or the ``[..., L, L]`` pair losses (0 off the pairs) with ``reduce_fn=None``.

  >>> s, c = jnp.array([0.0, 0.0, 1.0]), jnp.array([1.0, 0.0, 0.0])
  >>> round(float(naive_pairwise_loss(s, c)), 4)  # (log 2 + log(1 + e)) / 2
  1.0032
  """
  where = _utils.as_where(where, scores.shape)
  return _utils.click_pair_loss(scores, clicks, jnp.ones_like(scores), where, weights, reduce_fn, lambdaweight_fn)


def lambdarank_weights(
  scores: jax.Array,
  labels: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  segments: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
) -> jax.Array:
  r"""LambdaRank's weight of each pair: the DCG change of swapping the two items, ``[..., L * L]``.

  .. math::
      \lambda_{ij} = \bigl|(2^{y_i} - 1) - (2^{y_j} - 1)\bigr|\,
      \Bigl|\frac{1}{\log_2(1 + r_i)} - \frac{1}{\log_2(1 + r_j)}\Bigr|

  with :math:`r` the ranks of ``scores`` among the valid items (Burges 2010;
  Wang et al., CIKM'18). This is :func:`rax.dcg_lambdaweight` without its
  factor of the padded list size, so padding a list does not scale its loss
  (the mask-equals-truncation convention). Pass it as ``lambdaweight_fn``.

  Args:
    scores: ``[..., L]`` the ranker's logits.
    labels: ``[..., L]`` clicks or graded labels; the pairs' gains.
    where: ``bool[..., L]`` the valid items (None: all).
    segments: optional ``[..., L]`` segment ids, passed to :func:`rax.dcg_lambdaweight`: only items of one segment
      form pairs.
    weights: optional ``[..., L]`` per-item weights, passed to :func:`rax.dcg_lambdaweight`.

  Returns:
    ``[..., L * L]`` the LambdaRank weight of every ordered pair of items (row-major: pair ``(i, j)`` at
    ``i * L + j``).

  >>> lam = lambdarank_weights(jnp.array([2.0, 1.0]), jnp.array([0.0, 1.0]))
  >>> print(lam.reshape(2, 2))  # |1 - 0| x |1 - 1/log2(3)|
  [[0.         0.36907023]
   [0.36907023 0.        ]]
  """
  lam = rax.dcg_lambdaweight(scores, labels, where=where, segments=segments, weights=weights)
  return lam / scores.shape[-1]
