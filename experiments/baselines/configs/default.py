r"""Default config of the baselines study (PBM, eta = 1, synthetic data).

  python experiments/baselines/main.py \
      --config=experiments/baselines/configs/default.py --workdir=/tmp/baselines
  # seconds-long variant used by the tests:
  python experiments/baselines/main.py \
      --config=experiments/baselines/configs/default.py:smoke --workdir=/tmp/smoke
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("baselines")``)."""
  return studies.default_config("baselines", arg or "default")
