"""SIF (spec-sif 7.1 T1-T5, T9): estimator values, bounds, DR, reductions, dual ascent."""

import functools
import itertools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.test_util import check_grads

from ultr_jax import losses
from ultr_jax.simulation import make_position_trust_click_fn, position_trust, sif_toy_dataset
from ultr_jax.train import get_method

H = lambda p: -(p * np.log(p) + (1 - p) * np.log(1 - p))


# ----------------------------------------------------------------------------
# T1: the estimator.


@pytest.mark.parametrize("probs, gap, var", [((0.2, 0.8), 0.192745, 0.18), ((0.1, 0.3), 0.032429, 0.03125)])
def test_worked_values(probs, gap, var):
  p, w = jnp.array(probs), jnp.zeros(2, jnp.int32)
  assert float(losses.binary_entropy(0.5)) == pytest.approx(0.693147, abs=1e-6)
  assert float(losses.binary_entropy(0.2)) == pytest.approx(0.500402, abs=1e-6)
  assert float(losses.conditional_mi_binary(p, w, num_cells=1)) == pytest.approx(gap, abs=1e-6)
  assert float(losses.conditional_mi_binary(p, w, num_cells=1, estimator="variance")) == pytest.approx(var, abs=1e-6)


def test_zero_for_constant_cells_and_nonnegative():
  cells = jnp.array([0, 0, 1, 1, 1, 2])
  p = jnp.array([0.3, 0.3, 0.7, 0.7, 0.7, 0.1])
  for est in ("entropy", "variance"):
    assert float(losses.conditional_mi_binary(p, cells, num_cells=3, estimator=est, clamp=False)) == pytest.approx(
      0.0, abs=1e-7
    )
  rng = np.random.default_rng(0)
  mi = jax.jit(lambda p, c: losses.conditional_mi_binary(p, c, num_cells=4, clamp=False))
  for _ in range(50):
    p = rng.uniform(0.01, 0.99, 40).astype(np.float32)
    c = rng.integers(0, 4, 40).astype(np.int32)
    assert float(mi(p, c)) >= -1e-7


def test_equals_enumerated_discrete_mi_float64():
  """Items = (z, w) pairs with mass p(z, w); the estimator is exactly I(B; Z | W)."""
  with jax.enable_x64(True):
    rng = np.random.default_rng(1)
    nz, nw = 4, 3
    pzw = rng.dirichlet(np.ones(nz * nw)).reshape(nz, nw)
    q = rng.uniform(0.05, 0.95, (nz, nw))  # q(B=1 | z, w)
    mi = 0.0
    for w in range(nw):
      pw = pzw[:, w].sum()
      pb = (pzw[:, w] * q[:, w]).sum() / pw
      for z, b in itertools.product(range(nz), (0, 1)):
        qb = q[z, w] if b else 1 - q[z, w]
        pbw = pb if b else 1 - pb
        mi += pzw[z, w] * qb * np.log(qb / pbw)
    zz, ww = np.meshgrid(np.arange(nz), np.arange(nw), indexing="ij")
    est = losses.conditional_mi_binary(
      jnp.asarray(q.ravel()), jnp.asarray(ww.ravel()), weights=jnp.asarray(pzw.ravel()), num_cells=nw
    )
    assert abs(float(est) - mi) < 1e-9


def test_backdoor_marginal_can_go_negative():
  p = jnp.array([0.5, 0.5])
  raw = losses.conditional_mi_binary(p, jnp.zeros(2, int), num_cells=1, marginal=jnp.array([0.2]), clamp=False)
  assert float(raw) < 0
  assert float(losses.conditional_mi_binary(p, jnp.zeros(2, int), num_cells=1, marginal=jnp.array([0.2]))) == 0.0


def test_permutation_invariance_and_mask_equals_truncation():
  rng = np.random.default_rng(2)
  p = jnp.asarray(rng.uniform(0.05, 0.95, (5, 8)))
  c = jnp.asarray(rng.integers(0, 3, (5, 8)))
  base = losses.conditional_mi_binary(p, c, num_cells=3)
  perm = rng.permutation(8)
  assert float(losses.conditional_mi_binary(p[:, perm], c[:, perm], num_cells=3)) == pytest.approx(
    float(base), rel=1e-5
  )
  flat = rng.permutation(40)
  assert float(losses.conditional_mi_binary(p.ravel()[flat], c.ravel()[flat], num_cells=3)) == pytest.approx(
    float(base), rel=1e-5
  )
  where = jnp.arange(8) < 5
  masked = losses.conditional_mi_binary(jnp.where(where, p, 0.9), c, where=where, num_cells=3)
  assert float(masked) == pytest.approx(float(losses.conditional_mi_binary(p[:, :5], c[:, :5], num_cells=3)), rel=1e-5)


def test_all_masked_is_zero_with_zero_grads():
  s = jnp.arange(4.0)
  d = jnp.array([0.2, 0.4, 0.6, 0.8])
  none = jnp.zeros(4, bool)

  def f(s):
    q = losses.project_within_cells(d, s, jnp.zeros(4, int), where=none, num_cells=1)
    return losses.conditional_mi_binary(q, jnp.zeros(4, int), where=none, num_cells=1)

  v, g = jax.jit(jax.value_and_grad(f))(s)
  assert float(v) == 0.0 and np.all(np.isfinite(g)) and np.all(g == 0)


def test_vmap_equals_loop_and_compiles_once(assert_compiles_once):
  rng = np.random.default_rng(3)
  p = jnp.asarray(rng.uniform(0.05, 0.95, (4, 6)))
  c = jnp.asarray(rng.integers(0, 2, (4, 6)))

  def f(p, c):
    return jax.vmap(lambda a, b: losses.conditional_mi_binary(a, b, num_cells=2))(p, c)

  assert_compiles_once(f, lambda i: ((p * (1.0 - 0.01 * i), jnp.roll(c, i, axis=-1)), {}))
  out = jax.jit(f)(p, c)
  loop = [float(losses.conditional_mi_binary(p[i], c[i], num_cells=2)) for i in range(4)]
  np.testing.assert_allclose(out, loop, rtol=1e-5)


def test_projection_and_decision_gradient_finite_differences():
  with jax.enable_x64(True):
    rng = np.random.default_rng(4)
    s = jnp.asarray(rng.standard_normal((6, 3)))
    d = jnp.asarray(rng.uniform(0.1, 0.6, (6, 3)))
    pos = jnp.broadcast_to(jnp.arange(3), (6, 3))

    @functools.partial(jax.jit, static_argnums=1)
    def i_d(s, est):
      q = losses.project_within_cells(d, s, pos, num_cells=3)
      return losses.conditional_mi_binary(q, pos, num_cells=3, estimator=est)

    for est in ("entropy", "variance"):
      check_grads(lambda s: i_d(s, est), (s,), order=1, modes=("rev",), eps=1e-6)
    # The variance form of the projection is corr^2 Var(d) / (2 dbar (1 - dbar)) per cell.
    val = 0.0
    for k in range(3):
      sk, dk = np.asarray(s[:, k]), np.asarray(d[:, k])
      r = np.corrcoef(sk, dk)[0, 1]
      val += r**2 * dk.var() / (2 * dk.mean() * (1 - dk.mean())) / 3
    assert float(i_d(s, "variance")) == pytest.approx(val, rel=1e-6)


# ----------------------------------------------------------------------------
# T2: Theorem 1 / Corollary 1 bound checks on an enumerated SCM.


def _scm(rng, position_only):
  px = rng.dirichlet(np.ones(4))
  pk_x = rng.dirichlet(np.ones(3), size=4)  # p(k | x)
  pxk = px[:, None] * pk_x
  e = rng.uniform(0.05, 0.95, (4, 3))
  if position_only:
    e = np.broadcast_to(rng.uniform(0.05, 0.95, 3), (4, 3)).copy()
  r = rng.uniform(0, 1, 4)
  loss = rng.uniform(0, 1, 2)  # L(c) in [0, 1] for c = 0, 1
  e_k = (pxk * e).sum(0) / pxk.sum(0)  # target p_obs(E | K)
  pc = lambda ee: ee * r[:, None]  # P(C = 1 | x, k)
  lval = lambda ee: (pxk * (pc(ee) * loss[1] + (1 - pc(ee)) * loss[0])).sum()
  kl = (pxk * (e * np.log(e / e_k) + (1 - e) * np.log((1 - e) / (1 - e_k)))).sum()
  return abs(lval(np.broadcast_to(e_k, (4, 3))) - lval(e)), kl, pxk, e


def test_theorem1_and_corollary1_bounds():
  rng = np.random.default_rng(5)
  ratios = []
  estimate = jax.jit(lambda e, k, m: losses.conditional_mi_binary(e, k, weights=m, num_cells=3))
  for _ in range(1000):
    gap, kl, pxk, e = _scm(rng, False)
    # I(E; X | K) by the estimator: items (x, k) with mass p(x, k), cells k.
    xs, ks = np.meshgrid(np.arange(4), np.arange(3), indexing="ij")
    with jax.enable_x64(True):
      mi = float(estimate(e.ravel(), ks.ravel(), pxk.ravel()))
    assert mi == pytest.approx(kl, rel=1e-6, abs=1e-12)  # E[KL(p_obs || p_obs(E|K))] = I(E; X | K)
    bound = 2 * np.sqrt(0.5 * kl)
    assert gap <= bound + 1e-12
    assert gap <= np.sqrt(2 * mi) + 1e-9
    if bound > 1e-9:
      ratios.append(gap / bound)
  assert 0 < np.median(ratios) < 1
  gap, kl, _, _ = _scm(rng, True)
  assert kl == pytest.approx(0.0, abs=1e-12) and gap == pytest.approx(0.0, abs=1e-12)


# ----------------------------------------------------------------------------
# T3/T4: doubly robust risk.


def test_dr_double_robustness_with_observed_exposure():
  rng = np.random.default_rng(6)
  n = 200_000
  x = rng.integers(0, 4, n)
  k = rng.integers(0, 3, n)
  e_true = np.array([0.9, 0.6, 0.3])[k] * np.array([1.0, 0.9, 0.8, 0.7])[x]
  m_true = np.array([0.2, 0.4, 0.6, 0.8])[x] * np.array([1.0, 0.8, 0.6])[k]  # E[L | x, k, E = 1]
  exposed = (rng.uniform(size=n) < e_true).astype(np.float64)
  loss = (rng.uniform(size=n) < m_true).astype(np.float64)
  target = m_true.mean()  # L* = E_{X,K}[m]

  def est(e, m):
    per = np.asarray(
      losses.doubly_robust_risk(
        jnp.asarray(loss), jnp.asarray(exposed), propensities=jnp.asarray(e), imputed=jnp.asarray(m), reduce_fn=None
      ),
      np.float64,
    )
    return per.mean(), per.std() / np.sqrt(n)

  e_wrong = np.clip(e_true * 1.5, 0, 0.99)
  m_wrong = np.full(n, 0.5)
  for e, m in ((e_true, m_wrong), (e_wrong, m_true)):
    v, se = est(e, m)
    assert abs(v - target) < 3 * se
  v, se = est(e_wrong, m_wrong)
  assert abs(v - target) > 10 * se
  ips = (exposed / e_wrong * loss).mean()
  assert abs(ips - target) > 10 * loss.std() / np.sqrt(n)


def test_dr_collapses_to_ips_on_displayed_items():
  rng = np.random.default_rng(7)
  c = jnp.asarray((rng.uniform(size=(4, 6)) < 0.3).astype(np.float32))
  rho = jnp.asarray(rng.uniform(0.05, 0.9, (4, 6)))
  m = jnp.asarray(rng.uniform(0.05, 0.9, (4, 6)))
  disp = jnp.arange(6) < 4
  where = jnp.ones((4, 6), bool)
  t_dr = losses.dr_targets(c, rho, m, where=where, displayed=disp, tau=0.01)
  t_ips = losses.ips_targets(c, rho, where=disp, tau=0.01)
  np.testing.assert_allclose(t_dr[:, :4], t_ips[:, :4], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(t_dr[:, 4:], m[:, 4:], rtol=1e-6)
  # They differ where rho < tau.
  t_dr2 = losses.dr_targets(c, jnp.full((4, 6), 0.001), m, where=where, tau=0.01)
  t_ips2 = losses.ips_targets(c, jnp.full((4, 6), 0.001), where=where, tau=0.01)
  assert float(jnp.abs(t_dr2 - t_ips2).max()) > 0.01


# ----------------------------------------------------------------------------
# T5: reductions, and the Methods.


def _toy_batch(alpha=0.6, n=64, seed=0):
  ds, _ = sif_toy_dataset(n, seed=seed)
  batch = jax.tree.map(jnp.asarray, {k: v for k, v in ds.as_batch().items() if k != "qid"})
  batch.update(make_position_trust_click_fn({"alpha": alpha})(jax.random.key(seed), batch))
  return ds, batch


def test_reduction_to_ips_and_zero_exposure_penalty():
  ds, batch = _toy_batch()
  cfg = ml_collections.ConfigDict({"ranker": "linear", "trust_head": False, "exposure_slope": False, "channels": ()})
  m = get_method("sif_full", cfg, num_features=20, list_size=10)
  cfg_e = ml_collections.ConfigDict({**cfg.to_dict(), "channels": ("E",), "lambda_E": 5.0})
  m_e = get_method("sif_full", cfg_e, num_features=20, list_size=10)
  params, extra = m.init(jax.random.key(0), batch)
  params["bias"]["exposure_bias"] = jnp.log(
    jnp.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.2, 0.11, 0.1, 0.08, 0.06])
    / (1 - jnp.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.2, 0.11, 0.1, 0.08, 0.06]))
  )
  loss, loss_e = jax.jit(m.loss), jax.jit(m_e.loss)
  _, (metrics, _) = loss(params, extra, batch, jax.random.key(1))
  s = m.score(params, batch)
  ips = losses.listwise_risk(s, losses.ips_targets(batch["clicks"], batch["examination"], tau=0.01))
  assert float(metrics["risk"]) == pytest.approx(float(ips), rel=1e-5)
  # Turning I_E on with u frozen at 0 adds exactly 0.
  l0, _ = loss(params, extra, batch, jax.random.key(1))
  l1, (met1, _) = loss_e(params, extra, batch, jax.random.key(1))
  assert float(met1["I_E"]) == 0.0 and float(l1) == float(l0)


@pytest.mark.parametrize("name", ["sif_exp", "sif_dec", "sif_full", "sif_dr", "dr", "sif_lambda0"])
def test_methods_gradient_routing(name):
  ds, batch = _toy_batch(n=16)
  m = get_method(name, {"ranker": "linear"}, num_features=20, list_size=10)
  params, extra = m.init(jax.random.key(0), batch)

  def terms(p):  # the loss, I_D and I_E: their gradients in one batched backward pass, one compiled program
    loss, (mm, _) = m.loss(p, extra, batch, jax.random.key(1))
    return jnp.stack([loss, mm["I_D"], mm["I_E"]]), loss

  jac, loss = jax.jit(jax.jacrev(terms, has_aux=True))(params)
  grads, g_d, g_e = (jax.tree.map(lambda j, i=i: j[i], jac) for i in range(3))
  assert np.isfinite(float(loss))
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  # I_D never reaches the bias tower; I_E never reaches the ranker.
  assert all(float(jnp.abs(v).max()) == 0.0 for v in jax.tree.leaves(g_d["bias"]))
  assert all(float(jnp.abs(v).max()) == 0.0 for v in jax.tree.leaves(g_e["relevance"]))


def test_position_trust_simulator_rates():
  r = jnp.full((20000, 10), 0.28)
  z = jnp.zeros((20000, 10))
  out = position_trust(jax.random.key(0), r, z, alpha=1.0)
  table = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.2, 0.11, 0.1, 0.08, 0.06])
  expect = table * 0.28 * (1 + np.exp(-0.3 * np.arange(10)) * 0.5)
  np.testing.assert_allclose(out["click_prob"][0], expect, rtol=1e-5)
  np.testing.assert_array_equal(out["conditional_click_prob"], out["click_prob"])  # independent clicks
  rate = np.asarray(out["clicks"]).mean(0)
  assert np.all(np.abs(rate - expect) < 5 * np.sqrt(expect * (1 - expect) / 20000))


# ----------------------------------------------------------------------------
# T9: dual ascent.


def test_dual_ascent_rises_and_settles():
  # A leakage that decreases in lambda: I(lambda) = I0 / (1 + lambda).
  i0, budget = 0.02, 0.005
  lam, ema = jnp.float32(0.0), jnp.float32(0.0)
  lams = []
  step = jax.jit(
    lambda lam, ema, first: losses.dual_ascent_update(lam, ema, i0 / (1.0 + lam), budget=budget, eta=5.0, first=first)
  )
  for t in range(3000):
    lam, ema = step(lam, ema, np.bool_(t == 0))
    lams.append(float(lam))
  assert lams[10] > 0 and lams[500] > lams[10]
  assert float(ema) == pytest.approx(budget, rel=0.05)
  assert abs(lams[-1] - lams[-500]) < 0.05 * lams[-1]
  lam_hi, _ = losses.dual_ascent_update(jnp.float32(99.9), jnp.float32(1.0), 1.0, budget=0.0, lam_max=100.0)
  assert float(lam_hi) == 100.0


def test_dual_ascent_in_method_state():
  ds, batch = _toy_batch(n=32)
  m = get_method(
    "sif_dec", {"ranker": "linear", "dual": True, "budget_D": 0.0, "dual_eta": 10.0}, num_features=20, list_size=10
  )
  params, extra = m.init(jax.random.key(0), batch)
  assert float(extra["lambda_D"]) == 0.0
  _, (metrics, extra) = jax.jit(m.loss)(params, extra, batch, jax.random.key(1))
  assert float(extra["lambda_D"]) == pytest.approx(10.0 * float(metrics["I_D"]), rel=1e-5)
  assert float(extra["ema_D"]) == pytest.approx(float(metrics["I_D"]), rel=1e-6)
