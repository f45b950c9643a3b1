r"""Click-model study config: ``get_config()`` (the default) or ``get_config("smoke")``.

  python experiments/click_models/main.py --config=experiments/click_models/configs/default.py \
      --workdir=/tmp/click_models
  # seconds-long variant used by the tests:
  python experiments/click_models/main.py --config=experiments/click_models/configs/default.py:smoke \
      --workdir=/tmp/click_models_smoke
  # your own log: one row per (session, shown document), columns session_id, query_id, doc_id,
  # position (1-based), click; 80% of the sessions fit each model, 20% score it
  ... --config.click_log=/path/to/sessions.tsv
  # Baidu-ULTR's raw session files, all of them (a query line, then one line per shown document):
  ... --config.click_log='/data/baidu_ultr/part-*.gz' --config.click_log_format=baidu
  # a directory of logs larger than memory, only the PBM, the conversion kept for the next run
  # (then --config.click_log=/data/shards: session shards are read in any format):
  ... --config.click_log=/data/logs/ "--config.fit_models=('pbm',)" "--config.ctr_models=()" \
      --config.click_log_shard_dir=/data/shards

A click log is streamed, never read whole (``ultr_jax.studies.click_models.score_click_log``): a file,
a glob or a directory, in click_log_format (tsv, baidu, yandex, yandex_personalized) or Parquet session
shards; a text log is converted to session shards first (a temporary directory unless
click_log_shard_dir), each model is fitted from the sufficient statistics of one pass over the
training sessions and scored over another; the held-out sessions are a hash of each session's index
and the seed. click_log_batch_size sessions per batch; memory holds the batches and the statistics.

The default simulates 60k sessions (100 queries x 10 documents, a noisy logging ranker) from each of
PBM, UBM, DCM, DBN, CCM and trust bias, three seeds each, and fits all seven models (the cascade only where
no session has two clicks) to every log.
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("click_models")``)."""
  return studies.default_config("click_models", arg or "default")
