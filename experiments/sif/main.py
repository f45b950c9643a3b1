r"""SIF study: T6 (oracle mechanism) and T7/T8 (learned towers) on the toy of spec-sif 7.1.

The logic lives in ``ultr_jax/studies/sif.py`` (importable, tested).

  python experiments/sif/main.py --config=experiments/sif/configs/default.py --workdir=/tmp/sif
  python experiments/sif/main.py --config=experiments/sif/configs/default.py:smoke --workdir=/tmp/s
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies import sif as study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json, table.md and figures.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    study.run(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
