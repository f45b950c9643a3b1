"""Cost of one SIF training step relative to a plain IPS step, in the same process.

Both steps are jitted value-and-grad + Adagrad updates of the same MLP ranker on
the same toy batch with position+trust clicks (3 seeds vmapped, as in the
loop); SIF adds the bias tower, its likelihood, the projection and both
leakage estimators (``sif_full``; ``sif_dr`` adds the imputer). Goal: SIF <=
1.5x IPS. The methods' steps are timed round-robin (one step each per
round), so that load from other processes on a shared machine hits every
method alike; both the minimum and the median are reported.

  python benchmarks/sif_step.py [--batch 256] [--repeats 200]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ultr_jax.simulation import make_position_trust_click_fn, sif_toy_dataset
from ultr_jax.train import get_method


def make_step(method, tx, click_fn, batch, seeds):
  def init(seed):
    params, extra = method.init(jax.random.key(seed), batch)
    return params, extra, tx.init(params)

  state = jax.vmap(init)(jnp.arange(seeds))

  def one(params, extra, opt, key):
    b = {**batch, **click_fn(key, batch)}
    (loss, (aux, extra)), g = jax.value_and_grad(method.loss, has_aux=True)(params, extra, b, key)
    upd, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, upd), extra, opt, loss

  @jax.jit
  def step(state, key):
    params, extra, opt = state
    keys = jax.random.split(key, seeds)
    params, extra, opt, loss = jax.vmap(one)(params, extra, opt, keys)
    return (params, extra, opt), loss

  return step, state


def time_steps(steps, repeats):
  """Per-method step times, interleaved round-robin so that a shared machine's load drifts equally."""
  key = jax.random.key(0)
  states, times = {}, {name: [] for name in steps}
  for name, (step, state) in steps.items():
    state, loss = step(state, key)  # compile + warm-up
    loss.block_until_ready()
    states[name] = state
  for r in range(repeats):
    for name, (step, _) in steps.items():
      t = time.perf_counter()
      states[name], loss = step(states[name], jax.random.fold_in(key, r))
      loss.block_until_ready()
      times[name].append(time.perf_counter() - t)
  return {name: np.asarray(v) for name, v in times.items()}


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--repeats", type=int, default=200)
  ap.add_argument("--seeds", type=int, default=3)
  args = ap.parse_args()
  ds, _ = sif_toy_dataset(args.batch, seed=0)
  batch = jax.tree.map(jnp.asarray, {k: v for k, v in ds.as_batch().items() if k != "qid"})
  click_fn = make_position_trust_click_fn({"alpha": 0.6})
  cfg = {"ranker": "mlp", "hidden_sizes": (64, 32), "layer_norm": False}
  tx = optax.adagrad(0.05)
  steps = {}
  for name in ("ips", "dla", "sif_lambda0", "sif_exp", "sif_dec", "sif_full", "sif_dr"):
    m = get_method(name, cfg, num_features=ds.num_features, list_size=ds.list_size)
    steps[name] = make_step(m, tx, click_fn, batch, args.seeds)
  times = time_steps(steps, args.repeats)
  print(
    f"batch {args.batch} queries x 10 docs, {args.seeds} seeds vmapped, {args.repeats} interleaved "
    f"repeats; min and median ms/step, ratios to ips"
  )
  lo, med = {n: t.min() for n, t in times.items()}, {n: np.median(t) for n, t in times.items()}
  for name in times:
    print(
      f"{name:12s} min {lo[name] * 1e3:7.3f} ({lo[name] / lo['ips']:.2f}x)   "
      f"median {med[name] * 1e3:7.3f} ({med[name] / med['ips']:.2f}x)"
    )


if __name__ == "__main__":
  main()
