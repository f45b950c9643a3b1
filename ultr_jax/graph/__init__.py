"""ultr_jax.graph: identifiability graph, connectivity, intervention, merging."""

from ultr_jax.graph.connectivity import (
    IdentifiabilityReport,
    check_identifiability,
    connected_components,
    factor_components,
    star_edges,
)

__all__ = [
    "IdentifiabilityReport",
    "check_identifiability",
    "connected_components",
    "factor_components",
    "star_edges",
]
