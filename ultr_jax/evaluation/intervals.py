r"""Confidence intervals for an estimate, and the paired difference of two rankers on the same log.

* :func:`normal_interval`: :math:`\hat V \pm z_{1-\alpha/2}\, s / \sqrt n` with :math:`s` the standard deviation of
  the estimate's per-session terms (for a self-normalised estimator their delta-method linearisation).
* :func:`bootstrap_interval`: the percentile bootstrap (Efron & Tibshirani, 1993, Section 13.3): sessions are
  resampled with replacement (as multinomial counts passed to the estimator as ``session_weights``, so a
  self-normalised estimator is recomputed on each replicate, normaliser included); the replicates are vmapped
  over keys.
* :func:`difference` / :func:`paired_bootstrap_interval`: two estimates on the same sessions, differenced
  session by session (the same resampled sessions for both), so what the two rankers share cancels.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.stats as jstats

from ultr_jax.evaluation._common import Estimate, safe_div
from ultr_jax.types import Array, PRNGKey

__all__ = ["Interval", "normal_interval", "bootstrap_interval", "difference", "paired_bootstrap_interval"]


class Interval(NamedTuple):
  """A two-sided confidence interval.

  Attributes:
    value: ``[]`` the point estimate.
    lower: ``[]`` lower bound.
    upper: ``[]`` upper bound.
    stderr: ``[]`` the standard error (normal: of the terms' mean; bootstrap: the replicates' standard deviation).
  """

  value: Array
  lower: Array
  upper: Array
  stderr: Array


def normal_interval(estimate: Estimate, *, alpha: float = 0.05) -> Interval:
  r"""The normal-approximation interval :math:`\hat V \pm z_{1-\alpha/2}\, s / \sqrt{n}`.

  .. math::
      s^2 = \frac{1}{n - 1} \sum_i (t_i - \hat V)^2

  over the :math:`n` valid sessions' terms :math:`t_i` (:attr:`Estimate.terms`, weighted by
  :attr:`Estimate.session_weights`; the central limit theorem for the mean, Owen, *Monte Carlo theory, methods
  and examples*, 2013, Section 2.3).

  Args:
    estimate: an :class:`Estimate`.
    alpha: miscoverage (0.05: a 95% interval).

  Returns:
    :class:`Interval`.

  >>> est = Estimate(jnp.array(1.0), jnp.array([0.0, 2.0, 1.0, 1.0]), jnp.array(0), jnp.array(4.0), jnp.ones(4))
  >>> print(normal_interval(est).stderr.round(4))
  0.4082
  """
  terms = jnp.asarray(estimate.terms, jnp.float32)
  sw = jnp.asarray(estimate.session_weights, jnp.float32)
  n = jnp.sum(sw)
  var = safe_div(jnp.sum(sw * (terms - estimate.value) ** 2), n - 1.0)
  stderr = jnp.sqrt(safe_div(var, n))
  z = jstats.norm.ppf(1.0 - alpha / 2.0)
  return Interval(estimate.value, estimate.value - z * stderr, estimate.value + z * stderr, stderr)


def _counts(key: PRNGKey, mask: Array) -> Array:
  """Multinomial counts ``[B]``: ``n = sum(mask)`` draws with replacement among the valid sessions."""
  size = mask.shape[-1]
  n = jnp.sum(mask)
  p = mask / jnp.maximum(n, 1)
  idx = jax.random.choice(key, size, (size,), p=p)
  keep = jnp.arange(size) < n
  return jnp.zeros(size).at[idx].add(keep.astype(jnp.float32))


def _percentiles(values: Array, value: Array, alpha: float) -> Interval:
  lo, hi = jnp.quantile(values, jnp.array([alpha / 2.0, 1.0 - alpha / 2.0]))
  return Interval(value, lo, hi, jnp.std(values, ddof=1))


def bootstrap_interval(
  fn: Callable[[Array], Estimate],
  key: PRNGKey,
  *,
  num_replicates: int = 1000,
  alpha: float = 0.05,
) -> Interval:
  r"""The percentile bootstrap interval of an estimator, resampling sessions.

  .. math::
      [\hat V^*_{(\alpha/2)},\; \hat V^*_{(1-\alpha/2)}], \qquad \hat V^*_b = \hat V(\text{log resampled with
      counts } n^{(b)} \sim \mathrm{Mult}(n, \mathbb{1}/n))

  (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, Eq. 13.5). Each replicate calls ``fn`` with
  its counts as ``session_weights``, so self-normalised estimators recompute their normalisers; the replicates
  run under one ``vmap`` over keys.

  Args:
    fn: ``session_weights -> Estimate`` (an estimator with the log bound, e.g. a ``functools.partial``;
      ``fn(None)`` is the estimate on the log itself, whose :attr:`Estimate.session_weights` mark the sessions
      resampled).
    key: PRNG key.
    num_replicates: bootstrap replicates.
    alpha: miscoverage.

  Returns:
    :class:`Interval` (``value``: ``fn`` on the log itself).

  >>> terms = jnp.arange(10.0)
  >>> def fn(sw):
  ...   sw = jnp.ones(10) if sw is None else sw
  ...   return Estimate(jnp.sum(sw * terms) / jnp.sum(sw), terms, jnp.array(0), jnp.sum(sw), sw)
  >>> ci = bootstrap_interval(fn, jax.random.key(0), num_replicates=2000)
  >>> print(bool(ci.lower < 4.5 < ci.upper), ci.value)
  True 4.5
  """
  base = fn(None)
  mask = jnp.asarray(base.session_weights) > 0
  values = jax.vmap(lambda k: fn(_counts(k, mask)).value)(jax.random.split(key, num_replicates))
  return _percentiles(values, base.value, alpha)


def difference(a: Estimate, b: Estimate) -> Estimate:
  r"""The paired difference of two estimates on the same log: :math:`\hat V_a - \hat V_b` with per-session terms
  :math:`t^a_i - t^b_i` (so :func:`normal_interval` gives the paired interval, whose variance
  :math:`\mathrm{Var}(t^a) + \mathrm{Var}(t^b) - 2\,\mathrm{Cov}(t^a, t^b)` keeps what the two share out).

  Args:
    a, b: :class:`Estimate` on the same sessions.

  Returns:
    :class:`Estimate` (``num_clipped``: the sum).

  >>> e = lambda t: Estimate(jnp.mean(t), t, jnp.array(0), jnp.array(2.0), jnp.ones(2))
  >>> print(difference(e(jnp.array([1.0, 3.0])), e(jnp.array([0.5, 2.5]))).terms)
  [0.5 0.5]
  """
  return Estimate(
    a.value - b.value, a.terms - b.terms, a.num_clipped + b.num_clipped, a.num_sessions, a.session_weights
  )


def paired_bootstrap_interval(
  fn_a: Callable[[Array], Estimate],
  fn_b: Callable[[Array], Estimate],
  key: PRNGKey,
  *,
  num_replicates: int = 1000,
  alpha: float = 0.05,
) -> Interval:
  r"""The percentile bootstrap interval of :math:`V_a - V_b`, both estimators on the same resampled sessions.

  Args:
    fn_a, fn_b: ``session_weights -> Estimate`` for the two rankers on the same log.
    key, num_replicates, alpha: as :func:`bootstrap_interval`.

  Returns:
    :class:`Interval` of the difference.

  >>> def mean_of(t):
  ...   def fn(sw):
  ...     sw = jnp.ones(10) if sw is None else sw
  ...     return Estimate(jnp.sum(sw * t) / jnp.sum(sw), t, jnp.array(0), jnp.sum(sw), sw)
  ...   return fn
  >>> t = jnp.arange(10.0)
  >>> ci = paired_bootstrap_interval(mean_of(t), mean_of(t - 1.0), jax.random.key(0), num_replicates=50)
  >>> print(ci.lower.round(4), ci.upper.round(4))  # the shared noise cancels exactly
  1.0 1.0
  """
  return bootstrap_interval(
    lambda sw: difference(fn_a(sw), fn_b(sw)),
    key,
    num_replicates=num_replicates,
    alpha=alpha,
  )
