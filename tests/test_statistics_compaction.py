"""The item models' statistics fits run over the documents the records read: a document that no record reads sits at
the prior's centre (0, or the read documents' mean under ``prior="data_mean"``), and the read documents' and the
bias parameters' optimum does not depend on how many unread ids there are, in memory and partition by partition."""

import numpy as np
import pytest

from ultr_jax import simulation as sim
from ultr_jax.simulation.click_models.statistics import ItemCounter

NUM_READ, LIST_SIZE = 30, 4


def _log(num_sessions=2000, seed=0):
  """A PBM log over documents ``0..NUM_READ-1``."""
  rng = np.random.default_rng(seed)
  a = rng.beta(1.0, 3.0, NUM_READ)
  ids = np.stack([rng.choice(NUM_READ, LIST_SIZE, replace=False) for _ in range(num_sessions)])
  clicks = (rng.random(ids.shape) < a[ids] / np.arange(1, LIST_SIZE + 1)).astype(np.float32)
  return ids, clicks


def _spread(ids, parts):
  """Ids ``d`` to ``100 P (d // P) + d % P``: the same partition (``d mod P``) and order within it, 99% unread."""
  return 100 * parts * (ids // parts) + ids % parts


def _centre(logits, read, prior):
  return np.mean(logits[read], dtype=np.float64) if prior == "data_mean" else 0.0


@pytest.mark.parametrize("prior", ["zero", "data_mean"])
@pytest.mark.parametrize("model", ["pbm", "ubm"])
def test_fit_over_the_read_documents_equals_the_full_table_fit(model, prior):
  ids, clicks = _log()
  wide = _spread(ids, 3)
  num_docs = int(wide.max()) + 50
  stats = sim.gather_click_statistics(model, [{"doc_ids": wide, "clicks": clicks}])
  kw = {"num_docs": num_docs, "l2": 1.0, "prior": prior}
  fit = sim.fit_click_model(model, stats, solver=sim.Statistics(tol=1e-7), **kw)
  # every id's logit a free parameter
  full = sim.fit_click_model(model, {"doc_ids": wide, "clicks": clicks}, solver=sim.LBFGS(tol=1e-7), **kw)
  assert fit.converged and full.converged
  for k in fit.logits:
    np.testing.assert_allclose(np.asarray(fit.logits[k]), np.asarray(full.logits[k]), atol=1e-5, err_msg=k)
  assert fit.log_likelihood == pytest.approx(full.log_likelihood, abs=1e-6)
  a = np.asarray(fit.logits["attraction"])
  read = np.zeros(num_docs, bool)
  read[wide] = True
  np.testing.assert_allclose(a[~read], _centre(a, read, prior), atol=1e-5)


@pytest.mark.parametrize("prior", ["zero", "data_mean"])
def test_partitioned_fit_does_not_depend_on_the_unread_ids(prior):
  ids, clicks = _log()
  fits = {}
  for name, doc_ids in (("compact", ids), ("wide", _spread(ids, 3))):
    counter = ItemCounter(last_click_state=True, memory_budget_bytes=0, num_partitions=3)
    counter.add(doc_ids, clicks, None)
    stats = counter.result()
    assert isinstance(stats, sim.PartitionedStatistics)
    num_docs = int(doc_ids.max()) + 50
    fits[name] = sim.fit_click_model("ubm", stats, solver=sim.Statistics(), num_docs=num_docs, l2=1.0, prior=prior)
  compact, wide = fits["compact"].logits, fits["wide"].logits
  read = np.zeros(wide["attraction"].shape[0], bool)
  read[_spread(np.arange(NUM_READ), 3)] = True
  a = np.asarray(wide["attraction"])
  np.testing.assert_allclose(a[read], np.asarray(compact["attraction"])[:NUM_READ], atol=1e-6)
  np.testing.assert_allclose(np.asarray(wide["gamma"]), np.asarray(compact["gamma"]), atol=1e-6)
  np.testing.assert_allclose(a[~read], _centre(a, read, prior), atol=1e-6)
  assert fits["wide"].log_likelihood == pytest.approx(fits["compact"].log_likelihood, abs=1e-6)
  # And it nears the in-memory optimum (block-coordinate descent stops on a flat objective, short of 1e-7).
  session_log = {"doc_ids": ids, "clicks": clicks}
  ref = sim.fit_click_model("ubm", session_log, solver=sim.LBFGS(), num_docs=int(ids.max()) + 50, l2=1.0, prior=prior)
  np.testing.assert_allclose(np.asarray(compact["attraction"]), np.asarray(ref.logits["attraction"]), atol=0.02)
