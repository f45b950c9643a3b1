"""Tests of the CLD Methods (train/methods/cld.py) and the study's orchestration (experiments/cld)."""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from ultr_jax import losses
from ultr_jax.data import RankingDataset
from ultr_jax.simulation import simulate_topk_log, topk_log_dataset
from ultr_jax.train import evaluate, fit, get_method

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMES = ("cld", "cld_n", "cld_pair", "cld_pair_l", "heckman_rank", "rank_agg")
CONFIG = ml_collections.ConfigDict({"hidden_sizes": (8, 4), "dropout": 0.5})


def _load(name, path):
  spec = importlib.util.spec_from_file_location(name, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _batch(b=3, l=6, f=4, k=3):
  rng = np.random.default_rng(0)
  pos = np.broadcast_to(np.arange(l), (b, l))
  shown = pos < k
  return {"features": jnp.asarray(rng.normal(size=(b, l, f)), jnp.float32),
          "where": jnp.asarray(np.arange(l)[None] < np.array([6, 5, 2])[:, None]),
          "shown": jnp.asarray(shown), "sessions": jnp.array([3.0, 0.0, 5.0]),
          "clicks": jnp.asarray(np.where(shown, rng.uniform(0, 1, (b, l)), 0), jnp.float32),
          "examination": jnp.asarray(np.where(shown, 1.0 / (pos + 1), 0.0), jnp.float32)}


@pytest.mark.parametrize("name", NAMES)
def test_method_loss_grads_and_score(name):
  m = get_method(name, CONFIG, num_features=4, list_size=6)
  batch = _batch()
  params, extra = m.init(jax.random.key(0), batch)
  (loss, (aux, _)), grads = jax.jit(jax.value_and_grad(m.loss, has_aux=True))(
      params, extra, batch, jax.random.key(1))
  assert np.isfinite(float(loss))
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  assert any(np.any(g != 0) for g in jax.tree.leaves(grads))
  scores = m.score(params, batch)
  assert scores.shape == (3, 6)
  # scoring never reads clicks, propensities or the selection indicator
  other = {**batch, "clicks": jnp.zeros((3, 6)), "shown": jnp.zeros((3, 6), bool)}
  np.testing.assert_array_equal(np.asarray(m.score(params, other)), np.asarray(scores))


def test_cld_method_loss_is_the_weighted_cld_loss():
  m = get_method("cld", ml_collections.ConfigDict({"gamma": 0.3, "link": "logit"}), num_features=4, list_size=6)
  batch = _batch()
  params, extra = m.init(jax.random.key(0), batch)
  loss, _ = m.loss(params, extra, batch, jax.random.key(1))
  sel = m.score({"relevance": params["selection"]}, batch)
  ref = losses.cld_loss(m.score(params, batch), sel, batch["clicks"], propensities=batch["examination"],
                        shown=batch["shown"], where=batch["where"], gamma=0.3, link="logit",
                        weights=jnp.broadcast_to(batch["sessions"][:, None], (3, 6)))
  np.testing.assert_allclose(float(loss), float(ref), rtol=1e-6)


def test_rank_agg_scores_are_borda_of_ips_and_heckman():
  agg = get_method("rank_agg", CONFIG, num_features=4, list_size=6)
  ips = get_method("ips", ml_collections.ConfigDict({**CONFIG.to_dict(), "ranker": "mlp", "layer_norm": False}),
                   num_features=4, list_size=6)
  heck = get_method("heckman_rank", CONFIG, num_features=4, list_size=6)
  batch = _batch()
  p_ips, _ = ips.init(jax.random.key(0), batch)
  p_h, _ = heck.init(jax.random.key(1), batch)
  got = agg.score({"ips": p_ips, "heckman": p_h}, batch)
  ref = losses.borda_scores(ips.score(p_ips, batch), heck.score(p_h, batch), where=batch["where"])
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


def test_cld_trains_through_the_loop_and_beats_its_init():
  """Linear CLD on a top-k log whose relevance is linear in x: fit() improves test NDCG@3."""
  rng = np.random.default_rng(0)
  q, l, f = 200, 8, 5
  x = rng.normal(size=(q, l, f)).astype(np.float32)
  true = x @ np.array([1.0, -1.0, 0.5, 0.0, 0.0])
  labels = (true > 0.8).astype(np.float32)
  order = np.argsort(-(true + rng.normal(size=true.shape)), axis=1)  # a noisy production ranker
  x, labels = np.take_along_axis(x, order[..., None], 1), np.take_along_axis(labels, order, 1)
  ds = RankingDataset(x, labels, np.ones((q, l), bool), np.arange(q))
  log = simulate_topk_log(jax.random.key(0), ds.labels, where=ds.where, k=4, num_sessions=20000, threshold=1.0)
  train = topk_log_dataset(ds, log, drop_unseen=False)
  m = get_method("cld", ml_collections.ConfigDict(), num_features=f, list_size=l)
  cfg = ml_collections.ConfigDict({"steps": 150, "batch_size": 64, "learning_rate": 0.05, "eval_every": 150,
                                   "progress": False})
  res = fit(m, train, None, config=cfg, seeds=(0, 1))
  init = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(9), 2))
  after = evaluate(m, res.params, ds, cutoffs=(3,))["ndcg@3"]
  before = evaluate(m, init, ds, cutoffs=(3,))["ndcg@3"]
  assert after.shape == (2,)
  assert np.all(after > before + 0.1), (before, after)


def test_study_grid_keys_and_orderings():
  study = _load("cld_study", ROOT / "experiments" / "cld" / "study.py")
  configs = _load("cld_config", ROOT / "experiments" / "cld" / "configs" / "default.py")
  c = configs.get_config()
  points = study.grid_points(c)
  assert "k=5/eta=1.0/noise=0.1/sessions=100000" in points
  assert "k=5/eta=0.1/noise=0.1/sessions=100000" in points
  assert "k=3/eta=1.0/noise=0.1/sessions=100000/assumed_eta=2.0" in points
  assert len({tuple(sorted(e["params"].items())) for e in points.values()}) == len(points)
  # a synthetic raw result: IPS beats naive by 0.1 on every seed -> "holds"
  s = configs.get_config("smoke")
  seeds = np.arange(4.0)
  mk = lambda v: {m: v + 0.01 * seeds for m in study.METRICS}
  key = study.point_key(3, 1.0, 0.1, 2000)
  raw = {key: {"ips": mk(0.6), "naive": mk(0.5)}}
  out = study.orderings(raw, s)
  o = out["ips_minus_naive/k=5,eta=1/ndcg@1"]
  assert o["verdict"] == "holds" and abs(o["mean"] - 0.1) < 1e-12
  raw = {key: {"ips": mk(0.5), "naive": {m: v + np.array([0.1, -0.1, 0.1, -0.1]) for m, v in mk(0.5).items()}}}
  assert study.orderings(raw, s)["ips_minus_naive/k=5,eta=1/ndcg@1"]["verdict"] == "not separated"
