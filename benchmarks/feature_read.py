"""Reading feature shards: the Parquet layout of the features, and FeatureStream's lists per second.

``python benchmarks/feature_read.py [--queries 4096] [--list_size 20] [--features 136] [--repeats 7]``: a synthetic
set written as one Parquet row group of 1024 lists in two layouts of the features, each document's ``F`` float32
values as a nested ``list<fixed_size_list<float32>>`` (the usual Arrow form) or as one ``fixed_size_binary(4 F)``
value (what :func:`ultr_jax.data.write_feature_shards` writes), both snappy-compressed; the time to read the row
group and have the ``[D, F]`` NumPy array (the best and the median of ``--repeats``). Then
:class:`ultr_jax.data.FeatureStream` over the shards (batches of 256, shuffled, no reader threads): the time per
batch, with the host's CPU time per batch beside it.
"""

import argparse
import pathlib
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ultr_jax import data


def timed(fn, repeats):
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return min(times), statistics.median(times)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--queries", type=int, default=4096)
  parser.add_argument("--list_size", type=int, default=20)
  parser.add_argument("--features", type=int, default=136)
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args()
  F = args.features
  splits = data.make_synthetic(
    num_train=args.queries, num_valid=1, num_test=1, list_size=args.list_size, num_features=F, seed=0
  )
  train = splits.train.with_extras(clicks=(splits.train.labels >= 2).astype(np.float32))
  d = pathlib.Path(tempfile.mkdtemp())

  rows = train.where[:1024]
  values = train.features[:1024][rows]
  offsets = pa.array(np.concatenate(([0], np.cumsum(rows.sum(1)))).astype(np.int32))
  nested = pa.ListArray.from_arrays(offsets, pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), F))
  binary = pa.ListArray.from_arrays(
    offsets, pa.FixedSizeBinaryArray.from_buffers(pa.binary(4 * F), len(values), [None, pa.py_buffer(values)])
  )
  layouts = {
    "list<fixed_size_list<float32>>": (nested, lambda c: c.flatten().flatten().to_numpy().reshape(-1, F)),
    "list<fixed_size_binary(4F)>": (
      binary,
      lambda c: np.frombuffer(c.flatten().buffers()[1], "<f4", count=len(values) * F).reshape(-1, F),
    ),
  }
  print(f"one row group of 1024 lists, {len(values)} documents x {F} features ({values.nbytes / 2**20:.1f} MB):")
  for name, (column, to_numpy) in layouts.items():
    path = d / f"{name[:8]}.parquet"
    pq.write_table(pa.table({"features": column}), path)

    def read(path=path, to_numpy=to_numpy):
      c = pq.ParquetFile(path, memory_map=True).read_row_group(0).column("features").chunk(0)
      out = to_numpy(c)
      assert out.shape == values.shape

    best, median = timed(read, args.repeats)
    print(f"  {name:32s} {best * 1e3:6.2f} ms best, {median * 1e3:6.2f} ms median")

  data.write_feature_shards(train, d / "shards", row_group_size=1024)
  stream = data.FeatureStream(
    d / "shards", batch_size=256, shuffle=True, num_epochs=4, process_index=0, process_count=1, num_threads=0
  )
  list(stream)  # warm the page cache
  t, c = time.perf_counter(), time.process_time()
  n = sum(1 for _ in stream)
  wall, cpu = (time.perf_counter() - t) / n, (time.process_time() - c) / n
  print(f"FeatureStream, batches of 256 lists (shuffled): {wall * 1e3:.2f} ms per batch ({cpu * 1e3:.2f} ms CPU)")


if __name__ == "__main__":
  main()
