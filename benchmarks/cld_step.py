r"""CLD training-step cost relative to an IPS step, measured in one process.

Times one jitted Adam step (``B`` lists of ``L`` candidates, top ``k`` shown,
``F`` features) of

* ``ips``: the baseline listwise IPS method on the top-k records (the reference);
* ``cld`` (linear), ``cld_n`` (neural pointwise CLD), ``cld_pair`` (neural,
  all ordered pairs of each list), ``cld_pair_l`` (linear), ``heckman_rank``;

with the same neural ranker for every MLP method, and prints the ratio to
the IPS step (goal <= 1.5x for the neural CLD variants; the linear ones
have no MLP, so their ratio is a lower bound).

  python benchmarks/cld_step.py [--batch 128] [--list_size 20] [--features 136] [--reps 30]
"""

import argparse

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from _timing import time_method_step
from ultr_jax.train import get_method


def _time_step(method, batch, reps):
  return time_method_step(method, batch, reps, tx=optax.adam(1e-3))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=128)
  ap.add_argument("--list_size", type=int, default=20)
  ap.add_argument("--k", type=int, default=5)
  ap.add_argument("--features", type=int, default=136)
  ap.add_argument("--reps", type=int, default=30)
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  b, l, f = args.batch, args.list_size, args.features
  pos = np.broadcast_to(np.arange(l), (b, l))
  shown = pos < args.k
  batch = {
      "features": jnp.asarray(rng.uniform(0, 1, (b, l, f)), jnp.float32),
      "where": jnp.ones((b, l), bool),
      "shown": jnp.asarray(shown),
      "clicks": jnp.asarray(np.where(shown, rng.uniform(0, 0.5, (b, l)), 0.0), jnp.float32),
      "examination": jnp.asarray(np.where(shown, 1.0 / (pos + 1), 0.0), jnp.float32),
      "sessions": jnp.asarray(rng.integers(1, 100, b), jnp.float32),
  }
  ips_batch = {**batch, "where": batch["shown"]}
  config = ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": (256, 128, 64), "activation": "elu",
                                      "layer_norm": False, "dropout": 0.5, "loss_type": "listwise"})
  kw = dict(num_features=f, list_size=l)
  ref = _time_step(get_method("ips", config, **kw), ips_batch, args.reps)
  print(f"device: {jax.devices()[0].device_kind}; B={b} L={l} k={args.k} F={f}; MLP (256, 128, 64)")
  print(f"{'method':14s} {'ms/step':>9s} {'x IPS':>7s}")
  print(f"{'ips':14s} {1e3 * ref:9.2f} {1.0:7.2f}")
  for name in ("cld", "cld_n", "cld_pair", "cld_pair_l", "heckman_rank"):
    t = _time_step(get_method(name, config, **kw), batch, args.reps)
    print(f"{name:14s} {1e3 * t:9.2f} {t / ref:7.2f}")


if __name__ == "__main__":
  main()
