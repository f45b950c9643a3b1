"""Cost of each baseline ULTR loss relative to a plain ``rax.softmax_loss``.

Times the jitted ``value_and_grad`` (w.r.t. the scores, and the observation
logits where the loss trains them) of every loss in ``ultr_jax.losses`` on
``--queries`` lists of ``--list-size`` items, against ``rax.softmax_loss`` on
the same arrays in the same process (median of ``--repeats`` timed calls of
``--inner`` steps each, compile excluded). A ratio of 1 means the ULTR
machinery (weights, posteriors, pair masks, masking) costs nothing over the
listwise loss itself.

  python benchmarks/baseline_losses.py                  # 4096 x 10
  python benchmarks/baseline_losses.py --list-size 50   # longer lists (PairD is O(L^2))
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import rax

from ultr_jax import losses


def _losses():
  return {
    "naive_sigmoid": lambda s, o, c, p, w: losses.naive_sigmoid_loss(s, c, where=w),
    "naive_softmax": lambda s, o, c, p, w: losses.naive_softmax_loss(s, c, where=w),
    "ips_sigmoid": lambda s, o, c, p, w: losses.ips_sigmoid_loss(s, c, propensities=p, where=w),
    "ips_softmax": lambda s, o, c, p, w: losses.ips_softmax_loss(s, c, propensities=p, where=w),
    "snips_softmax": lambda s, o, c, p, w: losses.snips_softmax_loss(s, c, propensities=p, where=w),
    # Trust bias: eps+ = 1 - p / 10, eps- = p / 2 (any per-item arrays; the cost is the affine targets).
    "affine_softmax": lambda s, o, c, p, w: losses.affine_softmax_loss(
      s, c, propensities=p, eps_plus=1.0 - 0.1 * p, eps_minus=0.5 * p, where=w
    ),
    "affine_sigmoid": lambda s, o, c, p, w: losses.affine_sigmoid_loss(
      s, c, propensities=p, eps_plus=1.0 - 0.1 * p, eps_minus=0.5 * p, where=w
    ),
    "dla": lambda s, o, c, p, w: losses.dla_loss(s, c, observation_logits=o, where=w),
    "regression_em": lambda s, o, c, p, w: losses.regression_em_loss(s, c, propensities=p, where=w),
    "two_tower_product": lambda s, o, c, p, w: losses.two_tower_loss(
      s, c, observation_logits=o, where=w, mode="product"
    ),
    "paird": lambda s, o, c, p, w: losses.pairwise_debiasing_loss(s, c, t_plus=p, t_minus=p, where=w),
    # The pairwise click losses next to rax's pairwise logistic loss, the same value on 0/1 clicks.
    "rax.pairwise_logistic (1/p weights)": lambda s, o, c, p, w: rax.pairwise_logistic_loss(
      s, c, where=w, weights=1.0 / p
    ),
    "naive_pairwise": lambda s, o, c, p, w: losses.naive_pairwise_loss(s, c, where=w),
    "ips_pairwise": lambda s, o, c, p, w: losses.ips_pairwise_loss(s, c, propensities=p, where=w),
    # LambdaRank on clicks next to rax's (the same pairs and DCG lambdaweights, up to rax's list-size factor).
    "rax.pairwise_logistic + dcg_lambdaweight": lambda s, o, c, p, w: rax.pairwise_logistic_loss(
      s, c, where=w, lambdaweight_fn=rax.dcg_lambdaweight
    ),
    "naive_lambdarank": lambda s, o, c, p, w: losses.naive_pairwise_loss(
      s, c, where=w, lambdaweight_fn=losses.lambdarank_weights
    ),
    "ips_lambdarank": lambda s, o, c, p, w: losses.ips_pairwise_loss(
      s, c, propensities=p, where=w, lambdaweight_fn=losses.lambdarank_weights
    ),
  }


def _time(step, args, repeats, inner):
  jax.block_until_ready(step(*args))
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    for _ in range(inner):
      out = step(*args)
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t) / inner)
  return statistics.median(times)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--queries", type=int, default=4096)
  parser.add_argument("--list-size", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--inner", type=int, default=20)
  args = parser.parse_args()
  k = jax.random.split(jax.random.key(0), 4)
  shape = (args.queries, args.list_size)
  s, o = jax.random.normal(k[0], shape), jax.random.normal(k[1], shape)
  c = jax.random.bernoulli(k[2], 0.3, shape).astype(jnp.float32)
  p = jnp.broadcast_to(1.0 / (jnp.arange(args.list_size) + 1.0), shape)
  w = jnp.arange(args.list_size) < jax.random.randint(k[3], (args.queries, 1), 2, args.list_size + 1)
  data = (s, o, c, p, w)

  ref_step = jax.jit(jax.value_and_grad(lambda s, o, c, p, w: rax.softmax_loss(s, c, where=w), argnums=(0, 1)))
  ref = _time(ref_step, data, args.repeats, args.inner)
  print(f"{args.queries} lists x {args.list_size} items; reference rax.softmax_loss value+grad: {ref * 1e6:.1f} us")
  print("| loss | us / step | ratio to rax.softmax_loss |")
  print("|---|---|---|")
  for name, fn in _losses().items():
    step = jax.jit(jax.value_and_grad(fn, argnums=(0, 1)))
    t = _time(step, data, args.repeats, args.inner)
    print(f"| {name} | {t * 1e6:.1f} | {t / ref:.2f} |")


if __name__ == "__main__":
  main()
