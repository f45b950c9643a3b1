"""SVMlight parsing speed: ultr_jax.data vs sklearn.datasets.load_svmlight_file, same process.

Generates an MSLR-like dense file (``--lines`` x 136 features with qid) and a
Yahoo!-like sparse file (700 features, ~30% present, trailing comments), then
times, as the median of ``--repeats`` runs:

* ``ours cold``: :func:`ultr_jax.data.read_svmlight` without cache (CSR rows),
* ``ours load``: :func:`ultr_jax.data.load_svmlight` without cache (dense ``[Q, L, F]``),
* ``ours warm``: :func:`ultr_jax.data.load_svmlight` from the ``.npz`` cache,
* ``sklearn``: ``load_svmlight_file(query_id=True)`` (CSR),

and prints the ratios sklearn / ours. Run: ``python benchmarks/svmlight_parse.py``.
"""

import argparse
import os
import statistics
import tempfile

import numpy as np

from _timing import median_seconds
from ultr_jax import data


def make_file(path, lines, num_features, density, seed, comments):
  rng = np.random.default_rng(seed)
  scale = 10.0 ** rng.integers(0, 4, size=num_features)
  qid = np.cumsum(rng.random(lines) < 0.01)
  labels = rng.choice(5, size=lines, p=[0.45, 0.3, 0.15, 0.07, 0.03])
  with open(path, "w") as f:
    for i in range(lines):
      ids = np.flatnonzero(rng.random(num_features) < density) if density < 1 else np.arange(num_features)
      x = rng.random(len(ids)) * scale[ids]
      x[ids % 5 == 0] = np.round(x[ids % 5 == 0])
      feats = " ".join(f"{j + 1}:{v:.6g}" for j, v in zip(ids, x))
      tail = f" # docid = {i}" if comments else ""
      f.write(f"{labels[i]} qid:{qid[i]} {feats}{tail}\n")


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--lines", type=int, default=50_000)
  parser.add_argument("--sparse_lines", type=int, default=20_000)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  from sklearn.datasets import load_svmlight_file

  tmp = tempfile.mkdtemp()
  cases = [("MSLR-like dense", args.lines, 136, 1.0, False), ("Yahoo-like sparse", args.sparse_lines, 700, 0.3, True)]
  print(
    f"{'file':<20} {'MB':>6} {'sklearn s':>10} {'cold s':>8} {'load s':>8} {'warm s':>8}"
    f" {'skl/cold':>9} {'skl/load':>9} {'skl/warm':>9}"
  )
  for name, lines, nf, density, comments in cases:
    path = os.path.join(tmp, name.split()[0] + ".txt")
    make_file(path, lines, nf, density, 0, comments)
    cache = os.path.join(tmp, "cache")
    mb = os.path.getsize(path) / 1e6
    # Alternate the contenders so machine noise hits both alike.
    sk, cold, load = [], [], []
    for _ in range(args.repeats):
      sk.append(median_seconds(lambda: load_svmlight_file(path, query_id=True, n_features=nf), 1))
      cold.append(median_seconds(lambda: data.read_svmlight(path, num_features=nf, cache=False), 1))
      load.append(median_seconds(lambda: data.load_svmlight(path, num_features=nf, cache=False), 1))
    data.load_svmlight(path, num_features=nf, cache_dir=cache)  # writes the cache
    warm = median_seconds(lambda: data.load_svmlight(path, num_features=nf, cache_dir=cache), args.repeats)
    sk, cold, load = map(statistics.median, (sk, cold, load))
    print(
      f"{name:<20} {mb:6.1f} {sk:10.3f} {cold:8.3f} {load:8.3f} {warm:8.3f}"
      f" {sk / cold:9.2f} {sk / load:9.2f} {sk / warm:9.2f}"
    )


if __name__ == "__main__":
  main()
