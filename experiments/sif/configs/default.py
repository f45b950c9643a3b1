r"""Default config of the SIF study (spec-sif 7.1 T6/T7 toy; position-only and position+trust).

  python experiments/sif/main.py --config=experiments/sif/configs/default.py --workdir=/tmp/sif
  # seconds-long variant used by the tests:
  python experiments/sif/main.py --config=experiments/sif/configs/default.py:smoke --workdir=/tmp/sif_smoke
  # T7 at the spec's length (alpha = 0.6, DLA / SIF-exp / SIF-dec, 20k steps; about 5 minutes):
  python experiments/sif/main.py --config=experiments/sif/configs/default.py:t7 --workdir=/tmp/sif_t7
  # T8 alone (propensity recovery, position-only, 10k steps, logged and shuffled display order):
  python experiments/sif/main.py --config=experiments/sif/configs/default.py:t8 --workdir=/tmp/sif_t8
  # SVMlight data (MSLR-WEB30K / Yahoo!) instead of the toy:
  ... --config.data.source=svmlight --config.data.train_path=... --config.data.valid_path=... \
      --config.data.test_path=...
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("sif")``)."""
  return studies.default_config("sif", arg or "default")
