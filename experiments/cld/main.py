r"""CLD study binary: Tables 2/3 analogues and the sweeps of Figures 3-6 (spec-cld).

The logic lives in ``ultr_jax/studies/cld.py``; see ``configs/default.py`` for the commands.
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies import cld as study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke|:paper].", lock_config=True
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
