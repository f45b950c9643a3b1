"""The partition-by-partition fit takes the Newton step of the joint objective in the bias parameters: a
partition's reduced gradient and Hessian equal the Schur complement of the dense Hessian of all its parameters
(by Hessian-vector products per bias parameter, and, where each record reads one bias parameter, from the
records' own cross derivatives), and on a long-tail log the passes reach the in-memory optimum in a few
Newton-like passes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from ultr_jax import simulation as sim
from ultr_jax.simulation import partitioned_fit as pf
from ultr_jax.simulation.click_models.statistics import ItemCounter

ITEM_MODELS = ["pbm", "ubm", "trust"]


def _records(model, num_docs=6, list_size=4, num_sessions=400, seed=0):
  """A partition's ``(keys, counts)`` over documents ``0..num_docs-1``."""
  rng = np.random.default_rng(seed)
  ids = np.stack([rng.choice(num_docs, list_size, replace=False) for _ in range(num_sessions)])
  clicks = (rng.random(ids.shape) < 0.6 / np.arange(1, list_size + 1)).astype(np.float32)
  stats = sim.gather_click_statistics(model, [{"doc_ids": ids, "clicks": clicks}])
  return jnp.asarray(stats.keys, jnp.int32), jnp.asarray(stats.counts, jnp.float32)


@pytest.mark.parametrize("region", ["convex", "held"])
@pytest.mark.parametrize("model", ITEM_MODELS)
def test_bias_terms_are_the_schur_complement_of_the_dense_hessian(model, region):
  """Every document eliminated where its log-likelihood is convex (``convex``); where some are not (``held``:
  attractive documents, examined, rarely clicked, a weak prior), those are held and the others eliminated."""
  m = sim.get_click_model(model)
  keys, counts = _records(model)
  rng = np.random.default_rng(1)
  mean = {"attraction": np.array([3.0, -1.0] * 3)} if region == "held" else {}  # every other one attractive
  logits = {
    k: jnp.asarray(rng.normal(mean.get(k, 0.0 if region == "convex" else 2.0), 0.5, v.shape), jnp.float32)
    for k, v in m.init(num_docs=6, list_size=4).items()
  }
  per_doc = ("attraction",) + tuple(m.item_params)
  docs = {k: logits[k] for k in per_doc}
  bias = {k: v for k, v in logits.items() if k not in per_doc}
  l2 = 0.7 if region == "convex" else 0.05
  centre = {k: jnp.float32(0.2) for k in per_doc}
  d_flat, d_unravel = ravel_pytree(docs)
  b_flat, b_unravel = ravel_pytree(bias)
  nd = d_flat.shape[0]

  def objective(x):
    return pf._negative_log_posterior(
      model=m, docs=d_unravel(x[:nd]), bias=b_unravel(x[nd:]), keys=keys, counts=counts, l2=l2, centre=centre
    )

  x = jnp.concatenate([d_flat, b_flat])
  g, h = jax.jit(lambda x: (jax.grad(objective)(x), jax.hessian(objective)(x)))(x)  # one program, not eager ops
  g, h = np.asarray(g, np.float64), np.asarray(h, np.float64)
  h_dd, h_db, h_bb = h[:nd, :nd], h[:nd, nd:], h[nd:, nd:]
  np.testing.assert_allclose(h_dd, np.diag(np.diag(h_dd)), atol=1e-6)  # documents are independent
  eliminated = np.diag(h_dd) > 2 * l2  # the data's own curvature above the prior's
  assert eliminated.all() if region == "convex" else 0 < eliminated.sum() < nd, np.diag(h_dd)
  e = np.flatnonzero(eliminated)
  schur = h_bb - h_db[e].T @ np.linalg.solve(h_dd[np.ix_(e, e)], h_db[e])
  reduced = g[nd:] - h_db[e].T @ np.linalg.solve(h_dd[np.ix_(e, e)], g[e])

  docs_of = np.asarray(keys[:, 0])
  assert np.all(np.diff(docs_of) >= 0)  # records sorted by document, as the partitions hold them
  max_run = int(np.max(np.unique(docs_of, return_counts=True)[1]))
  paths = {"dense": pf._bias_terms_dense(m, docs, bias, keys, counts, jnp.float32(l2), centre)}
  if isinstance(m, sim.BiasIndexed):  # one bias parameter per record: the sparse path
    paths["sparse"] = pf._bias_terms_sparse(m, docs, bias, keys, counts, jnp.float32(l2), centre, max_run)
  assert set(paths) == ({"dense"} if model == "trust" else {"dense", "sparse"})
  for path, (g_bias, newton, s, h_diag) in paths.items():
    np.testing.assert_allclose(np.asarray(h_diag), np.diag(h_bb), rtol=1e-4, atol=1e-3, err_msg=path)
    np.testing.assert_allclose(np.asarray(g_bias), g[nd:], rtol=1e-4, atol=1e-3, err_msg=path)
    np.testing.assert_allclose(np.asarray(newton), reduced, rtol=1e-4, atol=1e-3, err_msg=path)
    np.testing.assert_allclose(np.asarray(s), schur, rtol=1e-4, atol=1e-3, err_msg=path)


@functools.cache
def _long_tail_batches():
  """One UBM long-tail log, fitted by both models' tests."""
  return list(
    sim.simulate_long_tail_log(
      jax.random.key(0),
      "ubm",
      num_sessions=20_000,
      num_queries=2_000,
      num_candidates=20,
      list_size=10,
      batch_size=20_000,
    )
  )


@pytest.mark.parametrize("model", ["pbm", "ubm"])
def test_partitioned_fit_converges_in_a_few_passes(model):
  m = sim.get_click_model(model)
  batches = _long_tail_batches()
  num_docs = 40_000
  ref = sim.fit_click_model(
    model, sim.gather_click_statistics(model, batches), solver=sim.Statistics(tol=1e-7), num_docs=num_docs, l2=1.0
  )
  counter = ItemCounter(
    memory_budget_bytes=0, num_partitions=4, last_click_state=sim.statistics_reduction(m).statistics_kind == "ubm_items"
  )
  for b in batches:
    counter.add(b["doc_ids"], b["clicks"], b.get("where"))
  fit = sim.fit_click_model(model, counter.result(), solver=sim.Statistics(), num_docs=num_docs, l2=1.0)
  # Block-coordinate descent (the documents, then the bias with the documents held) needs 25-30 passes here.
  assert fit.converged and fit.iterations <= 10, (fit.iterations, fit.grad_norm)
  assert fit.log_likelihood == pytest.approx(ref.log_likelihood, abs=2e-6)
  for k in ref.logits:
    np.testing.assert_allclose(np.asarray(fit.logits[k]), np.asarray(ref.logits[k]), atol=2e-3, err_msg=k)
