"""Tests of ultr_jax.simulation.streaming: sufficient statistics of every fittable click model against the
session log-likelihood, fits on them against the in-memory fit, streaming and minibatch fits, held-out scores
over a stream against the in-memory scores."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ultr_jax import simulation as sim

NUM_DOCS = 12


def _log(model, seed=0, num_sessions=400, noise=1.0):
  rng = np.random.default_rng(seed)
  attraction = rng.uniform(0.05, 0.95, size=(3, 4)).astype(np.float32)
  log = sim.simulate_session_log(jax.random.key(seed), model, attraction, num_sessions=num_sessions, noise=noise)
  return {k: np.asarray(v) for k, v in log.items()}


def _masked(log, seed=1):
  """The log with the last item of some sessions hidden (its id garbage) and some sessions empty."""
  rng = np.random.default_rng(seed)
  where = log["where"].copy()
  where[rng.random(where.shape[0]) < 0.3, -1] = False
  where[rng.random(where.shape[0]) < 0.05] = False
  ids = np.where(where, log["doc_ids"], 7)
  clicks = np.where(where, log["clicks"], 0.0)
  return {"doc_ids": ids, "clicks": clicks, "where": where}


@functools.cache
def _masked_log(model):
  """``_masked(_log(model))``, simulated once per module (read-only: the tests copy before they change it)."""
  log = _masked(_log(model))
  for v in log.values():
    v.flags.writeable = False
  return log


def _batches(log, size):
  n = log["clicks"].shape[0]
  return [{k: log[k][i : i + size] for k in ("doc_ids", "clicks", "where")} for i in range(0, n, size)]


@pytest.mark.parametrize("model", sim.FITTABLE_CLICK_MODELS)
def test_the_statistics_likelihood_is_the_sum_of_the_session_likelihoods(model):
  """At random logits, on a log with hidden items and empty sessions, gathered in uneven batches."""
  m = sim.get_click_model(model)
  r = sim.statistics_reduction(m)
  log = _masked_log(model)
  stats = sim.gather_click_statistics(model, _batches(log, 37))
  whole = r.sufficient_statistics(log["doc_ids"], log["clicks"], log["where"])
  np.testing.assert_array_equal(stats.keys, whole.keys)  # the merge of the batches is the whole log's
  np.testing.assert_array_equal(stats.counts, whole.counts)
  assert stats.num_sessions == whole.num_sessions == np.any(log["where"], -1).sum()
  assert stats.num_records < log["clicks"].size
  init = m.init(num_docs=NUM_DOCS, list_size=4)
  rng = np.random.default_rng(3)  # NumPy draws: no eager jax.random program per parameter shape
  logits = {k: 0.7 * rng.standard_normal(v.shape).astype(np.float32) for k, v in sorted(init.items())}
  # Both likelihoods jitted (one program each, not an eager dispatch per op).
  expected = np.sum(
    np.asarray(jax.jit(m.session_log_likelihood)(logits, log["doc_ids"], log["clicks"], log["where"]), np.float64)
  )
  got = jax.jit(r.statistics_log_likelihood)(
    logits, jnp.asarray(stats.keys, jnp.int32), jnp.asarray(stats.counts, jnp.float32)
  )
  assert float(got) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("model", sim.FITTABLE_CLICK_MODELS)
def test_the_fit_on_statistics_equals_the_in_memory_fit(model):
  """Both run to a gradient norm of 1e-7 (the default 1e-5 leaves the optimum determined to a few 1e-6)."""
  log = _masked_log(model)
  solve = {"tol": 1e-7, "max_iters": 300}
  data = {"doc_ids": log["doc_ids"], "clicks": log["clicks"], "where": log["where"]}
  full = sim.fit_click_model(model, data, solver=sim.LBFGS(**solve), num_docs=NUM_DOCS)
  stream = sim.fit_click_model(model, _batches(log, 64), solver=sim.Statistics(**solve), num_docs=NUM_DOCS)
  assert stream.converged and full.converged
  assert stream.log_likelihood == pytest.approx(full.log_likelihood, abs=1e-6)
  for k in full.params:
    np.testing.assert_allclose(stream.params[k], full.params[k], atol=1e-6, err_msg=k)


def test_statistics_errors_name_the_problem():
  log = _log("pbm", num_sessions=20)
  stats = sim.gather_click_statistics("pbm", _batches(log, 8))
  with pytest.raises(ValueError, match="kind 'items', expected 'ubm_items'"):
    sim.fit_click_model("ubm", stats, solver=sim.Statistics())
  with pytest.raises(ValueError, match="num_docs = 2"):
    sim.fit_click_model("pbm", stats, solver=sim.Statistics(), num_docs=2)
  with pytest.raises(ValueError, match="different reductions"):
    sim.merge_click_statistics(
      [stats, sim.statistics_reduction(sim.get_click_model("dbn")).sufficient_statistics(log["doc_ids"], log["clicks"])]
    )
  with pytest.raises(ValueError, match="empty"):
    sim.gather_click_statistics("pbm", [])
  with pytest.raises(ValueError, match="more than one click|cascade"):
    sim.gather_click_statistics("cascade", [{"doc_ids": np.array([[0, 1]]), "clicks": np.array([[1.0, 1.0]])}])


def test_a_stream_s_padding_rows_change_nothing():
  """Rows marked ``valid`` False (a fixed-shape stream's padding) are ignored whatever they hold."""
  log = _log("ubm", num_sessions=300)
  batches = _batches(log, 64)
  last = batches[-1]
  pad = 64 - last["clicks"].shape[0]
  padded = {k: np.concatenate([v, np.ones((pad,) + v.shape[1:], v.dtype)]) for k, v in last.items()}
  padded["valid"] = np.arange(64) < 64 - pad
  a = sim.gather_click_statistics("ubm", batches)
  b = sim.gather_click_statistics("ubm", batches[:-1] + [padded])
  np.testing.assert_array_equal(a.keys, b.keys)
  np.testing.assert_array_equal(a.counts, b.counts)
  assert a.num_sessions == b.num_sessions == 300


@pytest.mark.parametrize("model", ["pbm", "ubm", "dbn", "mixture"])
def test_held_out_scores_over_a_stream_equal_the_in_memory_scores(model):
  """At any parameters (random logits here: the scores need no fit to be compared)."""
  log = _masked(_log(model, seed=2))
  m = sim.get_click_model(model)
  logits = m.init(num_docs=NUM_DOCS, list_size=log["clicks"].shape[-1])
  rng = np.random.default_rng(3)  # NumPy draws: no eager jax.random program per parameter shape
  params = m.to_probabilities({k: rng.standard_normal(v.shape).astype(np.float32) for k, v in logits.items()})
  test = {k: v[200:] for k, v in log.items()}
  want = sim.evaluate_click_model(model, params, test["doc_ids"], test["clicks"], where=test["where"])
  got = sim.evaluate_click_model_stream(model, params, _batches(test, 23))
  assert got["num_sessions"] == np.any(test["where"], -1).sum()
  for k in ("log_likelihood", "perplexity", "ctr_perplexity"):
    assert got[k] == pytest.approx(want[k], abs=1e-6), k
  np.testing.assert_allclose(got["perplexity_per_rank"], want["perplexity_per_rank"], atol=1e-6)


@pytest.mark.parametrize("model", ["pbm", "cascade", "dbn"])
def test_a_minibatch_fit_approaches_the_full_batch_fit(model):
  log = _log(model, num_sessions=2000)
  full = sim.fit_click_model(
    model, {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=NUM_DOCS, prior="zero"
  )
  batches = _batches(log, 200)
  optimizer = optax.adam(0.05)
  kwargs = {"num_docs": NUM_DOCS, "prior": "zero"}  # the full fit's objective
  fit = sim.fit_click_model(model, batches, solver=sim.Minibatch(optimizer=optimizer, epochs=60), **kwargs)
  assert fit.iterations == 600
  start = sim.fit_click_model(model, batches, solver=sim.Minibatch(optimizer=optimizer, epochs=1), **kwargs)
  for k in full.params:
    err = np.max(np.abs(np.asarray(fit.params[k]) - np.asarray(full.params[k])))
    assert err < 0.03, (k, err)
    assert err < np.max(np.abs(np.asarray(start.params[k]) - np.asarray(full.params[k]))) or err < 1e-3
  assert fit.log_likelihood == pytest.approx(full.log_likelihood, abs=0.02)


def _count_loop(doc_ids, clicks, where, last_click_state):
  """Reference for the item statistics: a Python loop over sessions and items."""
  counts = {}
  for ids, c, w in zip(doc_ids, clicks, where):
    state = 0
    for r in range(ids.shape[0]):
      if not w[r]:
        continue
      key = (int(ids[r]), r, state) if last_click_state else (int(ids[r]), r)
      n, k = counts.get(key, (0.0, 0.0))
      counts[key] = (n + 1.0, k + float(c[r] > 0.5))
      if c[r] > 0.5:
        state = r + 1
  keys = sorted(counts)
  return np.array(keys, np.int64).reshape(-1, 3 if last_click_state else 2), np.array([counts[k] for k in keys])


@pytest.mark.parametrize("last_click_state", [False, True])
@pytest.mark.parametrize("max_dense_cells", [1 << 25, 40, 1])  # dense, dense then sparse, sparse
def test_item_counts_equal_a_loop_over_the_sessions(last_click_state, max_dense_cells):
  """Batches whose largest document id grows (the table grows, or outgrows its cap), hidden items, empty sessions."""
  from ultr_jax.simulation.click_models.statistics import ItemCounter

  rng = np.random.default_rng(0)
  batches, counter = [], ItemCounter(last_click_state=last_click_state, max_dense_cells=max_dense_cells)
  for b in range(5):
    ids = rng.integers(0, 3 + 4 * b, size=(9, 4))
    clicks = (rng.random((9, 4)) < 0.4).astype(np.float32)
    where = rng.random((9, 4)) < 0.85
    where[0] = False
    batches.append((ids, clicks, where))
    counter.add(ids, clicks, where)
  got = counter.result()
  ids, clicks, where = (np.concatenate(x) for x in zip(*batches))
  keys, counts = _count_loop(ids, clicks, where, last_click_state)
  np.testing.assert_array_equal(got.keys, keys)
  np.testing.assert_array_equal(got.counts, counts)
  assert got.num_sessions == np.any(where, -1).sum()
  assert got.num_docs == ids[where].max() + 1
  assert got.kind == ("ubm_items" if last_click_state else "items")


def test_grouping_by_counting_by_sorting_and_as_bytes_agree():
  from ultr_jax.simulation.click_models import statistics as S

  rng = np.random.default_rng(0)
  keys = np.stack([rng.integers(0, 5, 300), rng.integers(-3, 4, 300), rng.integers(0, 2, 300)], axis=1)
  counts = rng.random((300, 2))
  order = np.lexsort(keys.T[::-1])
  uniq_ref = np.unique(keys, axis=0)  # lexicographic
  sums_ref = np.array([counts[(keys == u).all(1)].sum(0) for u in uniq_ref])
  dense = S._group(keys, counts)
  old = S.DENSE_MIN_CELLS, S.DENSE_CELLS_PER_ROW
  try:
    S.DENSE_MIN_CELLS, S.DENSE_CELLS_PER_ROW = 0, 0
    sorted_ = S._group(keys[order[::-1]], counts[order[::-1]])
  finally:
    S.DENSE_MIN_CELLS, S.DENSE_CELLS_PER_ROW = old
  wide = np.concatenate([keys, rng.integers(0, 2, (300, 1)) * (1 << 40), np.zeros((300, 1), np.int64) + (1 << 40)], 1)
  as_bytes = S._group(wide, counts)  # spans multiply past 2^62: sorted as byte strings
  for uniq, sums in (dense, sorted_):
    np.testing.assert_array_equal(uniq, uniq_ref)
    np.testing.assert_allclose(sums, sums_ref)
  assert as_bytes[0].shape[0] == np.unique(wide, axis=0).shape[0]
  np.testing.assert_allclose(as_bytes[1].sum(0), counts.sum(0))


@pytest.mark.parametrize("model", ["pbm", "ubm"])
def test_a_fit_on_statistics_over_sparse_document_ids_equals_the_full_table_fit(model):
  """Documents 5 apart among 300 ids (most never read): the fit over the read documents alone equals the
  in-memory fit over the whole table, an unread document stays at logit 0, and a start away from 0 on unread
  documents (a warm start) ends at the same optimum, where an unread document's logit is 0."""
  log = dict(_masked_log(model))
  log["doc_ids"] = log["doc_ids"] * 5 + 3
  solve = {"tol": 1e-7, "max_iters": 300}
  data = {"doc_ids": log["doc_ids"], "clicks": log["clicks"], "where": log["where"]}
  full = sim.fit_click_model(model, data, solver=sim.LBFGS(**solve), num_docs=300)
  stats = sim.gather_click_statistics(model, _batches(log, 64))
  fit = sim.fit_click_model(model, stats, solver=sim.Statistics(**solve), num_docs=300)
  assert fit.converged and full.converged
  assert fit.log_likelihood == pytest.approx(full.log_likelihood, abs=1e-6)
  for k in full.params:
    np.testing.assert_allclose(fit.params[k], full.params[k], atol=1e-6, err_msg=k)
  unread = np.setdiff1d(np.arange(300), log["doc_ids"][log["where"]])
  assert unread.size > 250 and np.all(np.asarray(fit.logits["attraction"])[unread] == 0.0)
  init = {k: np.asarray(v) for k, v in fit.logits.items()}
  init["attraction"] = init["attraction"] + np.linspace(-1.0, 1.0, 300, dtype=np.float32)
  warm = sim.fit_click_model(model, stats, solver=sim.Statistics(**solve), num_docs=300, init=init)
  assert warm.converged and fit.params["attraction"].shape == warm.params["attraction"].shape == (300,)
  assert np.all(np.asarray(warm.logits["attraction"])[unread] == 0.0)
  for k in full.params:
    np.testing.assert_allclose(warm.params[k], full.params[k], atol=1e-5, err_msg=k)


def test_a_fit_on_statistics_compiles_once_for_logs_of_similar_sizes(assert_compiles_once):
  """Records and documents are padded to buckets: logs of 300-400 sessions over 12-14 documents share a program."""

  def make(i):
    log = _log("ubm", seed=10 + i, num_sessions=300 + 50 * i)
    stats = sim.gather_click_statistics("ubm", _batches(log, 64))
    return (("ubm", stats), {"num_docs": 12 + i, "l2": 1.0 + i, "solver": sim.Statistics(tol=1e-4 * (i + 1))})

  fit = assert_compiles_once(sim.fit_click_model, make, jit=False)[-1]
  assert fit.params["attraction"].shape == (14,) and fit.converged


def test_the_preconditioned_fit_reaches_the_optimum_where_the_plain_fit_stops_short():
  """On a log where documents are seen 100-1000 times less than ranks, the diagonal preconditioner's fit at the
  default tolerance is at the MAP optimum (scipy's L-BFGS-B in float64 on the same counts, run to a gradient of
  1e-8), while plain L-BFGS stopped at the same tolerance is measurably short of it."""
  import scipy.optimize
  from ultr_jax._optim import lbfgs_minimize

  rng = np.random.default_rng(0)
  attraction = rng.beta(1.0, 3.0, size=(100, 10)).astype(np.float32)
  log = sim.simulate_session_log(jax.random.key(0), "pbm", attraction, num_sessions=20_000, noise=1.0)
  stats = sim.gather_click_statistics("pbm", [{k: np.asarray(log[k]) for k in ("doc_ids", "clicks")}])
  docs, ranks = stats.keys[:, 0], stats.keys[:, 1]
  n, k = stats.counts[:, 0], stats.counts[:, 1]
  num_docs, sessions = stats.num_docs, stats.num_sessions

  def objective64(theta):  # the MAP objective per session and its gradient, NumPy float64
    a, o = theta[:num_docs], theta[num_docs:]
    sa, so = 1 / (1 + np.exp(-a[docs])), 1 / (1 + np.exp(-o[ranks]))
    q = sa * so
    value = 0.5 * theta @ theta - np.sum(k * np.log(q) + (n - k) * np.log1p(-q))
    d = k - (n - k) * q / (1 - q)  # d loglik / d log q
    grad = theta.copy()
    grad[:num_docs] -= np.bincount(docs, d * (1 - sa), num_docs)
    grad[num_docs:] -= np.bincount(ranks, d * (1 - so), 10)
    return value / sessions, grad / sessions

  best = scipy.optimize.minimize(
    objective64,
    np.zeros(num_docs + 10),
    jac=True,
    method="L-BFGS-B",
    options={"ftol": 0, "gtol": 1e-12, "maxiter": 50_000},
  )
  fit = sim.fit_click_model("pbm", stats, solver=sim.Statistics())
  got = np.concatenate([np.asarray(fit.logits["attraction"]), np.asarray(fit.logits["examination"])])
  assert fit.converged
  assert np.abs(best.jac).max() < 1e-8  # curvatures >= 1e-3: within 1e-5 of the optimum
  np.testing.assert_allclose(got, best.x, atol=1e-3)

  m = sim.get_click_model("pbm")  # the PBM is its own statistics reduction (item counts)
  keys, counts = jnp.asarray(stats.keys, jnp.int32), jnp.asarray(stats.counts, jnp.float32)
  f = lambda t: 0.5 * sum(jnp.sum(v**2) for v in jax.tree.leaves(t)) - m.statistics_log_likelihood(t, keys, counts)
  plain, _, _ = jax.jit(lambda t: lbfgs_minimize(lambda x: f(x) / sessions, t, max_iters=500, tol=1e-5))(
    m.init(num_docs=num_docs, list_size=10)
  )
  short = np.concatenate([np.asarray(plain["attraction"]), np.asarray(plain["examination"])])
  assert np.abs(short - best.x).max() > 5 * np.abs(got - best.x).max()
  assert objective64(got.astype(np.float64))[0] < objective64(short.astype(np.float64))[0]


def test_sessions_written_as_shards_stream_back_as_the_arrays(tmp_path):
  """A simulated log written batch by batch (write_session_shards) and read by SessionStream gives the same
  sessions, and fitting from the stream equals fitting the arrays."""
  from ultr_jax import data

  log = _masked(_log("ubm", num_sessions=300))
  shards = data.write_session_shards(_batches(log, 64), tmp_path / "shards", shard_size=100, row_group_size=32)
  assert len(shards) == 3
  stream = data.SessionStream(shards, batch_size=50)
  got = [b for b in stream]
  keep = np.any(log["where"], -1)
  valid = np.concatenate([b["valid"] for b in got])
  sessions = np.concatenate([b["session"] for b in got])[valid]
  np.testing.assert_array_equal(sessions, np.flatnonzero(keep))
  for key in ("doc_ids", "clicks", "where"):
    streamed = np.concatenate([b[key] for b in got])[valid]
    want = np.where(log["where"], log[key], 0)[keep] if key != "where" else log["where"][keep]
    np.testing.assert_array_equal(streamed, want, err_msg=key)  # every hidden item here is the list's last
  a = sim.fit_click_model("ubm", data.SessionStream(shards, batch_size=50), solver=sim.Statistics(), num_docs=NUM_DOCS)
  b = sim.fit_click_model("ubm", _batches(log, 64), solver=sim.Statistics(), num_docs=NUM_DOCS)
  for k in a.params:
    np.testing.assert_allclose(a.params[k], b.params[k], atol=1e-6, err_msg=k)
  with pytest.raises(ValueError, match="already holds"):
    data.write_session_shards(_batches(log, 64), tmp_path / "shards")
  bad = dict(_batches(log, 64)[0], clicks=np.full((64, 4), 2.0))
  with pytest.raises(ValueError, match="batch 0, session 0, item 0: field 'click'"):
    data.write_session_shards([bad], tmp_path / "bad")
  assert not list((tmp_path / "bad").glob("*.parquet*"))


def test_the_prior_selected_on_held_out_sessions_is_the_grid_s_best():
  """fit_click_model with a grid of l2 values equals a loop of independent fits and held-out scores over the grid,
  and keeps the one with the lowest validation perplexity."""
  log = _log("ubm", num_sessions=600)
  train, valid = _batches({k: v[:400] for k, v in log.items()}, 64), _batches({k: v[400:] for k, v in log.items()}, 64)
  stats = sim.gather_click_statistics("ubm", train)
  grid = (0.05, 1.0, 20.0)
  fit = sim.fit_click_model("ubm", stats, l2=grid, validation=valid, solver=sim.Statistics(tol=1e-7), num_docs=NUM_DOCS)
  ppl = fit.perplexities
  for l2 in grid:
    alone = sim.fit_click_model("ubm", stats, solver=sim.Statistics(tol=1e-7), l2=l2, num_docs=NUM_DOCS)
    want = sim.evaluate_click_model_stream("ubm", alone.params, valid)["perplexity"]
    assert ppl[l2] == pytest.approx(want, abs=1e-5), l2
  best = min(ppl, key=ppl.get)
  assert len(set(ppl.values())) == 3 and best != max(grid)
  chosen = sim.fit_click_model("ubm", stats, solver=sim.Statistics(tol=1e-7), l2=best, num_docs=NUM_DOCS)
  for k in chosen.params:
    np.testing.assert_allclose(fit.params[k], chosen.params[k], atol=1e-4, err_msg=k)
