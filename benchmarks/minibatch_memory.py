"""Peak memory of the minibatch click-model fit at a large document vocabulary, on a small log.

A proxy of the minibatch fit of ``benchmarks/long_tail.py`` at 10^8 sessions (2 x 10^8 document ids): the memory
that grows with the vocabulary, not with the log, shows on a log of 10^5 sessions whose document ids are spread
over ``--num_docs`` ids. The log: :func:`ultr_jax.simulation.simulate_long_tail_log` (``--generator`` clicks,
``--sessions`` sessions, ``--queries`` x ``--candidates`` documents), each id multiplied by
``--num_docs // (queries x candidates)``, held in memory in batches of ``--batch`` sessions. The fit
(:func:`ultr_jax.simulation.fit_click_model`, ``solver=sim.Minibatch(...)``): ``--model`` with
``num_docs=--num_docs``, ``num_sessions`` given (as ``long_tail.py`` does: the counting pass still runs for the
sparse prior), Adam ``--lr`` decaying linearly to 0 over ``--epochs``, per-document tables ``--table`` (``full`` or
``hashed:<rows>``).

Prints one JSON line: the peak RSS (``VmHWM``, reset after the log is built: ``/proc/self/clear_refs``) before
and during the fit in MB, the fit's wall seconds, the machine's load, and ``checksum``: a digest of the fitted
logits and probabilities at the read documents and at 1000 unread ones (equal digests: the same fit, bit for
bit). ``--trace`` adds the RSS sampled every 0.25 s during the fit.

Run: ``python benchmarks/minibatch_memory.py --num_docs=200000000 --table=hashed:67108864``
"""

import argparse
import hashlib
import json
import os
import resource
import threading
import time

import numpy as np


def _status(field: str) -> float:
  """``field`` of ``/proc/self/status`` in MB (``VmRSS``, ``VmHWM``)."""
  with open("/proc/self/status", encoding="ascii") as fh:
    for line in fh:
      if line.startswith(field + ":"):
        return int(line.split()[1]) / 1024
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
  """Resets ``VmHWM`` to the current RSS (Linux >= 4.0); False where it cannot."""
  try:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
      fh.write("5")
    return True
  except OSError:
    return False


class _Sampler:
  """The RSS every ``period`` seconds in a background thread."""

  def __init__(self, period: float = 0.25):
    self.period, self.trace, self.t0 = period, [], time.perf_counter()
    self.stop = threading.Event()
    self.thread = threading.Thread(target=self._run, daemon=True)
    self.thread.start()

  def _run(self):
    while not self.stop.wait(self.period):
      self.trace.append((round(time.perf_counter() - self.t0, 2), round(_status("VmRSS"))))

  def close(self) -> list:
    self.stop.set()
    self.thread.join()
    return self.trace


def build_log(args) -> list:
  """The proxy log's batches, their ids spread over ``--num_docs``."""
  import jax  # noqa: PLC0415

  from ultr_jax import simulation as sim  # noqa: PLC0415

  docs = args.queries * args.candidates
  spread = max(args.num_docs // docs, 1)
  batches = sim.simulate_long_tail_log(
    jax.random.key(args.seed),
    args.generator,
    num_sessions=args.sessions,
    num_queries=args.queries,
    num_candidates=args.candidates,
    batch_size=args.batch,
  )
  return [{"doc_ids": b["doc_ids"].astype(np.int64) * spread, "clicks": b["clicks"]} for b in batches]


def checksum(fit, batches, num_docs: int) -> str:
  """A digest of the fit's per-document logits and probabilities at the read ids and 1000 unread ones, and of
  its other parameters."""
  read = np.unique(np.concatenate([b["doc_ids"].ravel() for b in batches]))
  unread = np.linspace(1, num_docs - 1, 1000).astype(np.int64)
  h = hashlib.sha256()
  for part in (fit.logits, fit.params):
    for k in sorted(part):
      v = np.asarray(part[k])
      h.update(k.encode())
      h.update(np.ascontiguousarray(v[read] if v.shape and v.shape[0] == num_docs else v).tobytes())
      h.update(np.ascontiguousarray(v[unread] if v.shape and v.shape[0] == num_docs else v).tobytes())
  return h.hexdigest()[:16]


def main(args) -> dict:
  import jax  # noqa: PLC0415
  import optax  # noqa: PLC0415

  from ultr_jax import simulation as sim  # noqa: PLC0415
  from ultr_jax.simulation.click_models import tables  # noqa: PLC0415

  batches = build_log(args)
  m = sim.get_click_model(args.model)
  kind, _, size = args.table.partition(":")
  table = (
    {k: tables.HashedTable(int(size)) for k in ("attraction",) + tuple(m.item_params)} if kind == "hashed" else None
  )
  steps = args.epochs * len(batches)
  base = _status("VmRSS")
  reset = _reset_peak()
  sampler = _Sampler() if args.trace else None
  t0 = time.perf_counter()
  fit = sim.fit_click_model(
    args.model,
    batches,
    solver=sim.Minibatch(
      optimizer=optax.adam(optax.linear_schedule(args.lr, 0.0, steps)),
      epochs=args.epochs,
      num_sessions=float(args.sessions),
      tables=table,
    ),
    num_docs=args.num_docs,
  )
  jax.block_until_ready(fit.params)
  fit_s = time.perf_counter() - t0
  trace = sampler.close() if sampler else None
  row = {
    "model": args.model,
    "table": args.table,
    "num_docs": args.num_docs,
    "sessions": args.sessions,
    "steps": fit.iterations,
    "rss_before_fit_mb": round(base),
    "peak_rss_fit_mb": round(_status("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    "peak_reset": reset,
    "fit_s": round(fit_s, 1),
    "load": [round(x, 2) for x in os.getloadavg()],
    "checksum": checksum(fit, batches, args.num_docs),
  }
  if trace is not None:
    row["rss_trace"] = trace
  return row


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--num_docs", type=int, default=200_000_000)
  p.add_argument("--table", default="hashed:67108864", help="full or hashed:<rows>")
  p.add_argument("--model", default="dbn")
  p.add_argument("--generator", default="dbn")
  p.add_argument("--sessions", type=int, default=100_000)
  p.add_argument("--queries", type=int, default=10_000)
  p.add_argument("--candidates", type=int, default=20)
  p.add_argument("--batch", type=int, default=4096)
  p.add_argument("--epochs", type=int, default=1)
  p.add_argument("--lr", type=float, default=0.05)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--trace", action="store_true", help="the RSS every 0.25 s during the fit")
  print(json.dumps(main(p.parse_args())), flush=True)
