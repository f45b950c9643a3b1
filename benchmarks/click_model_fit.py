r"""Click-model likelihoods and fitting: ultr_jax against NumPy and scipy on the same session log.

A log of ``--sessions`` sessions over ``--queries`` x 10 documents (a noisy
logging ranker, 10 positions). Times, warm (compile excluded), best of
``--repeats``:

* the DBN session log-likelihood (:meth:`ultr_jax.simulation.ChainModel.log_likelihood`,
  one ``lax.scan`` over ranks in log space) against a NumPy filter
  vectorised over sessions (a Python loop over the 10 ranks);
* a PBM fit (:func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.LBFGS()``, L-BFGS on the sessions in
  memory, float32, ``l2 = 0``) against scipy's L-BFGS-B on the same likelihood with its analytic gradient in NumPy
  (float64, ``np.bincount`` per parameter);
* a DBN fit, for scale (no NumPy/scipy peer: its gradient has no short
  closed form).

Checks that the likelihoods agree and that both PBM fits reach the same
log-likelihood, and prints each ratio (ultr_jax / reference).

  python benchmarks/click_model_fit.py                      # 10^6 sessions
  python benchmarks/click_model_fit.py --sessions=100000
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from ultr_jax import simulation as sim


def best_of(fn, repeats):
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t0)
  return min(times), out


def numpy_chain_ll(clicks, a, c0, c1):
  """The chain filter of ``ChainModel.log_likelihood`` in NumPy: vectorised over sessions, a loop over ranks."""
  e = np.ones(clicks.shape[0])
  ll = np.zeros(clicks.shape[0])
  for i in range(clicks.shape[1]):
    q = e * a[:, i]
    c = clicks[:, i] > 0.5
    ll += np.where(c, np.log(q), np.log1p(-q))
    e = np.where(c, c1[:, i], c0[:, i] * e * (1 - a[:, i]) / (1 - q))
  return ll


def scipy_pbm_fit(ids, clicks, num_docs):
  """Maximum likelihood of the PBM by L-BFGS-B on the logits, analytic gradient (float64)."""
  length = clicks.shape[1]
  ranks = np.broadcast_to(np.arange(length), ids.shape).ravel()
  ids_flat, c = ids.ravel(), clicks.ravel().astype(np.float64)
  n = clicks.shape[0]

  def objective(theta):
    a = 1 / (1 + np.exp(-theta[:num_docs]))
    o = 1 / (1 + np.exp(-theta[num_docs:]))
    p = a[ids_flat] * o[ranks]
    ll = np.where(c > 0, np.log(p), np.log1p(-p)).sum()
    r = (c - p) / (1 - p)  # d ll / d log p, times (1 - a) or (1 - o) below
    g_a = np.bincount(ids_flat, r, minlength=num_docs) * (1 - a)
    g_o = np.bincount(ranks, r, minlength=length) * (1 - o)
    return -ll / n, -np.concatenate([g_a, g_o]) / n

  res = scipy.optimize.minimize(
    objective, np.zeros(num_docs + length), jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-5}
  )
  return -res.fun, res.nit


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--sessions", type=int, default=1_000_000)
  parser.add_argument("--queries", type=int, default=1000)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  print(f"devices: {jax.devices()}")
  rng = np.random.default_rng(0)
  attraction = rng.beta(1.0, 3.0, size=(args.queries, 10)).astype(np.float32)
  num_docs = attraction.size
  dbn_log = sim.simulate_session_log(
    jax.random.key(0), "dbn", attraction, num_sessions=args.sessions, perseverance=0.9, satisfaction=0.5
  )
  ids, clicks = np.asarray(dbn_log["doc_ids"]), np.asarray(dbn_log["clicks"])
  print(
    f"log: {args.sessions} sessions x 10 ranks, {num_docs} documents, {clicks.sum(1).mean():.2f} clicks per session"
  )

  # 1. The DBN likelihood of the log at the true parameters.
  a = attraction.reshape(-1)[ids]
  c0, c1 = (np.asarray(x) for x in sim.get_click_model("dbn").continuations(a, perseverance=0.9, satisfaction=0.5))
  ll_fn = jax.jit(lambda c, a, c0, c1: sim.ChainModel.log_likelihood(c, a, continue_no_click=c0, continue_click=c1))
  args_j = tuple(jnp.asarray(x) for x in (clicks, a, c0, c1))
  ll_fn(*args_j).block_until_ready()
  t_jax, ll_jax = best_of(lambda: ll_fn(*args_j), args.repeats)
  t_np, ll_np = best_of(
    lambda: numpy_chain_ll(
      clicks.astype(np.float64), a.astype(np.float64), c0.astype(np.float64), c1.astype(np.float64)
    ),
    args.repeats,
  )
  err = float(np.max(np.abs(np.asarray(ll_jax, np.float64) - ll_np)))
  print(
    f"DBN log-likelihood: ultr_jax {t_jax * 1e3:.1f} ms ({args.sessions / t_jax / 1e6:.1f}M sessions/s), "
    f"NumPy {t_np * 1e3:.1f} ms; ratio {t_jax / t_np:.2f}x; max |diff| {err:.1e}"
  )

  # 2. PBM fit: ultr_jax L-BFGS (float32) vs scipy L-BFGS-B (float64, analytic gradient).
  pbm_log = sim.simulate_session_log(jax.random.key(1), "pbm", attraction, num_sessions=args.sessions)
  p_ids, p_clicks = np.asarray(pbm_log["doc_ids"]), np.asarray(pbm_log["clicks"])
  pbm_data, lbfgs = {"doc_ids": p_ids, "clicks": p_clicks}, sim.LBFGS(max_iters=500, tol=1e-5)
  fit = sim.fit_click_model("pbm", pbm_data, solver=lbfgs, num_docs=num_docs, l2=0.0)
  t_fit, fit = best_of(
    lambda: sim.fit_click_model("pbm", pbm_data, solver=lbfgs, num_docs=num_docs, l2=0.0),
    args.repeats,
  )
  t_sp, (ll_sp, nit) = best_of(lambda: scipy_pbm_fit(p_ids, p_clicks, num_docs), 1)
  print(
    f"PBM fit: ultr_jax {t_fit:.2f} s ({fit.iterations} iterations, LL {fit.log_likelihood:.5f}), "
    f"scipy {t_sp:.2f} s ({nit} iterations, LL {ll_sp:.5f}); ratio {t_fit / t_sp:.2f}x; "
    f"LL diff {fit.log_likelihood - ll_sp:+.1e}"
  )

  # 3. DBN fit, for scale.
  dbn_data, lbfgs = {"doc_ids": ids, "clicks": clicks}, sim.LBFGS(max_iters=500)
  sim.fit_click_model("dbn", dbn_data, solver=lbfgs, num_docs=num_docs)
  t_dbn, fit = best_of(lambda: sim.fit_click_model("dbn", dbn_data, solver=lbfgs, num_docs=num_docs), args.repeats)
  print(
    f"DBN fit: ultr_jax {t_dbn:.2f} s ({fit.iterations} iterations, converged {fit.converged}, "
    f"{args.sessions * fit.iterations / t_dbn / 1e6:.1f}M session-iterations/s)"
  )


if __name__ == "__main__":
  main()
