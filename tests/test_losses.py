"""Tests of the baseline ULTR losses: closed forms, NumPy references, invariants.

The invariants (mask equals truncation, leading dims, vmap, all-masked,
extreme scores, check_grads, compiles once) are parametrized over every loss
of the registry (``losses.LOSSES``), drawn from its declaration, plus a few
declared variants of their settings (``CASES``).
"""

import dataclasses
import functools
import math
from typing import Callable, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rax
from jax import test_util as jtu

from ultr_jax import losses

# ----------------------------------------------------------------------------
# Every loss as f(scores, clicks, aux, *, where, reduce_fn); aux is the second
# per-item input (propensities, observation logits or t-ratios).


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  fn: Callable  # fn(scores, clicks, aux, *, where, reduce_fn)
  aux: str  # "prob": aux in (0.1, 1); "logit": any real
  separable: bool = True  # sum over lists of per-list losses == batch sum
  grad_aux: bool = False  # aux is trained by this loss
  # frozen(s0, a0) -> fn(s, a) with every stop-gradient quantity fixed at (s0, a0);
  # None when the stop-gradient parts do not depend on the differentiated inputs.
  frozen: Optional[Callable] = None
  parts: int = 1  # a multi-part loss reduces each (non-negative) part separately


def _dla_frozen(s0, a0, clicks, where):
  pw = losses.dla_weights(a0, where=where, max_weight=100.0)
  rw = losses.dla_weights(s0, where=where, max_weight=100.0)
  return lambda s, a: (
    rax.softmax_loss(s, clicks, where=where, weights=pw) + rax.softmax_loss(a, clicks, where=where, weights=rw)
  )


def _rem_frozen(s0, a0, clicks, where):
  target = losses.em_posteriors(s0, clicks, propensities=a0, where=where)["relevance"]
  return lambda s, a: rax.pointwise_sigmoid_loss(s, target, where=where)


def _shown(aux):
  """The top-3 items of each list are shown (a top-k log), independent of the padding."""
  return jnp.broadcast_to(jnp.arange(aux.shape[-1]) < 3, aux.shape)


def _positions(aux, where):
  """A displayed ranking from the aux scores (masked items last), for the online losses."""
  return rax.utils.ranks(aux, where=where) - 1


def _pdgd_frozen(s0, a0, clicks, where):
  positions = _positions(a0, where)
  w = losses.pdgd_pair_weights(s0, clicks, positions=positions, where=where)
  order = jnp.argsort(positions, axis=-1)

  def fn(s, a):
    d = jnp.take_along_axis(s, order, axis=-1)
    per_list = -jnp.sum(w * jax.nn.sigmoid(d[..., :, None] - d[..., None, :]), axis=(-2, -1))
    return rax.utils.safe_reduce(per_list, where=jnp.any(where, axis=-1), reduce_fn=jnp.mean)

  return fn


def _upe_frozen(s0, a0, clicks, where):
  pw = losses.backdoor_weights(
    VOCABULARY["permuted_observation_logits"][2](a0, clicks, where), where=where, max_weight=100.0
  )
  rw = losses.dla_weights(s0, where=where, max_weight=100.0)
  return lambda s, a: (
    rax.softmax_loss(s, clicks, where=where, weights=pw) + rax.softmax_loss(a, clicks, where=where, weights=rw)
  )


def _disentangled_frozen(s0, a0, clicks, where):
  """The click loss in (s, a) plus the adversary's error against the relevance logits fixed at s0."""

  def fn(s, a):
    adversary = VOCABULARY["adversary_logits"][2](a, clicks, where)
    click = losses.two_tower_loss(s, clicks, observation_logits=a, where=where, reduce_fn=None)
    return jnp.sum(click + jnp.where(where, (adversary - s0) ** 2, 0.0)) / jnp.sum(where)

  return fn


# How each name of the loss vocabulary is drawn. A case has one per-item draw `a` besides the scores and clicks:
# the loss's primary input (the first it trains, else the first here with a distribution), "prob" uniform in
# (0.1, 1), "logit" standard normal. Each name: (its distribution when primary, its value then, its value as a
# further input), the values as functions of (a, clicks, where).
_ident = lambda a, c, w: a  # noqa: E731
VOCABULARY = {
  "propensities": ("prob", _ident, lambda a, c, w: jnp.full_like(a, 0.5)),
  "eps_plus": (None, None, lambda a, c, w: jnp.full_like(a, 0.95)),
  "eps_minus": (None, None, lambda a, c, w: 0.5 * a),  # below eps_plus: the primary propensities are in (0.1, 1)
  "observation_logits": ("logit", _ident, None),
  "selection_scores": ("logit", _ident, None),
  "shown": (None, None, lambda a, c, w: _shown(a)),
  "positions": ("logit", lambda a, c, w: _positions(a, w), None),
  "t_plus": ("prob", _ident, None),
  "t_minus": (None, None, lambda a, c, w: jnp.sqrt(a)),
  "mills_coef": (None, None, lambda a, c, w: 0.3),
  "imputed": (None, None, lambda a, c, w: 0.3 + 0.2 * c),
  # Vectorization's log-variances over d = 2 (through tanh: the extremes of a log-variance are outside the
  # library's numerics claim, which is about scores and propensities).
  "log_var": ("logit", lambda a, c, w: jnp.stack([jnp.tanh(a), -jnp.tanh(a)], -1), None),
  # A click model's bias logits (one table entry per rank) and the model; the registry's models are tested over
  # their own invariants in test_click_model_registry.
  "model": (None, None, lambda a, c, w: "pbm"),
  "bias": (None, None, lambda a, c, w: {"examination": 1.0 - 0.3 * jnp.arange(a.shape[-1], dtype=a.dtype)}),
  # Doubly robust LTR's expected treatments (beta_bar below alpha_bar, as a trust model's).
  "alpha_bar": ("prob", _ident, lambda a, c, w: jnp.full_like(a, 0.5)),
  "beta_bar": (None, None, lambda a, c, w: 0.1 * a),
  # Safe CLTR: the logger's exposure, and three fixed "Gumbel" rows (any noise gives a valid ranking sample).
  "logging_exposure": ("prob", _ident, None),
  "gumbel_noise": (None, None, lambda a, c, w: jnp.stack([jnp.sin(7 * a), jnp.cos(5 * a), 2 * jnp.sin(3 * a + 1)], -2)),
  "adversary_logits": (None, None, lambda a, c, w: 0.5 * a + 0.1),
  "permuted_observation_logits": (None, None, lambda a, c, w: jnp.stack([a, 0.5 * a, 0.3 - a], -2)),
}
# The first argument from the scores s (and a), the second from the clicks, by the names the loss gives them.
PREDICTIONS = {
  "scores": lambda s, a: s,
  "click_probs": lambda s, a: a * jax.nn.sigmoid(s),
  "loss": lambda s, a: jax.nn.softplus(s),
  "mean": lambda s, a: jnp.stack([s, -0.5 * s], -1),
}
TARGETS = {
  "clicks": lambda c, prediction: c,
  "exposure": lambda c, prediction: c,
  "targets": lambda c, prediction: jnp.stack([c, 1.0 - c], -1) if prediction == "mean" else 2.0 * c,
}
# Stop-gradient parts that depend on the differentiated inputs (for check_grads' reference).
FROZEN = {
  "dla_loss": _dla_frozen,
  "regression_em_loss": _rem_frozen,
  "pdgd_loss": _pdgd_frozen,
  "upe_loss": _upe_frozen,
  "disentangled_two_tower_loss": _disentangled_frozen,
}
# Fixed keyword settings a loss is tested with (DLA's and UPE's cap is what their frozen references use).
OPTIONS = {"dla_loss": {"max_weight": 100.0}, "upe_loss": {"max_weight": 100.0}}
# Further settings of some losses, each tested as a case of its own: (case name, loss, settings, input overrides).
VARIANTS = [
  ("naive_lambdarank", "naive_pairwise_loss", {"lambdaweight_fn": losses.lambdarank_weights}, {}),
  ("ips_lambdarank", "ips_pairwise_loss", {"lambdaweight_fn": losses.lambdarank_weights}, {}),
  # Click-through rates (an aggregated log) with per-item weights (session counts).
  ("ips_pairwise_ctr", "ips_pairwise_loss", {}, {"propensities": lambda a, c, w: jnp.sqrt(a), "clicks": "ctr"}),
  ("two_tower_product", "two_tower_loss", {"mode": "product"}, {}),
  ("cld_logit_mean", "cld_loss", {"link": "logit", "target": "mean"}, {"weights": lambda a, c, w: 1.0 + c}),
  ("pdgd_switched", "pdgd_loss", {"pairs": "all", "debias": False, "surrogate": "log_probability"}, {}),
]


def _primary(spec):
  """The named input the case's draw `a` stands for, and its distribution ("prob" when there is none)."""
  for name in spec.trains + spec.inputs:
    if VOCABULARY[name][0] is not None:  # a click model's bias table is trained but is not a per-item draw
      return name, VOCABULARY[name][0]
  return None, "prob"


def _case(name, spec, options=None, overrides=None):
  """A Case calling the registered loss with the vocabulary's example inputs (and a variant's settings)."""
  primary, kind = _primary(spec)
  options, overrides = {**OPTIONS.get(spec.name, {}), **(options or {})}, dict(overrides or {})
  ctr = overrides.pop("clicks", None) == "ctr"

  def fn(s, c, a, *, where, **kw):
    named = {n: (VOCABULARY[n][1] if n == primary else VOCABULARY[n][2])(a, c, where) for n in spec.inputs}
    named.update({n: f(a, c, where) for n, f in overrides.items()})
    target = TARGETS[spec.target](c * a if ctr else c, spec.prediction)
    return spec.fn(PREDICTIONS[spec.prediction](s, a), target, where=where, **named, **options, **kw)

  grad_aux = primary is not None and primary in spec.trains
  frozen = FROZEN.get(spec.name) if not options.keys() - OPTIONS.get(spec.name, {}).keys() else None
  return Case(name, fn, kind, separable=spec.per_list, grad_aux=grad_aux, frozen=frozen, parts=spec.parts)


CASES = [_case(name.removesuffix("_loss"), spec) for name, spec in sorted(losses.LOSSES.items())]
CASES += [_case(case, losses.LOSSES[loss], options, overrides) for case, loss, options, overrides in VARIANTS]
IDS = [c.name for c in CASES]


def _data(seed, shape, case, dtype=np.float32):
  """NumPy draws (no eager JAX op, which would compile a program of its own for every new shape)."""
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=shape).astype(dtype)
  clicks = (rng.random(shape) < 0.4).astype(dtype)
  if case.aux == "prob":
    aux = rng.uniform(0.1, 1.0, shape).astype(dtype)
  else:
    aux = rng.normal(size=shape).astype(dtype)
  # Left-aligned lists with 3..L valid items (item 0 always valid).
  lengths = rng.integers(3, shape[-1] + 1, shape[:-1])
  where = np.arange(shape[-1]) < lengths[..., None]
  return scores, clicks, aux, where


# The invariants' list batch: 4 lists of 6 items (3..6 valid). Every invariant that allows it uses this shape, so
# a case's jitted loss (and its gradient program below) compiles once at it and is shared by the tests.
SHAPE = (4, 6)


@functools.cache
def _jitted(case):
  """``case.fn`` under ``jax.jit``, as a training step calls it; one per case, so the tests of a case that call it
  at the same shapes and ``reduce_fn`` share one compiled program.

  Called eagerly, a loss compiles each of its primitives separately for every new shape (about 20 ms
  each on CPU); jitted, it compiles once per shape.
  """

  @functools.partial(jax.jit, static_argnames="reduce_fn")
  def fn(s, c, a, *, where, reduce_fn):
    return case.fn(s, c, a, where=where, reduce_fn=reduce_fn)

  return fn


@functools.cache
def _value_and_grads(case):
  """``(loss, (d/d scores, d/d aux))`` of the ``jnp.mean`` loss under ``jax.jit``: one program per case, shared by
  the tests that differentiate it (all masked, extreme scores, extreme propensities)."""

  @jax.jit
  def fn(s, c, a, where):
    return jax.value_and_grad(lambda s, a: case.fn(s, c, a, where=where, reduce_fn=jnp.mean), argnums=(0, 1))(s, a)

  return fn


# ----------------------------------------------------------------------------
# Invariants, parametrized over every loss.


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mask_equals_truncation(case):
  f = _jitted(case)
  s, c, a, _ = _data(0, SHAPE, case)
  where = np.broadcast_to(np.arange(6) < 4, SHAPE)
  s_pad, c_pad = s.copy(), c.copy()
  s_pad[:, 4:] = 1e4  # garbage beyond the mask
  c_pad[:, 4:] = 1.0
  masked = f(s_pad, c_pad, a, where=where, reduce_fn=jnp.mean)
  truncated = f(s[:, :4], c[:, :4], a[:, :4], where=None, reduce_fn=jnp.mean)
  np.testing.assert_allclose(masked, truncated, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_arbitrary_leading_dims(case):
  f = _jitted(case)
  s, c, a, w = _data(1, SHAPE, case)
  flat = f(s, c, a, where=w, reduce_fn=jnp.mean)
  for lead in [(2, 2), (2, 1, 2), (1, 4)]:
    r = lambda x: x.reshape(*lead, 6)
    np.testing.assert_allclose(f(r(s), r(c), r(a), where=r(w), reduce_fn=jnp.mean), flat, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap_equals_loop_and_batch(case):
  f = _jitted(case)
  s, c, a, w = _data(2, (3, *SHAPE), case)
  fn = lambda s, c, a, w: f(s, c, a, where=w, reduce_fn=jnp.mean)
  vmapped = jax.jit(jax.vmap(fn))(s, c, a, w)
  looped = np.stack([fn(s[i], c[i], a[i], w[i]) for i in range(3)])
  np.testing.assert_allclose(vmapped, looped, rtol=1e-5, atol=1e-6)
  if case.separable:
    total = lambda s, c, a, w: f(s, c, a, where=w, reduce_fn=jnp.sum)
    per_list = jax.jit(jax.vmap(total))(s.reshape(12, 6), c.reshape(12, 6), a.reshape(12, 6), w.reshape(12, 6))
    np.testing.assert_allclose(np.sum(per_list), total(s, c, a, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reduce_fn_none_sums_to_sum(case):
  f = _jitted(case)
  s, c, a, w = _data(3, SHAPE, case)
  none = f(s, c, a, where=w, reduce_fn=None)
  np.testing.assert_allclose(np.sum(none), f(s, c, a, where=w, reduce_fn=jnp.sum), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_all_masked_gives_zero_loss_and_finite_zero_grads(case):
  f, value_and_grads = _jitted(case), _value_and_grads(case)
  s, c, a, _ = _data(4, SHAPE, case)
  where = np.zeros(SHAPE, bool)
  assert float(f(s, c, a, where=where, reduce_fn=jnp.mean)) == 0.0
  value, (gs, ga) = value_and_grads(s, c, a, where)
  assert float(value) == 0.0
  np.testing.assert_array_equal(gs, 0.0)
  np.testing.assert_array_equal(ga, 0.0)
  # One all-masked list among valid ones changes nothing.
  s2, c2, a2, w2 = _data(5, SHAPE, case)
  w_mixed = w2.copy()
  w_mixed[1] = False
  keep = np.array([0, 2, 3])
  np.testing.assert_allclose(
    f(s2, c2, a2, where=w_mixed, reduce_fn=jnp.mean),
    f(s2[keep], c2[keep], a2[keep], where=w2[keep], reduce_fn=jnp.mean),
    rtol=1e-5,
  )
  _, (g, _) = value_and_grads(s2, c2, a2, w_mixed)
  assert np.all(np.isfinite(g)) and np.all(g[1] == 0.0)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("scale", [1e3, 1e30])
def test_extreme_scores_are_finite(case, scale):
  f = _jitted(case)
  s, c, a, w = _data(6, SHAPE, case)
  s = (np.sign(s) * scale).astype(s.dtype)
  if case.aux == "logit":
    a = (np.sign(a) * scale).astype(a.dtype)
  assert np.isfinite(float(f(s, c, a, where=w, reduce_fn=jnp.mean)))
  _, (gs, ga) = _value_and_grads(case)(s, c, a, w)
  assert np.all(np.isfinite(gs)) and np.all(np.isfinite(ga))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_check_grads(case):
  with jax.enable_x64(True):
    f = _jitted(case)
    s, c, a, w = _data(7, (3, 5), case, dtype=np.float64)
    fn = lambda s, a: f(s, c, a, where=w, reduce_fn=jnp.mean)
    ref = jax.jit(case.frozen(s, a, c, w)) if case.frozen is not None else fn
    if case.grad_aux:
      jtu.check_grads(ref, (s, a), order=1, modes=("rev",))
    else:
      jtu.check_grads(lambda s: ref(s, a), (s,), order=1, modes=("rev",))
    # With stop-gradient parts, the loss's gradients are those of its frozen reference just checked numerically
    # (without any, the reference is the loss itself and check_grads checked its gradients directly).
    if case.frozen is not None:
      argnums = (0, 1) if case.grad_aux else 0
      got = jax.jit(jax.grad(fn, argnums=argnums))(s, a)
      want = jax.jit(jax.grad(ref, argnums=argnums))(s, a)
      chex.assert_trees_all_close(got, want, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_compiles_once(case, assert_compiles_once):
  """One trace and no compile after the first for three batches of new values (new masks too)."""

  def step(s, c, a, w):
    return jax.value_and_grad(lambda s: case.fn(s, c, a, where=w, reduce_fn=jnp.mean))(s)

  assert_compiles_once(step, lambda i: (_data(10 + i, SHAPE, case), {}))


_WRAPPED_MEAN = lambda a, where=None: jnp.mean(a, where=where)  # noqa: E731  (a mean that is not jnp.mean)
_MASKED_MAX = lambda a, where=None: jnp.max(a, where=where, initial=-jnp.inf)  # noqa: E731


@functools.cache
def _other_reductions(case):
  """The loss under two means that are not ``jnp.mean`` and a masked max, in one jitted program per case."""

  @jax.jit
  def fn(s, c, a, where):
    return [
      case.fn(s, c, a, where=where, reduce_fn=r) for r in (_WRAPPED_MEAN, functools.partial(jnp.mean), _MASKED_MAX)
    ]

  return fn


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_any_reduce_fn_is_consistent(case):
  """A mean is a mean whatever object computes it; sum, mean and None agree with each other."""
  f = _jitted(case)
  s, c, a, w = _data(20, SHAPE, case)
  mean = f(s, c, a, where=w, reduce_fn=jnp.mean)
  wrapped, partial, biggest = _other_reductions(case)(s, c, a, w)
  for other in (wrapped, partial):
    np.testing.assert_allclose(other, mean, rtol=1e-6, atol=1e-7)
  total = f(s, c, a, where=w, reduce_fn=jnp.sum)
  per = f(s, c, a, where=w, reduce_fn=None)
  np.testing.assert_allclose(np.sum(per), total, rtol=1e-5, atol=1e-5)
  # Any other reduction runs on the same per-record values (here the largest one; a sum of the parts' largest).
  assert np.isfinite(float(biggest)) and float(biggest) <= case.parts * float(np.max(per)) + 1e-5
  if case.parts == 1:
    assert float(biggest) >= float(np.max(per)) - 1e-5 or float(np.max(per)) == 0.0
  # All masked: every mean is 0 (rax's safe_reduce), not NaN.
  none_valid = np.zeros_like(w)
  assert float(f(s, c, a, where=none_valid, reduce_fn=jnp.mean)) == 0.0
  assert float(_other_reductions(case)(s, c, a, none_valid)[0]) == 0.0


@pytest.mark.parametrize("case", [c for c in CASES if c.aux == "prob"], ids=[c.name for c in CASES if c.aux == "prob"])
def test_extreme_propensities_are_finite(case):
  """Propensities of 1e-30 (and 0): finite losses and gradients under the default weight cap."""
  s, c, a, w = _data(21, SHAPE, case)
  for tiny in (1e-30, 1e-45):
    a_tiny = np.where(np.arange(6) % 2 == 0, np.float32(tiny), a)
    value, (grad, _) = _value_and_grads(case)(s, c, a_tiny, w)
    assert np.isfinite(float(value)), (tiny, float(value))
    assert np.all(np.isfinite(grad))
    # Bounded by the default cap (1e8 per weight), not merely finite (an uncapped 1/1e-30 gives ~1e30).
    assert abs(float(value)) < 1e11 and float(np.max(np.abs(grad))) < 1e11, (tiny, float(value))


def test_default_weight_cap_and_opt_out():
  p = jnp.array([1.0, 1e-30])
  np.testing.assert_allclose(losses.ips_weights(p), [1.0, losses.DEFAULT_MAX_WEIGHT], rtol=1e-6)
  np.testing.assert_allclose(losses.ips_weights(p, max_weight=math.inf), [1.0, 1e30], rtol=1e-6)
  s, c = jnp.array([0.0, 0.0]), jnp.array([0.0, 1.0])
  capped = losses.ips_softmax_loss(s, c, propensities=p)
  np.testing.assert_allclose(capped, 1e8 * np.log(2.0), rtol=1e-5)
  # DLA at scores of +-1e30: the ranker-side weights hit the cap instead of overflowing to inf * 0 = NaN.
  value, grads = jax.value_and_grad(lambda s, o: losses.dla_loss(s, c, observation_logits=o), argnums=(0, 1))(
    jnp.array([1e30, -1e30]), jnp.zeros(2)
  )
  assert np.isfinite(float(value)) and all(np.all(np.isfinite(g)) for g in grads)
  with pytest.raises(ValueError, match="max_weight"):
    losses.ips_weights(p, max_weight=0.0)


def test_extreme_inputs_of_the_cld_family_are_finite():
  one = jnp.ones(3)
  shown = jnp.array([True, True, False])
  for link in ("probit", "logit"):
    fn = lambda r, o: losses.cld_loss(
      r, one, selection_scores=o, propensities=jnp.array([1e-30, 0.5, 0.0]), shown=shown, link=link
    )
    value_and_grads = jax.jit(jax.value_and_grad(fn, argnums=(0, 1)))  # one program for both scales
    for scale in (1e30, -1e30):
      value, grads = value_and_grads(scale * one, -scale * one)
      assert np.isfinite(float(value)) and all(np.all(np.isfinite(g)) for g in grads), (link, scale)
  for outcome in ("ls", "probit"):
    fn = lambda r, o: losses.heckman_loss(r, one, selection_scores=o, mills_coef=0.5, shown=shown, outcome=outcome)
    value, grads = jax.jit(jax.value_and_grad(fn, argnums=(0, 1)))(1e30 * one, -1e30 * one)
    assert np.isfinite(float(value)) and all(np.all(np.isfinite(g)) for g in grads), outcome
  # The inverse Mills ratio: the log-space form up to z = -100 (float32 cancellation: ~3e-4 there), the
  # asymptotic series beyond, continuous at the switch.
  z = jnp.array([-99.999, -100.001, -1e6, -1e15])
  lam = np.asarray(jax.jit(losses.inverse_mills_ratio)(z), np.float64)
  np.testing.assert_allclose(lam, -np.asarray(z, np.float64) / (1 - 1 / np.asarray(z, np.float64) ** 2), rtol=1e-3)


@pytest.mark.parametrize("name", sorted(losses.LOSSES))
def test_every_loss_follows_the_calling_convention(name):
  """fn(prediction, target, *, where=None, weights=None, reduce_fn=jnp.mean, **named inputs)."""
  import inspect

  spec = losses.LOSSES[name]
  assert getattr(losses, name) is spec.fn and name in losses.__all__
  params = inspect.signature(inspect.unwrap(spec.fn)).parameters
  positional = [p for p in params.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
  assert len(positional) == 2, [p.name for p in positional]
  assert spec.target in ("clicks", "labels", "targets", "exposure"), spec.target
  keyword = {p.name: p for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}
  for required in ("where", "weights", "reduce_fn", *spec.inputs):
    assert required in keyword, required
  assert keyword["where"].default is None and keyword["weights"].default is None
  assert keyword["reduce_fn"].default is jnp.mean
  # The documented vocabulary names every named input (a click model's own inputs are its module's).
  for named in spec.inputs:
    assert named in losses.__doc__ or named in ("mills_coef", "model", "bias"), named


def test_every_public_loss_is_registered_and_tested():
  public = {n for n in losses.__all__ if n.endswith(("_loss", "_risk")) and n != "register_loss"}
  assert public == set(losses.LOSSES)
  assert {c.fn for c in CASES} and {n.removesuffix("_loss") for n in losses.LOSSES} <= {c.name for c in CASES}


def test_a_declared_loss_is_registered_with_its_signature():
  @losses.register_loss("example", trains=("observation_logits",))
  def scaled_loss(scores, clicks, *, observation_logits, where=None, weights=None, reduce_fn=jnp.mean):
    return reduce_fn(scores * clicks * observation_logits, where=where)

  try:
    spec = losses.LOSSES["scaled_loss"]
    assert (spec.fn, spec.family, spec.prediction, spec.target) == (scaled_loss, "example", "scores", "clicks")
    assert spec.inputs == ("observation_logits",) and spec.trains == ("observation_logits",)
    # A case is built for it from the vocabulary, as for every registered loss.
    case = _case("scaled", spec)
    s, c, a, w = _data(0, (2, 4), case)
    assert case.aux == "logit" and case.grad_aux and np.isfinite(float(case.fn(s, c, a, where=w)))
    with pytest.raises(ValueError, match="registered twice"):
      losses.register_loss("example")(scaled_loss)
  finally:
    losses.LOSSES.pop("scaled_loss", None)
  with pytest.raises(ValueError, match="trains"):
    losses.register_loss("example", trains=("propensities",))(scaled_loss)
  assert "scaled_loss" not in losses.LOSSES


def test_mean_detection_is_by_behaviour():
  from ultr_jax.losses import _utils

  assert _utils.is_mean(jnp.mean) and _utils.is_mean(_WRAPPED_MEAN) and _utils.is_mean(functools.partial(jnp.mean))
  assert not _utils.is_mean(jnp.sum) and not _utils.is_mean(_MASKED_MAX) and not _utils.is_mean(jnp.max)
  assert not _utils.is_mean(lambda a, where=None: jnp.mean(a))  # ignores the mask: not the masked mean
  # Inside jit too (the probe runs eagerly at trace time).
  assert float(jax.jit(lambda x: _utils.reduce_loss(x, x > 0, _WRAPPED_MEAN, mass=2 * x))(jnp.ones(3))) == 0.5


# ----------------------------------------------------------------------------
# Stateful estimators: (init, update) pairs with the numbers of the functions they replaced.


def _estimator_data():
  rng = np.random.default_rng(0)
  b, l, k = 6, 5, 4
  s = np.asarray(rng.normal(size=(3, b, l)), np.float32)
  c = np.asarray(rng.random((3, b, l)) < 0.4, np.float32)
  pos = np.asarray(np.stack([np.stack([rng.permutation(l) for _ in range(b)]) for _ in range(3)]) % k, np.int32)
  w = np.asarray(rng.random((3, b, l)) < 0.85)
  return s, c, pos, w


def test_estimators_apply_their_updates_to_their_state():
  """Each (init, update) pair carries the state of the update it wraps (each update is checked against a
  NumPy reference below): init gives the documented start, update one step of the update on the state."""
  s, c, pos, w = _estimator_data()
  em = losses.regression_em_estimator(4, step_size=0.3, init_value=0.9)
  pd = losses.pairwise_debiasing_estimator(4, step_size=0.3, p=1.0)
  da = losses.dual_ascent_estimator(budget=0.02, eta=2.0)
  em_state, pd_state, da_state = em.init(), pd.init(), da.init()
  np.testing.assert_allclose(em_state.propensities, 0.9)
  np.testing.assert_allclose([pd_state.t_plus, pd_state.t_minus], 1.0)
  theta, t_plus, t_minus, lam, ema = em_state.propensities, pd_state.t_plus, pd_state.t_minus, 0.0, 0.0
  em_update, pd_update = jax.jit(em.update), jax.jit(pd.update)
  # The references jitted too (one program each rather than every primitive eagerly).
  em_ref = jax.jit(functools.partial(losses.em_propensity_update, step_size=0.3))
  pd_ref = jax.jit(functools.partial(losses.pairwise_debiasing_update, step_size=0.3))
  for t in range(3):
    em_state = em_update(em_state, s[t], c[t], positions=pos[t], where=w[t])
    pd_state = pd_update(pd_state, s[t], c[t], positions=pos[t], where=w[t])
    da_state = da.update(da_state, jnp.float32(0.05 * (t + 1)))
    theta = em_ref(theta, s[t], c[t], pos[t], where=w[t])
    t_plus, t_minus = pd_ref(t_plus, t_minus, s[t], c[t], pos[t], where=w[t])
    lam, ema = losses.dual_ascent_update(lam, ema, jnp.float32(0.05 * (t + 1)), budget=0.02, eta=2.0, first=t == 0)
  np.testing.assert_allclose(em_state.propensities, theta, rtol=1e-6)
  np.testing.assert_allclose(pd_state.t_plus, t_plus, rtol=1e-6)
  np.testing.assert_allclose(pd_state.t_minus, t_minus, rtol=1e-6)
  np.testing.assert_allclose([da_state.lam, da_state.ema], [lam, ema], rtol=1e-6)
  assert int(da_state.steps) == 3 and float(da_state.lam) > 0.0  # the multiplier rose: 0.05 > budget
  # States are pytrees of arrays (jit/scan-able) and NamedTuples.
  assert isinstance(em_state, losses.RegressionEMState) and isinstance(pd_state, losses.PairwiseDebiasingState)
  assert len(jax.tree_util.tree_leaves(pd_state)) == 2


def test_dual_ascent_estimator_without_ascent_only_tracks_the_ema():
  est = losses.dual_ascent_estimator(budget=0.0, decay=0.5, ascend=False)
  state = est.init(lam=3.0)
  for value in (0.4, 0.2):
    state = est.update(state, jnp.float32(value))
  np.testing.assert_allclose([state.lam, state.ema], [3.0, 0.3], rtol=1e-6)  # first step starts the EMA at 0.4


def test_regression_em_estimator_rejects_bad_init():
  with pytest.raises(ValueError, match="init_value"):
    losses.regression_em_estimator(3, init_value=1.0)


# ----------------------------------------------------------------------------
# Closed forms and NumPy references.

sig = lambda z: 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))
log_softmax = lambda s: s - np.log(np.sum(np.exp(s)))


def test_naive_losses_closed_form():
  s, c = np.array([1.0, -0.5, 0.2]), np.array([1.0, 0.0, 1.0])
  bce = -(c * np.log(sig(s)) + (1 - c) * np.log(sig(-s)))
  np.testing.assert_allclose(losses.naive_sigmoid_loss(jnp.array(s), jnp.array(c)), bce.mean(), rtol=1e-6)
  np.testing.assert_allclose(
    losses.naive_softmax_loss(jnp.array(s), jnp.array(c)), -(c * log_softmax(s)).sum(), rtol=1e-6
  )


def test_ips_weights_clip_pad_and_stop_gradient():
  p = jnp.array([1.0, 0.25, 0.01, 0.0])
  where = jnp.array([True, True, True, False])
  np.testing.assert_allclose(losses.ips_weights(p, where=where), [1.0, 4.0, 100.0, 1.0], rtol=1e-6)
  np.testing.assert_allclose(losses.ips_weights(p, where=where, max_weight=10.0), [1.0, 4.0, 10.0, 1.0], rtol=1e-6)
  g = jax.grad(lambda p: losses.ips_weights(p, where=where).sum())(p)
  np.testing.assert_array_equal(g, 0.0)
  with pytest.raises(ValueError, match="max_weight"):
    losses.ips_weights(p, max_weight=0.0)


@pytest.mark.parametrize(
  "fn, ref",
  [
    (losses.ips_sigmoid_loss, lambda s, g: np.mean(-(g * np.log(sig(s)) + (1 - g) * np.log(sig(-s))))),
    (losses.ips_softmax_loss, lambda s, g: -(g * log_softmax(s)).sum()),
  ],
)
def test_ips_is_unbiased_under_pbm(fn, ref):
  """Both IPS losses are linear in the clicks, so E_c[loss] = loss(E[c]) = loss on relevance."""
  with jax.enable_x64(True):
    s = np.array([0.3, -1.0, 2.0, 0.0])
    gamma = np.array([0.9, 0.2, 0.6, 0.5])
    theta = np.array([1.0, 0.5, 1 / 3, 0.25])
    got = fn(jnp.array(s), jnp.array(theta * gamma), propensities=jnp.array(theta))
    np.testing.assert_allclose(got, ref(s, gamma), rtol=1e-10)
    # Exact expectation over every click vector (2^4 outcomes).
    outcomes = np.array(np.meshgrid(*[[0, 1]] * 4, indexing="ij")).reshape(4, -1).T
    probs = np.prod(np.where(outcomes == 1, theta * gamma, 1 - theta * gamma), axis=1)
    vals = jax.vmap(lambda c: fn(jnp.array(s), c, propensities=jnp.array(theta)))(jnp.array(outcomes, float))
    np.testing.assert_allclose(np.sum(probs * np.asarray(vals)), ref(s, gamma), rtol=1e-10)


@pytest.mark.parametrize(
  "fn, ips_fn, ref",
  [
    (
      losses.affine_sigmoid_loss,
      losses.ips_sigmoid_loss,
      lambda s, g: np.mean(-(g * np.log(sig(s)) + (1 - g) * np.log(sig(-s)))),
    ),
    (losses.affine_softmax_loss, losses.ips_softmax_loss, lambda s, g: -(g * log_softmax(s)).sum()),
  ],
)
def test_affine_is_unbiased_under_trust_bias_and_ips_is_not(fn, ips_fn, ref):
  """Vardasbi et al. CIKM'20: E_c[affine loss] = loss on relevance; IPS keeps the eps- term."""
  with jax.enable_x64(True):
    s = np.array([0.3, -1.0, 2.0, 0.0])
    gamma = np.array([0.9, 0.2, 0.6, 0.5])
    theta = np.array([1.0, 0.5, 1 / 3, 0.25])
    eps_plus = np.array([0.98, 0.97, 0.96, 0.95])  # ULTRA's trust table (Trust.epsilons)
    eps_minus = 0.65 / np.arange(1, 5)
    ctr = theta * (eps_plus * gamma + eps_minus * (1 - gamma))
    kw = dict(propensities=jnp.array(theta), eps_plus=jnp.array(eps_plus), eps_minus=jnp.array(eps_minus))
    # Exact expectation over every click vector (2^4 outcomes).
    outcomes = np.array(np.meshgrid(*[[0, 1]] * 4, indexing="ij")).reshape(4, -1).T
    probs = np.prod(np.where(outcomes == 1, ctr, 1 - ctr), axis=1)
    vals = jax.vmap(lambda c: fn(jnp.array(s), c, **kw))(jnp.array(outcomes, float))
    np.testing.assert_allclose(np.sum(probs * np.asarray(vals)), ref(s, gamma), rtol=1e-10)
    # The affine targets of the click-through rates are the relevance itself.
    np.testing.assert_allclose(losses.affine_targets(jnp.array(ctr), **kw), gamma, rtol=1e-6)
    ips = jax.vmap(lambda c: ips_fn(jnp.array(s), c, propensities=jnp.array(theta)))(jnp.array(outcomes, float))
    # IPS is unbiased for the loss on ctr / theta = eps- + (eps+ - eps-) gamma, not on gamma (Theorem 1).
    np.testing.assert_allclose(np.sum(probs * np.asarray(ips)), ref(s, ctr / theta), rtol=1e-10)
    assert np.min(np.abs(ctr / theta - gamma)) > 0.04


def test_affine_targets_reduce_to_ips_clip_and_skip_uninformative_items():
  p = jnp.array([1.0, 0.25, 0.01, 0.0, 0.5])
  c = jnp.array([1.0, 1.0, 1.0, 0.0, 1.0])
  where = jnp.array([True, True, True, True, False])
  ips_like = losses.affine_targets(c, propensities=p, eps_plus=jnp.ones(5), eps_minus=jnp.zeros(5), where=where)
  np.testing.assert_allclose(ips_like, c * losses.ips_weights(p, where=where) * where, rtol=1e-6)
  clipped = losses.affine_targets(
    c, propensities=p, eps_plus=jnp.ones(5), eps_minus=jnp.zeros(5), where=where, max_weight=10.0
  )
  np.testing.assert_allclose(clipped, [1.0, 4.0, 10.0, 0.0, 0.0], rtol=1e-6)
  # eps+ <= eps-: a click says nothing about relevance; the item gets no target rather than a sign flip.
  flat = losses.affine_targets(c, propensities=jnp.ones(5), eps_plus=jnp.full(5, 0.3), eps_minus=jnp.full(5, 0.3))
  np.testing.assert_array_equal(flat, 0.0)
  g = jax.grad(lambda q: losses.affine_targets(c, propensities=q, eps_plus=jnp.ones(5), eps_minus=0.5 * q).sum())(p)
  np.testing.assert_array_equal(g, 0.0)
  with pytest.raises(ValueError, match="max_weight"):
    losses.affine_targets(c, propensities=p, eps_plus=jnp.ones(5), eps_minus=jnp.zeros(5), max_weight=-1.0)


def test_snips_normalises_within_the_batch():
  p = jnp.array([[1.0, 0.5, 0.2], [1.0, 0.5, 0.2]])
  c = jnp.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
  w = losses.snips_weights(p, c)
  np.testing.assert_allclose(jnp.sum(w * c), jnp.sum(c), rtol=1e-6)
  ratio = np.asarray(w / losses.ips_weights(p))
  np.testing.assert_allclose(ratio, ratio[0, 0], rtol=1e-6)  # one batch-wide factor
  np.testing.assert_allclose(ratio[0, 0], 3.0 / (1 + 5 + 2), rtol=1e-6)
  # No clicks: plain IPS weights.
  np.testing.assert_allclose(losses.snips_weights(p, jnp.zeros_like(c)), losses.ips_weights(p))
  s = jnp.array([[0.1, 0.2, -0.3], [1.0, 0.0, 0.5]])
  np.testing.assert_allclose(
    losses.snips_softmax_loss(s, c, propensities=p), losses.naive_softmax_loss(s, c, weights=w), rtol=1e-6
  )


def test_dla_closed_form_and_stop_gradients():
  with jax.enable_x64(True):
    s = np.array([0.5, 1.0, -1.0])
    o = np.log(np.array([0.6, 0.3, 0.1]))
    c = np.array([0.0, 1.0, 1.0])
    theta = np.exp(log_softmax(o))
    gamma = np.exp(log_softmax(s))
    ranker = -(c * theta[0] / theta * log_softmax(s)).sum()
    exam = -(c * gamma[0] / gamma * log_softmax(o)).sum()
    total, aux = losses.dla_loss(jnp.array(s), jnp.array(c), observation_logits=jnp.array(o), return_aux=True)
    r, e = aux["ranker_loss"], aux["propensity_loss"]
    np.testing.assert_allclose([r, e, total], [ranker, exam, ranker + exam], rtol=1e-10)
    np.testing.assert_allclose(losses.dla_weights(jnp.array(o)), [1.0, 2.0, 6.0], rtol=1e-10)
    np.testing.assert_allclose(losses.dla_weights(jnp.array(o), max_weight=3.0), [1.0, 2.0, 3.0])
    # The ranker part trains only the ranker, the examination part only the tower.
    parts = lambda s, o: losses.dla_loss(s, jnp.array(c), observation_logits=o, return_aux=True)[1]
    g_r = jax.grad(lambda o: parts(jnp.array(s), o)["ranker_loss"])(jnp.array(o))
    g_e = jax.grad(lambda s: parts(s, jnp.array(o))["propensity_loss"])(jnp.array(s))
    np.testing.assert_array_equal(g_r, 0.0)
    np.testing.assert_array_equal(g_e, 0.0)


def test_dla_fixed_point_recovers_propensities():
  """With the true relevance as the ranker, the exam loss is minimised at softmax(o) ∝ theta."""
  with jax.enable_x64(True):
    gamma = np.array([0.5, 0.2, 0.8, 0.4])
    theta = np.array([1.0, 0.6, 0.3, 0.2])
    s = jnp.log(jnp.array(gamma))
    clicks = jnp.array(theta * gamma)  # expected clicks
    grad = jax.grad(lambda o: losses.dla_loss(s, clicks, observation_logits=o))
    o = jax.jit(lambda o: jax.lax.fori_loop(0, 2000, lambda _, o: o - 0.5 * grad(o), o))(jnp.zeros(4))
    est = np.exp(o - o[0])
    np.testing.assert_allclose(est, theta, rtol=1e-4)


def test_em_posteriors_match_bayes_rule():
  with jax.enable_x64(True):
    rng = np.random.default_rng(0)
    s = rng.normal(size=(4, 6)) * 3
    theta = rng.uniform(0.05, 0.95, size=(4, 6))
    c = (rng.random((4, 6)) < 0.3).astype(float)
    p = losses.em_posteriors(jnp.array(s), jnp.array(c), propensities=jnp.array(theta))
    g = sig(s)
    e1_c0 = theta * (1 - g) / (1 - theta * g)
    r1_c0 = (1 - theta) * g / (1 - theta * g)
    e0r0_c0 = (1 - theta) * (1 - g) / (1 - theta * g)
    np.testing.assert_allclose(p["e1_c0"], e1_c0, rtol=1e-10)
    np.testing.assert_allclose(p["r1_c0"], r1_c0, rtol=1e-10)
    np.testing.assert_allclose(e1_c0 + r1_c0 + e0r0_c0, 1.0, rtol=1e-12)
    np.testing.assert_allclose(p["relevance"], c + (1 - c) * r1_c0, rtol=1e-10)
    np.testing.assert_allclose(p["examination"], c + (1 - c) * e1_c0, rtol=1e-10)
    np.testing.assert_array_equal(p["e1r1"], c)
    loss = losses.regression_em_loss(jnp.array(s), jnp.array(c), propensities=jnp.array(theta))
    t = c + (1 - c) * r1_c0
    np.testing.assert_allclose(loss, np.mean(-(t * np.log(g) + (1 - t) * np.log(1 - g))), rtol=1e-10)


def test_em_propensity_update_reference_and_fixed_point():
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    s = rng.normal(size=(8, 5))
    c = (rng.random((8, 5)) < 0.4).astype(float)
    pos = np.stack([rng.permutation(5) for _ in range(8)]) % 4  # K = 4, some positions shared
    where = rng.random((8, 5)) < 0.8
    theta = np.array([0.9, 0.7, 0.5, 0.3])
    new = losses.em_propensity_update(
      jnp.array(theta), jnp.array(s), jnp.array(c), jnp.array(pos), where=jnp.array(where), step_size=0.3
    )
    g = sig(s)
    th_i = theta[pos]
    post = c + (1 - c) * th_i * (1 - g) / (1 - th_i * g)
    ref = theta.copy()
    for k in range(4):
      m = where & (pos == k)
      if m.any():
        ref[k] = 0.7 * theta[k] + 0.3 * post[m].mean()
    np.testing.assert_allclose(new, ref, rtol=1e-10)
    # With the true relevance and expected clicks, the true propensities are a fixed point.
    gamma = sig(s)
    truth = np.array([1.0, 0.5, 0.33, 0.25]) * 0.99
    exp_clicks = truth[pos] * gamma
    fixed = losses.em_propensity_update(
      jnp.array(truth), jnp.array(s), jnp.array(exp_clicks), jnp.array(pos), step_size=1.0
    )
    np.testing.assert_allclose(fixed, truth, rtol=1e-10)


def test_two_tower_closed_form():
  with jax.enable_x64(True):
    r, o, c = np.array([0.3, -2.0, 1.5]), np.array([1.0, -0.5, -3.0]), np.array([1.0, 0.0, 0.0])
    p = sig(r + o)
    np.testing.assert_allclose(
      losses.two_tower_loss(jnp.array(r), jnp.array(c), observation_logits=jnp.array(o)),
      np.mean(-(c * np.log(p) + (1 - c) * np.log(1 - p))),
      rtol=1e-10,
    )
    p = sig(r) * sig(o)
    np.testing.assert_allclose(
      losses.two_tower_loss(jnp.array(r), jnp.array(c), observation_logits=jnp.array(o), mode="product"),
      np.mean(-(c * np.log(p) + (1 - c) * np.log(1 - p))),
      rtol=1e-10,
    )
  with pytest.raises(ValueError, match="mode"):
    losses.two_tower_loss(jnp.zeros(2), jnp.zeros(2), observation_logits=jnp.zeros(2), mode="sum")


def _pairwise_reference(s, c, tp, tm, where):
  total, n = 0.0, 0
  for i in range(len(s)):
    for j in range(len(s)):
      if where[i] and where[j] and c[i] > c[j]:
        total += np.log1p(np.exp(-(s[i] - s[j]))) / (tp[i] * tm[j])
        n += 1
  return total, n


def test_pairwise_debiasing_loss_reference():
  with jax.enable_x64(True):
    rng = np.random.default_rng(2)
    s = rng.normal(size=(3, 6))
    c = (rng.random((3, 6)) < 0.4).astype(float)
    tp, tm = rng.uniform(0.2, 1, (3, 6)), rng.uniform(0.2, 1, (3, 6))
    where = np.arange(6) < np.array([[6], [4], [5]])
    got = losses.pairwise_debiasing_loss(
      jnp.array(s), jnp.array(c), t_plus=jnp.array(tp), t_minus=jnp.array(tm), where=jnp.array(where), reduce_fn=jnp.sum
    )
    refs = [_pairwise_reference(s[q], c[q], tp[q], tm[q], where[q]) for q in range(3)]
    np.testing.assert_allclose(got, sum(r[0] for r in refs), rtol=1e-10)
    mean = losses.pairwise_debiasing_loss(
      jnp.array(s), jnp.array(c), t_plus=jnp.array(tp), t_minus=jnp.array(tm), where=jnp.array(where)
    )
    np.testing.assert_allclose(mean, sum(r[0] for r in refs) / sum(r[1] for r in refs), rtol=1e-10)
    assert int(losses.click_pairs(jnp.array(c), where=jnp.array(where)).sum()) == sum(r[1] for r in refs)


def _click_pair_reference(s, c, theta, v, where):
  """(sum over pairs, pair mass) of the pairwise IPS loss, by a double loop."""
  total = mass = 0.0
  for i in range(len(s)):
    for j in range(len(s)):
      if i != j and where[i] and where[j]:
        m = v[i] * c[i] * (1 - c[j])
        total += m / theta[i] * np.log1p(np.exp(-(s[i] - s[j])))
        mass += m
  return total, mass


def test_pairwise_click_losses_reference():
  with jax.enable_x64(True):
    rng = np.random.default_rng(4)
    s = rng.normal(size=(3, 6))
    c = rng.random((3, 6))  # click-through rates
    theta, v = rng.uniform(0.2, 1, (3, 6)), rng.integers(1, 5, (3, 6)).astype(float)
    where = np.arange(6) < np.array([[6], [4], [5]])
    args = dict(where=jnp.array(where), weights=jnp.array(v))
    refs = [_click_pair_reference(s[q], c[q], theta[q], v[q], where[q]) for q in range(3)]
    total, mass = sum(r[0] for r in refs), sum(r[1] for r in refs)
    ips = lambda **kw: losses.ips_pairwise_loss(jnp.array(s), jnp.array(c), propensities=jnp.array(theta), **args, **kw)
    np.testing.assert_allclose(ips(reduce_fn=jnp.sum), total, rtol=1e-10)
    np.testing.assert_allclose(ips(), total / mass, rtol=1e-10)
    np.testing.assert_allclose(ips(reduce_fn=None).sum(axis=(-2, -1)), [r[0] for r in refs], rtol=1e-10)
    naive = [_click_pair_reference(s[q], c[q], np.ones(6), v[q], where[q]) for q in range(3)]
    np.testing.assert_allclose(
      losses.naive_pairwise_loss(jnp.array(s), jnp.array(c), **args), sum(r[0] for r in naive) / mass, rtol=1e-10
    )
    # Clipped weights: theta below 1/max_weight counts as 1/max_weight.
    clipped = [_click_pair_reference(s[q], c[q], np.maximum(theta[q], 0.5), v[q], where[q]) for q in range(3)]
    np.testing.assert_allclose(ips(max_weight=2.0), sum(r[0] for r in clipped) / mass, rtol=1e-10)


def test_pairwise_click_losses_on_binary_clicks_are_rax_pairwise_logistic():
  """0/1 clicks: the mean over (clicked, unclicked) pairs, weighted by the clicked item's 1/theta."""
  s, c, a, w = _data(8, SHAPE, CASES[0])

  @jax.jit  # one program rather than every primitive eagerly
  def pairs(s, c, a, w):
    ips = losses.ips_pairwise_loss(s, c, propensities=a, where=w)
    naive = losses.naive_pairwise_loss(s, c, where=w)
    return (
      ips,
      rax.pairwise_logistic_loss(s, c, where=w, weights=1.0 / a),
      naive,
      rax.pairwise_logistic_loss(s, c, where=w),
    )

  got, want, naive, plain = pairs(s, c, a, w)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_allclose(naive, plain, rtol=1e-6)


def test_lambdarank_click_losses_on_binary_clicks_are_rax_lambdarank():
  """lambdarank_weights: rax's LambdaRank on clicks over its list-size factor; IPS weighs the clicked item's pairs."""
  s, c, a, w = _data(9, SHAPE, CASES[0])
  lam = rax.dcg_lambdaweight
  unweighted_lam = lambda s_, l_, *, where, segments, weights: lam(s_, l_, where=where)  # no IPS in the gains
  ours_lam = lambda *args, **kw: 6.0 * losses.lambdarank_weights(*args, **kw)  # rax scales by the list size, 6
  for ours, theirs in (
    (
      lambda x: losses.naive_pairwise_loss(x, c, where=w, lambdaweight_fn=ours_lam, reduce_fn=jnp.sum),
      lambda x: rax.pairwise_logistic_loss(x, c, where=w, lambdaweight_fn=lam, reduce_fn=jnp.sum),
    ),
    (
      lambda x: losses.ips_pairwise_loss(x, c, propensities=a, where=w, lambdaweight_fn=ours_lam, reduce_fn=jnp.sum),
      lambda x: rax.pairwise_logistic_loss(
        x, c, where=w, weights=1.0 / a, lambdaweight_fn=unweighted_lam, reduce_fn=jnp.sum
      ),
    ),
  ):
    (ours_value, ours_grad), (theirs_value, theirs_grad) = (jax.jit(jax.value_and_grad(g))(s) for g in (ours, theirs))
    np.testing.assert_allclose(ours_value, theirs_value, rtol=1e-5)
    np.testing.assert_allclose(ours_grad, theirs_grad, rtol=1e-5, atol=1e-7)
  plain, lambdarank = jax.jit(
    lambda s: [
      losses.naive_pairwise_loss(s, c, where=w, lambdaweight_fn=fn, reduce_fn=jnp.sum)
      for fn in (None, losses.lambdarank_weights)
    ]
  )(s)
  assert float(plain) != pytest.approx(float(lambdarank))


def test_pairwise_click_loss_on_ctrs_is_the_expected_session_loss():
  """With independent clicks, the summed loss on CTRs = the expected summed loss over sessions."""
  with jax.enable_x64(True):
    s = jnp.array([0.3, -1.0, 2.0, 0.0])
    theta = np.array([1.0, 0.5, 1 / 3, 0.25])
    p = theta * np.array([0.9, 0.2, 0.6, 0.5])
    fn = lambda c: losses.ips_pairwise_loss(s, c, propensities=jnp.array(theta), reduce_fn=jnp.sum)
    outcomes = np.array(np.meshgrid(*[[0, 1]] * 4, indexing="ij")).reshape(4, -1).T
    probs = np.prod(np.where(outcomes == 1, p, 1 - p), axis=1)
    expected = np.sum(probs * np.asarray(jax.vmap(fn)(jnp.array(outcomes, float))))
    np.testing.assert_allclose(fn(jnp.array(p)), expected, rtol=1e-10)


def test_pairwise_debiasing_update_reference():
  with jax.enable_x64(True):
    rng = np.random.default_rng(3)
    q, l, k, p, alpha = 6, 5, 5, 1.0, 0.2
    s = rng.normal(size=(q, l))
    c = (rng.random((q, l)) < 0.4).astype(float)
    c[:3, 0], c[3:, 0] = 1.0, 0.0  # position 1 is clicked in some lists, unclicked in others
    c[:, 1], c[3:, 2] = 0.0, 1.0
    pos = np.stack([np.arange(l)] * q)
    tp0, tm0 = np.linspace(1, 0.5, k), np.linspace(1, 0.8, k)
    tp, tm = losses.pairwise_debiasing_update(
      jnp.array(tp0), jnp.array(tm0), jnp.array(s), jnp.array(c), jnp.array(pos), step_size=alpha, p=p
    )
    plus, minus = np.zeros(k), np.zeros(k)
    for b in range(q):
      for i in range(l):
        for j in range(l):
          if c[b, i] > c[b, j]:
            loss = np.log1p(np.exp(-(s[b, i] - s[b, j])))
            plus[pos[b, i]] += loss / tm0[pos[b, j]]
            minus[pos[b, j]] += loss / tp0[pos[b, i]]
    ref_p, ref_m = tp0.copy(), tm0.copy()
    for ref, mass in ((ref_p, plus), (ref_m, minus)):
      base = mass[0]
      for kk in range(k):
        if mass[kk] > 0 and base > 0:
          ref[kk] = (1 - alpha) * ref[kk] + alpha * (mass[kk] / base) ** (1 / (p + 1))
    np.testing.assert_allclose(tp, ref_p, rtol=1e-10)
    np.testing.assert_allclose(tm, ref_m, rtol=1e-10)
    assert tp[0] == 1.0


def test_log_space_helpers_are_finite_at_the_edges():
  from ultr_jax._numerics import log1mexp

  x = jnp.array([0.0, -1e-8, -0.5, -20.0, -1e4])
  out = log1mexp(x)
  np.testing.assert_allclose(out[1:4], np.log(-np.expm1(np.array([-1e-8, -0.5, -20.0]))), rtol=1e-4)
  assert out[0] == -jnp.inf and out[4] == 0.0


@pytest.mark.parametrize(
  "loss_fn",
  [
    losses.ips_sigmoid_loss,
    losses.ips_softmax_loss,
    losses.snips_sigmoid_loss,
    losses.snips_softmax_loss,
    losses.ips_pairwise_loss,
  ],
)
def test_never_examined_items_are_finite_and_carry_no_weight(loss_fn):
  # A top-k log keeps unshown candidates with examination 0 (they are never clicked).
  scores = jnp.array([1.0, 0.5, 0.2])
  clicks = jnp.array([1.0, 0.0, 0.0])
  value, grads = jax.value_and_grad(lambda s: loss_fn(s, clicks, propensities=jnp.array([1.0, 0.5, 0.0])))(scores)
  assert np.isfinite(float(value)) and np.all(np.isfinite(grads))
  np.testing.assert_array_equal(losses.ips_weights(jnp.array([1.0, 0.5, 0.0])), [1.0, 2.0, 0.0])
