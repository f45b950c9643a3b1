r"""Pairwise Differentiable Gradient Descent (PDGD; Oosterhuis & de Rijke, CIKM'18).

PDGD is an online method: each query is shown a ranking :math:`R` sampled
from the Plackett-Luce model of the current scores
(:func:`~ultr_jax.simulation.plackett_luce_sample`). From the clicks it infers
that a clicked item is preferred over every unclicked item the user
considered, the items ranked above the last click and the one right after
it. Each inferred pair :math:`d_k \succ d_l` is weighted by how likely the
same ranking was with the two items swapped (:math:`R^*`),

.. math::
    \rho(d_k, d_l, R) = \frac{P(R^* \mid f)}{P(R \mid f) + P(R^* \mid f)},

which makes the expected gradient unbiased with respect to position bias
(the paper's Theorem 1), and the gradient is

.. math::
    \nabla f \approx \sum_{d_k \succ d_l} \rho(d_k, d_l, R)\,
    \nabla \frac{e^{f(d_k)}}{e^{f(d_k)} + e^{f(d_l)}} .

:func:`pdgd_loss` is a surrogate whose negative gradient is exactly that
estimate, so any optax optimiser can follow it.

Three switches take PDGD apart, one piece each (all default to PDGD):
``pairs="all"`` infers a clicked item over every unclicked displayed one,
not just the considered ones; ``debias=False`` weights every pair 1, not
:math:`\rho`; ``surrogate="log_probability"`` maximises the log of the pair
probability (the logistic / BPR loss) instead of the probability. With all
three switched it is the naive pairwise loss over the displayed items
(:func:`~ultr_jax.losses.naive_pairwise_loss` summed per list).

Both functions are jitted (``top_k``, ``reduce_fn`` and the switches static): a call outside
``jit`` compiles the whole loss once per shape instead of dispatching its
many small ops one by one.
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from ultr_jax._numerics import as_float
from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["pdgd_pair_weights", "pdgd_loss"]


def _display(scores, positions, clicks, where, top_k):
  """Scores, clicks and validity in displayed order, the first ``K`` slots."""
  where = _utils.as_where(where, scores.shape)
  order = jnp.argsort(jnp.where(where, positions, jnp.iinfo(jnp.int32).max), axis=-1, stable=True)
  take = lambda x: jnp.take_along_axis(x, order, axis=-1)
  size = scores.shape[-1]
  k = size if top_k is None else min(int(top_k), size)
  return take(scores), take(jnp.where(where, clicks, 0.0)), take(where), order, k


def _swap_log_ratio(s, valid, k):
  r"""``log P(R*) - log P(R)`` for swapping display slots ``a < b`` (both ``< k``); ``[..., k, k]``.

  Swapping the items at slots ``a < b`` changes only the Plackett-Luce
  denominators of slots ``t`` in ``(a, b]``: the item at ``b`` leaves their
  remaining set and the item at ``a`` joins it. The remaining set without the
  item at ``b`` is the slots ``[t, b)`` plus everything after ``b``, so its
  log-mass is ``logaddexp(log sum_{t <= u < b} e^{s_u}, D_{b+1})``: sums of
  exponentials only (no cancellation), ``O(k^3)`` whatever the list size.
  """
  s_inf = jnp.where(valid, s, -jnp.inf)
  d = jax.lax.cumlogsumexp(s_inf, axis=s.ndim - 1, reverse=True)  # D_t, [..., L]
  d_after = jnp.concatenate([d[..., 1:], jnp.full(d.shape[:-1] + (1,), -jnp.inf, d.dtype)], axis=-1)[..., :k]
  d = d[..., :k]
  t = jnp.arange(k)
  head = s_inf[..., :k]
  # P[b, t] = log sum_{t <= u < b} e^{s_u} (-inf for t >= b).
  span = (t[None, None, :] >= t[None, :, None]) & (t[None, None, :] < t[:, None, None])  # [b, t, u]
  span = span & valid[..., None, None, :k]
  p = jax.nn.logsumexp(jnp.where(span, head[..., None, None, :], -jnp.inf), axis=-1, where=span)
  p = jnp.where(jnp.any(span, axis=-1), p, -jnp.inf)
  e = jnp.logaddexp(p, d_after[..., :, None])  # E[b, t]: the slots from t on, without b
  # D'[a, b, t] = logaddexp(E[b, t], s_a).
  d_swap = jnp.logaddexp(e[..., None, :, :], head[..., :, None, None])
  between = (t[None, None, :] > t[:, None, None]) & (t[None, None, :] <= t[None, :, None])  # a < t <= b
  ratio = jnp.sum(jnp.where(between, d[..., None, None, :] - jnp.where(between, d_swap, 0.0), 0.0), axis=-1)
  upper = t[:, None] < t[None, :]
  return jnp.where(upper, ratio, jnp.swapaxes(ratio, -1, -2))  # symmetric in (a, b)


PAIRS = ("considered", "all")
SURROGATES = ("probability", "log_probability")


def check_switches(pairs: str, surrogate: str = "probability") -> None:
  """Raises a ValueError naming the switch when ``pairs`` or ``surrogate`` is not one of its values."""
  if pairs not in PAIRS:
    raise ValueError(f"pdgd: pairs must be one of {PAIRS}, got {pairs!r}")
  if surrogate not in SURROGATES:
    raise ValueError(f"pdgd: surrogate must be one of {SURROGATES}, got {surrogate!r}")


@functools.partial(jax.jit, static_argnames=("top_k", "pairs", "debias"))
def pdgd_pair_weights(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  positions: jax.Array,
  where: Optional[jax.Array] = None,
  top_k: Optional[int] = None,
  pairs: str = "considered",
  debias: bool = True,
) -> jax.Array:
  r"""PDGD's inferred preference pairs and their debiasing weights, in displayed order.

  .. math::
      w_{ab} = c_a (1 - c_b)\,\mathbb{1}[a, b \le \ell + 1]\,
      \sigma\bigl(\log P(R^*_{ab} \mid f) - \log P(R \mid f)\bigr)

  for display slots :math:`a, b` (0-based), :math:`\ell` the slot of the last
  click and :math:`R^*_{ab}` the ranking with slots :math:`a, b` swapped.

  Args:
    scores: ``[..., L]`` the scores :math:`f` the ranking was sampled from.
    clicks: ``[..., L]`` 0/1 clicks.
    positions: ``int[..., L]`` 0-based displayed positions (a permutation
      per list, masked items last).
    where: ``bool[..., L]``.
    top_k: only the first ``k`` slots are displayed (default: all ``L``).
    pairs: ``"considered"`` (PDGD: :math:`a, b \le \ell + 1`) or ``"all"``
      (every displayed slot).
    debias: False sets :math:`\sigma(\cdot)` to 1 (unweighted pairs).

  Returns:
    ``[..., K, K]`` (the scores' dtype) with ``K = min(top_k, L)``: entry ``[a, b]`` is the
    weight of "the item at slot ``a`` beats the item at slot ``b``"; zero
    for pairs PDGD does not infer. No gradient flows through it.

  >>> w = pdgd_pair_weights(jnp.zeros(3), jnp.array([0.0, 1.0, 0.0]), positions=jnp.arange(3))
  >>> print(w)  # equal scores: every swap is as likely, rho = 1/2
  [[0.  0.  0. ]
   [0.5 0.  0.5]
   [0.  0.  0. ]]
  """
  check_switches(pairs)
  scores = jax.lax.stop_gradient(as_float(scores))
  s, c, valid, _, k = _display(scores, positions, jnp.asarray(clicks, scores.dtype), where, top_k)
  c, shown = c[..., :k], valid[..., :k]
  slots = jnp.arange(k)
  last = jnp.max(jnp.where((c > 0) & shown, slots, -1), axis=-1, keepdims=True)
  considered = shown & (slots <= last + 1) if pairs == "considered" else shown
  clicked = considered & (c > 0)
  pref = clicked[..., :, None] & (considered & (c <= 0))[..., None, :]
  if not debias:
    return pref.astype(s.dtype)
  rho = jax.nn.sigmoid(_swap_log_ratio(s, valid, k))
  return jnp.where(pref, rho, 0.0)


@register_loss("pdgd")
@functools.partial(jax.jit, static_argnames=("top_k", "reduce_fn", "pairs", "debias", "surrogate"))
def pdgd_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  positions: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  top_k: Optional[int] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
  pairs: str = "considered",
  debias: bool = True,
  surrogate: str = "probability",
) -> jax.Array:
  r"""PDGD surrogate loss: its negative gradient is PDGD's gradient estimate.

  .. math::
      \ell(f) = -\sum_{a, b} v_a\, w_{ab}\, \sigma\bigl(f(d_a) - f(d_b)\bigr)

  with :math:`w_{ab}` from :func:`pdgd_pair_weights` (held constant) and
  :math:`\sigma(f_a - f_b) = e^{f_a} / (e^{f_a} + e^{f_b})`, the pair
  probability of the paper's Eq. 5. Oosterhuis & de Rijke, CIKM'18.

  Args:
    scores: ``[..., L]`` current scores (the ranking was sampled from them).
    clicks: ``[..., L]`` 0/1 clicks on the displayed ranking.
    positions: ``int[..., L]`` 0-based displayed positions.
    where: ``bool[..., L]``.
    weights: optional ``[..., L]`` per-item weights :math:`v` of the clicked item.
    top_k: display cut-off.
    pairs, debias: see :func:`pdgd_pair_weights`.
    surrogate: ``"probability"`` (PDGD: :math:`\sigma`) or
      ``"log_probability"`` (:math:`\log \sigma`, the logistic loss).
    reduce_fn: reduction over lists of the per-list sums (rax's
      ``safe_reduce``: lists with no valid item do not count in a mean);
      None returns the per-list losses ``[...]``.

  Returns:
    The loss: a scalar, or the ``[...]`` per-list losses with ``reduce_fn=None``.

  >>> loss = pdgd_loss(jnp.zeros(3), jnp.array([0.0, 1.0, 0.0]), positions=jnp.arange(3))
  >>> print(round(float(loss), 4))  # two pairs, rho = sigma = 1/2
  -0.5
  """
  check_switches(pairs, surrogate)
  scores = as_float(scores)
  where = _utils.as_where(where, scores.shape)
  w = pdgd_pair_weights(scores, clicks, positions=positions, where=where, top_k=top_k, pairs=pairs, debias=debias)
  s, _, _, order, k = _display(scores, positions, jnp.zeros_like(scores), where, top_k)
  s = s[..., :k]
  if weights is not None:
    v = jnp.take_along_axis(jnp.where(where, weights, 0.0), order, axis=-1)[..., :k]
    w = w * jax.lax.stop_gradient(v)[..., :, None]
  on = w > 0
  diff = jnp.where(on, s[..., :, None] - s[..., None, :], 0.0)
  term = jax.nn.sigmoid(diff) if surrogate == "probability" else jax.nn.log_sigmoid(diff)
  per_list = -jnp.sum(jnp.where(on, w * term, 0.0), axis=(-2, -1))
  return _utils.reduce_lists(per_list, where, reduce_fn)
