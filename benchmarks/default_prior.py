r"""The DBN's default fit on a long-tail log: the prior's centre and the minibatch fallback against the exact fit.

Simulates ``--sessions`` DBN sessions of :func:`ultr_jax.simulation.simulate_long_tail_log` (10 per query, batches
of 4,096) and a held-out tenth of the same documents, then fits the DBN by the exact statistics solver with each
prior centre (no budget) and by the 1-epoch minibatch fit, printing the held-out perplexity, time and peak RSS.

  python benchmarks/default_prior.py --sessions=300000
"""

import argparse
import resource
import time

import jax
import numpy as np

from ultr_jax import simulation as sim


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--sessions", type=int, default=300_000)
  args = p.parse_args()
  kw = dict(num_queries=max(args.sessions // 10, 100), num_candidates=20, list_size=10, batch_size=4096)
  keep = ("doc_ids", "clicks", "where")
  key = jax.random.key(0)
  log = sim.simulate_long_tail_log(key, "dbn", num_sessions=args.sessions, **kw)
  train = [{k: np.asarray(b[k]) for k in keep} for b in log]
  held = sim.simulate_long_tail_log(key, "dbn", num_sessions=args.sessions // 10, first_batch=len(train), **kw)
  test = [{k: np.asarray(b[k]) for k in keep} for b in held]
  num_docs = int(max(b["doc_ids"].max() for b in train + test)) + 1
  runs = {
    "Statistics, prior='zero'": dict(solver=sim.Statistics(budget=None), prior="zero"),
    "Statistics, prior='data_mean' (the default)": dict(solver=sim.Statistics(budget=None)),
    "Minibatch, 1 epoch (the fallback)": dict(solver=sim.Minibatch()),
  }
  for name, options in runs.items():
    t0 = time.perf_counter()
    fit = sim.fit_click_model("dbn", train, num_docs=num_docs, **options)
    seconds = time.perf_counter() - t0
    ppl = sim.evaluate_click_model_stream("dbn", fit.params, test)["perplexity"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{name}: perplexity {ppl:.5f}, {seconds:.1f} s, {fit.stop_reason}, peak RSS {rss:.2f} GB", flush=True)


if __name__ == "__main__":
  main()
