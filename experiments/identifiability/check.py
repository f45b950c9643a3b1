r"""Identifiability check (Algorithm 1, Chen et al. ICML 2024) for a dataset.

  # ULTRA-format directory (bias factor = position):
  python experiments/identifiability/check.py \
      --data=../shared/data/identifiability/K=2 --out=/tmp/k2.json
  # SVMlight/LETOR file whose line order is the logged ranking, with 200
  # random context types (bias factor = (context, position)):
  python experiments/identifiability/check.py --data=train.txt \
      --num_contexts=200 --out=/tmp/ctx.json

Writes ``{"identifiable": bool, "num_components": K, "components": [[ids]]}``
(plus a few statistics) to ``--out``; bias-factor ids are positions, or
``context * list_size + position`` with contexts.
"""

import json
import os
import tempfile

from absl import app, flags
import numpy as np

from ultr_jax.data import load_ultra
from ultr_jax.graph import check_identifiability
from ultr_jax.graph import records

_DATA = flags.DEFINE_string(
    "data", None, "ULTRA directory (with settings.json) or SVMlight file.")
_SPLIT = flags.DEFINE_string("split", "train", "ULTRA split to read.")
_OUT = flags.DEFINE_string("out", None, "Where to write the JSON report.")
_LIST_SIZE = flags.DEFINE_integer(
    "list_size", 10, "Displayed positions per SVMlight query (top-k).")
_NUM_CONTEXTS = flags.DEFINE_integer(
    "num_contexts", 0, "Random context types per item (0: positions only).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random contexts.")
_FEATURE_IDENTITY = flags.DEFINE_bool(
    "feature_identity", False,
    "ULTRA: identify documents by feature vector instead of document id.")
flags.mark_flags_as_required(["data"])


def main(argv):
  del argv
  path = _DATA.value
  if os.path.isdir(path):
    ds = load_ultra(path, _SPLIT.value, with_features=_FEATURE_IDENTITY.value)
    where = ds.where
    if _FEATURE_IDENTITY.value:
      items, _ = records.feature_vector_ids(ds.features, where)
    else:
      items = ds.doc_ids
    positions = ds.extras["positions"]
  else:
    features, _, where, _ = records.read_svmlight_ranking(
        path, list_size=_LIST_SIZE.value)
    items, _ = records.feature_vector_ids(features, where)
    positions = np.broadcast_to(np.arange(where.shape[1]), where.shape)
  list_size = where.shape[1]
  contexts = None
  if _NUM_CONTEXTS.value > 0:
    contexts = records.random_contexts(
        where.shape[0], list_size, _NUM_CONTEXTS.value, _SEED.value)
  factors = records.bias_factor_ids(positions, contexts, list_size=list_size)
  num_factors = list_size * max(1, _NUM_CONTEXTS.value)
  report = check_identifiability(
      items, factors, where=where, num_factors=num_factors,
      factor_names=records.bias_factor_names(
          num_factors, list_size=list_size, with_contexts=contexts is not None))
  print(report.summary())
  if _OUT.value:
    out_dir = os.path.dirname(os.path.abspath(_OUT.value))
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
      json.dump(report.to_dict(), fh)
    os.replace(tmp, _OUT.value)


if __name__ == "__main__":
  app.run(main)
