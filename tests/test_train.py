"""Tests of the generic training loop, sharding, checkpoints and results."""

import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rax

from ultr_jax.data import RankingDataset
from ultr_jax.train import (
  Method,
  default_train_config,
  enable_compilation_cache,
  evaluate,
  fit,
  get_method,
  markdown_table,
  summarize,
  write_results,
)
from ultr_jax.train import input as input_lib
from ultr_jax.train import loop as loop_lib

NUM_FEATURES = 5


def _toy_dataset(num_queries=40, list_size=6, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(num_queries, list_size, NUM_FEATURES)).astype(np.float32)
  w = np.array([1.5, -1.0, 0.5, 0.0, 0.0], np.float32)
  latent = x @ w
  labels = np.clip(np.round(latent + 1.0), 0, 4).astype(np.float32)
  lengths = rng.integers(3, list_size + 1, size=num_queries)
  where = np.arange(list_size)[None, :] < lengths[:, None]
  x = np.where(where[..., None], x, 0.0).astype(np.float32)
  labels = np.where(where, labels, 0.0).astype(np.float32)
  return RankingDataset(features=x, labels=labels, where=where, qid=np.arange(num_queries))


def _toy_method(trace_counter=None):
  """A linear ranker trained with a listwise softmax on clicks (or labels)."""

  def init(key, batch):
    params = {"w": 0.01 * jax.random.normal(key, (NUM_FEATURES,)), "b_pos": jnp.zeros((3,))}
    return params, {"calls": jnp.zeros(())}

  def score(params, batch):
    return batch["features"] @ params["w"]

  def loss(params, extra, batch, key):
    if trace_counter is not None:
      trace_counter.append(1)
    target = batch["clicks"] if "clicks" in batch else batch["labels"]
    value = rax.softmax_loss(score(params, batch), target, where=batch["where"])
    return value, ({"target_mean": jnp.mean(target)}, {"calls": extra["calls"] + 1})

  def propensities(params, extra):
    return jnp.exp(params["b_pos"])

  return Method(name="toy", init=init, loss=loss, score=score, propensities=propensities)


def _toy_click_fn(key, batch):
  """Clicks with probability (label / 4) * (1 / (rank + 1))."""
  positions = jnp.arange(batch["where"].shape[-1])
  exam = 1.0 / (positions + 1.0) * jnp.ones_like(batch["labels"])
  p = batch["labels"] / 4.0 * exam
  clicks = jax.random.bernoulli(key, p) & batch["where"]
  return {"clicks": clicks.astype(jnp.float32), "examination": exam}


def _config(**overrides):
  c = default_train_config()
  c.steps = 30
  c.batch_size = 8
  c.learning_rate = 0.05
  c.eval_every = 10
  c.progress = False
  c.num_devices = 1
  for k, v in overrides.items():
    c[k] = v
  return c


def test_fit_learns_and_vmaps_seeds():
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  method = _toy_method()
  before = evaluate(method, jax.vmap(lambda s: method.init(jax.random.key(s), None)[0])(jnp.arange(3)), valid)
  result = fit(method, train, valid, click_fn=_toy_click_fn, config=_config(steps=60), seeds=(0, 1, 2))
  after = evaluate(method, result.params, valid)
  assert after["ndcg@10"].shape == (3,)
  assert np.all(after["ndcg@10"] > before["ndcg@10"] + 0.02)
  # Seeds are independent runs: different clicks and initialisations.
  assert not np.allclose(result.final_params["w"][0], result.final_params["w"][1])
  # The non-trained state was threaded through every step.
  np.testing.assert_array_equal(np.asarray(jax.device_get(result.extra["calls"])) > 0, True)
  assert len(result.history) == 6
  assert set(result.history[0]) >= {"step", "train/loss", "train/target_mean", "valid/ndcg@10"}


def test_best_state_is_the_best_validation_state(capsys):
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  method = _toy_method()
  result = fit(
    method,
    train,
    valid,
    click_fn=_toy_click_fn,
    config=_config(steps=40, progress=True, progress_every=4),
    seeds=(0, 1),
  )
  # progress: a timing line every 4 steps between evaluations, the loss and metric at each evaluation
  err = capsys.readouterr().err
  assert [int(s) for s in re.findall(r"step (\d+)/40 \(", err)] == [4, 8, 12, 16, 24, 28, 32, 36]
  assert [int(s) for s in re.findall(r"step (\d+)/40 loss", err)] == [10, 20, 30, 40]
  curve = np.array([h["valid/ndcg@10"] for h in result.history])  # [evals, S]
  np.testing.assert_allclose(result.best_metric, curve.max(0), rtol=1e-6)
  best = evaluate(method, result.params, valid)
  np.testing.assert_allclose(best["ndcg@10"], curve.max(0), rtol=1e-5)


def test_early_stopping_stops():
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  result = fit(
    _toy_method(),
    train,
    valid,
    click_fn=_toy_click_fn,
    config=_config(steps=400, learning_rate=0.0, patience=2),
    seeds=(0,),
  )
  # lr = 0: the first evaluation is the best, two more without improvement.
  assert len(result.history) == 3


def test_compiles_once():
  traces = []
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  fit(_toy_method(traces), train, valid, click_fn=_toy_click_fn, config=_config(steps=25), seeds=(0, 1))
  assert len(traces) == 1


@pytest.mark.parametrize("steps_per_call", [4, 10, 100])
def test_steps_per_call_equals_one_step_per_call(steps_per_call):
  # 25 steps, evaluations every 10: calls of 10 (or 5, or 2) steps and a shorter last call whose
  # dead steps must leave the state alone; history, best state and final state as one call per step.
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  kw = dict(click_fn=_toy_click_fn, seeds=(0, 1))
  one = fit(_toy_method(), train, valid, config=_config(steps=25, steps_per_call=1), **kw)
  many = fit(_toy_method(), train, valid, config=_config(steps=25, steps_per_call=steps_per_call), **kw)
  assert [h["step"] for h in many.history] == [10, 20, 25]
  for a, b in zip(one.history, many.history):
    assert a.keys() == b.keys()
    for k in a:
      np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-7, err_msg=k)
  for k in ("w", "b_pos"):
    np.testing.assert_allclose(one.final_params[k], many.final_params[k], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(one.params[k], many.params[k], rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(one.extra["calls"], many.extra["calls"])  # 25 live steps, no more
  np.testing.assert_array_equal(one.best_step, many.best_step)


def test_compilation_cache_relative_path_needs_a_workdir():
  with pytest.raises(ValueError, match="relative: it needs a workdir"):
    enable_compilation_cache("jax_cache")
  assert enable_compilation_cache("", None) is None  # off: nothing changes


def test_logged_clicks_without_click_fn():
  train = _toy_dataset(seed=0)
  # All-zero logged clicks: the softmax loss is exactly 0 and nothing moves,
  # which would not hold if the loop simulated or read any other target.
  clicks = np.zeros_like(train.labels)
  result = fit(
    _toy_method(), train.with_extras(clicks=clicks), None, click_fn=None, config=_config(steps=20), seeds=(0,)
  )
  assert result.history[-1]["train/loss"] == [0.0]
  assert result.history[-1]["train/target_mean"] == [0.0]


def test_display_batch_moves_every_item_array_with_its_item():
  rng = np.random.default_rng(0)
  where = np.arange(5)[None, :] < np.array([[5], [3]])
  batch = {
    "features": jnp.asarray(rng.normal(size=(2, 5, 3)), jnp.float32),
    "labels": jnp.arange(10.0).reshape(2, 5),
    "where": jnp.asarray(where),
    "qid": jnp.array([7, 8]),
    "positions": jnp.array([[4, 3, 2, 1, 0]] * 2),
  }
  scores = jnp.asarray(rng.normal(size=(2, 5)), jnp.float32)
  out = loop_lib.display_batch(batch, scores)
  for q in range(2):  # the valid items by descending score, then the masked ones in stored order
    valid = np.flatnonzero(where[q])
    order = list(valid[np.argsort(-np.asarray(scores)[q, valid], kind="stable")]) + list(np.flatnonzero(~where[q]))
    np.testing.assert_array_equal(out["labels"][q], np.asarray(batch["labels"])[q, order])
    np.testing.assert_array_equal(out["features"][q], np.asarray(batch["features"])[q, order])
    np.testing.assert_array_equal(out["where"][q], where[q, order])
  np.testing.assert_array_equal(out["qid"], batch["qid"])  # per-query arrays stay
  np.testing.assert_array_equal(out["positions"], np.broadcast_to(np.arange(5), (2, 5)))
  # A Plackett-Luce draw: the order of plackett_luce_sample's positions; with far-apart scores, the sorted one.
  from ultr_jax.simulation import plackett_luce_sample

  key = jax.random.key(3)
  drawn = loop_lib.display_batch(batch, scores, mode="model_sample", key=key)
  order = jnp.argsort(plackett_luce_sample(key, scores, where=batch["where"]), axis=-1)
  np.testing.assert_array_equal(drawn["labels"], jnp.take_along_axis(batch["labels"], order, axis=-1))
  far = loop_lib.display_batch(batch, 100.0 * scores, mode="model_sample", key=key)
  np.testing.assert_array_equal(far["where"], out["where"])
  np.testing.assert_array_equal(np.where(far["where"], far["labels"], -1), np.where(out["where"], out["labels"], -1))
  with pytest.raises(ValueError, match="needs a key"):
    loop_lib.display_batch(batch, scores, mode="model_sample")
  with pytest.raises(ValueError, match="unknown mode 'random'"):
    loop_lib.display_batch(batch, scores, mode="random")


def test_model_display_equals_the_logged_display_of_the_models_order():
  """With a frozen ranker (learning rate 0) the "model" display shows every list in the initial ranker's
  order: the run equals a "logged" run on lists stored in that order, and differs from one on the stored order."""
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  kw = dict(click_fn=_toy_click_fn, seeds=(0,))
  shown = fit(_toy_method(), train, valid, config=_config(learning_rate=0.0, display="model"), **kw)
  scores = np.where(train.where, train.features @ np.asarray(shown.final_params["w"][0]), -np.inf)
  order = np.argsort(-scores, axis=1, kind="stable")
  presorted = train.replace(
    features=np.take_along_axis(train.features, order[..., None], 1),
    labels=np.take_along_axis(train.labels, order, 1),
    where=np.take_along_axis(train.where, order, 1),
  )
  logged = fit(_toy_method(), presorted, valid, config=_config(learning_rate=0.0), **kw)
  stored = fit(_toy_method(), train, valid, config=_config(learning_rate=0.0), **kw)
  got, want = [[h["train/loss"] for h in r.history] for r in (shown, logged)]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert not np.allclose(got, [h["train/loss"] for h in stored.history], rtol=1e-3)


def test_a_model_sample_display_trains_compiles_once_and_needs_simulated_clicks():
  traces = []
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  method = _toy_method(traces)
  before = evaluate(method, jax.vmap(lambda s: method.init(jax.random.key(s), None)[0])(jnp.arange(2)), valid)
  result = fit(
    method, train, valid, click_fn=_toy_click_fn, config=_config(steps=60, display="model_sample"), seeds=(0, 1)
  )
  assert len(traces) == 1
  assert np.all(evaluate(method, result.params, valid)["ndcg@10"] > before["ndcg@10"] + 0.02)
  with pytest.raises(ValueError, match="needs a click_fn"):
    fit(method, train.with_extras(clicks=np.zeros_like(train.labels)), None, config=_config(display="model"))
  with pytest.raises(ValueError, match="config.display: 'best' is out of range; expected one of"):
    fit(method, train, None, click_fn=_toy_click_fn, config=_config(display="best"))


def test_pdgd_learns_from_its_own_plackett_luce_samples():
  """The registered ``pdgd`` method on the ``model_sample`` display is batched PDGD: it learns under position bias."""
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  method = get_method("pdgd", {"ranker": "linear"}, num_features=NUM_FEATURES, list_size=train.where.shape[-1])
  before = evaluate(method, jax.vmap(lambda s: method.init(jax.random.key(s), None)[0])(jnp.arange(2)), valid)
  result = fit(
    method, train, valid, click_fn=_toy_click_fn, config=_config(steps=60, display="model_sample"), seeds=(0, 1)
  )
  assert np.all(evaluate(method, result.params, valid)["ndcg@10"] > before["ndcg@10"] + 0.02)


@pytest.mark.parametrize("data_shards", [0, 8])
@pytest.mark.parametrize("display", ["logged", "model_sample"])
def test_sharded_equals_single_device(display, data_shards):
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)")
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  kw = dict(click_fn=_toy_click_fn, seeds=(0, 1))
  # data_shards=0: one unsharded array on 1 device, sharded on 8; 8: the same strata on 1 and 8 devices.
  one = fit(_toy_method(), train, valid, config=_config(num_devices=1, data_shards=data_shards, display=display), **kw)
  eight = fit(
    _toy_method(), train, valid, config=_config(num_devices=8, data_shards=data_shards, display=display), **kw
  )
  for a, b in zip(one.history, eight.history):
    np.testing.assert_allclose(a["train/loss"], b["train/loss"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(one.final_params["w"], eight.final_params["w"], rtol=1e-5, atol=1e-6)


def test_resume_equals_uninterrupted(tmp_path):
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  full = fit(
    _toy_method(),
    train,
    valid,
    click_fn=_toy_click_fn,
    config=_config(steps=30),
    seeds=(0, 1),
    workdir=str(tmp_path / "full"),
  )
  part = str(tmp_path / "part")
  fit(_toy_method(), train, valid, click_fn=_toy_click_fn, config=_config(steps=20), seeds=(0, 1), workdir=part)
  ckpt_dir = os.path.join(part, "checkpoints", "toy")
  assert sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())[-1] == 20
  seen = []
  resumed = fit(
    _toy_method(),
    train,
    valid,
    click_fn=_toy_click_fn,
    config=_config(steps=30),
    seeds=(0, 1),
    workdir=part,
    on_eval=seen.append,
  )
  for key in ("w", "b_pos"):
    np.testing.assert_array_equal(resumed.final_params[key], full.final_params[key])
    np.testing.assert_array_equal(resumed.params[key], full.params[key])
  np.testing.assert_array_equal(resumed.extra["calls"], full.extra["calls"])
  np.testing.assert_array_equal(resumed.best_step, full.best_step)
  assert [h["step"] for h in resumed.history] == [10, 20, 30]
  assert resumed.history == full.history
  assert seen == full.history[2:]  # on_eval sees the evaluations this call made, not the restored ones


def test_batch_indices_cover_each_epoch_and_pad():
  idx = np.stack([input_lib._batch_indices(10, 4, s, [0], 0)[0] for s in range(5)])
  # Steps 0..4 consume 20 slots = two epochs of 10 queries, each a permutation.
  flat = idx.reshape(-1)
  assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
  np.testing.assert_array_equal(idx, np.stack([input_lib._batch_indices(10, 4, s, [0], 0)[0] for s in range(5)]))
  padded = input_lib._batch_indices(3, 8, 0, [0, 1], 0)
  assert padded.shape == (2, 8) and (padded[:, 3:] == -1).all()
  assert sorted(padded[0, :3]) == [0, 1, 2]


def test_evaluate_idcg_zero_convention():
  ds = _toy_dataset(num_queries=4)
  labels = ds.labels.copy()
  labels[0] = 0.0  # a query without relevant documents
  ds = ds.replace(labels=labels)
  method = _toy_method()
  params = jax.vmap(lambda s: method.init(jax.random.key(s), None)[0])(jnp.arange(1))
  kept = evaluate(method, params, ds)["ndcg@10"]
  dropped = evaluate(method, params, ds, drop_no_relevant=True)["ndcg@10"]
  # Averaged in as 0: mean over 4 queries equals 3/4 of the mean over the 3 others.
  np.testing.assert_allclose(kept, dropped * 3 / 4, rtol=1e-6)


def test_summarize_and_results(tmp_path):
  s = summarize([1.0, 2.0, 3.0, 4.0])
  assert s["mean"] == 2.5
  np.testing.assert_allclose(s["std"], np.std([1, 2, 3, 4], ddof=1))
  # t_{0.95, 3} = 2.353363
  np.testing.assert_allclose(s["ci90"], 2.353363 * s["std"] / 2, rtol=1e-5)
  assert summarize([0.7]) == {"mean": 0.7, "std": 0.0, "ci90": 0.0}
  rows = {"ips": {"ndcg@10": summarize([0.5, 0.7])}, "naive": {"ndcg@10": 0.4}}
  write_results(str(tmp_path), {"ips": {"x": np.float32(1.5), "nan": float("nan")}}, rows=rows, columns=["ndcg@10"])
  assert json.loads((tmp_path / "results.json").read_text()) == {"ips": {"x": 1.5, "nan": None}}
  assert "| ips | 0.6000 ± " in (tmp_path / "table.md").read_text()
  assert (tmp_path / "table.csv").read_text().splitlines()[0] == "method,ndcg@10,ndcg@10_std,ndcg@10_ci90"
  assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
  assert markdown_table({"a": {"m": "n/a"}}, ["m"]).splitlines()[-1] == "| a | n/a |"


def test_unknown_optimizer_and_select_metric():
  c = _config()
  c.optimizer = "lbfgs-ish"
  with pytest.raises(ValueError, match="unknown optimizer"):
    loop_lib.make_optimizer(c)
  train, valid = _toy_dataset(seed=0), _toy_dataset(seed=1)
  with pytest.raises(ValueError, match="select_metric"):
    fit(_toy_method(), train, valid, click_fn=_toy_click_fn, config=_config(select_metric="auc"))


def test_evaluate_clicks_equals_the_click_metrics_on_the_whole_set_in_any_chunks():
  import dataclasses  # noqa: PLC0415
  from ultr_jax import data, metrics  # noqa: PLC0415
  from ultr_jax.train import evaluate_clicks  # noqa: PLC0415

  ds = data.make_synthetic(
    num_train=11, num_valid=1, num_test=1, list_size=5, num_features=3, seed=2, min_list_size=2
  ).train
  rng = np.random.default_rng(0)
  ds = dataclasses.replace(ds, extras={"clicks": ((rng.random(ds.where.shape) < 0.3) & ds.where).astype(np.float32)})
  m = get_method("click_model_ubm", {"ranker": "linear"}, num_features=3, list_size=5)
  # The reference per seed in one jitted program (eagerly, every op would compile its own).
  params, extra = jax.jit(
    lambda keys: jax.tree.map(
      lambda p: p + 0.3 * jax.random.normal(jax.random.key(2), p.shape), jax.vmap(lambda k: m.init(k, None))(keys)
    ),
  )(jax.random.split(jax.random.key(1), 2))
  batch = jax.tree.map(jnp.asarray, {k: v for k, v in ds.as_batch().items() if k != "qid"})

  @jax.jit
  def reference(params, s):
    z = m.click_logits(jax.tree.map(lambda p: p[s], params), {}, batch)
    return (
      metrics.click_log_likelihood(z, batch["clicks"], where=batch["where"], logits=True),
      metrics.click_perplexity(z, batch["clicks"], where=batch["where"], logits=True),
    )

  want_ll, want_ppl = [], []
  for s in range(2):
    ll, ppl = reference(params, s)
    want_ll.append(float(ll))
    want_ppl.append(float(ppl))
  for size in (3, 100):
    got = evaluate_clicks(m, params, extra, ds, batch_size=size)
    np.testing.assert_allclose(got["click_ll"], want_ll, rtol=1e-5)
    np.testing.assert_allclose(got["click_perplexity"], want_ppl, rtol=1e-5)
  with pytest.raises(ValueError, match="is not a click model"):
    evaluate_clicks(get_method("naive", {"ranker": "linear"}, num_features=3, list_size=5), params, extra, ds)


def test_predict_is_the_score_of_every_list_in_any_chunks_and_writes_a_trec_run(tmp_path):
  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax.train import predict, write_run  # noqa: PLC0415

  ds = data.make_synthetic(
    num_train=11, num_valid=1, num_test=1, list_size=6, num_features=3, seed=4, min_list_size=2
  ).train
  m = get_method("naive", {"ranker": "mlp", "hidden_sizes": (4,)}, num_features=3, list_size=6)
  params = jax.jit(jax.vmap(lambda k: m.init(k, None)[0]))(jax.random.split(jax.random.key(0), 2))
  score = jax.jit(lambda params, s: m.score(jax.tree.map(lambda p: p[s], params), {"features": ds.features}))
  want = np.stack([np.asarray(score(params, s)) for s in range(2)])
  for batch_size in (4, 512):  # a padded last chunk, and one chunk
    got = predict(m, params, ds, batch_size=batch_size)
    assert got.shape == (2, 11, 6) and got.dtype == np.float32
    np.testing.assert_allclose(got[:, ds.where], want[:, ds.where], rtol=1e-6)
    assert np.all(got[:, ~ds.where] == -np.inf)
  # The run file ranks each query's valid items by the scores; parsed back, it is that ranking.
  doc_ids = np.arange(ds.where.size).reshape(ds.where.shape) + 1000
  n = write_run(str(tmp_path / "run.txt"), got[1], ds.qid, ds.where, doc_ids=doc_ids, run_name="m")
  rows = [line.split() for line in (tmp_path / "run.txt").read_text().splitlines()]
  assert n == len(rows) == int(ds.where.sum()) and {r[1] for r in rows} == {"Q0"} and {r[5] for r in rows} == {"m"}
  for q in range(ds.num_queries):
    mine = [r for r in rows if int(r[0]) == ds.qid[q]]
    items = np.flatnonzero(ds.where[q])
    ranked = items[np.argsort(-got[1, q, items], kind="stable")]
    assert [int(r[2]) for r in mine] == doc_ids[q, ranked].tolist()
    assert [int(r[3]) for r in mine] == list(range(1, len(items) + 1))
    np.testing.assert_array_equal(np.float32([float(r[4]) for r in mine]), got[1, q, ranked])  # float32 round-trips
  assert write_run(str(tmp_path / "top2.txt"), got[0], ds.qid, ds.where, depth=2) == 2 * ds.num_queries
  with pytest.raises(ValueError, match="index predict"):
    write_run(str(tmp_path / "bad.txt"), got, ds.qid, ds.where)
  nan = got[0].copy()
  nan[3, 1] = np.nan
  with pytest.raises(ValueError, match=rf"query {ds.qid[3]} item 1 is nan"):
    write_run(str(tmp_path / "bad.txt"), nan, ds.qid, ds.where)
  assert not (tmp_path / "bad.txt").exists()
