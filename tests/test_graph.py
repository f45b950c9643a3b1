"""Tests for ultr_jax.graph.connectivity (IG + connected components kernel)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from scipy.sparse import csgraph

from ultr_jax.graph import check_identifiability, connected_components, factor_components, star_edges


def _scipy_labels(n, s, d):
  a = scipy.sparse.coo_matrix((np.ones(len(s)), (s, d)), shape=(n, n))
  k, lab = csgraph.connected_components(a, directed=False)
  # canonicalise: label = smallest node id of the component
  mins = np.full(k, n)
  np.minimum.at(mins, lab, np.arange(n))
  return k, mins[lab]


@pytest.mark.parametrize("seed", range(12))
def test_matches_scipy_random_graphs(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(1, 80))
  e = int(rng.integers(0, 120))
  s = rng.integers(0, n, e)
  d = rng.integers(0, n, e)
  if e:  # self-loops and duplicate edges
    s[: e // 10] = d[: e // 10]
    s = np.concatenate([s, s[: e // 5]])
    d = np.concatenate([d, d[: e // 5]])
  mask = rng.random(s.shape[0]) < 0.7
  # padded/masked edges carry garbage ids that must be ignored
  s_pad = np.where(mask, s, -7)
  d_pad = np.where(mask, d, n + 5)
  labels, k, ok = connected_components(s_pad, d_pad, num_nodes=n, edge_mask=mask)
  k_ref, lab_ref = _scipy_labels(n, s[mask], d[mask])
  assert bool(ok)
  assert int(k) == k_ref
  np.testing.assert_array_equal(np.asarray(labels), lab_ref)


def test_no_edges_and_all_masked():
  labels, k, ok = connected_components(jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32), num_nodes=5)
  assert int(k) == 5 and bool(ok)
  np.testing.assert_array_equal(labels, np.arange(5))
  labels, k, _ = connected_components(
    jnp.array([0, 1]), jnp.array([4, 3]), num_nodes=5, edge_mask=jnp.array([False, False])
  )
  assert int(k) == 5


def test_random_path_converges_in_log_rounds():
  n = 4096
  perm = np.random.default_rng(0).permutation(n)
  s, d = perm[:-1], perm[1:]
  # exactly 8 rounds must not suffice for plain propagation (diameter 4095),
  # yet the hook-and-shortcut kernel converges within ~3 log2(n) rounds.
  labels, k, ok = connected_components(s, d, num_nodes=n, max_iters=36)
  assert bool(ok) and int(k) == 1
  assert np.all(np.asarray(labels) == 0)


def test_max_iters_reports_not_converged():
  n = 4096
  perm = np.random.default_rng(1).permutation(n)
  _, _, ok = connected_components(perm[:-1], perm[1:], num_nodes=n, max_iters=2)
  assert not bool(ok)


def test_compiles_once(assert_compiles_once):
  """Three edge lists of new values: one trace under jit, and no recompile when called as it is."""

  def edges(i):
    rng = np.random.default_rng(3 + i)
    return (rng.integers(0, 10, 7), rng.integers(0, 10, 7)), {"edge_mask": rng.random(7) < 0.5}

  assert_compiles_once(lambda s, d, edge_mask: connected_components(s, d, num_nodes=10, edge_mask=edge_mask), edges)
  assert_compiles_once(functools.partial(connected_components, num_nodes=10), edges, jit=False)


def test_vmap_equals_loop():
  rng = np.random.default_rng(4)
  s = rng.integers(0, 20, (4, 15))
  d = rng.integers(0, 20, (4, 15))
  batched = jax.vmap(lambda a, b: connected_components(a, b, num_nodes=20)[0])(s, d)
  for i in range(4):
    np.testing.assert_array_equal(batched[i], connected_components(s[i], d[i], num_nodes=20)[0])


def _clique_components(items, factors, n_factors):
  """Algorithm 1 as printed: a clique on S[x] for every item x."""
  by_item = {}
  for x, t in zip(items.ravel(), factors.ravel()):
    by_item.setdefault(x, set()).add(t)
  s, d = [], []
  for ts in by_item.values():
    for a in ts:
      for b in ts:
        s.append(a)
        d.append(b)
  return _scipy_labels(n_factors, np.array(s, int), np.array(d, int))


@pytest.mark.parametrize("seed", range(6))
def test_star_edges_equal_clique_components(seed):
  rng = np.random.default_rng(seed)
  q, l, n_items = 30, 6, 40
  items = rng.integers(0, n_items, (q, l))
  factors = rng.integers(0, 25, (q, l))
  labels, present, k, ok = factor_components(items, factors, num_items=n_items, num_factors=25)
  _, lab_ref = _clique_components(items, factors, 25)
  np.testing.assert_array_equal(np.asarray(labels), lab_ref)
  pres = np.zeros(25, bool)
  pres[factors.ravel()] = True
  np.testing.assert_array_equal(present, pres)
  assert int(k) == len(set(lab_ref[pres]))


def test_star_edges_ignore_masked_records():
  items = np.array([[0, 1], [0, 2]])
  factors = np.array([[0, 1], [1, 0]])
  where = np.array([[True, True], [False, True]])
  s, r, m = star_edges(items, factors, num_items=3, where=where)
  # item 0 is only valid at factor 0, so no edge 0-1 from it
  rep = check_identifiability(items, factors, where=where)
  assert rep.num_components == 2
  assert rep.components == [[0], [1]]
  assert m.tolist() == [True, True, False, True]


def test_report_json_and_summary():
  rep = check_identifiability(np.array([[0, 1], [2, 3]]), np.array([[0, 1], [0, 1]]))
  assert not rep.identifiable
  d = rep.to_dict()
  assert d["num_components"] == 2 and d["components"] == [[0], [1]]
  assert "NOT identifiable" in rep.summary()


def test_shared_data_component_structure(shared_data):
  from ultr_jax.data import load_ultra

  expected = {
    "K=1": [list(range(10))],
    "K=2": [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]],
    "K=2_node_intervention": [list(range(10))],
    "K=3": [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]],
    "K=4": [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]],
  }
  for name, comps in expected.items():
    ds = load_ultra(shared_data / "identifiability" / name, repeated_docs="allow")  # the published lists repeat some
    rep = check_identifiability(ds.doc_ids, ds.extras["positions"], where=ds.where)
    assert rep.num_components == len(comps), name
    assert rep.components == comps, name
