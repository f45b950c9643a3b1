"""What proving a shard's integrity costs: page CRCs verified on read, and the manifest's file CRCs on write.

``python benchmarks/shard_checksums.py [--queries 4096] [--list_size 20] [--features 136] [--repeats 7]``: a
synthetic feature set written by :func:`ultr_jax.data.write_feature_shards` (row groups of 1024 lists, snappy).
Read: one pass of :class:`ultr_jax.data.FeatureStream` (batches of 256, no reader threads) with every page's
CRC-32 verified (the readers' setting) against the same pass with verification off, run alternately, the best
and the median of ``--repeats`` each. Write: ``write_feature_shards`` with the manifest (each shard's CRC-32,
computed from the file once written) against the same writer with that CRC skipped. Ratios are side by side on
one machine; note its load.
"""

import argparse
import pathlib
import shutil
import statistics
import tempfile
import time


from ultr_jax import data
from ultr_jax.data import _shards


def alternate(fns: dict, repeats: int) -> dict:
  times = {k: [] for k in fns}
  for _ in range(repeats):
    for k, fn in fns.items():
      t = time.perf_counter()
      fn()
      times[k].append(time.perf_counter() - t)
  return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--queries", type=int, default=4096)
  parser.add_argument("--list_size", type=int, default=20)
  parser.add_argument("--features", type=int, default=136)
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args()
  ds = data.make_synthetic(
    num_train=args.queries, num_valid=1, num_test=1, list_size=args.list_size, num_features=args.features, seed=0
  ).train
  d = pathlib.Path(tempfile.mkdtemp())
  data.write_feature_shards(ds, d / "shards", row_group_size=1024)
  size = sum(p.stat().st_size for p in (d / "shards").glob("*.parquet"))

  verified = _shards.open_parquet
  pyarrow = _shards.pyarrow()

  def unverified(path, what="Parquet shard", *, memory_map=False):
    return pyarrow.parquet.ParquetFile(path, memory_map=memory_map, page_checksum_verification=False)

  def read(verify: bool):
    _shards.open_parquet = verified if verify else unverified
    try:
      for _ in data.FeatureStream(d / "shards", batch_size=256, process_count=1, num_threads=0, prefetch=0):
        pass
    finally:
      _shards.open_parquet = verified

  crc = _shards._file_crc

  def write(with_crc: bool):
    _shards._file_crc = crc if with_crc else (lambda path: 0)
    try:
      data.write_feature_shards(ds, d / "w", row_group_size=1024, overwrite=True)
    finally:
      _shards._file_crc = crc

  r = alternate({"verified": lambda: read(True), "unverified": lambda: read(False)}, args.repeats)
  w = alternate({"with crc": lambda: write(True), "without": lambda: write(False)}, args.repeats)
  print(f"{args.queries} lists x {args.list_size} x {args.features} features, {size / 1e6:.1f} MB of shards")
  for name, (best, med) in r.items():
    print(f"read pass, pages {name:10s}: best {best * 1e3:7.1f} ms, median {med * 1e3:7.1f} ms")
  print(f"read ratio verified / unverified (median): {r['verified'][1] / r['unverified'][1]:.2f}")
  for name, (best, med) in w.items():
    print(f"write, manifest {name:8s}: best {best * 1e3:7.1f} ms, median {med * 1e3:7.1f} ms")
  print(f"write ratio with / without the file CRC (median): {w['with crc'][1] / w['without'][1]:.2f}")
  shutil.rmtree(d)


if __name__ == "__main__":
  main()
