r"""LBD: Lipschitz and Bernoulli decoupling of relevance and observation.

Chen, Liu, Liu, Sun, "LBD: Decouple Relevance and Observation for
Individual-Level Unbiased Learning to Rank", NeurIPS 2022 (Sections 4.2, 4.3 and 5). A shared tower gives a relevance logit :math:`s_{rel}(x)`
and per-position observation logits :math:`s_{obs,p}(x)`; the click logit of
the document displayed at position ``p`` is

.. math::
    \log \hat c = s_{rel}(x) + \gamma \, s_{obs,p}(x), \qquad
    \gamma \sim \mathrm{Bernoulli}(1 - t)

(Bernoulli decoupling, one :math:`\gamma` per document per step), trained with
the listwise softmax cross-entropy per click plus :math:`\lambda` times a
gradient penalty on the observation logits with respect to the *input
features* (Lipschitz decoupling, double back-propagation).

Functions here work on ``[..., L]`` lists (features ``[..., L, F]``, heads
``[..., L, n]``) with a bool ``where``; padded items are excluded from the
softmax, the clicks and the penalty.
"""

from typing import Callable, Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses._utils import reduce_loss
from ultr_jax.types import Array, ReduceFn
from ultr_jax.losses.registry import register_loss

__all__ = [
  "factual_observation",
  "bernoulli_click_logits",
  "softmax_click_loss",
  "lbd_forward",
  "gradient_penalty",
  "rescale_gp_weight",
  "REFERENCE_GP_SHAPE",
]

#: The (batch, list, positions) shape of the authors' runs; the lambda grid {1, 100, 10000} is on this scale.
REFERENCE_GP_SHAPE = (256, 10, 10)


def factual_observation(observation_logits: Array, positions: Optional[Array] = None) -> Array:
  r"""The observation logit of each item's displayed position: :math:`s_{obs,\,pos_i}(x_i)`.

  Args:
    observation_logits: ``[..., L, n]`` observation logits :math:`s_{obs}` of every head.
    positions: ``int[..., L]`` 0-based displayed positions (default: item
      ``i`` is at position ``i``); positions ``>= n`` use the last head.

  Returns:
    ``[..., L]``.

  >>> s_obs = jnp.arange(6.0).reshape(1, 2, 3)
  >>> print(factual_observation(s_obs))
  [[0. 4.]]
  """
  n = observation_logits.shape[-1]
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(observation_logits.shape[-2]), observation_logits.shape[:-1])
  idx = jnp.clip(positions.astype(jnp.int32), 0, n - 1)
  return jnp.take_along_axis(observation_logits, idx[..., None], axis=-1)[..., 0]


def bernoulli_click_logits(
  scores: Array,
  *,
  observation_logits: Array,
  positions: Optional[Array] = None,
  key: Optional[jax.Array] = None,
  t=0.0,
) -> tuple[Array, Array]:
  r"""Click logits with Bernoulli decoupling (the paper's Sections 4.3 and 5).

  .. math::
      \log \hat c_i = s_{rel}(x_i) + \gamma_i \, s_{obs,\,p_i}(x_i), \qquad
      \gamma_i \sim \mathrm{Bernoulli}(1 - t)\ \text{i.i.d. per item}

  so :math:`\log \hat o' = \gamma \log \hat o` ("with probability t the
  observation is 1"). ``t = 0`` (or ``key=None``) keeps every observation
  term; ``t = 1`` drops all of them.

  Args:
    scores: ``[..., L]`` relevance logits :math:`s_{rel}`.
    observation_logits: ``[..., L, n]`` observation logits :math:`s_{obs}` of every head.
    positions: see :func:`factual_observation`.
    key: PRNG key for :math:`\gamma`; None means :math:`\gamma = 1`.
    t: drop probability (a float or a traced scalar).

  Returns:
    ``(logits [..., L], gamma [..., L])``.

  >>> s_rel, s_obs = jnp.zeros((1, 2)), jnp.ones((1, 2, 2))
  >>> logits, gamma = bernoulli_click_logits(s_rel, observation_logits=s_obs, key=jax.random.key(0), t=1.0)
  >>> print(logits, gamma)
  [[0. 0.]] [[0. 0.]]
  """
  factual = factual_observation(observation_logits, positions)
  if key is None:
    gamma = jnp.ones_like(factual)
  else:
    gamma = jax.random.bernoulli(key, 1.0 - jnp.asarray(t, factual.dtype), factual.shape).astype(factual.dtype)
  return scores + gamma * factual, gamma


@register_loss("lbd")
def softmax_click_loss(
  scores: Array,
  clicks: Array,
  *,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
  eps: float = 1e-7,
) -> Array:
  r"""Listwise softmax cross-entropy per click over the whole batch (the paper's Eq. 2 as the authors' code computes it: ULTRA's ``softmax_loss``).

  .. math::
      \mathcal L_{sv} = -\frac{\sum_{q,i} w_{qi}\, \log \mathrm{softmax}(z_q)_i}{\sum_{q,i} w_{qi}},
      \qquad w_{qi} = v_{qi}\,(c_{qi} + \epsilon)

  with padded items (``where=False``) removed from the softmax and given
  :math:`w = 0`. An all-masked batch gives 0 with zero gradients.

  Args:
    scores: ``[..., L]`` click logits :math:`z`.
    clicks: ``[..., L]`` 0/1 clicks.
    where: ``bool[..., L]`` real items.
    weights: optional ``[..., L]`` item weights :math:`v` (default 1).
    reduce_fn: a mean (the formula above: per unit of click mass), ``jnp.sum``
      (the numerator), any other reduction of the per-item terms, or None
      (per-item :math:`-w_{qi}\log\mathrm{softmax}(z_q)_i`, ``[..., L]``).
    eps: the repo's ``1e-7`` added to every weight.

  Returns:
    A scalar (``[..., L]`` with ``reduce_fn=None``).

  >>> z = jnp.array([[0.0, 0.0]])
  >>> print(round(float(softmax_click_loss(z, jnp.array([[1.0, 0.0]]), eps=0.0)), 4))
  0.6931
  """
  if where is None:
    where = jnp.ones(scores.shape, bool)
  w = jnp.where(where, clicks + eps, 0.0)
  if weights is not None:
    w = w * jnp.where(where, weights, 0.0)
  any_real = jnp.any(where, axis=-1, keepdims=True)
  safe = jnp.where(where, scores, 0.0)
  logp = jax.nn.log_softmax(safe, axis=-1, where=where & any_real)
  logp = jnp.where(where, logp, 0.0)
  return reduce_loss(-(w * logp), where, reduce_fn, mass=w)


def _safe_norm(v: Array, axis: int = -1) -> Array:
  sq = jnp.sum(v * v, axis=axis)
  pos = sq > 0
  return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def lbd_forward(
  tower_fn: Callable[[Array], tuple[Array, Array]],
  features: Array,
  *,
  where: Optional[Array] = None,
  key: Optional[jax.Array] = None,
  keep: float = 0.1,
  mode: str = "code",
  paper_transform: str = "exp",
) -> tuple[Array, Array, Array]:
  r"""One forward pass of the tower plus the LBD gradient penalty (the paper's Sections 4.2 and 5).

  ``mode="code"`` (default; the authors' code, the scale of the paper's
  :math:`\lambda` grid): with :math:`M_{dp} \sim \mathrm{Bernoulli}(k)`
  (TF1 ``dropout(keep_prob=k)``, ``k = keep``) over the ``N = D n`` logits of
  the ``D`` real documents,

  .. math::
      s = \frac1N \sum_{d,p} \frac{M_{dp}}{k}\, s_{obs,p}(x_d), \qquad
      G = \nabla_X s, \qquad \mathcal L_{gp} = \sum_{d} \lVert G_d \rVert^2,

  whose expectation over ``M`` is
  :math:`N^{-2} \sum_d [(1/k - 1)\sum_p \lVert\nabla s_p\rVert^2 + \lVert\sum_p \nabla s_p\rVert^2]`.
  ``G`` comes from the vector-Jacobian product of the *same* forward pass that
  produces the logits, so a step costs one forward pass; differentiating the
  result w.r.t. the parameters is double back-propagation.

  ``mode="paper"`` (Section 5 of the paper): the mean over real documents of
  :math:`\sum_p \lVert \nabla_x \hat o_p(x) \rVert_2` with
  :math:`\hat o_p = \exp(s_{obs,p})` (``paper_transform="exp"``) or
  :math:`\sigma(s_{obs,p})` (``"sigmoid"``); not squared, no dropout. Its
  Jacobians are taken per document with ``jax.jacrev``.

  Args:
    tower_fn: ``features [..., F] -> (s_rel [...], s_obs [..., n])``,
      applied independently per document.
    features: ``[..., L, F]``.
    where: ``bool[..., L]``; padded documents are left out of the penalty.
    key: PRNG key for the dropout mask (code form); None means ``M = k``
      everywhere (no dropout, i.e. the penalty on the summed heads).
    keep: the dropout keep probability ``k`` (0.1 in the authors' code, TF1 semantics).
    mode: ``"code"`` or ``"paper"``.
    paper_transform: ``"exp"`` or ``"sigmoid"`` (paper form only).

  Returns:
    ``(s_rel [..., L], s_obs [..., L, n], penalty scalar)``.

  Linear heads :math:`s_{obs,p} = b_p x`: without dropout, ``G_d = (1/N) sum_p b_p``.

  >>> b = jnp.array([[1.0, 2.0], [3.0, 4.0]])   # [F=2, n=2]
  >>> tower = lambda x: (x[..., 0], x @ b)
  >>> _, _, gp = lbd_forward(tower, jnp.ones((1, 1, 2)))
  >>> print(float(gp))   # ((1+2)/2)^2 + ((3+4)/2)^2
  14.5
  """
  if mode not in ("code", "paper"):
    raise ValueError(f"lbd_forward: mode must be 'code' or 'paper', got {mode!r}")
  if where is None:
    where = jnp.ones(features.shape[:-1], bool)
  if mode == "code":
    (s_rel, s_obs), vjp = jax.vjp(tower_fn, features)
    n = s_obs.shape[-1]
    count = jnp.sum(where) * n
    if key is None:
      mask = jnp.ones(s_obs.shape, s_obs.dtype)
    else:
      mask = jax.random.bernoulli(key, keep, s_obs.shape).astype(s_obs.dtype) / keep
    cot = jnp.where(where[..., None], mask, 0.0) / jnp.where(count > 0, count, 1.0)
    (grad_x,) = vjp((jnp.zeros_like(s_rel), cot))
    penalty = jnp.sum(jnp.where(where[..., None], grad_x, 0.0) ** 2)
    return s_rel, s_obs, penalty
  if paper_transform not in ("exp", "sigmoid"):
    raise ValueError(f"lbd_forward: paper_transform must be 'exp' or 'sigmoid', got {paper_transform!r}")
  s_rel, s_obs = tower_fn(features)
  transform = jnp.exp if paper_transform == "exp" else jax.nn.sigmoid
  flat = features.reshape(-1, features.shape[-1])
  jac = jax.vmap(jax.jacrev(lambda x: transform(tower_fn(x)[1])))(flat)  # [D, n, F]
  per_doc = jnp.sum(_safe_norm(jac, axis=-1), axis=-1).reshape(where.shape)
  count = jnp.sum(where)
  penalty = jnp.sum(jnp.where(where, per_doc, 0.0)) / jnp.where(count > 0, count, 1.0)
  return s_rel, s_obs, penalty


def gradient_penalty(
  obs_fn: Callable[[Array], Array],
  features: Array,
  *,
  where: Optional[Array] = None,
  key: Optional[jax.Array] = None,
  keep: float = 0.1,
  mode: str = "code",
  paper_transform: str = "exp",
) -> Array:
  r"""The LBD gradient penalty of ``obs_fn: [..., F] -> [..., n]`` alone (see :func:`lbd_forward`).

  .. math::
      \mathcal L_{gp} = \Big\lVert \nabla_X \tfrac1N \textstyle\sum_{d,p} \tfrac{M_{dp}}{k} s_{obs,p}(x_d)
      \Big\rVert_F^2 \quad (\text{code form})

  Args:
    obs_fn: the observation heads, ``[..., F] -> [..., n]``, applied per document.
    features: ``[..., L, F]`` the documents' features.
    where: ``bool[..., L]``; padded documents are left out of the penalty.
    key: PRNG key of the dropout mask (code form); None: no dropout.
    keep: the dropout keep probability ``k``.
    mode: ``"code"`` or ``"paper"`` (see :func:`lbd_forward`).
    paper_transform: ``"exp"`` or ``"sigmoid"`` (paper form only).

  Returns:
    The penalty, a scalar.

  >>> b = jnp.array([[1.0], [2.0]])   # [F=2, n=1]
  >>> print(float(gradient_penalty(lambda x: x @ b, jnp.ones((1, 2, 2)))))   # 2 docs: 2 * (1/2)^2 * (1 + 4)
  2.5
  """
  tower = lambda x: (jnp.zeros(x.shape[:-1], x.dtype), obs_fn(x))
  return lbd_forward(tower, features, where=where, key=key, keep=keep, mode=mode, paper_transform=paper_transform)[2]


def rescale_gp_weight(
  lam, *, batch_size: int, list_size: int, num_positions: int, reference: tuple[int, int, int] = REFERENCE_GP_SHAPE
):
  r"""The code-form :math:`\lambda` that keeps the paper's strength at another batch shape (the paper's Section 5).

  The code-form penalty weighs the per-document mean bracket by
  :math:`\lambda / (B T n^2)`, so

  .. math::  \lambda_{new} = \lambda_{paper} \cdot \frac{B_{new} T_{new} n_{new}^2}{256 \cdot 10 \cdot 10^2}.

  Args:
    lam: the paper's :math:`\lambda` (a float or an array of them).
    batch_size: the new batch size :math:`B`.
    list_size: the new list size :math:`T`.
    num_positions: the new number of observation heads :math:`n`.
    reference: the ``(B, T, n)`` the paper's value was set at.

  Returns:
    The code-form :math:`\lambda` for the new shape, of the type of ``lam``.

  >>> print(rescale_gp_weight(100.0, batch_size=64, list_size=10, num_positions=10))
  25.0
  """
  b0, t0, n0 = reference
  return lam * (batch_size * list_size * num_positions**2) / (b0 * t0 * n0**2)
