"""Tests of the CLD Methods (train/methods/cld.py) and the study's orchestration (studies/cld.py)."""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from ultr_jax import data as data_lib
from ultr_jax import losses
from ultr_jax.data import RankingDataset
from ultr_jax.simulation import simulate_topk_log, topk_log_dataset, topk_selection_data
from ultr_jax.studies import cld as cld_study
from ultr_jax.train import evaluate, fit, get_method, shared_method_configs

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMES = ("cld", "cld_n", "cld_pair", "cld_pair_l", "heckman_rank", "rank_agg")
CONFIG = ml_collections.ConfigDict({"hidden_sizes": (8, 4), "dropout": 0.5})  # the family's shared section
CONFIGS = shared_method_configs(NAMES, CONFIG)  # each method's fields of it (the linear ones take none)


def _load(name, path):
  spec = importlib.util.spec_from_file_location(name, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def _batch(b=3, l=6, f=4, k=3):
  rng = np.random.default_rng(0)
  pos = np.broadcast_to(np.arange(l), (b, l))
  shown = pos < k
  return {
    "features": jnp.asarray(rng.normal(size=(b, l, f)), jnp.float32),
    "where": jnp.asarray(np.arange(l)[None] < np.array([6, 5, 2])[:, None]),
    "shown": jnp.asarray(shown),
    "sessions": jnp.array([3.0, 0.0, 5.0]),
    "clicks": jnp.asarray(np.where(shown, rng.uniform(0, 1, (b, l)), 0), jnp.float32),
    "examination": jnp.asarray(np.where(shown, 1.0 / (pos + 1), 0.0), jnp.float32),
  }


@pytest.mark.parametrize("name", NAMES)
def test_method_loss_grads_and_score(name):
  m = get_method(name, CONFIGS[name], num_features=4, list_size=6)
  batch = _batch()
  params, extra = m.init(jax.random.key(0), batch)
  (loss, (aux, _)), grads = jax.jit(jax.value_and_grad(m.loss, has_aux=True))(params, extra, batch, jax.random.key(1))
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
  ref = losses.cld_loss(
    m.score(params, batch),
    batch["clicks"],
    selection_scores=sel,
    propensities=batch["examination"],
    shown=batch["shown"],
    where=batch["where"],
    gamma=0.3,
    link="logit",
    weights=jnp.broadcast_to(batch["sessions"][:, None], (3, 6)),
  )
  np.testing.assert_allclose(float(loss), float(ref), rtol=1e-6)


def test_rank_agg_scores_are_borda_of_ips_and_heckman():
  agg = get_method("rank_agg", CONFIG, num_features=4, list_size=6)
  ips = get_method(
    "ips",
    ml_collections.ConfigDict({**CONFIG.to_dict(), "ranker": "mlp", "layer_norm": False}),
    num_features=4,
    list_size=6,
  )
  heck = get_method("heckman_rank", CONFIGS["heckman_rank"], num_features=4, list_size=6)
  batch = _batch()
  p_ips, _ = ips.init(jax.random.key(0), batch)
  p_h, _ = heck.init(jax.random.key(1), batch)
  got = agg.score({"ips": p_ips, "heckman": p_h}, batch)
  ref = losses.borda_scores(ips.score(p_ips, batch), heck.score(p_h, batch), where=batch["where"])
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


@pytest.mark.parametrize("loss_type", ["listwise", "pairwise"])
def test_rank_agg_loss_is_its_ips_loss_on_the_shown_items_plus_heckman(loss_type):
  config = ml_collections.ConfigDict({"hidden_sizes": (8, 4), "dropout": 0.0, "loss_type": loss_type})
  agg = get_method("rank_agg", config, num_features=4, list_size=6)
  ips = get_method(
    "ips", ml_collections.ConfigDict({**config.to_dict(), "layer_norm": False}), num_features=4, list_size=6
  )
  heck = get_method("heckman_rank", {}, num_features=4, list_size=6)
  batch = _batch()
  params, extra = agg.init(jax.random.key(0), batch)
  loss, _ = agg.loss(params, extra, batch, jax.random.key(1))
  shown = {**batch, "where": batch["where"] & batch["shown"]}
  want = (
    ips.loss(params["ips"], {}, shown, jax.random.key(1))[0]
    + heck.loss(params["heckman"], {}, batch, jax.random.key(1))[0]
  )
  np.testing.assert_allclose(float(loss), float(want), rtol=1e-6)


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
  cfg = ml_collections.ConfigDict(
    {"steps": 150, "batch_size": 64, "learning_rate": 0.05, "eval_every": 150, "progress": False}
  )
  res = fit(m, train, None, config=cfg, seeds=(0, 1))
  init = jax.vmap(lambda k: m.init(k, None)[0])(jax.random.split(jax.random.key(9), 2))
  after = evaluate(m, res.params, ds, cutoffs=(3,))["ndcg@3"]
  before = evaluate(m, init, ds, cutoffs=(3,))["ndcg@3"]
  assert after.shape == (2,)
  assert np.all(after > before + 0.1), (before, after)


def _study_and_configs():
  return (cld_study, _load("cld_config", ROOT / "experiments" / "cld" / "configs" / "default.py"))


def test_study_grid_keys():
  study, configs = _study_and_configs()
  c = configs.get_config()
  # the paper's setting: the learners see all 20 generated features on the main grid
  assert (c.data.num_features, c.data.num_hidden, c.data.num_hidden_sweep) == (20, 0, 4)
  points = study.grid_points(c)
  assert "k=5/eta=1.0/noise=0.1/sessions=100000" in points
  assert "k=5/eta=0.1/noise=0.1/sessions=100000" in points
  assert "k=3/eta=1.0/noise=0.1/sessions=100000/assumed_eta=2.0" in points
  assert len({tuple(sorted(e["params"].items())) for e in points.values()}) == len(points)
  hidden = [k for k, e in points.items() if e["params"]["hidden"] is not None]
  assert hidden == [f"hidden=4/k={k}/eta=1.0/noise=0.1/sessions=100000" for k in (2, 3, 5, 10, 20)]
  assert all(points[k]["tags"] == ["k_hidden"] and points[k]["params"]["hidden"] == 4 for k in hidden)
  assert set(points[hidden[0]]["methods"]) == set(c.methods) - {"oracle"}
  assert all(not k.startswith("hidden") for k in points if k not in hidden)
  assert len(points) == 19 + 5
  # the smoke config exercises both parts, and the paper config neither sweep
  smoke = study.grid_points(configs.get_config("smoke"))
  assert [k for k in smoke if k.startswith("hidden=")] == [
    "hidden=2/k=2/eta=1.0/noise=0.1/sessions=2000",
    "hidden=2/k=3/eta=1.0/noise=0.1/sessions=2000",
  ]
  assert len(smoke) == 8
  assert list(study.grid_points(configs.get_config("paper"))) == [
    "k=5/eta=1.0/noise=0.1/sessions=100000",
    "k=5/eta=0.1/noise=0.1/sessions=100000",
  ]


def test_study_learner_views_share_data_and_production_order():
  """The hidden sweep differs from the main grid only in the features the learners see."""
  study, configs = _study_and_configs()
  c = configs.get_config("smoke")
  c.data.num_train, c.data.num_test = 30, 10
  splits, main_hidden = study.load_data(c)
  assert main_hidden == 0 and splits.train.num_features == c.data.num_features + c.data.num_hidden == 8
  assert study.learner_view(splits, 0) is splits
  view = study.learner_view(splits, c.data.num_hidden_sweep)
  # the same as hiding inside topk_selection_data, from the same generated data
  d = c.data
  raw = data_lib.make_synthetic(
    d.num_train, d.num_valid, d.num_test, list_size=d.list_size, num_features=8, seed=d.seed, noise=d.label_noise
  )
  ref, _ = topk_selection_data(
    raw, num_hidden=2, threshold=c.threshold, logging_fraction=c.logging_fraction, seed=d.seed
  )
  for a, b, full in zip(view, ref, splits):
    assert a.num_features == 6
    np.testing.assert_array_equal(a.features, b.features)
    np.testing.assert_array_equal(a.features, full.features[..., :6])
    np.testing.assert_array_equal(a.labels, full.labels)
    np.testing.assert_array_equal(a.extras["logging_scores"], b.extras["logging_scores"])
  with pytest.raises(ValueError):
    study.learner_view(splits, 8)


def _fake_raw(study, config, gains):
  """Per-seed metrics on every smoke grid point; ``gains[key][method]`` is added to a 0.5 baseline."""
  seeds = np.arange(4.0)
  out = {}
  for key, entry in study.grid_points(config).items():
    out[key] = {
      m: {k: 0.5 + gains.get(key, {}).get(m, 0.0) + 0.01 * seeds for k in study.METRICS}
      for m in entry["methods"] + ["oracle"]
    }
  return out


def test_study_orderings():
  study, configs = _study_and_configs()
  s = configs.get_config("smoke")
  key = lambda **kw: study.point_key(**{"k": 3, "eta": 1.0, "noise": 0.1, "sessions": 2000, **kw})
  good = {
    key(): {"ips": 0.1},  # 1: IPS beats naive
    key(eta=0.0, assumed_eta=0.0): {"heckman_rank": 0.3, "ips": 0.05},  # 2: Heckman falls by 0.3, ips by 0.05
    key(k=2, hidden=2): {"cld": 0.2},  # 3: CLD gains 0.2 over IPS at k=2 and nothing at k=3 (hidden sweep)
    key(assumed_eta=2.0): {"ips": -0.3, "cld": -0.05},  # 4: eta-hat = 2 costs IPS 0.4, CLD 0.15
  }
  good[key()]["cld"] = 0.1
  out = study.orderings(_fake_raw(study, s, good), s)
  assert list(out) == list(study.ORDERINGS) and len(out) == 4
  for name, e in out.items():
    assert e["holds"] is True and e["verdict"] == "holds", name
    assert e["metric"] == "ndcg@1" and set(e["by_metric"]) == set(study.METRICS)
    assert e["interval"][0] == pytest.approx(e["mean"] - e["ci90"]) and e["interval"][0] > 0
  assert out["ips_beats_naive"]["mean"] == pytest.approx(0.1)
  assert out["heckman_falls_fastest"]["mean"] == pytest.approx(0.25)  # minus the largest other drop (ips)
  assert out["heckman_falls_fastest"]["versus"]["naive"]["mean"] == pytest.approx(0.3)
  o3 = out["cld_gain_larger_at_small_k"]
  assert o3["grid"] == "hidden=2" and o3["points"][0].startswith("hidden=2/k=2/")
  assert o3["mean"] == pytest.approx(0.2)
  # ordering 3 on the visible k sweep is reported for information: no gain there
  assert o3["visible"]["holds"] is False and o3["visible"]["mean"] == pytest.approx(0.0)
  assert out["underestimated_propensity_hurts_ips_more"]["mean"] == pytest.approx(0.25)
  rows = study._ordering_rows(out)  # table.md and the log: the four, then ordering 3 on the visible grid
  assert [n for n, _ in rows] == list(study.ORDERINGS) + ["cld_gain_larger_at_small_k (visible, information)"]
  assert "holds=True" in study._ordering_line(*rows[2]) and "[hidden=2]" in study._ordering_line(*rows[2])
  # everything flat: nothing holds; seed noise that straddles zero is "not separated"
  flat = study.orderings(_fake_raw(study, s, {}), s)
  assert all(e["holds"] is False for e in flat.values())
  raw = _fake_raw(study, s, {})
  raw[key()]["naive"] = {m: v + np.array([0.1, -0.1, 0.1, -0.1]) for m, v in raw[key()]["naive"].items()}
  assert study.orderings(raw, s)["ips_beats_naive"]["verdict"] == "not separated"
  # a reversed ordering, and missing points (the paper config has no sweeps)
  raw = _fake_raw(study, s, {key(): {"naive": 0.2}})
  assert study.orderings(raw, s)["ips_beats_naive"]["verdict"] == "reversed"
  del raw[key(k=2, hidden=2)]
  assert study.orderings(raw, s)["cld_gain_larger_at_small_k"]["holds"] is None
  paper = study.orderings(_fake_raw(study, configs.get_config("paper"), {}), configs.get_config("paper"))
  assert [e["holds"] for e in paper.values()] == [False, None, None, None]


def test_each_cld_method_takes_only_the_fields_it_reads():
  # pointwise CLD has no pairwise weights; the linear methods no MLP fields; none but rank_agg a loss_type
  for name, field in [
    ("cld", "bpr_weight"),
    ("cld_pair", "gamma"),
    ("cld_pair_l", "hidden_sizes"),
    ("heckman_rank", "dropout"),
    ("cld_n", "ranker"),
    ("rank_agg", "gamma"),
  ]:
    with pytest.raises(ValueError, match=rf"method '{name}' config: unknown key '{field}'"):
      get_method(name, {field: 1}, num_features=4, list_size=6)


def test_study_gives_each_method_its_fields_of_the_shared_section():
  _, configs = _study_and_configs()
  c = configs.get_config("smoke")
  got = cld_study.method_configs(c)
  assert set(got) == set(c.methods)
  assert got["oracle"][0] == "full_info" and got["cld"][0] == "cld"
  assert got["heckman_rank"][1].to_dict() == {}  # linear: no field of the section applies
  assert got["cld"][1].ranker == "linear" and got["cld_pair"][1].ranker == "mlp"  # the overrides
  assert got["cld_n"][1].to_dict() == {
    k: c.method[k] for k in ("gamma", "link", "sq_weight", "hidden_sizes", "activation", "layer_norm", "dropout")
  }
  assert got["rank_agg"][1].loss_type == "pairwise" and "gamma" not in got["rank_agg"][1]
  with c.unlocked():  # the config is locked (as the binary's): a misspelt flag stops earlier still
    c.method.gama = 0.2  # a key no method declares stops the study
  with pytest.raises(ValueError, match=r"unknown key 'gama' \(did you mean 'gamma'\?\)"):
    cld_study.method_configs(c)
