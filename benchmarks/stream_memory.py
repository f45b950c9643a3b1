"""Memory and speed of the streaming input: convert a generated TSV log to session shards, stream it back.

Writes a delimited click log (``session_id, query_id, doc_id, position, click``) of ``--sessions``
sessions of ``--docs`` documents each (queries drawn from ``--queries``, documents from 50 per query,
so the (query, document) vocabulary stays bounded while the log grows), then, each phase in a fresh
subprocess so that its peak RSS (``resource.getrusage``) is its own:

* ``import``: the floor: Python, NumPy, pyarrow, Grain and JAX imported, nothing read;
* ``convert``: :func:`ultr_jax.data.convert_click_log` (two passes over the text, shards written);
* ``stream``: :class:`ultr_jax.data.SessionStream` over the shards, ``--batch_size`` sessions per
  batch, every batch touched (clicks summed); checks that it saw every session once;
* ``in_memory`` (``--in_memory``): :func:`ultr_jax.data.read_click_log` and
  :func:`ultr_jax.data.click_log_sessions` of the same file, for contrast.

Prints one line per phase: seconds, sessions/s and peak RSS in MB. Bounded memory means the
``convert`` and ``stream`` peaks stay flat as ``--sessions`` grows (10^5, 10^6, 10^7).

Run: ``python benchmarks/stream_memory.py --sessions=1000000`` (``--sessions=10000000`` writes about
2.6 GB of text and takes tens of minutes on a small machine).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

_DOCS_PER_QUERY = 50
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_log(path, sessions: int, docs: int, queries: int, seed: int = 0) -> None:
  """``sessions`` sessions of ``docs`` rows, written in blocks of 10^4 sessions (bounded memory)."""
  rng = np.random.default_rng(seed)
  with open(path, "w", encoding="utf-8") as fh:
    fh.write("session_id\tquery_id\tdoc_id\tposition\tclick\n")
    block = 10_000
    for start in range(0, sessions, block):
      n = min(block, sessions - start)
      q = rng.integers(queries, size=n)
      d = np.argsort(rng.random((n, _DOCS_PER_QUERY)), axis=1)[:, :docs]  # distinct docs per session
      c = (rng.random((n, docs)) < 0.3 / (1 + np.arange(docs))).astype(int)
      lines = []
      for i in range(n):
        s, qi = start + i, q[i]
        lines.extend(f"s{s}\tq{qi}\td{qi}_{d[i, p]}\t{p + 1}\t{c[i, p]}" for p in range(docs))
      fh.write("\n".join(lines) + "\n")


def _imports():
  import grain  # noqa: F401,PLC0415
  import jax  # noqa: F401,PLC0415
  import pyarrow.parquet  # noqa: F401,PLC0415

  from ultr_jax import data  # noqa: PLC0415

  return data


def phase(name: str, args) -> dict:
  data = _imports()
  t0 = time.perf_counter()
  out = {}
  if name == "convert":
    shards = data.convert_click_log(
      args.log, args.shards, shard_size=args.shard_size, row_group_size=args.row_group_size
    )
    out["shards"] = len(shards)
  elif name == "stream":
    stream = data.SessionStream(args.shards, batch_size=args.batch_size, process_index=0, process_count=1)
    seen, clicks = 0, 0.0
    for batch in stream:
      seen += int(batch["valid"].sum())
      clicks += float((batch["clicks"] * batch["where"]).sum())
    assert seen == args.sessions, (seen, args.sessions)
    out["batches"] = -(-seen // args.batch_size)
    out["clicks"] = clicks
  elif name == "in_memory":
    s = data.click_log_sessions(data.read_click_log(args.log))
    assert len(s["where"]) == args.sessions
  elif name != "import":
    raise ValueError(name)
  out["seconds"] = time.perf_counter() - t0
  out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--sessions", type=int, default=1_000_000)
  parser.add_argument("--docs", type=int, default=10)
  parser.add_argument("--queries", type=int, default=10_000)
  parser.add_argument("--batch_size", type=int, default=1024)
  parser.add_argument("--row_group_size", type=int, default=4096)
  parser.add_argument("--shard_size", type=int, default=1 << 18)
  parser.add_argument("--in_memory", action="store_true", help="also read the log whole, for contrast")
  parser.add_argument("--workdir", default=None, help="keep the log and shards here (default: a temp dir, removed)")
  parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--log", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--shards", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.phase:
    print(json.dumps(phase(args.phase, args)))
    return

  workdir = args.workdir or tempfile.mkdtemp(prefix="stream_memory_")
  os.makedirs(workdir, exist_ok=True)
  log, shards = os.path.join(workdir, "log.tsv"), os.path.join(workdir, "shards")
  try:
    t0 = time.perf_counter()
    stamp = os.path.join(workdir, "log.json")
    made = json.dumps([args.sessions, args.docs, args.queries])
    if not (os.path.exists(stamp) and open(stamp).read() == made):  # a kept --workdir's log is reused
      write_log(log, args.sessions, args.docs, args.queries)
      with open(stamp, "w") as f:
        f.write(made)
    shutil.rmtree(shards, ignore_errors=True)
    size = os.path.getsize(log)
    print(
      f"log: {args.sessions} sessions, {args.sessions * args.docs} rows, {size / 2**20:.0f} MB of text "
      f"(ready in {time.perf_counter() - t0:.0f} s)"
    )
    phases = ["import", "convert", "stream"] + (["in_memory"] if args.in_memory else [])
    for name in phases:
      cmd = [sys.executable, __file__, f"--phase={name}", f"--log={log}", f"--shards={shards}"]
      cmd += [f"--{k}={getattr(args, k)}" for k in ("sessions", "batch_size", "row_group_size", "shard_size")]
      # The checkout this script is in, ahead of any installed ultr_jax.
      env = dict(os.environ, PYTHONPATH=os.pathsep.join([_REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
      run = subprocess.run(cmd, capture_output=True, text=True, env=env)
      if run.returncode:
        sys.exit(f"phase {name} failed:\n{run.stderr}")
      result = json.loads(run.stdout.strip().splitlines()[-1])
      rate = f"{args.sessions / result['seconds']:>10,.0f} sessions/s" if name != "import" else " " * 21
      extra = ""
      if name == "convert":
        shard_mb = sum(os.path.getsize(os.path.join(shards, f)) for f in os.listdir(shards)) / 2**20
        extra = f"  ({result['shards']} shards, {shard_mb:.0f} MB)"
      print(f"{name:>9}: {result['seconds']:8.1f} s {rate}  peak RSS {result['peak_rss_mb']:7.0f} MB{extra}")
  finally:
    if args.workdir is None:
      shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
  main()
