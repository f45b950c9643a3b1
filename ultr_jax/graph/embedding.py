r"""Embedding models of the identifiability study, fitted full-batch.

Chen et al., "Identifiability Matters" (ICML 2024), Section 5.1 / C.3: the
relevance :math:`r'(x)` is a free parameter per item and the observation
:math:`o'(t)` a free parameter per bias factor, fitted to aggregated
click-through rates :math:`c_i` of records :math:`(x_i, t_i)` with
:math:`c_i \approx r'(x_i)\,o'(t_i)`. Three algorithms, as in the authors'
code:

* :func:`fit_dla`: alternating least squares ("DLA"),
* :func:`fit_regression_em`: Regression-EM (Wang et al., 2018),
* :func:`fit_two_tower`: sigmoid towers, Adam on the mean BCE.

Records are flat arrays ``[n]`` (item id, factor id, CTR, bool ``where``);
every update is a ``segment_sum`` over item or factor ids, epochs run in
``lax.scan``, and the functions are pure, so ``jax.vmap`` over keys gives
independent runs. Use float64 (``with jax.enable_x64(True)``): click MSE goes
below :math:`10^{-8}` and the updates divide by small numbers.
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import optax

from ultr_jax.types import Array, PRNGKey

__all__ = [
    "fit_dla",
    "fit_regression_em",
    "fit_two_tower",
    "fit_no_debias",
    "FIT_FUNCTIONS",
]

_EPS = 1e-8


def _seg_sum(v, ids, n):
  return jax.ops.segment_sum(v, ids, num_segments=n)


def _prep(items, factors, ctr, where):
  where = jnp.asarray(where, bool)
  items = jnp.where(where, items, 0).astype(jnp.int32)
  factors = jnp.where(where, factors, 0).astype(jnp.int32)
  ctr = jnp.where(where, ctr, 0.0)
  w = where.astype(ctr.dtype)
  return items, factors, ctr, w


@functools.partial(
    jax.jit,
    static_argnames=("num_items", "num_factors", "epochs", "o_update"))
def fit_dla(
    key: PRNGKey, items: Array, factors: Array, ctr: Array, *, where: Array,
    num_items: int, num_factors: int, epochs: int,
    o_update: str = "mean_ratio", init_obs: Optional[float] = None,
) -> tuple[Array, Array]:
  r"""DLA as alternating least squares on embeddings (Gauss-Seidel).

  With MSE :math:`L = \sum_i (c_i - r'(x_i) o'(t_i))^2`, each epoch sets

  .. math::
      r'(x) &\leftarrow \mathrm{clip}_{[0,1]}\Big(
          \frac{\sum_{i: x_i = x} c_i\, o'(t_i)}
               {\sum_{i: x_i = x} o'(t_i)^2 + 10^{-8}}\Big) \\
      o'(t) &\leftarrow \mathrm{clip}_{[0,1]}\Big(
          \operatorname{mean}_{i: t_i = t}
          \frac{c_i\, r'(x_i)}{r'(x_i)^2 + 10^{-8}}\Big)
          \quad(\text{``mean_ratio''}, \text{the paper's code})

  or :math:`o'(t) \leftarrow \mathrm{clip}(\sum c_i r' / (\sum r'^2 +
  10^{-8}))` (``"least_squares"``, the semi-synthetic code). :math:`r'_0,
  o'_0 \sim U[0, 1]` (or :math:`o'_0` = ``init_obs``).

  Args:
    key: PRNG key of the initialisation.
    items, factors: ``int[n]`` record ids; ctr: ``float[n]`` CTRs.
    where: ``bool[n]``, False for padding records.
    num_items, num_factors: static id ranges.
    epochs: static number of epochs :math:`T`.
    o_update: ``"mean_ratio"`` or ``"least_squares"``.
    init_obs: constant initial observation (e.g. 1.0, "DLA_I"), or None.

  Returns:
    ``(r float[num_items], o float[num_factors])``. Factors without records
    keep their initial value.

  >>> import numpy as np
  >>> x = jnp.array([0, 1, 1, 2]); t = jnp.array([0, 0, 1, 1])
  >>> c = jnp.array([.5, .2, .2, .3]) * jnp.array([1., 1., .5, .5])
  >>> r, o = fit_dla(jax.random.PRNGKey(0), x, t, c, where=x >= 0,
  ...                num_items=3, num_factors=2, epochs=500)
  >>> print(np.round(r / r[0], 3), np.round(o[1] / o[0], 3))
  [1.  0.4 0.6] 0.5
  """
  items, factors, ctr, w = _prep(items, factors, ctr, where)
  k1, k2 = jax.random.split(key)
  dtype = ctr.dtype
  r = jax.random.uniform(k1, (num_items,), dtype)
  o = (jax.random.uniform(k2, (num_factors,), dtype) if init_obs is None
       else jnp.full((num_factors,), init_obs, dtype))
  count_t = _seg_sum(w, factors, num_factors)
  has_t = count_t > 0

  def epoch(carry, _):
    r, o = carry
    ot = o[factors]
    num = _seg_sum(ctr * ot, items, num_items)
    den = _seg_sum(w * ot * ot, items, num_items)
    r = jnp.clip(num / (den + _EPS), 0.0, 1.0)
    rx = r[items]
    if o_update == "mean_ratio":
      o_new = _seg_sum(w * ctr * rx / (rx * rx + _EPS), factors, num_factors)
      o_new = o_new / jnp.where(has_t, count_t, 1.0)
    elif o_update == "least_squares":
      o_new = _seg_sum(ctr * rx, factors, num_factors) / (
          _seg_sum(w * rx * rx, factors, num_factors) + _EPS)
    else:
      raise ValueError(f"unknown o_update {o_update!r}")
    o = jnp.where(has_t, jnp.clip(o_new, 0.0, 1.0), o)
    return (r, o), None

  (r, o), _ = jax.lax.scan(epoch, (r, o), None, length=epochs)
  return r, o


@functools.partial(
    jax.jit, static_argnames=("num_items", "num_factors", "epochs", "variant"))
def fit_regression_em(
    key: PRNGKey, items: Array, factors: Array, ctr: Array, *, where: Array,
    num_items: int, num_factors: int, epochs: int, variant: str = "repo",
) -> tuple[Array, Array]:
  r"""Regression-EM (Wang et al., WSDM 2018) on embeddings.

  Each epoch (step size 1, Gauss-Seidel: :math:`o'` uses the new :math:`r'`):

  .. math::
      r'(x) &\leftarrow \mathrm{clip}_{[0,1]}\operatorname{mean}_{i: x_i=x}
        \Big[c_i + (1-c_i)\frac{(1-o'(t_i))\,\rho_i}{1-o'(t_i)\,\rho_i}\Big] \\
      o'(t) &\leftarrow \mathrm{clip}_{[0,1]}\operatorname{mean}_{i: t_i=t}
        \Big[c_i + (1-c_i)\frac{(1-r'(x_i))\,o'(t_i)}{1-o'(t_i)\,r'(x_i)}\Big]

  with :math:`\rho_i = r'_{k-1}(x_i)` (``variant="paper"``) or
  :math:`\rho_i = c_i / (o'(t_i) + 10^{-8})` (``"repo"``, the authors' code).
  :math:`r'_0 \sim U[0, 0.5]`, :math:`o'_0 \sim U[0, 1]`.

  Args: as :func:`fit_dla`; ``variant`` is ``"repo"`` or ``"paper"``.

  Returns:
    ``(r float[num_items], o float[num_factors])``.

  >>> x = jnp.array([0, 1, 1, 2]); t = jnp.array([0, 0, 1, 1])
  >>> c = jnp.array([.5, .2, .2, .3]) * jnp.array([.8, .8, .4, .4])
  >>> r, o = fit_regression_em(jax.random.PRNGKey(0), x, t, c, where=x >= 0,
  ...                          num_items=3, num_factors=2, epochs=3000)
  >>> print(float(jnp.round(o[1] / o[0], 2)))
  0.5
  """
  items, factors, ctr, w = _prep(items, factors, ctr, where)
  k1, k2 = jax.random.split(key)
  dtype = ctr.dtype
  r = jax.random.uniform(k1, (num_items,), dtype) * 0.5
  o = jax.random.uniform(k2, (num_factors,), dtype)
  count_x = _seg_sum(w, items, num_items)
  count_t = _seg_sum(w, factors, num_factors)
  has_x, has_t = count_x > 0, count_t > 0
  inv_x = 1.0 / jnp.where(has_x, count_x, 1.0)
  inv_t = 1.0 / jnp.where(has_t, count_t, 1.0)

  def epoch(carry, _):
    r, o = carry
    ot = o[factors]
    if variant == "repo":
      rho = ctr / (ot + _EPS)
    elif variant == "paper":
      rho = r[items]
    else:
      raise ValueError(f"unknown variant {variant!r}")
    post_r = ctr + (1 - ctr) * (1 - ot) * rho / (1 - ot * rho)
    r_new = jnp.clip(_seg_sum(w * post_r, items, num_items) * inv_x, 0.0, 1.0)
    r = jnp.where(has_x, r_new, r)
    rx = r[items]
    post_o = ctr + (1 - ctr) * (1 - rx) * ot / (1 - ot * rx)
    o_new = jnp.clip(_seg_sum(w * post_o, factors, num_factors) * inv_t, 0., 1.)
    o = jnp.where(has_t, o_new, o)
    return (r, o), None

  (r, o), _ = jax.lax.scan(epoch, (r, o), None, length=epochs)
  return r, o


@functools.partial(
    jax.jit, static_argnames=("num_items", "num_factors", "epochs"))
def fit_two_tower(
    key: PRNGKey, items: Array, factors: Array, ctr: Array, *, where: Array,
    num_items: int, num_factors: int, epochs: int,
    learning_rate: float = 1e-2,
) -> tuple[Array, Array]:
  r"""Two-Tower (Guo et al., 2019): sigmoid embeddings, Adam on the mean BCE.

  .. math::
      p_i = \sigma(a_{x_i})\,\sigma(b_{t_i}), \qquad
      L = -\operatorname{mean}_i \big[c_i \log p_i + (1 - c_i)\log(1 - p_i)\big]

  full batch, Adam (``learning_rate`` 1e-2), :math:`a = 0`,
  :math:`b \sim N(0, 1)` at the start; returns :math:`r' = \sigma(a)`,
  :math:`o' = \sigma(b)`.

  Args: as :func:`fit_dla`, plus ``learning_rate``.

  Returns:
    ``(r float[num_items], o float[num_factors])``.

  >>> x = jnp.array([0, 1, 1, 2]); t = jnp.array([0, 0, 1, 1])
  >>> c = jnp.array([.5, .2, .2, .3]) * jnp.array([.8, .8, .4, .4])
  >>> r, o = fit_two_tower(jax.random.PRNGKey(0), x, t, c, where=x >= 0,
  ...                      num_items=3, num_factors=2, epochs=3000)
  >>> print(float(jnp.round(o[1] / o[0], 2)))
  0.5
  """
  items, factors, ctr, w = _prep(items, factors, ctr, where)
  dtype = ctr.dtype
  params = {"a": jnp.zeros((num_items,), dtype),
            "b": jax.random.normal(key, (num_factors,), dtype)}
  opt = optax.adam(learning_rate)
  n = jnp.maximum(w.sum(), 1.0)

  def loss_fn(p):
    logp = jax.nn.log_sigmoid(p["a"])[items] + jax.nn.log_sigmoid(p["b"])[factors]
    log1mp = jnp.log1p(-jnp.exp(jnp.minimum(logp, -1e-12)))
    return -jnp.sum(w * (ctr * logp + (1 - ctr) * log1mp)) / n

  def step(carry, _):
    p, s = carry
    g = jax.grad(loss_fn)(p)
    upd, s = opt.update(g, s, p)
    return (optax.apply_updates(p, upd), s), None

  (params, _), _ = jax.lax.scan(
      step, (params, opt.init(params)), None, length=epochs)
  return jax.nn.sigmoid(params["a"]), jax.nn.sigmoid(params["b"])


def fit_no_debias(key, items, factors, ctr, *, where, num_items, num_factors,
                  epochs=1, **unused):
  r"""No debiasing: one shared bias factor, so :math:`r'(x) \propto
  \operatorname{mean}_{i: x_i = x} c_i` (DLA with all :math:`t_i = 0`,
  :math:`o' = 1`).

  Returns ``(r float[num_items], o float[num_factors])`` with :math:`o' = 1`.

  >>> r, o = fit_no_debias(None, jnp.array([0, 0, 1]), jnp.array([0, 1, 0]),
  ...                      jnp.array([.2, .4, .5]), where=jnp.ones(3, bool),
  ...                      num_items=2, num_factors=2)
  >>> print([round(v, 3) for v in r.tolist()], o.tolist())
  [0.3, 0.5] [1.0, 1.0]
  """
  del key, epochs, unused
  items, factors, ctr, w = _prep(items, factors, ctr, where)
  num = _seg_sum(ctr, items, num_items)
  den = _seg_sum(w, items, num_items)
  r = jnp.clip(num / (den + _EPS), 0.0, 1.0)
  return r, jnp.ones((num_factors,), ctr.dtype)


FIT_FUNCTIONS = {
    "no_debias": fit_no_debias,
    "dla": fit_dla,
    "regression_em": fit_regression_em,
    "two_tower": fit_two_tower,
}
