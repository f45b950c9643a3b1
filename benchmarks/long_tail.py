r"""Item click models (PBM, UBM) on a long-tail log, against CLAX; phases, peak memory, processes.

The log is :func:`ultr_jax.simulation.simulate_long_tail_log`'s: ``--sessions`` training sessions over ``--queries``
Zipf(1.1) queries (default ``sessions / 10``) of ``--candidates`` candidates each, ranked by a noisy logger, 10 ranks
shown, clicks from ``--generator`` (UBM by default), written batch by batch as Parquet session shards (never the
whole log in memory), plus validation and test splits of ``--heldout_fraction`` of that (other sessions of the same
documents: the same key, later batches).

* **ultr_jax** (one subprocess per model, its peak RSS its own): a :class:`ultr_jax.data.SessionStream` over the
  shards, timed per phase: ``read`` (one pass over the stream, nothing else), ``aggregate``
  (:func:`ultr_jax.simulation.gather_click_statistics` within ``--memory_budget_mb``: spilled to disk partitioned by
  document past it), ``fit`` (:func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Statistics(...)`` on
  them; on spilled statistics the partition-by-partition fit). With ``--processes=2`` the same as two processes on
  127.0.0.1 (``jax.distributed``, gloo), each reading its own row groups.
* **CLAX** (``--clax``; its venv, ``benchmarks/clax_venv.sh``): ``benchmarks/_clax_side.py`` on the same
  sessions as an ``.npz`` (written only with ``--clax``), CLAX's settings (AdamW 0.01, batches of 4096, early
  stopping on the validation split).

Both sides' held-out conditional perplexity on the test split by the same formula
(:func:`ultr_jax.simulation.click_prediction_scores`), and ``truth``, the generating model's own.

  python benchmarks/long_tail.py --sessions=1000000 --clax --workdir=/tmp/lt_1e6
  python benchmarks/long_tail.py --sessions=10000000 --memory_budget_mb=512 --processes=2 --workdir=/tmp/lt_1e7
"""

import argparse
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
_BATCH = 200_000
#: The prior precisions ``--select_prior`` chooses among on the validation split (about a factor 2 apart).
PRIOR_GRID = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def _log_args(args):
  return dict(
    num_queries=args.queries or max(args.sessions // 10, 100),
    num_candidates=args.candidates,
    list_size=10,
    batch_size=_BATCH,
  )


def generate(args):
  import jax  # noqa: PLC0415

  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax import simulation as sim  # noqa: PLC0415

  heldout = max(1, int(args.sessions * args.heldout_fraction))
  t0 = time.perf_counter()
  # One key (the same documents' parameters in every split); each split its own batches, numbered past the last.
  first = {"train": 0, "val": -(-args.sessions // _BATCH)}
  first["test"] = first["val"] + -(-heldout // _BATCH)
  for split, n in (("train", args.sessions), ("val", heldout), ("test", heldout)):
    batches = sim.simulate_long_tail_log(
      jax.random.key(args.seed), args.generator, num_sessions=n, first_batch=first[split], **_log_args(args)
    )
    if split == "train" and not args.clax:
      data.write_session_shards(batches, os.path.join(args.workdir, split), row_group_size=8192)
      continue
    parts = [{k: b[k] for k in ("doc_ids", "clicks", "conditional_click_prob")} for b in batches]
    arrays = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    data.write_session_shards(iter([arrays]), os.path.join(args.workdir, split), row_group_size=8192)
    np.savez(os.path.join(args.workdir, f"{split}.npz"), **arrays)
  return {"generate_s": time.perf_counter() - t0}


def _clax_log(args):
  """The ``.npz`` ``_clax_side.py`` reads (train/val/test ``query_doc_ids``, ``clicks``, ``num_docs``)."""
  path = os.path.join(args.workdir, "clax_log.npz")
  if not os.path.exists(path):
    out = {"num_docs": np.int64(_log_args(args)["num_queries"] * args.candidates)}
    for split in ("train", "val", "test"):
      z = np.load(os.path.join(args.workdir, f"{split}.npz"))
      out[f"{split}_query_doc_ids"], out[f"{split}_clicks"] = z["doc_ids"], z["clicks"]
    np.savez(path, **out)
  return path


def _perplexity(conditional, clicks):
  from ultr_jax import simulation as sim  # noqa: PLC0415

  cond = np.clip(np.asarray(conditional, np.float64), 1e-7, 1 - 1e-7).astype(np.float32)
  return float(sim.click_prediction_scores(cond, cond, clicks)["perplexity"])


def fit_ultr_jax(args, model, process_id=0, port=0):
  """One model's phases in this process (of ``--processes``); prints a JSON line."""
  if args.processes > 1:
    from ultr_jax import _processes  # noqa: PLC0415

    _processes.initialize_processes(process_id, args.processes, f"127.0.0.1:{port}")
  import jax  # noqa: PLC0415

  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax import simulation as sim  # noqa: PLC0415

  stream = lambda: data.SessionStream(os.path.join(args.workdir, "train"), batch_size=args.batch_size)  # noqa: E731
  num_docs = int(stream().num_docs)
  t0 = time.perf_counter()
  sessions = sum(int(np.count_nonzero(b["valid"])) for b in stream())
  read_s = time.perf_counter() - t0
  if args.defaults:
    return _fit_default(args, model, stream, num_docs, sessions, read_s)
  if model in args.minibatch_models:
    return _fit_minibatch(args, model, num_docs, sessions, read_s)
  budget = int(args.memory_budget_mb * 2**20)
  spill = os.path.join(args.workdir, f"spill_{model}_{args.processes}") if args.processes > 1 else None
  t0 = time.perf_counter()
  stats = sim.gather_click_statistics(
    model, stream(), memory_budget_bytes=budget, spill_dir=spill, across_processes=args.processes > 1
  )
  aggregate_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  if args.select_prior:  # the prior's precision picked on the validation split (what CLAX's early stopping does)
    val = lambda: data.SessionStream(os.path.join(args.workdir, "val"), batch_size=args.batch_size)  # noqa: E731
    fit = sim.fit_click_model(
      model, stats, solver=sim.Statistics(budget=budget), num_docs=num_docs, l2=PRIOR_GRID, validation=val
    )
  else:
    fit = sim.fit_click_model(
      model,
      stats,
      solver=sim.Statistics(budget=budget, max_iters=args.max_iters, across_processes=args.processes > 1),
      num_docs=num_docs,
      l2=args.l2,
    )
  jax.block_until_ready(fit.params)
  fit_s = time.perf_counter() - t0
  peak_fit_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  ppl = _test_perplexity(args, model, fit.params)
  spilled = isinstance(stats, sim.PartitionedStatistics)
  print(
    json.dumps(
      {
        "side": "ultr_jax",
        "model": model,
        "process": jax.process_index(),
        "processes": jax.process_count(),
        "sessions_read": sessions,
        "read_s": read_s,
        "aggregate_s": aggregate_s,
        "fit_s": fit_s,
        "spilled": spilled,
        "records": stats.num_run_records if spilled else stats.num_records,
        "fit_passes_or_iters": fit.iterations,
        "converged": fit.converged,
        "perplexity": ppl,
        "peak_rss_mb": peak_fit_mb,
      }
    ),
    flush=True,
  )


def _test_perplexity(args, model, params):
  """The test split's conditional perplexity, predicted in chunks (the fit's peak memory is taken before)."""
  from ultr_jax import simulation as sim  # noqa: PLC0415

  path = os.path.join(args.workdir, "test.npz")
  if not os.path.exists(path):
    return None
  z, step = np.load(path), 65536
  ids, clicks = z["doc_ids"], z["clicks"]
  cond = [
    np.asarray(sim.click_model_predict(model, params, ids[i : i + step], clicks[i : i + step])["conditional"])
    for i in range(0, len(ids), step)
  ]
  return _perplexity(np.concatenate(cond), clicks)


def _fit_default(args, model, stream, num_docs, sessions, read_s):
  """``fit_click_model(model, stream)`` with nothing else: the solver it picks, its defaults (one JSON line)."""
  import jax  # noqa: PLC0415

  from ultr_jax import simulation as sim  # noqa: PLC0415

  t0 = time.perf_counter()
  fit = sim.fit_click_model(model, stream, num_docs=num_docs)
  jax.block_until_ready(fit.params)
  fit_s = time.perf_counter() - t0
  peak_fit_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  row = {
    "side": "ultr_jax",
    "model": model,
    "path": f"fit_click_model defaults: {type(fit.solver).__name__}",
    "stop_reason": fit.stop_reason[:200],
    "sessions_read": sessions,
    "read_s": read_s,
    "fit_s": fit_s,
    "steps_or_iters": fit.iterations,
    "perplexity": _test_perplexity(args, model, fit.params),
    "peak_rss_mb": peak_fit_mb,
  }
  print(json.dumps(row), flush=True)


def _fit_minibatch(args, model, num_docs, sessions, read_s):
  """A cascade model by :func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Minibatch(...)`` over the
  stream (one counting pass, then ``--minibatch_epochs``), Adam ``--minibatch_lr`` decaying linearly to 0,
  per-document tables as ``--table`` (``full`` or ``hashed:<rows>``); prints a JSON line."""
  import jax  # noqa: PLC0415
  import optax  # noqa: PLC0415

  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax import simulation as sim  # noqa: PLC0415
  from ultr_jax.simulation.click_models import tables  # noqa: PLC0415

  m = sim.get_click_model(model)
  kind, _, size = args.table.partition(":")
  table = None
  if kind == "hashed":
    table = {k: tables.HashedTable(int(size)) for k in ("attraction",) + tuple(m.item_params)}
  steps = args.minibatch_epochs * -(-sessions // args.minibatch_batch)
  batches = lambda: data.SessionStream(os.path.join(args.workdir, "train"), batch_size=args.minibatch_batch)  # noqa: E731
  t0 = time.perf_counter()
  fit = sim.fit_click_model(
    model,
    batches,
    solver=sim.Minibatch(
      optimizer=optax.adam(optax.linear_schedule(args.minibatch_lr, 0.0, steps)),
      epochs=args.minibatch_epochs,
      num_sessions=float(sessions),
      tables=table,
    ),
    num_docs=num_docs,
    l2=args.l2,
  )
  jax.block_until_ready(fit.params)
  fit_s = time.perf_counter() - t0
  peak_fit_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  row = {
    "side": "ultr_jax",
    "model": model,
    "path": f"minibatch, {args.minibatch_epochs} epoch(s), table {args.table}",
    "process": jax.process_index(),
    "processes": jax.process_count(),
    "sessions_read": sessions,
    "read_s": read_s,
    "fit_s": fit_s,
    "fit_passes": 1 + args.minibatch_epochs,
    "steps": fit.iterations,
    "perplexity": _test_perplexity(args, model, fit.params),
    "peak_rss_mb": peak_fit_mb,
  }
  print(json.dumps(row), flush=True)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def run_ultr_jax(args, model):
  port = _free_port()
  cmd = lambda i: [sys.executable, __file__, *sys.argv[1:], f"--_fit={model}", f"--_process={i}", f"--_port={port}"]
  procs = [subprocess.Popen(cmd(i), stdout=subprocess.PIPE, text=True) for i in range(args.processes)]
  t0 = time.perf_counter()
  outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
  wall = time.perf_counter() - t0
  out = outs[0]
  out["wall_s"] = wall
  out["peak_rss_mb"] = max(o["peak_rss_mb"] for o in outs)
  return out


def run_clax(args, model):
  path = _clax_log(args)
  out = os.path.join(args.workdir, f"clax_{model}.npz")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["JAX_PLATFORMS"] = os.environ.get("JAX_PLATFORMS", "cpu")
  cmd = [args.clax_python, os.path.join(HERE, "_clax_side.py"), "--log", path, "--model", model, "--out", out]
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=args.workdir)
  if proc.returncode != 0:
    return {"side": "clax", "model": model, "error": proc.stderr.strip().splitlines()[-5:]}
  res, info = np.load(out), json.loads(proc.stdout.strip().splitlines()[-1])
  z = np.load(os.path.join(args.workdir, "test.npz"))
  ppl = _perplexity(res["conditional"], z["clicks"])
  return {"side": "clax", "model": model, "fit_s": float(res["fit_s"]), "epochs": info["epochs"], "perplexity": ppl}


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sessions", type=int, default=1_000_000)
  p.add_argument("--queries", type=int, default=0, help="0: sessions / 10")
  p.add_argument("--candidates", type=int, default=20)
  p.add_argument("--generator", default="ubm")
  p.add_argument("--heldout_fraction", type=float, default=0.1)
  p.add_argument("--models", nargs="+", default=["pbm", "ubm"])
  p.add_argument("--memory_budget_mb", type=float, default=1024)
  p.add_argument("--batch_size", type=int, default=8192)
  p.add_argument("--l2", type=float, default=1.0)
  p.add_argument("--max_iters", type=int, default=500, help="the statistics fit's iterations (spilled: passes)")
  p.add_argument("--select_prior", action="store_true", help="pick l2 on the validation split (6 fits)")
  p.add_argument("--minibatch_models", nargs="*", default=["dbn"], help="fitted by minibatch steps over the stream")
  p.add_argument("--minibatch_lr", type=float, default=0.05)
  p.add_argument("--minibatch_epochs", type=int, default=1)
  p.add_argument("--minibatch_batch", type=int, default=4096)
  p.add_argument("--table", default="full", help="the minibatch fit's per-document tables: full or hashed:<rows>")
  p.add_argument("--defaults", action="store_true", help="fit_click_model(model, stream) with no other argument")
  p.add_argument("--processes", type=int, default=1)
  p.add_argument("--clax", action="store_true")
  p.add_argument("--clax_python", default="/tmp/clax-venv/bin/python")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--workdir", required=True)
  p.add_argument("--_fit", default="")
  p.add_argument("--_process", type=int, default=0)
  p.add_argument("--_port", type=int, default=0)
  args = p.parse_args()
  if args._fit:
    return fit_ultr_jax(args, args._fit, args._process, args._port)
  os.makedirs(args.workdir, exist_ok=True)
  rows = [{"machine": platform.processor() or platform.machine(), "load": os.getloadavg(), **vars(args)}]
  if not os.path.isdir(os.path.join(args.workdir, "train")):
    rows.append(generate(args))
  print(json.dumps(rows[-1]), flush=True)
  for model in args.models:
    rows.append(run_ultr_jax(args, model))
    print(json.dumps(rows[-1]), flush=True)
    if args.clax:
      rows.append(run_clax(args, model))
      print(json.dumps(rows[-1]), flush=True)
  z = os.path.join(args.workdir, "test.npz")
  if os.path.exists(z):
    t = np.load(z)
    rows.append({"side": "truth", "perplexity": _perplexity(t["conditional_click_prob"], t["clicks"])})
  rows.append({"load_after": os.getloadavg()})
  print(json.dumps(rows[-2:]), flush=True)
  with open(os.path.join(args.workdir, f"long_tail_{args.processes}p.json"), "w") as f:
    json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
  main()
