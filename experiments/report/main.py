r"""One report: every ULTR method under every simulated bias, with the identifiability check beside it.

This file is intentionally tiny: the logic lives in ``ultr_jax.studies.report.run_report`` (tested).

  python experiments/report/main.py --config=experiments/report/configs/default.py --workdir=/tmp/report
  python experiments/report/main.py --config=experiments/report/configs/default.py:smoke --workdir=/tmp/rs

Writes ``results.json``, ``table.md``, ``table.csv`` and ``heatmap.png`` to ``--workdir``.
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies import report
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json, table.md/csv and heatmap.png.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    report.run_report(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
