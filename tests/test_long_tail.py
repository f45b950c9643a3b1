"""The long-tail log generator: Zipf queries, a noisy ranker over candidates, batch-wise and seeded."""

import jax
import numpy as np
import pytest

from ultr_jax import data
from ultr_jax import simulation as sim


def _log(**kw):
  args = dict(num_sessions=1000, num_queries=50, num_candidates=8, list_size=5, batch_size=300)
  args.update(kw)
  return list(sim.simulate_long_tail_log(jax.random.key(3), "pbm", **args))


def test_seeded_and_batch_wise():
  a, b = _log(), _log()
  assert [x["doc_ids"].shape[0] for x in a] == [300, 300, 300, 100]
  for x, y in zip(a, b):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])
  longer = _log(num_sessions=2000)  # batch i depends on (key, i) only
  np.testing.assert_array_equal(a[1]["doc_ids"], longer[1]["doc_ids"])
  other = list(sim.simulate_long_tail_log(jax.random.key(4), "pbm", num_sessions=300, num_queries=50))
  assert not np.array_equal(other[0]["queries"], a[0]["queries"])


def test_queries_follow_truncated_zipf():
  q = np.concatenate([b["queries"] for b in _log(num_sessions=60_000, batch_size=20_000, num_queries=20)])
  pmf = np.arange(1, 21, dtype=float) ** -1.1
  pmf /= pmf.sum()
  freq = np.bincount(q, minlength=20) / len(q)
  assert q.min() >= 0 and q.max() < 20
  np.testing.assert_allclose(freq, pmf, atol=4 * np.sqrt(pmf * (1 - pmf) / len(q)).max())


def test_lists_are_top_candidates_of_the_query():
  for batch in _log(noise=0.0):
    ids, queries = batch["doc_ids"], batch["queries"]
    np.testing.assert_array_equal(ids // 8, np.broadcast_to(queries[:, None], ids.shape))
    cand = queries[:, None] * 8 + np.arange(8)
    a = sim.long_tail_document_params(jax.random.key(3), cand)["attraction"]
    np.testing.assert_allclose(
      sim.long_tail_document_params(jax.random.key(3), ids)["attraction"], -np.sort(-a, axis=1)[:, :5]
    )
  noisy = np.concatenate([b["doc_ids"] for b in _log(noise=0.3)])
  assert all(len(set(row)) == 5 for row in noisy.tolist())
  head = noisy[np.concatenate([b["queries"] for b in _log(noise=0.3)]) == 0]
  assert len({tuple(r) for r in head.tolist()}) > 1  # the noisy ranker shows one query different lists


def test_attraction_is_its_beta_law():
  a = sim.long_tail_document_params(jax.random.key(0), np.arange(40_000), attraction=(1.0, 3.0))["attraction"]
  np.testing.assert_allclose(a.mean(), 0.25, atol=0.005)  # Beta(1, 3): mean 1/4, variance 3/80
  np.testing.assert_allclose(a.var(), 3 / 80, atol=0.002)


def test_clicks_match_the_model_and_write_as_shards(tmp_path):
  batches = _log(num_sessions=4000, batch_size=1000)
  clicks = np.concatenate([b["clicks"] for b in batches])
  prob = np.concatenate([b["click_prob"] for b in batches])
  assert set(np.unique(clicks)) <= {0.0, 1.0}
  np.testing.assert_allclose(clicks.mean(0), prob.mean(0), atol=4 * 0.5 / np.sqrt(len(clicks)))
  data.write_session_shards(iter(batches), tmp_path / "s", shard_size=1500)
  log = data.read_session_shards(tmp_path / "s")
  np.testing.assert_array_equal(log.items, np.concatenate([b["doc_ids"] for b in batches]).reshape(-1))
  assert log.lines is not None and (log.lines == -1).all()  # arrays have no source lines (nulls, read as -1)


def test_per_document_params_reach_the_sampler():
  kw = dict(num_sessions=200, num_queries=30, num_candidates=6, list_size=4, batch_size=200)
  (b,) = sim.simulate_long_tail_log(
    jax.random.key(1), "dbn", document_params={"satisfaction": (2.0, 2.0)}, perseverance=0.9, **kw
  )
  assert b["clicks"].shape == (200, 4)


@pytest.mark.parametrize(
  "kw",
  [
    dict(num_queries=0),
    dict(list_size=9),
    dict(zipf_exponent=1.0),
    dict(num_queries=2**28),
    dict(batch_size=0),
  ],
)
def test_bad_arguments(kw):
  with pytest.raises(ValueError):
    _log(**kw)


def test_first_batch_continues_the_log_with_the_same_documents():
  whole = _log(num_sessions=900)  # batches 0, 1, 2
  later = _log(num_sessions=600, first_batch=1)
  for x, y in zip(whole[1:], later):
    for k in x:
      np.testing.assert_array_equal(x[k], y[k])

  # Held-out batches of the same key rank each query's candidates by the same attractions: with a noiseless
  # ranker, the same list for a query as in training (another key: other attractions, other lists).
  def lists(batches):
    return {int(q): tuple(r) for b in batches for q, r in zip(b["queries"], b["doc_ids"].tolist())}

  train, held = lists(_log(noise=0.0)), lists(_log(noise=0.0, first_batch=10))
  other = lists(
    sim.simulate_long_tail_log(
      jax.random.key(4), "pbm", num_sessions=1000, num_queries=50, num_candidates=8, list_size=5, noise=0.0
    )
  )
  common = sorted(set(train) & set(held) & set(other))
  assert len(common) > 10
  assert all(train[q] == held[q] for q in common)
  assert sum(train[q] != other[q] for q in common) > len(common) // 2
  with pytest.raises(ValueError, match="first_batch"):
    _log(first_batch=-1)
