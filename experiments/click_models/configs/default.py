r"""Click-model study config: ``get_config()`` (the default) or ``get_config("smoke")``.

  python experiments/click_models/main.py --config=experiments/click_models/configs/default.py \
      --workdir=/tmp/click_models
  # seconds-long variant used by the tests:
  python experiments/click_models/main.py --config=experiments/click_models/configs/default.py:smoke \
      --workdir=/tmp/click_models_smoke
  # your own log: one row per (session, shown document), columns session_id, query_id, doc_id,
  # position (1-based), click; 80% of the sessions fit each model, 20% score it
  ... --config.click_log=/path/to/sessions.tsv
  # Baidu-ULTR's raw session file (a query line, then one line per shown document):
  ... --config.click_log=/data/baidu_ultr/part-00001.gz --config.click_log_format=baidu

The default simulates 60k sessions (100 queries x 10 documents, a noisy logging ranker) from each of
PBM, UBM, DCM, DBN, CCM and trust bias, three seeds each, and fits all seven models (the cascade only where
no session has two clicks) to every log.
"""

from ultr_jax.studies.click_models import default_click_model_config


def get_config(arg: str = ""):
  config = default_click_model_config()
  if arg == "smoke":
    config.num_seeds = 2
    config.num_queries = 6
    config.list_size = 5
    config.num_sessions = 600
    config.true_models = ("pbm", "dcm")
    config.max_iters = 100
  elif arg:
    raise ValueError(f"unknown config variant {arg!r} (expected '' or 'smoke')")
  return config
