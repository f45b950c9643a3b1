r"""Speed of the whole Table 1 of "Identifiability Matters" vs a numba DLA run.

Reference: one DLA run (the authors' alternating least squares, Gauss-Seidel,
mean-of-ratios observation update) on the K=2 dataset in a numba-compiled
per-record loop (a NumPy ``bincount`` loop if numba is missing).
Ours: the whole Table 1 (No debias + 3 methods x {raw, + NI, + NM}, 10 runs
per row; DLA / Two-Tower 20k epochs, Regression-EM 100k) through
:func:`ultr_jax.studies.identifiability.table1.table1`, jitted, ``lax.scan`` over epochs,
``vmap`` over runs, float64.

  python benchmarks/identifiability_table1.py                    # full, cold
  python benchmarks/identifiability_table1.py --epoch_scale=0.1  # quicker
  # warm: run twice with JAX's persistent compilation cache
  python benchmarks/identifiability_table1.py --compilation_cache_dir=/tmp/jc

Prints both times and, last, the ratio (ours for all of Table 1) / (one
reference DLA run), both at the same epoch scale.
"""

import argparse
import os
import time

import jax
import numpy as np

from ultr_jax.data import load_ultra
from ultr_jax.graph import DESIGN_GRAPHS, generate_design_dataset
from ultr_jax.studies.identifiability import table1 as study
from ultr_jax.testing import shared_data_dir

try:
  import numba
except ImportError:  # pragma: no cover
  numba = None


def _dla_epochs_loop(docs, pos, ctr, r, o, epochs):
  n = docs.shape[0]
  for _ in range(epochs):
    num = np.zeros(r.shape[0])
    den = np.zeros(r.shape[0])
    for i in range(n):
      num[docs[i]] += ctr[i] * o[pos[i]]
      den[docs[i]] += o[pos[i]] ** 2
    for j in range(r.shape[0]):
      r[j] = min(max(num[j] / (den[j] + 1e-8), 0.0), 1.0)
    so = np.zeros(o.shape[0])
    co = np.zeros(o.shape[0])
    for i in range(n):
      x = r[docs[i]]
      so[pos[i]] += ctr[i] * x / (x * x + 1e-8)
      co[pos[i]] += 1.0
    for t in range(o.shape[0]):
      o[t] = min(max(so[t] / max(co[t], 1.0), 0.0), 1.0)
  return r, o


def _dla_epochs_numpy(docs, pos, ctr, r, o, epochs):
  nd, npos = r.shape[0], o.shape[0]
  cnt = np.bincount(pos, minlength=npos)
  for _ in range(epochs):
    ot = o[pos]
    r = np.clip(np.bincount(docs, ctr * ot, nd) / (np.bincount(docs, ot * ot, nd) + 1e-8), 0, 1)
    x = r[docs]
    o = np.clip(np.bincount(pos, ctr * x / (x * x + 1e-8), npos) / np.maximum(cnt, 1), 0, 1)
  return r, o


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--epoch_scale", type=float, default=1.0)
  p.add_argument("--runs", type=int, default=10)
  p.add_argument(
    "--compilation_cache_dir",
    default="",
    help='JAX\'s persistent compilation cache ("": off, the'
    " cold figure); a second run with the same directory"
    " gives the warm figure",
  )
  args = p.parse_args()
  if args.compilation_cache_dir:
    from ultr_jax.train import enable_compilation_cache

    enable_compilation_cache(os.path.abspath(args.compilation_cache_dir))
  root = shared_data_dir()
  if root is not None and (root / "identifiability" / "K=2").is_dir():
    ds = load_ultra(root / "identifiability" / "K=2")
  else:
    ds = generate_design_dataset(DESIGN_GRAPHS[2])
  epochs = {
    m: max(1, int(e * args.epoch_scale))
    for m, e in {"dla": 20_000, "regression_em": 100_000, "two_tower": 20_000}.items()
  }

  # Reference: one DLA run.
  rng = np.random.default_rng(0)
  docs = ds.doc_ids.ravel().astype(np.int64)
  pos = ds.extras["positions"].ravel().astype(np.int64)
  r_true = np.asarray(study.true_relevance(ds.labels.ravel().astype(float)))
  o_true = np.asarray(study.PBM_EXAMINATION)[pos]
  ctr = rng.binomial(10**6, r_true * o_true) / 1e6
  r0, o0 = rng.uniform(size=10000), rng.uniform(size=10)
  if numba is not None:
    loop = numba.njit(cache=False)(_dla_epochs_loop)
    loop(docs, pos, ctr, r0.copy(), o0.copy(), 1)  # compile
    ref_name = "numba loop"
  else:
    loop = _dla_epochs_numpy
    ref_name = "numpy bincount"
  t = time.perf_counter()
  loop(docs, pos, ctr, r0.copy(), o0.copy(), epochs["dla"])
  t_ref = time.perf_counter() - t
  print(f"reference ({ref_name}): one DLA run, {epochs['dla']} epochs: {t_ref:.2f}s")

  t = time.perf_counter()
  rows = study.table1(
    jax.random.key(0),
    ds,
    runs=args.runs,
    epochs=epochs,
    num_docs=10000,
    log=lambda msg: print(f"  {msg} at {time.perf_counter() - t:.1f}s", flush=True),
  )
  t_ours = time.perf_counter() - t
  mcc = {k: round(float(v["mcc"].mean()), 3) for k, v in rows.items() if not k.startswith("_")}
  print(f"ultr_jax: Table 1 ({len(mcc)} rows x {args.runs} runs, epochs {epochs}, compile included): {t_ours:.2f}s")
  print(f"MCC: {mcc}")
  print(f"devices: {jax.devices()}")
  print(f"ratio (all of Table 1) / (one reference DLA run): {t_ours / t_ref:.2f}")


if __name__ == "__main__":
  main()
