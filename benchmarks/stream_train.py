"""Training steps per second: ``fit`` on a stream of batches vs ``fit`` on the lists in memory.

``python benchmarks/stream_train.py [--steps 600] [--batch_size 256] [--repeats 3]``: a synthetic set (4096
queries x 20 documents x 136 features, logged clicks), the naive method with an MLP, one device. Sources:

* ``in memory``: ``fit`` on the :class:`~ultr_jax.data.RankingDataset` (the lists on the device, gathered per step);
* ``stream``: a generator of NumPy batches (``RankingDataset.as_batch`` of the indices the in-memory path draws),
  which ``fit`` copies into chunks of ``steps_per_call`` batches and puts on the device ``config.prefetch`` chunks
  ahead;
* ``stream (premade batches)``: 50 batches made beforehand, cycled (the producer's own cost left out);
* ``FeatureStream``: :class:`~ultr_jax.data.FeatureStream` over Parquet feature shards of the same set
  (:func:`~ultr_jax.data.write_feature_shards`, row groups of 1024 lists; shuffled), the stream a user trains on.

Rates are steady-state: ``fit`` evaluates every 100 steps (one jitted call of 100 steps), ``on_eval`` stamps each
evaluation, and the rate is the steps after the first evaluation (which includes compiling) over the time they
took (and, as a check on a shared machine, over the CPU time the process used). The sources run in turn, ``--repeats`` times, and the ratios are taken within each round (the machine's load
drifts between rounds); the medians are printed.
"""

import argparse
import pathlib
import statistics
import tempfile
import time

import numpy as np

from ultr_jax import data
from ultr_jax.train import default_train_config, fit, get_method
from ultr_jax.train.input import _batch_indices


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--steps", type=int, default=600)
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--sources", default="in memory,stream,stream (premade batches),FeatureStream")
  args = parser.parse_args()
  splits = data.make_synthetic(num_train=4096, num_valid=1, num_test=1, list_size=20, num_features=136, seed=0)
  train = splits.train.with_extras(clicks=(splits.train.labels >= 2).astype(np.float32))
  method = get_method("naive", {"ranker": "mlp", "hidden_sizes": [64, 32]}, num_features=136, list_size=20)
  B = args.batch_size

  def stream():
    step = 0
    while True:
      yield train.as_batch(_batch_indices(train.num_queries, B, step, [0], 0)[0])
      step += 1

  cached = [train.as_batch(_batch_indices(train.num_queries, B, s, [0], 0)[0]) for s in range(50)]

  def cached_stream():
    step = 0
    while True:
      yield cached[step % len(cached)]
      step += 1

  shards = pathlib.Path(tempfile.mkdtemp()) / "shards"
  if "FeatureStream" in args.sources:
    data.write_feature_shards(train, shards, row_group_size=1024)

  def feature_stream():
    return data.FeatureStream(shards, batch_size=B, shuffle=True, num_epochs=None, process_index=0, process_count=1)

  sources = {
    "in memory": lambda: train,
    "stream": stream,
    "stream (premade batches)": cached_stream,
    "FeatureStream": feature_stream,
  }
  sources = {k: sources[k] for k in args.sources.split(",")}

  def rate(source) -> tuple:
    """(steps per wall second, steps per CPU second of this process) after the first evaluation."""
    c = default_train_config()
    c.steps, c.batch_size, c.eval_every, c.progress, c.num_devices = args.steps, B, 100, False, 1
    stamps = []

    def stamp(record):
      stamps.append((record["step"], time.perf_counter(), time.process_time()))

    fit(method, source(), None, config=c, on_eval=stamp)
    (s0, w0, c0), (s1, w1, c1) = stamps[0], stamps[-1]
    return (s1 - s0) / (w1 - w0), (s1 - s0) / (c1 - c0)

  rates = {k: [] for k in sources}
  for r in range(args.repeats):
    for label, source in sources.items():
      rates[label].append(rate(source))
    print(f"round {r}: " + ", ".join(f"{k} {v[-1][0]:.1f} ({v[-1][1]:.1f})" for k, v in rates.items()), flush=True)
  print("steps/s (steps per CPU second of the process), median over the rounds; ratios within each round:")
  for label in sources:
    wall, cpu = statistics.median(x[0] for x in rates[label]), statistics.median(x[1] for x in rates[label])
    line = f"{label:26s} {wall:7.1f} steps/s ({cpu:6.1f} per CPU s)"
    if label != "in memory" and "in memory" in sources:
      ratios = [(a[0] / b[0], a[1] / b[1]) for a, b in zip(rates[label], rates["in memory"])]
      line += (
        f"  / in memory: {statistics.median(x[0] for x in ratios):.2f}x ({statistics.median(x[1] for x in ratios):.2f}x)"
        f" rounds: {', '.join(f'{x[0]:.2f}' for x in ratios)}"
      )
    print(line)


if __name__ == "__main__":
  main()
