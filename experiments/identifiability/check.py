r"""Identifiability check (Algorithm 1, Chen et al. ICML 2024) for a dataset.

  # ULTRA-format directory (bias factor = position):
  python experiments/identifiability/check.py \
      --data=../shared/data/identifiability/K=2 --out=/tmp/k2.json
  # SVMlight/LETOR file (qid: fields or a .query file; read by
  # ultr_jax.data.load_svmlight) whose line order is the logged ranking, with
  # 200 random context types (bias factor = (context, position)):
  python experiments/identifiability/check.py --data=train.txt \
      --num_contexts=200 --out=/tmp/ctx.json
  # A click log (query_id, doc_id, position, click[, impressions] rows; see
  # ultr_jax.data.read_click_log): the IG of its positions, and the position
  # propensities harvested from it (all-pairs, pivot, and the naive CTR):
  python experiments/identifiability/check.py --click_log=log.tsv --out=/tmp/log.json
  # Baidu-ULTR's raw session files, all of them (a glob or a directory works for
  # every format, and for the Parquet session shards of convert_click_log):
  python experiments/identifiability/check.py --click_log='baidu_ultr/part-*.gz' \
      --click_log_format=baidu --out=/tmp/baidu.json

A click log is streamed, never read whole: it is reduced in one pass to its
clicks and impressions per (query-document, position) cell, which is all the
check and the harvesting read (ultr_jax.studies.identifiability.click_log), so
memory grows with the distinct cells, not with the log. Raw Baidu/Yandex logs
are converted to temporary session shards on the way (--shard_dir keeps them).

Writes ``{"identifiable": bool, "num_components": K, "components": [[ids]]}``
(plus a few statistics) to ``--out``; bias-factor ids are positions, or
``context * list_size + position`` with contexts. With ``--click_log`` it
also writes ``"propensities": {method: [one value per position, null where
not identified]}``, normalised to 1 at the top position.

A session log may be read by several processes (``--num_processes=2 --process_id=0|1
--coordinator_address=host:port``, one command each): each reduces its own row
groups and the counts are merged through jax.distributed; process 0 writes.
"""

import json
import os
import tempfile

from absl import app, flags
import numpy as np

from ultr_jax import _processes
from ultr_jax.data import CLICK_LOG_FORMATS, load_svmlight, load_ultra
from ultr_jax.graph import check_identifiability
from ultr_jax.graph import records
from ultr_jax.studies.identifiability.click_log import check_click_log, click_log_counts, propensity_table

_DATA = flags.DEFINE_string("data", None, "ULTRA directory (with settings.json) or SVMlight file.")
_CLICK_LOG = flags.DEFINE_string(
  "click_log",
  None,
  "A click log instead of --data (a file, a glob or a directory, in --click_log_format, or Parquet session "
  "shards): streamed; also harvests propensities.",
)
_CLICK_LOG_FORMAT = flags.DEFINE_enum(
  "click_log_format",
  "tsv",
  list(CLICK_LOG_FORMATS),
  "tsv: query_id, doc_id, position, click rows; baidu: a raw Baidu-ULTR session file (part-XXXXX.gz); "
  "yandex / yandex_personalized: the Yandex Relevance Prediction / Personalized Web Search Challenge log.",
)
_SHARD_DIR = flags.DEFINE_string(
  "shard_dir", None, "Keep a raw Baidu/Yandex log's conversion to session shards here (default: a temporary one)."
)
_SPLIT = flags.DEFINE_string("split", "train", "ULTRA split to read.")
_OUT = flags.DEFINE_string("out", None, "Where to write the JSON report.")
_LIST_SIZE = flags.DEFINE_integer("list_size", 10, "Displayed positions per SVMlight query (top-k).")
_MAX_LABEL = flags.DEFINE_float("max_label", 4, "SVMlight: labels outside [0, max_label] are an error.")
_NUM_CONTEXTS = flags.DEFINE_integer("num_contexts", 0, "Random context types per item (0: positions only).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random contexts.")
_FEATURE_IDENTITY = flags.DEFINE_bool(
  "feature_identity", False, "ULTRA: identify documents by feature vector instead of document id."
)
_PROCESSES = _processes.define_process_flags()
flags.mark_flags_as_mutual_exclusive(["data", "click_log"], required=True)


def _click_log_report():
  counts = click_log_counts(_CLICK_LOG.value, format=_CLICK_LOG_FORMAT.value, shard_dir=_SHARD_DIR.value)
  report, out = check_click_log(counts)
  print(report.summary())
  print("Position propensities harvested from the log (1 at the top; - not identified):")
  print(propensity_table(out))
  return out


def main(argv):
  del argv
  _processes.initialize_processes(
    *(_PROCESSES[k].value for k in ("process_id", "num_processes", "coordinator_address"))
  )
  if _CLICK_LOG.value:
    out = _click_log_report()
    if _PROCESSES["process_id"].value == 0:  # every process holds the merged counts; process 0 writes
      _write(out)
    return
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
    # The library's loader: its checks (grammar, finite values, float32 range, duplicate ids), qid: or .query groups.
    ds = load_svmlight(path, list_size=_LIST_SIZE.value, max_label=_MAX_LABEL.value, cache=False)
    where = ds.where
    items, _ = records.feature_vector_ids(ds.features, where)
    positions = np.broadcast_to(np.arange(where.shape[1]), where.shape)
  list_size = where.shape[1]
  contexts = None
  if _NUM_CONTEXTS.value > 0:
    contexts = records.random_contexts(where.shape[0], list_size, _NUM_CONTEXTS.value, _SEED.value)
  factors = records.bias_factor_ids(positions, contexts, list_size=list_size)
  num_factors = list_size * max(1, _NUM_CONTEXTS.value)
  report = check_identifiability(
    items,
    factors,
    where=where,
    num_factors=num_factors,
    factor_names=records.bias_factor_names(num_factors, list_size=list_size, with_contexts=contexts is not None),
  )
  print(report.summary())
  _write(report.to_dict())


def _write(result: dict):
  if _OUT.value:
    out_dir = os.path.dirname(os.path.abspath(_OUT.value))
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".tmp")
    try:
      with os.fdopen(fd, "w") as fh:
        json.dump(result, fh)
      os.replace(tmp, _OUT.value)
    except BaseException:
      if os.path.exists(tmp):
        os.unlink(tmp)
      raise


if __name__ == "__main__":
  app.run(main)
