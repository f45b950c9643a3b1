"""Online LTR: Plackett-Luce sampling, team-draft and probabilistic multileaving, the PDGD loss, the online learners and binary."""

import importlib.util
import itertools
import json
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rax

from ultr_jax import losses, simulation as sim
from ultr_jax.data import make_synthetic
from ultr_jax.testing import assert_matches_expected
from ultr_jax.studies.online import default_online_config
from ultr_jax.train import (
  ONLINE_CLICK_MODELS,
  ONLINE_METHODS,
  online_click_model,
  online_learning,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = ROOT / "experiments" / "online" / "configs" / "default.py"


# The simulation functions are plain (unjitted) JAX: called eagerly, every op on a new shape compiles its own tiny
# program. The tests call them jitted (as the learners do), one program per shape.
_pl_sample = jax.jit(sim.plackett_luce_sample)
_team_draft = jax.jit(sim.team_draft_multileave)
_pm = jax.jit(sim.probabilistic_multileave, static_argnames=("tau",))
_pm_assignment = jax.jit(sim.probabilistic_multileave_assignment, static_argnames=("tau",))
_preferences = jax.jit(sim.multileave_preferences, static_argnames=("against",))


# ----------------------------------------------------------------------------
# NumPy references.


def np_pl_log_prob(scores, order):
  """log P(order) under Plackett-Luce, ``order`` = item indices top-down (valid items only)."""
  s = np.asarray(scores, np.float64)[list(order)]
  return float(sum(s[t] - np.log(np.exp(s[t:]).sum()) for t in range(len(s))))


def np_pdgd_weights(scores, clicks, positions, where, top_k, pairs="considered", debias=True):
  """PDGD's pair weights by swapping items and re-scoring the whole ranking (display slots [K, K])."""
  valid_items = [i for i in np.argsort(positions, kind="stable") if where[i]]
  k = min(top_k, len(scores))
  shown = valid_items[:k]
  c = [clicks[i] for i in shown]
  last = max([t for t, v in enumerate(c) if v > 0], default=-1)
  base = np_pl_log_prob(scores, valid_items)
  out = np.zeros((k, k))
  for a, b in itertools.product(range(len(shown)), repeat=2):
    if (pairs == "all" or (a <= last + 1 and b <= last + 1)) and c[a] > 0 and c[b] == 0:
      if not debias:
        out[a, b] = 1.0
        continue
      swapped = list(valid_items)
      swapped[a], swapped[b] = swapped[b], swapped[a]
      other = np_pl_log_prob(scores, swapped)
      out[a, b] = np.exp(other) / (np.exp(base) + np.exp(other))
  return out


def _case(seed, size=7, num_valid=6, num_clicks=2):
  rng = np.random.default_rng(seed)
  scores = (2.0 * rng.standard_normal(size)).astype(np.float32)
  where = np.arange(size) < num_valid
  positions = np.asarray(_pl_sample(jax.random.key(seed), scores, where=where))
  clicks = np.zeros(size, np.float32)
  shown = np.argsort(positions)[:num_valid]
  clicks[rng.choice(shown[:5], num_clicks, replace=False)] = 1.0
  return scores, clicks, positions, where


# ----------------------------------------------------------------------------
# Plackett-Luce.


def test_plackett_luce_probabilities_sum_to_one_and_match_numpy():
  scores = jnp.array([0.3, -1.0, 2.0, 0.5])
  total, total_top2 = 0.0, 0.0
  for perm in itertools.permutations(range(4)):
    positions = jnp.asarray(np.argsort(perm))
    lp = float(sim.plackett_luce_log_prob(scores, positions))
    assert lp == pytest.approx(np_pl_log_prob(scores, perm), abs=1e-5)
    total += np.exp(lp)
  for a, b in itertools.permutations(range(4), 2):  # the top 2 as a partial ranking
    rest = [i for i in range(4) if i not in (a, b)]
    positions = jnp.asarray(np.argsort([a, b, *rest]))
    total_top2 += float(jnp.exp(sim.plackett_luce_log_prob(scores, positions, top_k=2)))
  assert total == pytest.approx(1.0, abs=1e-5) and total_top2 == pytest.approx(1.0, abs=1e-5)


def test_plackett_luce_sample_follows_its_distribution_and_puts_masked_items_last():
  scores = jnp.array([1.0, 0.0, -0.5, 3.0])
  where = jnp.array([True, True, True, False])
  positions = np.asarray(
    jax.jit(jax.vmap(lambda k: sim.plackett_luce_sample(k, scores, where=where)))(
      jax.random.split(jax.random.key(0), 40000)
    )
  )
  assert (positions[:, 3] == 3).all()
  assert (np.sort(positions, axis=1) == np.arange(4)).all()
  for perm in itertools.permutations(range(3)):
    freq = np.mean(np.all(positions[:, list(perm)] == np.arange(3), axis=1))
    assert freq == pytest.approx(np.exp(np_pl_log_prob(scores[:3], perm)), abs=0.01)


# ----------------------------------------------------------------------------
# Team-draft multileaving.


def _replay_ok(scores, where, positions, teams):
  """Every team placed its best item not yet shown, and the teams took turns in rounds."""
  n = scores.shape[0]
  shown = [i for i in np.argsort(positions, kind="stable") if where[i]]
  assert sorted(positions.tolist()) == list(range(len(where)))
  assert (teams[~where] == -1).all() and (teams[where] >= 0).all()
  assert all(positions[i] >= where.sum() for i in np.flatnonzero(~where))
  taken = set()
  for slot, item in enumerate(shown):
    team = teams[item]
    counts = np.bincount(teams[shown[:slot]], minlength=n) if slot else np.zeros(n, int)
    assert counts[team] == counts.min()  # nobody picks twice before everyone has picked once
    ranked = [i for i in np.argsort(-scores[team], kind="stable") if where[i] and i not in taken]
    assert item == ranked[0]
    taken.add(item)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_team_draft_multileave_invariants(n):
  rng = np.random.default_rng(n)
  scores = rng.standard_normal((6, n, 9)).astype(np.float32)
  where = np.arange(9)[None, :] < rng.integers(1, 10, size=(6, 1))
  positions, teams = _team_draft(jax.random.key(n), scores, where=where)
  for q in range(6):
    _replay_ok(scores[q], where[q], np.asarray(positions[q]), np.asarray(teams[q]))


def test_team_draft_interleaving_is_fair_and_identical_rankings_pass_through():
  scores = jnp.array([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]])
  keys = jax.random.split(jax.random.key(1), 4000)
  positions, teams = jax.jit(jax.vmap(lambda k: sim.team_draft_multileave(k, scores)))(keys)
  first_team = np.asarray(teams)[np.arange(4000), np.argmin(np.asarray(positions), axis=1)]
  assert np.mean(first_team == 0) == pytest.approx(0.5, abs=0.03)
  same = jnp.stack([jnp.array([0.1, 0.9, 0.5, 0.3])] * 3)
  positions, _ = _team_draft(jax.random.key(0), same)
  assert positions.tolist() == [3, 0, 1, 2]


def test_multileave_credit_counts_each_teams_clicks():
  clicks = jnp.array([[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]])
  teams = jnp.array([[0, 2, 1, 2], [1, 1, 0, -1]])
  where = jnp.array([[True] * 4, [True, True, True, False]])
  credit = sim.multileave_credit(clicks, teams, num_teams=3, where=where)
  assert credit.tolist() == [[1.0, 0.0, 2.0], [1.0, 1.0, 0.0]]


# ----------------------------------------------------------------------------
# Probabilistic multileaving.


def np_pm_slot_probs(scores, where, shown, tau=3.0):
  """``[slot, ranker]``: P_j(item at the slot | the items shown before it), by direct sums."""
  valid = np.flatnonzero(where)
  ranks = np.empty(scores.shape)
  for j, row in enumerate(scores):
    order = [i for i in np.argsort(-row, kind="stable") if where[i]]
    ranks[j, order] = np.arange(1, len(order) + 1)
  weight = np.where(where, ranks, np.inf) ** -tau
  left = set(valid.tolist())
  out = []
  for item in shown:
    out.append(weight[:, item] / weight[:, sorted(left)].sum(axis=1))
    left.remove(item)
  return np.array(out)


def test_probabilistic_multileave_follows_its_distribution_and_puts_masked_items_last():
  scores = np.array([[3.0, 2.0, 1.0, 9.0], [0.0, 1.0, 3.0, 9.0], [1.0, 3.0, 2.0, 9.0]], np.float32)
  where = np.array([True, True, True, False])
  positions = np.asarray(
    jax.jit(jax.vmap(lambda k: sim.probabilistic_multileave(k, scores, where=where)))(
      jax.random.split(jax.random.key(0), 40000)
    )
  )
  assert (positions[:, 3] == 3).all() and (np.sort(positions, axis=1) == np.arange(4)).all()
  for perm in itertools.permutations(range(3)):
    # Each slot's ranker is uniform: P(list) = prod over slots of the rankers' mean slot probability.
    exact = np.prod(np_pm_slot_probs(scores, where, perm).mean(axis=1))
    freq = np.mean(np.all(positions[:, list(perm)] == np.arange(3), axis=1))
    assert freq == pytest.approx(exact, abs=0.01)


def test_probabilistic_multileave_assignment_matches_numpy():
  rng = np.random.default_rng(3)
  scores = rng.standard_normal((4, 3, 7)).astype(np.float32)
  where = np.arange(7)[None, :] < np.array([[7], [5], [2], [1]])
  positions = np.asarray(_pm(jax.random.key(1), scores, where=where))
  post = np.asarray(_pm_assignment(scores, positions, where=where))
  for q in range(4):
    shown = [i for i in np.argsort(positions[q]) if where[q, i]]
    slot = np_pm_slot_probs(scores[q], where[q], shown)
    np.testing.assert_allclose(post[q][:, shown].T, slot / slot.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert (post[q][:, ~where[q]] == 0).all()
  # Rankers that agree on a ranking cannot be told apart; the last item shown could be anyone's.
  same = np.asarray(_pm_assignment(np.stack([scores[0, 0]] * 3), positions[0]))
  np.testing.assert_allclose(same, 1.0 / 3.0, rtol=1e-6)


def test_multileave_preferences_equal_the_enumerated_expectation():
  rng = np.random.default_rng(0)
  n, size = 3, 6
  assignment = rng.dirichlet(np.ones(n), size=(2, size)).transpose(0, 2, 1).astype(np.float32)  # [2, n, L]
  clicks = np.array([[1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 1]], np.float32)
  where = np.array([[True] * 6, [True] * 4 + [False] * 2])
  pref = np.asarray(_preferences(clicks, assignment, where=where))
  for q in range(2):
    clicked = [i for i in range(size) if clicks[q, i] and where[q, i]]
    ref = np.zeros((n, n))
    for owners in itertools.product(range(n), repeat=len(clicked)):
      prob = np.prod([assignment[q, j, i] for j, i in zip(owners, clicked)])
      count = np.bincount(np.array(owners, int), minlength=n)
      ref += prob * np.sign(count[:, None] - count[None, :])
    np.testing.assert_allclose(pref[q], ref, atol=1e-6)
    np.testing.assert_allclose(pref[q], -pref[q].T, atol=1e-7)
    for y in range(n):  # one column only
      np.testing.assert_allclose(
        _preferences(clicks[q], assignment[q], where=where[q], against=y), pref[q][:, y], atol=1e-7
      )
  # One-hot assignments (team-draft's teams): the sign of the credit difference.
  teams = jnp.array([[0, 2, 1, 2, 0, 1]])
  credit = sim.multileave_credit(clicks[:1], teams, num_teams=3)
  one_hot = jax.nn.one_hot(teams, 3, axis=-2)
  np.testing.assert_array_equal(_preferences(clicks[:1], one_hot), np.sign(credit[..., :, None] - credit[..., None, :]))
  assert not np.asarray(_preferences(np.zeros(size), assignment[0])).any()  # no clicks: all ties


@pytest.mark.parametrize("tau", [0.0, -1.0, 100.0])
def test_probabilistic_multileave_refuses_a_tau_whose_weights_underflow(tau):
  scores = jnp.zeros((2, 3))  # 100 * ln 3 > 80: 3^-100 is not a normal float32
  with pytest.raises(ValueError, match="tau must be > 0 with tau \\* ln\\(list size\\) <= 80"):
    sim.probabilistic_multileave(jax.random.key(0), scores, tau=tau)
  with pytest.raises(ValueError, match="tau must be > 0"):
    sim.probabilistic_multileave_assignment(scores, jnp.arange(3), tau=tau)


# ----------------------------------------------------------------------------
# The PDGD loss.


@pytest.mark.parametrize("pairs, debias", [("considered", True), ("all", True), ("considered", False)])
@pytest.mark.parametrize("seed", range(4))
def test_pdgd_pair_weights_equal_swapped_ranking_probabilities(seed, pairs, debias):
  scores, clicks, positions, where = _case(seed)
  got = np.asarray(
    losses.pdgd_pair_weights(scores, clicks, positions=positions, where=where, top_k=5, pairs=pairs, debias=debias)
  )
  np.testing.assert_allclose(got, np_pdgd_weights(scores, clicks, positions, where, 5, pairs, debias), atol=1e-5)


def test_pdgd_with_every_switch_off_is_the_naive_pairwise_loss_on_the_displayed_items():
  cases = [_case(s, num_clicks=1 + s % 3) for s in range(6)]
  scores, clicks, positions, where = (np.stack(x) for x in zip(*cases))
  got = losses.pdgd_loss(
    scores,
    clicks,
    positions=positions,
    where=where,
    top_k=5,
    reduce_fn=None,
    pairs="all",
    debias=False,
    surrogate="log_probability",
  )
  shown = where & (positions < 5)
  naive = jax.jit(lambda s, c, w: jnp.sum(losses.naive_pairwise_loss(s, c, where=w, reduce_fn=None), axis=(-2, -1)))
  want = naive(scores, clicks, shown)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  # Each switch alone changes the loss (the cases have unclicked items below the last click + 1).
  pdgd = losses.pdgd_loss(scores, clicks, positions=positions, where=where, top_k=5, reduce_fn=None)
  for switch in ({"pairs": "all"}, {"debias": False}, {"surrogate": "log_probability"}):
    other = losses.pdgd_loss(scores, clicks, positions=positions, where=where, top_k=5, reduce_fn=None, **switch)
    assert not np.allclose(other, pdgd), switch
  with pytest.raises(ValueError, match="pdgd: pairs must be one of"):
    losses.pdgd_loss(scores, clicks, positions=positions, pairs="above")
  with pytest.raises(ValueError, match="pdgd: surrogate must be one of"):
    losses.pdgd_loss(scores, clicks, positions=positions, surrogate="hinge")


def test_pdgd_gradient_is_the_papers_estimate():
  scores, clicks, positions, where = _case(7)
  grad = np.asarray(
    jax.grad(lambda s: losses.pdgd_loss(s, clicks, positions=positions, where=where, top_k=5))(jnp.asarray(scores))
  )
  w = np_pdgd_weights(scores, clicks, positions, where, 5)
  order = [i for i in np.argsort(positions, kind="stable")][:5]
  expected = np.zeros(len(scores))
  for a, b in itertools.product(range(5), repeat=2):
    if w[a, b] > 0:
      i, j = order[a], order[b]
      p = 1.0 / (1.0 + np.exp(-(scores[i] - scores[j])))
      expected[i] += w[a, b] * p * (1 - p)  # ascent on rho * P(d_i > d_j): the loss is its negative
      expected[j] -= w[a, b] * p * (1 - p)
  np.testing.assert_allclose(-grad, expected, atol=1e-6)
  assert (grad[~where] == 0).all() and (grad[np.argsort(positions)[5:]] == 0).all()  # not shown: no gradient


def test_pdgd_mask_equals_truncation_and_vmap_equals_loop():
  loss = jax.jit(losses.pdgd_loss, static_argnames=("top_k", "reduce_fn"))
  scores, clicks, positions, where = _case(3, size=6, num_valid=6)
  base = loss(scores, clicks, positions=positions, top_k=4)
  padded = loss(
    np.r_[scores, 50.0, -7.0],
    np.r_[clicks, 1.0, 1.0],
    positions=np.r_[positions, 6, 7],
    where=np.r_[np.ones(6, bool), False, False],
    top_k=4,
  )
  np.testing.assert_allclose(padded, base, rtol=1e-6)
  cases = [_case(s) for s in range(5)]
  stacked = [np.stack(x) for x in zip(*cases)]
  batch = loss(stacked[0], stacked[1], positions=stacked[2], where=stacked[3], top_k=5, reduce_fn=None)
  loop = [loss(s, c, positions=p, where=w, top_k=5, reduce_fn=None) for s, c, p, w in cases]
  np.testing.assert_allclose(batch, loop, rtol=1e-6)
  mean = loss(stacked[0], stacked[1], positions=stacked[2], where=stacked[3], top_k=5)
  np.testing.assert_allclose(mean, np.mean(loop), rtol=1e-6)


def test_pdgd_no_clicks_or_all_masked_gives_zero_finite_gradients_and_compiles_once():
  scores = jnp.array([1.0, -2.0, 0.5, 0.0])
  positions = jnp.array([2, 0, 1, 3])
  for clicks, where in ((jnp.zeros(4), jnp.ones(4, bool)), (jnp.ones(4), jnp.zeros(4, bool))):
    loss, grad = jax.value_and_grad(lambda s: losses.pdgd_loss(s, clicks, positions=positions, where=where))(scores)
    assert float(loss) == 0.0 and np.all(np.asarray(grad) == 0.0)
  traces = []

  @jax.jit
  def f(s, c, p):
    traces.append(1)
    return losses.pdgd_loss(s, c, positions=p, top_k=3)

  for seed in range(3):
    s, c, p, _ = _case(seed, size=6, num_valid=6)
    assert np.isfinite(float(f(s, c, p)))
  assert len(traces) == 1


def test_pdgd_is_stable_for_large_score_gaps():
  scores = jnp.array([80.0, -80.0, 0.0, 40.0, -40.0])
  clicks = jnp.array([0.0, 1.0, 0.0, 0.0, 0.0])
  w = losses.pdgd_pair_weights(scores, clicks, positions=jnp.arange(5))
  grad = jax.grad(lambda s: losses.pdgd_loss(s, clicks, positions=jnp.arange(5)))(scores)
  assert np.isfinite(np.asarray(w)).all() and np.isfinite(np.asarray(grad)).all()
  # Swapping the score-80 item below the score -80 one: rho = sigma(-40) ~ 4e-18, still exact in log space.
  ref = np_pdgd_weights(np.asarray(scores), np.asarray(clicks), np.arange(5), np.ones(5, bool), 5)
  np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-4)
  assert 1e-18 < float(w[1, 0]) < 1e-17


# ----------------------------------------------------------------------------
# Users and learners.


def test_online_click_models_follow_their_tables():
  click, stop = (np.asarray(v) for v in ONLINE_CLICK_MODELS["navigational"])
  fn = online_click_model("navigational", top_k=3)
  labels = jnp.array([4.0, 4.0, 0.0, 4.0])
  clicks = np.asarray(
    jax.jit(jax.vmap(lambda k: fn(k, labels, positions=jnp.arange(4), where=jnp.ones(4, bool))))(
      jax.random.split(jax.random.key(0), 40000)
    )
  )
  p1 = click[4] * (1 - click[4] * stop[4])  # the second item is seen unless the first was clicked and satisfied
  assert clicks[:, 0].mean() == pytest.approx(click[4], abs=0.01)
  assert clicks[:, 1].mean() == pytest.approx(p1, abs=0.01)
  assert (clicks[:, 3] == 0).all()  # below the top 3: never shown
  with pytest.raises(ValueError, match="unknown online click model"):
    online_click_model("nope")


@pytest.fixture(scope="module")
def small_data():
  return make_synthetic(num_train=40, num_valid=1, num_test=20, list_size=8, num_features=6, seed=0)


def _small_config(**overrides):
  c = default_online_config()
  c.num_impressions, c.eval_every, c.top_k = 400, 200, 5
  c.mgd.num_candidates = 3
  c.nsgd.num_candidates, c.nsgd.history, c.nsgd.worst = 3, 12, 4  # the small data's linear ranker has 7 parameters
  for k, v in overrides.items():
    setattr(c, k, v)
  return c


@pytest.mark.parametrize("method", ["pdgd", "nsgd"])  # NSGD: its memory is per seed too
def test_online_learner_vmap_over_seeds_equals_one_run_per_seed(method, small_data):
  c = _small_config(num_impressions=200, eval_every=100)
  both = online_learning(method, small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1))
  for i, seed in enumerate((0, 1)):
    one = online_learning(method, small_data.train, small_data.test, click_model="perfect", config=c, seeds=(seed,))
    np.testing.assert_allclose(one["curve"][0], both["curve"][i], atol=1e-6)
  assert both["curve"].shape == (2, 3) and both["impressions"].tolist() == [0, 100, 200]
  _starts_at_zero_and_moves(both)


def _starts_at_zero_and_moves(out):
  assert out["curve"][0, 0] == out["curve"][1, 0]  # w = 0 to start, whatever the seed
  assert not np.all(out["curve"] == out["curve"][0, 0])  # and the ranker moves
  assert np.all((out["online_ndcg@10"] > 0) & (out["online_ndcg@10"] <= 1))


def test_seeds_split_over_a_mesh_equal_the_single_device_run(small_data):
  from ultr_jax.train import make_mesh

  c = _small_config(num_impressions=200, eval_every=100)
  plain = online_learning("dbgd", small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1))
  mesh = make_mesh(2)  # tests run with 8 fake CPU devices
  sharded = online_learning(
    "dbgd", small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1), mesh=mesh
  )
  np.testing.assert_allclose(sharded["curve"], plain["curve"], atol=1e-6)
  with pytest.raises(ValueError, match="3 seeds do not split over the mesh's 2 devices"):
    online_learning(
      "dbgd", small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1, 2), mesh=mesh
    )


@pytest.mark.parametrize(
  "method,multileave",
  [
    ("dbgd", "team_draft"),
    ("mgd", "team_draft"),
    ("dbgd", "probabilistic"),
    ("nsgd", "probabilistic"),
  ],
)  # MGD's is in the next tests; PDGD's and NSGD's (team draft) in the vmap test above
def test_online_learners_start_at_zero_and_move(method, multileave, small_data):
  c = _small_config(num_impressions=200, eval_every=100)
  if multileave:
    c[method].multileave = multileave
  out = online_learning(method, small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1))
  _starts_at_zero_and_moves(out)


def test_dueling_learner_with_a_zero_step_stays_put(small_data):
  c = _small_config(num_impressions=200, eval_every=100)
  c.mgd.learning_rate = 0.0
  still = online_learning("mgd", small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0,))
  assert np.all(still["curve"] == still["curve"][0, 0])  # no step: the ranker never moves


def test_a_sweep_over_users_compiles_each_method_once(small_data):
  from ultr_jax.train import online

  c = _small_config(num_impressions=150, eval_every=50)  # a spec no other test uses: a fresh program
  for click_model in ONLINE_CLICK_MODELS:
    online_learning("dbgd", small_data.train, small_data.test, click_model=click_model, config=c, seeds=(3,))
  assert online._compiled_run(online._spec("dbgd", c))._cache_size() == 1


def test_pdgd_learns_from_perfect_clicks(small_data):
  out = online_learning(
    "pdgd", small_data.train, small_data.test, click_model="perfect", config=_small_config(), seeds=(0, 1, 2)
  )
  assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all()


@pytest.mark.parametrize("multileave", ["team_draft", "probabilistic"])
def test_mgd_learns_from_perfect_clicks(multileave, small_data):
  c = _small_config()
  c.mgd.multileave, c.mgd.learning_rate = multileave, 0.1
  out = online_learning("mgd", small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1, 2))
  assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all()


# ----------------------------------------------------------------------------
# NSGD (Wang et al., SIGIR'18): null-space exploration, preselection, difficult-query tie-breaks.


def _empty_memory(history=6, tie_queries=3, size=8, list_size=5, num_features=2):
  from ultr_jax.train import online

  params = {"w": jnp.zeros(size - 1), "b": jnp.zeros(())}
  return online._nsgd_memory(params, jnp.zeros((list_size, num_features)), (history, 2, tie_queries, 4))


def test_nsgd_directions_are_the_pools_projections_on_the_null_space_most_sensitive_first():
  """Against scipy's null-space basis: each kept direction is its draw projected on the null space of the
  losers (three independent rows, then two empty slots) and normalised, and the kept ones are the draws
  with the largest |u . x_mean|, in that order."""
  import scipy.linalg
  from ultr_jax.train import online

  rng = np.random.default_rng(0)
  losers = np.concatenate([rng.normal(size=(3, 8)), np.zeros((2, 8))]).astype(np.float32)
  pool = rng.normal(size=(10, 8)).astype(np.float32)
  x_mean = rng.normal(size=8).astype(np.float32)
  got = np.asarray(online._nsgd_directions(jnp.asarray(pool), jnp.asarray(losers), 4, sensitivity=lambda u: u @ x_mean))
  basis = scipy.linalg.null_space(losers.astype(np.float64))  # [8, 5]
  proj = pool @ basis @ basis.T
  proj /= np.linalg.norm(proj, axis=1, keepdims=True)
  want = proj[np.argsort(-np.abs(proj @ x_mean), kind="stable")[:4]]
  np.testing.assert_allclose(got, want, atol=1e-5)
  np.testing.assert_allclose(got @ losers.T, 0.0, atol=1e-5)
  # No losers remembered yet (all slots empty): the whole space, only normalised.
  free = np.asarray(online._nsgd_directions(jnp.asarray(pool), jnp.zeros((5, 8)), 10, sensitivity=lambda u: u[0]))
  np.testing.assert_allclose(
    np.sort(np.abs(free[:, 0])), np.sort(np.abs(pool[:, 0]) / np.linalg.norm(pool, axis=1)), rtol=1e-5
  )


def test_nsgd_remembers_the_losers_the_authors_keep_in_a_ring():
  """Directions that lost and whose margin is among the 4 lowest of all rankers (the current one's is 0) are
  written in order at the ring's head, wrapping around; the others are dropped."""
  from ultr_jax.train import online

  mem = _empty_memory(history=6)
  remember = jax.jit(online._nsgd_remember_losers)
  rng = np.random.default_rng(1)
  ring, margins, head = np.zeros((6, 8)), np.full(6, np.inf), 0
  for _ in range(30):
    margin = rng.integers(-4, 2, size=5).astype(np.float32)
    dirs = rng.normal(size=(5, 8)).astype(np.float32)
    mem = remember(mem, dirs, margin)
    kth = np.sort(np.concatenate([[0.0], margin]))[3]
    for i in range(5):
      if margin[i] < 0 and margin[i] <= kth:
        ring[head], margins[head], head = dirs[i], margin[i], (head + 1) % 6
    np.testing.assert_allclose(mem.directions, ring, atol=0)
    np.testing.assert_array_equal(mem.margins, margins)
    assert int(mem.head) == head


def test_nsgd_keeps_the_most_difficult_recent_queries():
  """A query with clicks takes an empty slot, else a slot stored more than `window` impressions ago, else the
  easiest stored query's if it is harder (lower sum of 1 / rank of its clicks); a query without clicks is
  never stored. Checked against a plain loop over 60 impressions."""
  from ultr_jax.train import online

  rng = np.random.default_rng(2)
  mem = _empty_memory(tie_queries=3)
  remember = jax.jit(online._nsgd_remember_query, static_argnums=5)
  slots = [None] * 3  # (rr, time)
  for t in range(60):
    clicks = (rng.uniform(size=5) < 0.25).astype(np.float32)
    positions = rng.permutation(5)
    where = np.array([True] * 4 + [bool(t % 2)])
    x = rng.normal(size=(5, 2)).astype(np.float32)
    mem = remember(mem, x, where, clicks, positions, 4)
    rr = float(np.sum((clicks > 0) * where / (positions + 1.0)))
    slot = None
    if rr > 0:
      stale = [i for i, e in enumerate(slots) if e is not None and t - e[1] > 4]
      if None in slots:
        slot = slots.index(None)
      elif stale:
        slot = stale[0]
      elif max(e[0] for e in slots) > rr:
        slot = int(np.argmax([e[0] for e in slots]))
    if slot is not None:
      slots[slot] = (rr, t)
      np.testing.assert_array_equal(mem.query_x[slot], x)
      np.testing.assert_array_equal(mem.query_clicked[slot], (clicks > 0) & where)
    np.testing.assert_allclose(mem.query_rr, [np.inf if e is None else e[0] for e in slots], rtol=1e-6)
    np.testing.assert_array_equal(
      np.asarray(mem.query_time)[[e is not None for e in slots]], [e[1] for e in slots if e is not None]
    )
    assert int(mem.time) == t + 1
  assert None not in slots  # the test went through the full-queue rules


def test_nsgd_breaks_ties_on_the_difficult_queries_as_a_loop_does():
  """Among several winners, the one that ranks the stored queries' clicked items highest (sum of 1 / rank,
  ties in score to the earlier item, as rax.utils.ranks) wins alone; one winner, or no stored query, leaves
  the outcome as it was."""
  import rax
  from ultr_jax.train import online

  rng = np.random.default_rng(3)
  mem = _empty_memory(tie_queries=3)
  where = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  clicked = (rng.uniform(size=(3, 5)) < 0.4) & where
  mem = mem._replace(
    query_where=jnp.asarray(where),
    query_clicked=jnp.asarray(clicked),
    query_rr=jnp.asarray([0.5, np.inf, 1.0], jnp.float32),
  )  # the second slot is empty
  break_ties = jax.jit(online._nsgd_break_ties)
  rax_ranks = jax.jit(lambda s, w: rax.utils.ranks(s, where=w))
  for trial in range(20):
    scores = rng.integers(0, 3, size=(4, 3, 5)).astype(np.float32)  # many ties
    wins = (rng.uniform(size=4) < 0.6).astype(np.float32)
    got = np.asarray(break_ties(wins, scores, mem))
    ranks = np.asarray(rax_ranks(scores, np.broadcast_to(where, scores.shape)))
    rr = [sum(1.0 / ranks[c, t][clicked[t]].astype(float)).sum() for c in range(4) for t in (0, 2)]
    rr = np.asarray(rr).reshape(4, 2).sum(1)
    want = wins
    if wins.sum() > 1:
      want = np.eye(4, dtype=np.float32)[np.argmax(np.where(wins > 0, rr, -np.inf))]
    np.testing.assert_array_equal(got, want, err_msg=f"trial {trial}")
  empty = _empty_memory(tie_queries=3)
  np.testing.assert_array_equal(break_ties(np.ones(4), np.zeros((4, 3, 5)), empty), np.ones(4))


def test_nsgd_learns_from_perfect_clicks(small_data):
  c = _small_config()
  c.nsgd.learning_rate = 0.1
  out = online_learning("nsgd", small_data.train, small_data.test, click_model="perfect", config=c, seeds=(0, 1, 2))
  assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all()


def test_nsgd_config_errors(small_data):
  c = _small_config()
  c.nsgd.worst = 7  # the linear ranker on 6 features has 7 parameters
  with pytest.raises(
    ValueError, match=r"config.nsgd.worst \(7\) must be below the ranker's number of parameters \(7\)"
  ):
    online_learning("nsgd", small_data.train, small_data.test, click_model="perfect", config=c)
  c = _small_config()
  c.nsgd.history = 2
  with pytest.raises(ValueError, match="need history >= num_candidates"):
    online_learning("nsgd", small_data.train, small_data.test, click_model="perfect", config=c)


def test_a_click_model_config_clicks_on_the_displayed_order_within_the_top_k():
  """eps = 1 makes every item attractive, so the PBM table alone decides: ranks 0 and 2 are always
  examined, rank 1 never, and nothing below the top 3."""
  fn = online_click_model({"name": "pbm_table", "table": (1.0, 0.0, 1.0, 1.0), "eps": 1.0}, top_k=3)
  positions = jnp.array([3, 2, 0, 1])
  clicks = fn(jax.random.key(0), jnp.zeros(4), positions=positions, where=jnp.ones(4, bool))
  np.testing.assert_array_equal(clicks, [0.0, 1.0, 1.0, 0.0])
  with pytest.raises(ValueError, match=r"click_model.top_k \(5\) differs from the learners' top_k \(3\)"):
    online_click_model({"name": "pbm_table", "top_k": 5}, top_k=3)
  with pytest.raises(ValueError, match="'continuation' does not apply to click model 'pbm_table' \\(a key of dcm\\)"):
    online_click_model({"name": "pbm_table", "continuation": 0.5})


@pytest.mark.parametrize("method", ONLINE_METHODS)
def test_a_cascade_config_learns_exactly_as_its_preset(method, small_data):
  """On labels 0 and 4 the perfect user clicks with probability 0 or 1 and never stops; so does a DBN
  config with eps = 0, perseverance 1 and satisfaction 0. Deterministic clicks, the same keys: the two
  runs must be the same run."""
  import dataclasses

  binary = lambda d: dataclasses.replace(d, labels=np.where(d.labels >= 2, 4.0, 0.0).astype(np.float32))
  train, test = binary(small_data.train), binary(small_data.test)
  c = _small_config(num_impressions=200, eval_every=100)
  preset = online_learning(method, train, test, click_model="perfect", config=c, seeds=(0, 1))
  config = online_learning(
    method,
    train,
    test,
    config=c,
    seeds=(0, 1),
    click_model={"name": "dbn", "perseverance": 1.0, "satisfaction": 0.0, "eps": 0.0},
  )
  np.testing.assert_allclose(config["curve"], preset["curve"], atol=1e-6)
  np.testing.assert_allclose(config["online_ndcg@10"], preset["online_ndcg@10"], atol=1e-6)
  assert not np.all(preset["curve"] == preset["curve"][0, 0])  # and it is a run that learns something


def test_pdgd_learns_under_position_bias(small_data):
  c = _small_config()
  out = online_learning(
    "pdgd",
    small_data.train,
    small_data.test,
    click_model=c.click_model_configs.pbm.to_dict(),
    config=c,
    seeds=(0, 1, 2),
  )
  assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all()


def test_positions_by_counting_equal_rax_ranks_with_ties_and_masks():
  from ultr_jax.train.online import _positions_by_counting

  rng = np.random.default_rng(0)
  scores = rng.integers(0, 4, (50, 9)).astype(np.float32)  # many ties
  where = rng.random((50, 9)) < 0.7
  got = np.asarray(_positions_by_counting(jnp.asarray(scores), jnp.asarray(where)))
  want = np.asarray(rax.utils.ranks(jnp.asarray(scores), where=jnp.asarray(where))) - 1
  np.testing.assert_array_equal(np.where(where, got, -1), np.where(where, want, -1))  # ties to the earlier item
  np.testing.assert_array_equal(np.sort(got, axis=-1), np.broadcast_to(np.arange(9), got.shape))  # a permutation
  assert np.all(np.where(where, got, 0) < where.sum(-1, keepdims=True))  # masked items last
  assert np.all(np.where(~where, got, 9) >= where.sum(-1, keepdims=True))


def test_pdgd_on_the_logged_display_shows_the_stored_order_and_learns(small_data):
  """``display="logged"`` shows every impression in the lists' stored order: with one training query the mean
  nDCG@10 of the displayed lists is that order's, whatever the seed, and PDGD's update still learns."""
  c = _small_config()
  c.pdgd.display = "logged"
  one = small_data.train.subset(np.array([3]))
  stored = rax.ndcg_metric(
    -jnp.arange(one.list_size, dtype=jnp.float32), jnp.asarray(one.labels[0]), where=jnp.asarray(one.where[0]), topn=10
  )
  out = online_learning("pdgd", one, small_data.test, click_model="perfect", config=c, seeds=(0, 1))
  np.testing.assert_allclose(out["online_ndcg@10"], float(stored), rtol=1e-6)
  own = online_learning("pdgd", one, small_data.test, click_model="perfect", config=_small_config(), seeds=(0, 1))
  assert not np.allclose(own["online_ndcg@10"], float(stored))  # its own display is another list
  out = online_learning(
    "pdgd",
    small_data.train,
    small_data.test,
    click_model=c.click_model_configs.pbm.to_dict(),
    config=c,
    seeds=(0, 1, 2),
  )
  assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all()
  c.pdgd.display = "random"
  with pytest.raises(ValueError, match="config.pdgd.display: unknown 'random'"):
    online_learning("pdgd", small_data.train, small_data.test, click_model="perfect", config=c)


def test_pdgd_switches_reach_the_online_update(small_data):
  """config.pdgd.{pairs, debias, surrogate} change the update the online PDGD follows (losses.pdgd_loss)."""
  c = _small_config()
  users = c.click_model_configs.pbm.to_dict()
  base = online_learning("pdgd", small_data.train, small_data.test, click_model=users, config=c, seeds=(0, 1))
  for switch in ({"pairs": "all"}, {"debias": False}, {"surrogate": "log_probability"}):
    s = _small_config()
    s.pdgd.update(switch)
    out = online_learning("pdgd", small_data.train, small_data.test, click_model=users, config=s, seeds=(0, 1))
    assert not np.allclose(out["curve"], base["curve"]), switch
    assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all(), switch  # each variant still learns here
  c.pdgd.surrogate = "hinge"
  with pytest.raises(ValueError, match="pdgd: surrogate must be one of"):
    online_learning("pdgd", small_data.train, small_data.test, click_model="perfect", config=c)


def test_pdgd_on_the_model_display_shows_its_own_ranking_unsampled(small_data):
  """``display="model"``: with a frozen ranker (learning rate 0, random init) every impression of one query
  shows that ranker's sorted list, so each seed's online nDCG@10 is its initial ranker's nDCG@10 there."""
  from ultr_jax.models import make_ranker

  c = _small_config(zero_init=False)
  c.pdgd.display, c.pdgd.learning_rate = "model", 0.0
  one = small_data.train.subset(np.array([3]))
  out = online_learning("pdgd", one, small_data.test, click_model="informational", config=c, seeds=(0, 1))
  model = make_ranker("linear")
  x, y, w = (jnp.asarray(a[0]) for a in (one.features, one.labels, one.where))
  for i, seed in enumerate((0, 1)):
    params = model.init(jax.random.split(jax.random.key(seed))[0], x)  # online_learning's initialisation
    want = rax.ndcg_metric(model.apply(params, x), y, where=w, topn=10)
    np.testing.assert_allclose(out["online_ndcg@10"][i], float(want), rtol=1e-6)
  assert out["online_ndcg@10"][0] != out["online_ndcg@10"][1]  # two initial rankers, two lists


def test_the_study_resolves_config_users_and_refuses_unknown_or_shadowing_ones():
  from ultr_jax.studies import online

  c = _small_config(click_models=("perfect", "pbm"))
  assert online._study_users(c) == {"perfect": "perfect", "pbm": {"name": "pbm_table", "eta": 1.0, "eps": 0.1}}
  c.click_models = ("pbm", "nope")
  with pytest.raises(ValueError, match="unknown online click model 'nope'.*click_model_configs"):
    online._study_users(c)
  c.click_models = ("perfect",)
  c.click_model_configs.perfect = {"name": "pbm_table"}
  with pytest.raises(ValueError, match="would shadow"):
    online._study_users(c)


def test_online_config_errors():
  with pytest.raises(ValueError, match="multiple of config.eval_every"):
    online_learning("pdgd", None, None, click_model="perfect", config=_small_config(eval_every=300))
  with pytest.raises(ValueError, match="unknown online method"):
    online_learning("sgd", None, None, click_model="perfect", config=_small_config())
  c = _small_config()
  c.dbgd.multileave = "balanced"
  with pytest.raises(ValueError, match="config.dbgd.multileave: unknown 'balanced'"):
    online_learning("dbgd", None, None, click_model="perfect", config=c)


# ----------------------------------------------------------------------------
# The binary.


def _config(arg):
  spec = importlib.util.spec_from_file_location("online_config", CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def test_default_config_resolves_every_user_and_learner():
  """The study accepts the default config as it is: every user resolves, every learner's spec builds."""
  from ultr_jax.studies import online as online_study  # noqa: PLC0415
  from ultr_jax.train import online  # noqa: PLC0415

  c = _config("")
  users = online_study._study_users(c)
  assert list(users) == list(c.click_models)
  for method in c.methods:
    online._spec(method, c)  # raises on an unknown method or impressions not a multiple of eval_every
  with pytest.raises(ValueError, match="unknown config variant"):
    _config("large")


def _smoke_run(tmp_path, env):
  proc = subprocess.run(
    [
      sys.executable,
      str(ROOT / "experiments" / "online" / "main.py"),
      f"--config={CONFIG}:smoke",
      f"--workdir={tmp_path}",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert sorted(results) == ["click_model=informational", "click_model=perfect", "full_info"]
  assert 0.5 < results["full_info"]["ndcg@10"] <= 1.0
  for name, row in results.items():
    if name == "full_info":
      continue
    assert sorted(row) == sorted(ONLINE_METHODS)
    for entry in row.values():
      assert 0.0 < entry["ndcg@10"] <= 1.0 and 0.0 < entry["online_ndcg@10"] <= 1.0
      assert len(entry["curve"]) == 4 and entry["impressions"] == [0, 100, 200, 300]
    assert "pdgd_minus_dbgd" in row["pdgd"] and "nsgd_minus_mgd" in row["nsgd"]
  assert "| perfect/pdgd |" in (tmp_path / "table.md").read_text() and "| full_info (labels) |" in proc.stderr
  assert "| perfect/pdgd |" in proc.stdout and f"wrote {tmp_path / 'table.md'}" in proc.stdout  # result on stdout
  assert re.search(r"\[online\] 1/\d+ \w+/\w+: ndcg@10 [\d.]+, .*: \d+s, ~\d+s left", proc.stderr)  # progress
  assert re.search(r"\[online\] (\d+)/\1 \w+/\w+: .*, done", proc.stderr)  # the last cell says so
  assert (tmp_path / "table.csv").exists() and (tmp_path / "fig_online.png").stat().st_size > 0
  return results


def test_binary_smoke_run(tmp_path, subprocess_env):
  """The smoke binary at the tests' fast XLA settings (16 s alone, 35 s at XLA's defaults), against every entry of
  the expected file (recorded at XLA's defaults; NSGD's entries, whose trajectory moves with float rounding, with
  tolerances from their spread across seeds: see the file's tolerance_rule)."""
  assert_matches_expected(_smoke_run(tmp_path, subprocess_env), "online_smoke")


@pytest.mark.slow
def test_binary_smoke_run_at_xla_defaults_matches_every_expected_metric(tmp_path, default_xla_env):
  assert_matches_expected(_smoke_run(tmp_path, default_xla_env), "online_smoke")


def test_study_runs_on_letor_files(tmp_path):
  from ultr_jax.data import write_svmlight
  from ultr_jax.studies.online import run_online_study

  splits = make_synthetic(
    num_train=30, num_valid=1, num_test=10, list_size=9, num_features=5, seed=3, min_list_size=4
  )  # ragged lists, as in LETOR files
  write_svmlight(splits.train, tmp_path / "train.txt")
  write_svmlight(splits.test, tmp_path / "test.txt")
  c = _config("smoke")
  c.data.source, c.data.train_path, c.data.test_path = (
    "svmlight",
    str(tmp_path / "train.txt"),
    str(tmp_path / "test.txt"),
  )
  c.data.normalize = "query_minmax"
  c.methods, c.click_models, c.full_info.enabled = ("pdgd",), ("perfect",), False
  results = run_online_study(c, str(tmp_path / "out"))
  entry = results["click_model=perfect"]["pdgd"]
  assert list(results) == ["click_model=perfect"] and 0.0 < entry["ndcg@10"] <= 1.0
  assert entry["curve"][-1] > entry["curve"][0]  # it learns from the file's labels
  c.click_models = ("perfect", "nope")
  with pytest.raises(ValueError, match="unknown online click model 'nope'"):
    run_online_study(c, None)


def test_study_runs_a_config_user_end_to_end(tmp_path):
  from ultr_jax.studies.online import run_online_study

  c = _config("smoke")
  c.click_models, c.methods, c.full_info.enabled = ("pbm",), ("pdgd",), False
  results = run_online_study(c, str(tmp_path))
  entry = results["click_model=pbm"]["pdgd"]
  assert list(results) == ["click_model=pbm"] and entry["curve"][-1] > entry["curve"][0]
  assert "| pbm/pdgd |" in (tmp_path / "table.md").read_text()


def test_config_users_read_the_lists_per_item_extras(small_data):
  """context_pbm reads each item's context and SIF's position+trust users its logging score; both come
  from the training lists' extras, and a list without them is refused by name before any run."""
  from ultr_jax.train import online_users_missing

  train = small_data.train
  rng = np.random.default_rng(0)
  ctx_users = {"name": "context_pbm", "num_contexts": 3}
  assert online_users_missing(ctx_users, train, top_k=5) == "click_fn: context_pbm needs batch['context']"
  train = train.with_extras(
    context=rng.integers(0, 3, train.where.shape).astype(np.int32),
    logging_score=rng.normal(size=train.where.shape).astype(np.float32),
  )
  assert online_users_missing(ctx_users, train, top_k=5) is None
  c = _small_config()
  for users in (ctx_users, {"name": "position_trust", "alpha": 0.6, "delta": 0.3, "gamma": 1.0}):
    out = online_learning("pdgd", train, small_data.test, click_model=users, config=c, seeds=(0, 1))
    assert (out["curve"][:, -1] > out["curve"][:, 0] + 0.1).all(), users["name"]


def test_a_registered_learner_runs_through_the_registry(small_data):
  """A learner registered under a new name (PDGD's parse and step) runs as PDGD does: no name is branched on."""
  from ultr_jax.train import online  # noqa: PLC0415

  pdgd = online.ONLINE_LEARNERS["pdgd"]
  online.register_online_learner("pdgd_copy", defaults=pdgd.defaults, make_step=pdgd.make_step)(
    lambda section: pdgd.parse(section)
  )
  try:
    with pytest.raises(ValueError, match="already registered"):
      online.register_online_learner("pdgd_copy", defaults={}, make_step=pdgd.make_step)(pdgd.parse)
    c = _small_config(num_impressions=200, eval_every=100)
    assert c.pdgd_copy == c.pdgd  # the study's config holds every registered learner's section
    kwargs = dict(click_model="perfect", config=c, seeds=(0, 1))
    copy = online_learning("pdgd_copy", small_data.train, small_data.test, **kwargs)
    base = online_learning("pdgd", small_data.train, small_data.test, **kwargs)
    np.testing.assert_array_equal(copy["curve"], base["curve"])
  finally:
    del online.ONLINE_LEARNERS["pdgd_copy"]
