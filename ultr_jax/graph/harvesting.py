r"""Propensities by intervention harvesting: position bias from logs of several rankers.

When the same item :math:`x` (a query-document pair) is shown at two bias
factors :math:`k \neq k'` (two positions, or two (context, position) factors)
by different logging rankers, the ratio of its click-through rates there is
:math:`o(k) / o(k')` under :math:`c(x, t) = r(x)\,o(t)`; no randomised
intervention is needed (Agarwal, Zaitsev, Wang, Li, Najork & Joachims,
"Estimating Position Bias without Intrusive Interventions", WSDM 2019;
Fang, Agarwal & Joachims, "Intervention Harvesting for Context-Dependent
Examination-Bias Estimation", SIGIR 2019).

The *intervention set* :math:`S_{k,k'}` holds the items shown at both
:math:`k` and :math:`k'`. Each item counts once, through its CTR
:math:`\bar c(x, t)` at each factor (clicks over impressions at that factor),
so a ranker that shows an item more often does not weigh it more:

.. math::
    C_{k,k'} = \sum_{x \in S_{k,k'}} \bar c(x, k), \qquad
    N_{k,k'} = |S_{k,k'}|, \qquad
    \mathbb{E}[C_{k,k'}] = o(k) \sum_{x \in S_{k,k'}} r(x) = o(k)\, N_{k,k'}\, \bar r_{k,k'}

with :math:`\bar r_{k,k'} = \bar r_{k',k}` (:func:`intervention_sets`, one
``segment_sum`` and two ``[T, N] @ [N, T]`` products). Three estimators,
each normalised so that the pivot factor has propensity 1:

* :func:`pivot_estimate`: :math:`\hat o(k) = C_{k,p} / C_{p,k}` (the
  "swap" or pivot estimator; with randomised swaps it is Joachims et al.'s
  RandPair).
* :func:`adjacent_chain_estimate`: :math:`\hat o(k) = \prod_{j \le k}
  C_{j,j-1} / C_{j-1,j}`, for positions in order.
* :func:`all_pairs_estimate`: the extremum estimator of Agarwal et al.,
  maximising the Bernoulli likelihood of every ordered pair,

  .. math::
      \max_{o, r}\; \sum_{k \neq k'} C_{k,k'} \log\big(o(k)\, r_{k,k'}\big)
      + (N_{k,k'} - C_{k,k'}) \log\big(1 - o(k)\, r_{k,k'}\big),

  with :math:`\log o(k) = u_k - u_p` (the scale of :math:`o` against
  :math:`r` is not identified, so the pivot's propensity is 1), a free
  symmetric :math:`\log r`, log-space terms and ``optax.lbfgs`` in a
  ``lax.while_loop``.

Which factors are identified is the identifiability question of Chen et al.
(ICML 2024) asked of these sets: a factor is identified iff it is connected
to the pivot through intervention sets that hold a click (the IG of
:mod:`~ultr_jax.graph.connectivity`, with edges weighted by clicks). An
unidentified factor's propensity is NaN and its ``identified`` entry False;
:func:`harvest_propensities`, the host-side entry point, raises instead
unless told otherwise. The naive baseline :func:`ctr_estimate` (pooled CTR per
factor) is biased whenever the rankers put relevant items first.

Records are the IG's: ``items``, ``factors``, ``clicks`` of any shape
``[...]`` (e.g. ``[sessions, list_size]``) with a bool ``where``; ``clicks``
are 0/1 per impression, or CTRs with ``weights`` = impressions.
"""

import functools
from typing import NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax._numerics import log1mexp
from ultr_jax._optim import lbfgs_minimize
from ultr_jax.graph.connectivity import connected_components
from ultr_jax.graph.records import ClickCounts
from ultr_jax.types import Array

__all__ = [
  "InterventionSets",
  "HarvestedPropensities",
  "intervention_sets",
  "intervention_sets_from_counts",
  "ctr_estimate",
  "pivot_estimate",
  "adjacent_chain_estimate",
  "all_pairs_estimate",
  "harvest_propensities",
  "HARVESTING_METHODS",
]

_HIGHEST = jax.lax.Precision.HIGHEST


class InterventionSets(NamedTuple):
  r"""Sufficient statistics of the harvested interventions, over ``T`` factors.

  Attributes:
    clicks: ``float[T, T]``, :math:`C_{k,k'}`: the summed CTRs at :math:`k`
      of the items shown at both :math:`k` and :math:`k'` (diagonal: every
      item shown at :math:`k`).
    items: ``float[T, T]``, :math:`N_{k,k'} = |S_{k,k'}|` (symmetric).
    factor_clicks: ``float[T]`` weighted clicks per factor (all items).
    factor_impressions: ``float[T]`` weighted impressions per factor.
  """

  clicks: Array
  items: Array
  factor_clicks: Array
  factor_impressions: Array


class HarvestedPropensities(NamedTuple):
  r"""Estimated propensities, normalised to 1 at the pivot factor.

  Attributes:
    propensities: ``float[T]``, NaN where not identified.
    identified: ``bool[T]``: connected to the pivot through intervention
      sets with clicks (for the chain: every link up to the factor).
    converged: ``bool[]``; False only if the all-pairs fit hit ``max_iters``.
  """

  propensities: Array
  identified: Array
  converged: Array


@functools.partial(jax.jit, static_argnames=("num_items", "num_factors"))
def intervention_sets(
  items: Array,
  factors: Array,
  clicks: Array,
  *,
  num_items: int,
  num_factors: int,
  where: Optional[Array] = None,
  weights: Optional[Array] = None,
) -> InterventionSets:
  r"""The intervention sets :math:`S_{k,k'}` of a click log, as :class:`InterventionSets`.

  Per cell (item :math:`x`, factor :math:`t`): clicks :math:`\sum w c` and
  impressions :math:`\sum w` by one ``segment_sum``, the CTR
  :math:`\bar c(x, t)` where the item was shown there, then
  :math:`C = \bar c^\top \mathbb{1}[\text{shown}]` and
  :math:`N = \mathbb{1}[\text{shown}]^\top \mathbb{1}[\text{shown}]`.

  Args:
    items: ``int[...]`` item (query-document) id per record, in
      ``[0, num_items)`` where valid.
    factors: ``int[...]`` bias factor (position) per record, in
      ``[0, num_factors)``.
    clicks: ``float[...]`` 0/1 clicks, or CTRs when ``weights`` are
      impression counts.
    num_items: static number of items ``N``.
    num_factors: static number of factors ``T``.
    where: optional ``bool[...]``; False records are ignored.
    weights: optional ``float[...]`` impressions per record (default 1).

  Returns:
    :class:`InterventionSets` with ``[T, T]`` and ``[T]`` arrays.

  Memory is dense in the cells: ``[N, T]`` floats (``N T < 2^31``), meant for
  position factors (``T`` up to a few hundred) over millions of items.

  >>> s = intervention_sets(jnp.array([[0, 1], [1, 0]]), jnp.array([[0, 1], [0, 1]]),
  ...                       jnp.array([[1., 0.], [1., 0.]]), num_items=2, num_factors=2)
  >>> print(s.clicks.tolist(), s.items.tolist())
  [[2.0, 2.0], [0.0, 0.0]] [[2.0, 2.0], [2.0, 2.0]]
  """
  if num_items * num_factors >= 2**31:  # the int32 cell ids (static sizes: raised while tracing)
    raise ValueError(
      f"{num_items} items x {num_factors} factors is too many (item, factor) cells for the"
      " dense intervention sets (< 2^31); harvest per position, or per context type"
    )
  x = jnp.ravel(jnp.asarray(items, jnp.int32))
  t = jnp.ravel(jnp.asarray(factors, jnp.int32))
  c = jnp.ravel(jnp.asarray(clicks, jnp.float32))
  m = jnp.ones(x.shape, bool) if where is None else jnp.ravel(jnp.asarray(where, bool))
  w = jnp.ones(x.shape, jnp.float32) if weights is None else jnp.ravel(jnp.asarray(weights, jnp.float32))
  w = jnp.where(m, w, 0.0)
  cell = jnp.where(m, x * num_factors + t, 0)
  n_cells = num_items * num_factors
  clk = jax.ops.segment_sum(w * jnp.where(m, c, 0.0), cell, num_segments=n_cells)
  imp = jax.ops.segment_sum(w, cell, num_segments=n_cells)
  clk = clk.reshape(num_items, num_factors)
  imp = imp.reshape(num_items, num_factors)
  shown = (imp > 0).astype(jnp.float32)
  ctr = jnp.where(imp > 0, clk / jnp.where(imp > 0, imp, 1.0), 0.0)
  return InterventionSets(
    clicks=jnp.matmul(ctr.T, shown, precision=_HIGHEST),
    items=jnp.matmul(shown.T, shown, precision=_HIGHEST),
    factor_clicks=jnp.sum(clk, axis=0),
    factor_impressions=jnp.sum(imp, axis=0),
  )


def intervention_sets_from_counts(counts: ClickCounts) -> InterventionSets:
  r""":func:`intervention_sets` of a log reduced to its clicks and impressions per (item, factor) cell.

  The cells' CTRs :math:`k / n` as records of weight :math:`n`: the sets equal those of the log's
  records (up to float rounding), so a log streamed into :func:`~ultr_jax.graph.gather_click_counts`
  harvests the propensities of the log read whole.

  Args:
    counts: a log's :class:`~ultr_jax.graph.ClickCounts`.

  Returns:
    The log's :class:`InterventionSets`.

  >>> from ultr_jax.graph import click_counts
  >>> c = click_counts(np.array([[0, 1], [1, 0]]), np.array([[0, 1], [0, 1]]), np.array([[1., 0.], [1., 0.]]))
  >>> s = intervention_sets_from_counts(c)
  >>> print(s.clicks.tolist(), s.items.tolist())
  [[2.0, 2.0], [0.0, 0.0]] [[2.0, 2.0], [2.0, 2.0]]
  """
  return intervention_sets(
    counts.items,
    counts.factors,
    counts.ctr,
    weights=counts.impressions,
    num_items=max(int(counts.num_items), 1),
    num_factors=max(int(counts.num_factors), 1),
  )


def _finish(ratio, identified, pivot, converged: Union[bool, jax.Array] = True):
  ratio = (ratio / ratio[pivot]).at[pivot].set(1.0)
  return HarvestedPropensities(jnp.where(identified, ratio, jnp.nan), identified, jnp.asarray(converged, bool))


@functools.partial(jax.jit, static_argnames=("pivot",))
def ctr_estimate(sets: InterventionSets, *, pivot: int = 0) -> HarvestedPropensities:
  r"""The naive estimate: pooled CTR per factor, :math:`\hat o(k) = \text{CTR}_k / \text{CTR}_p`.

  Biased whenever the logging rankers put more relevant items at some factors
  (it is what the harvesting estimators correct). On a log whose lists are
  shuffled uniformly at random (RandTop-n, Joachims, Swaminathan & Schnabel,
  WSDM'17; ULTRA's ``RandomizedPropensityEstimator``) the position is
  independent of relevance, and this is the unbiased result-randomisation
  estimate. Identified where the factor has impressions and the pivot has
  clicks.

  Args:
    sets: the harvested :class:`InterventionSets`.
    pivot: the factor the propensities are relative to.

  Returns:
    The :class:`HarvestedPropensities` (1 at the pivot).

  >>> s = InterventionSets(jnp.zeros((2, 2)), jnp.zeros((2, 2)), jnp.array([4., 1.]),
  ...                      jnp.array([8., 4.]))
  >>> print(ctr_estimate(s).propensities.tolist())
  [1.0, 0.5]
  """
  imp = sets.factor_impressions
  ctr = sets.factor_clicks / jnp.where(imp > 0, imp, 1.0)
  ok = (imp > 0) & (ctr[pivot] > 0)
  return _finish(jnp.where(ok, ctr, 1.0), ok, pivot)


@functools.partial(jax.jit, static_argnames=("pivot",))
def pivot_estimate(sets: InterventionSets, *, pivot: int = 0) -> HarvestedPropensities:
  r"""The pivot (swap) estimator: :math:`\hat o(k) = C_{k,p} / C_{p,k}`.

  Uses only the items shown both at factor :math:`k` and at the pivot
  :math:`p`; identified where that set holds a click at the pivot.

  Args:
    sets: :class:`InterventionSets` over ``T`` factors.
    pivot: static pivot factor (propensity 1).

  Returns:
    :class:`HarvestedPropensities`.

  >>> c = jnp.array([[3., 3.], [1., 2.]])
  >>> s = InterventionSets(c, jnp.full((2, 2), 4.), jnp.zeros(2), jnp.zeros(2))
  >>> print(pivot_estimate(s).propensities.tolist())
  [1.0, 0.3333333432674408]
  """
  num = sets.clicks[:, pivot]
  den = sets.clicks[pivot, :]
  ok = (sets.items[:, pivot] > 0) & (den > 0)
  return _finish(jnp.where(ok, num / jnp.where(ok, den, 1.0), 1.0), ok, pivot)


@jax.jit
def adjacent_chain_estimate(sets: InterventionSets) -> HarvestedPropensities:
  r"""The adjacent-chain estimator: :math:`\hat o(k) = \prod_{j=1}^{k} C_{j,j-1} / C_{j-1,j}`.

  For positions in display order (factor 0 is the pivot). Each link uses the
  items shown at two neighbouring positions, which are the most common swaps;
  a missing link (no shared item, or no click at the upper position) leaves
  every lower position unidentified.

  Args:
    sets: the harvested :class:`InterventionSets`.

  Returns:
    The :class:`HarvestedPropensities` (normalised to 1 at factor 0).

  >>> c = jnp.array([[3., 3., 0.], [1., 2., 4.], [0., 1., 2.]])
  >>> s = InterventionSets(c, jnp.full((3, 3), 4.), jnp.zeros(3), jnp.zeros(3))
  >>> print([round(v, 4) for v in adjacent_chain_estimate(s).propensities.tolist()])
  [1.0, 0.3333, 0.0833]
  """
  lower = jnp.diagonal(sets.clicks, offset=-1)  # C[j, j-1]
  upper = jnp.diagonal(sets.clicks, offset=1)  # C[j-1, j]
  link_ok = (jnp.diagonal(sets.items, offset=1) > 0) & (upper > 0)
  link = jnp.where(link_ok, lower / jnp.where(link_ok, upper, 1.0), 1.0)
  ok = jnp.concatenate([sets.clicks[:1, 0] > 0, jnp.cumprod(link_ok) > 0])
  ratio = jnp.concatenate([jnp.ones(1), jnp.cumprod(link)])
  return _finish(ratio, ok, 0)


@functools.partial(jax.jit, static_argnames=("pivot", "max_iters"))
def all_pairs_estimate(
  sets: InterventionSets, *, pivot: int = 0, max_iters: int = 1000, tol: float = 1e-7
) -> HarvestedPropensities:
  r"""The all-pairs extremum estimator (Agarwal et al., WSDM 2019).

  Maximises the Bernoulli log-likelihood of every ordered pair :math:`k \neq
  k'` with items in :math:`S_{k,k'}`, divided by :math:`\sum N_{k,k'}`, by
  ``optax.lbfgs`` until the gradient norm is below ``tol`` (or ``max_iters``).
  The parameters are :math:`\log o(k) = u_k - u_p` and a free symmetric
  :math:`\log r_{k,k'} = (W + W^\top)_{k,k'} / 2`, so
  :math:`\log p_{k,k'} = \log o(k) + \log r_{k,k'}` is linear and the
  objective smooth inside :math:`p < 1`, whose boundary the
  :math:`\log(1 - p)` terms keep the fit away from; the start (pooled-CTR
  propensities, pair relevances capped below :math:`p = 0.999`) is feasible.
  Two earlier parameterisations failed on exact CTRs: :math:`o, r` as
  sigmoids stalled 1% off (the flat direction :math:`(\alpha o, r / \alpha)`
  with :math:`r` saturated), and :math:`o` pinned by its maximum put a kink at
  ties of the largest :math:`o` and stalled at XLA's unoptimised level. Uses
  every pair, so it is the most data-efficient of the three; it identifies
  exactly the factors connected to the pivot through sets with clicks.

  Args:
    sets: :class:`InterventionSets` over ``T`` factors.
    pivot: static pivot factor (propensity 1).
    max_iters: static cap on L-BFGS iterations.
    tol: gradient-norm tolerance.

  Returns:
    :class:`HarvestedPropensities` (``converged`` False if ``max_iters`` was
    reached).

  >>> o, r = jnp.array([1., .5, .25]), jnp.array([[.4, .6, .5], [.6, .4, .3], [.5, .3, .4]])
  >>> n = jnp.full((3, 3), 100.)
  >>> s = InterventionSets(o[:, None] * r * n, n, jnp.zeros(3), jnp.zeros(3))
  >>> print([round(v, 3) for v in all_pairs_estimate(s).propensities.tolist()])
  [1.0, 0.5, 0.25]
  """
  num_factors = sets.clicks.shape[0]
  off = ~jnp.eye(num_factors, dtype=bool)
  n = jnp.where(off, sets.items, 0.0)
  c = jnp.where(off, jnp.minimum(sets.clicks, sets.items), 0.0)
  total = jnp.maximum(jnp.sum(n), 1.0)

  def neg_log_lik(params):
    u, w = params
    # log p_kk' = log o(k) + log r_kk', with log o(k) = u_k - u_p and a free symmetric log r: smooth
    # inside the feasible set p < 1, whose boundary the log(1 - p) term keeps the fit away from.
    log_p = jnp.minimum((u - u[pivot])[:, None] + 0.5 * (w + w.T), -1e-7)
    ll = c * log_p + (n - c) * log1mexp(log_p)
    return -jnp.sum(jnp.where(n > 0, ll, 0.0)) / total

  # Start from the pooled CTRs' propensities (pivot-relative, as in the objective; 1 where the pooled
  # CTR says nothing) and, per pair, the shared relevance that explains its CTRs, capped inside p < 1
  # so that the start is feasible.
  imp = sets.factor_impressions
  ctr = sets.factor_clicks / jnp.where(imp > 0, imp, 1.0)
  o0 = jnp.where(
    (imp > 0) & (ctr > 0) & (ctr[pivot] > 0), jnp.clip(ctr / jnp.where(ctr[pivot] > 0, ctr[pivot], 1.0), 1e-3, 1e3), 1.0
  )
  r0 = (c + c.T) / jnp.maximum((n + n.T) * (o0[:, None] + o0[None, :]) / 2, 1e-12)
  r0 = jnp.clip(r0, 1e-6, 0.999 / jnp.maximum(o0[:, None], o0[None, :]))
  params = (jnp.log(o0), jnp.log(r0))
  params, gnorm, _ = lbfgs_minimize(neg_log_lik, params, max_iters=max_iters, tol=tol)
  # Identified: the pivot's component among pairs with items and a click.
  informative = (n > 0) & ((c + c.T) > 0)
  ids = jnp.arange(num_factors)
  labels, _, _ = connected_components(
    jnp.repeat(ids, num_factors), jnp.tile(ids, num_factors), num_nodes=num_factors, edge_mask=informative.ravel()
  )
  has_clicks = jnp.any(informative, axis=1)
  ok = (labels == labels[pivot]) & has_clicks[pivot] & (has_clicks | (ids == pivot))
  return _finish(jnp.exp(params[0] - params[0][pivot]), ok, pivot, gnorm <= tol)


HARVESTING_METHODS = {
  "all_pairs": all_pairs_estimate,
  "pivot": pivot_estimate,
  "adjacent_chain": adjacent_chain_estimate,
  "ctr": ctr_estimate,
}


#: An all-pairs estimate outside ``[1 / DIVERGED, DIVERGED]`` (relative to the pivot) ran off to the boundary.
DIVERGED = 1e6


def _check_finite_maximum(est: HarvestedPropensities, sets: InterventionSets, pivot: int, allow: bool):
  """Raises (or, with ``allow``, marks not identified, NaN) the factors whose all-pairs estimate diverged.

  The all-pairs likelihood has no finite maximum when a pair's clicks lie on one side only (clicks at
  ``k'`` and none at ``k``, or every impression clicked) and nothing else pins the ratio ``o(k) / o(k')``:
  the fit then runs towards 0 or infinity (a tiny log gives ``2e15`` where the pivot estimator gives 0.5).
  """
  o = np.asarray(est.propensities, np.float64)
  bad = np.asarray(est.identified) & ~((o > 1 / DIVERGED) & (o < DIVERGED))
  if not bad.any():
    return est
  k = np.flatnonzero(bad)
  if allow:
    keep = ~bad
    return est._replace(
      propensities=jnp.where(jnp.asarray(keep), est.propensities, jnp.nan), identified=est.identified & keep
    )
  c, n = np.asarray(sets.clicks), np.asarray(sets.items)
  one_sided = [
    (int(a), int(b)) for a in k for b in range(len(o)) if a != b and n[a, b] > 0 and ((c[a, b] == 0) != (c[b, a] == 0))
  ]
  raise ValueError(
    f"all_pairs: the estimates of factors {k.tolist()} ran off to {[float(f'{v:.3g}') for v in o[k]]} (relative to "
    f"factor {pivot}): the pair likelihood has no finite maximum on this log, an ill-conditioned pair graph "
    f"(pairs of factors {one_sided or 'linking them'} have clicks on one side only, too few to pin the ratio); "
    "use more sessions or method='pivot', or pass allow_unidentified=True to get NaN for them"
  )


def harvest_propensities(
  items,
  factors,
  clicks,
  *,
  method: str = "all_pairs",
  where=None,
  weights=None,
  num_items: Optional[int] = None,
  num_factors: Optional[int] = None,
  pivot: int = 0,
  allow_unidentified: bool = False,
) -> HarvestedPropensities:
  r"""Position (bias-factor) propensities from a click log of several rankers.

  The host-side entry point: checks the records, builds
  :func:`intervention_sets` and runs one estimator of
  :data:`HARVESTING_METHODS` (``"all_pairs"``, ``"pivot"``,
  ``"adjacent_chain"``, or the biased ``"ctr"``).

  Args:
    items, factors, clicks, where, weights: records as in
      :func:`intervention_sets` (NumPy or JAX arrays of one shape).
    method: the estimator.
    num_items, num_factors: id ranges (default: max id + 1).
    pivot: the factor normalised to propensity 1 (0 for the chain).
    allow_unidentified: return NaN for unidentified factors instead of
      raising.

  Returns:
    :class:`HarvestedPropensities`.

  Raises:
    ValueError: on bad records, or (unless ``allow_unidentified``) when some
      factor that occurs in the log is not identified, naming those factors;
      for ``"all_pairs"``, also a factor whose estimate runs off beyond
      :math:`[10^{-6}, 10^{6}]` (the likelihood has no finite maximum: pairs
      with clicks on one side only), naming the factors and pairs.

  >>> items = np.array([[0, 1], [1, 0], [2, 3], [3, 2]])
  >>> clicks = np.array([[1., 1.], [1., 0.], [1., 0.], [1., 1.]])
  >>> est = harvest_propensities(items, np.tile([0, 1], (4, 1)), clicks, method="pivot")
  >>> print(est.propensities.tolist())
  [1.0, 0.5]
  """
  if method not in HARVESTING_METHODS:
    raise ValueError(f"unknown harvesting method {method!r}; expected one of {sorted(HARVESTING_METHODS)}")
  x, t, c = np.asarray(items), np.asarray(factors), np.asarray(clicks, np.float64)
  m = np.ones(x.shape, bool) if where is None else np.asarray(where, bool)
  w = None if weights is None else np.asarray(weights, np.float64)
  shapes = {"items": x.shape, "factors": t.shape, "clicks": c.shape, "where": m.shape}
  if w is not None:
    shapes["weights"] = w.shape
  if len(set(shapes.values())) != 1:
    raise ValueError(f"records must share one shape, got {shapes}")
  if not (np.issubdtype(x.dtype, np.integer) and np.issubdtype(t.dtype, np.integer)):
    raise ValueError(f"items and factors must be integer ids, got {x.dtype} and {t.dtype}")
  if num_items is None:
    num_items = int(x[m].max()) + 1 if m.any() else 1
  if num_factors is None:
    num_factors = int(t[m].max()) + 1 if m.any() else 1
  for name, ids, hi in (("items", x, num_items), ("factors", t, num_factors)):
    bad = m & ((ids < 0) | (ids >= hi))
    if bad.any():
      i = tuple(int(j) for j in np.argwhere(bad)[0])
      raise ValueError(f"{name}[{i}] = {int(ids[i])} is outside [0, {hi})")
  bad = m & ~((c >= 0) & (c <= 1))  # also catches NaN
  if bad.any():
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    raise ValueError(f"clicks[{i}] = {c[i]} is not a click (0/1) or a CTR in [0, 1]")
  if w is not None and (m & (~np.isfinite(w) | (w < 0))).any():
    i = tuple(int(j) for j in np.argwhere(m & (~np.isfinite(w) | (w < 0)))[0])
    raise ValueError(f"weights[{i}] = {w[i]} must be a finite impression count >= 0")
  if not 0 <= pivot < num_factors:
    raise ValueError(f"pivot {pivot} is outside [0, {num_factors})")
  sets = intervention_sets(x, t, c, num_items=num_items, num_factors=num_factors, where=m, weights=w)
  fn = HARVESTING_METHODS[method]
  est = fn(sets) if method == "adjacent_chain" else fn(sets, pivot=pivot)
  if method == "all_pairs":
    est = _check_finite_maximum(est, sets, pivot, allow_unidentified)
  anchor = 0 if method == "adjacent_chain" else pivot  # propensity 1 by definition: identified on any log
  est = est._replace(propensities=est.propensities.at[anchor].set(1.0), identified=est.identified.at[anchor].set(True))
  if not allow_unidentified:
    occurs = np.asarray(sets.factor_impressions) > 0
    missing = np.flatnonzero(occurs & ~np.asarray(est.identified))
    if missing.size:
      single = m.ndim >= 2 and int(m.sum(-1).max()) <= 1
      why = (
        "every list holds at most one document, so no item is seen under two factors and only the pivot (1 by"
        " definition) is identified"
        if single
        else f"no chain of shared, clicked items links them to factor {anchor}; see check_identifiability"
      )
      raise ValueError(
        f"{method}: the propensities of factors {missing.tolist()} are not identified from this log ({why});"
        " pass allow_unidentified=True to get NaN for them"
      )
  return est
