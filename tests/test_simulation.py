"""Tests of ultr_jax.simulation: click models against analytic probabilities
and NumPy per-position references, invariants over every click model, and the
logging policy."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from ultr_jax import data as data_lib
from ultr_jax import simulation as sim
from ultr_jax.data import RankingDataset

from conftest import check_compiles_once

TABLE = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])
CTX_VECTORS = np.array([[0.3, -0.2], [-0.5, 0.4], [0.0, 0.0]], np.float32)
CTX_W = np.array([0.7, -0.6], np.float32)
CRUX = [1, 3]
IND_W = [0.4, -0.3]

CONFIGS = {
  "pbm": dict(name="pbm", eta=1.3),
  "pbm_table": dict(name="pbm_table", eta=1.0),
  "trust": dict(name="trust", eta=1.0, epsilon_1_neg=0.65),
  "cascade": dict(name="cascade"),
  "dcm": dict(name="dcm", continuation=[0.9, 0.7, 0.5, 0.4]),
  "ubm": dict(name="ubm", eta=1.2),
  "context_pbm": dict(name="context_pbm", context_vectors=CTX_VECTORS.tolist(), w=CTX_W.tolist()),
  "individual": dict(name="individual", crux_indices=CRUX, w=IND_W, eta=1.5),
  "dbn": dict(name="dbn", perseverance=0.85, satisfaction=[0.9, 0.6, 0.3]),
  "ccm": dict(name="ccm", alpha=[0.9, 0.7, 0.3]),
  "sdbn": dict(name="sdbn", satisfaction=[0.9, 0.6, 0.3]),
  "mixture": dict(
    name="mixture",
    components=[dict(name="dcm", continuation=[0.9, 0.7, 0.5, 0.4]), dict(name="ubm", eta=1.2)],
    weights=[0.3, 0.7],
  ),
  "position_trust": dict(name="position_trust", eta=1.2, alpha=0.6, delta=0.3, gamma=1.0),
}


def test_every_model_has_a_config():
  assert set(CONFIGS) == set(sim.click_models())


def _batch(num_lists=3, list_size=12, num_valid=(12, 9, 5), seed=0):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, 5, size=(num_lists, list_size)).astype(np.float32)
  where = np.arange(list_size)[None, :] < np.asarray(num_valid)[:, None]
  labels = np.where(where, labels, 0.0)
  features = rng.uniform(-1, 1, size=(num_lists, list_size, 5)).astype(np.float32)
  context = rng.integers(0, 3, size=(num_lists, list_size)).astype(np.int32)
  logging_score = rng.normal(size=(num_lists, list_size)).astype(np.float32)
  return {"labels": labels, "where": where, "features": features, "context": context, "logging_score": logging_score}


# ----------------------------------------------------------------------------
# NumPy reference: explicit loops over lists and positions.


def _np_relevance(y, eps=0.1, ymax=4):
  y = min(max(float(y), 0.0), ymax)
  return eps + (1 - eps) * (2**y - 1) / (2**ymax - 1)


def _np_click_prob(name, batch, cfg, top_k=None):
  if name == "mixture":  # the components' probabilities, weighted
    parts = [_np_click_prob(c["name"], batch, {"eta": 1.0, **c}, top_k) for c in cfg["components"]]
    w = np.asarray(cfg["weights"]) / np.sum(cfg["weights"])
    return tuple(sum(wi * part[k] for wi, part in zip(w, parts)) for k in (0, 1))
  labels, where = batch["labels"], batch["where"]
  out = np.zeros(labels.shape)
  exam = np.zeros(labels.shape)
  for q in range(labels.shape[0]):
    keep = 1.0  # cascade / DCM: probability of still scanning
    last = np.zeros(labels.shape[1] + 1)  # UBM: distribution of the last click's state (0 = none)
    last[0] = 1.0
    for p in range(labels.shape[1]):
      if not where[q, p] or (top_k is not None and p >= top_k):
        continue
      r = _np_relevance(labels[q, p])
      v = TABLE[min(p, len(TABLE) - 1)]
      if name == "pbm":
        e = (1.0 / (p + 1)) ** cfg["eta"]
        c = e * r
      elif name == "pbm_table":
        e = v ** cfg["eta"]
        c = e * r
      elif name == "trust":
        e = v ** cfg["eta"]
        c = e * (r * (1 - (p + 2) / 100) + (1 - r) * 0.65 / (p + 1))
      elif name in ("cascade", "dcm"):
        lam = 0.0 if name == "cascade" else cfg["continuation"][min(p, 3)]
        e = keep
        c = e * r
        keep *= 1 - r * (1 - lam)
      elif name in ("dbn", "sdbn"):  # satisfied after a click: leave; otherwise go on with perseverance
        e = keep
        c = e * r
        keep *= cfg.get("perseverance", 1.0) * (1 - r * cfg["satisfaction"][min(p, 2)])
      elif name == "ccm":
        a1, a2, a3 = cfg["alpha"]
        e = keep
        c = e * r
        keep *= (1 - r) * a1 + r * (a2 * (1 - r) + a3 * r)
      elif name == "ubm":  # gamma by distance d = (p + 1) - l to the last click (l = 0: none)
        g = np.array([TABLE[min(p + 1 - l, len(TABLE)) - 1] ** cfg["eta"] if l <= p else 0.0 for l in range(len(last))])
        e = float(last @ g)
        c = e * r
        moved = last * g * r
        last = last - moved
        last[p + 1] += moved.sum()
      elif name == "context_pbm":
        t = batch["context"][q, p]
        e = v ** max(float(CTX_VECTORS[t] @ CTX_W) + 1, 0.0)
        c = e * r
      elif name == "position_trust":  # SIF: a trust channel on the PBM, capped at 1
        e = v ** cfg["eta"]
        z = float(batch["logging_score"][q, p])
        trust = cfg["alpha"] * np.exp(-cfg["delta"] * p) / (1.0 + np.exp(-cfg["gamma"] * z))
        c = min(1.0, e * r * (1.0 + trust))
      elif name == "individual":
        x = batch["features"][q, p, CRUX]
        e = v ** (cfg["eta"] * max(1 + float(x @ np.asarray(IND_W)), 0.0))
        c = e * r
      exam[q, p], out[q, p] = e, c
  return exam, out


def _jbatch(batch):
  return jax.tree.map(jnp.asarray, batch)


# The tests over every model share their compiled programs: one jitted click function per (model, extra config),
# called on the same shapes by several tests (compiling dominates this file's time).


@functools.cache
def _jitted(name, **extra):
  """``jax.jit`` of the model's click function, ``CONFIGS[name]`` updated with ``extra``: one per config."""
  return jax.jit(sim.make_click_fn({**CONFIGS[name], **extra}))


def _standard_args(i):
  """Call ``i`` of the compile-once check: new keys and batches of the standard shape; call 3 repeats call 0."""
  return (jax.random.key(i % 3), _jbatch(_batch(seed=i % 3))), {}


@functools.cache
def _standard(name):
  """The model's click function jitted by :func:`check_compiles_once` over four calls of the standard batch shape
  (it asserts one trace and no compilation after the first call); the outputs of the four calls. Call 0 (and 3, its
  repeat) is ``fn(key(0), _batch())``."""
  return check_compiles_once(sim.make_click_fn(CONFIGS[name]), _standard_args, calls=4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_probabilities_match_numpy_loop(name):
  batch = _batch()
  out = _standard(name)[0]  # fn(key(0), batch), jitted
  exam, prob = _np_click_prob(name, batch, CONFIGS[name])
  np.testing.assert_allclose(out["examination"], exam, rtol=2e-5, atol=1e-7)
  np.testing.assert_allclose(out["click_prob"], prob, rtol=2e-5, atol=1e-7)
  assert out["clicks"].dtype == jnp.float32


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_empirical_click_rates_match_analytic(name):
  n = 6000
  batch = _batch()
  out = _jitted(name, num_sessions=n)(jax.random.key(1), _jbatch(batch))
  clicks = np.asarray(out["clicks"])
  assert clicks.shape == (n,) + batch["labels"].shape
  assert set(np.unique(clicks)) <= {0.0, 1.0}
  _, p = _np_click_prob(name, batch, CONFIGS[name])
  # Binomial standard error of a mean of n Bernoulli(p) draws; 5 sigma.
  bound = 5 * np.sqrt(p * (1 - p) / n) + 1e-9
  assert np.all(np.abs(clicks.mean(0) - p) <= bound)
  assert np.all(clicks[:, ~batch["where"]] == 0)


INDEPENDENT = {"pbm", "pbm_table", "trust", "context_pbm", "individual", "position_trust"}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_conditional_click_probs_give_every_session_its_frequency(name):
  """``conditional_click_prob`` is P(C_i = 1 | c_<i): the session likelihood it implies,
  prod_i q_i^c_i (1 - q_i)^(1 - c_i), is the frequency of that click vector (5 sigma), the same for
  every session with that vector, and it sums to 1 over the vectors; independent models return
  ``click_prob`` itself. Three items shown of four, so all 8 vectors occur."""
  n = 40000
  batch = _batch(num_lists=2, list_size=4, num_valid=(3, 3))
  out = _jitted(name, num_sessions=n)(jax.random.key(3), _jbatch(batch))
  clicks = np.asarray(out["clicks"])
  q = np.asarray(out["conditional_click_prob"], np.float64)
  assert q.shape == clicks.shape
  np.testing.assert_array_equal(q[..., 3], 0.0)
  if name in INDEPENDENT:
    np.testing.assert_array_equal(q, np.broadcast_to(np.asarray(out["click_prob"]), q.shape))
  likelihood = np.prod(np.where(clicks[..., :3] > 0, q[..., :3], 1.0 - q[..., :3]), axis=-1)  # [n, 2]
  codes = clicks[..., :3].astype(int) @ (1 << np.arange(3))
  for lst in range(2):
    total = 0.0
    for code in np.unique(codes[:, lst]):
      rows = codes[:, lst] == code
      want = likelihood[rows, lst]
      np.testing.assert_allclose(want, want[0], rtol=1e-5)
      freq = rows.mean()
      assert abs(freq - want[0]) <= 5 * np.sqrt(want[0] * (1 - want[0]) / n) + 1e-9, (lst, code, freq, want[0])
      total += want[0]
    assert total == pytest.approx(1.0, abs=1e-3)


def test_cld_simulator_targets():
  """spec-cld 10.1.7: eta=1, k=5, eps-=0.1, 20,000 sessions."""
  n = 20000
  labels = jnp.array([0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
  fn = sim.make_click_fn(dict(name="pbm", eta=1.0, eps=0.1, relevance="binary", threshold=1, top_k=5, num_sessions=n))
  out = fn(jax.random.key(3), {"labels": labels, "where": jnp.ones(7, bool)})
  ctr = np.asarray(out["clicks"]).mean(0)
  for pos, p in ((2, 1 / 3), (1, 0.05)):
    assert abs(ctr[pos] - p) <= 5 * np.sqrt(p * (1 - p) / n)
  np.testing.assert_array_equal(ctr[5:], 0.0)
  np.testing.assert_array_equal(out["shown"], np.arange(7) < 5)


def test_relevance_tables():
  np.testing.assert_allclose(sim.relevance_probability(jnp.arange(5.0)), [0.1, 0.16, 0.28, 0.52, 1.0], rtol=1e-6)
  np.testing.assert_allclose(
    sim.relevance_probability(jnp.arange(5.0), ymax=5), [0.1, 0.12903, 0.18710, 0.30323, 0.53548], atol=1e-5
  )
  np.testing.assert_allclose(
    sim.binary_relevance_probability(jnp.arange(5.0), threshold=3, eps=0.2), [0.2, 0.2, 0.2, 1.0, 1.0]
  )
  # Labels beyond ymax reuse the last value (ULTRA).
  assert float(sim.relevance_probability(jnp.array(7.0))) == pytest.approx(1.0)


def test_eta_zero_is_all_ones():
  pos = jnp.arange(15)
  np.testing.assert_array_equal(sim.PBM.examination(pos, eta=0.0), np.ones(15))
  np.testing.assert_array_equal(sim.PBMTable.examination(pos, eta=0.0), np.ones(15))
  out = sim.pbm(jax.random.key(0), jnp.full(15, 0.3), eta=0.0)
  np.testing.assert_array_equal(out["examination"], np.ones(15))


def test_table_beyond_ten_reuses_last():
  np.testing.assert_allclose(sim.PBMTable.examination(jnp.array([9, 10, 30])), [0.06] * 3, rtol=1e-6)


def test_zero_coupling_reduces_to_table_pbm():
  batch = _jbatch(_batch())
  assert sim.click_simulator(dict(name="pbm_table")) == sim.click_simulator(CONFIGS["pbm_table"])
  base = _standard("pbm_table")[0]  # fn(key(0), batch), jitted
  ind = jax.jit(sim.make_click_fn(dict(name="individual", crux_indices=CRUX, w=[0.0, 0.0])))(jax.random.key(0), batch)
  ctx = jax.jit(sim.make_click_fn(dict(name="context_pbm", num_contexts=3, w=[0.0] * 10)))(jax.random.key(0), batch)
  for out in (ind, ctx):
    np.testing.assert_allclose(out["examination"], base["examination"], rtol=1e-6)
    np.testing.assert_array_equal(out["clicks"], base["clicks"])


def test_per_list_context_broadcasts():
  batch = _jbatch(_batch())
  per_item = {**batch, "context": jnp.broadcast_to(batch["context"][:, :1], batch["labels"].shape)}
  per_list = {**batch, "context": batch["context"][:, 0]}
  fn = sim.make_click_fn(CONFIGS["context_pbm"])
  np.testing.assert_allclose(
    fn(jax.random.key(0), per_item)["examination"], fn(jax.random.key(0), per_list)["examination"]
  )


def test_dcm_joint_probabilities():
  """Two items: P(C1, C2) = r1 * lambda * r2 and cascade never clicks twice."""
  n = 40000
  r = jnp.array([0.6, 0.5])
  out = sim.dcm(jax.random.key(5), r, continuation=0.3, num_sessions=n)
  c = np.asarray(out["clicks"])
  p_both = 0.6 * 0.3 * 0.5
  assert abs((c[:, 0] * c[:, 1]).mean() - p_both) <= 5 * np.sqrt(p_both * (1 - p_both) / n)
  casc = np.asarray(sim.cascade(jax.random.key(6), jnp.full(8, 0.4), num_sessions=2000)["clicks"])
  assert casc.sum(-1).max() == 1
  # First click position is geometric: P(first click at i) = 0.6^i * 0.4.
  first = casc.argmax(-1)[casc.sum(-1) > 0]
  expected = 0.4 * 0.6 ** np.arange(8)
  emp = np.bincount(first, minlength=8) / 2000
  assert np.all(np.abs(emp - expected) <= 5 * np.sqrt(expected * (1 - expected) / 2000))


def test_dcm_follows_explicit_positions():
  rng = np.random.default_rng(0)
  r = jnp.asarray(rng.uniform(0.1, 0.9, size=6), jnp.float32)
  perm = jnp.asarray(rng.permutation(6))
  plain = sim.dcm(jax.random.key(0), r, continuation=0.4)
  # Item j of the permuted array is displayed at position perm[j] ... i.e. r_perm[j] = r[perm[j]].
  permuted = sim.dcm(jax.random.key(0), r[perm], positions=perm, continuation=0.4)
  np.testing.assert_allclose(permuted["examination"], plain["examination"][perm], rtol=1e-6)
  sessions = sim.dcm(jax.random.key(0), r[perm], positions=perm, continuation=0.0, num_sessions=50)
  assert float(sessions["clicks"].sum(-1).max()) <= 1.0


def _chain_joint(a, c0, c1):
  """P(click vector) of a click chain, by enumerating every click vector (items in display order).

  Up to the last click the user must reach every item (reach factor 1, then c1 after a click, c0
  after none); after it, the probability of no further click sums over stopping anywhere."""
  n = len(a)

  def no_clicks_from(j, reach):
    return 1.0 if j == n else (1 - reach) + reach * (1 - a[j]) * no_clicks_from(j + 1, c0[j])

  joint = {}
  for bits in range(2**n):
    c = [(bits >> j) & 1 for j in range(n)]
    last = max((j for j in range(n) if c[j]), default=-1)
    prob, reach = 1.0, 1.0
    for j in range(last + 1):
      prob *= reach * (a[j] if c[j] else 1 - a[j])
      reach = c1[j] if c[j] else c0[j]
    joint[tuple(c)] = prob * no_clicks_from(last + 1, reach)
  return joint


@pytest.mark.parametrize("model", ["dbn", "ccm"])
def test_chain_sessions_have_the_joint_click_probabilities_of_the_model(model):
  """All 2^3 click vectors of three items: enumerated model probability vs session frequency (5 sigma)."""
  n = 60000
  a = np.array([0.7, 0.4, 0.6])
  if model == "dbn":
    gamma, sigma = 0.8, np.array([0.5, 0.3, 0.9])
    c0, c1 = np.full(3, gamma), gamma * (1 - sigma)
    out = sim.dbn(
      jax.random.key(11),
      jnp.asarray(a, jnp.float32),
      perseverance=gamma,
      satisfaction=jnp.asarray(sigma, jnp.float32),
      num_sessions=n,
    )
  else:
    alpha = (0.9, 0.7, 0.2)
    c0, c1 = np.full(3, alpha[0]), alpha[1] * (1 - a) + alpha[2] * a
    out = sim.ccm(jax.random.key(12), jnp.asarray(a, jnp.float32), alpha=alpha, num_sessions=n)
  joint = _chain_joint(a, c0, c1)
  assert abs(sum(joint.values()) - 1) < 1e-12
  clicks = np.asarray(out["clicks"]).astype(int)
  codes = clicks @ (1 << np.arange(3))
  freq = np.bincount(codes, minlength=8) / n
  for bits in range(8):
    want = joint[tuple((bits >> j) & 1 for j in range(3))]
    assert abs(freq[bits] - want) <= 5 * np.sqrt(want * (1 - want) / n) + 1e-9, (bits, freq[bits], want)
  marginal = sum(p * np.asarray(c, float) for c, p in joint.items())
  np.testing.assert_allclose(out["click_prob"], marginal, rtol=2e-6)


def test_chain_models_reduce_to_cascade_and_dcm_and_follow_positions():
  rng = np.random.default_rng(1)
  r = jnp.asarray(rng.uniform(0.1, 0.9, size=6), jnp.float32)
  cascade = sim.cascade(jax.random.key(0), r)["examination"]
  np.testing.assert_allclose(
    sim.dbn(jax.random.key(0), r, perseverance=1.0, satisfaction=1.0)["examination"], cascade, rtol=1e-6
  )
  np.testing.assert_allclose(sim.ccm(jax.random.key(0), r, alpha=(1.0, 0.0, 0.0))["examination"], cascade, rtol=1e-6)
  np.testing.assert_allclose(
    sim.dbn(jax.random.key(0), r, perseverance=1.0, satisfaction=0.6)["examination"],
    sim.dcm(jax.random.key(0), r, continuation=0.4)["examination"],
    rtol=1e-6,
  )
  plain = sim.dbn(jax.random.key(0), r, perseverance=0.8)
  perm = jnp.asarray(rng.permutation(6))
  permuted = sim.dbn(jax.random.key(0), r[perm], positions=perm, perseverance=0.8)
  np.testing.assert_allclose(permuted["examination"], plain["examination"][perm], rtol=1e-6)
  sessions = sim.dbn(jax.random.key(0), r[perm], positions=perm, perseverance=1.0, satisfaction=1.0, num_sessions=50)
  assert float(sessions["clicks"].sum(-1).max()) <= 1.0  # the cascade clicks once at most


def _ubm_enumerate(a, gamma, ranks):
  """Exact UBM marginals by enumerating every click vector (items in displayed order)."""
  n = len(a)
  exam, click = np.zeros(n), np.zeros(n)
  for bits in range(2**n):
    c = [(bits >> j) & 1 for j in range(n)]
    prob, last, e = 1.0, 0, np.zeros(n)
    for j in range(n):
      e[j] = gamma[ranks[j], last]
      pc = e[j] * a[j]
      prob *= pc if c[j] else 1 - pc
      if c[j]:
        last = ranks[j] + 1
    exam += prob * e
    click += prob * np.asarray(c, float)
  return exam, click


def test_ubm_marginals_match_enumeration_and_follow_positions():
  rng = np.random.default_rng(3)
  a = rng.uniform(0.1, 0.9, size=5)
  gamma = np.tril(rng.uniform(0.05, 1.0, size=(5, 6)), k=0)  # any table; only last <= rank is read
  exam, click = _ubm_enumerate(a, gamma, np.arange(5))
  out = sim.ubm(jax.random.key(0), jnp.asarray(a, jnp.float32), gamma=jnp.asarray(gamma, jnp.float32))
  np.testing.assert_allclose(out["examination"], exam, rtol=2e-6)
  np.testing.assert_allclose(out["click_prob"], click, rtol=2e-6)
  # Item j of the permuted array is displayed at position perm[j].
  perm = rng.permutation(5)
  permuted = sim.ubm(
    jax.random.key(0),
    jnp.asarray(a[perm], jnp.float32),
    positions=jnp.asarray(perm),
    gamma=jnp.asarray(gamma, jnp.float32),
  )
  np.testing.assert_allclose(permuted["examination"], exam[perm], rtol=2e-6)
  # A masked item in the middle is skipped: its neighbours see the list without it (ranks kept).
  where = np.array([True, True, False, True, True])
  exam_m, _ = _ubm_enumerate(a[where], gamma, np.flatnonzero(where))
  masked = sim.ubm(
    jax.random.key(0), jnp.asarray(a, jnp.float32), where=jnp.asarray(where), gamma=jnp.asarray(gamma, jnp.float32)
  )
  np.testing.assert_allclose(np.asarray(masked["examination"])[where], exam_m, rtol=2e-6)
  assert float(masked["examination"][2]) == 0.0


def test_ubm_sessions_have_the_joint_probabilities_of_the_model():
  """Two items: P(C1 = 1, C2 = 1) = gamma[0, 0] a1 * gamma[1, 1] a2 (a click resets the distance)."""
  n = 40000
  a = jnp.array([0.7, 0.5])
  gamma = jnp.array([[0.9, 0.0, 0.0], [0.3, 0.8, 0.0]])
  c = np.asarray(sim.ubm(jax.random.key(8), a, gamma=gamma, num_sessions=n)["clicks"])
  for got, want in (
    ((c[:, 0] * c[:, 1]).mean(), 0.9 * 0.7 * 0.8 * 0.5),
    (((1 - c[:, 0]) * c[:, 1]).mean(), (1 - 0.9 * 0.7) * 0.3 * 0.5),
  ):
    assert abs(got - want) <= 5 * np.sqrt(want * (1 - want) / n)


def test_aggregated_ctr_mode():
  n_imp = 10**6
  batch = _batch()
  out = sim.make_click_fn(dict(name="pbm_table", num_impressions=n_imp))(jax.random.key(2), _jbatch(batch))
  p = np.asarray(out["click_prob"], np.float64)
  ctr = np.asarray(out["clicks"], np.float64)
  assert np.all(np.abs(ctr - p) <= 5 * np.sqrt(p * (1 - p) / n_imp) + 1e-6)
  assert np.all(ctr[~batch["where"]] == 0)
  np.testing.assert_allclose(out["click_counts"], np.round(ctr * n_imp))
  assert len(np.unique(ctr[batch["where"]])) > 5  # real draws, not the mean
  assert "conditional_click_prob" not in out  # no sessions to condition on


# ----------------------------------------------------------------------------
# Invariants over every click model.


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_mask_equals_truncation(name):
  batch = _batch(num_lists=3, list_size=12, num_valid=(8, 8, 8))  # the standard shape: the program is shared
  short = {k: v[:, :8] for k, v in batch.items()}
  fn = _jitted(name, num_sessions=50)
  long_out = fn(jax.random.key(0), _jbatch(batch))
  short_out = fn(jax.random.key(0), _jbatch(short))
  for k in ("examination", "click_prob"):
    np.testing.assert_allclose(long_out[k][..., :8], short_out[k], rtol=1e-6)
    np.testing.assert_array_equal(long_out[k][..., 8:], 0.0)
  np.testing.assert_array_equal(long_out["clicks"][..., 8:], 0.0)
  np.testing.assert_array_equal(long_out["conditional_click_prob"][..., 8:], 0.0)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_top_k_not_shown_never_clicked(name):
  batch = _batch()
  out = _jitted(name, top_k=4, num_sessions=300)(jax.random.key(0), _jbatch(batch))
  shown = batch["where"] & (np.arange(12) < 4)
  np.testing.assert_array_equal(out["shown"], shown)
  np.testing.assert_array_equal(out["clicks"][..., 4:], 0.0)
  np.testing.assert_array_equal(out["examination"][..., 4:], 0.0)
  np.testing.assert_array_equal(out["conditional_click_prob"][..., 4:], 0.0)
  assert float(out["clicks"][..., :4].sum()) > 0
  exam, prob = _np_click_prob(name, batch, CONFIGS[name], top_k=4)
  np.testing.assert_allclose(out["click_prob"], prob, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_vmap_equals_loop(name):
  batch = _jbatch(_batch())
  fn = sim.make_click_fn(CONFIGS[name])
  keys = jax.random.split(jax.random.key(4), 3)

  @jax.jit  # one program: the vmapped call and the three single-list calls
  def both(keys, batch):
    return jax.vmap(fn)(keys, batch), [fn(keys[q], jax.tree.map(lambda x: x[q], batch)) for q in range(3)]

  vmapped, loop = both(keys, batch)
  for q, one in enumerate(loop):
    assert one["clicks"].shape == batch["labels"].shape[1:]
    for k in ("clicks", "examination", "click_prob"):
      np.testing.assert_allclose(vmapped[k][q], one[k], rtol=1e-6)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_compiles_once_and_key_determinism(name):
  # One trace for new keys and new batches of the same shape (labels, masks and inputs all change); the fourth
  # call repeats the first's key and batch and gives its clicks.
  outs = _standard(name)
  np.testing.assert_array_equal(outs[0]["clicks"], outs[3]["clicks"])
  b0 = _jbatch(_batch(seed=0))
  big = _jitted(name, num_sessions=50)
  d0 = big(jax.random.key(0), b0)["clicks"]
  d1 = big(jax.random.key(1), b0)["clicks"]
  assert not np.array_equal(d0, d1)


def test_explicit_positions_default_arange():
  batch = _jbatch(_batch())
  pos = np.broadcast_to(np.arange(12), batch["labels"].shape)
  for name in sorted(CONFIGS):
    a = _standard(name)[0]  # fn(key(0), batch), jitted
    b = _jitted(name)(jax.random.key(0), {**batch, "positions": pos})
    np.testing.assert_allclose(a["examination"], b["examination"], rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(a["clicks"], b["clicks"], err_msg=name)


def test_config_errors():
  with pytest.raises(ValueError, match="unknown click model"):
    sim.make_click_fn(dict(name="nope"))
  with pytest.raises(ValueError, match="perseverance"):
    sim.make_click_fn(dict(name="dbn", perseverance=1.5))
  with pytest.raises(ValueError, match="satisfaction"):
    sim.make_click_fn(dict(name="dbn", satisfaction=[0.5, -0.1]))
  with pytest.raises(ValueError, match="alpha"):
    sim.make_click_fn(dict(name="ccm", alpha=[0.9, 0.8]))
  with pytest.raises(ValueError, match="gamma"):
    sim.make_click_fn(dict(name="ubm", gamma=[[0.5, 0.5]] * 3))
  with pytest.raises(ValueError, match="unknown key 'etaa'"):
    sim.make_click_fn(dict(name="pbm", etaa=1.0))
  with pytest.raises(ValueError, match="crux_indices"):
    sim.make_click_fn(dict(name="individual"))
  with pytest.raises(ValueError, match="relevance"):
    sim.make_click_fn(dict(name="pbm", relevance="ternary"))
  cfg = ml_collections.ConfigDict(dict(name="pbm_table", eta=1.0, eps=0.1, top_k=None))
  assert "shown" not in sim.make_click_fn(cfg)(jax.random.key(0), _jbatch(_batch()))


# ----------------------------------------------------------------------------
# Logging policy.


def _ds(seed=0, q=40, l=9, f=6):
  rng = np.random.default_rng(seed)
  n = rng.integers(3, l + 1, size=q)
  where = np.arange(l)[None] < n[:, None]
  features = rng.normal(size=(q, l, f)).astype(np.float32) * where[..., None]
  labels = np.where(where, rng.integers(0, 5, size=(q, l)), 0).astype(np.float32)
  doc_ids = np.where(where, np.arange(q * l).reshape(q, l), -1).astype(np.int32)
  return RankingDataset(
    features,
    labels,
    where,
    np.arange(q),
    doc_ids,
    extras={"context": rng.integers(0, 3, size=(q, l)), "query_tag": np.arange(q)},
  )


def test_apply_logging_policy_reorders():
  ds = _ds()
  rng = np.random.default_rng(1)
  scores = rng.integers(0, 4, size=ds.where.shape).astype(np.float64)  # many ties
  out = sim.apply_logging_policy(ds, scores)
  assert out.list_size == ds.list_size
  for i in range(ds.num_queries):
    n = ds.where[i].sum()
    assert out.where[i, :n].all() and not out.where[i, n:].any()  # padding last
    assert sorted(out.doc_ids[i, :n]) == sorted(ds.doc_ids[i, :n])  # same documents
    # Reference: descending score, ties in original order (a Python sort is stable).
    ref = sorted(range(n), key=lambda j: -scores[i, j])
    np.testing.assert_array_equal(out.doc_ids[i, :n], ds.doc_ids[i, ref])
    np.testing.assert_array_equal(out.labels[i, :n], ds.labels[i, ref])
    np.testing.assert_array_equal(out.features[i, :n], ds.features[i, ref])
    np.testing.assert_array_equal(out.extras["context"][i, :n], ds.extras["context"][i, ref])
  np.testing.assert_array_equal(out.extras["query_tag"], ds.extras["query_tag"])


def test_apply_logging_policy_top_k():
  ds = _ds()
  scores = np.random.default_rng(2).normal(size=ds.where.shape)
  cut = sim.apply_logging_policy(ds, scores, top_k=4)
  full = sim.apply_logging_policy(ds, scores)
  assert cut.list_size == 4
  np.testing.assert_array_equal(cut.doc_ids, full.doc_ids[:, :4])
  kept = sim.apply_logging_policy(ds, scores, top_k=4, keep_all=True, record_scores=True)
  assert kept.list_size == ds.list_size
  np.testing.assert_array_equal(kept.extras["shown"], full.where & (np.arange(ds.list_size) < 4))
  s = kept.extras["logging_scores"]
  both = kept.where[:, 1:]
  assert np.all((s[:, 1:] - np.where(kept.where, s, 0.0)[:, :-1])[both] <= 0)
  with pytest.raises(ValueError, match="scores"):
    sim.apply_logging_policy(ds, scores[:, :3])


def test_nan_scores_rank_last_among_real():
  ds = _ds(q=1, l=4)
  ds = ds.replace(where=np.ones((1, 4), bool))
  out = sim.apply_logging_policy(ds, np.array([[np.nan, 1.0, 3.0, 2.0]]))
  np.testing.assert_array_equal(out.doc_ids[0], ds.doc_ids[0, [2, 3, 1, 0]])


def test_train_logging_policy_beats_random():
  splits = data_lib.make_synthetic(num_train=400, num_valid=10, num_test=10, list_size=10, num_features=8, seed=0)
  train = splits.train
  w = sim.train_logging_policy(train, fraction=0.1, seed=0, steps=200)
  assert w.shape == (train.num_features,) and np.all(np.isfinite(w))
  ordered = sim.apply_logging_policy(train, sim.logging_policy_scores(w, train))
  from ultr_jax import metrics

  arange = -jnp.arange(train.list_size, dtype=jnp.float32)  # displayed order
  logged = float(
    metrics.ndcg(jnp.broadcast_to(arange, ordered.labels.shape), ordered.labels, where=ordered.where, topn=10)
  )
  original = float(metrics.ndcg(jnp.broadcast_to(arange, train.labels.shape), train.labels, where=train.where, topn=10))
  assert logged > original + 0.05
  # Deterministic in seed; a different sample gives different weights.
  np.testing.assert_array_equal(w, sim.train_logging_policy(train, fraction=0.1, seed=0, steps=200))
  assert not np.array_equal(w, sim.train_logging_policy(train, fraction=0.1, seed=1, steps=200))


# ----------------------------------------------------------------------------
# A stochastic logging policy and the policy-aware propensities (Oosterhuis & de Rijke, SIGIR'20).


def _exact_policy_examination(z, table, top_k):
  """sum_y pi(y) theta_{rank_y(d)} over every permutation y of a short list (Plackett-Luce of z)."""
  import itertools  # noqa: PLC0415

  rho = np.zeros(len(z))
  for perm in itertools.permutations(range(len(z))):  # perm[t] = the item at rank t
    positions = np.empty(len(z), np.int32)
    positions[list(perm)] = np.arange(len(z))
    log_p = float(sim.plackett_luce_log_prob(jnp.asarray(z), jnp.asarray(positions)))
    rho += np.exp(log_p) * np.where(positions < top_k, np.asarray(table)[positions], 0.0)
  return rho


def test_policy_examination_is_the_expected_examination_over_plackett_luce_displays():
  z = np.array([1.0, 0.3, -0.5, -1.5], np.float32)
  table = (0.68, 0.61, 0.48, 0.34)
  fn = sim.make_click_fn({"name": "pbm_table", "top_k": 2, "table": table})
  batch = {"labels": jnp.zeros(4), "where": jnp.ones(4, bool), "logging_score": jnp.asarray(z)}
  got = sim.policy_examination(jax.random.key(0), fn, batch, num_samples=40000, chunk=2000)
  want = _exact_policy_examination(z, table, top_k=2)
  np.testing.assert_allclose(got, want, atol=0.006)  # 40k displays: sd <= 0.0025
  assert want[3] > 0.02  # the last candidate is shown now and then
  # A cold policy is the logging order; the deterministic top 2 are examined, the others never.
  cold = sim.policy_examination(jax.random.key(1), fn, batch, num_samples=100, temperature=1e-4)
  np.testing.assert_allclose(cold, [0.68, 0.61, 0.0, 0.0], atol=1e-6)
  with pytest.raises(ValueError, match="temperature must be > 0"):
    sim.stochastic_logging_click_fn(fn, temperature=0.0)


def test_policy_aware_ips_is_unbiased_where_the_displayed_examination_is_not():
  """Over many sessions of a stochastic top-k display, mean c / rho_d is r_d for every candidate; weighting a
  click by the examination of the one display it came from gives r_d P(d shown) (0 for an unshown item)."""
  z = jnp.array([[1.5, 0.5, 0.0, -1.0, -2.0]])
  labels = jnp.array([[1.0, 4.0, 0.0, 3.0, 2.0]])
  batch = {"labels": labels, "where": jnp.ones((1, 5), bool), "logging_score": z}
  fn = sim.make_click_fn({"name": "pbm_table", "top_k": 2, "eps": 0.1})
  rho = sim.policy_examination(jax.random.key(0), fn, batch, num_samples=20000, chunk=2000)
  sample = jax.jit(jax.vmap(lambda k: sim.stochastic_logging_click_fn(fn)(k, batch)))
  out = sample(jax.random.split(jax.random.key(1), 40000))
  c, exam, shown = (np.asarray(out[k])[:, 0] for k in ("clicks", "examination", "shown"))
  r = np.asarray(sim.relevance_probability(labels))[0]
  aware = (c / np.asarray(rho)[0]).mean(0)
  oblivious = np.where(shown, c / np.where(shown, exam, 1.0), 0.0).mean(0)
  np.testing.assert_allclose(aware, r, rtol=0.1, atol=0.01)
  np.testing.assert_allclose(oblivious, r * shown.mean(0), rtol=0.1, atol=0.01)
  assert oblivious[4] < 0.5 * r[4]  # the last candidate is rarely shown, so it looks irrelevant
