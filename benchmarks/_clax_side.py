r"""CLAX's side of ``benchmarks/clax_compare.py``; runs in CLAX's own venv (``benchmarks/clax_venv.sh``).

Reads the shared log (``.npz`` of ``train_/val_/test_`` ``query_doc_ids int32[S, L]`` and ``clicks [S, L]``),
fits one CLAX model with CLAX's experiment settings (``experiments/1-yandex-baseline``: ``optax.adamw(0.01)``,
training batches of 4096 sessions, validation batches of 8192, at most 100 epochs, the ``Trainer``'s default early
stopping on the validation loss, ``nnx.Rngs(42)``), and writes the fit's wall time (``Trainer.train``, compile
included) and the model's conditional click probabilities :math:`P(C_{s,r} = 1 \mid c_{s,<r})` on the test split to
an ``.npz``. The perplexity is computed by the caller from those, by the same formula as ultr_jax's; CLAX's own
``test_clicks`` conditional perplexity on the test split (after the timed fit) is printed beside it as a check.

Batches come from the in-memory arrays in order (CLAX's ``DataLoader`` reads Parquet shards in order, unshuffled),
with CLAX's batch layout: ``query_doc_ids int32``, ``positions int16`` (1-based, as its Yandex and Baidu loaders),
``clicks float16`` and ``mask bool``. Reading from memory instead of Parquet is in CLAX's favour.

  <clax-venv>/bin/python benchmarks/_clax_side.py --log log.npz --model pbm --out out.npz
"""

import argparse
import importlib.metadata as md
import json
import os
import sys
import time

import numpy as np


def peak_rss_mb() -> float:
  """This process's peak resident set (``VmHWM``; ``ru_maxrss`` would carry the parent's peak across the fork and
  exec of a subprocess)."""
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


class Batches:
  """A re-iterable of CLAX batches over in-memory ``[S, L]`` arrays (the last batch may be short, as the
  ``DataLoader``'s default ``drop_last=False``)."""

  def __init__(self, ids, clicks, batch_size):
    self.ids, self.clicks, self.batch_size = ids.astype(np.int32), clicks.astype(np.float16), batch_size
    length = ids.shape[1]
    self.positions = np.arange(1, length + 1, dtype=np.int16)
    self.mask = np.ones(length, bool)

  def __len__(self):
    return -(-self.ids.shape[0] // self.batch_size)

  def __iter__(self):
    for i in range(0, self.ids.shape[0], self.batch_size):
      ids = self.ids[i : i + self.batch_size]
      n = ids.shape[0]
      yield {
        "query_doc_ids": ids,
        "positions": np.broadcast_to(self.positions, ids.shape).copy(),
        "mask": np.broadcast_to(self.mask, ids.shape).copy(),
        "clicks": self.clicks[i : i + n],
        "n": np.full(n, ids.shape[1], np.int16),
      }


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--log", required=True)
  parser.add_argument("--model", required=True, choices=("pbm", "ubm", "dbn", "sdbn", "dcm", "ccm"))
  parser.add_argument("--out", required=True)
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--train_batch_size", type=int, default=4096)
  parser.add_argument("--eval_batch_size", type=int, default=8192)
  parser.add_argument("--epochs", type=int, default=100)
  parser.add_argument("--seed", type=int, default=42)
  args = parser.parse_args()

  import jax
  import optax
  from flax import nnx

  import clax

  log = np.load(args.log)
  num_docs, length = int(log["num_docs"]), log["train_query_doc_ids"].shape[1]
  rngs = nnx.Rngs(args.seed)
  if args.model == "pbm":
    # 1-based positions index the examination table; one row more than ranks so rank L has its own row.
    model = clax.PositionBasedModel(positions=length + 1, query_doc_pairs=num_docs, rngs=rngs)
  elif args.model == "ubm":
    model = clax.UserBrowsingModel(positions=length, query_doc_pairs=num_docs, rngs=rngs)
  elif args.model == "dcm":
    model = clax.DependentClickModel(positions=length + 1, query_doc_pairs=num_docs, rngs=rngs)
  elif args.model == "ccm":
    model = clax.ClickChainModel(query_doc_pairs=num_docs, rngs=rngs)
  else:  # CLAX's SDBN is its DBN with the continuation fixed at 1
    model = clax.DynamicBayesianNetwork(query_doc_pairs=num_docs, fix_continuation=args.model == "sdbn", rngs=rngs)

  train = Batches(log["train_query_doc_ids"], log["train_clicks"], args.train_batch_size)
  val = Batches(log["val_query_doc_ids"], log["val_clicks"], args.eval_batch_size)
  trainer = clax.Trainer(optax.adamw(args.learning_rate), epochs=args.epochs)
  stdout = sys.stdout
  sys.stdout = sys.stderr  # CLAX's progress table goes to stderr, our JSON summary to stdout
  t0 = time.perf_counter()
  train_df = trainer.train(model, train, val)
  jax.block_until_ready(nnx.state(model))
  fit_s = time.perf_counter() - t0
  sys.stdout = stdout

  model.eval()
  predict = nnx.jit(lambda m, b: m.predict_conditional_clicks(b))
  test = Batches(log["test_query_doc_ids"], log["test_clicks"], args.eval_batch_size)
  cond = np.concatenate([np.exp(np.asarray(predict(model, b), np.float64)) for b in test])
  epochs = int(len(train_df))
  sys.stdout = sys.stderr
  test_df = trainer.test_clicks(model, test)  # CLAX's own metric, a check on the shared formula
  sys.stdout = stdout
  np.savez(args.out, conditional=cond.astype(np.float32), fit_s=fit_s, epochs=epochs)
  versions = {p: md.version(p) for p in ("clax-models", "jax", "jaxlib", "flax", "optax")}
  last = train_df.iloc[-1].to_dict()
  print(
    json.dumps(
      {
        "fit_s": fit_s,
        "epochs": epochs,
        "versions": versions,
        "devices": str(jax.devices()),
        "val_loss": float(last.get("val_loss", float("nan"))),
        "clax_test_cond_ppl": float(test_df.iloc[-1].get("test_cond_ppl", float("nan"))),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "peak_rss_mb": peak_rss_mb(),
      }
    )
  )


if __name__ == "__main__":
  main()
