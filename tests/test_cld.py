"""Tests of the CLD losses (spec-cld 10.1): hand values, gradient routing, invariances,
gamma = 0 decoupling, Tobit-II recovery, metrics hand values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from jax.test_util import check_grads

from ultr_jax import losses, metrics
from ultr_jax.losses import cld_loss, cld_pair_loss, heckman_loss


def _pointwise(rel, sel, c, rho, shown, **kw):
  return cld_loss(rel, c, selection_scores=sel, propensities=rho, shown=shown, **kw)


def _pair(rel, sel, y, rho, shown, **kw):
  del rho
  return cld_pair_loss(rel, y, selection_scores=sel, shown=shown, **kw)


def _heckman(rel, sel, c, rho, shown, mills_coef=0.3, **kw):
  del rho
  return heckman_loss(rel, c, selection_scores=sel, mills_coef=mills_coef, shown=shown, **kw)


LOSSES = {
  "cld": _pointwise,
  "cld_logit": lambda *a, **k: _pointwise(*a, link="logit", **k),
  "cld_mean": lambda *a, **k: _pointwise(*a, target="mean", **k),
  "cld_pair": _pair,
  "cld_pair_one": lambda *a, **k: _pair(*a, bpr_weight="one", unobs_weight=1.0, **k),
  "heckman": _heckman,
}
LOSSES = {k: jax.jit(v) for k, v in LOSSES.items()}  # eager dispatch is slow on a busy CPU


def _batch(key, shape=(3, 6), k=3):
  k1, k2, k3 = jax.random.split(key, 3)
  rel = jax.random.normal(k1, shape)
  sel = jax.random.normal(k2, shape)
  pos = jnp.broadcast_to(jnp.arange(shape[-1]), shape)
  shown = pos < k
  rho = jnp.where(shown, 1.0 / (pos + 1.0), 0.0)
  clicks = jnp.where(shown, jax.random.bernoulli(k3, 0.5, shape), 0.0).astype(jnp.float32)
  return rel, sel, clicks, rho, shown


# --- 10.1.1 / 10.1.2 hand values ------------------------------------------------


def test_hand_value_selected_and_clicked():
  one = jnp.ones(1)
  got = cld_loss(
    0.3 * one,
    one,
    selection_scores=0.5 * one,
    propensities=0.5 * one,
    shown=one > 0,
    gamma=0.2,
    link="probit",
    sq_weight=1.0,
  )
  z = (0.5 + 0.2 * 1.7) / np.sqrt(0.96)
  ref = 1.7**2 - scipy.stats.norm.logcdf(z)
  np.testing.assert_allclose(float(got), ref, rtol=1e-6)
  np.testing.assert_allclose(float(got), 3.10770, atol=5e-6)


def test_hand_value_not_selected():
  one = jnp.ones(1)
  got = cld_loss(0.3 * one, 0 * one, selection_scores=0.5 * one, propensities=0 * one, shown=one < 0, gamma=0.2)
  np.testing.assert_allclose(float(got), -np.log(1 - scipy.stats.norm.cdf(0.5)), rtol=1e-6)
  np.testing.assert_allclose(float(got), 1.17591, atol=5e-6)


def test_logit_link_matches_released_code_formula():
  rel, sel, c, rho, shown = _batch(jax.random.key(0))
  y = jnp.where(shown, c / jnp.where(shown, rho, 1.0), 0.0)
  g = 0.5
  mle = (y - rel) ** 2
  cond = -jax.nn.log_sigmoid((sel + g * (y - rel)) / np.sqrt(1 - g * g))
  unsel = -np.log(1 - jax.nn.sigmoid(sel))
  ref = np.mean(np.where(shown, cond + mle, unsel))
  got = cld_loss(rel, c, selection_scores=sel, propensities=rho, shown=shown, gamma=g, link="logit")
  np.testing.assert_allclose(float(got), ref, rtol=1e-5)


def test_aggregated_ctr_equals_per_session_records():
  """spec 3.4: CTR form (weights = sessions) == mean over per-session records."""
  key = jax.random.key(1)
  rel, sel, _, rho, shown = _batch(key, shape=(2, 5), k=3)
  n = 7
  sess = jax.random.bernoulli(jax.random.key(2), 0.4, (n, 2, 5)) & shown
  per_session = jax.jit(cld_loss, static_argnames=("gamma",))(
    jnp.broadcast_to(rel, sess.shape),
    sess.astype(jnp.float32),
    selection_scores=jnp.broadcast_to(sel, sess.shape),
    propensities=jnp.broadcast_to(rho, sess.shape),
    shown=jnp.broadcast_to(shown, sess.shape),
    gamma=0.3,
  )
  ctr = sess.mean(0)
  agg = cld_loss(
    rel, ctr, selection_scores=sel, propensities=rho, shown=shown, gamma=0.3, weights=jnp.full(rel.shape, float(n))
  )
  np.testing.assert_allclose(float(agg), float(per_session), rtol=1e-5)


def test_pair_loss_matches_brute_force():
  rel, sel, c, rho, shown = _batch(jax.random.key(3), shape=(5,), k=3)
  y = np.asarray(jnp.where(shown, c / jnp.where(shown, rho, 1.0), 0.0))
  rel, sel, s = np.asarray(rel, np.float64), np.asarray(sel, np.float64), np.asarray(shown)
  ls = lambda z: -np.logaddexp(0.0, -z)
  obj, den = 0.0, 0.0
  for i in range(5):
    for j in range(5):
      if i == j:
        continue
      obs = s[i] and s[j] and y[i] > y[j]
      unobs = not (s[i] and s[j])
      if not (obs or unobs):
        continue
      d = rel[i] - rel[j]
      a = 1.0 if obs else 0.7
      if obs:
        obj += (y[i] - y[j]) * ls(d)
      for m in (i, j):
        obj += a * (ls(sel[m] + d) if s[m] else ls(-sel[m]))
      den += a
  got = cld_pair_loss(
    jnp.asarray(rel, jnp.float32),
    jnp.asarray(y),
    selection_scores=jnp.asarray(sel, jnp.float32),
    shown=shown,
    unobs_weight=0.7,
  )
  np.testing.assert_allclose(float(got), -obj / den, rtol=1e-5)


def test_logit_link_matches_jax_log_sigmoid_far_into_the_tails():
  """The logit CLD loss, at scores far in the tails: equal to the form written with jax.nn.log_sigmoid."""
  rel, sel, c, rho, shown = _batch(jax.random.key(11))
  rel, sel = 40.0 * rel, 40.0 * sel
  y = jnp.where(shown, c / jnp.where(shown, rho, 1.0), 0.0)

  def ref(r, o):  # the logit CLD loss written with jax.nn.log_sigmoid
    z = (o + 0.5 * (y - r)) / np.sqrt(0.75)
    ll = jnp.where(shown, -jnp.square(y - r) + jax.nn.log_sigmoid(z), jax.nn.log_sigmoid(-o))
    return -jnp.mean(ll)

  got = lambda r, o: cld_loss(
    r, c, selection_scores=o, propensities=rho, shown=shown, gamma=0.5, link="logit", target="mean"
  )
  v, g = jax.value_and_grad(got, argnums=(0, 1))(rel, sel)
  v_ref, g_ref = jax.value_and_grad(ref, argnums=(0, 1))(rel, sel)
  np.testing.assert_allclose(float(v), float(v_ref), rtol=1e-6)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


# --- 10.1.3 gradient routing --------------------------------------------------------


def test_no_relevance_gradient_from_unshown_items_and_finite_at_zero_rho():
  rel, sel, c, rho, shown = _batch(jax.random.key(4))
  assert float(jnp.min(rho)) == 0.0
  g_rel, g_sel = jax.grad(
    lambda r, s: cld_loss(r, c, selection_scores=s, propensities=rho, shown=shown, gamma=0.3), argnums=(0, 1)
  )(rel, sel)
  assert np.all(np.isfinite(g_rel)) and np.all(np.isfinite(g_sel))
  np.testing.assert_array_equal(np.asarray(g_rel)[~np.asarray(shown)], 0.0)
  assert np.all(np.asarray(g_rel)[np.asarray(shown)] != 0.0)
  assert np.all(np.asarray(g_sel) != 0.0)


def test_pair_loss_both_unshown_pairs_send_no_relevance_gradient():
  rel, sel, c, rho, shown = _batch(jax.random.key(5), shape=(6,), k=2)
  # Only pairs of unshown items: make every shown item absent via `where`.
  where = ~shown
  g = jax.grad(lambda r: cld_pair_loss(r, c, selection_scores=sel, shown=shown, where=where, unobs_weight=1.0))(rel)
  np.testing.assert_array_equal(np.asarray(g), 0.0)
  # With shown items present, mixed pairs do move f_beta (Algorithm 2, line 12).
  g = jax.grad(lambda r: cld_pair_loss(r, c, selection_scores=sel, shown=shown, unobs_weight=1.0))(rel)
  assert np.any(np.asarray(g) != 0.0)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_all_masked_gives_zero_loss_and_zero_grads(name):
  rel, sel, c, rho, shown = _batch(jax.random.key(6))
  where = jnp.zeros(rel.shape, bool)
  fn = lambda r, s: LOSSES[name](r, s, c, rho, shown, where=where)
  val, grads = jax.value_and_grad(fn, argnums=(0, 1))(rel, sel)
  assert float(val) == 0.0
  for g in grads:
    np.testing.assert_array_equal(np.asarray(g), 0.0)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_check_grads(name):
  with jax.enable_x64(True):
    rel, sel, c, rho, shown = _batch(jax.random.key(7))
    rel, sel = rel.astype(jnp.float64), sel.astype(jnp.float64)
    if name == "heckman":  # the inverse Mills ratio is a stop-gradient input: check d/d f_beta only
      check_grads(lambda r: LOSSES[name](r, sel, c, rho, shown), (rel,), order=1, modes=("rev",), atol=1e-4, rtol=1e-4)
    else:
      check_grads(
        lambda r, s: LOSSES[name](r, s, c, rho, shown), (rel, sel), order=1, modes=("rev",), atol=1e-4, rtol=1e-4
      )


# --- 10.1.4 invariances ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_mask_equals_truncation(name):
  rel, sel, c, rho, shown = _batch(jax.random.key(8), shape=(1, 8), k=3)
  n = 6
  where = jnp.arange(8) < n
  # padding carries garbage that must not matter
  junk = lambda a, v: jnp.where(where, a, v)
  masked = LOSSES[name](junk(rel, 50.0), junk(sel, -9.0), junk(c, 1.0), junk(rho, 0.0), shown, where=where[None])
  trunc = LOSSES[name](rel[..., :n], sel[..., :n], c[..., :n], rho[..., :n], shown[..., :n])
  np.testing.assert_allclose(float(masked), float(trunc), rtol=1e-5)


@pytest.mark.parametrize("name", ["cld", "cld_logit", "cld_mean", "cld_pair_one"])
def test_vmap_equals_batch(name):
  """Losses normalised per record: the batch loss is the count-weighted mean of per-list losses."""
  rel, sel, c, rho, shown = _batch(jax.random.key(9), shape=(4, 6), k=3)
  where = jnp.arange(6)[None, :] < jnp.array([6, 4, 5, 2])[:, None]
  fn = LOSSES[name]
  per_list = jax.vmap(lambda *a: fn(*a[:5], where=a[5]))(rel, sel, c, rho, shown, where)
  batch = fn(rel, sel, c, rho, shown, where=where)
  if name.startswith("cld_pair"):
    ls = jnp.arange(6)
    valid = where[:, :, None] & where[:, None, :] & (ls[:, None] != ls[None, :])
    both = shown[:, :, None] & shown[:, None, :]
    y = c / jnp.where(shown, rho, 1.0)
    obs = valid & both & (y[:, :, None] > y[:, None, :])
    counts = jnp.sum(obs | (valid & ~both), axis=(1, 2))
  else:
    counts = where.sum(-1)
  np.testing.assert_allclose(float(batch), float(jnp.sum(per_list * counts) / counts.sum()), rtol=1e-5)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_compiles_once(name, assert_compiles_once):
  """One trace, no recompile: three batches of new values, the loss's scalar a changing Python float.

  (cld_loss's ``gamma`` is validated in Python, ``abs(gamma) < 1``, so it cannot be traced; its
  ``sq_weight`` is.)
  """
  fn = LOSSES[name]
  scalar = {"cld_pair": "sel_weight", "cld_pair_one": "sel_weight", "heckman": "mills_coef"}.get(name, "sq_weight")

  def step(rel, sel, c, rho, shown, **kw):
    return jax.grad(lambda r: fn(r, sel, c, rho, shown, **kw))(rel)

  assert_compiles_once(step, lambda i: (_batch(jax.random.key(10 + i)), {scalar: 0.2 + 0.1 * i}))


# --- 10.1.5 gamma = 0 decoupling, 10.1.6 Tobit-II recovery (x64) --------------------------


def _fit_linear_cld(x, y_clicks, rho, s, *, gamma, sq_weight):
  """L-BFGS (scipy) on the pointwise CLD loss with linear f_beta = x b, f_omega = x w."""
  d = x.shape[1]

  @jax.jit
  def vg(theta):
    return jax.value_and_grad(
      lambda t: cld_loss(
        x @ t[:d],
        y_clicks,
        selection_scores=x @ t[d:],
        propensities=rho,
        shown=s,
        gamma=gamma,
        sq_weight=sq_weight,
        target="mean",
      )
    )(theta)

  res = scipy.optimize.minimize(
    lambda t: tuple(np.asarray(v) for v in vg(jnp.asarray(t))),
    np.zeros(2 * d),
    jac=True,
    method="L-BFGS-B",
    options={"maxiter": 2000, "gtol": 1e-10, "ftol": 1e-15},
  )
  return res.x[:d], res.x[d:]


def _tobit_data(n, gamma_true, seed):
  rng = np.random.default_rng(seed)
  beta = np.array([0.5, 1.0, -0.5, 0.3, 0.0])
  omega = np.array([0.0, 0.6, 0.4, -0.3, 1.0])
  x = np.concatenate([np.ones((n, 1)), rng.standard_normal((n, 4))], axis=1)
  eps = rng.standard_normal(n)
  mu = gamma_true * eps + np.sqrt(1 - gamma_true**2) * rng.standard_normal(n)
  s = x @ omega + eps > 0
  y = np.where(s, x @ beta + mu, 0.0)
  return x, y, s, beta


def _ols(x, y, s):
  return np.linalg.lstsq(x[s], y[s], rcond=None)[0]


@pytest.mark.parametrize("sq_weight", [0.5, 1.0])
def test_gamma_zero_decouples_into_least_squares_plus_probit(sq_weight):
  with jax.enable_x64(True):
    x, y, s, _ = _tobit_data(3000, 0.5, seed=1)
    b, w = _fit_linear_cld(
      jnp.asarray(x), jnp.asarray(y), jnp.ones(len(y)), jnp.asarray(s), gamma=0.0, sq_weight=sq_weight
    )
    np.testing.assert_allclose(b, _ols(x, y, s), atol=1e-5)

    def probit_nll(t):
      z = x @ t
      return -np.sum(np.where(s, scipy.stats.norm.logcdf(z), scipy.stats.norm.logcdf(-z)))

    w_ref = scipy.optimize.minimize(probit_nll, np.zeros(5), method="BFGS", options={"gtol": 1e-8}).x
    np.testing.assert_allclose(w, w_ref, atol=1e-4)


def test_tobit_two_recovery():
  """sq_weight = 1/2 (the exact MLE) recovers beta; the literal Eq. 9 lies between truth and OLS."""
  with jax.enable_x64(True):
    x, y, s, beta = _tobit_data(20000, 0.3, seed=0)
    args = (jnp.asarray(x), jnp.asarray(y), jnp.ones(len(y)), jnp.asarray(s))
    b_half, _ = _fit_linear_cld(*args, gamma=0.3, sq_weight=0.5)
    assert np.max(np.abs(b_half - beta)) <= 0.05, b_half
    ols = _ols(x, y, s)
    assert np.max(np.abs(ols - beta)) > 0.1, ols  # the selection bias is real

    x, y, s, beta = _tobit_data(20000, 0.6, seed=0)
    args = (jnp.asarray(x), jnp.asarray(y), jnp.ones(len(y)), jnp.asarray(s))
    b_one, _ = _fit_linear_cld(*args, gamma=0.6, sq_weight=1.0)
    b_half, _ = _fit_linear_cld(*args, gamma=0.6, sq_weight=0.5)
    ols = _ols(x, y, s)
    assert np.max(np.abs(b_half - beta)) <= 0.05, b_half
    # intercept: truth < literal Eq. 9 < OLS (it corrects about half the bias)
    assert beta[0] + 0.05 < b_one[0] < ols[0] - 0.05, (b_one[0], ols[0])
    assert np.linalg.norm(b_one - beta) < np.linalg.norm(ols - beta)


# --- Heckman, Borda --------------------------------------------------------------------------


def test_heckman_recovers_outcome_on_tobit_data():
  """The joint stop-gradient Heckman objective reaches the two-step estimate (probit, then OLS on [x, lambda])."""
  with jax.enable_x64(True):
    x, y, s, beta = _tobit_data(20000, 0.6, seed=2)
    xj, yj, sj = jnp.asarray(x), jnp.asarray(y), jnp.asarray(s)

    def fun(t):
      return heckman_loss(xj @ t[:5], yj, selection_scores=xj @ t[5:10], mills_coef=t[10], shown=sj)

    vg = jax.jit(jax.value_and_grad(fun))
    t = np.zeros(11)
    for _ in range(3):  # alternate: lambda is a stop-gradient input
      t = scipy.optimize.minimize(
        lambda v: tuple(np.asarray(a) for a in vg(jnp.asarray(v))),
        t,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 2000, "gtol": 1e-10},
      ).x
    lam = np.asarray(losses.inverse_mills_ratio(jnp.asarray(x @ t[5:10])))
    two_step = np.linalg.lstsq(np.c_[x, lam][s], y[s], rcond=None)[0]
    np.testing.assert_allclose(t[:5], two_step[:5], atol=2e-3)
    assert abs(t[0] - beta[0]) < abs(_ols(x, y, s)[0] - beta[0])


def test_inverse_mills_ratio_matches_scipy_and_is_stable():
  z = np.array([-30.0, -3.0, 0.0, 2.0, 10.0])
  ref = scipy.stats.norm.pdf(z) / scipy.stats.norm.cdf(z)
  np.testing.assert_allclose(np.asarray(losses.inverse_mills_ratio(jnp.asarray(z))), ref, rtol=1e-4)


def test_borda_matches_numpy():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((4, 7)), rng.standard_normal((4, 7))
  where = np.arange(7)[None] < np.array([7, 5, 3, 1])[:, None]
  got = np.asarray(losses.borda_scores(jnp.asarray(a), jnp.asarray(b), where=jnp.asarray(where)))
  for q in range(4):
    n = where[q].sum()
    ra = np.empty(n)
    ra[np.argsort(-a[q, :n], kind="stable")] = np.arange(1, n + 1)
    rb = np.empty(n)
    rb[np.argsort(-b[q, :n], kind="stable")] = np.arange(1, n + 1)
    np.testing.assert_allclose(got[q, :n], 2 * n - ra - rb)
    np.testing.assert_array_equal(got[q, n:], 0.0)


# --- 10.1.8 metrics ----------------------------------------------------------------------------


def test_metric_hand_values():
  ndcg3 = metrics.ndcg(jnp.array([3.0, 2.0, 1.0, 0.0]), jnp.array([0.0, 1.0, 0.0, 1.0]), topn=3)
  np.testing.assert_allclose(float(ndcg3), (1 / np.log2(3)) / (1 + 1 / np.log2(3)), rtol=1e-6)
  np.testing.assert_allclose(float(ndcg3), 0.38685, atol=5e-6)
  ap = metrics.average_precision(jnp.array([4.0, 3.0, 2.0, 1.0]), jnp.array([1.0, 0.0, 1.0, 0.0]))
  np.testing.assert_allclose(float(ap), (1 + 2 / 3) / 2, rtol=1e-6)
