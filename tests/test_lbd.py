"""Tests of the LBD loss, tower and Method (spec-lbd 5.1.2-5.1.6)."""

import chex
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import scipy.optimize
from jax.test_util import check_grads

from ultr_jax.losses import lbd as L
from ultr_jax.models.lbd import LBDTower
from ultr_jax.train.methods import get_method
from ultr_jax.train.methods.lbd import grid_member_params, make_lbd, make_lbd_grid

PBM_V = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])


def _batch(seed=0, b=4, l=5, f=3, pad=True):
  rng = np.random.default_rng(seed)
  where = np.ones((b, l), bool)
  if pad:
    where[0, 3:] = False
    where[1, 1:] = False
  clicks = (rng.random((b, l)) < 0.4).astype(np.float32) * where
  clicks[:, 0] = 1.0
  feats = rng.uniform(-1, 1, (b, l, f)).astype(np.float32) * where[..., None]
  return {"features": jnp.asarray(feats), "where": jnp.asarray(where), "clicks": jnp.asarray(clicks)}


def _np_softmax_loss(logits, clicks, where, eps=1e-7):
  num, den = 0.0, 0.0
  for z, c, m in zip(np.asarray(logits, np.float64), np.asarray(clicks, np.float64), np.asarray(where)):
    if not m.any():
      continue
    zz = z[m]
    logp = zz - np.log(np.sum(np.exp(zz - zz.max()))) - zz.max()
    w = c[m] + eps
    num += -(w * logp).sum()
    den += w.sum()
  return num / den


# ---------------------------------------------------------------------------------------------
# 5.1.4 the supervised loss, with padding.


def test_softmax_click_loss_matches_reference_with_padding():
  b = _batch()
  logits = jax.random.normal(jax.random.key(0), b["where"].shape) * 3
  got = L.softmax_click_loss(logits, b["clicks"], where=b["where"])
  np.testing.assert_allclose(got, _np_softmax_loss(logits, b["clicks"], b["where"]), rtol=1e-5)
  # Padded slots do not matter, whatever their logits or clicks.
  junk = jnp.where(b["where"], logits, 1e3)
  junk_c = jnp.where(b["where"], b["clicks"], 1.0)
  np.testing.assert_allclose(L.softmax_click_loss(junk, junk_c, where=b["where"]), got, rtol=1e-6)


def test_softmax_click_loss_mask_equals_truncation():
  logits = jnp.array([[0.3, -1.0, 2.0, 7.0, -4.0]])
  clicks = jnp.array([[1.0, 0.0, 1.0, 1.0, 0.0]])
  where = jnp.array([[True, True, True, False, False]])
  np.testing.assert_allclose(
    L.softmax_click_loss(logits, clicks, where=where), L.softmax_click_loss(logits[:, :3], clicks[:, :3]), rtol=1e-6
  )


def test_softmax_click_loss_all_masked_is_zero_with_zero_grads():
  logits = jnp.ones((2, 4))
  where = jnp.zeros((2, 4), bool)
  value, grad = jax.value_and_grad(L.softmax_click_loss)(logits, jnp.ones((2, 4)), where=where)
  assert value == 0.0
  assert np.all(np.isfinite(grad)) and np.all(grad == 0)


# ---------------------------------------------------------------------------------------------
# 5.1.2 Bernoulli decoupling.


def test_bernoulli_t0_and_t1_identities():
  s_rel = jax.random.normal(jax.random.key(1), (3, 4))
  s_obs = jax.random.normal(jax.random.key(2), (3, 4, 4))
  factual = jnp.stack([s_obs[:, i, i] for i in range(4)], axis=-1)
  z0, g0 = L.bernoulli_click_logits(s_rel, observation_logits=s_obs, key=jax.random.key(3), t=0.0)
  np.testing.assert_array_equal(z0, s_rel + factual)
  assert np.all(g0 == 1)
  z1, g1 = L.bernoulli_click_logits(s_rel, observation_logits=s_obs, key=jax.random.key(3), t=1.0)
  np.testing.assert_array_equal(z1, s_rel)
  assert np.all(g1 == 0)


def test_factual_observation_uses_explicit_positions():
  s_obs = jnp.arange(12.0).reshape(1, 3, 4)
  got = L.factual_observation(s_obs, jnp.array([[2, 0, 9]]))  # 9 >= n: last head
  np.testing.assert_array_equal(got, [[2.0, 4.0, 11.0]])


@pytest.mark.parametrize("t", [0.1, 0.4])
def test_bernoulli_mask_mean(t):
  shape = (200, 50)
  _, gamma = L.bernoulli_click_logits(
    jnp.zeros(shape), observation_logits=jnp.zeros(shape + (3,)), key=jax.random.key(7), t=t
  )
  n = gamma.size
  se = np.sqrt(t * (1 - t) / n)
  assert abs(float(gamma.mean()) - (1 - t)) < 3 * se


def test_t1_lambda0_is_click_data_and_obs_heads_get_no_gradient():
  b = _batch()
  m = make_lbd(
    ml_collections.ConfigDict({"ranker": "dnn", "hidden_sizes": (8,), "lam": 0.0, "t": 1.0}),
    num_features=3,
    list_size=5,
  )
  p, extra = m.init(jax.random.key(0), b)
  (loss, _), grads = jax.jit(jax.value_and_grad(m.loss, has_aux=True))(p, extra, b, jax.random.key(1))
  naive = jax.jit(lambda p: L.softmax_click_loss(m.score(p, b), b["clicks"], where=b["where"]))(p)
  # Same value up to float32 rounding (the two jitted graphs fuse differently).
  np.testing.assert_allclose(float(loss), float(naive), rtol=1e-6)
  out = grads["tower"]["params"]["Dense_1"]
  np.testing.assert_array_equal(out["kernel"][:, 1:], 0.0)
  np.testing.assert_array_equal(out["bias"][1:], 0.0)
  assert np.abs(out["kernel"][:, 0]).sum() > 0


# ---------------------------------------------------------------------------------------------
# 5.1.3 the gradient penalty.


def _linear_heads(seed, f, n):
  rng = np.random.default_rng(seed)
  return jnp.asarray(rng.normal(size=(f, n))), jnp.asarray(rng.normal(size=(n,)))


def test_gp_closed_form_on_linear_heads_with_dropout_and_padding():
  with jax.enable_x64(True):
    b = _batch(f=4)
    feats = jnp.asarray(b["features"], jnp.float64)
    where = b["where"]
    n, keep = 5, 0.1
    bw, c = _linear_heads(0, 4, n)
    key = jax.random.key(11)
    gp = L.gradient_penalty(lambda x: x @ bw + c, feats, where=where, key=key, keep=keep)
    mask = np.asarray(jax.random.bernoulli(key, keep, where.shape + (n,)), np.float64) / keep
    count = int(np.sum(where)) * n
    g = np.einsum("bdp,fp->bdf", mask, np.asarray(bw)) / count  # G_d = 1/(Dn) sum_p m_dp/k b_p
    expected = float((g**2 * np.asarray(where)[..., None]).sum())
    np.testing.assert_allclose(gp, expected, rtol=1e-10)


def test_gp_expectation_over_dropout_by_monte_carlo():
  with jax.enable_x64(True):
    d_count, n, keep, f = 6, 4, 0.1, 3
    bw, c = _linear_heads(1, f, n)
    feats = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (1, d_count, f)))
    keys = jax.random.split(jax.random.key(0), 40000)
    draws = jax.vmap(lambda k: L.gradient_penalty(lambda x: x @ bw + c, feats, key=k, keep=keep))(keys)
    bnp = np.asarray(bw).T  # [n, F]
    bracket = (1 / keep - 1) * (bnp**2).sum() + (bnp.sum(0) ** 2).sum()
    expected = d_count * bracket / (d_count * n) ** 2
    se = float(np.std(draws) / np.sqrt(draws.size))
    assert abs(float(np.mean(draws)) - expected) < 4 * se, (float(np.mean(draws)), expected, se)


@pytest.mark.parametrize("mode", ["code", "paper"])
def test_gp_parameter_gradient_matches_finite_differences(mode):
  with jax.enable_x64(True):
    tower = LBDTower(num_positions=3, hidden_sizes=(5,))
    b = _batch(f=3)
    feats = jnp.asarray(b["features"], jnp.float64)
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), tower.init(jax.random.key(0), feats))
    key = jax.random.key(5)

    def penalty(p):
      return L.lbd_forward(lambda x: tower.apply(p, x), feats, where=b["where"], key=key, mode=mode)[2]

    assert float(penalty(params)) > 0
    check_grads(jax.jit(penalty), (params,), order=1, modes=("rev",), atol=1e-6, rtol=1e-5)


def test_gp_paper_form_closed_form_on_linear_heads():
  with jax.enable_x64(True):
    n, f = 3, 4
    bw, c = _linear_heads(2, f, n)
    feats = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (2, 3, f)))
    gp = L.gradient_penalty(lambda x: x @ bw + c, feats, mode="paper")
    s = np.asarray(feats) @ np.asarray(bw) + np.asarray(c)  # [2, 3, n]
    # grad_x exp(b_p x + c_p) = exp(s_p) b_p
    norms = np.exp(s) * np.linalg.norm(np.asarray(bw), axis=0)
    np.testing.assert_allclose(gp, norms.sum(-1).mean(), rtol=1e-10)


def test_gp_all_masked_is_finite_with_zero_grads():
  tower = LBDTower(num_positions=2, hidden_sizes=(4,))
  feats = jnp.zeros((2, 3, 3))
  params = tower.init(jax.random.key(0), feats)
  for mode in ("code", "paper"):
    fn = lambda p: L.lbd_forward(
      lambda x: tower.apply(p, x), feats, where=jnp.zeros((2, 3), bool), key=jax.random.key(1), mode=mode
    )[2]
    value, grads = jax.jit(jax.value_and_grad(fn))(params)
    assert value == 0.0
    assert all(np.all(g == 0) for g in jax.tree.leaves(grads))


def test_lambda_zero_gives_exactly_unlimited_gradients():
  # float64 so that only reassociation noise (~1e-16) separates two differently compiled graphs.
  with jax.enable_x64(True):
    b = jax.tree.map(lambda x: x.astype(jnp.float64) if x.dtype == jnp.float32 else x, _batch())
    cfg = {"ranker": "dnn", "hidden_sizes": (8, 4)}
    unlimited = get_method("unlimited", ml_collections.ConfigDict(cfg), num_features=3, list_size=5)
    lips = make_lbd(ml_collections.ConfigDict({**cfg, "lam": 100.0, "t": 0.0}), num_features=3, list_size=5)
    # members in a mixed order: the lambda = 0 ones skip the penalty, the others get theirs
    grid = make_lbd_grid(
      ml_collections.ConfigDict({**cfg, "lams": [100.0, 0.0], "ts": [0.0, 0.0]}), num_features=3, list_size=5
    )
    p, extra = unlimited.init(jax.random.key(0), b)
    p = jax.tree.map(lambda x: x.astype(jnp.float64), p)
    gp = {"towers": jax.tree.map(lambda x: jnp.stack([x, 1.1 * x]), p["tower"])}
    g_unl = jax.jit(jax.grad(lambda q: unlimited.loss(q, extra, b, jax.random.key(3))[0]))(grid_member_params(gp, 1))
    (_, (metrics, _)), g_grid = jax.jit(
      jax.value_and_grad(lambda q: grid.loss(q, extra, b, jax.random.key(4)), has_aux=True)
    )(gp)
    member_key = jax.random.split(jax.random.key(4), 2)[0]
    g_lips = jax.jit(jax.grad(lambda q: lips.loss(q, extra, b, member_key)[0]))(grid_member_params(gp, 0))
    assert float(metrics["gp"]) > 0
    chex.assert_trees_all_close(g_unl, grid_member_params(g_grid, 1), rtol=1e-12, atol=1e-14)
    chex.assert_trees_all_close(g_lips, grid_member_params(g_grid, 0), rtol=1e-10, atol=1e-12)
    assert not np.allclose(
      jax.tree.leaves(g_lips)[0],
      jax.tree.leaves(
        jax.jit(jax.grad(lambda q: unlimited.loss(q, extra, b, member_key)[0]))(grid_member_params(gp, 0))
      )[0],
    )


def test_penalty_changes_gradients_when_lambda_positive():
  b = _batch()
  cfg = ml_collections.ConfigDict({"ranker": "linear", "lams": [0.0, 1e4], "ts": [0.0, 0.0]})
  grid = make_lbd_grid(cfg, num_features=3, list_size=5)
  p, extra = grid.init(jax.random.key(0), b)
  p = {"towers": jax.tree.map(lambda x: jnp.stack([x[0], x[0]]), p["towers"])}
  g = jax.jit(jax.grad(lambda q: grid.loss(q, extra, b, jax.random.key(1))[0]))(p)
  k = g["towers"]["params"]["Dense_0"]["kernel"]
  assert float(jnp.abs(k[0] - k[1]).max()) > 1e-4


def test_rescale_gp_weight_is_identity_at_reference_shape():
  assert L.rescale_gp_weight(100.0, batch_size=256, list_size=10, num_positions=10) == 100.0


# ---------------------------------------------------------------------------------------------
# 5.1.5 inference invariance.


def test_scores_depend_only_on_the_relevance_head():
  b = _batch()
  methods = [
    make_lbd(
      ml_collections.ConfigDict({"ranker": "dnn", "hidden_sizes": (8,), "lam": lam, "t": t}),
      num_features=3,
      list_size=5,
    )
    for lam, t in [(0.0, 0.0), (1e4, 0.4), (100.0, 1.0)]
  ]
  p, _ = methods[0].init(jax.random.key(0), b)
  ref = methods[0].score(p, b)
  out = p["tower"]["params"]["Dense_1"]
  noisy = jax.tree.map(lambda x: x, p)
  noisy["tower"]["params"]["Dense_1"] = {
    "kernel": out["kernel"].at[:, 1:].add(5.0),
    "bias": out["bias"].at[1:].add(-3.0),
  }
  for m in methods:
    np.testing.assert_array_equal(m.score(p, b), ref)
    np.testing.assert_array_equal(m.score(noisy, b), ref)
  # and it does depend on head 0
  moved = jax.tree.map(lambda x: x, p)
  moved["tower"]["params"]["Dense_1"] = {"kernel": out["kernel"].at[:, 0].add(1.0), "bias": out["bias"]}
  assert not np.allclose(methods[0].score(moved, b), ref)


def test_lbd_grid_member_scores_and_compiles_once(assert_compiles_once):
  b = _batch()
  cfg = ml_collections.ConfigDict({"ranker": "linear", "lams": [0.0, 100.0, 1e4], "ts": [0.0, 0.1, 0.4]})
  grid = make_lbd_grid(cfg, num_features=3, list_size=5)
  single = make_lbd(ml_collections.ConfigDict({"ranker": "linear"}), num_features=3, list_size=5)
  p, extra = grid.init(jax.random.key(0), b)
  opt_state = grid.optimizer.init(p)

  def step(p, opt_state, key):
    g, (metrics, _) = jax.grad(grid.loss, has_aux=True)(p, extra, b, key)
    u, opt_state = grid.optimizer.update(g, opt_state, p)
    return jax.tree.map(jnp.add, p, u), opt_state

  # New keys and new parameter values every call: one trace.
  scaled = lambda i: jax.tree.map(lambda x: x * (1.0 + 0.1 * i), p)  # noqa: E731
  assert_compiles_once(step, lambda i: ((scaled(i), opt_state, jax.random.key(i)), {}))
  run = jax.jit(step)
  for i in range(3):
    p, opt_state = run(p, opt_state, jax.random.key(i))
  for g in range(3):
    member = grid_member_params(p, g)
    assert member["tower"]["params"]["Dense_0"]["kernel"].shape == (3, 6)
    assert np.all(np.isfinite(single.score(member, b)))


# ---------------------------------------------------------------------------------------------
# 5.1.6 the linear coupling check.


def _coupling_problem(seed=0, q=300, f=6, n=10):
  rng = np.random.default_rng(seed)
  a_star = rng.normal(size=f)
  w = np.zeros(f)
  w[:3] = [0.3, -0.2, 0.25]  # crux features are the first three
  x = rng.uniform(-1, 1, (q, n, f))
  log_r = x @ a_star
  log_r -= log_r.max()  # probabilities <= 1; a per-list constant does not matter
  exponent = 1.0 + x @ w  # unclipped
  clicks = np.exp(log_r) * PBM_V**exponent  # expected clicks, no sampling noise
  return a_star, w, x, clicks


def _fit_linear_multi(x, clicks, mu, init, n=10):
  f = x.shape[-1]

  def unpack(theta):
    a = theta[:f]
    bw = theta[f : f + f * n].reshape(f, n)
    c = theta[f + f * n :]
    return a, bw, c

  def objective(theta):
    a, bw, c = unpack(theta)
    s_obs = x @ bw + c  # [Q, n, n]
    logits = x @ a + jnp.diagonal(s_obs, axis1=-2, axis2=-1)
    sv = L.softmax_click_loss(logits, clicks, eps=0.0)
    # expected repo-form GP (keep 0.1) up to its constant: 9 sum_p |b_p|^2 + |sum_p b_p|^2
    gp = 9 * jnp.sum(bw**2) + jnp.sum(jnp.sum(bw, axis=1) ** 2)
    return sv + mu * gp

  with jax.enable_x64(True):
    x, clicks = jnp.asarray(x), jnp.asarray(clicks)
    fg = jax.jit(jax.value_and_grad(objective))
    res = scipy.optimize.minimize(
      lambda th: tuple(np.asarray(v, np.float64) for v in fg(jnp.asarray(th))),
      init,
      jac=True,
      method="L-BFGS-B",
      options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-10},
    )
    a, bw, c = unpack(res.x)
    return res, np.asarray(a), np.asarray(bw), np.asarray(c)


def _cos(u, v):
  return float(np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v))


def test_linear_coupling_check():
  a_star, w, x, clicks = _coupling_problem()
  f, n = x.shape[-1], 10
  dim = f + f * n + n
  rng = np.random.default_rng(1)
  # (i) Unlimited: two initialisations reach the same (minimal) click loss but different rankers.
  fits = [_fit_linear_multi(x, clicks, 0.0, rng.normal(size=dim)) for _ in range(2)]
  (r1, a1, _, _), (r2, a2, _, _) = fits
  assert abs(r1.fun - r2.fun) < 1e-7
  assert np.linalg.norm(a1 - a2) > 0.3
  # ... and a relevance direction that is not the truth's.
  assert min(_cos(a1, a_star), _cos(a2, a_star)) < 0.99
  # (ii) a small penalty selects the minimum-GP exact fit.
  res, a, bw, c = _fit_linear_multi(x, clicks, 1e-5, rng.normal(size=dim))
  assert res.fun - r1.fun < 1e-3  # still (almost) an exact fit
  log_v = np.log(PBM_V)
  expected_b = np.outer(w, log_v - log_v.mean())  # [F, n]
  assert _cos(bw.ravel(), expected_b.ravel()) > 0.99
  np.testing.assert_allclose(-log_v.mean(), 1.5424, atol=1e-4)
  assert _cos(a, a_star - 1.5424 * w) > 0.99
  # the intercepts absorb ln v_p (up to a constant)
  assert _cos(c - c.mean(), log_v - log_v.mean()) > 0.99


def test_skip_zero_lambda_gp_leaves_gradients_unchanged():
  # the option only regroups the vmapped members; the lambda = 0 penalty term is 0 either way
  b = _batch()
  base = {"ranker": "linear", "lams": [0.0, 1e4, 0.0], "ts": [0.0, 0.0, 0.2]}
  grads = []
  for skip in (True, False):
    grid = make_lbd_grid(ml_collections.ConfigDict({**base, "skip_zero_lambda_gp": skip}), num_features=3, list_size=5)
    p, extra = grid.init(jax.random.key(0), b)
    grads.append(jax.jit(jax.grad(lambda q: grid.loss(q, extra, b, jax.random.key(1))[0]))(p))
  chex.assert_trees_all_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)
