"""Tests of the top-k selection simulator (spec-cld 2.3-2.9, 10.1.7)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import simulation
from ultr_jax.data import make_synthetic
from ultr_jax.simulation import simulate_topk_log, topk_click_probability, topk_log_dataset, topk_selection_data

# relevant at positions 1 and 3, irrelevant at 2, 4, 6 ... (0-based 0, 2 relevant)
LABELS = jnp.array([4.0, 0.0, 3.0, 1.0, 0.0, 4.0, 0.0])


def test_click_probability_formula():
  p, e = topk_click_probability(LABELS, k=5, eta=1.0, noise=0.1, threshold=2)
  rho = np.where(np.arange(7) < 5, 1.0 / np.arange(1, 8), 0.0)
  r = np.asarray(LABELS) >= 2
  np.testing.assert_allclose(np.asarray(e), rho, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(p), rho * np.where(r, 1.0, 0.1), rtol=1e-6)


def test_per_session_ctrs_match_spec():
  """10.1.7 with the per-session PBM sampler: eta=1, k=5, eps-=0.1, 20,000 sessions."""
  attraction = simulation.binary_relevance_probability(LABELS, threshold=2, eps=0.1)
  out = simulation.pbm(jax.random.key(0), attraction, eta=1.0, top_k=5, num_sessions=20000)
  ctr = np.asarray(out["clicks"].mean(0))
  se = np.sqrt(0.34 * 0.66 / 20000)
  assert abs(ctr[2] - 1 / 3) < 4 * se  # relevant at p = 3
  assert abs(ctr[1] - 0.05) < 4 * np.sqrt(0.05 * 0.95 / 20000)  # irrelevant at p = 2
  np.testing.assert_array_equal(ctr[5:], 0.0)  # beyond k
  np.testing.assert_array_equal(np.asarray(out["shown"]), np.arange(7) < 5)


def test_aggregated_log_ctrs_sessions_and_cutoff():
  q = 50
  labels = jnp.broadcast_to(LABELS, (q, 7))
  where = jnp.ones((q, 7), bool).at[-1, 4:].set(False)
  log = simulate_topk_log(
    jax.random.key(1), labels, where=where, k=5, num_sessions=40000, eta=1.0, noise=0.1, threshold=2
  )
  n = np.asarray(log["sessions"])
  assert n.sum() == 40000
  # uniform query draw: counts are Multinomial(N, 1/Q)
  assert abs(n.mean() - 800) < 1e-6 and n.std() < 4 * np.sqrt(800)
  counts = np.asarray(log["click_counts"])
  np.testing.assert_array_equal(counts[:, 5:], 0.0)
  np.testing.assert_array_equal(counts[-1, 4:], 0.0)  # padding
  ctr = counts[:-1].sum(0) / n[:-1].sum()
  assert abs(ctr[2] - 1 / 3) < 4 * np.sqrt(0.34 * 0.66 / n[:-1].sum())
  assert abs(ctr[1] - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n[:-1].sum())
  np.testing.assert_allclose(np.asarray(log["clicks"]), counts / n[:, None], rtol=1e-6)
  np.testing.assert_array_equal(np.asarray(log["shown"]), np.asarray(where) & (np.arange(7) < 5))


def test_assumed_eta_changes_only_the_propensities():
  labels = jnp.broadcast_to(LABELS, (4, 7))
  where = jnp.ones((4, 7), bool)
  a = simulate_topk_log(jax.random.key(2), labels, where=where, k=3, num_sessions=100, eta=1.0)
  b = simulate_topk_log(jax.random.key(2), labels, where=where, k=3, num_sessions=100, eta=1.0, assumed_eta=2.0)
  np.testing.assert_array_equal(np.asarray(a["clicks"]), np.asarray(b["clicks"]))
  np.testing.assert_allclose(np.asarray(b["examination"][0]), [1, 0.25, 1 / 9, 0, 0, 0, 0], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(b["true_examination"][0]), [1, 0.5, 1 / 3, 0, 0, 0, 0], rtol=1e-6)


@pytest.mark.parametrize("num_hidden", [0, 2])
def test_selection_data_orders_hides_and_binarises(num_hidden):
  splits = make_synthetic(60, 10, 10, list_size=8, num_features=6, seed=3)
  out, w = topk_selection_data(splits, num_hidden=num_hidden, threshold=2, logging_fraction=0.2, logging_steps=100)
  for raw, ds in zip(splits, out):
    assert ds.num_features == 6 - num_hidden
    s = ds.extras["logging_scores"]
    # production order: logging scores descend along every list
    assert np.all(np.diff(np.where(ds.where, s, -1e30), axis=-1)[ds.where[:, 1:]] <= 0)
    np.testing.assert_array_equal(ds.labels, (ds.extras["grades"] >= 2) & ds.where)
    assert ds.where.sum() == raw.where.sum()
  # the logging ranker uses the hidden features (selection on unobservables)
  if num_hidden:
    assert np.any(np.abs(w[-num_hidden:]) > 1e-3)


def test_log_dataset_views():
  splits = make_synthetic(30, 5, 5, list_size=6, num_features=4, seed=0)
  ds = splits.train
  log = simulate_topk_log(jax.random.key(3), ds.labels, where=ds.where, k=2, num_sessions=20)
  seen = np.asarray(log["sessions"]) > 0
  view = topk_log_dataset(ds, log, shown_only=True)
  assert view.num_queries == seen.sum()
  np.testing.assert_array_equal(view.where.sum(-1), 2)
  full = topk_log_dataset(ds, log)
  np.testing.assert_array_equal(full.where, ds.where[seen])
  assert set(full.extras) >= {"sessions", "clicks", "shown", "examination", "positions"}
