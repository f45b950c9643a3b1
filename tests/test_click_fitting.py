"""Tests of ultr_jax.simulation.fitting: click models fitted to session logs against scipy on
independent NumPy likelihoods, parameter recovery from simulated logs, model selection by held-out
likelihood, masking, and input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from ultr_jax import simulation as sim


def _log(model, seed=0, num_queries=10, length=5, num_sessions=30000, noise=np.inf, **params):
  rng = np.random.default_rng(seed)
  attraction = rng.uniform(0.05, 0.95, size=(num_queries, length)).astype(np.float32)
  log = sim.simulate_session_log(
    jax.random.key(seed), model, attraction, num_sessions=num_sessions, noise=noise, **params
  )
  return attraction.reshape(-1), {k: np.asarray(v) for k, v in log.items()}


def _split(log, n_train):
  return ({k: v[:n_train] for k, v in log.items()}, {k: v[n_train:] for k, v in log.items()})


# ----------------------------------------------------------------------------
# Independent NumPy log-likelihoods (closed forms, float64) and scipy fits.


def _np_pbm_ll(a, o, ids, clicks):
  p = a[ids] * o[None, :]
  return np.where(clicks > 0, np.log(p), np.log1p(-p)).sum(1)


def _np_dcm_ll(a, lam, ids, clicks):
  """Up to the last click l every item is examined; after it the user goes on w.p. lam_l and then
  meets no attractive item: log(1 - lam_l + lam_l prod_{j>l} (1 - a_j))."""
  a = a[ids]
  length = clicks.shape[1]
  idx = np.arange(length)[None, :]
  any_click = clicks.any(1)
  last = np.where(any_click, length - 1 - np.argmax(clicks[:, ::-1], 1), -1)[:, None]
  ll = np.where(idx <= last, np.where(clicks > 0, np.log(a), np.log1p(-a)), 0).sum(1)
  ll += np.where((clicks > 0) & (idx < last), np.log(lam)[None, :], 0).sum(1)
  tail = np.exp(np.where(idx > last, np.log1p(-a), 0).sum(1))
  lam_l = lam[np.clip(last[:, 0], 0, None)]
  return ll + np.where(any_click, np.log(1 - lam_l + lam_l * tail), np.log(tail))


def _scipy_fit(np_ll, sizes, ids, clicks):
  sig = lambda x: 1 / (1 + np.exp(-x))

  def objective(theta):
    parts = np.split(theta, np.cumsum(sizes)[:-1])
    return -np_ll(*(sig(p) for p in parts), ids, clicks).mean()

  res = optimize.minimize(
    objective, np.zeros(sum(sizes)), method="L-BFGS-B", options={"maxiter": 2000, "ftol": 1e-13, "gtol": 1e-9}
  )
  return -res.fun, [sig(p) for p in np.split(res.x, np.cumsum(sizes)[:-1])]


@pytest.mark.parametrize("model", ["pbm", "dcm"])
def test_maximum_likelihood_matches_scipy_on_an_independent_numpy_likelihood(model):
  params = {"dcm": dict(continuation=0.6)}.get(model, {})
  _, log = _log(model, seed=1, num_queries=3, length=4, num_sessions=3000, **params)
  ids, clicks = log["doc_ids"], log["clicks"].astype(np.float64)
  fit = sim.fit_click_model(
    model, {"doc_ids": ids, "clicks": clicks}, solver=sim.LBFGS(max_iters=2000, tol=1e-6), num_docs=12, l2=0.0
  )
  np_ll = _np_pbm_ll if model == "pbm" else _np_dcm_ll
  ref_ll, ref = _scipy_fit(np_ll, [12, 4], ids, clicks)
  mine = [
    np.asarray(fit.params["attraction"], np.float64),
    np.asarray(fit.params["examination" if model == "pbm" else "continuation"], np.float64),
  ]
  # Our optimum, scored by the NumPy likelihood, is scipy's (float32 vs float64 optimisers).
  assert abs(np_ll(*mine, ids, clicks).mean() - ref_ll) < 2e-5
  assert abs(fit.log_likelihood - ref_ll) < 2e-5
  if model == "pbm":  # a * o is identified, not the scale
    np.testing.assert_allclose(mine[0][:, None] * mine[1], ref[0][:, None] * ref[1], atol=2e-3)
  else:  # the last rank's continuation never matters
    np.testing.assert_allclose(mine[0], ref[0], atol=2e-3)
    np.testing.assert_allclose(mine[1][:-1], ref[1][:-1], atol=2e-3)


def test_fit_is_at_least_as_likely_as_the_truth():
  """Maximum likelihood: the fitted parameters explain the training log at least as well as the
  parameters that generated it (up to the optimiser's tolerance)."""
  attraction, log = _log("dcm", seed=2, continuation=0.6)
  fit = sim.fit_click_model(
    "dcm", {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=50, l2=0.0
  )
  truth = {"attraction": jnp.asarray(attraction), "continuation": jnp.full(5, 0.6)}
  true_ll = float(sim.click_model_log_likelihood("dcm", truth, log["doc_ids"], log["clicks"]).mean())
  assert fit.converged
  assert fit.log_likelihood >= true_ll - 1e-5
  assert fit.log_likelihood - true_ll < 0.01  # and not absurdly better: 50 + 5 parameters on 30k sessions


@pytest.mark.parametrize(
  "model, truth",
  [
    ("pbm", {"examination": jnp.array([0.68, 0.61, 0.48, 0.34, 0.28])}),
    ("dcm", {"continuation": jnp.full(5, 0.6)}),
    ("dbn", {"perseverance": jnp.float32(0.85), "satisfaction": jnp.full(50, 0.4)}),
    # ULTRA's trust table: o = v eps+, rho = eps- / eps+ with eps+ = 1 - (k + 2)/100, eps- = 0.65/(k + 1).
    (
      "trust",
      {
        "examination": jnp.array([0.68, 0.61, 0.48, 0.34, 0.28]) * (1 - (jnp.arange(5) + 2) / 100),
        "trust": 0.65 / (jnp.arange(5) + 1) / (1 - (jnp.arange(5) + 2) / 100),
      },
    ),
  ],
)
def test_a_simulated_logs_true_probabilities_are_the_true_parameters_predictions(model, truth):
  """The sampler's own conditional and marginal click probabilities (``simulate_session_log``) are what the
  fitting module predicts with the generating parameters (two separate implementations)."""
  kwargs = {"pbm": {}, "dcm": {"continuation": 0.6}, "dbn": {"perseverance": 0.85, "satisfaction": 0.4}, "trust": {}}[
    model
  ]
  attraction, log = _log(model, seed=4, num_sessions=200, **kwargs)
  pred = sim.click_model_predict(model, {"attraction": jnp.asarray(attraction), **truth}, log["doc_ids"], log["clicks"])
  np.testing.assert_allclose(log["conditional_click_prob"], pred["conditional"], rtol=2e-5, atol=1e-7)
  np.testing.assert_allclose(log["click_prob"], pred["marginal"], rtol=2e-5, atol=1e-7)


# ----------------------------------------------------------------------------
# Recovery: 30k uniformly shuffled sessions over 50 documents (600 impressions each). The
# attraction's standard error is about sqrt(a (1 - a) / (600 * examination)) ~ 0.03, so a mean
# absolute error below 0.05 is the 2-sigma bound; the shared bias parameters see every session.

RECOVERY = {
  "pbm": {},
  "ubm": {},
  "dcm": dict(continuation=(0.8, 0.6, 0.5, 0.3, 0.3)),
  "dbn": dict(perseverance=0.85, satisfaction=0.4),
  "ccm": dict(alpha=(0.9, 0.7, 0.2)),
}


@pytest.mark.slow  # a statistical recovery (seconds of fitting); the registry invariants test every model's fit in the default run
@pytest.mark.parametrize("model", sorted(RECOVERY))
def test_recovers_the_parameters_of_simulated_logs(model):
  attraction, log = _log(model, seed=3, **RECOVERY[model])
  fit = sim.fit_click_model(
    model, {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=50
  )
  assert fit.converged, fit
  a = np.asarray(fit.params["attraction"])
  p = {k: np.asarray(v) for k, v in fit.params.items()}
  table = np.array([0.68, 0.61, 0.48, 0.34, 0.28])
  if model == "pbm":  # scale not identified: compare a * o_1 and o / o_1
    assert np.abs(a * p["examination"][0] - attraction * table[0]).mean() < 0.05 * table[0]
    np.testing.assert_allclose(p["examination"] / p["examination"][0], table / table[0], atol=0.05)
    return
  if model == "ubm":  # likewise; compare the no-click row and the state just below a click
    g = p["gamma"]
    truth = sim.UBM.gamma_table(5)
    assert np.abs(a * g[0, 0] - attraction * truth[0, 0]).mean() < 0.05 * truth[0, 0]
    np.testing.assert_allclose(g[:, 0] / g[0, 0], truth[:, 0] / truth[0, 0], atol=0.05)
    below = np.arange(1, 5)
    np.testing.assert_allclose(g[below, below] / g[0, 0], truth[below, below] / truth[0, 0], atol=0.05)
    return
  assert np.abs(a - attraction).mean() < 0.05
  if model == "dcm":
    np.testing.assert_allclose(p["continuation"][:4], RECOVERY["dcm"]["continuation"][:4], atol=0.05)
  elif model == "dbn":
    assert abs(float(p["perseverance"]) - 0.85) < 0.03
    assert abs(float(np.median(p["satisfaction"])) - 0.4) < 0.1
  else:
    np.testing.assert_allclose(p["alpha"], RECOVERY["ccm"]["alpha"], atol=0.05)


def test_trust_fit_recovers_every_click_probability_but_only_an_affine_map_of_the_attractions():
  """q = o_k (a + rho_k (1 - a)) = o_k rho_k + o_k (1 - rho_k) a is affine in a: any a' = u + v a with matching
  (o', rho') explains the clicks equally, so a fit recovers the click probability of every (document, rank) and
  the attractions' order, not (o, rho) themselves."""
  attraction, log = _log("trust", seed=3)
  k = np.arange(5)
  o = np.array([0.68, 0.61, 0.48, 0.34, 0.28]) * (1 - (k + 2) / 100)
  rho = 0.65 / (k + 1) / (1 - (k + 2) / 100)
  q_true = o * (rho + (1 - rho) * attraction[:, None])
  # The same click probabilities from a' = 0.1 + 0.8 a: A' = A / v, B' = B - A u / v, o' = A' + B', rho' = B' / o'.
  u, v = 0.1, 0.8
  big_a, big_b = o * (1 - rho) / v, o * rho - o * (1 - rho) * u / v
  other = {
    "attraction": jnp.asarray(u + v * attraction),
    "examination": jnp.asarray(big_a + big_b),
    "trust": jnp.asarray(big_b / (big_a + big_b)),
  }
  truth = {"attraction": jnp.asarray(attraction), "examination": jnp.asarray(o), "trust": jnp.asarray(rho)}
  lls = [sim.click_model_log_likelihood("trust", p, log["doc_ids"][:500], log["clicks"][:500]) for p in (truth, other)]
  np.testing.assert_allclose(lls[0], lls[1], rtol=1e-5)
  fit = sim.fit_click_model(
    "trust", {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=50
  )
  assert fit.converged, fit
  p = {key: np.asarray(val, np.float64) for key, val in fit.params.items()}
  q_fit = p["examination"] * (p["trust"] + (1 - p["trust"]) * p["attraction"][:, None])
  assert np.abs(q_fit - q_true).mean() < 0.02  # 30k sessions: 600 impressions per document
  assert np.corrcoef(np.argsort(np.argsort(p["attraction"])), np.argsort(np.argsort(attraction)))[0, 1] > 0.95


@pytest.mark.parametrize(
  "true_model,other",
  [
    ("dcm", "pbm"),
    pytest.param("pbm", "dcm", marks=pytest.mark.slow),
    pytest.param("ubm", "pbm", marks=pytest.mark.slow),
  ],
)  # one pair in the default run; the other two are the same comparison on other models
def test_held_out_likelihood_prefers_the_generating_model(true_model, other):
  _, log = _log(true_model, seed=4, noise=0.3, **{"dcm": dict(continuation=0.5)}.get(true_model, {}))
  train, test = _split(log, 24000)
  scores = {}
  for model in (true_model, other):
    fit = sim.fit_click_model(
      model, {"doc_ids": train["doc_ids"], "clicks": train["clicks"]}, solver=sim.LBFGS(), num_docs=50
    )
    scores[model] = sim.evaluate_click_model(model, fit.params, test["doc_ids"], test["clicks"])
  assert scores[true_model]["log_likelihood"] > scores[other]["log_likelihood"]
  assert scores[true_model]["perplexity"] < scores[other]["perplexity"]


# ----------------------------------------------------------------------------
# Scores, masking and errors.


def test_evaluate_by_hand_and_pbm_conditionals_are_marginals():
  params = {"attraction": jnp.array([0.5, 0.8]), "examination": jnp.array([1.0, 0.5])}
  ids = np.array([[0, 1], [1, 0]])
  clicks = np.array([[1.0, 0.0], [0.0, 0.0]])
  out = sim.evaluate_click_model("pbm", params, ids, clicks)
  # rank 1: q = 0.5 (click), 0.8 (no click); rank 2: q = 0.4, 0.25 (no clicks)
  ll = np.log([0.5 * 0.6, 0.2 * 0.75])
  np.testing.assert_allclose(out["log_likelihood"], ll.mean(), rtol=1e-6)
  ppl = [np.exp(-np.mean(np.log([0.5, 0.2]))), np.exp(-np.mean(np.log([0.6, 0.75])))]
  np.testing.assert_allclose(out["perplexity_per_rank"], ppl, rtol=1e-6)
  np.testing.assert_allclose(out["perplexity"], np.mean(ppl), rtol=1e-6)
  assert out["ctr_perplexity"] == pytest.approx(out["perplexity"])
  pred = sim.click_model_predict(
    "dcm", {"attraction": params["attraction"], "continuation": jnp.array([0.5, 0.5])}, ids, clicks
  )
  np.testing.assert_allclose(pred["marginal"][0], [0.5, 0.8 * (1 - 0.5 * 0.5)], rtol=1e-6)
  np.testing.assert_allclose(pred["conditional"][0], [0.5, 0.8 * 0.5], rtol=1e-6)


# The fit's own padding logic is model-independent (the likelihoods' mask = truncation is checked per model
# in test_click_likelihood): one table model, one chain with a per-document parameter.
@pytest.mark.parametrize("model", ["pbm", "dbn"])
def test_padding_items_and_sessions_changes_nothing(model):
  _, log = _log(model, seed=5, num_queries=4, length=4, num_sessions=800)
  ids, clicks = log["doc_ids"], log["clicks"]
  plain = sim.fit_click_model(model, {"doc_ids": ids, "clicks": clicks}, solver=sim.LBFGS(), num_docs=16)
  # Two garbage items per session and 100 all-masked garbage sessions.
  rng = np.random.default_rng(0)
  pad_ids = np.concatenate([ids, rng.integers(-5, 40, size=(800, 2))], axis=1)
  pad_clicks = np.concatenate([clicks, np.ones((800, 2))], axis=1)
  where = np.broadcast_to(np.arange(6) < 4, (800, 6))
  pad_ids = np.concatenate([pad_ids, np.full((100, 6), 7)])
  pad_clicks = np.concatenate([pad_clicks, np.ones((100, 6))])
  where = np.concatenate([where, np.zeros((100, 6), bool)])
  padded = sim.fit_click_model(
    model, {"doc_ids": pad_ids, "clicks": pad_clicks, "where": where}, solver=sim.LBFGS(), num_docs=16
  )
  assert padded.log_likelihood == pytest.approx(plain.log_likelihood, abs=1e-5)
  np.testing.assert_allclose(padded.params["attraction"], plain.params["attraction"], atol=1e-4)


def test_input_errors_name_the_problem():
  ids = np.zeros((2, 3), int)
  with pytest.raises(ValueError, match="unknown click model 'dbm'"):
    sim.fit_click_model("dbm", {"doc_ids": ids, "clicks": np.zeros((2, 3))}, solver=sim.LBFGS())
  with pytest.raises(ValueError, match="same"):
    sim.fit_click_model("pbm", {"doc_ids": ids, "clicks": np.zeros((2, 4))}, solver=sim.LBFGS())
  with pytest.raises(ValueError, match=r"clicks\[1, 2\] = 0.5"):
    sim.fit_click_model("pbm", {"doc_ids": ids, "clicks": np.array([[0, 1, 0], [0, 0, 0.5]])}, solver=sim.LBFGS())
  with pytest.raises(ValueError, match=r"doc_ids\[0, 1\] = 9"):
    sim.fit_click_model(
      "pbm", {"doc_ids": np.array([[0, 9, 1], [0, 1, 2]]), "clicks": np.zeros((2, 3))}, solver=sim.LBFGS(), num_docs=3
    )
  with pytest.raises(ValueError, match=r"cascade: session \[1\] has 2 clicks.*dcm"):
    sim.fit_click_model("cascade", {"doc_ids": ids, "clicks": np.array([[1, 0, 0], [1, 0, 1]])}, solver=sim.LBFGS())
  with pytest.raises(ValueError, match="integers"):
    sim.fit_click_model("pbm", {"doc_ids": ids.astype(float), "clicks": np.zeros((2, 3))}, solver=sim.LBFGS())
  # Masked entries are not checked: garbage there is fine.
  fit = sim.fit_click_model(
    "cascade",
    {"doc_ids": np.array([[0, -1]]), "clicks": np.array([[1.0, 7.0]]), "where": np.array([[True, False]])},
    solver=sim.LBFGS(),
  )
  assert fit.params["attraction"].shape == (1,)


# ----------------------------------------------------------------------------
# Session logs from files.


def _write_log(path, log, doc_names=None):
  """One TSV row per (session, shown document): session, query, doc, 1-based position, click."""
  lines = ["session_id\tquery_id\tdoc_id\tposition\tclick"]
  for s, (ids, clicks) in enumerate(zip(log["doc_ids"], log["clicks"])):
    for pos, (d, c) in enumerate(zip(ids, clicks)):
      lines.append(f"sess{s}\tq{d // 5}\tdoc{d}\t{pos + 1}\t{int(c)}")
  path.write_text("\n".join(lines) + "\n")


def test_a_session_log_file_round_trips_and_fits_like_the_arrays(tmp_path):
  from ultr_jax.data import click_log_sessions, read_click_log

  _, log = _log("dcm", seed=6, num_queries=4, length=5, num_sessions=400, continuation=0.5)
  _write_log(tmp_path / "log.tsv", log)
  out = click_log_sessions(read_click_log(tmp_path / "log.tsv"))
  assert out["doc_ids"].shape == (400, 5) and out["where"].all()
  np.testing.assert_array_equal(out["clicks"], log["clicks"])
  # Dense ids differ from the simulator's, but map one to one.
  pairs = set(zip(out["doc_ids"].ravel().tolist(), log["doc_ids"].ravel().tolist()))
  assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs}) == out["num_docs"]
  from_file = sim.fit_click_model(
    "dcm", {"doc_ids": out["doc_ids"], "clicks": out["clicks"]}, solver=sim.LBFGS(), num_docs=out["num_docs"]
  )
  from_arrays = sim.fit_click_model(
    "dcm", {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=20
  )
  assert from_file.log_likelihood == pytest.approx(from_arrays.log_likelihood, abs=1e-6)


def test_session_log_gaps_and_errors(tmp_path):
  from ultr_jax.data import click_log_sessions, read_click_log

  p = tmp_path / "log.tsv"
  head = "session_id\tquery_id\tdoc_id\tposition\tclick\n"
  # Session s2 shows positions 1 and 3: position 2 is masked, ranks are kept.
  p.write_text(head + "s2\tq\ta\t1\t0\ns2\tq\tb\t3\t1\ns1\tq\tb\t1\t1\n")
  out = click_log_sessions(read_click_log(p))
  assert out["where"].tolist() == [[True, False, True], [True, False, False]]
  assert out["clicks"].tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
  with pytest.raises(ValueError, match=r"log.tsv:3: field 'position'.*beyond list_size 2"):
    click_log_sessions(read_click_log(p), list_size=2)
  p.write_text(head + "s1\tq\ta\t1\t0\ns1\tq\tb\t1\t1\n")
  with pytest.raises(ValueError, match=r"log.tsv:3: field 'position': its session already shows"):
    click_log_sessions(read_click_log(p))
  p.write_text(head + "s1\tq\ta\t1\t0\ns1\tr\tb\t2\t1\n")
  with pytest.raises(ValueError, match=r"log.tsv:3: field 'query_id': 'r', but its session began with query 'q'"):
    click_log_sessions(read_click_log(p))
  p.write_text("query_id\tdoc_id\tposition\tclick\nq\ta\t1\t0\n")
  with pytest.raises(ValueError, match="no session_id column"):
    click_log_sessions(read_click_log(p))
  p.write_text("session_id\tquery_id\tdoc_id\tposition\tclick\timpressions\ns\tq\ta\t1\t0\t3\n")
  with pytest.raises(ValueError, match="not both"):
    read_click_log(p)


@pytest.mark.parametrize("model", ["pbm", "dbn"])
def test_a_fit_sharded_over_sessions_equals_the_single_device_fit(model):
  """Data-parallel over 8 (host) devices: 1,001 sessions, so the last shard is padded."""
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8, as the tests set)")
  _, log = _log(model, seed=7, num_queries=4, length=5, num_sessions=1001)
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("data",))
  plain = sim.fit_click_model(
    model, {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(), num_docs=20
  )
  sharded = sim.fit_click_model(
    model, {"doc_ids": log["doc_ids"], "clicks": log["clicks"]}, solver=sim.LBFGS(mesh=mesh), num_docs=20
  )
  assert sharded.log_likelihood == pytest.approx(plain.log_likelihood, abs=1e-5)
  np.testing.assert_allclose(sharded.params["attraction"], plain.params["attraction"], atol=1e-3)
  assert len(sharded.params["attraction"].sharding.device_set) == 8  # it ran on the mesh


def test_per_document_parameters_follow_their_documents():
  """DBN with perseverance 1: document 0 always satisfies, the others never; every document attracts.
  So each session clicks down to document 0, wherever it is shown, and stops there."""
  log = sim.simulate_session_log(
    jax.random.key(0),
    "dbn",
    np.ones((1, 3), np.float32),
    num_sessions=50,
    noise=np.inf,
    perseverance=1.0,
    satisfaction=np.array([[1.0, 0.0, 0.0]], np.float32),
  )
  ids, clicks = np.asarray(log["doc_ids"]), np.asarray(log["clicks"])
  rank_of_doc0 = np.argmax(ids == 0, axis=1)
  np.testing.assert_array_equal(clicks, (np.arange(3) <= rank_of_doc0[:, None]).astype(np.float32))
  assert len(set(rank_of_doc0.tolist())) == 3  # document 0 was shown at every rank


def test_dbn_recovers_per_document_satisfaction():
  rng = np.random.default_rng(8)
  attraction = rng.uniform(0.3, 0.95, size=(10, 5)).astype(np.float32)
  sigma = rng.uniform(0.1, 0.9, size=(10, 5)).astype(np.float32)
  log = sim.simulate_session_log(
    jax.random.key(8), "dbn", attraction, num_sessions=30000, noise=np.inf, perseverance=0.9, satisfaction=sigma
  )
  fit = sim.fit_click_model(
    "dbn", {"doc_ids": np.asarray(log["doc_ids"]), "clicks": np.asarray(log["clicks"])}, solver=sim.LBFGS(), num_docs=50
  )
  got = np.asarray(fit.params["satisfaction"])
  # The same 2-sigma bound as the attraction's (each document is clicked in ~1,500 sessions).
  assert np.abs(got - sigma.reshape(-1)).mean() < 0.05
  assert np.corrcoef(got, sigma.reshape(-1))[0, 1] > 0.95
  assert abs(float(fit.params["perseverance"]) - 0.9) < 0.03


def _np_ctr(model, ids, clicks, where, num_docs, prior):
  """Loops over every cell: (clicks + prior * parent) / (impressions + prior)."""
  s_, l_ = clicks.shape
  items = [(ids[s, r], r, clicks[s, r]) for s in range(s_) for r in range(l_) if where[s, r]]
  g = np.mean([c for _, _, c in items])

  def smooth(cell_items, parent):
    n, k = len(cell_items), sum(c for _, _, c in cell_items)
    return (k + prior * parent) / (n + prior) if n + prior > 0 else parent

  doc = np.array([smooth([t for t in items if t[0] == d], g) for d in range(num_docs)])
  if model == "gctr":
    return np.full(clicks.shape, g)
  if model == "rctr":
    rank = [smooth([t for t in items if t[1] == r], g) for r in range(l_)]
    return np.broadcast_to(rank, clicks.shape)
  if model == "dctr":
    return doc[ids]
  return np.array(
    [
      [smooth([t for t in items if t[0] == ids[s, r] and t[1] == r], doc[ids[s, r]]) for r in range(l_)]
      for s in range(s_)
    ]
  )


@pytest.mark.parametrize("model", sim.CTR_MODELS)
@pytest.mark.parametrize("prior", [0.0, 2.0])
def test_ctr_baselines_match_per_cell_counts(model, prior):
  _, log = _log("pbm", seed=6, num_queries=3, length=4, num_sessions=300, noise=0.5)
  where = np.ones(log["clicks"].shape, bool)
  where[::5, 3] = False  # some sessions show 3 documents
  params = sim.fit_click_model(
    model,
    {"doc_ids": log["doc_ids"], "clicks": log["clicks"], "where": where},
    num_docs=13,
    solver=sim.Counts(prior=prior),
  ).params
  got = sim.ctr_model_predict(model, params, log["doc_ids"])
  want = _np_ctr(model, log["doc_ids"], log["clicks"], where, 13, prior)
  np.testing.assert_allclose(got[where], want[where], rtol=1e-5)
  if model in ("dctr", "drctr"):  # document 12 never shown: its rate is the parent's, the global CTR
    assert params["document"][12] == pytest.approx(float(params["global"]))


def test_a_click_model_beats_the_ctr_baselines_on_its_own_log_and_errors_name_the_problem():
  _, log = _log("pbm", seed=7, num_queries=10, length=5, num_sessions=12000, noise=0.5)
  train, test = _split(log, 10000)
  fit = sim.fit_click_model(
    "pbm", {"doc_ids": train["doc_ids"], "clicks": train["clicks"]}, solver=sim.LBFGS(), num_docs=50
  )
  pbm = sim.evaluate_click_model("pbm", fit.params, test["doc_ids"], test["clicks"])["perplexity"]
  ppl = {}
  for model in sim.CTR_MODELS:
    p = sim.ctr_model_predict(
      model,
      sim.fit_click_model(
        model, {"doc_ids": train["doc_ids"], "clicks": train["clicks"]}, num_docs=50, solver=sim.Counts()
      ).params,
      test["doc_ids"],
    )
    ppl[model] = sim.click_prediction_scores(p, p, test["clicks"])["perplexity"]
  assert pbm < min(ppl.values()), (pbm, ppl)
  assert ppl["gctr"] > max(ppl["rctr"], ppl["dctr"])  # a rank or a document effect beats none
  with pytest.raises(ValueError, match="unknown CTR model 'ctr'"):
    sim.fit_click_model("ctr", {"doc_ids": train["doc_ids"], "clicks": train["clicks"]}, solver=sim.Counts())
  with pytest.raises(ValueError, match="prior must be >= 0"):
    sim.fit_click_model("dctr", {"doc_ids": train["doc_ids"], "clicks": train["clicks"]}, solver=sim.Counts(prior=-1.0))
  with pytest.raises(ValueError, match="clicks must be 0 or 1"):
    sim.fit_click_model("dctr", {"doc_ids": train["doc_ids"], "clicks": 2 * train["clicks"]}, solver=sim.Counts())
