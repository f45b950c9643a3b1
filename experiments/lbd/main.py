r"""LBD study: individual-level bias, eta sweep, Table 1 / Figure 3 / Figure 4 analogues (spec-lbd 5.2).

Tiny on purpose: the logic is ``ultr_jax.studies.lbd.run_lbd_study`` (tested, importable).

  python experiments/lbd/main.py --config=experiments/lbd/configs/default.py --workdir=/tmp/lbd
  python experiments/lbd/main.py --config=experiments/lbd/configs/default.py:smoke --workdir=/tmp/lbd_smoke
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies import lbd as lbd_study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json, table.md and the figures.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    lbd_study.run_lbd_study(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
