"""The logit prior's centre (``prior="data_mean"`` against ``"zero"``): the penalty against NumPy, the fitted
centre equal to the per-document logits' mean in every fit path, and better held-out predictions on a long-tail
log, whose rarely shown documents are estimated near that centre."""

import jax
import numpy as np
import optax
import pytest

from ultr_jax import simulation as sim
from ultr_jax.simulation.click_models.statistics import ItemCounter


@pytest.mark.parametrize("model", ["pbm", "dbn"])
def test_logit_prior_matches_numpy(model):
  m = sim.get_click_model(model)
  rng = np.random.default_rng(0)
  logits = {k: rng.normal(size=np.shape(v)).astype(np.float32) for k, v in m.init(num_docs=7, list_size=4).items()}
  per_doc = ("attraction",) + m.item_params
  centred = sum(np.sum((v - v.mean()) ** 2) if k in per_doc else np.sum(v**2) for k, v in logits.items())
  plain = sum(np.sum(v**2) for v in logits.values())
  np.testing.assert_allclose(sim.logit_prior(model, logits, 0.7, prior="data_mean"), 0.35 * centred, rtol=1e-5)
  np.testing.assert_allclose(sim.logit_prior(model, logits, 0.7, prior="zero"), 0.35 * plain, rtol=1e-5)
  with pytest.raises(ValueError, match="prior must be one of"):
    sim.logit_prior(model, logits, 1.0, prior="mean")


def _pbm_log(num_sessions=3000, num_docs=40, list_size=4, seed=0):
  rng = np.random.default_rng(seed)
  a = rng.beta(1.0, 3.0, size=num_docs)
  ids = np.stack([rng.choice(num_docs, list_size, replace=False) for _ in range(num_sessions)]).astype(np.int32)
  exam = 1.0 / np.arange(1, list_size + 1)
  clicks = (rng.random(ids.shape) < a[ids] * exam).astype(np.float32)
  return ids, clicks


def test_fitted_centre_is_the_mean_of_the_document_logits():
  ids, clicks = _pbm_log()
  num_docs = 50  # documents 40..49 have no sessions: at the optimum they sit at the prior's centre
  stats = sim.gather_click_statistics("pbm", [{"doc_ids": ids, "clicks": clicks}])
  kw = {"num_docs": num_docs, "l2": 1.0, "prior": "data_mean"}
  fit = sim.fit_click_model("pbm", stats, solver=sim.Statistics(tol=1e-7), **kw)
  a = np.asarray(fit.logits["attraction"], np.float64)
  centre = a.mean()
  np.testing.assert_allclose(a[40:], centre, atol=2e-3)
  np.testing.assert_allclose(a[:40].mean(), centre, atol=2e-3)
  assert centre < -0.5  # Beta(1, 3) attractions: the centre is well below logit 0
  zero = sim.fit_click_model("pbm", stats, solver=sim.Statistics(), num_docs=num_docs, l2=1.0)  # the default: "zero"
  np.testing.assert_allclose(np.asarray(zero.logits["attraction"])[40:], 0.0, atol=1e-6)
  # The in-memory fit and the partition-by-partition fit reach the same optimum.
  whole = sim.fit_click_model("pbm", {"doc_ids": ids, "clicks": clicks}, solver=sim.LBFGS(tol=1e-7), **kw)
  np.testing.assert_allclose(np.asarray(whole.logits["attraction"]), a, atol=5e-3)
  counter = ItemCounter(memory_budget_bytes=0, num_partitions=3)
  counter.add(ids, clicks, None)
  parts = sim.fit_click_model("pbm", counter.result(), solver=sim.Statistics(tol=1e-7), **kw)
  pa = np.asarray(parts.logits["attraction"], np.float64)
  np.testing.assert_allclose(pa[40:], pa.mean(), atol=2e-3)
  np.testing.assert_allclose(pa, a, atol=5e-3)


def test_minibatch_centre_reaches_unseen_documents():
  ids, clicks = _pbm_log(num_sessions=2000)
  batches = [{"doc_ids": ids[i : i + 200], "clicks": clicks[i : i + 200]} for i in range(0, 2000, 200)]
  fit = sim.fit_click_model("pbm", batches, solver=sim.Minibatch(optimizer=optax.adam(0.05), epochs=3), num_docs=50)
  a = np.asarray(fit.logits["attraction"])
  assert np.ptp(a[40:]) == 0.0 and a[40] < -0.3  # the unseen documents: the fitted centre alone
  zero = sim.fit_click_model(
    "pbm", batches, solver=sim.Minibatch(optimizer=optax.adam(0.05), epochs=3), num_docs=50, prior="zero"
  )
  np.testing.assert_array_equal(np.asarray(zero.logits["attraction"])[40:], 0.0)


def _long_tail(num_sessions, first_batch):
  batches = sim.simulate_long_tail_log(
    jax.random.key(0),
    "dbn",
    num_sessions=num_sessions,
    num_queries=5000,
    num_candidates=8,
    list_size=5,
    batch_size=num_sessions,
    first_batch=first_batch,
    document_params={"satisfaction": (2.0, 2.0)},
    perseverance=0.9,
  )
  (batch,) = list(batches)
  return batch


def _perplexity(conditional, clicks):
  cond = np.clip(np.asarray(conditional, np.float64), 1e-7, 1 - 1e-7).astype(np.float32)
  return float(sim.click_prediction_scores(cond, cond, clicks)["perplexity"])


def test_centred_prior_predicts_a_long_tail_log_better():
  train, test = _long_tail(20_000, 0), _long_tail(20_000, 1)  # the same documents, other sessions
  batches = [
    {"doc_ids": train["doc_ids"][i : i + 256], "clicks": train["clicks"][i : i + 256]} for i in range(0, 20_000, 256)
  ]
  truth = _perplexity(test["conditional_click_prob"], test["clicks"])
  scores = {}
  for prior in ("zero", "data_mean"):
    fit = sim.fit_click_model(
      "dbn",
      batches,
      solver=sim.Minibatch(optimizer=optax.adam(0.05), num_sessions=20_000.0),
      num_docs=40_000,
      prior=prior,
    )
    pred = sim.click_model_predict("dbn", fit.params, test["doc_ids"], test["clicks"])["conditional"]
    scores[prior] = _perplexity(pred, test["clicks"])
  assert scores["data_mean"] < scores["zero"] - 0.005, scores
  assert scores["data_mean"] - truth < 0.05, (scores, truth)
