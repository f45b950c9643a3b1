"""Training-step throughput of the generic loop against the machine's matmul peak.

Runs, in one process:
  1. the machine's float32 matmul peak (a jitted 2048^3 GEMM, best of several);
  2. the jitted train step of ``ultr_jax.train.fit`` for a few methods (MLP
     ranker, 3 seeds vmapped), timed as steps/s over the real loop, with the
     step's FLOPs from XLA's cost analysis;
and prints achieved FLOP/s as a fraction of the peak, plus queries/s. With
``--displays logged,model_sample`` each method also runs with the users shown
the lists as the trained ranker orders them (``config.display``, ULTRA's online
feeds), and the column "vs logged" is its step rate over the logged display's; "vs first" is the
rate over the first method's on the same display (``--methods naive,pdgd``: batched PDGD against naive).

With ``--clicks logged`` the clicks are simulated once, stored with the lists and read by the step (a
real click log such as Baidu-ULTR's, ``fit`` without a ``click_fn``); ``--num_features 768
--feature_dtype float16`` gives the lists Baidu-ULTR's embedding width, stored in half precision.

  python benchmarks/train_step.py [--steps 300] [--batch 256] [--displays logged,model,model_sample]
  python benchmarks/train_step.py --clicks logged --num_features 768 --feature_dtype float16
"""

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from ultr_jax import data as data_lib
from ultr_jax import simulation
from ultr_jax.train import default_train_config, fit, get_method
from ultr_jax.train import loop as loop_lib


def matmul_peak(n=2048, repeats=10):
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = np.inf
  for _ in range(repeats):
    t = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * n**3 / best


def step_flops(method, tx, click_fn, batch, num_seeds):
  """FLOPs of one vmapped loss+grad+update, from XLA's cost analysis."""

  def one(params, extra, opt_state, key):
    b = {**batch, **click_fn(key, batch)}
    (loss, (aux, extra)), grads = jax.value_and_grad(method.loss, has_aux=True)(params, extra, b, key)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), extra, opt_state, loss

  keys = jax.random.split(jax.random.key(0), num_seeds)
  params, extra = jax.vmap(lambda k: method.init(k, batch))(keys)
  opt_state = jax.vmap(tx.init)(params)
  compiled = jax.jit(jax.vmap(one)).lower(params, extra, opt_state, keys).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan")))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=256)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--methods", default="naive,ips,dla,two_tower")
  parser.add_argument("--displays", default="logged", help="comma-separated config.display values")
  parser.add_argument(
    "--clicks",
    default="simulated",
    choices=("simulated", "logged"),
    help="simulated in every step, or simulated once and stored (a click log)",
  )
  parser.add_argument("--num_features", type=int, default=136)
  parser.add_argument("--feature_dtype", default="float32", help="storage dtype of the features")
  args = parser.parse_args()

  print(f"backend {jax.default_backend()}, devices {jax.device_count()}")
  peak = matmul_peak()
  print(f"matmul peak (float32 2048^3): {peak / 1e9:.1f} GFLOP/s")
  splits = data_lib.make_synthetic(
    num_train=2000, num_valid=10, num_test=10, list_size=20, num_features=args.num_features, seed=0
  )
  train = splits.train
  cfg = ml_collections.ConfigDict({"name": "pbm_table", "eta": 1.0, "eps": 0.1})
  click_fn = simulation.make_click_fn(cfg)
  fit_click_fn = click_fn
  if args.clicks == "logged":  # one draw per list, stored with it: the step reads it like a real log
    clicks = click_fn(jax.random.key(0), jax.tree.map(jnp.asarray, train.as_batch()))["clicks"]
    train = train.with_extras(clicks=np.asarray(clicks, np.float32))
    click_fn = lambda key, b: {}  # noqa: E731  (the FLOP count's step reads the stored clicks)
    fit_click_fn = None
  train = dataclasses.replace(train, features=train.features.astype(args.feature_dtype))
  print(f"lists {train.features.shape} {train.features.dtype}, clicks {args.clicks}")
  config = default_train_config()
  config.steps = args.steps
  config.batch_size = args.batch
  config.progress = False
  config.num_devices = 1
  batch = jax.tree.map(jnp.asarray, train.as_batch(np.arange(args.batch)))
  batch.pop("qid", None)
  print(
    f"{'method':<14} {'display':<13} {'steps/s':>9} {'queries/s':>11} {'GFLOP/step':>11} {'GFLOP/s':>9} "
    f"{'of peak':>8} {'vs logged':>9} {'vs first':>9}"
  )
  first_rates = {}  # display -> the first method's rate (e.g. --methods naive,pdgd: PDGD's step against naive's)
  for name in args.methods.split(","):
    method = get_method(
      name,
      ml_collections.ConfigDict({"ranker": "mlp", "hidden_sizes": (256, 128)}),
      num_features=train.num_features,
      list_size=train.list_size,
    )
    flops = step_flops(method, loop_lib.make_optimizer(config), click_fn, batch, args.seeds)
    logged_rate = None
    for display in args.displays.split(","):
      # Each fit compiles its step once; the difference of a long and a short
      # run cancels compilation and set-up, leaving the per-step cost.
      times = []
      for steps in (args.steps // 5, args.steps):
        run = config.copy_and_resolve_references()
        run.steps = run.eval_every = steps
        run.display = display
        t = time.perf_counter()
        fit(method, train, None, click_fn=fit_click_fn, config=run, seeds=range(args.seeds))
        times.append(time.perf_counter() - t)
      rate = (args.steps - args.steps // 5) / (times[1] - times[0])
      logged_rate = rate if display == "logged" else logged_rate
      achieved = flops * rate  # the logged step's FLOPs (a display adds one scoring pass and a sort)
      ratio = f"{rate / logged_rate:9.2f}" if logged_rate else f"{'n/a':>9}"
      first = first_rates.setdefault(display, rate)
      print(
        f"{name:<14} {display:<13} {rate:9.1f} {rate * args.batch * args.seeds:11.0f} {flops / 1e9:11.4f} "
        f"{achieved / 1e9:9.2f} {achieved / peak:8.2%} {ratio} {rate / first:9.2f}"
      )


if __name__ == "__main__":
  main()
