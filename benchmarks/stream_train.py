"""Training steps per second: ``fit`` on a stream of batches vs ``fit`` on the lists in memory.

``python benchmarks/stream_train.py [--steps 600] [--batch_size 256]``: a synthetic set (4096 queries x 20
documents x 136 features, logged clicks), the naive method with an MLP. The stream yields NumPy batches
(``RankingDataset.as_batch`` of the indices the in-memory path draws), which ``fit`` stacks, puts on the device
two chunks ahead (``config.prefetch``) and trains on; a second stream cycles through 50 batches made beforehand,
leaving the producer's own cost out. Compilation is taken out by timing a short and a long run
of each and dividing the extra steps by the extra time.
"""

import argparse
import time

import numpy as np

from ultr_jax import data
from ultr_jax.train import default_train_config, fit, get_method
from ultr_jax.train.loop import _batch_indices


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--steps", type=int, default=600)
  parser.add_argument("--batch_size", type=int, default=256)
  args = parser.parse_args()
  splits = data.make_synthetic(num_train=4096, num_valid=1, num_test=1, list_size=20, num_features=136, seed=0)
  train = splits.train.with_extras(clicks=(splits.train.labels >= 2).astype(np.float32))
  method = get_method("naive", {"ranker": "mlp", "hidden_sizes": [64, 32]}, num_features=136, list_size=20)

  def stream():
    step = 0
    while True:
      yield train.as_batch(_batch_indices(train.num_queries, args.batch_size, step, [0], 0)[0])
      step += 1

  cached = [train.as_batch(_batch_indices(train.num_queries, args.batch_size, s, [0], 0)[0]) for s in range(50)]

  def cached_stream():  # the producer's cost left out: 50 batches made beforehand, cycled
    step = 0
    while True:
      yield cached[step % len(cached)]
      step += 1

  def timed(source, steps):
    c = default_train_config()
    c.steps, c.batch_size, c.eval_every, c.progress, c.num_devices = steps, args.batch_size, 100, False, 1
    t = time.perf_counter()
    fit(method, source() if callable(source) else source, None, config=c)
    return time.perf_counter() - t

  rates = {}
  for label, source in (("in memory", train), ("stream", stream), ("stream (premade batches)", cached_stream)):
    short = timed(source, 100)
    long = timed(source, 100 + args.steps)
    rates[label] = args.steps / (long - short)
    print(
      f"{label:24s} {rates[label]:8.1f} steps/s (runs: {short:.2f} s for 100 steps, {long:.2f} s for {100 + args.steps})"
    )
  for label in ("stream", "stream (premade batches)"):
    print(f"{label} / in memory: {rates[label] / rates['in memory']:.2f}x")


if __name__ == "__main__":
  main()
