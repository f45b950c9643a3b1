r"""Intervention harvesting: ultr_jax against NumPy and scipy on the same click log.

A PBM log of several noisy logging rankers (``--queries`` x 10 documents,
``--sessions`` sessions per query, 10 positions). Times, warm (compile
excluded), best of ``--repeats``:

* the intervention sets (:func:`ultr_jax.graph.intervention_sets`: one
  ``segment_sum`` and two matrix products) against a vectorised NumPy
  version (``np.bincount`` over (item, position) cells, the same products);
* the all-pairs fit (:func:`ultr_jax.graph.all_pairs_estimate`, optax
  L-BFGS, float32) against scipy's L-BFGS-B on the same likelihood in float64;
* the pivot estimate, for scale.

Checks that the sets agree and that both fits give the same propensities,
prints each ratio (ultr_jax / reference) and the estimates' relative MAE
against the true PBM table.

  python benchmarks/harvesting.py                 # 10^5 queries x 20 sessions (2 x 10^7 records)
  python benchmarks/harvesting.py --queries=10000
"""

import argparse
import time

import jax
import numpy as np
import scipy.optimize
import scipy.special

from ultr_jax.graph import harvesting as hv

PBM = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])


def make_log(queries, sessions, rankers=3, seed=0):
  rng = np.random.default_rng(seed)
  rel = rng.beta(1.0, 3.0, size=(queries, 10)).astype(np.float32)
  items = np.arange(queries * 10, dtype=np.int32).reshape(queries, 10)
  orders = np.stack([np.argsort(-(rel + rng.standard_normal(rel.shape, np.float32)), axis=1) for _ in range(rankers)])
  pick = rng.integers(0, rankers, size=(queries, sessions))
  order = orders[pick, np.arange(queries)[:, None]]
  shown = np.take_along_axis(np.broadcast_to(items[:, None], order.shape), order, -1)
  r = np.take_along_axis(np.broadcast_to(rel[:, None], order.shape), order, -1)
  clicks = (rng.random(shown.shape, np.float32) < PBM * r).astype(np.float32)
  positions = np.broadcast_to(np.arange(10, dtype=np.int32), shown.shape)
  return shown.reshape(-1, 10), np.ascontiguousarray(positions.reshape(-1, 10)), clicks.reshape(-1, 10)


def numpy_sets(items, factors, clicks, num_items, num_factors):
  cell = (items.astype(np.int64) * num_factors + factors).ravel()
  clk = np.bincount(cell, weights=clicks.ravel(), minlength=num_items * num_factors)
  imp = np.bincount(cell, minlength=num_items * num_factors).astype(np.float64)
  clk = clk.reshape(num_items, num_factors)
  imp = imp.reshape(num_items, num_factors)
  shown = (imp > 0).astype(np.float64)
  ctr = np.divide(clk, imp, out=np.zeros_like(clk), where=imp > 0)
  return ctr.T @ shown, shown.T @ shown


def scipy_all_pairs(c, n):
  t = c.shape[0]
  off = ~np.eye(t, dtype=bool)
  n = np.where(off, n, 0.0)
  c = np.where(off, np.minimum(c, n), 0.0)
  iu = np.triu_indices(t, 1)

  def f(z):
    b = np.zeros((t, t))
    b[iu] = z[t:]
    b = b + b.T
    logp = np.minimum(-np.logaddexp(0, -z[:t])[:, None] - np.logaddexp(0, -b), -1e-12)
    ll = c * logp + (n - c) * np.log(-np.expm1(logp))
    return -np.sum(np.where(n > 0, ll, 0.0)) / n.sum()

  res = scipy.optimize.minimize(
    f, np.zeros(t + len(iu[0])), method="L-BFGS-B", options={"maxiter": 20000, "gtol": 1e-10, "ftol": 1e-15}
  )
  o = scipy.special.expit(res.x[:t])
  return o / o[0]


def best_of(fn, repeats):
  out, best = None, np.inf
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - t0)
  return best, out


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--queries", type=int, default=100_000)
  p.add_argument("--sessions", type=int, default=20)
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  items, factors, clicks = make_log(args.queries, args.sessions)
  n_items, n_records = args.queries * 10, items.size
  print(
    f"log: {args.queries} queries x {args.sessions} sessions x 10 positions = {n_records:,} "
    f"records, {n_items:,} items; backend {jax.default_backend()}"
  )
  x, t, c = jax.device_put((items, factors, clicks))

  def jax_sets():
    return jax.block_until_ready(hv.intervention_sets(x, t, c, num_items=n_items, num_factors=10))

  jax_sets()
  t_js, sets = best_of(jax_sets, args.repeats)
  t_ns, (c_np, n_np) = best_of(lambda: numpy_sets(items, factors, clicks, n_items, 10), args.repeats)
  np.testing.assert_allclose(sets.clicks, c_np, rtol=1e-4)
  np.testing.assert_allclose(sets.items, n_np, rtol=1e-6)
  print(f"intervention sets: ultr_jax {t_js * 1e3:.1f} ms, numpy {t_ns * 1e3:.1f} ms, ratio {t_js / t_ns:.2f}")

  def jax_fit():
    return jax.block_until_ready(hv.all_pairs_estimate(sets))

  jax_fit()
  t_jf, est = best_of(jax_fit, args.repeats)
  t_sf, o_scipy = best_of(lambda: scipy_all_pairs(c_np, n_np), args.repeats)
  np.testing.assert_allclose(est.propensities, o_scipy, rtol=2e-3)
  print(
    f"all-pairs fit: ultr_jax {t_jf * 1e3:.1f} ms (converged {bool(est.converged)}), "
    f"scipy L-BFGS-B {t_sf * 1e3:.1f} ms, ratio {t_jf / t_sf:.2f}"
  )

  def jax_pivot():
    return jax.block_until_ready(hv.pivot_estimate(sets))

  jax_pivot()
  t_jp, piv = best_of(jax_pivot, args.repeats)
  print(f"pivot estimate: ultr_jax {t_jp * 1e3:.2f} ms")
  truth = PBM / PBM[0]
  for name, o in (
    ("all_pairs", est.propensities),
    ("pivot", piv.propensities),
    ("ctr", hv.ctr_estimate(sets).propensities),
  ):
    print(f"  {name:9s} relative MAE vs the PBM table: {np.mean(np.abs(np.asarray(o) / truth - 1)):.4f}")
  total_j, total_n = t_js + t_jf, t_ns + t_sf
  print(
    f"sets + all-pairs fit: ultr_jax {total_j * 1e3:.1f} ms, numpy + scipy "
    f"{total_n * 1e3:.1f} ms, ratio {total_j / total_n:.2f}"
  )


if __name__ == "__main__":
  main()
