r"""Compares the baseline ULTR methods under a simulated click model.

This file is intentionally tiny: the logic lives in
``ultr_jax.studies.baselines.train_and_evaluate`` (tested, importable in Colab).

  python experiments/baselines/main.py \
      --config=experiments/baselines/configs/default.py --workdir=/tmp/baselines

  # smoke run (seconds), another click model, real SVMlight data:
  python experiments/baselines/main.py --config=experiments/baselines/configs/default.py:smoke ...
  ... --config.click_model.name=trust --config.click_model.eta=1.0
  ... --config.data.source=svmlight --config.data.train_path=.../train.txt \
      --config.data.test_path=.../test.txt --config.data.valid_path=.../vali.txt
"""

from absl import app, flags
import jax
from ml_collections import config_flags

import ultr_jax.train
from ultr_jax.studies import baselines
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results, tables and checkpoints.")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host).")
_DEBUG_COMPILES = flags.DEFINE_bool("debug_compiles", False, "Log compilations and tracing-cache misses.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  jax.config.update("jax_log_compiles", _DEBUG_COMPILES.value)
  jax.config.update("jax_explain_cache_misses", _DEBUG_COMPILES.value)
  ultr_jax.train.maybe_initialize_distributed(_DISTRIBUTED.value)
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    baselines.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
