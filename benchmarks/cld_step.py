r"""CLD training-step cost relative to an IPS step, measured in one process.

Times one jitted Adam step (``B`` lists of ``L`` candidates, top ``k`` shown,
``F`` features) of

* ``ips``: the baseline listwise IPS method on the top-k records (the reference);
* ``ips_pairwise``: the same ranker with the paper's pairwise BPR IPS loss (the
  CLD study's default for Naive/IPS), for information;
* ``cld`` (linear), ``cld_n`` (neural pointwise CLD), ``cld_pair`` (neural,
  all ordered pairs of each list), ``cld_pair_l`` (linear), ``heckman_rank``;

with the same neural ranker for every MLP method, and prints the ratio to
the IPS step (goal <= 1.5x for the neural CLD variants; the linear ones
have no MLP, so their ratio is a lower bound).

The steps are timed **interleaved** (one step of every method per round,
``--reps`` rounds), so a change in machine load hits every method alike; the
ratio column is the median over rounds of the per-round ratio to the IPS
step of the same round. The data are jit arguments, not baked-in constants.

  python benchmarks/cld_step.py [--batch 128] [--list_size 20] [--features 136] [--reps 30]
  python benchmarks/cld_step.py --batch 64 --features 16 --hidden 64,32 --dropout 0.1  # the synthetic grid
"""

import argparse
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from ultr_jax.train import get_method, shared_method_configs

METHODS = ("ips", "ips_pairwise", "cld", "cld_n", "cld_pair", "cld_pair_l", "heckman_rank")


def make_step(method, batch, tx):
  """``(step, state)``: a jitted loss + grad + Adam update and its initial ``(params, opt)``."""
  params, extra = method.init(jax.random.key(0), batch)
  opt = tx.init(params)

  @jax.jit
  def step(params, opt, batch, key):
    (loss, _), g = jax.value_and_grad(method.loss, has_aux=True)(params, extra, batch, key)
    u, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, u), opt, loss

  return step, (params, opt)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--batch", type=int, default=128)
  ap.add_argument("--list_size", type=int, default=20)
  ap.add_argument("--k", type=int, default=5)
  ap.add_argument("--features", type=int, default=136)
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--hidden", type=str, default="256,128,64", help="MLP hidden sizes (the grid uses 64,32)")
  ap.add_argument("--dropout", type=float, default=0.5)
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
  hidden = tuple(int(h) for h in args.hidden.split(","))
  config = ml_collections.ConfigDict(
    {
      "ranker": "mlp",
      "hidden_sizes": hidden,
      "activation": "elu",
      "layer_norm": False,
      "dropout": args.dropout,
      "loss_type": "listwise",
    }
  )
  kw = dict(num_features=f, list_size=l)
  tx = optax.adam(1e-3)
  steps, states, batches = {}, {}, {}
  own = shared_method_configs(sorted({m.split("_pairwise")[0] for m in METHODS}), config)
  for name in METHODS:
    batches[name] = ips_batch if name.startswith("ips") else batch
    # One section for every method, as the study's: each takes the fields it declares. ``cld`` reads ``ranker``
    # (default linear); the study runs it linear, as the paper.
    method = name.split("_pairwise")[0]
    c = own[method]
    if name == "cld":
      c.ranker = "linear"
    if name == "ips_pairwise":
      c.loss_type = "pairwise"
    steps[name], states[name] = make_step(get_method(method, c, **kw), batches[name], tx)
    p, o, loss = steps[name](*states[name], batches[name], jax.random.key(0))  # compile + warm up
    loss.block_until_ready()
    states[name] = (p, o)
  times = {name: [] for name in METHODS}
  for i in range(args.reps):
    for name in METHODS:
      t0 = time.perf_counter()
      p, o, loss = steps[name](*states[name], batches[name], jax.random.key(i))
      loss.block_until_ready()
      times[name].append(time.perf_counter() - t0)
      states[name] = (p, o)
  ref = np.asarray(times["ips"])
  print(
    f"device: {jax.devices()[0].device_kind}; B={b} L={l} k={args.k} F={f}; MLP {hidden} "
    f"dropout {args.dropout}; "
    f"{args.reps} interleaved rounds"
  )
  print(f"{'method':14s} {'ms/step':>9s} {'x IPS':>7s} {'x IPS 10-90%':>15s}")
  for name in METHODS:
    t = np.asarray(times[name])
    r = t / ref
    print(
      f"{name:14s} {1e3 * np.median(t):9.2f} {np.median(r):7.2f} {np.percentile(r, 10):7.2f}-{np.percentile(r, 90):.2f}"
    )


if __name__ == "__main__":
  main()
