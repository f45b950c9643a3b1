"""Click models fitted on a log larger than memory: Parquet session shards streamed, peak memory per phase.

Writes ``--sessions`` training sessions x 10 ranks (plus ``--test`` held-out sessions) as session shards
(:func:`ultr_jax.data.write_session_shards`), generated chunk by chunk by
:func:`ultr_jax.simulation.simulate_session_log` the way ``benchmarks/clax_compare.py`` generates its log (DBN
clicks, perseverance 0.9, attraction ~ Beta(1, 3) and satisfaction ~ Beta(2, 2) per document, ``--queries`` queries
of 10 documents, a noisy logging ranker), then fits each of ``--models`` from a
:class:`ultr_jax.data.SessionStream` over the shards, each fit in a fresh subprocess so that its peak resident
memory (``resource.getrusage``) is its own:

* ``pbm``, ``ubm``: one pass to sufficient statistics (:func:`ultr_jax.simulation.gather_click_statistics`; a
  table of (document, rank[, last click]) counts), then the preconditioned L-BFGS fit on them
  (:func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Statistics()``);
* ``dbn``: its exact statistics are the distinct sessions, which a noisy ranker's log does not reduce (as many
  records as sessions), so it is fitted by :func:`ultr_jax.simulation.fit_click_model` with
  ``solver=sim.Minibatch(...)`` (Adam over the stream, ``--dbn_epochs`` passes): memory flat, like CLAX's way;

each then scored on the held-out shards by :func:`ultr_jax.simulation.evaluate_click_model_stream` (the conditional
perplexity). Prints one row per phase: wall seconds, sessions/s, peak RSS in MB, and the fit's details.

  python benchmarks/click_model_beyond_memory.py --sessions=1000000 --workdir=/tmp/beyond_1e6
  python benchmarks/click_model_beyond_memory.py --sessions=100000000 --workdir=/tmp/beyond_1e8
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

_CHUNK = 1_000_000


def _generate(args):
  import jax  # noqa: PLC0415

  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax import simulation as sim  # noqa: PLC0415

  rng = np.random.default_rng(args.seed)
  attraction = rng.beta(1.0, 3.0, size=(args.queries, 10)).astype(np.float32)
  params = {"perseverance": 0.9, "satisfaction": rng.beta(2.0, 2.0, size=attraction.shape).astype(np.float32)}

  def chunks(total, offset):
    for i, start in enumerate(range(0, total, _CHUNK)):
      n = min(_CHUNK, total - start)
      key = jax.random.key(args.seed * 1_000_003 + offset + i)
      log = sim.simulate_session_log(key, "dbn", attraction, num_sessions=n, **params)
      yield {k: np.asarray(log[k]) for k in ("doc_ids", "clicks", "where")}

  train = data.write_session_shards(chunks(args.sessions, 0), os.path.join(args.workdir, "train"), source="train")
  test = data.write_session_shards(chunks(args.test, 10**6), os.path.join(args.workdir, "test"), source="test")
  return {"train_shards": len(train), "test_shards": len(test)}


def _fit(args, model):
  import jax  # noqa: PLC0415
  import optax  # noqa: PLC0415

  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax import simulation as sim  # noqa: PLC0415

  train = data.SessionStream(os.path.join(args.workdir, "train"), batch_size=args.batch_size)
  test = data.SessionStream(os.path.join(args.workdir, "test"), batch_size=args.batch_size)
  num_docs = int(train.num_docs)
  t0 = time.perf_counter()
  if model == "dbn":
    stream = data.SessionStream(os.path.join(args.workdir, "train"), batch_size=args.dbn_batch_size)
    fit = sim.fit_click_model(
      model,
      stream,
      solver=sim.Minibatch(
        optimizer=optax.adam(args.dbn_learning_rate),
        epochs=args.dbn_epochs,
        list_size=10,
        num_sessions=float(args.sessions),
      ),
      num_docs=num_docs,
    )
    details = {"steps": fit.iterations, "epochs": args.dbn_epochs, "batch": args.dbn_batch_size}
  else:
    stats = sim.gather_click_statistics(model, train)
    gathered = time.perf_counter() - t0
    fit = sim.fit_click_model(model, stats, solver=sim.Statistics(), num_docs=num_docs)
    details = {"records": stats.num_records, "gather_s": round(gathered, 1), "iterations": fit.iterations}
  jax.block_until_ready(fit.params)
  fit_s = time.perf_counter() - t0
  scores = sim.evaluate_click_model_stream(model, fit.params, test)
  return {"fit_s": fit_s, "perplexity": scores["perplexity"], "test_sessions": scores["num_sessions"], **details}


def _child(args):
  t0 = time.perf_counter()
  out = _generate(args) if args.phase == "generate" else _fit(args, args.phase)
  out["wall_s"] = time.perf_counter() - t0
  out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  print(json.dumps(out))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sessions", type=int, default=1_000_000, help="training sessions")
  parser.add_argument("--test", type=int, default=100_000, help="held-out sessions")
  parser.add_argument("--queries", type=int, default=10_000, help="queries of 10 documents each")
  parser.add_argument("--models", default="pbm,ubm,dbn")
  parser.add_argument("--batch_size", type=int, default=65_536, help="sessions per streamed batch (statistics)")
  parser.add_argument("--dbn_batch_size", type=int, default=4096, help="sessions per Adam step (CLAX's)")
  parser.add_argument("--dbn_learning_rate", type=float, default=0.01)
  parser.add_argument("--dbn_epochs", type=int, default=1)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--workdir", required=True, help="where the shards go (reused when already written)")
  parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.phase:
    _child(args)
    return
  os.makedirs(args.workdir, exist_ok=True)
  print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}; sessions {args.sessions:,}")
  phases = ([] if os.path.isdir(os.path.join(args.workdir, "train")) else ["generate"]) + args.models.split(",")
  rows = []
  for phase in phases:
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase] + sys.argv[1:]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
      print(f"{phase}: failed\n{proc.stderr[-3000:]}")
      sys.exit(1)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rows.append((phase, out))
    print(f"{phase}: {json.dumps(out)}  (load {os.getloadavg()[0]:.1f})", flush=True)
  print("\n| phase | wall s | sessions/s | peak RSS MB | held-out cond. PPL | details |")
  print("|---|---|---|---|---|---|")
  for phase, out in rows:
    rate = args.sessions / out.get("fit_s", out["wall_s"])
    ppl = f"{out['perplexity']:.5f}" if "perplexity" in out else "-"
    skip = ("wall_s", "peak_rss_mb", "perplexity", "fit_s")
    details = ", ".join(f"{k} {v}" for k, v in out.items() if k not in skip)
    print(f"| {phase} | {out['wall_s']:.1f} | {rate:,.0f} | {out['peak_rss_mb']:.0f} | {ppl} | {details} |")


if __name__ == "__main__":
  main()
