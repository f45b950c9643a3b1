r"""Vectorization-based ULTR (Chen, Liu, Liu & Sun, "Scalar is Not Enough", KDD 2022).

Relevance and observation are vectors: the click logit of item ``i`` at
position ``k`` is :math:`\langle r(x_i), o(k) \rangle` with
:math:`r(x), o(k) \in \mathbb{R}^d`, which can express biases no scalar
product :math:`r \cdot o` can (e.g. examination that depends on the document).
At ranking time there is no position, so the relevance vector is projected on
a *base vector* :math:`\bar o(x)`: an observation density model predicts, from
the features alone, a Gaussian :math:`\mathcal{N}(\mu(x), \mathrm{diag}\,
e^{v(x)})` over the observation vector an item would get, fitted to the
learned :math:`o(k)` of the positions it was shown at (:func:`observation_density_loss`);
the base vector of a list is the precision-weighted mean of :math:`\mu` over its
items (:func:`base_vector`), and the ranking score is
:math:`\langle r(x_i), \bar o \rangle` (:func:`vectorization_scores`).

All functions take ``[..., L, d]`` vectors with a bool ``where`` ``[..., L]``.
"""

from typing import Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.types import Array, ReduceFn
from ultr_jax.losses.registry import register_loss

__all__ = ["observation_density_loss", "base_vector", "vectorization_scores"]


def _masked(where, mean, log_var):
  """The item mask and the density outputs with padded items set to 0 (finite values and gradients)."""
  w = _utils.as_where(where, mean.shape[:-1])
  return w, jnp.where(w[..., None], mean, 0.0), jnp.where(w[..., None], log_var, 0.0)


@register_loss("vectorization", trains=("log_var",))
def observation_density_loss(
  mean: Array,
  targets: Array,
  *,
  log_var: Array,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> Array:
  r"""Gaussian fit of the density model to the (stop-gradient) observation vectors.

  .. math::
      \ell_i = \frac{1}{d} \sum_j \bigl(\mu_j(x_i) - \mathrm{sg}(o_j(k_i))\bigr)^2 e^{-v_j(x_i)} + v_j(x_i)

  per item (the negative log-likelihood of :math:`\mathcal{N}(\mu, e^{v})` up to constants and a factor 2,
  averaged over the :math:`d` dimensions), times ``weights``, reduced over the valid items (Chen et al., KDD'22;
  ULTRA's ``vectorization.py``). Means and targets are bounded at :math:`\pm 10^{15}` before the
  square, as CLD's scores are (identity on any realistic value).

  Args:
    mean: ``[..., L, d]`` the density model's means :math:`\mu` (the prediction).
    targets: ``[..., L, d]`` the observation vectors :math:`o(k_i)` of the items' positions (stop-gradient).
    log_var: ``[..., L, d]`` the density model's log-variances :math:`v`.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1).
    reduce_fn: over the valid items (the mean by default; None: per item ``[..., L]``, 0 where masked).

  Returns:
    The reduced loss (0 when nothing is valid), or the per-item values.

  >>> m = jnp.zeros((1, 2, 2)); v = jnp.zeros((1, 2, 2)); o = jnp.ones((1, 2, 2))
  >>> float(observation_density_loss(m, o, log_var=v))
  1.0
  """
  w, mean, log_var = _masked(where, mean, log_var)
  targets = jnp.where(w[..., None], jax.lax.stop_gradient(targets), 0.0)
  diff = _utils.bound_scores(mean) - _utils.bound_scores(targets)
  per_item = jnp.mean(diff**2 * jnp.exp(-log_var) + log_var, axis=-1)
  if weights is not None:
    per_item = per_item * weights
  return _utils.reduce_loss(per_item, w, reduce_fn)


def base_vector(mean: Array, log_var: Array, *, where: Optional[Array] = None) -> Array:
  r"""The base vector of each list: :math:`\bar o_j = \sum_i \mu_j(x_i) e^{-v_j(x_i)} / \sum_i e^{-v_j(x_i)}`.

  The precision-weighted mean of the density means over the list's valid items, per dimension.

  Args:
    mean, log_var: ``[..., L, d]``.
    where: optional ``bool[..., L]``.

  Returns:
    ``[..., d]``; 0 for a list with no valid item.

  >>> m = jnp.array([[[1., 0.], [3., 2.]]]); v = jnp.log(jnp.array([[[1., 1.], [1., 1e9]]]))
  >>> print(base_vector(m, v).round(3))
  [[2. 0.]]
  """
  w, mean, log_var = _masked(where, mean, log_var)
  precision = jnp.where(w[..., None], jnp.exp(-log_var), 0.0)
  total = jnp.sum(precision, axis=-2)
  return jnp.where(total > 0, jnp.sum(precision * mean, axis=-2) / jnp.where(total > 0, total, 1.0), 0.0)


def vectorization_scores(relevance: Array, mean: Array, log_var: Array, *, where: Optional[Array] = None) -> Array:
  r"""Ranking scores :math:`\langle r(x_i), \bar o \rangle` with each list's :func:`base_vector`.

  Args:
    relevance: ``[..., L, d]`` relevance vectors.
    mean, log_var: ``[..., L, d]`` density outputs.
    where: optional ``bool[..., L]`` (padded items do not enter the base
      vector; their scores are meaningless, as every metric masks them).

  Returns:
    ``[..., L]`` scores.

  >>> r = jnp.array([[[1., 0.], [0., 1.]]]); m = jnp.array([[[2., 1.], [2., 1.]]])
  >>> print(vectorization_scores(r, m, jnp.zeros_like(m)))
  [[2. 1.]]
  """
  b = base_vector(mean, log_var, where=where)
  return jnp.sum(relevance * b[..., None, :], axis=-1)
