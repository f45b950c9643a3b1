r"""Online learning to rank: PDGD, DBGD and MGD under the perfect, navigational and informational users.

See ``configs/default.py`` for the commands; the logic is ``ultr_jax.train.online``.
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies.online import run_online_study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json, table.md/.csv and fig_online.png.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    run_online_study(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
