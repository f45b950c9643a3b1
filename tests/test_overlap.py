"""The feature-space identifiability condition of two-tower models (ICTIR'25): ``graph.check_feature_overlap``."""

import numpy as np

from ultr_jax import graph


def test_overlap_identifies_a_sorting_logger_that_the_document_graph_does_not():
  """Every document shown once (no swaps: the document graph splits), yet positions share feature regions."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 4, 1))
  positions = np.argsort(np.argsort(-x[..., 0], axis=1), axis=1)
  doc_ids, _ = graph.feature_vector_ids(x)
  assert not graph.check_identifiability(doc_ids, positions).identifiable
  assert graph.check_feature_overlap(x, positions, num_bins=8, num_directions=1).identifiable


def test_disjoint_feature_ranges_per_position_are_not_identified():
  rng = np.random.default_rng(1)
  positions = np.broadcast_to(np.arange(4), (50, 4))
  x = (positions + 0.9 * rng.random((50, 4)))[..., None]  # position k only sees features in [k, k + 0.9)
  rep = graph.check_feature_overlap(x, positions, num_bins=8, num_directions=1)
  assert not rep.identifiable and rep.num_components == 4
  ids, n = graph.feature_cell_ids(x, where=np.zeros((50, 4), bool))
  assert n == 0 and np.all(ids == -1)
