r"""The ULTR methods since 2023 (DR, safe DR / PRPO, disentangled two-towers, UPE, two-tower identifiability, the
loss-by-correction grid), each paper's claim as a hypothesis on simulated logs.

See ``configs/default.py`` for the commands; the logic is ``ultr_jax.studies.since2023``.
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies import since2023
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json and table.md.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    since2023.run(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code


if __name__ == "__main__":
  app.run(main)
