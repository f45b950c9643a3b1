r"""Per-document parameters from features (``simulation.FeatureTable``) against one row per document, long tail.

The log is :func:`ultr_jax.simulation.simulate_long_tail_log`'s with ``feature_weights``: every document has
``--features`` standard-normal features and its attraction :math:`\sigma(b + w^\top x_d + s\,\epsilon_d)` (``s``:
``--feature_noise``); ``--sessions`` training sessions over ``--queries`` Zipf(1.1) queries of ``--candidates``
candidates each, clicks from ``--model``. The test split is ``--test_sessions`` more of the same documents (the
same key, later batches), split into sessions whose documents all appear in training and sessions showing at least
one document no training batch showed (the long tail's: one row per document can only give such a document its
prior's centre).

Each fit is :func:`ultr_jax.simulation.fit_click_model` with ``solver=sim.Minibatch(...)`` (Adam ``--lr``, batches of
``--batch``, ``--epochs``): ``rows`` (one row per document, row-wise steps), ``linear`` (``FeatureTable(nn.Dense(1),
x)``) and ``mlp`` (a tanh MLP of ``--hidden`` units) for the ``--feature_params`` (default the attraction, the one
the features determine; the DBN's satisfaction keeps one row per document). Reported: wall seconds of each fit
(compilation included), its parameters, held-out conditional perplexity on all, seen and unseen sessions, and
``truth`` (the
generating model's own, :func:`ultr_jax.simulation.click_prediction_scores`), plus ``uptime``'s load.

  nice -n 5 python benchmarks/feature_table.py --sessions=200000 --queries=50000
  nice -n 5 python benchmarks/feature_table.py --sessions=1000000 --queries=200000 --model=dbn
"""

import argparse
import json
import os
import time

import flax.linen as nn
import jax
import numpy as np
import optax

from ultr_jax import simulation as sim


class MLP(nn.Module):
  """A tanh MLP with one logit out."""

  hidden: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(nn.tanh(nn.Dense(self.hidden)(x)))


def _log(args, weights, num_sessions, first_batch):
  kw = {"document_params": {"satisfaction": (2.0, 2.0)}} if args.model == "dbn" else {}
  batches = sim.simulate_long_tail_log(
    jax.random.key(args.seed),
    args.model,
    num_sessions=num_sessions,
    num_queries=args.queries,
    num_candidates=args.candidates,
    list_size=10,
    batch_size=args.batch,
    first_batch=first_batch,
    feature_weights=weights,
    feature_noise=args.feature_noise,
    **kw,
  )
  keys = ("doc_ids", "clicks", "conditional_click_prob", "click_prob")
  return [{k: b[k] for k in keys} for b in batches]


def _scores(model, params, test, keep):
  ids, clicks = (np.concatenate([b[k] for b in test])[keep] for k in ("doc_ids", "clicks"))
  out = []
  for i in range(0, len(ids), 65536):
    p = sim.click_model_predict(model, params, ids[i : i + 65536], clicks[i : i + 65536])
    out.append((np.asarray(p["conditional"]), np.asarray(p["marginal"])))
  cond, marg = (np.concatenate([o[j] for o in out]) for j in (0, 1))
  return sim.click_prediction_scores(cond, marg, clicks)["perplexity"]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sessions", type=int, default=200_000)
  parser.add_argument("--test_sessions", type=int, default=50_000)
  parser.add_argument("--queries", type=int, default=50_000)
  parser.add_argument("--candidates", type=int, default=20)
  parser.add_argument("--features", type=int, default=8)
  parser.add_argument("--feature_noise", type=float, default=0.5)
  parser.add_argument("--model", default="pbm")
  parser.add_argument("--fits", default="rows,linear,mlp")
  parser.add_argument("--hidden", type=int, default=32)
  parser.add_argument(
    "--feature_params", default="attraction", help="per-document parameters from features (the others: one row each)"
  )
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--batch", type=int, default=4096)
  parser.add_argument("--lr", type=float, default=0.02)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  weights = np.random.default_rng(args.seed).standard_normal(args.features) * 1.5 / np.sqrt(args.features)
  num_docs = args.queries * args.candidates
  t0 = time.perf_counter()
  train = _log(args, weights.tolist(), args.sessions, 0)
  test = _log(args, weights.tolist(), args.test_sessions, 1 << 20)
  x = sim.long_tail_document_params(jax.random.key(args.seed), np.arange(num_docs), feature_weights=weights.tolist())
  x = x["features"]
  seen = np.zeros(num_docs, bool)
  for b in train:
    seen[b["doc_ids"].ravel()] = True
  ids = np.concatenate([b["doc_ids"] for b in test])
  unseen = ~np.all(seen[ids], axis=-1)
  truth = {
    name: sim.click_prediction_scores(
      *(np.concatenate([b[k] for b in test])[keep] for k in ("conditional_click_prob", "click_prob", "clicks"))
    )["perplexity"]
    for name, keep in (("all", slice(None)), ("seen", ~unseen), ("unseen", unseen))
  }
  print(
    f"log: {args.sessions} train / {args.test_sessions} test sessions, {num_docs} documents ({seen.sum()} shown in"
    f" training), {unseen.mean():.3f} of test sessions show an unseen one; {time.perf_counter() - t0:.1f} s"
  )
  print(f"truth perplexity: {json.dumps({k: round(v, 5) for k, v in truth.items()})}")
  modules = {"linear": nn.Dense(1), "mlp": MLP(args.hidden)}
  names = args.feature_params.split(",")
  batches = [{"doc_ids": b["doc_ids"], "clicks": b["clicks"]} for b in train]
  for fit_name in args.fits.split(","):
    tables = None if fit_name == "rows" else {k: sim.FeatureTable(modules[fit_name], x) for k in names}
    t0 = time.perf_counter()
    fit = sim.fit_click_model(
      args.model,
      batches,
      solver=sim.Minibatch(
        optimizer=optax.adam(args.lr),
        epochs=args.epochs,
        list_size=10,
        num_sessions=float(args.sessions),
        tables=tables,
      ),
      num_docs=num_docs,
    )
    jax.block_until_ready(fit.params)
    seconds = time.perf_counter() - t0
    size = sum(np.size(v) for k, v in fit.logits.items() if not tables or k not in tables)  # rows and biases
    size += sum(np.size(v) for v in jax.tree.leaves(fit.feature_params or {}))  # the modules
    ppl = {
      name: round(_scores(args.model, fit.params, test, keep), 5)
      for name, keep in (("all", slice(None)), ("seen", ~unseen), ("unseen", unseen))
    }
    gap = {k: round(v - truth[k], 5) for k, v in ppl.items()}
    print(
      json.dumps(
        {
          "fit": fit_name,
          "seconds": round(seconds, 1),
          "parameters": int(size),
          "perplexity": ppl,
          "minus_truth": gap,
          "steps": fit.iterations,
        }
      )
    )
  print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
  main()
