r"""LBD training-step throughput and the double-backprop overhead, measured in one process.

For each tower size, times one jitted optimizer step (B lists of L = 10 items, F features) of

* ``naive``: the foundation's Click Data method (MLP ranker, one output, softmax loss);
* ``unlimited``: the LBD tower (1 + n heads) without the penalty;
* ``lbd``: the LBD tower with Bernoulli decoupling and the code-form gradient penalty
  (double back-propagation through the input-gradient);
* ``lbd_grid[21]``: the study's 21-member vmapped grid (per member),

and prints steps/s and the ratio of LBD to the plain DNN step (goal <= 3x).
``--linear_grid_only`` times just the study's Linear (LayerNorm -> Dense) grid step with and
without the input LayerNorm, the share of the grid's time that the LayerNorm's per-member
backward and double backward take.

  python benchmarks/lbd_step.py [--batch 256] [--features 50] [--reps 30] [--linear_grid_only]
"""

import argparse

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from _timing import time_method_step
from ultr_jax.train import get_method
from ultr_jax.studies.lbd import grid_members
from ultr_jax.train.methods.lbd import make_lbd_grid


def _time_step(method, batch, reps):
  tx = method.optimizer or optax.chain(optax.clip_by_global_norm(5.0), optax.adagrad(0.05))
  return time_method_step(method, batch, reps, tx=tx)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--features", type=int, default=50)
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--linear_grid_only", action="store_true")
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  b, l, f = args.batch, 10, args.features
  batch = {
    "features": jnp.asarray(rng.uniform(-1, 1, (b, l, f)), jnp.float32),
    "where": jnp.ones((b, l), bool),
    "clicks": jnp.asarray(rng.random((b, l)) < 0.2, jnp.float32),
  }
  print(f"devices: {jax.devices()}  B={b} L={l} F={f}")
  members = grid_members([1.0, 100.0, 10000.0], [0.1, 0.2, 0.3, 0.4])
  if args.linear_grid_only:
    rows = {}
    for ln in (True, False):
      gcfg = ml_collections.ConfigDict(
        {"ranker": "linear", "layer_norm": ln, "lams": [m[1] for m in members], "ts": [m[2] for m in members]}
      )
      rows[ln] = _time_step(make_lbd_grid(gcfg, num_features=f, list_size=l), batch, args.reps)
    print(
      f"Linear lbd_grid[{len(members)}]: with input LayerNorm {rows[True] * 1e3:.1f} ms/step, "
      f"without {rows[False] * 1e3:.1f} ms/step; ratio {rows[True] / rows[False]:.2f}x"
    )
    return
  for hidden in ((64, 32), (512, 256, 128)):
    cfg = ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": hidden})
    rows = {}
    for name in ("naive", "unlimited", "lbd"):
      m = get_method(name, cfg, num_features=f, list_size=l)
      rows[name] = _time_step(m, batch, args.reps)
    gcfg = ml_collections.ConfigDict({**cfg.to_dict(), "lams": [m[1] for m in members], "ts": [m[2] for m in members]})
    grid = make_lbd_grid(gcfg, num_features=f, list_size=l)
    rows[f"lbd_grid[{len(members)}] per member"] = _time_step(grid, batch, max(3, args.reps // 5)) / len(members)
    print(f"\nDNN hidden {hidden}:")
    for name, t in rows.items():
      print(
        f"  {name:28s} {1.0 / t:9.1f} steps/s   {t * 1e3:8.2f} ms/step   "
        f"ratio to naive {t / rows['naive']:.2f}x   to unlimited {t / rows['unlimited']:.2f}x"
      )


if __name__ == "__main__":
  main()
