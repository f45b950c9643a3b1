r"""Importance-weighting estimators of a target ranker's expected reward from a click log.

The log is ``[B, L]`` sessions in display order (item :math:`l` of session :math:`i` shown at position
:math:`l`), clicks :math:`c_{il}`, per-position reward weights :math:`w_l` (ones: the number of clicks; DCG's
discounts: :func:`~ultr_jax.evaluation.dcg_weights`), reward :math:`r_{il} = w_l c_{il}`. The target ranker is
its ``scores`` of the logged items (``temperature=0``: the deterministic ranking; ``> 0``: Plackett-Luce); the
logging policy enters as its :class:`~ultr_jax.evaluation.Propensities` of the logged rankings. Each estimator
(McInerney et al., KDD'20, Eqs. 1-4; Li et al., WSDM'18; Swaminathan et al., NeurIPS'17)

.. math::
    \hat V = \frac{1}{n} \sum_i \sum_l \rho_{il}\, r_{il}

differs in its weight :math:`\rho_{il}`: the whole ranking's ratio (standard IPS, unbiased for any click
behaviour when the logging policy gives every target ranking positive probability), the item-position
ratio (independent IPS, unbiased when a click depends only on the item and its position, e.g. the PBM), the
prefix ratio (reward-interaction IPS, unbiased when a click depends only on the items above and at its
position, e.g. the cascade), or the pseudo-inverse weight (unbiased when the expected slate reward is a sum
over (item, position) pairs). They equal Open Bandit Pipeline's ``SlateStandardIPS``,
``SlateIndependentIPS``, ``SlateRewardInteractionIPS`` (with ``reward`` :math:`= w_l c_{il}`) and their
``SelfNormalized*`` versions (``self_normalize=True``: per position, :math:`\sum_i \rho_{il} r_{il} / \sum_i
\rho_{il}`).

A weight clip ``clip`` replaces :math:`\rho` by :math:`\min(\rho, \text{clip})` (the pseudo-inverse's signed
weight by :math:`\max(-\text{clip}, \min(\rho, \text{clip}))`) and :attr:`Estimate.num_clipped` counts the
weights it changed. ``session_weights [B]`` weights the sessions (the bootstrap's resampling counts).
All are pure and jittable (``temperature``, ``top_k``, ``clip``, ``self_normalize`` static).
"""

from typing import Optional

import jax.numpy as jnp

from ultr_jax.evaluation import _common as C
from ultr_jax.evaluation.policies import (
  Propensities,
  dcg_weights,
  plackett_luce_propensities,
  prefix_probs,
  target_ranks,
)
from ultr_jax.types import Array, PRNGKey

__all__ = [
  "standard_ips",
  "independent_ips",
  "reward_interaction_ips",
  "pseudo_inverse",
  "click_dcg",
  "target_propensities",
]


def target_propensities(
  scores: Array,
  *,
  where: Optional[Array] = None,
  temperature: float = 0.0,
  top_k: Optional[int] = None,
  matrix: bool = False,
  key: Optional[PRNGKey] = None,
  num_samples: int = 10_000,
  max_enumeration: int = 5040,
) -> Propensities:
  """The target ranker's :class:`Propensities` of the logged rankings (:func:`plackett_luce_propensities`
  with ``temperature=0`` by default: the deterministic ranking by ``scores``).

  Args:
    scores: ``[B, L]`` target scores of the logged items, display order.
    where, temperature, top_k, matrix, key, num_samples, max_enumeration: as
      :func:`~ultr_jax.evaluation.plackett_luce_propensities`.

  Returns:
    :class:`Propensities`.

  >>> print(target_propensities(jnp.array([2.0, 1.0, 3.0])).prefix)
  [0. 0. 0.]
  """
  return plackett_luce_propensities(
    scores,
    where=where,
    temperature=temperature,
    top_k=top_k,
    matrix=matrix,
    key=key,
    num_samples=num_samples,
    max_enumeration=max_enumeration,
  )


def _target_or_computed(target, scores, where, temperature, top_k, key, num_samples, max_enumeration, matrix=False):
  """``target`` if given (with its ``matrix`` when one is needed), else the target's propensities from ``scores``."""
  if target is not None and (target.matrix is not None or not matrix):
    return target
  return target_propensities(
    scores,
    where=where,
    temperature=temperature,
    top_k=top_k,
    matrix=matrix,
    key=key,
    num_samples=num_samples,
    max_enumeration=max_enumeration,
  )


def standard_ips(
  scores: Array,
  clicks: Array,
  *,
  logging: Propensities,
  target: Optional[Propensities] = None,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  clip: Optional[float] = None,
  self_normalize: bool = False,
  session_weights: Optional[Array] = None,
) -> C.Estimate:
  r"""Standard (ranking-level) IPS: the whole displayed ranking's probability ratio.

  .. math::
      \hat V_{\mathrm{SIPS}} = \frac{1}{n} \sum_i \frac{\pi_e(a_{i,1:K})}{\pi_b(a_{i,1:K})} \sum_{l < K} w_l c_{il}

  (McInerney et al., KDD'20, Eq. 1; Open Bandit Pipeline's ``SlateStandardIPS``). Unbiased for any click
  behaviour when :math:`\pi_b(y) > 0` wherever :math:`\pi_e(y) > 0`.

  Args:
    scores: ``[B, L]`` target scores of the logged items (display order).
    clicks: ``[B, L]`` 0/1.
    logging: the logging policy's :class:`Propensities` (``ranking`` is read).
    target: the target's :class:`Propensities` of the logged rankings, if already computed
      (:func:`target_propensities`; e.g. once per distinct display of a query); None: from ``scores``.
    where: ``bool[B, L]``.
    weights: ``[L]`` or ``[B, L]`` per-position reward weights (default ones).
    top_k: the displayed prefix :math:`K` (rewards and ratios over it).
    temperature: the target's Plackett-Luce temperature (0: deterministic).
    clip: weight clip (None: none).
    self_normalize: divide by the mean weight (OBP's ``SelfNormalizedSlateStandardIPS``).
    session_weights: ``[B]`` session weights (bootstrap counts).

  Returns:
    :class:`Estimate`.

  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> b = plackett_luce_propensities(jnp.zeros((2, 2)), temperature=1.0)  # uniform logging: each ranking 1/2
  >>> est = standard_ips(jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]]), logging=b)
  >>> print(est.value, est.terms)
  1.0 [2. 0.]
  """
  scores, where, r, active, mass = C.prepare(scores, clicks, where, weights, top_k, session_weights)
  k = _cut(scores.shape[-1], top_k)
  pe = prefix_probs(scores, where, temperature)[..., k - 1] if target is None else target.ranking
  rho, n_clip = C.clip_weights(C.ratio(pe, logging.ranking), clip, mass > 0)
  rho = jnp.broadcast_to(rho[..., None], r.shape)
  return C.weighted_estimate(r, rho, active, mass, self_normalize, n_clip)


def _cut(size, top_k):
  return size if top_k is None else max(1, min(int(top_k), size))


def independent_ips(
  scores: Array,
  clicks: Array,
  *,
  logging: Propensities,
  target: Optional[Propensities] = None,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  clip: Optional[float] = None,
  self_normalize: bool = False,
  session_weights: Optional[Array] = None,
  key: Optional[PRNGKey] = None,
  num_samples: int = 10_000,
  max_enumeration: int = 5040,
) -> C.Estimate:
  r"""Independent IPS: each click weighted by its item-position probability ratio.

  .. math::
      \hat V_{\mathrm{IIPS}} = \frac{1}{n} \sum_i \sum_{l < K} \frac{\pi_e(y_l = a_{il})}{\pi_b(y_l = a_{il})}\, w_l c_{il}

  (Li et al., WSDM'18, Eq. 7; McInerney et al., KDD'20, Eq. 2; OBP's ``SlateIndependentIPS``). Unbiased when the
  click on an item depends only on the item and its position (the PBM) and :math:`\pi_b(y_l = d) > 0`
  wherever :math:`\pi_e(y_l = d) > 0`.

  Args:
    scores, clicks, where, weights, top_k, temperature, clip, self_normalize, session_weights: as
      :func:`standard_ips`.
    logging: the logging policy's :class:`Propensities` (``item_position`` is read).
    target: as :func:`standard_ips`.
    key, num_samples, max_enumeration: the target's item-position marginals when sampled (a Plackett-Luce
      target over more than ``max_enumeration`` prefixes; :func:`~ultr_jax.evaluation.plackett_luce_propensities`).

  Returns:
    :class:`Estimate`.

  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> b = plackett_luce_propensities(jnp.zeros((2, 2)), temperature=1.0)  # each item at each position 1/2
  >>> est = independent_ips(jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[1.0, 1.0], [0.0, 1.0]]), logging=b)
  >>> print(est.value, est.terms)
  2.0 [4. 0.]
  """
  scores, where, r, active, mass = C.prepare(scores, clicks, where, weights, top_k, session_weights)
  target = _target_or_computed(target, scores, where, temperature, top_k, key, num_samples, max_enumeration)
  pe = target.item_position
  rho, n_clip = C.clip_weights(C.ratio(pe, logging.item_position), clip, active & (mass[:, None] > 0))
  return C.weighted_estimate(r, rho, active, mass, self_normalize, n_clip)


def reward_interaction_ips(
  scores: Array,
  clicks: Array,
  *,
  logging: Propensities,
  target: Optional[Propensities] = None,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  clip: Optional[float] = None,
  self_normalize: bool = False,
  session_weights: Optional[Array] = None,
) -> C.Estimate:
  r"""Reward-interaction IPS: each click weighted by the probability ratio of the prefix down to it.

  .. math::
      \hat V_{\mathrm{RIPS}} = \frac{1}{n} \sum_i \sum_{l < K} \frac{\pi_e(a_{i,1:l})}{\pi_b(a_{i,1:l})}\, w_l c_{il}

  (McInerney et al., KDD'20, Eqs. 3-4; OBP's ``SlateRewardInteractionIPS``). Unbiased when a click depends
  only on the items at and above its position (cascade behaviour: the cascade model, DCM, DBN).

  Args:
    scores, clicks, where, weights, top_k, temperature, clip, self_normalize, session_weights: as
      :func:`standard_ips`.
    logging: the logging policy's :class:`Propensities` (``prefix`` is read).
    target: as :func:`standard_ips`.

  Returns:
    :class:`Estimate`.

  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> b = plackett_luce_propensities(jnp.zeros((2, 2)), temperature=1.0)  # prefixes 1/2, 1/2
  >>> est = reward_interaction_ips(jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[1.0, 1.0], [0.0, 1.0]]), logging=b)
  >>> print(est.value, est.terms)
  2.0 [4. 0.]
  """
  scores, where, r, active, mass = C.prepare(scores, clicks, where, weights, top_k, session_weights)
  pe = prefix_probs(scores, where, temperature) if target is None else target.prefix
  rho, n_clip = C.clip_weights(C.ratio(pe, logging.prefix), clip, active & (mass[:, None] > 0))
  return C.weighted_estimate(r, rho, active, mass, self_normalize, n_clip)


def pseudo_inverse(
  scores: Array,
  clicks: Array,
  *,
  logging: Propensities,
  target: Optional[Propensities] = None,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  clip: Optional[float] = None,
  self_normalize: bool = False,
  session_weights: Optional[Array] = None,
  key: Optional[PRNGKey] = None,
  num_samples: int = 10_000,
  max_enumeration: int = 5040,
) -> C.Estimate:
  r"""The pseudo-inverse estimator: a slate reward weighted through the logging policy's pair matrix.

  .. math::
      \hat V_{\mathrm{PI}} = \frac{1}{n} \sum_i \theta_i \sum_{l < K} w_l c_{il}, \qquad
      \theta_i = q_{\pi_e}^\top \Gamma_{\pi_b}^{\dagger}\, \mathbb{1}_{a_i}

  with :math:`q_{\pi_e} = \mathbb{E}_{\pi_e}[\mathbb{1}_y]` the target's item-position marginals,
  :math:`\Gamma_{\pi_b} = \mathbb{E}_{\pi_b}[\mathbb{1}_y \mathbb{1}_y^\top]` the logging policy's pairwise ones
  and :math:`\mathbb{1}_a` the logged ranking's (item, position) indicator (Swaminathan et al., NeurIPS'17,
  Eqs. 3-4; Moore-Penrose pseudo-inverse). Unbiased when the expected reward of a ranking is a sum over its
  (item, position) pairs (the PBM) and the logging policy covers the target's. ``self_normalize``: the
  weighted PI, :math:`\sum_i \theta_i r_i / \sum_i \theta_i` (their Section 4).

  Args:
    scores, clicks, where, weights, top_k, temperature, clip, self_normalize, session_weights: as
      :func:`standard_ips` (``clip`` bounds :math:`|\theta_i|`).
    logging: the logging policy's :class:`Propensities` with ``pairs``
      (``plackett_luce_propensities(..., pairs=True)``).
    target: as :func:`standard_ips`, with ``matrix``.
    key, num_samples, max_enumeration: as :func:`independent_ips`.

  Returns:
    :class:`Estimate`.

  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> b = plackett_luce_propensities(jnp.zeros((2, 2)), temperature=1.0, pairs=True)
  >>> est = pseudo_inverse(jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([[1.0, 0.0], [0.0, 1.0]]), logging=b)
  >>> print(est.value.round(4), est.terms.round(4))
  1.0 [2. 0.]
  """
  scores, where, r, active, mass = C.prepare(scores, clicks, where, weights, top_k, session_weights)
  if logging.pairs is None:
    raise ValueError("pseudo_inverse: logging.pairs is required (plackett_luce_propensities(..., pairs=True))")
  size = scores.shape[-1]
  target = _target_or_computed(target, scores, where, temperature, top_k, key, num_samples, max_enumeration, True)
  assert target.matrix is not None  # computed with pairs=True
  q = target.matrix.reshape(scores.shape[:-1] + (size * size,))
  shown = jnp.eye(size, dtype=bool) & active[..., :, None]
  indicator = shown.reshape(scores.shape[:-1] + (size * size,)).astype(jnp.float32)
  gamma_pinv = jnp.linalg.pinv(logging.pairs, hermitian=True)
  theta = jnp.einsum("...i,...ij,...j->...", q, gamma_pinv, indicator)
  valid = (mass > 0) & jnp.any(active, axis=-1)
  n_clip = jnp.zeros((), jnp.int32)
  if clip is not None:
    n_clip = jnp.sum((jnp.abs(theta) > clip) & valid).astype(jnp.int32)
    theta = jnp.clip(theta, -clip, clip)
  slate = jnp.sum(r, axis=-1, keepdims=True)
  return C.weighted_estimate(slate, theta[..., None], valid[..., None], mass, self_normalize, n_clip)


def click_dcg(
  scores: Array,
  clicks: Array,
  *,
  propensities: Array,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  normalize: bool = False,
  clip: Optional[float] = None,
  session_weights: Optional[Array] = None,
) -> C.Estimate:
  r"""A ranker's DCG (nDCG) from logged clicks weighted by inverse examination propensities.

  .. math::
      \widehat{\mathrm{DCG}} = \frac{1}{n} \sum_i \sum_j \frac{c_{ij}}{\rho_{ij}}\, \lambda(\mathrm{rank}_{e}(j)),
      \qquad \lambda(k) = \frac{1}{\log_2(k + 2)}\,\mathbb{1}[k < K]

  the counterfactual evaluation of Joachims et al. (WSDM'17, Section 4, the IPS estimate of an additive
  metric) with :math:`\rho_{ij}` the examination probability of the item where the log showed it (known,
  harvested by :func:`~ultr_jax.graph.harvest_propensities` as ``table[position]``, or
  :func:`~ultr_jax.evaluation.model_examination` of a fitted click model). Unbiased for the DCG with gains
  :math:`P(C = 1 \mid E = 1)` (the attraction) when a click is examination times attraction (PBM) with the
  given examination. ``normalize``: each session's estimate divided by the DCG of the ideal ordering of its
  estimated gains :math:`c/\rho` (a ratio: consistent, not unbiased). ``clip`` bounds :math:`1/\rho`.

  Args:
    scores: ``[B, L]`` the ranker's scores of the logged items (its deterministic ranking is evaluated).
    clicks: ``[B, L]`` 0/1.
    propensities: ``[B, L]`` examination probabilities of the logged items where they were shown.
    where: ``bool[B, L]``.
    weights: ``[L]`` the metric's discount per target rank (default :func:`dcg_weights`).
    top_k: the metric's cut-off :math:`K` (DCG@K).
    normalize: nDCG (per-session ideal normaliser).
    clip: bound on the inverse propensity :math:`1/\rho` (None: none).
    session_weights: ``[B]`` session weights.

  Returns:
    :class:`Estimate`.

  >>> est = click_dcg(jnp.array([[0.0, 1.0]]), jnp.array([[0.0, 1.0]]), propensities=jnp.array([[1.0, 0.5]]))
  >>> print(est.value)  # the clicked item (weight 1 / 0.5) is the target's first
  2.0
  """
  scores, where, _, _, mass = C.prepare(scores, None, where, None, None, session_weights)
  size = scores.shape[-1]
  lam = dcg_weights(size) if weights is None else jnp.asarray(weights, jnp.float32)
  lam = C.position_weights(scores.shape, lam, top_k)
  inv = jnp.where(where, C.safe_div(jnp.ones_like(scores), jnp.asarray(propensities, jnp.float32)), 0.0)
  inv, n_clip = C.clip_weights(inv, clip, where & (jnp.asarray(clicks) > 0) & (mass[:, None] > 0))
  gain = jnp.where(where, jnp.asarray(clicks, jnp.float32) * inv, 0.0)
  ranks = target_ranks(scores, where=where)
  dcg = jnp.sum(gain * jnp.take_along_axis(lam, ranks, axis=-1), axis=-1)
  if normalize:
    ideal = jnp.sum(-jnp.sort(-gain, axis=-1) * lam, axis=-1)
    dcg = C.safe_div(dcg, ideal)
  ones = jnp.ones(dcg.shape + (1,), bool)
  return C.weighted_estimate(dcg[..., None], jnp.ones_like(dcg)[..., None], ones, mass, False, n_clip)
