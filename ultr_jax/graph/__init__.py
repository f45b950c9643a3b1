"""ultr_jax.graph: identifiability graph, connectivity, intervention, merging.

Chen et al., "Identifiability Matters" (ICML 2024): the IG check
(Algorithm 1, :mod:`~ultr_jax.graph.connectivity`), node intervention
(Algorithm 2, :mod:`~ultr_jax.graph.intervention`), node merging
(Algorithm 3, :mod:`~ultr_jax.graph.merging`), propensities by intervention
harvesting on the same records (:mod:`~ultr_jax.graph.harvesting`), the feature-space condition of two-tower
models (Hager et al., ICTIR'25, :mod:`~ultr_jax.graph.overlap`) and the
fully synthetic study's data generator (:mod:`~ultr_jax.graph.synthetic`). The study itself (its embedding
fits, Table 1, the figures) is :mod:`ultr_jax.studies.identifiability`.
"""

from ultr_jax.graph.connectivity import (
  IdentifiabilityReport,
  check_identifiability,
  connected_components,
  factor_components,
  star_edges,
)
from ultr_jax.graph.harvesting import (
  HARVESTING_METHODS,
  HarvestedPropensities,
  InterventionSets,
  adjacent_chain_estimate,
  all_pairs_estimate,
  ctr_estimate,
  harvest_propensities,
  intervention_sets,
  intervention_sets_from_counts,
  pivot_estimate,
)
from ultr_jax.graph.intervention import (
  Intervention,
  apply_interventions,
  intervention_cost,
  intervention_plan,
  random_intervention_plan,
)
from ultr_jax.graph.merging import MergePlan, apply_merge, merge_plan
from ultr_jax.graph.mst import UnionFind, prim_mst
from ultr_jax.graph.overlap import check_feature_overlap, feature_cell_ids
from ultr_jax.graph.records import (
  ClickCounts,
  bias_factor_ids,
  bias_factor_names,
  click_counts,
  feature_vector_ids,
  gather_click_counts,
  merge_click_counts,
  random_contexts,
  read_svmlight_ranking,
)
from ultr_jax.graph.synthetic import DESIGN_GRAPHS, generate_design_dataset

__all__ = [
  "ClickCounts",
  "DESIGN_GRAPHS",
  "HARVESTING_METHODS",
  "HarvestedPropensities",
  "IdentifiabilityReport",
  "Intervention",
  "InterventionSets",
  "MergePlan",
  "UnionFind",
  "adjacent_chain_estimate",
  "all_pairs_estimate",
  "apply_interventions",
  "apply_merge",
  "bias_factor_ids",
  "bias_factor_names",
  "check_feature_overlap",
  "check_identifiability",
  "click_counts",
  "connected_components",
  "ctr_estimate",
  "factor_components",
  "feature_cell_ids",
  "feature_vector_ids",
  "gather_click_counts",
  "generate_design_dataset",
  "harvest_propensities",
  "intervention_cost",
  "intervention_plan",
  "intervention_sets",
  "intervention_sets_from_counts",
  "merge_click_counts",
  "merge_plan",
  "pivot_estimate",
  "prim_mst",
  "random_contexts",
  "random_intervention_plan",
  "read_svmlight_ranking",
  "star_edges",
]
