"""The Poisson bootstrap's weights: the counter-based hash (``evaluation.intervals._mix32``) against ``jax.random``.

Times the whole weighted sum a replicate costs, ``sum_i w_bi x_i`` for ``R`` replicates over ``B`` sessions, block
by block as ``intervals._poisson_sums`` does, with the weights made three ways: the library's hash of (session,
replicate seeds), and ``jax.random.bits`` of a per-(replicate, block) key with threefry and with rbg keys (then the
same Poisson quantile). Prints ns per weight and the ratios to the hash::

  python benchmarks/bootstrap_rng.py --sessions=100000 --replicates=256
"""

import argparse
import functools
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.evaluation import intervals


def _block(size: int, replicates: int) -> int:
  return min(-(-size // 8) * 8, max(1024, (1 << 18) // replicates))


@jax.jit
def hash_sums(stats, seeds):
  return intervals._poisson_sums(stats, seeds)


@functools.partial(jax.jit, static_argnames=("impl",))
def random_sums(stats, key_data, *, impl):
  """The same sums with weights from ``jax.random.bits`` (one key per replicate, folded with the block)."""
  keys = jax.random.wrap_key_data(key_data, impl=impl)
  size, cols = stats.shape
  block = _block(size, keys.shape[0])
  num_blocks = -(-size // block)
  x = jnp.pad(stats, ((0, num_blocks * block - size), (0, 0))).reshape(num_blocks, block, cols)
  thresholds = jnp.asarray(intervals._POISSON_THRESHOLDS, jnp.uint32)

  def body(acc, jx):
    j, xb = jx
    u = jax.vmap(lambda k: jax.random.bits(jax.random.fold_in(k, j), (block,), jnp.uint32))(keys)
    w = jnp.searchsorted(thresholds, u, side="right", method="compare_all").astype(jnp.float32)
    return acc + w @ xb, None

  starts = jnp.arange(num_blocks, dtype=jnp.uint32)
  return jax.lax.scan(body, jnp.zeros((keys.shape[0], cols), jnp.float32), (starts, x))[0]


@functools.partial(jax.jit, static_argnames=("impl", "replicates"))
def random_sums_one_key(stats, key_data, *, impl, replicates):
  """As :func:`random_sums` with one key for all replicates (``[R, block]`` bits per block, no vmap over keys)."""
  key = jax.random.wrap_key_data(key_data, impl=impl)
  size, cols = stats.shape
  r = replicates
  block = _block(size, r)
  num_blocks = -(-size // block)
  x = jnp.pad(stats, ((0, num_blocks * block - size), (0, 0))).reshape(num_blocks, block, cols)
  thresholds = jnp.asarray(intervals._POISSON_THRESHOLDS, jnp.uint32)

  def body(acc, jx):
    j, xb = jx
    u = jax.random.bits(jax.random.fold_in(key, j), (r, block), jnp.uint32)
    w = jnp.searchsorted(thresholds, u, side="right", method="compare_all").astype(jnp.float32)
    return acc + w @ xb, None

  starts = jnp.arange(num_blocks, dtype=jnp.uint32)
  return jax.lax.scan(body, jnp.zeros((r, cols), jnp.float32), (starts, x))[0]


def _median_seconds(fn, repeats: int) -> float:
  jax.block_until_ready(fn())  # compile
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t)
  return float(np.median(times))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sessions", type=int, default=100_000)
  parser.add_argument("--replicates", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args()
  n, r = args.sessions, args.replicates
  rng = np.random.default_rng(0)
  stats = jnp.asarray(np.stack([np.ones(n), rng.normal(size=n)], -1), jnp.float32)
  seeds = jax.random.bits(jax.random.key(0), (r, 2), jnp.uint32)
  rows = {"hash (_mix32)": _median_seconds(lambda: hash_sums(stats, seeds), args.repeats)}
  for impl in ("threefry2x32", "rbg"):
    data = jax.random.key_data(jax.random.split(jax.random.key(0, impl=impl), r))
    rows[f"jax.random ({impl}), a key per replicate"] = _median_seconds(
      lambda: random_sums(stats, data, impl=impl), args.repeats
    )
    one = jax.random.key_data(jax.random.key(0, impl=impl))
    rows[f"jax.random ({impl}), one key per block"] = _median_seconds(
      lambda: random_sums_one_key(stats, one, impl=impl, replicates=r), args.repeats
    )
  print(f"{jax.devices()[0].device_kind} ({platform.processor() or platform.machine()}), jax {jax.__version__}")
  print(f"{r} replicates x {n} sessions, median of {args.repeats}")
  print("| weights | seconds | ns per weight | / hash |")
  print("|---|---|---|---|")
  base = rows["hash (_mix32)"]
  for name, sec in rows.items():
    print(f"| {name} | {sec:.3f} | {1e9 * sec / (n * r):.2f} | {sec / base:.1f}x |")


if __name__ == "__main__":
  main()
