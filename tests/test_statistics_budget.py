"""Click statistics within a memory budget: spilled partitions equal in-memory counts, merges are order-free,
device counting equals host counting, and the partition-by-partition fit reaches the in-memory optimum."""

import functools
import itertools

import jax
import numpy as np
import pytest

from ultr_jax import simulation as sim
from ultr_jax.simulation.click_models import statistics as S


@functools.cache
def _simulated(model, n, seed, batch_size):
  """A long-tail log, simulated once per argument set (the tests read it, never write it)."""
  return tuple(
    sim.simulate_long_tail_log(
      jax.random.key(seed),
      model,
      num_sessions=n,
      num_queries=200,
      num_candidates=8,
      list_size=5,
      batch_size=batch_size,
    )
  )


def _batches(model="pbm", n=3000, seed=0, batch_size=500):
  return list(_simulated(model, n, seed, batch_size))


def _count(batches, **kw):
  c = S.ItemCounter(last_click_state=kw.pop("last_click_state", False), **kw)
  for b in batches:
    c.add(b["doc_ids"], b["clicks"], b.get("where"))
  return c.result()


def _same(a, b):
  a = a.to_statistics() if isinstance(a, S.PartitionedStatistics) else a
  b = b.to_statistics() if isinstance(b, S.PartitionedStatistics) else b
  np.testing.assert_array_equal(a.keys, b.keys)
  np.testing.assert_array_equal(a.counts, b.counts)
  assert (a.kind, a.num_sessions, a.list_size, a.num_docs) == (b.kind, b.num_sessions, b.list_size, b.num_docs)


@pytest.mark.parametrize("state", [False, True])
def test_spilled_equals_in_memory(tmp_path, state):
  batches = _batches()
  ref = _count(batches, last_click_state=state)
  spilled = _count(batches, last_click_state=state, memory_budget_bytes=4000, spill_dir=tmp_path, num_partitions=5)
  assert isinstance(ref, S.ClickStatistics) and isinstance(spilled, S.PartitionedStatistics)
  assert max(len(r) for r in spilled.runs) > 1  # several spills per partition
  _same(ref, spilled)
  for p in range(5):  # a document's records lie in its partition
    assert np.all(spilled.partition(p).keys[:, 0] % 5 == p)
  _same(ref, S.open_partitioned_statistics(tmp_path))
  _same(ref, spilled.compact())


def test_merge_is_associative_and_order_free(tmp_path):
  batches = _batches(n=3000)
  ref = _count(batches)
  parts = [
    _count(batches[:2]),
    _count(batches[2:4], memory_budget_bytes=2000, spill_dir=tmp_path / "a", num_partitions=3),
    _count(batches[4:], memory_budget_bytes=2000, num_partitions=3),
  ]
  for order in itertools.permutations(range(3)):
    x, y, z = (parts[i] for i in order)
    _same(ref, S.merge_click_statistics([x, y, z]))
    _same(ref, S.merge_click_statistics([S.merge_click_statistics([x, y]), z]))
    _same(ref, S.merge_click_statistics([x, S.merge_click_statistics([y, z])]))


def test_writers_sharing_a_directory_merge(tmp_path):
  batches = _batches(model="ubm")
  for half in (batches[::2], batches[1::2]):  # two processes, each its own batches
    _count(half, last_click_state=True, memory_budget_bytes=3000, spill_dir=tmp_path, num_partitions=4)
  _same(_count(batches, last_click_state=True), S.open_partitioned_statistics(tmp_path))
  with pytest.raises(ValueError, match="no partitioned statistics"):
    S.open_partitioned_statistics(tmp_path / "missing")


def test_device_counting_equals_host():
  rng = np.random.default_rng(0)
  codes = np.concatenate([rng.integers(0, 50, 3000), rng.integers(2**31 - 5, 2**31 + 5, 100), [2**45, 2**45]])
  rng.shuffle(codes)
  host, device = S.count_codes(codes, device=False), S.count_codes(codes, device=True)
  for h, d in zip(host, device):
    np.testing.assert_array_equal(h, d)
  np.testing.assert_array_equal(host[1], [np.sum(codes == u) for u in host[0]])
  batches = _batches(model="ubm")
  kw = dict(last_click_state=True, max_dense_cells=0)  # sparse records: each batch counted by count_codes
  _same(_count(batches, **kw, device=False), _count(batches, **kw, device=True))


def test_pattern_statistics_past_the_budget_name_the_cause():
  with pytest.raises(sim.StatisticsTooLarge, match="cannot be partitioned by document"):
    sim.gather_click_statistics("dbn", _batches(model="dbn", n=2000), memory_budget_bytes=10_000)


@pytest.mark.parametrize("model", ["pbm", "ubm", pytest.param("trust", marks=pytest.mark.slow)])
def test_partitioned_fit_reaches_the_in_memory_optimum(model):
  train, test = _batches(model, n=6000, batch_size=6000), _batches(model, n=3000, seed=1, batch_size=3000)
  ids, clicks = (np.concatenate([b[k] for b in train]) for k in ("doc_ids", "clicks"))
  ref = sim.fit_click_model(model, {"doc_ids": ids, "clicks": clicks}, solver=sim.LBFGS(), num_docs=1600, l2=1.0)
  fit = sim.fit_click_model(model, train, solver=sim.Statistics(budget=8000, num_partitions=3), num_docs=1600, l2=1.0)
  ppl = [sim.evaluate_click_model_stream(model, f.params, test)["perplexity"] for f in (ref, fit)]
  assert abs(ppl[0] - ppl[1]) < 1e-3, ppl
  assert fit.log_likelihood == pytest.approx(ref.log_likelihood, abs=1e-4)
  np.testing.assert_allclose(fit.params["attraction"], ref.params["attraction"], atol=0.02)
