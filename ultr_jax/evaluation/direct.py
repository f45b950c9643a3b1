r"""Model-based estimators: a fitted click model predicts the clicks a target ranking would get.

The click model is any fittable model of the registry (:func:`~ultr_jax.simulation.click_models` ``("fittable")``,
a name or a :class:`~ultr_jax.simulation.ClickModel`) with its fitted probabilities
(:attr:`~ultr_jax.simulation.ClickModelFit.params`); its exact marginal click probabilities of any ranking come
through :func:`~ultr_jax.simulation.click_model_predict`, so nothing here knows a model by name.

* :func:`direct_method`: :math:`\hat V_{\mathrm{DM}} = \frac1n \sum_i \mathbb{E}_{y \sim \pi_e}
  \sum_l w_l \hat P(C_l = 1 \mid y)`.
* :func:`doubly_robust`: the direct method plus an importance-weighted correction of its residuals
  (independent or standard weights).
* :func:`cascade_doubly_robust`: Kiyohara et al.'s (WSDM'22) cascade-DR, with the click model's expected
  reward-to-go as the Q function (:func:`cascade_dr_tables`).
"""

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np  # noqa: F401 (the doctests')

from ultr_jax.evaluation import _common as C
from ultr_jax.evaluation.estimators import independent_ips, standard_ips
from ultr_jax.evaluation.policies import Propensities, prefix_probs, target_ranks
from ultr_jax.simulation.fitting import click_model_predict
from ultr_jax.types import Array, PRNGKey

__all__ = [
  "model_click_probabilities",
  "model_examination",
  "direct_method",
  "doubly_robust",
  "cascade_doubly_robust",
  "cascade_dr_tables",
]


def _take(x, idx):
  return jnp.take_along_axis(x, idx, axis=-1)


_SORT_FREE_MAX = 16  # up to this list size, ranks by O(L^2) comparisons that XLA fuses (CPU sorts are slow)


def _stable_ranks(key: Array) -> Array:
  """``int32[..., L]`` each entry's 0-based position in the stable ascending sort of ``key`` (ties by index):
  ``argsort(argsort(key, stable=True), stable=True)``, by counting the entries before it for short lists."""
  size = key.shape[-1]
  if size > _SORT_FREE_MAX:
    return jnp.argsort(jnp.argsort(key, axis=-1, stable=True), axis=-1, stable=True).astype(jnp.int32)
  j = jnp.arange(size)
  k_self, k_other = key[..., :, None], key[..., None, :]
  before = (k_other < k_self) | ((k_other == k_self) & (j[None, :] < j[:, None]))
  return jnp.sum(before, axis=-1, dtype=jnp.int32)


def _inverse_permutation(perm: Array) -> Array:
  """``int32[..., L]`` the inverse of the permutations ``perm [..., L]`` (``argsort(perm)``)."""
  size = perm.shape[-1]
  if size > _SORT_FREE_MAX:
    return jnp.argsort(perm, axis=-1, stable=True).astype(jnp.int32)
  j = jnp.arange(size, dtype=jnp.int32)
  return jnp.sum(jnp.where(perm[..., None, :] == j[:, None], j, 0), axis=-1, dtype=jnp.int32)


def model_click_probabilities(
  model: Any, params: dict, doc_ids: Array, ranks: Array, *, where: Optional[Array] = None
) -> Array:
  r"""A fitted click model's marginal click probability of each item when the items are shown at ``ranks``.

  .. math::
      \hat p_j = \hat P(C = 1 \text{ at rank } \mathrm{rank}_j \mid \text{the ranking})

  the model's exact marginals (:meth:`~ultr_jax.simulation.ClickModel.predict` through
  :func:`~ultr_jax.simulation.click_model_predict`) of the items reordered by ``ranks``, returned in the items'
  own order.

  Args:
    model: a fittable click model (name or instance).
    params: its fitted probabilities (:attr:`~ultr_jax.simulation.ClickModelFit.params`).
    doc_ids: ``int[..., L]`` the items' document ids.
    ranks: ``int[..., L]`` the 0-based rank each item is shown at (a permutation, masked items last).
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> p = {"attraction": jnp.array([0.5, 0.8])}
  >>> print(np.asarray(model_click_probabilities("cascade", p, jnp.array([0, 1]), jnp.array([1, 0]))).round(4))
  [0.1 0.8]
  """
  ids = jnp.asarray(doc_ids, jnp.int32)
  where = C.mask_of(ids, where)
  params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  big = jnp.iinfo(jnp.int32).max
  inverse = _stable_ranks(jnp.where(where, ranks, big))
  order = _inverse_permutation(inverse)
  w_sorted = _take(where, order)
  pred = click_model_predict(model, params, _take(ids, order), jnp.zeros(ids.shape, jnp.float32), where=w_sorted)
  return jnp.where(where, _take(pred["marginal"], inverse), 0.0)


def model_examination(model: Any, params: dict, doc_ids: Array, *, where: Optional[Array] = None) -> Array:
  r"""The examination propensity of each logged item at its logged position under a fitted click model.

  .. math::
      \hat\rho_l = \hat P(C_l = 1) / \hat a_{d_l}

  (marginal click probability over attraction: the examination probability for the models whose click is
  examination times attraction; for a chain model it is the marginal examination over the clicks above). The
  :func:`~ultr_jax.evaluation.click_dcg` propensities from a fitted model.

  Args:
    model, params: as :func:`model_click_probabilities`.
    doc_ids: ``int[..., L]`` the logged documents in display order.
    where: ``bool[..., L]``.

  Returns:
    ``float32[..., L]`` (0 where masked).

  >>> p = {"attraction": jnp.array([0.5, 0.8]), "examination": jnp.array([1.0, 0.5])}
  >>> print(model_examination("pbm", p, jnp.array([1, 0])))
  [1.  0.5]
  """
  ids = jnp.asarray(doc_ids, jnp.int32)
  ranks = jnp.broadcast_to(jnp.arange(ids.shape[-1], dtype=jnp.int32), ids.shape)
  p = model_click_probabilities(model, params, ids, ranks, where=where)
  a = jnp.asarray(params["attraction"], jnp.float32)[jnp.clip(ids, 0, params["attraction"].shape[0] - 1)]
  return C.safe_div(p, a)


def _sampled_ranks(key, scores, where, temperature, num_samples):
  """``[S, ..., L]`` target ranks: the deterministic ranking once (``temperature=0``) or Gumbel-max samples."""
  if temperature == 0:
    return target_ranks(scores, where=where)[None]
  if key is None:
    raise ValueError("a Plackett-Luce target (temperature > 0) needs key= for its Monte-Carlo rankings")
  g = jax.random.gumbel(key, (num_samples,) + scores.shape)
  z = jnp.where(where, scores / temperature, 0.0)
  return target_ranks(z + g, where=jnp.broadcast_to(where, g.shape))


def _dm_terms(scores, doc_ids, model, params, where, weights, top_k, temperature, key, num_samples):
  """``[B]`` each session's expected reward of the target under the model (Monte-Carlo mean for a PL target)."""
  C.check_options(temperature=temperature, top_k=top_k)
  ranks = _sampled_ranks(key, scores, where, temperature, num_samples)
  w = C.position_weights(scores.shape, weights, top_k)

  def value(rk):
    p = model_click_probabilities(model, params, doc_ids, rk, where=where)
    return jnp.sum(p * _take(w, rk), axis=-1)

  return jnp.mean(jax.lax.map(value, ranks), axis=0)


def direct_method(
  scores: Array,
  clicks: Array,
  *,
  doc_ids: Array,
  model: Any,
  params: dict,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  session_weights: Optional[Array] = None,
  key: Optional[PRNGKey] = None,
  num_samples: int = 100,
) -> C.Estimate:
  r"""The direct method: a fitted click model's expected reward of the target's ranking.

  .. math::
      \hat V_{\mathrm{DM}} = \frac1n \sum_i \mathbb{E}_{y \sim \pi_e(\cdot \mid i)} \sum_{l < K} w_l\,
      \hat P_\theta(C_l = 1 \mid y)

  (the direct method of Dudik et al., ICML'11, Section 2, with a click model as the reward model, as in
  Kiyohara et al., WSDM'22, Section 3). Unbiased when the click model is right; it has no variance from the
  log's clicks, only the model's error. A Plackett-Luce target is averaged over ``num_samples`` sampled
  rankings.

  Args:
    scores: ``[B, L]`` target scores of the logged items.
    clicks: ``[B, L]`` unused (the estimators' common signature).
    doc_ids: ``int[B, L]`` the logged documents' ids in the click model.
    model: a fittable click model (name or instance).
    params: its fitted probabilities.
    where, weights, top_k, temperature, session_weights: as :func:`~ultr_jax.evaluation.standard_ips`.
    key: PRNG key (a Plackett-Luce target).
    num_samples: sampled target rankings (a Plackett-Luce target).

  Returns:
    :class:`Estimate` (``num_clipped`` 0).

  >>> p = {"attraction": jnp.array([0.5, 0.8]), "examination": jnp.array([1.0, 0.5])}
  >>> est = direct_method(jnp.array([[0.0, 1.0]]), None, doc_ids=jnp.array([[0, 1]]), model="pbm", params=p)
  >>> print(est.value)  # 0.8 * 1 + 0.5 * 0.5
  1.05
  """
  del clicks
  scores, where, _, _, mass = C.prepare(scores, None, where, None, None, session_weights)
  dm = _dm_terms(scores, doc_ids, model, params, where, weights, top_k, temperature, key, num_samples)
  zero = jnp.zeros(scores.shape[:-1] + (1,))
  est = C.weighted_estimate(zero, zero, zero > 0, mass, False, jnp.zeros((), jnp.int32), offset=dm)
  n = jnp.sum(jnp.where(jnp.any(where, axis=-1), mass, 0.0))  # no importance weights: every session counts
  return est._replace(effective_sample_size=n, num_nonzero_weight=n)


def doubly_robust(
  scores: Array,
  clicks: Array,
  *,
  logging: Propensities,
  doc_ids: Array,
  target: Optional[Propensities] = None,
  model: Any,
  params: dict,
  kind: str = "independent",
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  clip: Optional[float] = None,
  self_normalize: bool = False,
  session_weights: Optional[Array] = None,
  key: Optional[PRNGKey] = None,
  num_samples: int = 100,
  max_enumeration: int = 5040,
) -> C.Estimate:
  r"""Doubly robust: the direct method plus importance-weighted residuals of the click model.

  .. math::
      \hat V_{\mathrm{DR}} = \hat V_{\mathrm{DM}} + \frac1n \sum_i \sum_{l < K} \rho_{il}\, w_l
      \bigl(c_{il} - \hat P_\theta(C_l = 1 \mid a_i)\bigr)

  (Dudik et al., ICML'11, Eq. 4, with the ranking weights :math:`\rho_{il}` of independent IPS, ``kind=
  "independent"``, or standard IPS, ``kind="standard"``; Kiyohara et al., WSDM'22, Section 3). Unbiased when the
  click model is right, or when the IPS estimator is unbiased and the model's click probability of an item
  depends only on the item and its position (a fitted PBM). ``self_normalize`` normalises the correction per
  position.

  Args:
    scores, clicks, where, weights, top_k, temperature, clip, self_normalize, session_weights: as
      :func:`~ultr_jax.evaluation.standard_ips`.
    logging: the logging policy's :class:`Propensities`.
    doc_ids, model, params: as :func:`direct_method`.
    target: the target's :class:`Propensities` if already computed (as :func:`~ultr_jax.evaluation.standard_ips`).
    kind: ``"independent"`` or ``"standard"``.
    key, num_samples: the direct method's sampled target rankings, and (with ``max_enumeration``) the
      target's item-position marginals for a Plackett-Luce target.
    max_enumeration: as :func:`~ultr_jax.evaluation.plackett_luce_propensities`.

  Returns:
    :class:`Estimate`.

  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> p = {"attraction": jnp.array([0.5, 0.8]), "examination": jnp.array([1.0, 0.5])}
  >>> b = plackett_luce_propensities(jnp.zeros((1, 2)), temperature=1.0)
  >>> est = doubly_robust(jnp.array([[1.0, 0.0]]), jnp.array([[1.0, 0.0]]), logging=b, doc_ids=jnp.array([[0, 1]]),
  ...                     model="pbm", params=p)
  >>> print(est.value.round(4))  # 0.9 + 2 * (1 - 0.5) + 2 * (0 - 0.4)
  1.1
  """
  if kind not in ("independent", "standard"):
    raise ValueError(f"doubly_robust: kind must be 'independent' or 'standard', got {kind!r}")
  scores, where, _, _, mass = C.prepare(scores, None, where, None, None, session_weights)
  dm = _dm_terms(scores, doc_ids, model, params, where, weights, top_k, temperature, key, num_samples)
  logged = jnp.broadcast_to(jnp.arange(scores.shape[-1], dtype=jnp.int32), scores.shape)
  q_hat = model_click_probabilities(model, params, doc_ids, logged, where=where)
  residual = jnp.asarray(clicks, jnp.float32) - q_hat
  common: dict[str, Any] = dict(
    logging=logging, target=target, where=where, weights=weights, top_k=top_k, temperature=temperature, clip=clip
  )
  common.update(self_normalize=self_normalize, session_weights=session_weights)
  if kind == "independent":
    ips = independent_ips(scores, residual, key=key, num_samples=num_samples, max_enumeration=max_enumeration, **common)
  else:
    ips = standard_ips(scores, residual, **common)
  terms = jnp.where(mass > 0, ips.terms + dm, 0.0)
  value = C.safe_div(jnp.sum(mass * terms), jnp.sum(mass))
  ratios = None if ips.ratios is None else jnp.concatenate([ips.ratios, C.plain_parts(dm, mass)], axis=-2)
  support = (ips.effective_sample_size, ips.num_nonzero_weight)  # of the correction's importance weights
  return C.Estimate(value, terms, ips.num_clipped, ips.num_sessions, mass, ratios, *support)


def _candidate_ranks(ranks_e: Array) -> Array:
  """``[..., L(l), L(a), L]`` ranks of the ranking "logged prefix above ``l``, item ``a`` at ``l``, the rest in
  the target's order ``ranks_e [..., L]``" (item ``a`` inside the prefix: the logged ranking, unused)."""
  size = ranks_e.shape[-1]
  j = jnp.arange(size)
  l_ = j[:, None, None]
  a_ = j[None, :, None]
  jj = j[None, None, :]
  rest = 2 * size + ranks_e[..., None, None, :]
  key = jnp.where(jj < l_, jj, jnp.where(jj == a_, l_, rest))
  return _stable_ranks(key)


def cascade_dr_tables(
  scores: Array,
  *,
  doc_ids: Array,
  model: Any,
  params: dict,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  key: Optional[PRNGKey] = None,
  num_samples: int = 100,
) -> tuple[Array, Array]:
  r"""Cascade-DR's Q function and the target's next-item distribution at every logged prefix.

  .. math::
      \hat Q_l(a_{1:l-1}, a) = \mathbb{E}_{y \sim \pi_e(\cdot \mid a_{1:l-1}, a)}
        \sum_{l' \ge l} w_{l'} \hat P_\theta(C_{l'} = 1 \mid y), \qquad
      \pi_e(a \mid a_{1:l-1}) = \frac{e^{z_a}}{\sum_{u \notin a_{1:l-1}} e^{z_u}}

  (Kiyohara et al., WSDM'22, Eq. 5's :math:`\hat Q_l`: the click model's expected reward from position
  :math:`l` on, below the logged prefix, item :math:`a` at :math:`l` and the target's ranking of the rest; a
  Plackett-Luce target's rest is averaged over ``num_samples`` samples; the deterministic target's next item
  is its best remaining one). Open Bandit Pipeline's ``q_hat`` and ``evaluation_policy_action_dist`` of
  ``SlateCascadeDoublyRobust`` with the action of slot :math:`l` the display index :math:`l`
  (``n_unique_action = L``).

  Args:
    scores, where, weights, top_k, temperature: as :func:`~ultr_jax.evaluation.standard_ips`.
    doc_ids, model, params: as :func:`direct_method`.
    key, num_samples: the sampled completions of a Plackett-Luce target.

  Returns:
    ``(q_hat, action_dist)``, each ``float32[B, L(l), L(a)]`` (0 for an item ``a`` already above ``l``).

  >>> p = {"attraction": jnp.array([0.5, 0.8])}
  >>> q, pi = cascade_dr_tables(jnp.array([0.0, 1.0]), doc_ids=jnp.array([0, 1]), model="cascade", params=p)
  >>> print(np.asarray(q).round(2), pi)  # Q_1 of either first item is 0.9; below item 0, item 1 gets 0.8 * 0.5
  [[0.9 0.9]
   [0.  0.4]] [[0. 1.]
   [0. 1.]]
  """
  scores = jnp.asarray(scores, jnp.float32)
  where = C.mask_of(scores, where)
  size = scores.shape[-1]
  w = C.position_weights(scores.shape, weights, top_k)
  j = jnp.arange(size)
  above = j[None, :] < j[:, None]  # [l, a]: a is in the prefix above l
  cand_where = where[..., None, None, :]
  ids = jnp.broadcast_to(jnp.asarray(doc_ids, jnp.int32)[..., None, None, :], scores.shape[:-1] + (size, size, size))
  w_full = w[..., None, None, :] if w.ndim == scores.ndim else w

  def q_of(ranks_e):
    rk = _candidate_ranks(ranks_e)
    p = model_click_probabilities(model, params, ids, rk, where=jnp.broadcast_to(cand_where, rk.shape))
    gain = p * jnp.take_along_axis(jnp.broadcast_to(w_full, rk.shape), rk, axis=-1)
    return jnp.sum(jnp.where(rk >= j[:, None, None], gain, 0.0), axis=-1)

  q = jnp.mean(jax.lax.map(q_of, _sampled_ranks(key, scores, where, temperature, num_samples)), axis=0)
  valid_a = where[..., None, :] & ~above & where[..., :, None]
  q = jnp.where(valid_a, q, 0.0)
  return q, _next_item(scores, where, temperature, valid_a)


def _next_item(scores, where, temperature, valid_a):
  r""":math:`\pi_e(a \mid a_{1:l-1})` ``[..., L(l), L(a)]`` over the items not above ``l``."""
  if temperature == 0:
    ranks = target_ranks(scores, where=where)
    best = jnp.argmin(jnp.where(valid_a, ranks[..., None, :], jnp.iinfo(jnp.int32).max), axis=-1)
    return jax.nn.one_hot(best, scores.shape[-1]) * jnp.any(valid_a, axis=-1, keepdims=True)
  z = jnp.where(valid_a, (scores / temperature)[..., None, :], -jnp.inf)
  return jnp.where(valid_a, jax.nn.softmax(jnp.where(jnp.any(valid_a, -1, keepdims=True), z, 0.0), axis=-1), 0.0)


def cascade_doubly_robust(
  scores: Array,
  clicks: Array,
  *,
  logging: Propensities,
  doc_ids: Array,
  target: Optional[Propensities] = None,
  model: Any,
  params: dict,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  top_k: Optional[int] = None,
  temperature: float = 0.0,
  clip: Optional[float] = None,
  self_normalize: bool = False,
  session_weights: Optional[Array] = None,
  key: Optional[PRNGKey] = None,
  num_samples: int = 100,
) -> C.Estimate:
  r"""Cascade doubly robust: reward-interaction IPS with the click model's reward-to-go as control variate.

  .. math::
      \hat V_{\mathrm{CDR}} = \frac1n \sum_i \sum_{l < K} \Bigl[ \rho_{i,1:l}\bigl(w_l c_{il} - \hat Q_l(a_{i,1:l})\bigr)
        + \rho_{i,1:l-1}\, \mathbb{E}_{a \sim \pi_e(\cdot \mid a_{i,1:l-1})} \hat Q_l(a_{i,1:l-1}, a) \Bigr]

  with :math:`\rho_{i,1:l} = \pi_e(a_{i,1:l}) / \pi_b(a_{i,1:l})`, :math:`\rho_{i,1:0} = 1` and :math:`\hat Q`
  of :func:`cascade_dr_tables` (Kiyohara et al., WSDM'22, Eq. 6; OBP's ``SlateCascadeDoublyRobust``). Unbiased
  under cascade behaviour (as reward-interaction IPS) whatever the click model, and exact when the model is
  right. ``self_normalize`` divides each :math:`\rho_{i,1:l}` by its mean over the sessions (OBP has no
  self-normalised cascade-DR; the terms then ignore the normalisers' own variance, so prefer the bootstrap).

  Args:
    scores, clicks, where, weights, top_k, temperature, clip, self_normalize, session_weights: as
      :func:`~ultr_jax.evaluation.standard_ips`.
    logging: the logging policy's :class:`Propensities` (``prefix`` is read).
    doc_ids, model, params: as :func:`direct_method`.
    target: the target's :class:`Propensities` if already computed (``prefix`` is read).
    key, num_samples: as :func:`cascade_dr_tables`.

  Returns:
    :class:`Estimate`.

  >>> from ultr_jax.evaluation import plackett_luce_propensities
  >>> p = {"attraction": jnp.array([0.5, 0.8])}
  >>> b = plackett_luce_propensities(jnp.zeros((1, 2)), temperature=1.0)
  >>> est = cascade_doubly_robust(jnp.array([[0.0, 1.0]]), jnp.array([[0.0, 1.0]]), logging=b,
  ...                             doc_ids=jnp.array([[0, 1]]), model="cascade", params=p)
  >>> print(est.value.round(4))  # the logged ranking is not the target's: only the model's 0.9 remains
  0.9
  """
  scores, where, r, active, mass = C.prepare(scores, clicks, where, weights, top_k, session_weights)
  q, pi_next = cascade_dr_tables(
    scores,
    doc_ids=doc_ids,
    model=model,
    params=params,
    where=where,
    weights=weights,
    top_k=top_k,
    temperature=temperature,
    key=key,
    num_samples=num_samples,
  )
  q_obs = jnp.diagonal(q, axis1=-2, axis2=-1)
  q_exp = jnp.sum(pi_next * q, axis=-1)
  rho, n_clip = C.clip_weights(
    C.ratio(prefix_probs(scores, where, temperature) if target is None else target.prefix, logging.prefix),
    clip,
    active & (mass[:, None] > 0),
  )
  ratios = None
  ess, nonzero = C.weight_support(rho, active, mass)
  if self_normalize:
    ratios = _cascade_ratios(rho, r - q_obs, q_exp, active, mass)
    m = mass[:, None] * active
    rho = C.safe_div(rho, C.safe_div(jnp.sum(m * rho, axis=0), jnp.sum(m, axis=0)))
  rho_prev = jnp.concatenate([jnp.ones_like(rho[..., :1]), rho[..., :-1]], axis=-1)
  x = jnp.where(active, rho * (r - q_obs) + rho_prev * q_exp, 0.0)
  ones = jnp.ones_like(x)
  est = C.weighted_estimate(x, ones, active, mass, False, n_clip)
  return est._replace(ratios=ratios, effective_sample_size=ess, num_nonzero_weight=nonzero)


def _cascade_ratios(rho: Array, residual: Array, q_exp: Array, active: Array, mass: Array) -> Array:
  r"""Self-normalised cascade-DR as ratio components (:attr:`~ultr_jax.evaluation.Estimate.ratios`): at each
  position, :math:`\sum_i n_i \rho_{il} (r_{il} - \hat Q_{il}) / \bar\rho_l` and
  :math:`\sum_i n_i \rho_{i,l-1} \mathbb{E}\hat Q_{il} / \bar\rho_{l-1}` (the first position's unweighted)."""
  act = active & (mass > 0)[:, None]
  den = jnp.where(act, rho, 0.0)
  here = C.ratio_parts(jnp.where(act, rho * residual, 0.0), den, act)
  below = C.ratio_parts(jnp.where(act[..., 1:], rho[..., :-1] * q_exp[..., 1:], 0.0), den[..., :-1], act[..., :-1])
  first = C.plain_parts(jnp.where(act[..., 0], q_exp[..., 0], 0.0), mass)
  return jnp.concatenate([here, first, below], axis=-2)
