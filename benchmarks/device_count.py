"""Counting item codes: the host (NumPy ``np.unique``) against the JAX default device (sort + ``segment_sum``).

:func:`ultr_jax.simulation.click_models.statistics.count_codes` counts one batch of (document, rank, click) codes;
it runs on the device when the backend is a GPU or TPU and on the host otherwise. This prints both paths' time per
batch (compile excluded, best of ``--repeats``), their ratio, the backend and the device, and checks that the
counts agree, for batches of ``--items`` shown items over ``--docs`` documents and 10 ranks (UBM codes: 110 rank
and last-click keys per document, so codes pass int32 from 10^7 documents on).

  python benchmarks/device_count.py --items 2000000 --docs 10000000
"""

import argparse
import json
import os
import time

import jax
import numpy as np

from ultr_jax.simulation.click_models.statistics import count_codes


def best(fn, repeats):
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--items", type=int, default=2_000_000)
  p.add_argument("--docs", type=int, default=10_000_000)
  p.add_argument("--repeats", type=int, default=5)
  args = p.parse_args()
  rng = np.random.default_rng(0)
  docs = (rng.zipf(1.1, args.items) % args.docs).astype(np.int64)
  code = (docs * 110 + rng.integers(0, 110, args.items)) * 2 + rng.integers(0, 2, args.items)
  host = count_codes(code, device=False)
  device = count_codes(code, device=True)  # compiles
  same = all(np.array_equal(a, b) for a, b in zip(host, device))
  t_host = best(lambda: count_codes(code, device=False), args.repeats)
  t_device = best(lambda: count_codes(code, device=True), args.repeats)
  print(
    json.dumps(
      {
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind),
        "items": args.items,
        "distinct": int(host[0].shape[0]),
        "max_code": int(code.max()),
        "host_s": t_host,
        "device_s": t_device,
        "host_over_device": t_host / t_device,
        "counts_equal": same,
        "load": os.getloadavg(),
      }
    )
  )


if __name__ == "__main__":
  main()
