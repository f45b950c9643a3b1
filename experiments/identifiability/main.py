r"""Reproduces the fully synthetic study of "Identifiability Matters" (ICML'24).

Table 1 (K = 2: No debias, DLA / Regression-EM / Two-Tower, each raw, + node
intervention, + node merging; 10 runs) and Figures 3a, 3b, 4a, 4b and 6.

  python experiments/identifiability/main.py \
      --config=experiments/identifiability/configs/default.py \
      --config.data=../shared/data/identifiability/K=2 \
      --config.data_root=../shared/data/identifiability --workdir=/tmp/ident
  # smoke run (seconds), embedded generator:
  python experiments/identifiability/main.py \
      --config=experiments/identifiability/configs/default.py:smoke \
      --workdir=/tmp/ident_smoke

Writes ``results.json`` (row -> metric -> {mean, std}), ``table.md``,
``figures.json`` and ``fig3a.png`` ... ``fig6.png`` to ``--workdir``; the logic
is ``ultr_jax.studies.identifiability``.
"""

from absl import app, flags
from ml_collections import config_flags

from ultr_jax.studies.identifiability import run_identifiability_study
from ultr_jax.train.results import run_in_progress

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/default.py[:smoke]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_DATA = flags.DEFINE_string("data", None, "Shortcut for --config.data (an ULTRA dataset, e.g. K=2).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  cfg = _CONFIG.value
  if _DATA.value:
    cfg.data = _DATA.value
  with run_in_progress(_WORKDIR.value) as run:  # IN_PROGRESS until the results are written
    run_identifiability_study(cfg, _WORKDIR.value)
  run.report()  # the table and the files written, on stdout (the logs are on stderr)
  return run.exit_code  # non-zero when a run diverged (on_divergence='mark')


if __name__ == "__main__":
  app.run(main)
