r"""SIF: closed-form conditional-MI leakage penalties, IPS/DR risks and dual ascent.

Gong, Ai, Tao, Zhang, "A Causal Information-Flow Framework for Unbiased
Learning-to-Rank" (SIF, Section IV), in ultr_jax's reference design of its method (SIF-ref: a ranker, a
bias tower with exposure and trust heads, closed-form leakage penalties). Every function is pure over
``[..., list_size]`` with a bool ``where``.

* :func:`conditional_mi_binary` is the leakage estimator of Section IV-B: for a
  binary channel :math:`B` with model probabilities :math:`p_i = q(B=1 \mid
  z_i, w_i)` and cells :math:`w` (positions),

  .. math::
      \hat I = \Bigl[\sum_w \pi_w \bigl(h(\bar p_w) - \tfrac{1}{n_w}
               \textstyle\sum_{i \in w} h(p_i)\bigr)\Bigr]_+
             = [H(B \mid W) - H(B \mid Z, W)]_+

  which is exactly :math:`I_q(B; Z \mid W)` for the empirical :math:`(z, w)`
  distribution (the paper's Property 1), in nats. The estimator **pools
  over every leading axis** (a batch-level statistic, as the paper computes
  it); ``jax.vmap`` over queries gives per-query values.
* :func:`project_within_cells` gives :math:`P(D = 1 \mid s, K)` by a
  within-cell OLS projection of the trust head onto the ranker score (no
  critic networks).
* :func:`ips_targets` / :func:`dr_targets` and :func:`listwise_risk` make the
  ranker risk :math:`R_{LTR}`; :func:`doubly_robust_risk` is the literal eq. 33
  with observed exposure; :func:`bias_likelihood_loss` fits the bias tower.
* :func:`dual_ascent_update` is the multiplier update of Section IV-A (after Eq. 34) on an EMA;
  :func:`dual_ascent_estimator` holds it as an ``(init, update)`` pair
  (:class:`~ultr_jax.losses.Estimator`).
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from ultr_jax.losses import _utils
from ultr_jax.losses.estimator import Estimator
from ultr_jax.losses.ips import ips_weights
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = [
  "binary_entropy",
  "conditional_mi_binary",
  "cell_marginals",
  "project_within_cells",
  "effective_sample_size",
  "ips_targets",
  "dr_targets",
  "listwise_risk",
  "doubly_robust_risk",
  "bias_likelihood_loss",
  "dual_ascent_update",
  "DualAscentState",
  "dual_ascent_estimator",
  "oracle_leakage",
]

_P_CLIP = 1e-6


def binary_entropy(p: jax.Array) -> jax.Array:
  r"""Binary entropy in nats, :math:`h(p) = -p\ln p - (1-p)\ln(1-p)`, elementwise.

  ``p`` is clipped to :math:`[10^{-6}, 1 - 10^{-6}]` so values and gradients
  stay finite at 0 and 1.

  Args:
    p: probabilities (any shape), clipped to :math:`[10^{-6}, 1 - 10^{-6}]`.

  Returns:
    The entropies in nats, the shape of ``p``.

  >>> print(round(float(binary_entropy(0.5)), 6), round(float(binary_entropy(0.2)), 6))
  0.693147 0.500402
  """
  p = jnp.clip(jnp.asarray(p), _P_CLIP, 1.0 - _P_CLIP)
  return -(p * jnp.log(p) + (1.0 - p) * jnp.log1p(-p))


def _cell_one_hot(cells, where, num_cells):
  cells = jnp.asarray(cells, jnp.int32)
  where = _utils.as_where(where, cells.shape) & (cells >= 0) & (cells < num_cells)
  return jax.nn.one_hot(jnp.where(where, cells, 0), num_cells) * where[..., None], where


def _pooled(x, oh):
  """``sum_i x_i 1{cell_i = c}`` over every axis but the cell axis -> ``[C]``."""
  return jnp.einsum("...l,...lc->c", x, oh)


def _pooled_stack(xs, oh):
  """:func:`_pooled` of several ``[..., L]`` arrays in one contraction -> ``[len(xs), C]``.

  One dense one-hot matmul instead of one reduction per statistic (fewer,
  larger ops: the step is op-count bound on CPU for a handful of cells).
  """
  return jnp.einsum("...lk,...lc->kc", jnp.stack(xs, axis=-1), oh)


def _to_items(oh, values):
  """Cell values ``[K, C]`` broadcast back to the items -> ``K`` arrays ``[..., L]``."""
  out = jnp.einsum("...lc,kc->k...l", oh, values)
  return tuple(out[k] for k in range(values.shape[0]))


def cell_marginals(
  probs: jax.Array,
  cells: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  num_cells: int,
) -> jax.Array:
  r"""Within-cell (weighted) mean :math:`\bar p_w = \sum_{i\in w} m_i p_i / \sum_{i \in w} m_i`.

  Pools over every leading axis; empty cells give 0.

  Args:
    probs: ``[..., L]`` probabilities.
    cells: ``int[..., L]`` cell ids in ``[0, num_cells)`` (other ids are ignored).
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` item masses :math:`m_i` (None: 1).
    num_cells: the number of cells (static).

  Returns:
    ``[num_cells]`` the within-cell means (0 for an empty cell).

  >>> cell_marginals(jnp.array([0.2, 0.8, 0.1]), jnp.array([0, 0, 1]), num_cells=2).tolist()
  [0.5, 0.10000000149011612]
  """
  oh, where = _cell_one_hot(cells, where, num_cells)
  m = jnp.ones(probs.shape, probs.dtype) if weights is None else jnp.asarray(weights, probs.dtype)
  m = jnp.where(where, m, 0.0)
  p = jnp.where(where, probs, 0.0)
  mass = _pooled(m, oh)
  safe = jnp.where(mass > 0, mass, 1.0)
  return jnp.where(mass > 0, _pooled(m * p, oh) / safe, 0.0)


def conditional_mi_binary(
  probs: jax.Array,
  cells: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  num_cells: int,
  estimator: str = "entropy",
  marginal: Optional[jax.Array] = None,
  clamp: bool = True,
  min_count: int = 2,
) -> jax.Array:
  r"""Closed-form conditional MI of a binary channel, :math:`\hat I(B; Z \mid W)` (SIF, Section IV-B).

  .. math::
      \hat I_w^{\rm ent} = h(\bar p_w) - \frac{\sum_{i\in w} m_i h(p_i)}{\sum_{i\in w} m_i},
      \qquad
      \hat I_w^{\rm var} = \frac{\mathrm{Var}_w(p)}{2\,\bar p_w (1 - \bar p_w)},
      \qquad
      \hat I = \Bigl[\sum_w \pi_w \hat I_w\Bigr]_+

  with :math:`\pi_w \propto \sum_{i \in w} m_i` over cells holding at least
  ``min_count`` items (SIF, Section IV-B and Property 1: :math:`H(B\mid W) -
  H(B \mid Z, W)` with the model's probabilities plugged in; the variance
  form is its second-order expansion, the paper's "variance-MI penalty").
  With the cell mean as marginal (default) the entropy gap is :math:`\ge 0`
  by Jensen and equals the exact :math:`I(B; Z \mid W)` of the joint
  :math:`m(z, w)\,q(b \mid z, w)`. ``marginal`` replaces :math:`\bar p_w`
  (e.g. the back-door :math:`P(B=1 \mid do(W=w))`); that version can be
  negative, hence the clamp. Pools over every leading axis. Gradients flow
  into ``probs`` (and ``marginal``); padding and empty/singleton cells
  contribute nothing, and an all-masked input gives 0 with zero gradients.

  Args:
    probs: ``[..., L]`` model probabilities :math:`q(B = 1 \mid z_i, w_i)`.
    cells: ``int[..., L]`` cell ids :math:`w_i` in ``[0, num_cells)``; items
      with other ids are ignored.
    where: ``bool[..., L]``.
    weights: ``[..., L]`` item masses (default 1 each).
    num_cells: number of cells (static).
    estimator: ``"entropy"`` (nats) or ``"variance"``.
    marginal: optional ``[num_cells]`` marginal replacing the cell mean.
    clamp: apply :math:`[\cdot]_+` (set False to see the raw value).
    min_count: cells with fewer (unweighted) items are skipped.

  Returns:
    A scalar (nats for the entropy form).

  >>> p = jnp.array([0.2, 0.8, 0.1, 0.3]); w = jnp.array([0, 0, 1, 1])
  >>> print(round(float(conditional_mi_binary(p[:2], w[:2], num_cells=1)), 6))
  0.192745
  >>> print(round(float(conditional_mi_binary(p, w, num_cells=2, estimator="variance")), 6))
  0.105625
  """
  if estimator not in ("entropy", "variance"):
    raise ValueError(f"conditional_mi_binary: estimator must be 'entropy' or 'variance', got {estimator!r}")
  probs = jnp.asarray(probs)
  oh, where = _cell_one_hot(cells, where, num_cells)
  m = jnp.ones(probs.shape, probs.dtype) if weights is None else jnp.asarray(weights, probs.dtype)
  m = jnp.where(where, m, 0.0)
  p = jnp.clip(jnp.where(where, probs, 0.5), _P_CLIP, 1.0 - _P_CLIP)
  stats = [where.astype(probs.dtype), m, m * p]
  if estimator == "entropy":
    stats.append(m * binary_entropy(p))
  pooled = _pooled_stack(stats, oh)
  count, mass = pooled[0], pooled[1]
  valid = (count >= min_count) & (mass > 0)
  safe_mass = jnp.where(valid, mass, 1.0)
  pbar = pooled[2] / safe_mass
  if marginal is not None:
    pbar = jnp.asarray(marginal, probs.dtype)
  pbar = jnp.clip(jnp.where(valid, pbar, 0.5), _P_CLIP, 1.0 - _P_CLIP)
  if estimator == "entropy":
    gap = binary_entropy(pbar) - pooled[3] / safe_mass
  else:
    pbar_i = jnp.einsum("...lc,c->...l", oh, pbar)
    var = _pooled(m * (p - pbar_i) ** 2, oh) / safe_mass
    gap = var / (2.0 * pbar * (1.0 - pbar))
  total = jnp.sum(jnp.where(valid, mass, 0.0))
  value = jnp.sum(jnp.where(valid, gap * mass, 0.0)) / jnp.where(total > 0, total, 1.0)
  return jnp.maximum(value, 0.0) if clamp else value


def project_within_cells(
  target: jax.Array,
  scores: jax.Array,
  cells: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  num_cells: int,
  ridge: float = 1e-8,
  clip: float = 1e-4,
) -> jax.Array:
  r"""Within-cell OLS projection of a channel probability onto a score, for the trust leakage :math:`\hat I_D`.

  .. math::
      \beta_w = \frac{\mathrm{Cov}_w(d, s)}{\mathrm{Var}_w(s) + \text{ridge}},\qquad
      q_i = \mathrm{clip}\bigl(\bar d_w + \beta_w (s_i - \bar s_w),\ c,\ 1 - c\bigr)

  an estimate of :math:`P(D = 1 \mid s, W)` without a critic. Pools over
  every leading axis. Gradients flow into ``target`` and ``scores`` (wrap
  ``target`` in ``stop_gradient`` for the θ-side penalty). Items outside
  ``where`` (or outside ``[0, num_cells)``) get 0.5.

  Args:
    target: ``[..., L]`` channel probabilities :math:`d_i`.
    scores: ``[..., L]`` ranker scores :math:`s_i`.
    cells: ``int[..., L]`` cell ids.
    where: ``bool[..., L]``.
    num_cells: static.
    ridge: added to the within-cell variance of ``s``.
    clip: ``q`` is clipped to ``[clip, 1 - clip]``.

  Returns:
    ``[..., L]`` projected probabilities.

  >>> q = project_within_cells(jnp.array([0.2, 0.4]), jnp.array([0.0, 1.0]), jnp.zeros(2, int), num_cells=1)
  >>> [round(float(v), 4) for v in q]
  [0.2, 0.4]
  """
  target = jnp.asarray(target)
  scores = jnp.asarray(scores, target.dtype)
  oh, where = _cell_one_hot(cells, where, num_cells)
  w = where.astype(target.dtype)
  d = jnp.where(where, target, 0.0)
  s = jnp.where(where, scores, 0.0)
  n, dsum, ssum = _pooled_stack([w, d, s], oh)
  safe_n = jnp.where(n > 0, n, 1.0)
  dbar_i, sbar_i = _to_items(oh, jnp.stack([dsum, ssum]) / safe_n)
  ds = jnp.where(where, s - sbar_i, 0.0)
  dd = jnp.where(where, d - dbar_i, 0.0)
  cov, var = _pooled_stack([dd * ds, ds * ds], oh) / safe_n
  beta = cov / (var + ridge)
  q = dbar_i + jnp.einsum("...lc,c->...l", oh, beta) * ds
  return jnp.where(where, jnp.clip(q, clip, 1.0 - clip), 0.5)


def effective_sample_size(weights: jax.Array, *, where: Optional[jax.Array] = None) -> jax.Array:
  r"""Kish's effective sample size :math:`(\sum_i w_i)^2 / \sum_i w_i^2` over every axis.

  A diagnostic of importance weighting (SIF Property 1, Fig. 2); equals the
  item count for uniform weights.

  Args:
    weights: importance weights (any shape).
    where: a bool mask of the weights' shape (None: all).

  Returns:
    The effective sample size, a scalar.

  >>> print(float(effective_sample_size(jnp.array([1.0, 1.0, 2.0]))))
  2.6666667461395264
  """
  weights = jnp.asarray(weights)
  where = _utils.as_where(where, weights.shape)
  w = jnp.where(where, weights, 0.0)
  sq = jnp.sum(w * w)
  return jnp.where(sq > 0, jnp.sum(w) ** 2 / jnp.where(sq > 0, sq, 1.0), 0.0)


def ips_targets(
  clicks: jax.Array, propensities: jax.Array, *, where: Optional[jax.Array] = None, tau: float = 0.01
) -> jax.Array:
  r"""IPS targets :math:`t_i = c_i / \max(\rho_i, \tau)` (stop-gradient), 0 where masked.

  ``propensities`` are the click propensities :math:`\rho_i` (exposure times
  trust factor in SIF-ref).

  Args:
    clicks: ``[..., L]`` clicks.
    propensities: ``[..., L]`` click propensities :math:`\rho_i`.
    where: ``bool[..., L]`` the valid items (None: all).
    tau: the propensity floor.

  Returns:
    ``[..., L]`` targets (stop-gradient), 0 where masked.

  >>> ips_targets(jnp.array([1.0, 1.0, 0.0]), jnp.array([0.5, 0.001, 0.5])).tolist()
  [2.0, 100.0, 0.0]
  """
  clicks = jnp.asarray(clicks)
  where = _utils.as_where(where, clicks.shape)
  rho = jax.lax.stop_gradient(jnp.maximum(jnp.where(where, propensities, 1.0), tau))
  return jnp.where(where, clicks / rho, 0.0)


def dr_targets(
  clicks: jax.Array,
  propensities: jax.Array,
  imputed: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  displayed: Optional[jax.Array] = None,
  tau: float = 0.01,
) -> jax.Array:
  r"""Expected-treatment doubly robust targets (SIF Eq. 33 in expectation; Oosterhuis 2023 style).

  .. math::
      t_i = \begin{cases} m_i + (c_i - \rho_i m_i) / \max(\rho_i, \tau) & i \text{ displayed} \\
                          m_i & \text{otherwise} \end{cases}

  (:math:`\rho`, :math:`m` under stop-gradient). SIF eq. 33 with the latent
  exposure replaced by its expectation; on displayed items with
  :math:`\rho \ge \tau` it collapses to the IPS target :math:`c/\rho`.

  Args:
    clicks: ``[..., L]`` clicks.
    propensities: ``[..., L]`` click propensities :math:`\rho`.
    imputed: ``[..., L]`` imputed relevance :math:`m`.
    where: ``bool[..., L]`` the candidates (None: all).
    displayed: ``bool[..., L]`` the displayed candidates (None: ``where``).
    tau: the propensity floor.

  Returns:
    ``[..., L]`` targets (stop-gradient), 0 where masked.

  >>> dr_targets(jnp.array([1.0, 0.0]), jnp.array([0.5, 0.5]), jnp.array([0.3, 0.3])).tolist()
  [2.0, 0.0]
  """
  clicks = jnp.asarray(clicks)
  where = _utils.as_where(where, clicks.shape)
  displayed = where if displayed is None else where & _utils.as_where(displayed, clicks.shape)
  sg = jax.lax.stop_gradient
  rho = sg(jnp.where(where, propensities, 1.0))
  m = sg(jnp.where(where, imputed, 0.0))
  t_disp = m + (clicks - rho * m) / jnp.maximum(rho, tau)
  return jnp.where(displayed, t_disp, jnp.where(where, m, 0.0))


@register_loss("sif")
def listwise_risk(
  scores: jax.Array,
  targets: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Listwise softmax cross-entropy with (weighted) targets, :math:`-\sum_i t_i \log\mathrm{softmax}(s)_i`.

  The ULTRA listwise risk (SIF-ref :math:`R_{LTR}`), via :func:`rax.softmax_loss`
  (``weights`` multiply the targets); mean over lists (all-masked lists
  excluded; None: per list ``[...]``).

  Args:
    scores: ``[..., L]`` the ranker's logits.
    targets: ``[..., L]`` non-negative targets :math:`t_i` (e.g. :func:`ips_targets`).
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights that multiply the targets (None: 1).
    reduce_fn: ``jnp.mean`` over the lists with a valid item, ``jnp.sum``, or None for the per-list values ``[...]``.

  Returns:
    The risk: a scalar, or the ``[...]`` per-list values with ``reduce_fn=None``.

  >>> print(round(float(listwise_risk(jnp.zeros(2), jnp.array([2.0, 0.0]))), 4))
  1.3863
  """
  scores = jnp.asarray(scores)
  return _utils.softmax_loss(scores, targets, _utils.as_where(where, scores.shape), weights, reduce_fn)


@register_loss("sif")
def doubly_robust_risk(
  loss: jax.Array,
  exposure: jax.Array,
  *,
  propensities: jax.Array,
  imputed: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
  return_aux: bool = False,
):
  r"""The literal doubly robust risk of SIF eq. 33 with **observed** exposure.

  .. math::
      \hat L_{DR} = \mathbb{E}_{obs}\Bigl[m(X,K) + \frac{E}{e(X,K)}\bigl(L(C;\theta) - m(X,K)\bigr)\Bigr]

  consistent for :math:`L^*` when either :math:`e` or :math:`m` is correct
  (test T3). In click logs :math:`E` is latent; SIF-ref trains with
  :func:`dr_targets` instead. As there, :math:`e` and :math:`m` are nuisance estimates under stop-gradient;
  :math:`1/e` is an IPS weight (:func:`~ultr_jax.losses.ips_weights`: clipped at ``max_weight``, 0 where
  :math:`e = 0`).

  Args:
    loss: ``[..., L]`` per-sample losses :math:`L(C; \theta)` (the differentiated prediction).
    exposure: ``[..., L]`` observed :math:`E \in \{0, 1\}`.
    propensities: ``[..., L]`` exposure propensities :math:`e(X, K)`.
    imputed: ``[..., L]`` imputed losses :math:`m(X, K) \approx \mathbb{E}[L \mid X, K, E=1]`.
    where: ``bool[..., L]`` the valid samples (None: all).
    weights: ``[..., L]`` per-sample weights (None: 1).
    max_weight: the cap of :math:`1/e` (None: :data:`DEFAULT_MAX_WEIGHT`; ``math.inf``: none).
    reduce_fn: over the valid samples (None: per sample, 0 where masked).
    return_aux: if True return ``(risk, {"imputed": ..., "correction": ...})``, the two terms reduced alike (their sum
      is the risk for a mean, a sum or None).

  Returns:
    The risk (a scalar, or the per-sample values with ``reduce_fn=None``), or ``(risk, aux)`` with
    ``return_aux=True``.

  >>> print(float(doubly_robust_risk(jnp.array([1.0, 0.0]), jnp.array([1.0, 0.0]),
  ...                                propensities=jnp.array([0.5, 0.5]), imputed=jnp.array([0.5, 0.5]))))
  1.0
  """
  loss = jnp.asarray(loss)
  where = _utils.as_where(where, loss.shape)
  w = ips_weights(propensities, where=where, max_weight=max_weight)
  m = jax.lax.stop_gradient(jnp.where(where, imputed, 0.0))
  correction = exposure * w * (jnp.where(where, loss, 0.0) - m)
  if weights is not None:
    m, correction = m * weights, correction * weights
  risk = _utils.reduce_loss(m + correction, where, reduce_fn)
  if return_aux:
    parts = {
      "imputed": _utils.reduce_loss(m, where, reduce_fn),
      "correction": _utils.reduce_loss(correction, where, reduce_fn),
    }
    return risk, parts
  return risk


@register_loss("sif")
def bias_likelihood_loss(
  click_probs: jax.Array,
  clicks: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Click likelihood of the bias tower, :math:`\mathrm{BCE}(c_i, \mathrm{clip}(\rho_i \hat r_i))` (SIF-ref).

  .. math::
      L_{bias} = -\frac{1}{n}\sum_i c_i \log \pi_i + (1 - c_i)\log(1 - \pi_i),
      \quad \pi_i = \mathrm{clip}(\rho_i \hat r_i, 10^{-6}, 1 - 10^{-6})

  Args:
    click_probs: ``[..., L]`` predicted click probabilities :math:`\rho_i \hat r_i` (the prediction comes first, as
      scores do in every loss).
    clicks: ``[..., L]`` clicks.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: ``[..., L]`` per-item weights (None: 1).
    reduce_fn: over the valid items (None: the per-item values, 0 where masked).

  Returns:
    The loss: a scalar, or the ``[..., L]`` per-item values with ``reduce_fn=None``.

  >>> print(round(float(bias_likelihood_loss(jnp.array([0.5, 0.5]), jnp.array([1.0, 0.0]))), 4))
  0.6931
  """
  clicks = jnp.asarray(clicks)
  where = _utils.as_where(where, clicks.shape)
  p = jnp.clip(jnp.where(where, click_probs, 0.5), _P_CLIP, 1.0 - _P_CLIP)
  bce = -(clicks * jnp.log(p) + (1.0 - clicks) * jnp.log1p(-p))
  if weights is not None:
    bce = bce * weights
  return _utils.reduce_loss(bce, where, reduce_fn)


def dual_ascent_update(
  lam: jax.Array,
  ema: jax.Array,
  value: jax.Array,
  *,
  budget: float,
  eta: float = 1.0,
  lam_max: float = 100.0,
  decay: float = 0.9,
  first: Optional[jax.Array] = None,
) -> tuple[jax.Array, jax.Array]:
  r"""Projected dual ascent on a leakage budget, on an EMA of the estimate (SIF, Section IV-A after Eq. 34).

  .. math::
      \bar I \leftarrow \delta \bar I + (1 - \delta)\,\mathrm{sg}(\hat I), \qquad
      \lambda \leftarrow \mathrm{clip}\bigl(\lambda + \eta(\bar I - \varepsilon),\ 0,\ \lambda_{\max}\bigr)

  Args:
    lam: the current multiplier :math:`\lambda`.
    ema: the current EMA :math:`\bar I`.
    value: this step's estimate :math:`\hat I` (a stop-gradient is applied).
    budget: the budget :math:`\varepsilon` (nats).
    eta: the step size.
    lam_max: the cap of :math:`\lambda`.
    decay: the EMA decay :math:`\delta`.
    first: optional bool; where True the EMA starts at ``value``.

  Returns:
    ``(new_lam, new_ema)``.

  >>> lam, ema = dual_ascent_update(jnp.array(0.0), jnp.array(0.05), jnp.array(0.05), budget=0.01)
  >>> print(round(float(lam), 4), round(float(ema), 4))
  0.04 0.05
  """
  value = jax.lax.stop_gradient(jnp.asarray(value, jnp.float32))
  new_ema = decay * ema + (1.0 - decay) * value
  if first is not None:
    new_ema = jnp.where(first, value, new_ema)
  new_lam = jnp.clip(lam + eta * (new_ema - budget), 0.0, lam_max)
  return new_lam, new_ema


class DualAscentState(NamedTuple):
  r"""State of :func:`dual_ascent_estimator`: the multiplier :math:`\lambda`, the EMA :math:`\bar I` and the step count."""

  lam: jax.Array
  ema: jax.Array
  steps: jax.Array


def dual_ascent_estimator(
  *,
  budget: float,
  eta: float = 1.0,
  lam_max: float = 100.0,
  decay: float = 0.9,
  ascend: bool = True,
) -> Estimator:
  r"""SIF's leakage multiplier as an ``(init, update)`` pair (Section IV-A; :func:`dual_ascent_update`).

  ``init(lam=0.0)`` gives :math:`\lambda` = ``lam``, :math:`\bar I = 0`, no steps;
  ``update(state, value)`` with this step's leakage estimate :math:`\hat I`:

  .. math::
      \bar I \leftarrow \begin{cases} \hat I & \text{first step} \\
        \delta \bar I + (1 - \delta)\,\mathrm{sg}(\hat I) & \text{otherwise} \end{cases},\qquad
      \lambda \leftarrow \mathrm{clip}\bigl(\lambda + \eta(\bar I - \varepsilon),\ 0,\ \lambda_{\max}\bigr)

  With ``ascend=False`` only the EMA moves (a fixed multiplier that still
  tracks its leakage).

  Args:
    budget: the leakage budget :math:`\varepsilon` in nats.
    eta: the step size.
    lam_max: the cap of :math:`\lambda`.
    decay: the EMA decay :math:`\delta`.
    ascend: False keeps :math:`\lambda` fixed (only the EMA moves).

  Returns:
    An :class:`~ultr_jax.losses.Estimator` with state :class:`DualAscentState`.

  >>> est = dual_ascent_estimator(budget=0.01)
  >>> state = est.update(est.init(), jnp.array(0.05))
  >>> print(round(float(state.lam), 4), round(float(state.ema), 4), int(state.steps))
  0.04 0.05 1
  """

  def init(lam=0.0) -> DualAscentState:
    return DualAscentState(jnp.float32(lam), jnp.float32(0.0), jnp.int32(0))

  def update(state: DualAscentState, value) -> DualAscentState:
    first = state.steps == 0
    if ascend:
      lam, ema = dual_ascent_update(
        state.lam, state.ema, value, budget=budget, eta=eta, lam_max=lam_max, decay=decay, first=first
      )
    else:
      value = jax.lax.stop_gradient(value)
      lam, ema = state.lam, jnp.where(first, value, decay * state.ema + (1 - decay) * value)
    return DualAscentState(lam, ema, state.steps + 1)

  return Estimator(init=init, update=update)


def oracle_leakage(
  scores: jax.Array,
  oracle_probs: jax.Array,
  positions: jax.Array,
  labels: jax.Array,
  *,
  where: Optional[jax.Array] = None,
  k_top: int = 3,
  num_labels: int = 5,
  by_label: bool = True,
  estimator: str = "entropy",
) -> jax.Array:
  r"""Oracle-conditioned trust leakage of a ranker's scores, in nats (the top-k diagnostic of SIF, Section IV-B).

  The oracle channel probability :math:`d^*` is projected onto the scores
  within each cell (:func:`project_within_cells`) and
  :func:`conditional_mi_binary` is applied to the projection. Cells are the
  top ``k_top`` positions, crossed with the graded label when ``by_label``
  (:math:`(k, y)` cells remove the legitimate correlation that runs through
  relevance).

  .. math::
      \hat I_D^{*} = \hat I\bigl(\mathrm{proj}_{s}(d^*);\ \text{cells } (k, y)\bigr)

  Args:
    scores: ``[..., L]`` the ranker's scores.
    oracle_probs: ``[..., L]`` the oracle channel probabilities :math:`d^*`.
    positions: ``int[..., L]`` 0-based displayed positions.
    labels: ``[..., L]`` graded labels ``0..num_labels-1``.
    where: ``bool[..., L]`` the valid items (None: all).
    k_top: the number of top positions whose cells count.
    num_labels: the number of label grades.
    by_label: cross the position cells with the graded label.
    estimator: ``"entropy"`` or ``"variance"`` (see :func:`conditional_mi_binary`).

  Returns:
    The leakage in nats, a scalar.

  >>> s = jnp.array([[2.0, 1.0, 0.0], [0.0, 1.0, 2.0]]); d = jnp.array([[0.9, 0.5, 0.1], [0.1, 0.5, 0.9]])
  >>> pos = jnp.array([[0, 0, 0], [0, 0, 0]])
  >>> print(round(float(oracle_leakage(s, d, pos, jnp.zeros((2, 3)), k_top=1)), 4))
  0.2454
  """
  positions = jnp.asarray(positions, jnp.int32)
  where = _utils.as_where(where, positions.shape) & (positions >= 0) & (positions < k_top)
  cells = positions
  num_cells = k_top
  if by_label:
    y = jnp.clip(jnp.round(jnp.asarray(labels)).astype(jnp.int32), 0, num_labels - 1)
    cells = positions * num_labels + y
    num_cells = k_top * num_labels
  q = project_within_cells(oracle_probs, scores, cells, where=where, num_cells=num_cells)
  return conditional_mi_binary(q, cells, where=where, num_cells=num_cells, estimator=estimator)
