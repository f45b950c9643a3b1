r"""Click-model study: fit PBM, UBM, cascade, DCM, DBN and CCM to session logs, compare held-out perplexity.

See ``configs/default.py`` for the commands; the logic is ``ultr_jax.studies.click_models``.
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies.click_models import run_click_model_study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Path to a config file, e.g. configs/default.py[:smoke].", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for results.json, table.md/.csv and the figure.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    run_click_model_study(_CONFIG.value, _WORKDIR.value)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
