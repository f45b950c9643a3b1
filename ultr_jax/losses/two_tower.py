r"""Two-tower (additive / PBM) click loss.

A relevance tower :math:`r` and an observation (bias) tower :math:`o` are
combined into a click probability and trained with sigmoid cross-entropy on
clicks; only :math:`r` is used for ranking.

* ``"additive"``: :math:`P(C{=}1) = \sigma(r + o)` (additive logits;
  Zhuang et al., "Cross-Positional Attention for Debiasing Clicks", WWW'21;
  Yan et al., "Scale Calibration of Deep Ranking Models", KDD'22);
* ``"product"``: :math:`P(C{=}1) = \sigma(r)\,\sigma(o)` (the PBM,
  Richardson et al. 2007; Wang et al. 2018), with
  :math:`\log P(C{=}0) = \log(\sigma(-r) + \sigma(r)\,\sigma(-o))`
  (a sum of positive terms: no cancellation, exact at extreme logits).
"""

from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = ["two_tower_log_probs", "two_tower_loss"]


def two_tower_log_probs(
  scores: jax.Array, observation_logits: jax.Array, *, mode: str = "additive"
) -> tuple[jax.Array, jax.Array]:
  r"""``(log P(C=1), log P(C=0))`` of a two-tower click model, ``[..., L]`` each.

  ``scores`` are the relevance logits :math:`r`, ``observation_logits`` the bias logits :math:`o`.

  Args:
    scores: ``[..., L]`` relevance-tower logits :math:`r`.
    observation_logits: ``[..., L]`` bias-tower logits :math:`o`.
    mode: ``"additive"`` (the click logit is :math:`r + o`) or ``"product"`` (the click probability is
      :math:`\sigma(r)\sigma(o)`).

  Returns:
    ``(log P(C = 1), log P(C = 0))``, each ``[..., L]``, computed in log space.

  >>> lp, ln = two_tower_log_probs(jnp.array(0.0), jnp.array(0.0), mode="product")
  >>> round(float(jnp.exp(lp)), 4), round(float(jnp.exp(ln)), 4)
  (0.25, 0.75)
  """
  if mode == "additive":
    z = scores + observation_logits
    return jax.nn.log_sigmoid(z), jax.nn.log_sigmoid(-z)
  if mode == "product":
    log_r, log_o = jax.nn.log_sigmoid(scores), jax.nn.log_sigmoid(observation_logits)
    # 1 - sigma(r) sigma(o) = sigma(-r) + sigma(r) sigma(-o): positive terms, no cancellation.
    log_n = jnp.logaddexp(jax.nn.log_sigmoid(-scores), log_r + jax.nn.log_sigmoid(-observation_logits))
    return log_r + log_o, log_n
  raise ValueError(f"unknown two-tower mode {mode!r} (additive, product)")


@register_loss("two_tower", trains=("observation_logits",))
def two_tower_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  observation_logits: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  mode: str = "additive",
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Sigmoid cross-entropy of the two-tower click model on clicks.

  .. math::
      \ell = -\sum_i c_i \log P(C_i{=}1) + (1 - c_i)\log P(C_i{=}0)

  Args:
    scores: ``[..., L]`` relevance-tower logits :math:`r`.
    clicks: ``[..., L]`` clicks.
    observation_logits: ``[..., L]`` bias-tower logits :math:`o`.
    where: ``[..., L]`` mask.
    weights: optional ``[..., L]`` per-item weights.
    mode: ``"additive"`` or ``"product"``.
    reduce_fn: over valid items (None: ``[..., L]``).

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values (0 where masked) with ``reduce_fn=None``.

  >>> z = jnp.zeros(2); c = jnp.array([1.0, 0.0])
  >>> round(float(two_tower_loss(z, c, observation_logits=z, mode="product")), 4)  # (log 4 + log 4/3) / 2
  0.837
  """
  where = _utils.as_where(where, scores.shape)
  r = jnp.where(where, scores, 0.0)
  o = jnp.where(where, observation_logits, 0.0)
  log_p, log_n = two_tower_log_probs(r, o, mode=mode)
  loss = -(clicks * log_p + (1.0 - clicks) * log_n)
  if weights is not None:
    loss = loss * weights
  return _utils.reduce_loss(loss, where, reduce_fn)
