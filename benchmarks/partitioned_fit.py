r"""The partition-by-partition statistics fit against the in-memory fit on one long-tail log: passes, wall time
(compilation included), and the distance to the in-memory optimum.

The log is :func:`ultr_jax.simulation.simulate_long_tail_log`'s (``--sessions`` sessions over ``sessions / 10``
Zipf queries x 20 candidates, 10 ranks, UBM clicks; with ``--num_docs`` the document ids spread over that many
ids, most of them unread, as in a large log's vocabulary). Each model's item statistics are counted once in memory
(fitted by :func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Statistics()``, preconditioned L-BFGS) and
once spilled into ``--partitions`` partitions (:class:`ultr_jax.simulation.PartitionedStatistics`, fitted by the same
call, which on them runs the Newton passes of :mod:`ultr_jax.simulation.partitioned_fit`). Prints one JSON line
per model, with the process's peak RSS after the partitioned fit (run one model per process for its own peak).

  python benchmarks/partitioned_fit.py --sessions=200000 --models pbm ubm
  python benchmarks/partitioned_fit.py --sessions=100000 --num_docs=200000000 --models pbm --skip_in_memory
"""

import argparse
import json
import os
import resource
import time

import numpy as np


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sessions", type=int, default=200_000)
  p.add_argument("--partitions", type=int, default=4)
  p.add_argument("--models", nargs="+", default=["pbm", "ubm"])
  p.add_argument("--l2", type=float, default=1.0)
  p.add_argument("--num_docs", type=int, default=0, help="spread the ids over this many (0: the log's own)")
  p.add_argument("--skip_in_memory", action="store_true", help="only the partitioned fit")
  args = p.parse_args()

  import jax  # noqa: PLC0415

  from ultr_jax import simulation as sim  # noqa: PLC0415
  from ultr_jax.simulation.click_models.statistics import ItemCounter  # noqa: PLC0415

  n = args.sessions
  batches = list(
    sim.simulate_long_tail_log(
      jax.random.key(0),
      "ubm",
      num_sessions=n,
      num_queries=n // 10,
      num_candidates=20,
      list_size=10,
      batch_size=100_000,
    )
  )
  num_docs = max(args.num_docs, n // 10 * 20)
  spread = num_docs // (n // 10 * 20)
  for b in batches:
    b["doc_ids"] = b["doc_ids"] * spread
  for model in args.models:
    m = sim.get_click_model(model)
    memory, memory_s = None, None
    if not args.skip_in_memory:
      t0 = time.perf_counter()
      stats = sim.gather_click_statistics(model, batches, memory_budget_bytes=None)
      memory = sim.fit_click_model(model, stats, solver=sim.Statistics(), num_docs=num_docs, l2=args.l2)
      memory_s = round(time.perf_counter() - t0, 2)
    counter = ItemCounter(
      memory_budget_bytes=0,
      num_partitions=args.partitions,
      last_click_state=sim.statistics_reduction(m).statistics_kind == "ubm_items",
    )
    for b in batches:
      counter.add(b["doc_ids"], b["clicks"], b.get("where"))
    t0 = time.perf_counter()
    fit = sim.fit_click_model(model, counter.result(), solver=sim.Statistics(), num_docs=num_docs, l2=args.l2)
    jax.block_until_ready(fit.params)
    fit_s = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gap = None
    if memory is not None:
      gap = float(np.max(np.abs(np.asarray(fit.params["attraction"]) - np.asarray(memory.params["attraction"]))))
    row = {
      "model": model,
      "sessions": n,
      "load": os.getloadavg(),
      "num_docs": num_docs,
      "in_memory_s": memory_s,
      "in_memory_iterations": memory and memory.iterations,
      "partitioned_s": round(fit_s, 2),
      "passes": fit.iterations,
      "grad_norm": fit.grad_norm,
      "log_likelihood_gap": memory and memory.log_likelihood - fit.log_likelihood,
      "max_attraction_gap": gap,
      "peak_rss_mb": round(peak_mb),
    }
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
  main()
