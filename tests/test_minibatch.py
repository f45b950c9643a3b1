"""Tests of ultr_jax.simulation.minibatch: row-wise (sparse) steps against dense ones, the fit against the
full-batch optimum, compressed parameter tables, and the list-size checks of the fits and scores."""

import functools

import jax
import numpy as np
import optax
import pytest

from ultr_jax import simulation as sim
from ultr_jax.simulation import minibatch as mb
from ultr_jax.simulation.click_models import tables as tb

NUM_QUERIES, LIST_SIZE = 40, 5
NUM_DOCS = NUM_QUERIES * LIST_SIZE


# One optimiser object for the fits that take adam(0.05) (the Minibatch default too): the optimiser is a static
# argument of the jitted steps, so fits sharing it (and their batches' shapes) share their compiled programs.
ADAM = optax.adam(0.05)


@functools.cache
def _log(model, seed=0, num_sessions=2000, num_queries=NUM_QUERIES, list_size=LIST_SIZE):
  """A simulated session log (read-only NumPy arrays), simulated once per argument set."""
  rng = np.random.default_rng(seed)
  a = rng.uniform(0.05, 0.9, size=(num_queries, list_size)).astype(np.float32)
  kw = {"satisfaction": rng.uniform(0.2, 0.8, size=a.shape).astype(np.float32)} if model == "dbn" else {}
  out = sim.simulate_session_log(jax.random.key(seed), model, a, num_sessions=num_sessions, noise=1.0, **kw)
  out = {k: np.array(v) for k, v in out.items()}
  for v in out.values():
    v.flags.writeable = False
  return out


def _batches(log, size, stop=None):
  stop = log["clicks"].shape[0] if stop is None else stop
  return [
    {"doc_ids": log["doc_ids"][i : i + size], "clicks": log["clicks"][i : i + size]} for i in range(0, stop, size)
  ]


@functools.cache
def _random_init(model, seed=3):
  init = sim.init_click_model(model, num_docs=NUM_DOCS, list_size=LIST_SIZE)
  keys = jax.random.split(jax.random.key(seed), len(init))
  out = {k: np.asarray(0.5 * jax.random.normal(kk, v.shape)) for (k, v), kk in zip(sorted(init.items()), keys)}
  for v in out.values():
    v.flags.writeable = False
  return out


@pytest.mark.parametrize("optimizer", [optax.sgd(0.3), optax.adagrad(0.3)], ids=["sgd", "adagrad"])
@pytest.mark.parametrize("model", ["dbn", "pbm"])
def test_sparse_steps_equal_dense_steps_and_leave_unshown_rows_alone(model, optimizer):
  """Without a prior an unshown row's gradient is 0, so SGD's and Adagrad's dense steps leave it as it is: the
  row-wise steps must be the same steps. The batches show only the first half of the queries' documents."""
  log = _log(model, num_sessions=600)
  shown = log["doc_ids"] < NUM_DOCS // 2
  keep = np.all(shown, axis=-1)
  log = {k: v[keep] for k, v in log.items()}
  batches = _batches(log, 64)
  init = _random_init(model)
  solver = {"optimizer": optimizer, "epochs": 2, "steps_per_call": 3}
  kwargs = {"num_docs": NUM_DOCS, "l2": 0.0, "init": init}
  dense = sim.fit_click_model(model, batches, solver=sim.Minibatch(sparse=False, **solver), **kwargs)
  sparse = sim.fit_click_model(model, batches, solver=sim.Minibatch(sparse=True, **solver), **kwargs)
  assert dense.iterations == sparse.iterations == 2 * len(batches)
  touched = np.unique(log["doc_ids"])
  untouched = np.setdiff1d(np.arange(NUM_DOCS), touched)
  assert untouched.size >= NUM_DOCS // 2
  for k in dense.logits:
    np.testing.assert_allclose(sparse.logits[k], dense.logits[k], rtol=2e-5, atol=2e-6, err_msg=k)
    if k == "attraction":  # an unshown row stays; its logit moves with the prior's fitted centre alone
      moved = np.asarray(sparse.logits[k], np.float64) - init[k]
      np.testing.assert_allclose(moved[untouched], moved[untouched][0], atol=1e-6)
      assert moved[untouched][0] != 0.0
      assert np.all(np.abs(moved[touched] - moved[untouched][0]) > 0)
  fixed = sim.fit_click_model(model, batches, solver=sim.Minibatch(sparse=True, **solver), prior="zero", **kwargs)
  np.testing.assert_array_equal(np.asarray(fixed.logits["attraction"])[untouched], init["attraction"][untouched])


def test_sparse_adam_leaves_unshown_rows_and_their_moments_alone():
  """Adam's dense step moves a row of zero gradient by its old momentum; the row-wise (lazy) step does not."""
  log = _log("cascade", num_sessions=300)
  first, second = log["doc_ids"] < NUM_DOCS // 2, log["doc_ids"] >= NUM_DOCS // 2
  a = {k: v[np.all(first, -1)][:64] for k, v in log.items()}
  b = {k: v[np.all(second, -1)][:64] for k, v in log.items()}
  # prior="zero": no fitted centre, which every step moves (the rows and their moments are what is checked).
  solver = sim.Minibatch(optimizer=optax.adam(0.1), sparse=True)
  kwargs = {"solver": solver, "num_docs": NUM_DOCS, "l2": 0.0, "prior": "zero"}
  one = sim.fit_click_model("cascade", _batches(a, 64), **kwargs)
  two = sim.fit_click_model("cascade", _batches(a, 64) + _batches(b, 64), **kwargs)
  rows = np.unique(a["doc_ids"])
  np.testing.assert_array_equal(two.logits["attraction"][rows], one.logits["attraction"][rows])


@pytest.mark.parametrize("model", ["dbn", "pbm"])
def test_the_sparse_fit_reaches_the_full_batch_optimum_s_held_out_perplexity(model):
  """Within 1e-3 of held-out conditional perplexity, with the prior spread over each row's impressions."""
  log = _log(model, num_sessions=12000)
  train = {k: v[:8000] for k, v in log.items()}
  test = {k: v[8000:] for k, v in log.items()}
  full = sim.fit_click_model(
    model, {"doc_ids": train["doc_ids"], "clicks": train["clicks"]}, solver=sim.LBFGS(), num_docs=NUM_DOCS
  )
  want = sim.evaluate_click_model(model, full.params, test["doc_ids"], test["clicks"])["perplexity"]
  fit = sim.fit_click_model(
    model,
    _batches(train, 250),
    solver=sim.Minibatch(optimizer=ADAM, epochs=25, sparse=True),
    num_docs=NUM_DOCS,
  )
  got = sim.evaluate_click_model(model, fit.params, test["doc_ids"], test["clicks"])["perplexity"]
  assert abs(got - want) < 1e-3, (got, want)
  start = sim.fit_click_model(  # the default optimiser, adam(0.05): one epoch
    model, _batches(train, 250), solver=sim.Minibatch(optimizer=ADAM, epochs=1, sparse=True), num_docs=NUM_DOCS
  )
  assert sim.evaluate_click_model(model, start.params, test["doc_ids"], test["clicks"])["perplexity"] > got


def test_the_row_wise_prior_sums_to_the_full_prior_over_an_epoch():
  """Where every batch shows every row equally often, each row's share of the prior, l2 c / (n_b N), is the full
  prior's l2 / S: the row-wise SGD steps are the dense ones, prior included."""
  ids = np.tile(np.arange(4 * LIST_SIZE).reshape(4, LIST_SIZE), (32, 1))
  batches = [{"doc_ids": ids[i : i + 16], "clicks": np.zeros((16, LIST_SIZE))} for i in range(0, 128, 16)]
  init = {k: np.ones_like(v) for k, v in sim.init_click_model("cascade", num_docs=20, list_size=LIST_SIZE).items()}
  optimizer, kwargs = optax.sgd(1e-3), {"num_docs": 20, "l2": 1.0, "init": init}
  sparse = sim.fit_click_model("cascade", batches, solver=sim.Minibatch(optimizer=optimizer, sparse=True), **kwargs)
  dense = sim.fit_click_model("cascade", batches, solver=sim.Minibatch(optimizer=optimizer, sparse=False), **kwargs)
  np.testing.assert_allclose(sparse.logits["attraction"], dense.logits["attraction"], rtol=1e-5)


def _compression_split():
  log = _log("dbn", num_sessions=8000)
  return {k: v[:6000] for k, v in log.items()}, {k: v[6000:] for k, v in log.items()}


@functools.cache
def _table_perplexity(table=None):
  """The held-out perplexity of a fit (10 epochs of adam(0.05)) with ``table`` for the attraction (None: the full
  table), shared by both tables' cases."""
  train, test = _compression_split()
  tables = None if table is None else {"attraction": table}
  fit = sim.fit_click_model(
    "dbn", _batches(train, 250), solver=sim.Minibatch(optimizer=ADAM, epochs=10, tables=tables), num_docs=NUM_DOCS
  )
  return sim.evaluate_click_model("dbn", fit.params, test["doc_ids"], test["clicks"])["perplexity"]


@pytest.mark.parametrize(
  "table",
  [tb.HashedTable(num_buckets=150), tb.QuotientRemainderTable(num_buckets=14)],
  ids=["hashed", "quotient-remainder"],
)
def test_compressed_tables_fit_within_a_bound_of_the_full_table(table):
  train, test = _compression_split()
  fit = sim.fit_click_model(
    "dbn",
    _batches(train, 250),
    solver=sim.Minibatch(optimizer=ADAM, epochs=10, tables={"attraction": table}),
    num_docs=NUM_DOCS,
  )
  assert fit.params["attraction"].shape == fit.params["satisfaction"].shape == (NUM_DOCS,)
  assert table.num_rows(NUM_DOCS) < NUM_DOCS
  ppl = {
    "full": _table_perplexity(),
    "compressed": sim.evaluate_click_model("dbn", fit.params, test["doc_ids"], test["clicks"])["perplexity"],
    # One attraction shared by every document: a compressed table that does not tell documents apart scores this.
    "one_row": _table_perplexity(tb.HashedTable(num_buckets=1)),
  }
  assert ppl["full"] < ppl["compressed"] < min(ppl["full"] + 0.1, ppl["one_row"]), ppl


def test_table_rows_and_logits():
  ids = np.arange(10)
  qr = tb.QuotientRemainderTable(num_buckets=4)
  assert qr.rows(ids).shape == (10, 2) and qr.num_rows(10) == 7
  assert len({tuple(r) for r in qr.rows(ids).tolist()}) == 10  # every document its own pair of rows
  assert np.all(qr.rows(ids) < qr.num_rows(10))
  hashed = tb.HashedTable(num_buckets=3, seed=1)
  assert hashed.rows(ids).shape == (10, 1) and hashed.rows(ids).max() < 3
  vec = np.arange(7, dtype=np.float32)
  got = tb.table_logits({"attraction": qr}, {"attraction": vec}, 10)["attraction"]
  np.testing.assert_array_equal(got, vec[ids % 4] + vec[4 + ids // 4])
  with pytest.raises(ValueError, match="num_buckets"):
    tb.HashedTable(num_buckets=0)
  with pytest.raises(ValueError, match="tables for \\['examination'\\]"):
    sim.fit_click_model("pbm", [], solver=sim.Minibatch(tables={"examination": qr}))


@pytest.mark.parametrize("num_docs", [0, 5, 7, 50])
def test_table_logits_mapped_in_chunks_equal_the_whole_gather(monkeypatch, num_docs):
  """The logits are built a few ids at a time into one array: each document's must be its rows' sum, whatever
  the chunks (one, several, a last shorter one, none)."""
  monkeypatch.setattr(tb, "_CHUNK", 7)
  ids = np.arange(num_docs)
  hashed, qr = tb.HashedTable(num_buckets=5, seed=2), tb.QuotientRemainderTable(num_buckets=3)
  tables = {"attraction": hashed, "satisfaction": qr, "full": tb.FullTable()}
  vectors = {k: np.linspace(-1.0, 1.0, max(t.num_rows(num_docs), 1), dtype=np.float32) for k, t in tables.items()}
  got = tb.table_logits(tables, vectors, num_docs)
  for k, t in tables.items():
    want = vectors[k][t.rows(ids)].sum(axis=-1) if num_docs else np.zeros(0, np.float32)
    assert got[k].shape == (num_docs,) and got[k].dtype == np.float32, k
    np.testing.assert_array_equal(np.asarray(got[k]), want, err_msg=k)


def test_rows_counted_a_few_at_a_time_are_the_bincount_of_them_all(monkeypatch):
  """The shown items per row, counted in flushes whose largest row grows and shrinks, are one bincount."""
  monkeypatch.setattr(mb._RowCounter, "flush_size", 5)
  rng = np.random.default_rng(0)
  parts = [rng.integers(0, hi, size=(3, 2)) for hi in (4, 9, 2, 30, 7, 30, 1)]
  counter = mb._RowCounter()
  for rows in parts:
    counter.add(rows)
  total = counter.flush()
  assert total.dtype == np.int64
  np.testing.assert_array_equal(total, np.bincount(np.concatenate([p.ravel() for p in parts])))


def test_a_hashed_fit_is_the_full_table_fit_on_the_hashed_ids(monkeypatch):
  """A hashed table's document d reads row h(d): the fit over ids spread across many documents must be the fit
  of full tables over the ids h(d), step for step, bit for bit; its logits built in chunks of ids."""
  monkeypatch.setattr(tb, "_CHUNK", 1000)
  log = _log("dbn", num_sessions=1200)
  spread = log["doc_ids"].astype(np.int64) * 997 + 3
  num_docs = NUM_DOCS * 997 + 5  # many chunks, the last shorter
  table = tb.HashedTable(num_buckets=64, seed=1)
  kwargs = {"optimizer": optax.adam(0.05), "epochs": 2}
  hashed = sim.fit_click_model(
    "dbn",
    [{"doc_ids": spread[i : i + 100], "clicks": log["clicks"][i : i + 100]} for i in range(0, 1200, 100)],
    num_docs=num_docs,
    solver=sim.Minibatch(tables={"attraction": table, "satisfaction": table}, **kwargs),
  )
  rows = table.rows(spread)[..., 0]
  full = sim.fit_click_model(
    "dbn",
    [{"doc_ids": rows[i : i + 100], "clicks": log["clicks"][i : i + 100]} for i in range(0, 1200, 100)],
    num_docs=64,
    solver=sim.Minibatch(**kwargs),
  )
  each = table.rows(np.arange(num_docs))[:, 0]
  assert hashed.iterations == full.iterations == 24
  for part in ("logits", "params"):
    for k, v in getattr(full, part).items():
      v = np.asarray(v)
      want = v[each] if k in ("attraction", "satisfaction") else v
      np.testing.assert_array_equal(np.asarray(getattr(hashed, part)[k]), want, err_msg=f"{part}[{k}]")


@pytest.mark.parametrize("sparse", [True, False])
def test_a_batch_of_another_list_size_is_an_error_naming_it(sparse):
  six = _log("pbm", num_sessions=64, list_size=6)
  four = _log("pbm", num_sessions=64, list_size=4)
  batches = _batches(six, 32) + _batches(four, 32)
  with pytest.raises(ValueError, match="batch 2 holds lists of 4 items, but the fit's list size is 6"):
    sim.fit_click_model("pbm", batches, solver=sim.Minibatch(sparse=sparse))
  solver = sim.Minibatch(list_size=4, num_sessions=128, sparse=sparse)
  with pytest.raises(ValueError, match="batch 0 holds lists of 6 items, but the fit's list size is 4"):
    sim.fit_click_model("pbm", batches, solver=solver, num_docs=300, l2=0.0)


def test_scoring_a_model_on_longer_lists_than_it_was_fitted_on_is_an_error():
  four = _log("pbm", num_sessions=64, list_size=4)
  six = _log("pbm", num_sessions=64, list_size=6)
  fit = sim.fit_click_model("pbm", _batches(four, 32), solver=sim.Minibatch(), num_docs=300)
  assert fit.params["examination"].shape == (4,)
  match = "fitted on lists of 4 items.*lists of 6"
  with pytest.raises(ValueError, match=match):
    sim.evaluate_click_model("pbm", fit.params, six["doc_ids"], six["clicks"])
  with pytest.raises(ValueError, match=match):
    sim.evaluate_click_model_stream("pbm", fit.params, _batches(six, 32))
  with pytest.raises(ValueError, match=match):
    sim.click_model_predict("pbm", fit.params, six["doc_ids"], six["clicks"])
  short = sim.evaluate_click_model("pbm", fit.params, four["doc_ids"][:, :3], four["clicks"][:, :3])
  assert np.isfinite(short["perplexity"])  # shorter lists read the first ranks of the tables


def test_fits_with_the_default_optimizer_compile_once(assert_compiles_once):
  """A second default fit of same-shaped batches compiles nothing: the default optimiser is one object, and it is a
  static argument of the jitted steps (a fresh ``optax.adam`` per fit compiled them again every fit)."""
  logs = [
    next(iter(sim.simulate_long_tail_log(jax.random.key(i), "pbm", num_sessions=400, num_queries=40, batch_size=400)))
    for i in range(3)
  ]
  fit = lambda log: sim.fit_click_model("pbm", [log], num_docs=4000, solver=sim.Minibatch(epochs=1, sparse=False))
  assert_compiles_once(fit, lambda i: ((logs[i],), {}), jit=False)
