"""Config of the fully synthetic identifiability study (Chen et al., ICML 2024).

--config=experiments/identifiability/configs/default.py         # the paper
--config=experiments/identifiability/configs/default.py:smoke   # seconds
"""

import ml_collections

from ultr_jax import studies


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  """The study's config ``arg`` (``""``: the default; else one of ``studies.variants("identifiability")``)."""
  return studies.default_config("identifiability", arg or "default")
