r"""Naive click losses: clicks taken as relevance labels (biased baseline).

Both follow rax's calling convention and reduce like rax: the pointwise loss
averages over valid items, the listwise loss over lists with a valid item.
"""

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import rax

__all__ = ["naive_sigmoid_loss", "naive_softmax_loss"]


def naive_sigmoid_loss(scores: jax.Array, clicks: jax.Array, *, where: Optional[jax.Array] = None,
                       weights: Optional[jax.Array] = None,
                       reduce_fn: Optional[Callable] = jnp.mean) -> jax.Array:
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

  >>> s, c = jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0])
  >>> round(float(naive_sigmoid_loss(s, c)), 4)  # log 2
  0.6931
  """
  return rax.pointwise_sigmoid_loss(scores, clicks, where=where, weights=weights, reduce_fn=reduce_fn)


def naive_softmax_loss(scores: jax.Array, clicks: jax.Array, *, where: Optional[jax.Array] = None,
                       weights: Optional[jax.Array] = None,
                       reduce_fn: Optional[Callable] = jnp.mean) -> jax.Array:
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

  >>> s, c = jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0])
  >>> round(float(naive_softmax_loss(s, c)), 4)  # log 2
  0.6931
  """
  return rax.softmax_loss(scores, clicks, where=where, weights=weights, reduce_fn=reduce_fn)
