"""ultr_jax.models: flax linen towers (rankers, observation towers, two-tower).

Append your own model modules below with their exports (one block per module).
"""

__all__: list[str] = []

from ultr_jax.models.towers import (  # noqa: E402
  ACTIVATIONS,
  ContextPositionBias,
  DocumentEmbedding,
  FeatureBias,
  LinearRanker,
  MLPRanker,
  PositionBias,
  TwoTower,
  apply_array,
  combine_towers,
  make_ranker,
  num_params,
)

__all__ += [
  "ACTIVATIONS",
  "ContextPositionBias",
  "DocumentEmbedding",
  "FeatureBias",
  "LinearRanker",
  "MLPRanker",
  "PositionBias",
  "TwoTower",
  "apply_array",
  "combine_towers",
  "make_ranker",
  "num_params",
]

from ultr_jax.models.lbd import LBDTower, glorot_bias_init  # noqa: E402

__all__ += ["LBDTower", "glorot_bias_init"]

from ultr_jax.models.sif import SIFBiasTower  # noqa: E402

__all__ += ["SIFBiasTower"]
