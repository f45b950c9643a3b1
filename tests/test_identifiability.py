"""Tests for node merging / intervention, the embedding fits and the study.

Theorem 1, Propositions 1-3 of Chen et al. (ICML 2024) as property tests;
paper reproductions (Table 1, Figures 3b and 4b) are marked slow.
"""

import functools
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import minimum_spanning_tree

from ultr_jax.graph import (
  DESIGN_GRAPHS,
  apply_interventions,
  apply_merge,
  check_identifiability,
  generate_design_dataset,
  intervention_cost,
  intervention_plan,
  merge_plan,
  prim_mst,
  random_intervention_plan,
  UnionFind,
)
from ultr_jax.studies.identifiability import embedding, fit_dla, fit_regression_em, fit_two_tower
from ultr_jax.studies.identifiability import table1 as study

FITS = {"dla": fit_dla, "regression_em": fit_regression_em, "two_tower": fit_two_tower}


def _small(k, seed=0):
  return generate_design_dataset(DESIGN_GRAPHS[k], seed=seed, block_size=40, num_queries=60, borrow=4)


def _components(ds):
  return check_identifiability(ds.doc_ids, ds.extras["positions"], where=ds.where, num_factors=ds.list_size)


# ---------------------------------------------------------------- generator


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_generator_has_design_components(k):
  ds = generate_design_dataset(DESIGN_GRAPHS[k], seed=k)
  assert ds.doc_ids.shape == (1150, 10)
  rep = _components(ds)
  assert rep.num_components == k
  # no document twice in a list, every document shown, one label per doc
  srt = np.sort(ds.doc_ids, axis=1)
  assert not (srt[:, 1:] == srt[:, :-1]).any()
  assert np.unique(ds.doc_ids).size == 10000


# ------------------------------------------------------------------- MST


@pytest.mark.parametrize("seed", range(5))
def test_prim_matches_scipy_total_weight(seed):
  rng = np.random.default_rng(seed)
  k = int(rng.integers(2, 12))
  w = rng.uniform(0.1, 1, (k, k))
  w = np.triu(w, 1) + np.triu(w, 1).T
  edges = prim_mst(w, start=int(rng.integers(k)))
  assert len(edges) == k - 1
  ref = minimum_spanning_tree(np.triu(w, 1)).sum()
  np.testing.assert_allclose(sum(c for _, _, c in edges), ref)


@pytest.mark.parametrize("seed", range(5))
def test_merge_plan_is_mst_over_components(seed):
  rng = np.random.default_rng(seed)
  t = 30
  x = rng.normal(size=(t, 3))
  raw = rng.integers(0, 6, t)
  labels = np.array([np.flatnonzero(raw == raw[i]).min() for i in range(t)])
  comps = np.unique(labels)
  plan = merge_plan(x, labels)
  assert len(plan.pairs) == comps.size - 1
  # reference: dense component cost matrix (Eq. 8) + scipy MST
  d = np.linalg.norm(x[:, None] - x[None], axis=-1)
  c = np.array([[d[np.ix_(labels == a, labels == b)].min() for b in comps] for a in comps])
  np.fill_diagonal(c, 0)
  ref = minimum_spanning_tree(np.triu(c + 1e-300 * (c == 0), 1)).sum()
  np.testing.assert_allclose(plan.total_cost, ref, rtol=1e-9)
  for (a, b), cost in zip(plan.pairs, plan.costs):
    assert labels[a] != labels[b]
    np.testing.assert_allclose(d[a, b], cost)
  # the K - 1 merges connect all components (a spanning tree)
  uf = UnionFind(t)
  for a, b in plan.pairs:
    uf.union(int(labels[a]), int(labels[b]))
  assert len({uf.find(int(c)) for c in comps}) == 1


@pytest.mark.parametrize("k,pairs", [(2, [(4, 3)]), (3, [(4, 3), (7, 6)]), (4, None)])
def test_merge_positions_as_in_paper(shared_data, k, pairs):
  from ultr_jax.data import load_ultra

  ds = load_ultra(shared_data / "identifiability" / f"K={k}", repeated_docs="allow")  # as published
  rep = _components(ds)
  plan = merge_plan(np.arange(10.0), rep.labels, rep.present)
  got = sorted(tuple(sorted(p)) for p in plan.pairs)
  if pairs is None:  # K=4: spec 3.1.2 names 2&3, 5&6, 7&8
    assert got == [(2, 3), (5, 6), (7, 8)]
  else:
    assert got == sorted(tuple(sorted(p)) for p in pairs)
  merged = apply_merge(ds.extras["positions"], plan.canonical)
  assert check_identifiability(ds.doc_ids, merged, where=ds.where).identifiable


# ----------------------------------------------------------- intervention


def test_intervention_cost_matches_proposition1_monte_carlo():
  # Var[Omega | r'] = (1/(N R)) * C(x, t1, t2), with R = 1 (r' = r).
  r, o1, o2, n = 0.4, 0.7, 0.3, 2000
  rng = np.random.default_rng(0)
  c1 = rng.binomial(n, r * o1, 200_000) / n
  c2 = rng.binomial(n, r * o2, 200_000) / n
  omega = (c1 / r) / o1 - (c2 / r) / o2  # o'(t) = ctr / r'(x)
  np.testing.assert_allclose(omega.var(), intervention_cost(r, o1, o2) / n, rtol=0.02)
  assert abs(omega.mean()) < 3e-3


@pytest.mark.parametrize("seed", range(4))
def test_intervention_plan_is_brute_force_argmin(seed):
  rng = np.random.default_rng(seed)
  ds = _small(2, seed)
  rep = _components(ds)
  r_hat = rng.uniform(0.05, 1, 400)
  o_hat = rng.uniform(0.05, 1, 10)
  plan = intervention_plan(ds.doc_ids, ds.where, rep.labels, r_hat, o_hat)
  assert len(plan) == 1
  best = np.inf
  for q, a in itertools.product(range(ds.num_queries), range(10)):
    x = ds.doc_ids[q, a]
    for b in range(10):
      if rep.labels[a] != rep.labels[b]:
        best = min(best, intervention_cost(r_hat[x], o_hat[a], o_hat[b]))
  p = plan[0]
  assert ds.doc_ids[p.query, p.position_a] == p.doc
  np.testing.assert_allclose(p.cost, best)
  np.testing.assert_allclose(intervention_cost(r_hat[p.doc], o_hat[p.position_a], o_hat[p.position_b]), best)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_interventions_connect_the_graph(k):
  ds = _small(k)
  rep = _components(ds)
  rng = np.random.default_rng(k)
  for plan in (
    intervention_plan(ds.doc_ids, ds.where, rep.labels, rng.uniform(0.1, 1, 400), rng.uniform(0.1, 1, 10)),
    random_intervention_plan(rng, ds.doc_ids, ds.where, rep.labels),
  ):
    assert len(plan) == k - 1
    out = apply_interventions(ds, plan)
    assert out.num_queries == ds.num_queries + k - 1
    assert _components(out).identifiable
    for i, p in enumerate(plan):
      new = out.doc_ids[ds.num_queries + i]
      assert new[p.position_b] == p.doc
      assert sorted(new) == sorted(ds.doc_ids[p.query])


def test_shared_data_intervention_matches_published_swap(shared_data):
  """The published K=2_node_intervention swaps positions 0 and 4 of a list
  whose position-0 document has label 4 (spec 3.1.2)."""
  from ultr_jax.data import load_ultra

  ds = load_ultra(shared_data / "identifiability" / "K=2", repeated_docs="allow")  # as published
  rep = _components(ds)
  r_true = np.asarray(study.true_relevance(np.arange(5.0)))
  doc_label = np.zeros(10000)
  doc_label[ds.doc_ids.ravel()] = ds.labels.ravel()
  o = np.asarray(study.PBM_EXAMINATION)
  plan = intervention_plan(ds.doc_ids, ds.where, rep.labels, r_true[doc_label.astype(int)], o)
  (p,) = plan
  assert {p.position_a, p.position_b} == {0, 4}
  assert doc_label[p.doc] == 4


# ------------------------------------------------------------ embedding fits


def _records(seed=0, n_items=12, n_factors=4, n=40):
  rng = np.random.default_rng(seed)
  items = rng.integers(0, n_items, n)
  factors = rng.integers(0, n_factors, n)
  r = rng.uniform(0.1, 0.9, n_items)
  o = rng.uniform(0.2, 1.0, n_factors)
  return items, factors, r, o


@pytest.mark.parametrize("name", sorted(FITS))
def test_fit_padding_equals_truncation(name):
  items, factors, r, o = _records()
  ctr = r[items] * o[factors]
  with jax.enable_x64(True):
    kw = dict(num_items=12, num_factors=4, epochs=50)
    key = jax.random.key(1)
    r1, o1 = FITS[name](key, items, factors, ctr, where=np.ones(40, bool), **kw)
    pad = lambda a, v: np.concatenate([a, np.full(7, v, a.dtype)])  # noqa
    r2, o2 = FITS[name](key, pad(items, 3), pad(factors, 2), pad(ctr, 0.9), where=pad(np.ones(40, bool), False), **kw)
  np.testing.assert_allclose(r1, r2, rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(o1, o2, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", sorted(FITS))
def test_fit_vmap_equals_loop_and_compiles_once(name, assert_compiles_once):
  items, factors, r, o = _records(1)
  ctr = r[items] * o[factors]

  def one(k):
    return FITS[name](k, items, factors, ctr, where=np.ones(40, bool), num_items=12, num_factors=4, epochs=30)

  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(0), 3)
    rb, ob = jax.vmap(one)(keys)
    # The entry point as a user calls it (it jits inside): three keys, one compile.
    fit = functools.partial(FITS[name], where=np.ones(40, bool), num_items=12, num_factors=4, epochs=30)
    outs = assert_compiles_once(fit, lambda i: ((keys[i], items, factors, ctr), {}), jit=False)
    for i, (ri, oi) in enumerate(outs):
      np.testing.assert_allclose(rb[i], ri, rtol=1e-9)
      np.testing.assert_allclose(ob[i], oi, rtol=1e-9)


def _mixed_records(seed=0, n_items=15, n_factors=5, n=60):
  """Items with 0, 1 and several records, some duplicated, 8 padded slots."""
  rng = np.random.default_rng(seed)
  items = np.concatenate([np.arange(6), rng.integers(6, n_items - 2, n - 6), np.zeros(8, np.int64)])
  factors = np.concatenate([rng.integers(0, n_factors - 1, n), np.full(8, n_factors - 1)])
  where = np.arange(n + 8) < n
  r = rng.uniform(0.1, 0.9, n_items)
  o = rng.uniform(0.2, 1.0, n_factors)
  ctr = np.where(where, r[items] * o[factors], 0.7)
  return items, factors, where, ctr


_VARIANTS = [
  ("dla", {}),
  ("dla", {"o_update": "least_squares", "init_obs": 1.0}),
  ("regression_em", {}),
  ("regression_em", {"variant": "paper"}),
  ("two_tower", {}),
]


@pytest.mark.parametrize("name,kw", _VARIANTS)
def test_fit_dense_layout_equals_segment_sum(name, kw):
  """The host-built dense layout (concrete ids) and the one-record-per-row
  segment_sum layout (ids traced under jit) give the same fit, including
  items and factors without records."""
  items, factors, where, ctr = _mixed_records()
  args = dict(num_items=15, num_factors=5, epochs=200, **kw)
  with jax.enable_x64(True):
    key = jax.random.key(3)
    r1, o1 = FITS[name](key, items, factors, ctr, where=where, **args)
    traced = jax.jit(lambda i, f, w: FITS[name](key, i, f, ctr, where=w, **args))
    r2, o2 = traced(items, factors, where)
  lay = embedding.record_layout(items, factors, where, num_items=15, num_factors=5)
  assert lay.single_rec is not None and lay.tier_rec  # both paths are used
  np.testing.assert_allclose(r1, r2, rtol=1e-10, atol=1e-13)
  np.testing.assert_allclose(o1, o2, rtol=1e-10, atol=1e-13)
  assert np.isfinite(r1).all() and np.isfinite(o1).all()


@pytest.mark.parametrize("name,kw", _VARIANTS)
def test_fit_runs_equals_single_runs(name, kw):
  items, factors, where, ctr = _mixed_records(1)
  rng = np.random.default_rng(0)
  ctrs = np.clip(ctr * rng.uniform(0.8, 1.2, (3, ctr.size)), 0, 1)
  args = dict(num_items=15, num_factors=5, epochs=150, **kw)
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(0), 3)
    lay = embedding.record_layout(items, factors, where, num_items=15, num_factors=5)
    rb, ob = jax.jit(lambda k, c: embedding.fit_runs(name, k, c, where=where, layout=lay, **args))(keys, ctrs)
    for i in range(3):
      ri, oi = FITS[name](keys[i], items, factors, ctrs[i], where=where, **args)
      np.testing.assert_allclose(rb[i], ri, rtol=1e-10, atol=1e-13)
      np.testing.assert_allclose(ob[i], oi, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name,kw", _VARIANTS)
def test_cpu_compiler_option_changes_speed_not_fits(name, kw):
  """The fits compiled with the CPU-only option (embedding.compiler_options("cpu")) equal the fits compiled with
  XLA's defaults, which every other backend gets; on a machine with an accelerator, also the fits run there."""
  items, factors, where, ctr = _mixed_records(1)
  ctrs = np.clip(ctr * np.random.default_rng(0).uniform(0.8, 1.2, (2, ctr.size)), 0, 1)
  args = dict(num_items=15, num_factors=5, epochs=150, **kw)
  assert embedding.compiler_options("cpu") == embedding.CPU_COMPILER_OPTIONS
  assert embedding.compiler_options("gpu") is None and embedding.compiler_options("tpu") is None
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(0), 2)
    lay = embedding.record_layout(items, factors, where, num_items=15, num_factors=5)
    fit = lambda k, c: embedding.fit_runs(name, k, c, where=where, layout=lay, **args)  # noqa: E731
    cpu = jax.device_get(jax.jit(fit, compiler_options=embedding.compiler_options("cpu"))(keys, ctrs))
    default = jax.device_get(jax.jit(fit, compiler_options=embedding.compiler_options("gpu"))(keys, ctrs))
    chex.assert_trees_all_close(cpu, default, rtol=1e-10, atol=1e-13)
    accelerators = [d for d in jax.devices() if d.platform != "cpu"]
    if accelerators:  # the accelerator path: backend_jit with XLA's defaults, on the accelerator
      with jax.default_device(accelerators[0]):
        there = jax.device_get(embedding.backend_jit(fit)(keys, ctrs))
      chex.assert_trees_all_close(there, cpu, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name,kw", [("two_tower", {})])
def test_padded_layouts_share_shapes_and_fits(name, kw, assert_compiles_once):
  # The two-tower reads every layout array but tier_fac (read by DLA and
  # Regression-EM, whose padded Table 1 rows test_main_smoke checks against
  # expected_metrics); one method keeps this test at ~7 s (3 compiles).
  """pad_layouts gives two different record sets one set of shapes (one
  compiled fit) and the same fits as their own layouts."""
  a = _mixed_records(0)
  b = _mixed_records(2, n=75)
  n = b[0].size
  lays = [embedding.record_layout(i, f, w, num_items=15, num_factors=5) for i, f, w, _ in (a, b)]
  pads = embedding.pad_layouts(lays, n)
  shapes = [[x.shape for x in jax.tree.leaves(p)] for p in pads]
  assert shapes[0] == shapes[1]
  assert [x.shape for x in jax.tree.leaves(lays[0])] != shapes[0]
  args = dict(num_items=15, num_factors=5, epochs=20, **kw)
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(0), 2)
    fit = lambda c, w, l: embedding.fit_runs(name, keys, c, where=w, layout=l, **args)  # noqa: E731
    own = jax.jit(fit)
    ctrs = [np.stack([c, c * 0.9]) for _, _, _, c in (a, b)]
    padded = [
      ((np.pad(c2, ((0, 0), (0, n - w.size))), np.pad(w, (0, n - w.size)), pad), {})
      for c2, (_, _, w, _), pad in zip(ctrs, (a, b), pads)
    ]
    outs = assert_compiles_once(fit, lambda i: padded[i], calls=2)  # both record sets: one program
    for c2, (_, _, w, _), lay, (r2, o2) in zip(ctrs, (a, b), lays, outs):
      r1, o1 = own(c2, w, lay)
      np.testing.assert_allclose(r1, r2, rtol=1e-10, atol=1e-13)
      np.testing.assert_allclose(o1, o2, rtol=1e-10, atol=1e-13)


def test_count_le_matches_searchsorted():
  """The per-row count of sorted CTRs <= a threshold is np.searchsorted(side="right"), ties and +inf padding
  included."""
  rng = np.random.default_rng(0)
  c = np.sort(np.concatenate([rng.uniform(0, 1, (3, 40)), np.full((3, 6), np.inf)], axis=1), axis=1)
  c[2, :8] = 0.25  # ties
  c = np.sort(c, axis=1)
  with jax.enable_x64(True):
    thr = np.concatenate([rng.uniform(0, 1.2, (3, 50)), c[:, :40:7], np.zeros((3, 1))], axis=1)
    k = jax.vmap(lambda q: embedding._count_le(jnp.asarray(c), q), in_axes=1, out_axes=1)(jnp.asarray(thr))
  want = np.stack([np.searchsorted(c[i], thr[i], side="right") for i in range(3)])
  np.testing.assert_array_equal(np.asarray(k), want)


def _single_grid(rng, small, w=60):
  """A one-record grid ``[1, 4, w]`` of CTRs and its mask: moderate CTRs,
  CTRs in ``small``, zero CTRs and empty cells, and CTRs up to 0.9."""
  c = np.stack(
    [
      rng.uniform(0.05, 0.9, w),
      rng.uniform(*small, w),
      np.concatenate([rng.uniform(0.1, 0.5, w - 15), np.zeros(15)]),
      rng.uniform(0.1, 0.9, w),
    ]
  )[None]
  valid = np.ones_like(c, bool)
  valid[0, 2, -10:] = False  # empty cells
  return np.where(valid, c, 0.0), valid


def test_dla_single_sums_match_the_records():
  """DLA's closed-form one-record sums equal the record-by-record sum to
  float64 rounding, with clipped r' (c > 1/a), zero CTRs, empty cells, o' =
  0 and a row whose series term u sits near _SERIES_TOL (there the u^2
  term is ~1e-9 relative: dropping it fails); a row beyond it is flagged."""
  c, valid = _single_grid(np.random.default_rng(3), small=(0.0095, 0.012))
  o = np.array([[0.7, 0.5, 0.3, 0.0]])
  eps = embedding._EPS

  def records(c, o):
    r = np.clip(c * o[..., None] / (o[..., None] ** 2 + eps), 0, 1)
    return np.where(valid, c * r / (r * r + eps), 0.0).sum(-1)

  with jax.enable_x64(True):
    cs, ws = jnp.asarray(c), jnp.asarray(valid, jnp.float64)
    srt = embedding._sorted_singles(cs, ws, embedding._dla_moments)
    c_min = jnp.min(jnp.where(cs > 0, cs, jnp.inf), axis=-1)
    total, ok = embedding._dla_single_sums(srt, c_min, jnp.asarray(o))
    assert bool(ok)
    want = records(c, o)
    np.testing.assert_allclose(np.asarray(total), want, rtol=1e-13, atol=0)
    assert (c[0, 0] > o[0, 0] + eps / o[0, 0]).any()  # some r' clipped
    u = eps / (o[0, 1] / (o[0, 1] ** 2 + eps) * c[0, 1].min()) ** 2
    assert 1e-5 < u <= embedding._SERIES_TOL
    _, ok = embedding._dla_single_sums(srt, c_min * 0.5, jnp.asarray(o))
    assert not bool(ok)  # u beyond the tolerance: the caller sums records


def test_regression_em_single_sums_match_the_records():
  """Regression-EM's ("repo") closed-form one-record sums equal the
  record-by-record sum to float64 rounding, with clipped r' (c > o'), zero
  CTRs, empty cells, and a row whose series term q sits near _SERIES_TOL
  (there the q^2 term is ~1e-9 relative: dropping it fails); a row beyond
  it is flagged."""
  c, valid = _single_grid(np.random.default_rng(5), small=(1e-5, 4.9e-4))
  o = np.array([[0.6, 5e-4, 0.3, 0.45]])
  eps = embedding._EPS

  def records(c, o):
    o = o[..., None]
    r = np.clip(c + (1 - c) * (1 - o) * c / (o + eps - o * c), 0, 1)
    t = c + (1 - c) * (1 - r) * o / (1 - o * r)
    return np.where(valid, t, 0.0).sum(-1)

  with jax.enable_x64(True):
    srt = embedding._sorted_singles(jnp.asarray(c), jnp.asarray(valid, jnp.float64), embedding._rem_moments)
    total, ok = embedding._rem_single_sums(srt, jnp.asarray(o))
    assert bool(ok)
    np.testing.assert_allclose(np.asarray(total), records(c, o), rtol=1e-13, atol=0)
    assert (c[0, 0] > o[0, 0] + eps).any()  # some r' clipped
    q = eps * (1 - o[0, 1] * c[0, 1]) / (o[0, 1] * (1 - c[0, 1]) ** 2)
    assert 1e-5 < q.max() <= embedding._SERIES_TOL
    _, ok = embedding._rem_single_sums(srt, jnp.asarray(o * [1, 0.1, 1, 1]))
    assert not bool(ok)  # q beyond the tolerance: the caller sums records


@pytest.mark.parametrize("ctrs", ["extreme", "moderate", "skewed"])
@pytest.mark.parametrize("name", ["dla", "regression_em"])
def test_single_record_sums_equal_record_by_record(name, ctrs):
  """DLA and Regression-EM ("repo") sum the one-record items' o' terms in
  closed form (sorted CTRs and a series); with moderate CTRs (the series
  holds every epoch; "skewed": most one-record items on one factor, whose
  records span several grid rows), and with CTRs 0, near 1, in one crowded
  bin and clipped (r' = 1), and a factor whose o' goes tiny (the records are
  summed), they equal the record-by-record algorithm (traced ids: no closed
  form)."""
  rng = np.random.default_rng(1)
  n_single = 200
  items = np.concatenate([np.arange(n_single), np.repeat(np.arange(n_single, n_single + 20), 3)])
  single_p = [0.8, 0.05, 0.05, 0.05, 0.05] if ctrs == "skewed" else None
  factors = np.concatenate([rng.choice(5, n_single, p=single_p), rng.integers(0, 5, 60)])
  lay = embedding.record_layout(items, factors, np.ones(items.size, bool), num_items=n_single + 20, num_factors=5)
  assert (lay.single_factor is not None) == (ctrs == "skewed")
  if ctrs != "extreme":
    ctr = rng.uniform(0.05, 0.6, items.size) * (1.0 - 0.15 * factors)
  else:
    ctr = rng.uniform(0, 0.9, items.size)
    ctr[:10] = 0.0
    ctr[10:20] = 0.999
    ctr[20:40] = 0.3  # crowded bin
    ctr[factors == 4] *= 1e-4  # o'(4) goes tiny
  where = np.ones(items.size, bool)
  args = dict(num_items=n_single + 20, num_factors=5, epochs=300)
  fit = FITS[name]
  with jax.enable_x64(True):
    key = jax.random.key(2)
    r1, o1 = fit(key, items, factors, ctr, where=where, **args)
    traced = jax.jit(lambda i, f: fit(key, i, f, ctr, where=where, **args))
    r2, o2 = traced(items, factors)
  assert np.isfinite(np.asarray(r1)).all()
  np.testing.assert_allclose(r1, r2, rtol=1e-10, atol=1e-13)
  np.testing.assert_allclose(o1, o2, rtol=1e-10, atol=1e-13)


def test_iterate_exact_stop_equals_all_epochs():
  """A map reaching a fixed point (and one in a 2-cycle) stops early with
  the very state of running every epoch; a non-periodic one runs on."""
  calls = []

  def count(x):
    calls.append(1)
    return x

  with jax.enable_x64(True):
    fixed = lambda s: (jnp.floor(s[0] / 2), s[1])  # noqa: E731
    cycle = lambda s: (s[0], -s[1])  # noqa: E731
    drift = lambda s: (s[0] + 1.0, s[1])  # noqa: E731
    s0 = (jnp.array([1e6, 37.0]), jnp.array([1.0, -2.0]))
    for step, epochs in ((fixed, 1000), (cycle, 1001), (drift, 999)):
      fast = jax.jit(lambda s: embedding._iterate(step, s, epochs))(s0)
      slow = jax.jit(lambda s: embedding._iterate(step, s, epochs, exact_stop=False))(s0)
      want = s0
      for _ in range(epochs):
        want = step(want)
      for a, b, c in zip(fast, slow, want):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)
  # the early stop does skip blocks: a while loop that stops after the first
  # unchanged block runs few iterations
  n = []
  jax.jit(lambda s: embedding._iterate(lambda x: jax.debug.callback(lambda: n.append(1)) or x, s, 640))(jnp.zeros(2))
  jax.effects_barrier()
  assert 0 < len(n) <= 128


def _connected_records(seed):
  """Records whose IG over 4 factors is connected (every item at 2 factors)."""
  rng = np.random.default_rng(seed)
  n_items = 30
  items = np.repeat(np.arange(n_items), 2)
  factors = np.concatenate([rng.choice(4, 2, replace=False) for _ in range(n_items)])
  return items, factors, rng.uniform(0.1, 0.9, n_items), rng.uniform(0.2, 0.9, 4)


@pytest.mark.parametrize("seed", range(3))
def test_theorem1_connected_ig_identifies_relevance(seed):
  items, factors, r, o = _connected_records(seed)
  assert check_identifiability(items, factors).identifiable
  ctr = r[items] * o[factors]
  with jax.enable_x64(True):
    for k in range(3):
      rp, op = fit_dla(
        jax.random.key(k),
        items,
        factors,
        ctr,
        where=np.ones(items.size, bool),
        num_items=30,
        num_factors=4,
        epochs=3000,
        o_update="least_squares",
      )
      rp = np.asarray(rp)
      fit_err = np.abs(rp[items] * np.asarray(op)[factors] - ctr).max()
      assert fit_err < 1e-6
      ratio = r / rp
      assert ratio.std() / ratio.mean() < 1e-4


def test_theorem1_disconnected_ig_is_not_identifiable():
  # two components: items 0..9 on factors {0, 1}, items 10..19 on {2, 3}
  items = np.repeat(np.arange(20), 2)
  factors = np.array([0, 1] * 10 + [2, 3] * 10)
  rng = np.random.default_rng(0)
  r = rng.uniform(0.1, 0.6, 20)
  o = np.array([0.9, 0.6, 0.5, 0.3])
  ctr = r[items] * o[factors]
  rep = check_identifiability(items, factors)
  assert rep.num_components == 2
  # the alpha/beta construction of Appendix A.1 fits exactly ...
  alpha, beta = 1.3, 0.7
  in1 = np.arange(20) < 10
  r2 = np.where(in1, alpha * r, beta * r)
  o2 = np.where(np.arange(4) < 2, o / alpha, o / beta)
  np.testing.assert_allclose(r2[items] * o2[factors], ctr)
  ratio = r / r2
  assert ratio.std() / ratio.mean() > 0.1
  # ... and ALS from different initialisations ends at different scales
  with jax.enable_x64(True):
    scales = []
    for k in range(3):
      rp, op = fit_dla(
        jax.random.key(k),
        items,
        factors,
        ctr,
        where=np.ones(40, bool),
        num_items=20,
        num_factors=4,
        epochs=2000,
        o_update="least_squares",
      )
      rp = np.asarray(rp)
      np.testing.assert_allclose(rp[items] * np.asarray(op)[factors], ctr, atol=1e-6)
      scales.append((r / rp)[in1].mean() / (r / rp)[~in1].mean())
  assert np.ptp(scales) > 1e-2


def test_proposition3_tree_merge_keeps_exact_fit():
  ds = _small(4)
  rep = _components(ds)
  plan = merge_plan(np.arange(10.0), rep.labels, rep.present)
  m = study.run_method(
    jax.random.key(0),
    ds,
    method="dla",
    runs=2,
    epochs=3000,
    num_clicks=1e15,
    canonical=plan.canonical,
    o_update="least_squares",
  )
  assert m["click_mse"].max() < 1e-10


def test_proposition4_error_bound_after_merging():
  """|r'(x1)/r(x1) - r'(x2)/r(x2)| <= sum of |o(ta)-o(tb)|/o'(ta) on the tree."""
  ds = _small(3)
  rep = _components(ds)
  plan = merge_plan(np.arange(10.0), rep.labels, rep.present)
  m = study.run_method(
    jax.random.key(0),
    ds,
    method="dla",
    runs=1,
    epochs=3000,
    num_clicks=1e15,
    canonical=plan.canonical,
    o_update="least_squares",
  )
  r_true = np.zeros(400)
  r_true[ds.doc_ids.ravel()] = np.asarray(study.true_relevance(ds.labels)).ravel()
  ratio = m["relevance"][0] / r_true
  o_true = np.asarray(study.PBM_EXAMINATION)
  o_pred = m["observation"][0]
  bound = sum(abs(o_true[a] - o_true[b]) / o_pred[a] for a, b in plan.pairs)
  # On a chain of components the bound is attained; allow the fit's residual.
  assert m["click_mse"][0] < 1e-10
  assert np.ptp(ratio) <= bound * (1 + 1e-3)
  assert np.ptp(ratio) > 1e-3  # merging does introduce an error here


# ------------------------------------------------------------------ study


def test_no_debias_is_deterministic_and_nm_recovers_ranking():
  ds = _small(2)
  key = jax.random.key(0)
  nd = study.run_method(key, ds, method="no_debias", runs=2, epochs=1)
  assert nd["mcc"].std() < 1e-3
  nm = study.run_method(key, ds, method="dla", runs=2, epochs=1000, canonical=study.node_merging_canonical(ds))
  assert (nm["mcc"] > nd["mcc"].max()).all()
  assert (nm["click_mse"] < 1e-7).all()


def test_click_cache_simulates_once_per_dataset_and_key():
  """Rows sharing a click cache reuse one simulation per (dataset, key) and
  give exactly the numbers of uncached calls."""
  ds = generate_design_dataset(DESIGN_GRAPHS[2], block_size=40, num_queries=60, borrow=3)
  key = jax.random.key(4)
  cache = {}
  run = lambda k, m, **kw: study.run_method(  # noqa: E731
    k, ds, method=m, runs=2, epochs=50, **kw
  )
  cached = [run(key, m, click_cache=cache) for m in ("no_debias", "dla")]
  assert len(cache) == 1
  run(jax.random.key(5), "dla", click_cache=cache)
  assert len(cache) == 2
  for m, c in zip(("no_debias", "dla"), cached):
    fresh = run(key, m)
    for name in fresh:
      np.testing.assert_array_equal(c[name], fresh[name])


def test_main_smoke(tmp_path, subprocess_env):
  import json
  import pathlib
  import subprocess
  import sys

  root = pathlib.Path(__file__).parent.parent
  subprocess.run(
    [
      sys.executable,
      "experiments/identifiability/main.py",
      "--config=experiments/identifiability/configs/default.py:smoke",
      f"--workdir={tmp_path}",
      "--config.figures=('4b',)",
      "--config.context.enabled=False",
    ],
    check=True,
    capture_output=True,
    cwd=str(root),
    env=subprocess_env,
  )
  res = json.loads((tmp_path / "results.json").read_text())
  assert len(res) == 10
  for row in ("DLA", "DLA + node intervention", "DLA + node merging"):
    assert set(res[row]) >= {"mcc", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "click_mse"}
  assert (tmp_path / "table.md").exists() and (tmp_path / "fig4b.png").exists()
  assert any((tmp_path / "jax_cache").iterdir())  # compilation_cache_dir
  assert "(XLA cache " in (tmp_path / "table.md").read_text()  # cold or warm
  from ultr_jax.testing import assert_matches_expected

  assert_matches_expected(res, "identifiability_smoke")


# -------------------------------------------------------- paper (slow)

PAPER_TABLE1 = {  # mean, std of MCC / nDCG@1 / nDCG@10
  "DLA": ((0.707, 0.105), (0.836, 0.061), (0.886, 0.040)),
  "Regression-EM": ((0.580, 0.117), (0.786, 0.035), (0.857, 0.027)),
  "Two-Tower": ((0.830, 0.050), (0.883, 0.034), (0.925, 0.022)),
}


@pytest.mark.slow
def test_table1_reproduction(shared_data):
  from ultr_jax.data import load_ultra

  ds = load_ultra(shared_data / "identifiability" / "K=2")
  rows = study.table1(
    jax.random.key(0),
    ds,
    runs=10,
    num_docs=10000,
    epochs={"dla": 20_000, "regression_em": 100_000, "two_tower": 20_000},
  )
  s = {k: study.summarise(v) for k, v in rows.items() if not k.startswith("_")}
  nd = s["No debias"]
  assert abs(nd["mcc"]["mean"] - 0.521) < 2e-3
  assert abs(nd["ndcg@1"]["mean"] - 0.711) < 2e-3
  assert abs(nd["ndcg@10"]["mean"] - 0.820) < 2e-3
  for name, targets in PAPER_TABLE1.items():
    for metric, (mu, sd) in zip(("mcc", "ndcg@1", "ndcg@10"), targets):
      assert abs(s[name][metric]["mean"] - mu) <= 2 * sd, (name, metric)
    assert s[f"{name} + node intervention"]["mcc"]["mean"] >= 0.98
    nm = s[f"{name} + node merging"]
    assert abs(nm["mcc"]["mean"] - 0.975) <= 0.003, name
    for k in (1, 3, 5, 10):
      assert nm[f"ndcg@{k}"]["mean"] > 0.999, name
    for suffix in ("", " + node intervention", " + node merging"):
      assert s[name + suffix]["click_mse"]["mean"] < 1e-7, name + suffix
  for name in ("DLA", "Two-Tower"):
    assert s[f"{name} + node intervention"]["mcc"]["mean"] > 0.9995


@pytest.mark.slow
def test_figure3b_and_4b_node_merging(shared_data):
  from ultr_jax.data import load_ultra

  key = jax.random.key(0)
  for k, target in ((2, 0.975), (3, 0.959), (4, 0.739)):
    ds = load_ultra(shared_data / "identifiability" / f"K={k}")
    m = study.run_method(key, ds, method="dla", runs=3, epochs=20_000, canonical=study.node_merging_canonical(ds))
    assert abs(m["mcc"].mean() - target) < 0.01, k
  ds = load_ultra(shared_data / "identifiability" / "K=2")
  for a, target in ((1, 0.745), (2, 0.846), (3, 0.975)):
    m = study.run_method(
      key, ds, method="dla", runs=3, epochs=20_000, canonical=study.node_merging_canonical(ds, pairs=[(a, 4)])
    )
    assert abs(m["mcc"].mean() - target) < 0.01, a


def test_context_study_end_to_end():
  from ultr_jax.studies.identifiability import context as cs

  f, y, wh = cs.synthetic_letor(0, num_queries=100, num_docs=300)
  w = np.random.default_rng(0).uniform(-1, 1, 10)
  out = cs.context_study(
    jax.random.key(0), f, y, wh, num_contexts=50, w=w, runs=2, two_tower_epochs=50, log=lambda *_: None
  )
  k = out["report"]["num_components"]
  assert k > 1 and out["merge_pairs"] == k - 1
  for row in ("No debias", "DLA", "DLA + node merging", "Two-Tower", "Two-Tower + node merging"):
    assert out[row]["mcc"].shape == (2,)  # the runs, fitted in one batched call
    assert np.isfinite(out[row]["mcc"]).all()
  # two runs, two click simulations
  assert out["No debias"]["click_mse"][0] != out["No debias"]["click_mse"][1]
  # the exact least-squares DLA fits the clicks closely with and without merging
  assert (out["DLA"]["click_mse"] < out["No debias"]["click_mse"]).all()


def test_table1_logs_a_progress_line_per_row():
  lines = []
  rows = study.table1(
    jax.random.key(0),
    _small(2),
    runs=1,
    epochs={"dla": 2, "regression_em": 2, "two_tower": 2},
    num_clicks=1e4,
    log=lines.append,
  )
  names = ["No debias"] + [
    f"{n}{s}" for n, _ in study.TABLE1_METHODS for s in ("", " + node intervention", " + node merging")
  ]
  assert [line.split(": mcc")[0] for line in lines] == [
    f"[identifiability] {i}/10 Table 1 {n}" for i, n in enumerate(names, 1)
  ]
  assert all(line.endswith("s left") for line in lines[:-1]) and lines[-1].endswith(", done")
  assert set(names) <= set(rows)
