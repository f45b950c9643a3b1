r"""CLD: causal likelihood decomposition for top-k position + selection bias.

Zhao et al., "Unbiased Top-k Learning to Rank with Causal Likelihood
Decomposition", SIGIR-AP'23. A logging ranker shows
only its top ``k`` documents (``shown``, :math:`s_i = 1`); shown documents are
examined with propensity :math:`\rho_i`; the rest are never clicked. CLD
first removes position bias with the target :math:`y_i = c_i/\rho_i` and then
removes selection bias with a Type-II Tobit (Heckman) likelihood over shown
*and* unshown documents, fitting a ranker :math:`f_\beta` and a selection
model :math:`f_\omega` jointly (Eq. 9). Documents are ranked by
:math:`f_\beta` alone.

All functions take ``[..., L]`` arrays with a bool ``where`` and reduce over
**valid records of the whole batch** (no per-list averaging, as in the authors' released code), with
optional per-item ``weights`` (e.g. the number of logged sessions of the
query, which makes the aggregated form exactly equal to the per-session log). An all-masked batch gives a loss of 0 and zero gradients.

Functions:

* :func:`cld_loss`: pointwise CLD (Eq. 9), probit or logit link, ``sq_weight``;
* :func:`cld_pair_loss`: CLD\ :sup:`pair` (Eq. 12) over all ordered pairs of
  each padded list, built with a pair mask;
* :func:`heckman_loss`: Heckman\ :sup:`rank` (Ovaisi et al., WWW'20) as one
  joint objective (probit selection stage + outcome stage on the inverse
  Mills ratio of the stop-gradient selection index);
* :func:`inverse_mills_ratio`, :func:`borda_scores` (RankAgg).
"""

from typing import Optional, Union

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr
from jax.scipy.stats import norm

from ultr_jax.losses import _utils
from ultr_jax.losses.registry import register_loss
from ultr_jax.types import ReduceFn

__all__ = [
  "cld_loss",
  "cld_pair_loss",
  "heckman_loss",
  "inverse_mills_ratio",
  "borda_scores",
  "cld_log_cdf",
]

_LINKS = ("probit", "logit")
_MILLS_TAIL = -100.0


def cld_log_cdf(z: jax.Array, link: str = "probit") -> jax.Array:
  r"""Log of the selection link's CDF: :math:`\log\Phi(z)` (probit) or :math:`\log\sigma(z)` (logit).

  Both are symmetric, so :math:`\log(1 - F(z)) = \log F(-z)`. The probit uses
  :func:`jax.scipy.special.log_ndtr` (stable far into the left tail).

  Args:
    z: the selection index (any shape).
    link: ``"probit"`` or ``"logit"``.

  Returns:
    ``log F(z)``, the shape of ``z``.

  >>> print(round(float(cld_log_cdf(jnp.array(-40.0))), 2))
  -804.61
  """
  if link == "probit":
    return log_ndtr(z)
  if link == "logit":
    return jax.nn.log_sigmoid(z)
  raise ValueError(f"link must be one of {_LINKS}, got {link!r}")


def _weighted_reduce(values, where, weights, reduce_fn):
  """Σ w v / Σ w over valid items (a mean), Σ w v (``jnp.sum``), per item (None): :func:`_utils.reduce_loss`."""
  w = jnp.where(where, 1.0 if weights is None else weights, 0.0)
  return _utils.reduce_loss(jnp.where(where, values, 0.0) * w, where, reduce_fn, mass=w)


@register_loss("cld", trains=("selection_scores",))
def cld_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  selection_scores: jax.Array,
  propensities: jax.Array,
  shown: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  gamma: float = 0.1,
  link: str = "probit",
  sq_weight: float = 1.0,
  target: str = "sessions",
  max_weight: Optional[float] = None,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Negative CLD log-likelihood (Eq. 9): a Type-II Tobit over shown and unshown records.

  With :math:`y_i = c_i/\rho_i`, residual :math:`u_i = y_i - f_\beta(x_i)` and
  link CDF :math:`F` (:math:`\Phi` in the paper, :math:`\sigma` in the
  released code):

  .. math::
      -\mathcal{L} = \sum_{s_i=1} \Big[\lambda_{sq}\, u_i^2
          - \log F\Big(\tfrac{f_\omega(x_i) + \gamma u_i}{\sqrt{1-\gamma^2}}\Big)\Big]
          - \sum_{s_i=0} \log\big(1 - F(f_\omega(x_i))\big)

  normalised by the (weighted) number of valid records. ``sq_weight``
  :math:`\lambda_{sq}` is 1 in the paper (Eq. 9); 1/2 is the exact Tobit-II
  MLE. ``gamma`` is the fixed error correlation (not learned), :math:`|\gamma|<1`.

  ``clicks`` may be 0/1 clicks of one session or a click-through rate
  :math:`\bar c \in [0, 1]` over the query's sessions. With
  ``target="sessions"`` (default, the per-session records of the authors' code) a
  shown item contributes :math:`\bar c\,\ell(y = 1/\rho) + (1-\bar c)\,\ell(y = 0)`,
  exactly the per-session sum divided by the number of sessions (pass that number as
  ``weights``); ``target="mean"`` uses the single record
  :math:`y = \bar c/\rho`. Both coincide for 0/1 clicks.

  The relevance scores of unshown items get exactly zero gradient; the
  propensities are read only where shown (they may be 0 elsewhere).

  Scores are bounded to :math:`\pm 10^{15}` (``_utils.SCORE_BOUND``) before the
  square and the link, so extreme scores give a finite loss and gradient.

  Args:
    scores: ``[..., L]`` ranker scores :math:`f_\beta(x)`.
    clicks: ``[..., L]`` clicks or CTRs (ignored where not shown).
    selection_scores: ``[..., L]`` selection index :math:`f_\omega(x)`.
    propensities: ``[..., L]`` :math:`\rho` at the displayed position.
    shown: ``bool[..., L]`` selection indicator :math:`s` (top k).
    where: ``bool[..., L]`` padding mask.
    weights: optional ``[..., L]`` record weights (e.g. sessions per query).
    gamma: error correlation :math:`\gamma`.
    link: ``"probit"`` (paper) or ``"logit"`` (released code).
    sq_weight: coefficient of the squared residual.
    target: ``"sessions"`` or ``"mean"`` (see above).
    max_weight: cap of :math:`1/\rho` (None: ``DEFAULT_MAX_WEIGHT`` = 1e8; ``math.inf``: none).
    reduce_fn: a mean (weighted mean over valid records, :math:`\sum w\ell / \sum w`),
      ``jnp.sum`` (:math:`\sum w\ell`), any other reduction of the weighted
      records, or None (per-item weighted values, 0 where masked).

  Returns:
    scalar loss (``[..., L]`` with ``reduce_fn=None``).

  Values worked by hand (selected & clicked; not selected):

  >>> one = jnp.ones(1)
  >>> print(round(float(cld_loss(0.3 * one, one, selection_scores=0.5 * one, propensities=0.5 * one,
  ...                            shown=one > 0, gamma=0.2)), 5))
  3.1077
  >>> print(round(float(cld_loss(0.3 * one, 0 * one, selection_scores=0.5 * one, propensities=0 * one,
  ...                            shown=one < 0, gamma=0.2)), 5))
  1.17591
  """
  if not abs(gamma) < 1.0:
    raise ValueError(f"gamma must satisfy |gamma| < 1, got {gamma}")
  if target not in ("sessions", "mean"):
    raise ValueError(f"target must be 'sessions' or 'mean', got {target!r}")
  rel_scores = _utils.bound_scores(jnp.asarray(scores))
  sel_scores = _utils.bound_scores(jnp.asarray(selection_scores))
  where = _utils.as_where(where, rel_scores.shape)
  shown = jnp.asarray(shown).astype(bool)
  sel = shown & where
  unsel = ~shown & where
  safe_prop = jnp.where(sel, propensities, 1.0)  # double where: rho may be 0 off the top k
  max_weight = _utils.DEFAULT_MAX_WEIGHT if max_weight is None else max_weight
  inv_prop = jax.lax.stop_gradient(1.0 / jnp.maximum(safe_prop, 1.0 / max_weight))
  c = jax.lax.stop_gradient(jnp.where(sel, clicks, 0.0))
  scale = 1.0 / jnp.sqrt(1.0 - gamma**2)

  # One link evaluation serves two cases: the unshown term log F(-f_omega) and the shown term at
  # y = 0 (or at y = c/rho with target="mean") share one masked argument, so the "sessions" form
  # evaluates the link twice per item instead of three times ("mean": once instead of twice).
  def shown_arg(y):
    return (sel_scores + gamma * (y - rel_scores)) * scale

  def sq(y):
    return -sq_weight * jnp.square(y - rel_scores)

  y_a = c * inv_prop if target == "mean" else jnp.zeros_like(inv_prop)
  ll_a = cld_log_cdf(jnp.where(sel, shown_arg(y_a), -sel_scores), link)
  if target == "mean":
    ll_sel = sq(y_a) + ll_a
  else:
    ll_sel = c * (sq(inv_prop) + cld_log_cdf(shown_arg(inv_prop), link)) + (1.0 - c) * (sq(y_a) + ll_a)
  nll = -jnp.where(sel, ll_sel, jnp.where(unsel, ll_a, 0.0))
  return _weighted_reduce(nll, where, weights, reduce_fn)


@register_loss("cld", trains=("selection_scores",), per_list=False)  # "balanced" weighs by the whole batch
def cld_pair_loss(
  scores: jax.Array,
  targets: jax.Array,
  *,
  selection_scores: jax.Array,
  shown: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  bpr_weight: str = "ips_diff",
  sel_weight: float = 1.0,
  unobs_weight: Union[float, str] = "balanced",
  include_selected_ties: bool = False,
  reduce_fn: Optional[ReduceFn] = jnp.mean,
) -> jax.Array:
  r"""Negative CLD\ :sup:`pair` objective (Eq. 12) over the ordered pairs of each list.

  With :math:`\Delta_{ij} = f_\beta(x_i) - f_\beta(x_j)` and debiased targets
  :math:`y = c/\rho`, observed pairs :math:`D_s = \{s_i = s_j = 1, y_i > y_j\}`
  and unobserved pairs :math:`D_u = \{s_i = 0 \lor s_j = 0\}` (:math:`i \ne j`):

  .. math::
      -O = -\sum_{D_s} w_{ij}\log\sigma(\Delta_{ij})
           - C\!\!\sum_{D_s \cup D_u}\!\! a_{ij} \sum_{m \in \{i,j\}}
             \big[s_m \log\sigma(f_\omega(x_m) + \Delta_{ij})
                  + (1 - s_m)\log\sigma(-f_\omega(x_m))\big]

  divided by :math:`\sum a_{ij}`, where :math:`a_{ij} = 1` on :math:`D_s`
  and ``unobs_weight`` on :math:`D_u`; :math:`w_{ij} = y_i - y_j`
  (``bpr_weight="ips_diff"``, the released code) or 1 (``"one"``, the
  printed Eq. 12). The unshown term is :math:`\log(1 - \sigma(f_\omega))`.
  ``unobs_weight="balanced"`` sets it to :math:`|D_s|/|D_u|` within
  the batch (the released code subsamples :math:`D_u` 1:1).
  ``include_selected_ties`` adds shown pairs with :math:`y_i \le y_j` to
  :math:`D_u` (the repo's tag-0 pool). Pairs are built inside each padded
  list with a pair mask (:math:`O(L^2)`, no loops). Pairs with both items
  unshown send no gradient to :math:`f_\beta`.

  Args:
    scores: ``[..., L]`` ranker scores.
    targets: ``[..., L]`` :math:`y = c/\rho` (0 where unshown or not clicked;
      a CTR over :math:`\rho` for aggregated logs).
    selection_scores: ``[..., L]`` selection logits.
    shown: ``bool[..., L]``.
    where: ``bool[..., L]``.
    weights: optional ``[..., L]`` item weights; the pair ``(i, j)`` gets
      ``weights[i]`` (rax's convention; pass a per-list weight broadcast).
    bpr_weight: ``"ips_diff"`` or ``"one"``.
    sel_weight: :math:`C`, weight of the selection terms (the paper's Eq. 12).
    unobs_weight: float or ``"balanced"``.
    include_selected_ties: see above.
    reduce_fn: a mean (the objective over :math:`\sum a_{ij}`, above),
      ``jnp.sum`` (the un-normalised objective), any other reduction of the
      per-list objectives, or None (per-list objectives ``[...]``, whose sum
      is the ``jnp.sum`` loss).

  Returns:
    scalar loss (``[...]`` with ``reduce_fn=None``).

  >>> f = jnp.array([1.0, 0.0, 0.0]); s = jnp.array([True, True, False])
  >>> print(round(float(cld_pair_loss(f, jnp.array([2.0, 0.0, 0.0]), selection_scores=jnp.zeros(3), shown=s,
  ...                                 unobs_weight=1.0)), 4))
  1.4077
  """
  if bpr_weight not in ("ips_diff", "one"):
    raise ValueError(f"bpr_weight must be 'ips_diff' or 'one', got {bpr_weight!r}")
  rel_scores = jnp.asarray(scores)
  sel_scores = jnp.asarray(selection_scores)
  l = rel_scores.shape[-1]
  where = _utils.as_where(where, rel_scores.shape)
  s = jnp.asarray(shown).astype(bool) & where
  y = jax.lax.stop_gradient(jnp.where(s, targets, 0.0))
  valid = where[..., :, None] & where[..., None, :] & ~jnp.eye(l, dtype=bool)
  both = s[..., :, None] & s[..., None, :]
  yi, yj = y[..., :, None], y[..., None, :]
  obs = valid & both & (yi > yj)
  unobs = valid & ~both
  if include_selected_ties:
    unobs = unobs | (valid & both & ~(yi > yj))
  item_w = jnp.ones_like(y) if weights is None else jnp.where(where, weights, 0.0)
  pw = jnp.broadcast_to(item_w[..., :, None], valid.shape)
  n_obs = jnp.sum(jnp.where(obs, pw, 0.0))
  n_unobs = jnp.sum(jnp.where(unobs, pw, 0.0))
  if isinstance(unobs_weight, str):
    if unobs_weight != "balanced":
      raise ValueError(f"unobs_weight must be a float or 'balanced', got {unobs_weight!r}")
    u = jax.lax.stop_gradient(jnp.where(n_unobs > 0, n_obs / jnp.where(n_unobs > 0, n_unobs, 1.0), 0.0))
  else:
    u = float(unobs_weight)
  delta = rel_scores[..., :, None] - rel_scores[..., None, :]
  w = (yi - yj) if bpr_weight == "ips_diff" else jnp.ones_like(delta)
  fo_i, fo_j = sel_scores[..., :, None], sel_scores[..., None, :]
  si, sj = s[..., :, None], s[..., None, :]
  a = pw * (jnp.where(obs, 1.0, 0.0) + jnp.where(unobs, u, 0.0))  # 0 off D_s and D_u
  # Shown members need the pair's score difference ([..., L, L]); the unshown term
  # log sigma(-f_omega(x_m)) depends on the item alone, so it is evaluated once per item
  # ([..., L]) and weighted by the item's total pair weight (as i and as j).
  log_sigmoid = jax.nn.log_sigmoid
  shown_terms = jnp.where(si, log_sigmoid(fo_i + delta), 0.0) + jnp.where(sj, log_sigmoid(fo_j + delta), 0.0)
  pair_obj = jnp.where(obs, pw * w * log_sigmoid(delta), 0.0) + sel_weight * jnp.where(
    obs | unobs, a * shown_terms, 0.0
  )
  item_pair_w = jnp.sum(a, axis=-1) + jnp.sum(a, axis=-2)
  unshown_obj = jnp.where(where & ~s, item_pair_w * log_sigmoid(-sel_scores), 0.0)
  per_list = -(jnp.sum(pair_obj, axis=(-2, -1)) + sel_weight * jnp.sum(unshown_obj, axis=-1))
  return _utils.reduce_loss(per_list, jnp.any(where, axis=-1), reduce_fn, mass=jnp.sum(a, axis=(-2, -1)))


def inverse_mills_ratio(z: jax.Array) -> jax.Array:
  r"""Inverse Mills ratio :math:`\lambda(z) = \varphi(z)/\Phi(z)`, in log space.

  .. math:: \lambda(z) = \exp\big(\log\varphi(z) - \log\Phi(z)\big)
            \approx \frac{-z}{1 - z^{-2} + 3 z^{-4}} \ (z < -100)

  Below :math:`z = -100` the two logs (about :math:`-z^2/2`) cancel to fewer
  digits than float32 holds, so the asymptotic series (error below
  :math:`10^{-11}` there) is used instead; it keeps :math:`\lambda` finite down to
  :math:`z = -10^{15}`.

  Args:
    z: the probit index (any shape).

  Returns:
    :math:`\lambda(z)`, the shape of ``z``.

  >>> print(round(float(inverse_mills_ratio(jnp.array(0.0))), 5))
  0.79788
  >>> print(f"{float(inverse_mills_ratio(jnp.array(-1e15))):.3g}")
  1e+15
  """
  z = jnp.asarray(z)
  tail = z < _MILLS_TAIL
  zt = jnp.where(tail, z, _MILLS_TAIL)  # double where: each branch sees only its own inputs
  zb = jnp.where(tail, 0.0, z)
  inv2 = 1.0 / jnp.square(zt)
  asymptotic = -zt / (1.0 - inv2 + 3.0 * jnp.square(inv2))
  return jnp.where(tail, asymptotic, jnp.exp(norm.logpdf(zb) - log_ndtr(zb)))


@register_loss("cld", parts=2)
def heckman_loss(
  scores: jax.Array,
  clicks: jax.Array,
  *,
  selection_scores: jax.Array,
  mills_coef: jax.Array,
  shown: jax.Array,
  where: Optional[jax.Array] = None,
  weights: Optional[jax.Array] = None,
  outcome: str = "ls",
  reduce_fn: Optional[ReduceFn] = jnp.mean,
  return_aux: bool = False,
):
  r"""Heckman\ :sup:`rank` (Ovaisi et al., WWW'20; a baseline of the CLD paper, Section 6) as one joint objective.

  Stage 1 is a probit of the selection :math:`s` on :math:`x` over every
  record; stage 2 fits the click on the shown records with the inverse Mills
  ratio :math:`\lambda_i = \lambda(\operatorname{sg}(f_\theta(x_i)))` as an
  extra regressor (stop-gradient, so the joint optimum is the two-step
  estimate):

  .. math::
      \ell = -\sum_i \big[s_i\log\Phi(f_\theta) + (1-s_i)\log\Phi(-f_\theta)\big]
             + \sum_{s_i = 1} \big(c_i - f_\beta(x_i) - \beta_\lambda\lambda_i\big)^2

  (``outcome="ls"``, the textbook second stage; ``"probit"`` uses the probit
  likelihood of the CTR instead). No propensities: Heckman corrects selection
  only. Rank by :math:`f_\beta` (the :math:`x` part). With a mean each
  stage is normalised by its (weighted) record count; ``reduce_fn`` reduces
  each stage's weighted records (None: per item, the two stages summed).
  Scores are bounded to :math:`\pm 10^{15}` as in :func:`cld_loss`.

  Args:
    scores: ``[..., L]`` the outcome model's scores :math:`f_\beta(x)`.
    clicks: ``[..., L]`` clicks or click-through rates (ignored where not shown).
    selection_scores: ``[..., L]`` the selection model's index :math:`f_\theta(x)`.
    mills_coef: the scalar :math:`\beta_\lambda` of the inverse Mills ratio.
    shown: ``bool[..., L]`` the selection indicator (the top k), as in :func:`cld_loss`.
    where: ``bool[..., L]`` the valid items (None: all).
    weights: optional ``[..., L]`` record weights, as in :func:`cld_loss`.
    outcome: ``"ls"`` (least squares) or ``"probit"``.
    reduce_fn: a mean over the valid records (weighted), ``jnp.sum``, any other reduction, or None for the per-item
      values.
    return_aux: also return ``{"selection_loss": ..., "outcome_loss": ...}``.

  Returns:
    The summed loss (a scalar, or the per-item values with ``reduce_fn=None``), or ``(loss, aux)`` with
    ``return_aux=True``.

  >>> one = jnp.ones(1)
  >>> print(round(float(heckman_loss(0 * one, one, selection_scores=0 * one, mills_coef=0.0, shown=one > 0)), 4))
  1.6931
  """
  if outcome not in ("ls", "probit"):
    raise ValueError(f"outcome must be 'ls' or 'probit', got {outcome!r}")
  rel_scores = _utils.bound_scores(jnp.asarray(scores))
  sel_scores = _utils.bound_scores(jnp.asarray(selection_scores))
  where = _utils.as_where(where, rel_scores.shape)
  s = jnp.asarray(shown).astype(bool) & where
  sel_nll = -jnp.where(s, log_ndtr(sel_scores), log_ndtr(-sel_scores))
  sel_part = _weighted_reduce(sel_nll, where, weights, reduce_fn)
  lam = jax.lax.stop_gradient(inverse_mills_ratio(sel_scores))
  pred = rel_scores + mills_coef * lam
  c = jnp.where(s, clicks, 0.0)
  if outcome == "ls":
    out_nll = jnp.square(c - pred)
  else:
    out_nll = -(c * log_ndtr(pred) + (1.0 - c) * log_ndtr(-pred))
  out_part = _weighted_reduce(out_nll, s, weights, reduce_fn)
  total = sel_part + out_part
  if return_aux:
    return total, {"selection_loss": sel_part, "outcome_loss": out_part}
  return total


def borda_scores(scores_a: jax.Array, scores_b: jax.Array, *, where: Optional[jax.Array] = None) -> jax.Array:
  r"""RankAgg's Borda count of two rankings (Ovaisi et al., WWW'20; a baseline of the CLD paper, Section 6): :math:`2n - \mathrm{rank}_a - \mathrm{rank}_b`.

  Ranks are 1-based within each list (descending score, ties by order of
  appearance; :func:`rax.utils.ranks`), :math:`n` is the list's number of
  valid items; higher is better. Masked items get 0.

  Args:
    scores_a: ``[..., L]`` the first ranking's scores.
    scores_b: ``[..., L]`` the second ranking's scores.
    where: ``bool[..., L]`` the valid items (None: all).

  Returns:
    ``[..., L]`` Borda counts (0 where masked).

  >>> print(borda_scores(jnp.array([3.0, 2.0, 1.0]), jnp.array([1.0, 3.0, 2.0])))
  [2. 3. 1.]
  """
  import rax

  scores_a = jnp.asarray(scores_a)
  where = _utils.as_where(where, scores_a.shape)
  ra = rax.utils.ranks(scores_a, where=where).astype(jnp.float32)
  rb = rax.utils.ranks(jnp.asarray(scores_b), where=where).astype(jnp.float32)
  n = jnp.sum(where, axis=-1, keepdims=True).astype(jnp.float32)
  return jnp.where(where, 2.0 * n - ra - rb, 0.0)
