r"""The minibatch click-model fit over a device mesh against one device, side by side in one process.

:func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Minibatch(...)`` on a long-tail log
(:func:`ultr_jax.simulation.simulate_long_tail_log`: ``--sessions`` sessions over ``sessions / 10`` Zipf(1.1)
queries of 20 candidates, 10 ranks, clicks from each model itself), held in memory and cut into batches of
``--batch`` sessions, one epoch of Adam (0.05, ``eps`` 1e-3) with row-wise steps: once without a mesh (``none``),
then on a mesh of each of ``--devices`` devices (the batches split by sessions, the per-document tables by rows).
Each fit's wall time includes its compilation (as a user sees it); ``max_abs_diff`` is the largest difference of
any logit from the fit without a mesh, ``ll_diff`` of the mean log-likelihood.

On a CPU the devices are XLA's fake host devices (``--xla_force_host_platform_device_count``, set here to the
largest of ``--devices`` unless ``XLA_FLAGS`` sets it): they share the same cores, so they measure the mesh path's
overhead, not a speedup. On an accelerator, sizes above the device count are skipped.

  python benchmarks/minibatch_mesh.py --sessions=1000000 --devices=1,8 --models=pbm,dbn
"""

import argparse
import json
import os
import platform
import time

_p = argparse.ArgumentParser()
_p.add_argument("--sessions", type=int, default=100_000)
_p.add_argument("--batch", type=int, default=4096)
_p.add_argument("--devices", default="1,8", help="mesh sizes, comma-separated")
_p.add_argument("--models", default="pbm,ubm,dbn")
_p.add_argument("--seed", type=int, default=0)
ARGS = _p.parse_args()
SIZES = [int(n) for n in ARGS.devices.split(",") if n]
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):  # before jax starts
  flag = f"--xla_force_host_platform_device_count={max(SIZES + [1])}"
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from ultr_jax import simulation as sim  # noqa: E402
from ultr_jax.train.sharding import make_mesh  # noqa: E402


def log_batches(model: str) -> list:
  """The long-tail log of ``model`` in batches of ``--batch`` sessions (the last one shorter)."""
  parts = sim.simulate_long_tail_log(
    jax.random.key(ARGS.seed),
    model,
    num_sessions=ARGS.sessions,
    num_queries=max(ARGS.sessions // 10, 100),
    num_candidates=20,
    list_size=10,
    batch_size=200_000,
  )
  parts = [(np.asarray(p["doc_ids"]), np.asarray(p["clicks"])) for p in parts]
  ids, clicks = (np.concatenate(x) for x in zip(*parts))
  b = ARGS.batch
  return [{"doc_ids": ids[i : i + b], "clicks": clicks[i : i + b]} for i in range(0, len(ids), b)]


def timed_fit(model: str, batches: list, num_docs: int, mesh) -> tuple:
  t0 = time.perf_counter()
  solver = sim.Minibatch(optimizer=optax.adam(0.05, eps=1e-3), sparse=True, mesh=mesh)
  fit = sim.fit_click_model(model, batches, solver=solver, num_docs=num_docs)
  jax.block_until_ready(fit.logits)
  return time.perf_counter() - t0, fit


def compare(model: str) -> list:
  batches = log_batches(model)
  num_docs = max(ARGS.sessions // 10, 100) * 20
  base_s, base = timed_fit(model, batches, num_docs, None)
  rows = [{"model": model, "mesh": "none", "fit_s": round(base_s, 2), "sessions_per_s": round(ARGS.sessions / base_s)}]
  for n in SIZES:
    if n > jax.device_count():
      rows.append({"model": model, "mesh": n, "skipped": f"only {jax.device_count()} devices"})
      continue
    seconds, fit = timed_fit(model, batches, num_docs, make_mesh(n))
    diff = max(float(np.max(np.abs(np.asarray(fit.logits[k]) - np.asarray(base.logits[k])))) for k in base.logits)
    rows.append(
      {
        "model": model,
        "mesh": n,
        "fit_s": round(seconds, 2),
        "sessions_per_s": round(ARGS.sessions / seconds),
        "over_none": round(seconds / base_s, 2),
        "max_abs_diff": diff,
        "ll_diff": abs(fit.log_likelihood - base.log_likelihood),
      }
    )
  return rows


def main():
  head = {
    "backend": jax.default_backend(),
    "device": jax.devices()[0].device_kind,
    "device_count": jax.device_count(),
    "host": platform.node(),
    "cpus": os.cpu_count(),
    "sessions": ARGS.sessions,
    "batch": ARGS.batch,
    "load_before": os.getloadavg(),
  }
  print(json.dumps(head), flush=True)
  for model in ARGS.models.split(","):
    for row in compare(model):
      print(json.dumps(row), flush=True)
  print(json.dumps({"load_after": os.getloadavg()}), flush=True)


if __name__ == "__main__":
  main()
