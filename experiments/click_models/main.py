r"""Click-model study: fit PBM, UBM, cascade, DCM, DBN and CCM to session logs, compare held-out perplexity.

See ``configs/default.py`` for the commands; the logic is ``ultr_jax.studies.click_models``. A click log may be
read by several processes (``--num_processes=2 --process_id=0|1 --coordinator_address=host:port``, one command
per process): each reads its own row groups and the statistics are merged (``docs/guides/multi_device.md``).
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax import _processes
from ultr_jax.studies.click_models import run_click_model_study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json, table.md/.csv and the figure.")
_PROCESSES = _processes.define_process_flags()
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  _processes.initialize_processes(
    *(_PROCESSES[k].value for k in ("process_id", "num_processes", "coordinator_address"))
  )
  if _PROCESSES["process_id"].value > 0:  # each process reads its own row groups; process 0 writes the results
    run_click_model_study(_CONFIG.value, None)
    return 0
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    run_click_model_study(_CONFIG.value, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
