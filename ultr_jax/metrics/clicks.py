r"""Click-prediction metrics: MSE, log-likelihood and perplexity per rank.

``fn(click_prob, clicks, *, where=None, reduce_fn=jnp.mean)``: item-level
values (``reduce_fn=None`` returns ``[..., L]``, zero where masked), reduced
over the valid items. ``clicks`` may be 0/1 or click-through rates.
Probabilities may be given as logits (``logits=True``); log-likelihoods are
computed in log space (``jax.nn.log_sigmoid``), probabilities are clipped
to ``[eps, 1 - eps]``. Perplexity per rank follows Dupret & Piwowarski
(SIGIR'08) and CLAX: item ``i`` of a list is the document at rank ``i + 1``.
"""

from typing import Optional

import jax
import jax.numpy as jnp
import rax

from ultr_jax.types import Array, ReduceFn

__all__ = ["click_mse", "click_log_likelihood", "click_perplexity_per_rank", "click_perplexity"]


def _log_probs(pred, logits, eps):
  pred = jnp.asarray(pred, jnp.float32)
  if logits:
    return jax.nn.log_sigmoid(pred), jax.nn.log_sigmoid(-pred)
  p = jnp.clip(pred, eps, 1.0 - eps)
  return jnp.log(p), jnp.log1p(-p)


def click_mse(
  click_prob: Array, clicks: Array, *, where: Optional[Array] = None, reduce_fn: Optional[ReduceFn] = jnp.mean
) -> Array:
  r"""Squared error of predicted click probabilities (Identifiability 3.1.5's click MSE).

  .. math::
      \mathrm{MSE} = \frac{1}{|D|} \sum_{i \in D} (\hat p_i - c_i)^2

  Args:
    click_prob: ``[..., L]`` predicted click probability :math:`\hat p`.
    clicks: ``[..., L]`` clicks or CTRs :math:`c`.
    where: ``bool[..., L]``.
    reduce_fn: reduction over valid items, or None.

  Returns:
    scalar, or ``[..., L]`` with ``reduce_fn=None``.

  >>> print(round(float(click_mse(jnp.array([0.5, 0.2]), jnp.array([1.0, 0.0]))), 4))
  0.145
  """
  dtype = jnp.result_type(click_prob, clicks, jnp.float32)  # float64 stays
  se = (jnp.asarray(click_prob, dtype) - jnp.asarray(clicks, dtype)) ** 2
  return rax.utils.safe_reduce(se, where=where, reduce_fn=reduce_fn)


def click_log_likelihood(
  click_prob: Array,
  clicks: Array,
  *,
  where: Optional[Array] = None,
  logits: bool = False,
  eps: float = 1e-7,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Bernoulli log-likelihood of the clicks (nats).

  .. math::
      \ell_i = c_i \log \hat p_i + (1 - c_i) \log(1 - \hat p_i)

  Args:
    click_prob: ``[..., L]`` predicted probabilities (or logits with ``logits=True``).
    clicks: ``[..., L]`` clicks or CTRs.
    where: ``bool[..., L]``.
    logits: ``click_prob`` holds logits (uses ``log_sigmoid``).
    eps: probability clipping (``logits=False``).
    reduce_fn: reduction over valid items, or None.

  Returns:
    scalar, or ``[..., L]`` with ``reduce_fn=None``.

  >>> print(round(float(click_log_likelihood(jnp.array([0.5, 0.2]), jnp.array([1.0, 0.0]))), 4))
  -0.4581
  """
  log_p, log_q = _log_probs(click_prob, logits, eps)
  c = jnp.asarray(clicks, jnp.float32)
  ll = c * log_p + (1.0 - c) * log_q
  return rax.utils.safe_reduce(ll, where=where, reduce_fn=reduce_fn)


def click_perplexity_per_rank(
  click_prob: Array, clicks: Array, *, where: Optional[Array] = None, logits: bool = False, eps: float = 1e-7
) -> Array:
  r"""Click perplexity at every rank (Dupret & Piwowarski SIGIR'08).

  .. math::
      \mathrm{PPL}_r = 2^{-\frac{1}{N_r} \sum_{s} \log_2 P(C_{s,r} = c_{s,r})}

  averaged over every leading (session / query) axis; ranks with no valid
  item get perplexity 1. A perfect model scores 1, a coin 2.

  Args:
    click_prob: ``[..., L]`` predicted probabilities (or logits).
    clicks: ``[..., L]`` clicks.
    where: ``bool[..., L]``.
    logits: ``click_prob`` holds logits.
    eps: probability clipping.

  Returns:
    ``float32[L]``.

  >>> print(click_perplexity_per_rank(jnp.full((2, 2), 0.5), jnp.array([[1., 0.], [0., 0.]])))
  [2. 2.]
  """
  ll = click_log_likelihood(click_prob, clicks, where=where, logits=logits, eps=eps, reduce_fn=None)
  ll = ll.reshape((-1, ll.shape[-1]))
  if where is None:
    count = jnp.full((ll.shape[-1],), float(ll.shape[0]))
  else:
    count = jnp.sum(jnp.broadcast_to(where, jnp.shape(clicks)).reshape(ll.shape), axis=0, dtype=jnp.float32)
  mean_ll = jnp.sum(ll, axis=0) / jnp.maximum(count, 1.0)
  return jnp.exp(-mean_ll)  # 2^{-mean log2 p} = e^{-mean ln p}


def click_perplexity(
  click_prob: Array, clicks: Array, *, where: Optional[Array] = None, logits: bool = False, eps: float = 1e-7
) -> Array:
  r"""Mean click perplexity over the ranks that hold valid items.

  .. math::
      \mathrm{PPL} = \frac{1}{|R|} \sum_{r \in R} \mathrm{PPL}_r

  Args:
    click_prob, clicks, where, logits, eps: as :func:`click_perplexity_per_rank`.

  Returns:
    scalar.

  >>> print(float(click_perplexity(jnp.full((2, 3), 0.5), jnp.zeros((2, 3)))))
  2.0
  """
  ppl = click_perplexity_per_rank(click_prob, clicks, where=where, logits=logits, eps=eps)
  if where is None:
    valid = jnp.ones(ppl.shape, bool)
  else:
    w = jnp.broadcast_to(where, jnp.shape(clicks))
    valid = jnp.any(w.reshape((-1, w.shape[-1])), axis=0)
  return jnp.sum(jnp.where(valid, ppl, 0.0)) / jnp.maximum(jnp.sum(valid), 1)
