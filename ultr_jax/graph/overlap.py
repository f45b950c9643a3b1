r"""The feature-space identifiability condition of two-tower models (Hager, Zoeter & de Rijke, ICTIR'25).

A two-tower click model :math:`P(C = 1 \mid x, k) = f(r(x) + o(k))` is identified from clicks when the bias
factors are connected, either by the same document shown at several positions (the document graph of
:func:`~ultr_jax.graph.check_identifiability`, Chen et al. ICML'24) or, for a relevance tower that is smooth in
its input, by *overlapping feature distributions* across positions (ICTIR'25, Section 3: two positions whose
documents come from overlapping regions of feature space are tied through :math:`r`). This module checks the
second condition on a log: every document's feature vector is projected on the log's leading principal
directions and binned by quantiles into a cell, and positions are the nodes of the IG with the cells in place of
documents, so two positions are connected when some cell was seen at both. A deterministic logger that sorts each
list by its features shows every document at one position only (the document graph splits), yet its positions
share feature regions across queries, so this condition holds; it fails when positions see disjoint regions.
"""

from typing import Optional

import numpy as np

from ultr_jax.graph.connectivity import IdentifiabilityReport, check_identifiability
from ultr_jax.graph.records import feature_vector_ids

__all__ = ["check_feature_overlap", "feature_cell_ids"]


def feature_cell_ids(
  features: np.ndarray, *, where: Optional[np.ndarray] = None, num_bins: int = 8, num_directions: int = 2
) -> tuple[np.ndarray, int]:
  r"""Cells of feature space: quantile bins of the projections on the leading principal directions.

  .. math::
      z_i = V_{:m}^\top (x_i - \bar x), \qquad \mathrm{cell}_i = (\mathrm{bin}_b(z_{i1}), \dots, \mathrm{bin}_b(z_{im}))

  with :math:`V` the principal directions of the valid rows, :math:`m` = ``num_directions`` and :math:`b` =
  ``num_bins`` quantile bins per direction.

  Args:
    features: ``float[..., F]`` feature vectors.
    where: ``bool[...]`` valid rows (None: all); masked rows get id -1.
    num_bins: bins per direction (>= 1).
    num_directions: principal directions used (>= 1; at most ``F``).

  Returns:
    ``(ids int32[...], num_cells)`` as :func:`~ultr_jax.graph.feature_vector_ids`.

  >>> x = np.array([[[0.0], [1.0]], [[2.0], [3.0]]])
  >>> ids, n = feature_cell_ids(x, num_bins=2, num_directions=1)
  >>> print(ids.tolist(), n)
  [[0, 0], [1, 1]] 2
  """
  if int(num_bins) < 1 or int(num_directions) < 1:
    raise ValueError(f"num_bins and num_directions must be >= 1, got {num_bins}, {num_directions}")
  f = np.asarray(features, np.float64)
  lead = f.shape[:-1]
  rows = f.reshape(-1, f.shape[-1])
  m = np.ones(rows.shape[0], bool) if where is None else np.broadcast_to(np.asarray(where, bool), lead).reshape(-1)
  if not m.any():
    return np.full(lead, -1, np.int32), 0
  centred = rows - rows[m].mean(axis=0)
  _, _, vt = np.linalg.svd(centred[m], full_matrices=False)
  z = centred @ vt[: min(int(num_directions), vt.shape[0])].T
  edges = np.quantile(z[m], np.linspace(0, 1, int(num_bins) + 1)[1:-1], axis=0)  # [b - 1, m]
  bins = np.stack([np.searchsorted(edges[:, j], z[:, j], side="right") for j in range(z.shape[1])], axis=-1)
  return feature_vector_ids(bins.astype(np.float32).reshape(lead + (-1,)), np.asarray(m).reshape(lead))


def check_feature_overlap(
  features: np.ndarray,
  positions: np.ndarray,
  *,
  where: Optional[np.ndarray] = None,
  list_size: Optional[int] = None,
  num_bins: int = 8,
  num_directions: int = 2,
) -> IdentifiabilityReport:
  r"""Are the positions of a log connected through overlapping feature cells (ICTIR'25's condition)?

  The IG check (:func:`~ultr_jax.graph.check_identifiability`) with the cells of :func:`feature_cell_ids` as
  items and the positions as bias factors: identifiable iff one component.

  Args:
    features: ``float[Q, L, F]`` the displayed documents' features.
    positions: ``int[Q, L]`` their 0-based positions.
    where: ``bool[Q, L]`` valid items (None: all).
    list_size: the number of positions (None: the largest position + 1).
    num_bins: quantile bins per direction.
    num_directions: principal directions.

  Returns:
    An :class:`~ultr_jax.graph.IdentifiabilityReport` over the positions.

  >>> x = np.array([[[0.0], [1.0]], [[2.0], [3.0]]])  # each position sees its own region only: not connected
  >>> check_feature_overlap(x, np.array([[0, 1], [0, 1]]), num_bins=4, num_directions=1).num_components
  2
  >>> check_feature_overlap(x, np.array([[0, 1], [1, 0]]), num_bins=2, num_directions=1).identifiable
  True
  """
  ids, _ = feature_cell_ids(features, where=where, num_bins=num_bins, num_directions=num_directions)
  m = ids >= 0
  return check_identifiability(np.where(m, ids, 0), np.asarray(positions), where=m, num_factors=list_size)
