r"""Confidence intervals for an estimate, and the paired difference of two rankers on the same log.

* :func:`normal_interval`: :math:`\hat V \pm z_{1-\alpha/2}\, s / \sqrt n` with :math:`s` the standard deviation of
  the estimate's per-session terms (for a self-normalised estimator their delta-method linearisation).
* :func:`bootstrap_interval`: the percentile bootstrap (Efron & Tibshirani, 1993, Section 13.3): sessions are
  reweighted (Poisson(1) weights, or Efron's multinomial counts) and each replicate is the estimate's weighted
  mean of its per-session terms, or for a self-normalised estimator its weighted numerators over its weighted
  denominators (normaliser included), without re-running the estimator; replicates are vmapped in chunks.
* :func:`difference` / :func:`paired_bootstrap_interval`: two estimates on the same sessions, differenced
  session by session (the same resampled sessions for both), so what the two rankers share cancels.
"""

import math
from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import jax.scipy.stats as jstats
import numpy as np

from ultr_jax.evaluation._common import Estimate, plain_parts, ratios_value, safe_div
from ultr_jax.types import Array, PRNGKey

__all__ = ["Interval", "normal_interval", "bootstrap_interval", "difference", "paired_bootstrap_interval"]


class Interval(NamedTuple):
  r"""A two-sided confidence interval.

  Attributes:
    value: ``[]`` the point estimate.
    lower: ``[]`` lower bound.
    upper: ``[]`` upper bound.
    stderr: ``[]`` the standard error (normal: of the terms' mean; bootstrap: the replicates' standard deviation).
    trusted: ``bool[]``: the estimate has the sessions an interval needs (at least 2 valid sessions, and one with
      a non-zero importance weight). On concrete values an untrusted interval is refused (``ValueError``);
      under ``jit`` it is returned as :math:`(-\infty, \infty)` with ``trusted`` False, never zero-width.
  """

  value: Array
  lower: Array
  upper: Array
  stderr: Array
  trusted: Optional[Array] = None


#: The fewest valid sessions an interval is computed from (one session has no spread to estimate).
MIN_SESSIONS = 2


def _trusted(estimate: Estimate, what: str) -> Array:
  """``bool[]``: whether ``estimate`` has the sessions an interval needs; on concrete values a ``ValueError``
  saying what is missing when it does not."""
  if np.ndim(estimate.terms) >= 1 and np.shape(estimate.terms)[0] == 0:
    raise ValueError(f"{what}: the log has no sessions; an interval needs at least {MIN_SESSIONS}")
  n = jnp.sum(jnp.asarray(estimate.session_weights, jnp.float32) > 0)
  nonzero = estimate.num_nonzero_weight
  ok = (n >= MIN_SESSIONS) & (True if nonzero is None else jnp.asarray(nonzero) > 0)
  try:
    concrete = bool(ok)
  except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError):
    return ok
  if not concrete:
    if int(n) < MIN_SESSIONS:
      raise ValueError(
        f"{what}: {int(n)} valid session(s) (all-masked sessions do not count); an interval needs at least "
        f"{MIN_SESSIONS}: with fewer there is no spread to estimate (it would be zero-width)"
      )
    raise ValueError(
      f"{what}: no session has a non-zero importance weight (num_nonzero_weight is 0): no logged session "
      "supports the target (a deterministic target that no logged ranking matched, or an item at a position the "
      "logging policy never uses); its estimate is not identified from this log"
    )
  return ok


def _flagged(interval: Interval, ok: Array) -> Interval:
  r"""``interval`` as :math:`(-\infty, \infty)` where ``ok`` is False (under ``jit``), with ``trusted``."""
  inf = jnp.asarray(jnp.inf, jnp.result_type(interval.lower, jnp.float32))
  lower = jnp.where(ok, interval.lower, -inf)
  upper = jnp.where(ok, interval.upper, inf)
  return interval._replace(lower=lower, upper=upper, trusted=jnp.asarray(ok))


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
    :class:`Interval` (``trusted``: see :class:`Interval`).

  Raises:
    ValueError: fewer than 2 valid sessions, or none with a non-zero importance weight (concrete values).

  >>> est = Estimate(jnp.array(1.0), jnp.array([0.0, 2.0, 1.0, 1.0]), jnp.array(0), jnp.array(4.0), jnp.ones(4))
  >>> print(normal_interval(est).stderr.round(4))
  0.4082
  """
  ok = _trusted(estimate, "normal_interval")
  terms = jnp.asarray(estimate.terms, jnp.float32)
  sw = jnp.asarray(estimate.session_weights, jnp.float32)
  n = jnp.sum(sw)
  var = safe_div(jnp.sum(sw * (terms - estimate.value) ** 2), n - 1.0)
  stderr = jnp.sqrt(safe_div(var, n))
  z = jstats.norm.ppf(1.0 - alpha / 2.0)
  return _flagged(Interval(estimate.value, estimate.value - z * stderr, estimate.value + z * stderr, stderr), ok)


_RESAMPLING = ("poisson", "multinomial")


def _poisson_thresholds() -> tuple[int, ...]:
  """The Poisson(1) distribution function at 0, 1, 2, ... in units of :math:`2^{-32}` (those below :math:`2^{32}`)."""
  cdf = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(20)])
  return tuple(int(t) for t in np.round(cdf * 2.0**32) if t < 2.0**32)


_POISSON_THRESHOLDS = np.array(_poisson_thresholds(), np.uint32)


# Why a hash and not jax.random: a replicate's weights cost one multiply-add per session, and jax.random's bits
# cost more than that by far on a CPU (threefry and rbg measured against this hash by benchmarks/bootstrap_rng.py:
# 3.8-5.9x slower at 10^6 sessions x 256 replicates, 2026-12-02); the hash is evaluated inside the fused weighted
# sum, so no weights are stored.
def _mix32(x: Array) -> Array:
  """An integer hash of ``uint32`` words with full avalanche (Wellons' ``lowbias32``; a bijection)."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def _poisson_weights(seeds: Array, start: Array, size: int) -> Array:
  r"""``float32[R, size]`` Poisson(1) weights of sessions ``start .. start + size - 1`` in the replicates whose
  seeds are ``seeds [R, 2]``: :math:`w_{bi} = \#\{k : u_{bi} \ge 2^{32} F(k)\}` for the Poisson(1) distribution
  function :math:`F` and the 32-bit uniform :math:`u_{bi} = h(h(i \oplus s_{b1}) \oplus s_{b2})`. A weight
  depends on its session's index and its replicate's seeds only (not on the blocks it is computed in)."""
  i = jnp.asarray(start, jnp.uint32) + jax.lax.broadcasted_iota(jnp.uint32, (seeds.shape[0], size), 1)
  u = _mix32(_mix32(i ^ seeds[:, :1]) ^ seeds[:, 1:])
  thresholds = jnp.asarray(_POISSON_THRESHOLDS, jnp.uint32)
  return jnp.searchsorted(thresholds, u, side="right", method="compare_all").astype(jnp.float32)


def _multinomial_counts(key: PRNGKey, valid: Array) -> Array:
  """``float32[B]`` multinomial counts: ``n = sum(valid)`` draws with replacement among the valid sessions."""
  size = valid.shape[-1]
  n = jnp.sum(valid)
  rows = jnp.nonzero(valid, size=size, fill_value=0)[0]
  drawn = rows[jax.random.randint(key, (size,), 0, jnp.maximum(n, 1))]
  keep = (jnp.arange(size) < n).astype(jnp.float32)
  return jax.ops.segment_sum(keep, drawn, num_segments=size)


def _draws(key: PRNGKey, num_replicates: int, resampling: str) -> Array:
  """Each replicate's randomness: two ``uint32`` seeds (Poisson) or a key (multinomial)."""
  if resampling == "poisson":
    return jax.random.bits(key, (num_replicates, 2), jnp.uint32)
  return jax.random.split(key, num_replicates)


def _statistics(estimate: Estimate) -> Array:
  """``float32[B, C]`` what a replicate sums per session: the valid-session indicator, then the terms (a mean)
  or the flattened :attr:`Estimate.ratios` (a self-normalised estimator)."""
  terms = jnp.asarray(estimate.terms, jnp.float32)
  if terms.ndim != 1:
    raise ValueError(f"bootstrap: the estimate's terms must be [sessions], got shape {terms.shape}")
  valid = (jnp.asarray(estimate.session_weights, jnp.float32) > 0).astype(jnp.float32)
  if estimate.ratios is None:
    columns = (terms * valid)[:, None]
  else:
    columns = (jnp.asarray(estimate.ratios, jnp.float32) * valid[:, None, None]).reshape(terms.shape[0], -1)
  return jnp.concatenate([valid[:, None], columns], axis=-1)


def _value_of_sums(sums: Array, ratio: bool) -> Array:
  """Replicate values ``[R]`` from their weighted sums ``[R, C]`` of :func:`_statistics`."""
  if not ratio:
    return safe_div(sums[:, 1], sums[:, 0])
  return ratios_value(sums[:, 1:].reshape(sums.shape[0], -1, 3), sums[:, 0])


def _poisson_sums(stats: Array, seeds: Array) -> Array:
  """``[R, C]`` the Poisson-weighted sums of ``stats [B, C]``, block by block of sessions (weights never stored
  whole: ``R x block`` at a time)."""
  size, cols = stats.shape
  block = min(-(-size // 8) * 8, max(1024, (1 << 18) // seeds.shape[0]))
  num_blocks = -(-size // block)
  x = jnp.pad(stats, ((0, num_blocks * block - size), (0, 0))).reshape(num_blocks, block, cols)

  def body(acc, jx):
    j, xb = jx
    return acc + _poisson_weights(seeds, j * jnp.uint32(block), block) @ xb, None

  starts = jnp.arange(num_blocks, dtype=jnp.uint32)
  return jax.lax.scan(body, jnp.zeros((seeds.shape[0], cols), jnp.float32), (starts, x))[0]


def _replicates(estimate: Estimate, key: PRNGKey, num_replicates: int, resampling: str, chunk_size: int) -> Array:
  """``[num_replicates]`` bootstrap values of ``estimate``, ``chunk_size`` replicates at a time."""
  if resampling not in _RESAMPLING:
    raise ValueError(f"bootstrap: resampling must be one of {_RESAMPLING}, got {resampling!r}")
  if chunk_size < 1 or num_replicates < 1:
    raise ValueError(f"bootstrap: chunk_size and num_replicates must be >= 1, got {chunk_size}, {num_replicates}")
  stats = _statistics(estimate)
  chunk = min(chunk_size, num_replicates)
  num_chunks = -(-num_replicates // chunk)
  draws = _draws(key, num_replicates, resampling)
  draws = draws[jnp.minimum(jnp.arange(num_chunks * chunk), num_replicates - 1)]  # the last chunk padded
  draws = draws.reshape((num_chunks, chunk) + draws.shape[1:])
  if resampling == "poisson":
    sums = jax.lax.map(lambda s: _poisson_sums(stats, s), draws)
  else:
    valid = stats[:, 0] > 0
    sums = jax.lax.map(lambda k: jax.vmap(_multinomial_counts, (0, None))(k, valid) @ stats, draws)
  sums = sums.reshape(num_chunks * chunk, -1)[:num_replicates]
  return _value_of_sums(sums, estimate.ratios is not None)


def _percentiles(values: Array, value: Array, alpha: float) -> Interval:
  lo, hi = jnp.quantile(values, jnp.array([alpha / 2.0, 1.0 - alpha / 2.0]))
  return Interval(value, lo, hi, jnp.std(values, ddof=1))


def _base(fn: Union[Estimate, Callable[[Optional[Array]], Estimate]]) -> Estimate:
  return fn if isinstance(fn, Estimate) else fn(None)


def bootstrap_interval(
  fn: Union[Estimate, Callable[[Optional[Array]], Estimate]],
  key: PRNGKey,
  *,
  num_replicates: int = 1000,
  alpha: float = 0.05,
  resampling: str = "poisson",
  chunk_size: int = 32,
) -> Interval:
  r"""The percentile bootstrap interval of an estimate, resampling sessions.

  .. math::
      [\hat V^*_{(\alpha/2)},\; \hat V^*_{(1-\alpha/2)}], \qquad
      \hat V^*_b = \frac{\sum_i w_{bi}\, t_i}{\sum_i w_{bi}}
      \quad\text{or}\quad
      \hat V^*_b = \sum_p \frac{\sum_i w_{bi} u_{ip}}{\sum_i w_{bi} v_{ip}} \cdot
        \frac{\sum_i w_{bi} s_{ip}}{\sum_i w_{bi}}

  the percentile interval (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, Eq. 13.5) of the
  estimate on the log with session :math:`i` weighted :math:`w_{bi}` in replicate :math:`b`: a mean of the
  per-session terms :math:`t_i` (:attr:`Estimate.terms`), or for a self-normalised estimator its ratios of
  weighted sums (:attr:`Estimate.ratios`, numerators and denominators reweighted jointly, so the normaliser is
  resampled too). Either equals the estimator re-run with ``session_weights`` :math:`w_b`, at the cost of one
  weighted sum per replicate. The weights:

  * ``"poisson"`` (default): :math:`w_{bi} \sim \mathrm{Poisson}(1)` independently, the Poisson bootstrap
    (Hanley & MacGibbon, *Creating non-parametric bootstrap samples using Poisson frequencies*, Computer
    Methods and Programs in Biomedicine 2006; Chamandy et al., *Estimating uncertainty for massive data
    streams*, Google, 2012), asymptotically equivalent to the multinomial one. Each weight is the Poisson(1)
    quantile of a 32-bit uniform made by a counter-based hash of the session's index and the replicate's two
    seeds (drawn from ``key``): Wellons' ``lowbias32`` hash applied twice, in the manner of Salmon et al.'s
    counter-based generators (SC'11). The weights are made block by block where they are summed and never
    stored whole; the Poisson probabilities are exact to :math:`2^{-32}`.
  * ``"multinomial"``: Efron's bootstrap, :math:`w_b \sim \mathrm{Mult}(n, \mathbb 1/n)` over the :math:`n`
    valid sessions (``jax.random.randint`` draws counted by ``segment_sum``, a scatter per replicate, so
    slower; ``chunk_size`` ``x`` :math:`B` counts held at once).

  Args:
    fn: an :class:`Estimate`, or ``session_weights -> Estimate`` (an estimator with the log bound, e.g. a
      ``functools.partial``) of which ``fn(None)`` is used. Its :attr:`Estimate.session_weights` mark the
      sessions resampled (the positive ones); its ``terms`` (or ``ratios``) must be ``[B]`` (``[B, P, 3]``).
    key: PRNG key.
    num_replicates: bootstrap replicates.
    alpha: miscoverage.
    resampling: ``"poisson"`` or ``"multinomial"``.
    chunk_size: replicates computed at once (memory: ``chunk_size`` times a block of sessions, Poisson, or
      times all ``B`` sessions, multinomial).

  Returns:
    :class:`Interval` (``value``: the estimate on the log itself; ``stderr``: the replicates' standard
    deviation).

  >>> terms = jnp.arange(100.0)
  >>> est = Estimate(jnp.mean(terms), terms, jnp.array(0), jnp.array(100.0), jnp.ones(100))
  >>> ci = bootstrap_interval(est, jax.random.key(0), num_replicates=2000)
  >>> print(ci.value, bool(ci.lower < 49.5 < ci.upper), bool(abs(ci.stderr / (jnp.std(terms) / 10) - 1) < 0.1))
  49.5 True True
  """
  base = _base(fn)
  ok = _trusted(base, "bootstrap_interval")
  values = _replicates(base, key, num_replicates, resampling, chunk_size)
  return _flagged(_percentiles(values, base.value, alpha), ok)


def difference(a: Estimate, b: Estimate) -> Estimate:
  r"""The paired difference of two estimates on the same log: :math:`\hat V_a - \hat V_b` with per-session terms
  :math:`t^a_i - t^b_i` (so :func:`normal_interval` gives the paired interval, whose variance
  :math:`\mathrm{Var}(t^a) + \mathrm{Var}(t^b) - 2\,\mathrm{Cov}(t^a, t^b)` keeps what the two share out).
  When either is self-normalised, the difference's :attr:`Estimate.ratios` are ``a``'s components followed by
  ``b``'s with their numerators negated, so a bootstrap reweights both on the same sessions.

  Args:
    a: :class:`Estimate` of the first ranker.
    b: :class:`Estimate` of the second, on the same sessions.

  Returns:
    :class:`Estimate` (``num_clipped``: the sum).

  >>> e = lambda t: Estimate(jnp.mean(t), t, jnp.array(0), jnp.array(2.0), jnp.ones(2))
  >>> print(difference(e(jnp.array([1.0, 3.0])), e(jnp.array([0.5, 2.5]))).terms)
  [0.5 0.5]
  """
  ratios = None
  if a.ratios is not None or b.ratios is not None:
    parts = [plain_parts(e.terms, e.session_weights) if e.ratios is None else e.ratios for e in (a, b)]
    ratios = jnp.concatenate([parts[0], parts[1] * jnp.array([-1.0, 1.0, 1.0])], axis=-2)
  both = lambda x, y: None if x is None or y is None else jnp.minimum(x, y)  # noqa: E731 (the weaker one's)
  return Estimate(
    a.value - b.value,
    a.terms - b.terms,
    a.num_clipped + b.num_clipped,
    a.num_sessions,
    a.session_weights,
    ratios,
    both(a.effective_sample_size, b.effective_sample_size),
    both(a.num_nonzero_weight, b.num_nonzero_weight),
  )


def paired_bootstrap_interval(
  fn_a: Union[Estimate, Callable[[Optional[Array]], Estimate]],
  fn_b: Union[Estimate, Callable[[Optional[Array]], Estimate]],
  key: PRNGKey,
  *,
  num_replicates: int = 1000,
  alpha: float = 0.05,
  resampling: str = "poisson",
  chunk_size: int = 32,
) -> Interval:
  r"""The percentile bootstrap interval of :math:`V_a - V_b`, both estimates on the same reweighted sessions.

  .. math::
      \hat\Delta^*_b = \hat V_a(w_b) - \hat V_b(w_b)

  :func:`bootstrap_interval` of :func:`difference` ``(a, b)``: each replicate reweights both estimates' terms (or
  ratios) by the same session weights :math:`w_b`, so what the two rankers share cancels replicate by replicate.

  Args:
    fn_a: an :class:`Estimate` of the first ranker, or ``session_weights -> Estimate`` (``fn_a(None)`` is used).
    fn_b: the same for the second ranker, on the same log.
    key: PRNG key.
    num_replicates: bootstrap replicates.
    alpha: miscoverage.
    resampling: ``"poisson"`` or ``"multinomial"`` (:func:`bootstrap_interval`).
    chunk_size: replicates computed at once.

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
    difference(_base(fn_a), _base(fn_b)),
    key,
    num_replicates=num_replicates,
    alpha=alpha,
    resampling=resampling,
    chunk_size=chunk_size,
  )
