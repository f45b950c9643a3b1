"""Per-document parameters computed from features by a flax module (``simulation.FeatureTable``) in the minibatch
fit: its gradients against the same model with the table materialised, recovery of the true model's held-out
perplexity, prediction for documents no batch showed, masks, and the long-tail log's features."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ultr_jax import simulation as sim

NUM_DOCS, LIST_SIZE, NUM_FEATURES = 60, 4, 3
WEIGHTS = (1.2, -0.8, 0.5)


class _MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(nn.tanh(nn.Dense(5)(x)))


def _tiny_log(model, seed=0, num_sessions=48):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((NUM_DOCS, NUM_FEATURES)).astype(np.float32)
  ids = np.stack([rng.choice(NUM_DOCS, LIST_SIZE, replace=False) for _ in range(num_sessions)]).astype(np.int32)
  clicks = (rng.random(ids.shape) < 0.3).astype(np.float32)
  if model != "pbm":  # a cascade-family log: at most one click per session, no click after it
    first = np.argmax(clicks, axis=-1)
    clicks = np.where(np.arange(LIST_SIZE) == first[:, None], clicks, 0.0).astype(np.float32)
  return x, ids, clicks


def _materialised_objective(model, tables, phi, bias, ids, clicks, l2):
  """The full-batch objective with every feature table applied to all documents' features, then read by id."""
  m = sim.get_click_model(model)
  logits = {k: t.logits(phi[k], t.features) for k, t in tables.items()}
  probs = m.to_probabilities({**logits, **bias})
  ll = sim.click_model_log_likelihood(model, probs, jnp.asarray(ids), jnp.asarray(clicks))
  penalty = sum(jnp.sum(v**2) for v in jax.tree.leaves((phi, bias)))
  return 0.5 * l2 / ids.shape[0] * penalty - jnp.mean(ll)


@pytest.mark.parametrize("model", ["pbm", "ubm", "dbn"])
def test_a_step_follows_the_gradient_of_the_materialised_table(model):
  """One SGD step on one batch is ``-lr`` times the gradient of the same model whose per-document logits are the
  module applied to every document's features (every per-document parameter a feature table, the prior on)."""
  x, ids, clicks = _tiny_log(model)
  names = ("attraction",) + sim.get_click_model(model).item_params
  tables = {k: sim.FeatureTable(_MLP() if k == "attraction" else nn.Dense(1), x) for k in names}
  phi = {k: t.init(jax.random.key(i + 1)) for i, (k, t) in enumerate(tables.items())}
  bias = {k: v for k, v in sim.init_click_model(model, num_docs=1, list_size=LIST_SIZE).items() if k not in names}
  lr, l2 = 0.5, 3.0
  fit = sim.fit_click_model(
    model,
    [{"doc_ids": ids, "clicks": clicks}],
    solver=sim.Minibatch(optimizer=optax.sgd(lr), tables=tables),
    init=phi,
    l2=l2,
    prior="zero",
    num_docs=NUM_DOCS,
  )
  grad_phi, grad_bias = jax.grad(_materialised_objective, argnums=(2, 3))(model, tables, phi, bias, ids, clicks, l2)
  step = jax.tree.map(lambda new, old: (old - new) / lr, fit.feature_params, phi)
  for got, want in zip(jax.tree.leaves(step), jax.tree.leaves(grad_phi)):
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-6)
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grad_phi)) > 1e-3  # a real step was checked
  for k, g in grad_bias.items():
    np.testing.assert_allclose((bias[k] - fit.logits[k]) / lr, g, rtol=2e-3, atol=2e-6, err_msg=k)
  for k, t in tables.items():  # the per-document logits are the module's on every document's features
    np.testing.assert_allclose(fit.logits[k], t.logits(fit.feature_params[k], x), rtol=1e-6, err_msg=k)
    assert fit.logits[k].shape == (NUM_DOCS,)


def test_masked_sessions_count_for_nothing_and_all_masked_batches_are_finite():
  """Mask equals truncation: sessions with every item masked (their ids and clicks arbitrary) change no step; a
  batch that is all masked takes a finite step of the prior alone."""
  x, ids, clicks = _tiny_log("dbn")
  table = {"attraction": sim.FeatureTable(_MLP(), x)}
  solver = sim.Minibatch(optimizer=optax.adam(0.05), tables=table, num_sessions=48.0, list_size=LIST_SIZE, sparse=False)
  kwargs = {"solver": solver, "num_docs": NUM_DOCS, "l2": 1.0}
  short = [{"doc_ids": ids[i : i + 12], "clicks": clicks[i : i + 12]} for i in range(0, 48, 12)]
  rng = np.random.default_rng(1)
  padded = [
    {
      "doc_ids": np.concatenate([b["doc_ids"], rng.integers(0, NUM_DOCS, (5, LIST_SIZE))]),
      "clicks": np.concatenate([b["clicks"], np.ones((5, LIST_SIZE), np.float32)]),
      "where": np.concatenate([np.ones((12, LIST_SIZE), bool), np.zeros((5, LIST_SIZE), bool)]),
    }
    for b in short
  ]
  a = sim.fit_click_model("dbn", short, **kwargs)
  b = sim.fit_click_model("dbn", padded, **kwargs)
  for got, want in zip(jax.tree.leaves(b.feature_params), jax.tree.leaves(a.feature_params)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  empty = [{"doc_ids": ids[:8], "clicks": clicks[:8], "where": np.zeros((8, LIST_SIZE), bool)}] * 3
  c = sim.fit_click_model("dbn", empty, **kwargs)
  assert all(np.all(np.isfinite(v)) for v in jax.tree.leaves((c.feature_params, c.logits)))


def _long_tail(first_batch, num_sessions, noise=0.0):
  return list(
    sim.simulate_long_tail_log(
      jax.random.key(7),
      "pbm",
      num_sessions=num_sessions,
      num_queries=3000,
      num_candidates=8,
      list_size=LIST_SIZE,
      batch_size=1000,
      first_batch=first_batch,
      feature_weights=WEIGHTS,
      feature_noise=noise,
    )
  )


def _perplexity(params, log, keep):
  ids, clicks = (np.concatenate([b[k] for b in log])[keep] for k in ("doc_ids", "clicks"))
  return sim.evaluate_click_model("pbm", params, ids, clicks)["perplexity"]


def test_a_linear_module_recovers_the_true_model_and_predicts_unseen_documents():
  """On a long-tail log whose attraction is a logistic function of the features, a linear module's held-out
  perplexity is the true model's within 0.005, also on sessions showing documents no training batch showed (where
  one row per document can only give its prior's centre, and loses more)."""
  train, test = _long_tail(0, 8000), _long_tail(100, 3000)
  seen = np.zeros(3000 * 8, bool)
  seen[np.concatenate([b["doc_ids"] for b in train]).ravel()] = True
  ids = np.concatenate([b["doc_ids"] for b in test])
  unseen = ~np.all(seen[ids], axis=-1)
  assert 300 < unseen.sum() < len(ids) - 300
  features = sim.long_tail_document_params(jax.random.key(7), np.arange(3000 * 8), feature_weights=WEIGHTS)
  table = sim.FeatureTable(nn.Dense(1), features["features"])
  train = [{k: b[k][i : i + 250] for k in ("doc_ids", "clicks")} for b in train for i in range(0, 1000, 250)]
  solver = {"optimizer": optax.adam(0.05), "epochs": 4}
  fit = sim.fit_click_model(
    "pbm", train, solver=sim.Minibatch(tables={"attraction": table}, **solver), num_docs=3000 * 8
  )
  full = sim.fit_click_model("pbm", train, solver=sim.Minibatch(**solver), num_docs=3000 * 8)
  true = [
    sim.click_prediction_scores(
      *(np.concatenate([b[k] for b in test])[keep] for k in ("conditional_click_prob", "click_prob", "clicks"))
    )["perplexity"]
    for keep in (unseen, ~unseen)
  ]
  got = [_perplexity(fit.params, test, keep) for keep in (unseen, ~unseen)]
  per_doc = [_perplexity(full.params, test, keep) for keep in (unseen, ~unseen)]
  np.testing.assert_allclose(got, true, atol=0.005)
  assert per_doc[0] > got[0] + 0.01, (per_doc, got)
  kernel = fit.feature_params["attraction"]["params"]["kernel"][:, 0]
  np.testing.assert_allclose(kernel / kernel[0], np.array(WEIGHTS) / WEIGHTS[0], atol=0.15)
  new = np.flatnonzero(~seen)[:5]  # cold start: the module on the unseen documents' features
  np.testing.assert_allclose(
    fit.logits["attraction"][new], table.logits(fit.feature_params["attraction"], features["features"][new]), rtol=1e-6
  )


def test_the_long_tail_log_carries_features_from_which_attraction_follows():
  plain = list(sim.simulate_long_tail_log(jax.random.key(7), "pbm", num_sessions=500, num_queries=100))
  assert "features" not in plain[0]
  log = _long_tail(0, 1500, noise=0.5)
  assert [b["features"].shape for b in log] == [(1000, LIST_SIZE, 3), (500, LIST_SIZE, 3)]
  ids = np.concatenate([b["doc_ids"] for b in log])
  x = np.concatenate([b["features"] for b in log])
  doc = sim.long_tail_document_params(jax.random.key(7), ids, feature_weights=WEIGHTS, feature_noise=0.5)
  np.testing.assert_array_equal(doc["features"], x)  # a function of (key, id): every batch agrees
  exact = sim.long_tail_document_params(jax.random.key(7), ids, feature_weights=WEIGHTS)
  logit = -1.0 + x @ np.array(WEIGHTS, np.float32)
  np.testing.assert_allclose(exact["attraction"], jax.nn.sigmoid(logit), rtol=1e-5)
  noise = np.log(doc["attraction"] / (1 - doc["attraction"])) - logit  # s * N(0, 1) per document
  _, first = np.unique(ids, return_index=True)
  np.testing.assert_allclose(noise.ravel()[first].std(), 0.5, rtol=0.1)
  pooled = sim.long_tail_document_params(jax.random.key(7), np.arange(20_000), feature_weights=WEIGHTS)["features"]
  np.testing.assert_allclose(np.cov(pooled.T), np.eye(3), atol=0.04)  # standard normal, independent


def test_feature_table_errors_name_the_problem():
  x, ids, clicks = _tiny_log("pbm")
  table = sim.FeatureTable(nn.Dense(1), x[:10])
  with pytest.raises(ValueError, match="document id .* but the features have rows for ids 0..9"):
    sim.fit_click_model("pbm", [{"doc_ids": ids, "clicks": clicks}], solver=sim.Minibatch(tables={"attraction": table}))
  with pytest.raises(ValueError, match="features must be \\[num_docs, F\\]"):
    sim.FeatureTable(nn.Dense(1), x[0])
  with pytest.raises(ValueError, match="init\\['attraction'\\] is not its feature table's module parameters"):
    sim.fit_click_model(
      "pbm",
      [{"doc_ids": ids, "clicks": clicks}],
      solver=sim.Minibatch(tables={"attraction": sim.FeatureTable(nn.Dense(1), x)}),
      init={"attraction": {"params": {"kernel": np.zeros((2, 1))}}},
    )
  assert sim.FeatureTable(nn.Dense(1), x) != sim.FeatureTable(nn.Dense(1), x)  # equal only if the same object


def test_over_a_mesh_the_module_is_replicated_and_takes_the_one_device_steps():
  x, ids, clicks = _tiny_log("dbn")
  batches = [{"doc_ids": ids[i : i + 16], "clicks": clicks[i : i + 16]} for i in range(0, 48, 16)]
  kwargs = {"optimizer": optax.adam(0.05), "epochs": 2}
  kwargs["tables"] = {"attraction": sim.FeatureTable(_MLP(), x)}
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("data",))
  one = sim.fit_click_model("dbn", batches, solver=sim.Minibatch(**kwargs), num_docs=NUM_DOCS)
  split = sim.fit_click_model("dbn", batches, solver=sim.Minibatch(mesh=mesh, **kwargs), num_docs=NUM_DOCS)
  for got, want in zip(jax.tree.leaves(split.feature_params), jax.tree.leaves(one.feature_params)):
    assert got.sharding.is_fully_replicated
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(split.logits["satisfaction"], one.logits["satisfaction"], rtol=1e-4, atol=1e-6)
