"""Off-policy evaluation (ultr_jax.evaluation): NumPy references, unbiasedness against the exact truth, interval
coverage, invariants and bad input.

Every estimator case is drawn from the registry (``evaluation.ESTIMATORS``) with its declared inputs.
"""

import functools
import itertools
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ultr_jax import evaluation as ev

L = 4


# ----------------------------------------------------------------------------
# NumPy references.


def np_pl_rankings(scores, where, temperature, k):
  """Every top-k prefix of one list with its Plackett-Luce probability (brute force, Python loops)."""
  valid = [j for j in range(len(scores)) if where[j]]
  out = []
  for perm in itertools.permutations(valid, min(k, len(valid))):
    logp, rest = 0.0, list(valid)
    for item in perm:
      z = np.array([scores[j] / temperature for j in rest])
      logp += scores[item] / temperature - (z.max() + np.log(np.sum(np.exp(z - z.max()))))
      rest.remove(item)
    out.append((perm, np.exp(logp)))
  return out


def np_propensities(scores, where, temperature, k):
  """(prefix, item_position, matrix, pairs) of the display order of one list."""
  size = len(scores)
  n_valid = int(np.sum(where))
  mat = np.zeros((size, size))
  pairs = np.zeros((size * size, size * size))
  for perm, p in np_pl_rankings(scores, where, temperature, k):
    ind = np.zeros((size, size))
    ind[list(perm), np.arange(len(perm))] = 1.0
    mat += p * ind
    pairs += p * np.outer(ind.ravel(), ind.ravel())
  prefix = np.ones(size)
  z = scores[:n_valid] / temperature
  for l in range(n_valid):  # a product of softmaxes
    prefix[l] = np.prod([np.exp(z[t] - z[t:].max()) / np.sum(np.exp(z[t:] - z[t:].max())) for t in range(l + 1)])
  item_position = np.array([mat[j, j] if (where[j] and j < k) else 1.0 for j in range(size)])
  return prefix, item_position, mat, pairs


def np_estimate(r, rho, active, self_normalize):
  """OBP's formulas over the flattened slots: the sum of rho * r over the sessions; self-normalised, each slot's
  rho divided by its mean over the rows that have the slot."""
  n = np.sum(np.any(active, axis=1))
  if not self_normalize:
    return np.sum(np.where(active, rho * r, 0.0)) / n
  total = 0.0
  for l in range(r.shape[1]):
    a = active[:, l]
    if a.any() and np.mean(rho[a, l]) > 0:
      total += np.sum(rho[a, l] * r[a, l] / np.mean(rho[a, l])) / n
  return total


def np_cascade_probs(a):
  """Marginal click probabilities of a cascade over attractions in display order."""
  out, survive = [], 1.0
  for x in a:
    out.append(survive * x)
    survive *= 1.0 - x
  return np.array(out)


def np_pbm_probs(a, exam):
  return np.asarray(a) * np.asarray(exam)[: len(a)]


# ----------------------------------------------------------------------------
# A small log.


def _small_log(seed=0, batch=5, masked=True):
  rng = np.random.default_rng(seed)
  logging_scores = rng.normal(size=(batch, L)).astype(np.float32)
  scores = rng.normal(size=(batch, L)).astype(np.float32)
  clicks = (rng.uniform(size=(batch, L)) < 0.4).astype(np.float32)
  where = np.ones((batch, L), bool)
  if masked:
    where[1, 3:] = False
    where[3, 2:] = False
  clicks = np.where(where, clicks, 0.0).astype(np.float32)
  doc_ids = rng.integers(0, 6, size=(batch, L))
  attraction = rng.uniform(0.1, 0.9, size=6).astype(np.float32)
  return dict(
    logging_scores=logging_scores, scores=scores, clicks=clicks, where=where, doc_ids=doc_ids, attraction=attraction
  )


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (0.7, 2), (0.0, None), (0.0, 3)])
def test_propensities_match_brute_force(temperature, top_k):
  log = _small_log()
  p = ev.plackett_luce_propensities(
    log["scores"], where=log["where"], temperature=temperature, top_k=top_k, matrix=True, pairs=True
  )
  k = L if top_k is None else top_k
  for i in range(log["scores"].shape[0]):
    s, w = log["scores"][i], log["where"][i]
    tau = temperature or 1e-3  # the deterministic ranking: a PL at a tiny temperature
    prefix, item_position, mat, pairs = np_propensities(s.astype(np.float64), w, tau, k)
    n = int(w.sum())
    np.testing.assert_allclose(p.prefix[i, :n], prefix[:n], atol=1e-5)
    np.testing.assert_allclose(p.ranking[i], prefix[min(k, n) - 1], atol=1e-5)
    np.testing.assert_allclose(p.item_position[i], item_position, atol=1e-5)
    np.testing.assert_allclose(p.matrix[i], mat, atol=1e-5)
    np.testing.assert_allclose(p.pairs[i], pairs, atol=1e-5)


def test_prefix_probability_is_the_simulation_plackett_luce_log_prob():
  from ultr_jax.simulation import plackett_luce_log_prob

  log = _small_log(masked=False)
  p = ev.plackett_luce_propensities(log["logging_scores"], temperature=1.0)
  ranks = jnp.broadcast_to(jnp.arange(L), (5, L))
  np.testing.assert_allclose(p.ranking, jnp.exp(plackett_luce_log_prob(log["logging_scores"], ranks)), rtol=1e-5)


def test_sampled_marginals_are_within_their_standard_error_of_the_exact_ones():
  log = _small_log()
  exact = ev.plackett_luce_propensities(log["scores"], where=log["where"], temperature=1.0, matrix=True)
  sampled = ev.plackett_luce_propensities(
    log["scores"], where=log["where"], temperature=1.0, key=jax.random.key(1), num_samples=4000, max_enumeration=1
  )
  err = np.abs(sampled.item_position - exact.item_position)
  se = np.asarray(sampled.item_position_stderr)
  assert np.all(err <= 4 * se + 1e-6), (err, se)
  assert np.all(se[log["where"]] > 0)


# ----------------------------------------------------------------------------
# Each estimator against its NumPy reference.


def _inputs(log, temperature=0.0, top_k=None):
  logging = ev.plackett_luce_propensities(
    log["logging_scores"], where=log["where"], temperature=1.0, top_k=top_k, pairs=True
  )
  return logging


def _targets(log, temperature, top_k):
  return ev.plackett_luce_propensities(
    log["scores"], where=log["where"], temperature=temperature, top_k=top_k, matrix=True
  )


@pytest.mark.parametrize("name", ["sips", "snsips", "iips", "sniips", "rips", "snrips"])
@pytest.mark.parametrize("temperature,top_k,weights", [(0.0, None, None), (1.0, 3, "dcg"), (0.5, None, None)])
def test_ips_estimators_match_numpy(name, temperature, top_k, weights):
  log = _small_log()
  logging = _inputs(log, top_k=top_k)
  target = _targets(log, temperature, top_k)
  w = None if weights is None else np.asarray(ev.dcg_weights(L))
  spec = ev.get_estimator(name)
  est = spec.fn(
    log["scores"], log["clicks"], logging=logging, where=log["where"], weights=w, top_k=top_k, temperature=temperature
  )
  k = L if top_k is None else top_k
  active = log["where"] & (np.arange(L) < k)
  r = np.where(active, log["clicks"] * (1.0 if w is None else w), 0.0)
  field = {"sips": "ranking", "iips": "item_position", "rips": "prefix"}[name.removeprefix("sn")]
  rho = np.asarray(getattr(target, field)) / np.asarray(getattr(logging, field))
  rho = np.broadcast_to(rho[:, None], r.shape) if rho.ndim == 1 else rho
  np.testing.assert_allclose(est.value, np_estimate(r, rho, active, spec.self_normalize), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.mean(est.terms), est.value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("self_normalize", [False, True])
def test_pseudo_inverse_matches_numpy(self_normalize):
  log = _small_log()
  logging = _inputs(log)
  target = _targets(log, 1.0, None)
  est = ev.pseudo_inverse(
    log["scores"], log["clicks"], logging=logging, where=log["where"], temperature=1.0, self_normalize=self_normalize
  )
  theta, r = [], []
  for i in range(5):
    ind = np.diag(log["where"][i].astype(float)).ravel()
    theta.append(np.asarray(target.matrix[i]).ravel() @ np.linalg.pinv(np.asarray(logging.pairs[i], np.float64)) @ ind)
    r.append(np.sum(log["clicks"][i]))
  theta, r = np.array(theta), np.array(r)
  expected = np.sum(theta * r) / np.sum(theta) if self_normalize else np.mean(theta * r)
  np.testing.assert_allclose(est.value, expected, rtol=1e-3, atol=1e-4)


def test_pseudo_inverse_weights_every_session_by_one_when_the_target_is_the_logger():
  # q = E[1_s] = Gamma u with u = 1/K everywhere, so theta_i = u^T 1_s = 1 (Swaminathan et al., NeurIPS'17).
  log = _small_log()
  logging = _inputs(log)
  pi = ev.pseudo_inverse(log["logging_scores"], log["clicks"], logging=logging, where=log["where"], temperature=1.0)
  np.testing.assert_allclose(pi.terms, np.sum(log["clicks"], axis=-1), rtol=1e-3, atol=1e-4)


def _pbm_params(log):
  return {"attraction": jnp.asarray(log["attraction"]), "examination": jnp.array([1.0, 0.6, 0.4, 0.3])}


@pytest.mark.parametrize("temperature", [0.0])
def test_direct_and_doubly_robust_match_numpy(temperature):
  log = _small_log()
  params = _pbm_params(log)
  logging = _inputs(log)
  target = _targets(log, temperature, None)
  kw = dict(logging=logging, doc_ids=log["doc_ids"], model="pbm", params=params, where=log["where"])
  dm = ev.direct_method(
    log["scores"], log["clicks"], doc_ids=log["doc_ids"], model="pbm", params=params, where=log["where"]
  )
  dr = ev.ESTIMATORS["dr"].fn(log["scores"], log["clicks"], **kw)
  sdr = ev.ESTIMATORS["sdr"].fn(log["scores"], log["clicks"], **kw)
  exam = np.asarray(params["examination"])
  dm_ref, dr_ref, sdr_ref = [], [], []
  for i in range(5):
    w = log["where"][i]
    n = int(w.sum())
    order = np.argsort(-np.where(w, log["scores"][i], -np.inf), kind="stable")[:n]
    a = log["attraction"][log["doc_ids"][i]]
    v = np.sum(np_pbm_probs(a[order], exam))
    q_logged = np_pbm_probs(a[:n], exam)
    res = log["clicks"][i, :n] - q_logged
    dm_ref.append(v)
    dr_ref.append(v + np.sum(np.asarray(target.item_position[i, :n]) / np.asarray(logging.item_position[i, :n]) * res))
    sdr_ref.append(v + float(target.ranking[i] / logging.ranking[i]) * np.sum(res))
  np.testing.assert_allclose(dm.value, np.mean(dm_ref), rtol=1e-5)
  np.testing.assert_allclose(dr.value, np.mean(dr_ref), rtol=1e-5)
  np.testing.assert_allclose(sdr.value, np.mean(sdr_ref), rtol=1e-5)


@pytest.mark.parametrize("model", __import__("ultr_jax.simulation", fromlist=["x"]).FITTABLE_CLICK_MODELS)
def test_the_direct_method_reads_any_fittable_model_through_its_marginals(model):
  from ultr_jax.simulation import click_model_predict, get_click_model, init_click_model

  log = _small_log()
  logits = init_click_model(model, num_docs=6, list_size=L)
  keys = jax.random.split(jax.random.key(0), len(logits))
  logits = {k: v + jax.random.normal(kk, v.shape) for kk, (k, v) in zip(keys, sorted(logits.items()))}
  params = get_click_model(model).to_probabilities(logits)
  w = np.asarray(ev.dcg_weights(L))
  dm = jax.jit(functools.partial(ev.direct_method, model=model))(
    log["scores"], log["clicks"], doc_ids=log["doc_ids"], params=params, where=log["where"], weights=w
  )
  order = np.argsort(-np.where(log["where"], log["scores"], -np.inf), axis=-1, kind="stable")  # the target's
  ids = np.take_along_axis(log["doc_ids"], order, -1)
  marginal = click_model_predict(model, params, ids, np.zeros(ids.shape), where=log["where"])["marginal"]
  np.testing.assert_allclose(dm.value, np.mean(np.sum(np.asarray(marginal) * w, -1)), rtol=1e-5)


def np_cascade_dr(log, params, logging, target_scores, temperature, weights):
  """Kiyohara et al.'s cascade-DR with a cascade Q function, by loops (OBP's formula)."""
  att = np.asarray(params["attraction"])
  total = []
  for i in range(log["clicks"].shape[0]):
    w = log["where"][i]
    n = int(w.sum())
    s = target_scores[i, :n].astype(np.float64)
    a = att[log["doc_ids"][i, :n]]

    def q_of(prefix, item):
      rest = [j for j in np.argsort(-s, kind="stable") if j not in prefix and j != item]
      ranking = list(prefix) + [item] + rest
      p = np_cascade_probs(a[ranking])
      return np.sum((p * weights[:n])[len(prefix) :])

    def next_dist(prefix):
      rest = [j for j in range(n) if j not in prefix]
      if temperature == 0:
        best = min(rest, key=lambda j: (-s[j], j))
        return {j: float(j == best) for j in rest}
      z = np.array([s[j] / temperature for j in rest])
      e = np.exp(z - z.max())
      return dict(zip(rest, e / e.sum()))

    pe_prefix = np.asarray(
      ev.plackett_luce_propensities(target_scores[i : i + 1], where=w[None], temperature=temperature).prefix[0]
    )
    rho = pe_prefix[:n] / np.asarray(logging.prefix[i, :n])
    v, rho_prev = 0.0, 1.0
    for l in range(n):
      prefix = list(range(l))
      q_exp = sum(p * q_of(prefix, j) for j, p in next_dist(prefix).items())
      v += rho[l] * (weights[l] * log["clicks"][i, l] - q_of(prefix, l)) + rho_prev * q_exp
      rho_prev = rho[l]
    total.append(v)
  return np.mean(total)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_cascade_doubly_robust_matches_numpy(temperature):
  log = _small_log()
  params = {"attraction": jnp.asarray(log["attraction"])}
  logging = _inputs(log)
  w = np.asarray(ev.dcg_weights(L))
  est = ev.cascade_doubly_robust(
    log["scores"],
    log["clicks"],
    logging=logging,
    doc_ids=log["doc_ids"],
    model="cascade",
    params=params,
    where=log["where"],
    weights=w,
    temperature=temperature,
    key=jax.random.key(0),
    num_samples=1 if temperature == 0 else 1000,
  )
  expected = np_cascade_dr(log, params, logging, log["scores"], temperature, w)
  if temperature == 0:
    np.testing.assert_allclose(est.value, expected, rtol=1e-5)
  else:  # the target's completions below each prefix are sampled; the next-item distribution is exact
    np.testing.assert_allclose(est.value, expected, rtol=0.05)


@pytest.mark.parametrize("size", [5, 20])  # counted comparisons (short lists) and sorts (long ones)
def test_model_click_ranks_equal_stable_argsort(size):
  from ultr_jax.evaluation import direct

  rng = np.random.default_rng(0)
  key = rng.integers(0, 4, (50, 3, size)).astype(np.int32)  # many ties
  key[:, 0, 1::2] = np.iinfo(np.int32).max  # masked items' sentinel
  expected = np.argsort(np.argsort(key, axis=-1, kind="stable"), axis=-1, kind="stable")
  ranks = direct._stable_ranks(jnp.asarray(key))
  np.testing.assert_array_equal(ranks, expected)
  np.testing.assert_array_equal(direct._inverse_permutation(ranks), np.argsort(key, axis=-1, kind="stable"))


def test_click_dcg_matches_numpy():
  log = _small_log()
  prop = np.broadcast_to(np.array([1.0, 0.5, 0.3, 0.2], np.float32), (5, L))
  for normalize, top_k in [(False, None), (True, 2)]:
    est = ev.click_dcg(
      log["scores"], log["clicks"], propensities=prop, where=log["where"], normalize=normalize, top_k=top_k
    )
    vals = []
    for i in range(5):
      w = log["where"][i]
      gain = np.where(w, log["clicks"][i] / prop[i], 0.0)
      order = np.argsort(-np.where(w, log["scores"][i], -np.inf), kind="stable")
      lam = 1.0 / np.log2(np.arange(L) + 2.0)
      if top_k is not None:
        lam[top_k:] = 0.0
      dcg = np.sum(gain[order] * lam)
      ideal = np.sum(np.sort(gain)[::-1] * lam)
      vals.append((dcg / ideal if ideal > 0 else 0.0) if normalize else dcg)
    np.testing.assert_allclose(est.value, np.mean(vals), rtol=1e-5)


# ----------------------------------------------------------------------------
# Unbiasedness on simulated logs against the exact truth.

ATTRACTION = np.array([0.2, 0.9, 0.5, 0.7], np.float32)
LOGGING_SCORES = np.array([0.5, 0.0, 0.3, -0.2], np.float32)
TARGET_SCORES = np.array([0.0, 1.0, 0.2, 0.6], np.float32)  # the target ranks 1, 3, 2, 0
PBM_EXAM = np.array([1.0, 0.5, 1 / 3, 0.25], np.float32)


PERMS = np.array(list(itertools.permutations(range(L))), np.int32)  # the 24 displays: item at each position


@functools.cache
def _display_propensities(temperature):
  """The logging policy's and the target's propensities of each of the 24 displays, computed once."""
  with jax.ensure_compile_time_eval():  # concrete even when first asked for inside a trace
    logging = jax.jit(functools.partial(ev.plackett_luce_propensities, temperature=1.0, pairs=True))(
      LOGGING_SCORES[PERMS]
    )
    target = jax.jit(functools.partial(ev.plackett_luce_propensities, temperature=temperature, matrix=True))(
      TARGET_SCORES[PERMS]
    )
    return jax.tree.map(np.asarray, (logging, target))


def _simulate(key, model, num_sessions, temperature=0.0):
  """One log: sessions of one query, each displayed by a Plackett-Luce sample of the logging scores; with the
  policies' propensities of each session's display (gathered from the 24 displays')."""
  from ultr_jax.simulation import get_click_model

  k_rank, k_click = jax.random.split(key)
  g = jax.random.gumbel(k_rank, (num_sessions, L))
  order = jnp.argsort(-(LOGGING_SCORES + g), axis=-1)  # item at each position
  clicks = get_click_model(model).session(jnp.asarray(ATTRACTION)[order]).sample(k_click)
  index = jnp.argmax(jnp.all(order[:, None, :] == PERMS[None], axis=-1), axis=-1)
  logging, target = jax.tree.map(lambda x: jnp.asarray(x)[index], _display_propensities(temperature))
  log = dict(scores=jnp.asarray(TARGET_SCORES)[order], logging_scores=jnp.asarray(LOGGING_SCORES)[order], doc_ids=order)
  return log, clicks, logging, target


def _estimates(model, names, params, num_logs, num_sessions, temperature=0.0):
  @jax.jit
  def one(key):
    log, clicks, logging, target = _simulate(key, model, num_sessions, temperature)
    inputs = dict(logging=logging, doc_ids=log["doc_ids"], model=model, params=params)
    out = []
    for name in names:
      spec = ev.get_estimator(name)
      kw = {k: inputs[k] for k in spec.inputs}
      extra = {"target": target} if "logging" in spec.inputs else {}
      out.append(spec.fn(log["scores"], clicks, temperature=temperature, **kw, **extra).value)
    return jnp.stack(out)

  return np.asarray(jax.lax.map(one, jax.random.split(jax.random.key(7), num_logs)))


def _truth(model, temperature=0.0):
  return float(ev.true_value(model, ATTRACTION[None], TARGET_SCORES[None], temperature=temperature).value)


@pytest.mark.parametrize(
  "model,names,temperature",
  [
    ("pbm", ("sips", "iips", "rips", "pi", "dr", "sdr"), 0.0),
    ("pbm", ("sips", "iips", "rips", "pi"), 0.5),
    ("cascade", ("sips", "rips", "cascade_dr", "sdr"), 0.0),
  ],
)
def test_estimators_are_unbiased_where_their_assumption_holds(model, names, temperature):
  # The click model in the DR estimators is deliberately wrong (all attractions 0.5): they stay unbiased.
  params = {"attraction": jnp.full(L, 0.5)}
  if model == "pbm":
    params["examination"] = jnp.array([1.0, 0.7, 0.5, 0.4])
  values = _estimates(model, names, params, num_logs=64, num_sessions=500, temperature=temperature)
  truth = _truth(model, temperature)
  mean = values.mean(axis=0)
  se = values.std(axis=0, ddof=1) / np.sqrt(values.shape[0])
  for name, m, s in zip(names, mean, se):
    assert abs(m - truth) <= 3 * s + 1e-4, (name, m, truth, s)


def test_independent_ips_is_biased_under_the_cascade():
  values = _estimates("cascade", ("iips",), {}, num_logs=32, num_sessions=500)
  se = values.std(ddof=1) / np.sqrt(values.shape[0])
  assert abs(values.mean() - _truth("cascade")) > 5 * se


def test_the_direct_method_with_the_true_model_is_the_truth():
  for model, params in [
    ("pbm", {"attraction": ATTRACTION, "examination": PBM_EXAM}),
    ("cascade", {"attraction": ATTRACTION}),
  ]:
    log, clicks, _, _ = _simulate(jax.random.key(0), model, 8)
    dm = jax.jit(functools.partial(ev.direct_method, model=model))(
      log["scores"], clicks, doc_ids=log["doc_ids"], params=params
    )
    np.testing.assert_allclose(dm.value, _truth(model), rtol=1e-5)


def test_a_plackett_luce_target_truth_by_enumeration_and_by_sampling():
  exact = ev.true_value("pbm", ATTRACTION[None], TARGET_SCORES[None], temperature=0.5)
  sampled = ev.true_value(
    "pbm",
    ATTRACTION[None],
    TARGET_SCORES[None],
    temperature=0.5,
    key=jax.random.key(0),
    num_samples=20_000,
    max_enumeration=1,
  )
  assert exact.stderr == 0 and sampled.stderr > 0
  assert abs(float(exact.value - sampled.value)) <= 4 * float(sampled.stderr)
  ref = 0.0  # the brute-force expectation over the 24 rankings
  for perm, p in np_pl_rankings(TARGET_SCORES.astype(np.float64), np.ones(L, bool), 0.5, L):
    ref += p * np.sum(np_pbm_probs(ATTRACTION[list(perm)], PBM_EXAM))
  np.testing.assert_allclose(exact.value, ref, rtol=1e-5)


# ----------------------------------------------------------------------------
# Intervals.


@pytest.mark.parametrize("name,resampling", [("iips", "poisson"), ("sniips", "poisson"), ("sniips", "multinomial")])
def test_normal_and_bootstrap_intervals_reach_nominal_coverage(name, resampling):
  num_logs, num_sessions = 200, 300
  truth = _truth("pbm")
  spec = ev.get_estimator(name)

  @jax.jit
  def one(key):
    k_log, k_boot = jax.random.split(key)
    log, clicks, logging, target = _simulate(k_log, "pbm", num_sessions)
    fn = lambda sw: spec.fn(log["scores"], clicks, logging=logging, target=target, session_weights=sw)  # noqa: E731
    normal = ev.normal_interval(fn(None))
    boot = ev.bootstrap_interval(fn, k_boot, num_replicates=200, resampling=resampling)
    return jnp.stack([(normal.lower <= truth) & (truth <= normal.upper), (boot.lower <= truth) & (truth <= boot.upper)])

  covered = np.asarray(jax.lax.map(one, jax.random.split(jax.random.key(3), num_logs)))
  coverage = covered.mean(axis=0)
  mc = 3 * np.sqrt(0.95 * 0.05 / num_logs)
  assert np.all(np.abs(coverage - 0.95) <= mc), coverage


def test_paired_difference_of_a_ranker_with_itself_is_exactly_zero_and_agrees_with_the_normal_one():
  log, clicks, logging, target = _simulate(jax.random.key(0), "pbm", 400)
  greedy = ev.plackett_luce_propensities(log["logging_scores"], temperature=0.0)

  def fa(sw):
    return ev.independent_ips(log["scores"], clicks, logging=logging, target=target, session_weights=sw)

  def fb(sw):
    return ev.independent_ips(log["logging_scores"], clicks, logging=logging, target=greedy, session_weights=sw)

  @jax.jit
  def run(k1, k2):
    same = ev.paired_bootstrap_interval(fa, fa, k1, num_replicates=50)
    boot = ev.paired_bootstrap_interval(fa, fb, k2, num_replicates=400)
    diff = ev.normal_interval(ev.difference(fa(None), fb(None)))
    return same, boot, diff, fa(None).value - fb(None).value

  same, boot, diff, plain = run(jax.random.key(1), jax.random.key(2))
  assert float(same.lower) == float(same.upper) == 0.0
  np.testing.assert_allclose(diff.value, plain, rtol=1e-6)
  assert boot.lower < diff.value < boot.upper
  np.testing.assert_allclose(boot.stderr, diff.stderr, rtol=0.25)


def test_bootstrap_resamples_the_valid_sessions_only():
  log = _small_log()
  logging = _inputs(log)
  fn = lambda sw: ev.independent_ips(
    log["scores"], log["clicks"], logging=logging, where=log["where"], session_weights=sw
  )  # noqa: E731
  where = log["where"].copy()
  where[2] = False
  fn2 = lambda sw: ev.independent_ips(log["scores"], log["clicks"], logging=logging, where=where, session_weights=sw)  # noqa: E731
  assert float(fn2(None).num_sessions) == 4.0
  ci = ev.bootstrap_interval(fn2, jax.random.key(0), num_replicates=100)
  assert np.isfinite([ci.lower, ci.upper]).all()
  assert float(fn(None).num_sessions) == 5.0


def _np_lowbias32(x):
  x = x ^ (x >> np.uint32(16))
  x = x * np.uint32(0x7FEB352D)
  x = x ^ (x >> np.uint32(15))
  x = x * np.uint32(0x846CA68B)
  return x ^ (x >> np.uint32(16))


def test_poisson_bootstrap_weights_match_a_numpy_reference_and_are_poisson_one():
  from ultr_jax.evaluation import intervals

  seeds = intervals._draws(jax.random.key(0), 4, "poisson")
  n = 200_000
  w = np.asarray(intervals._poisson_weights(seeds, jnp.uint32(0), n))
  s = np.asarray(seeds)
  with np.errstate(over="ignore"):
    u = _np_lowbias32(_np_lowbias32(np.arange(n, dtype=np.uint32)[None] ^ s[:, :1]) ^ s[:, 1:])
  cdf = np.cumsum([np.exp(-1.0) / np.prod(np.arange(1, k + 1)) for k in range(20)])
  np.testing.assert_array_equal(w, np.searchsorted(cdf * 2.0**32, u.astype(np.float64), side="right"))
  # The same weights whatever block they are computed in.
  np.testing.assert_array_equal(w[:, 1000:1100], intervals._poisson_weights(seeds, jnp.uint32(1000), 100))
  pmf = np.exp(-1.0) / np.array([1, 1, 2, 6, 24])
  freq = np.array([np.mean(w == k) for k in range(5)])
  assert np.all(np.abs(freq - pmf) <= 4 * np.sqrt(pmf * (1 - pmf) / w.size)), freq
  corr = np.corrcoef(np.concatenate([w[:, 1:], w[:, :-1]]).reshape(8, -1))
  assert np.all(np.abs(corr - np.eye(8)) < 5 / np.sqrt(n)), corr  # neighbours and replicates uncorrelated


def test_multinomial_bootstrap_counts_draw_n_among_the_valid_sessions():
  from ultr_jax.evaluation import intervals

  valid = jnp.array([True, False, True, True, False, True])
  keys = intervals._draws(jax.random.key(0), 4000, "multinomial")
  counts = np.asarray(jax.vmap(intervals._multinomial_counts, (0, None))(keys, valid))
  assert np.all(counts.sum(axis=1) == 4) and np.all(counts[:, ~np.asarray(valid)] == 0)
  np.testing.assert_allclose(counts[:, np.asarray(valid)].mean(axis=0), 1.0, atol=0.06)
  np.testing.assert_allclose(counts[:, np.asarray(valid)].var(axis=0), 0.75, atol=0.08)  # n p (1 - p)


def _resampled_log():
  log = _small_log()
  log["where"][2] = False  # an all-masked session: never resampled
  log["clicks"] = np.where(log["where"], log["clicks"], 0.0).astype(np.float32)
  return log


@pytest.mark.parametrize(
  "name", [n for n, s in ev.ESTIMATORS.items() if s.self_normalize] + ["iips", "dr", "click_dcg"]
)
def test_bootstrap_replicates_equal_the_estimator_rerun_with_their_session_weights(name):
  """Resampling the terms (or the ratios, self-normalised) is the estimator re-run on the reweighted log."""
  from ultr_jax.evaluation import intervals

  spec = ev.get_estimator(name)
  log = _resampled_log()
  inputs = {k: v for k, v in _registry_inputs(log, jax.random.key(5)).items() if k in spec.inputs}
  if "model" in spec.inputs:
    inputs["key"] = jax.random.key(5)
  temperature = {} if name == "click_dcg" else {"temperature": 0.7}
  estimator = functools.partial(spec.fn, log["scores"], log["clicks"], where=log["where"], **temperature, **inputs)
  fn = lambda sw: estimator(session_weights=sw)  # noqa: E731

  @jax.jit
  def check(key):
    base = fn(None)
    valid = jnp.asarray(base.session_weights) > 0
    poisson = intervals._poisson_weights(intervals._draws(key, 5, "poisson"), jnp.uint32(0), 5) * valid
    counts = jax.vmap(intervals._multinomial_counts, (0, None))(intervals._draws(key, 5, "multinomial"), valid)
    rerun = jax.vmap(lambda w: fn(w).value)(jnp.concatenate([poisson, counts]))
    fast = [intervals._replicates(base, key, 5, r, chunk_size=2) for r in ("poisson", "multinomial")]
    return jnp.concatenate(fast), rerun

  fast, rerun = check(jax.random.key(1))
  np.testing.assert_allclose(fast, rerun, rtol=2e-5, atol=1e-6)


def test_bootstrap_replicates_do_not_depend_on_the_chunk_size_and_paired_ones_are_differences():
  from ultr_jax.evaluation import intervals

  log = _resampled_log()
  logging = _inputs(log)
  fa = functools.partial(ev.independent_ips, log["scores"], log["clicks"], logging=logging, where=log["where"])
  fb = functools.partial(
    ev.standard_ips, log["logging_scores"], log["clicks"], logging=logging, where=log["where"], self_normalize=True
  )
  a, b = fa(session_weights=None), fb(session_weights=None)

  @functools.partial(jax.jit, static_argnums=0)
  def replicates(resampling, key):
    chunks = [intervals._replicates(b, key, 7, resampling, c) for c in (1, 3, 64)]
    diff = intervals._replicates(ev.difference(a, b), key, 7, resampling, 4)
    return chunks, diff, intervals._replicates(a, key, 7, resampling, 4)

  for resampling in ("poisson", "multinomial"):
    (one, three, all_), diff, rep_a = replicates(resampling, jax.random.key(0))
    np.testing.assert_allclose(three, one, rtol=1e-6)
    np.testing.assert_allclose(all_, one, rtol=1e-6)
    np.testing.assert_allclose(diff, rep_a - one, atol=1e-6)
  with pytest.raises(ValueError, match="resampling"):
    ev.bootstrap_interval(a, jax.random.key(0), resampling="bayesian")


# ----------------------------------------------------------------------------
# Invariants over the registry.


def _registry_inputs(log, key=None):
  logging = _inputs(log)
  return dict(
    logging=logging,
    doc_ids=log["doc_ids"],
    model="pbm",
    params=_pbm_params(log),
    propensities=np.where(log["where"], 0.5, 1.0).astype(np.float32),
    key=key,
  )


@pytest.mark.parametrize("name", list(ev.ESTIMATORS))
def test_every_registered_estimator_runs_through_evaluate_vmap_equals_a_loop_and_all_masked_is_finite(name):
  spec = ev.get_estimator(name)
  logs = [_small_log(seed) for seed in range(3)]
  per = [{k: v for k, v in _registry_inputs(lg).items() if k in spec.inputs and k != "model"} for lg in logs]
  static = {"model": "pbm"} if "model" in spec.inputs else {}
  checked = ev.evaluate(name, logs[0]["scores"], logs[0]["clicks"], where=logs[0]["where"], **per[0], **static)

  @jax.jit
  def one(s, c, w, kw):
    return spec.fn(s, c, where=w, **kw, **static)

  loop = [one(lg["scores"], lg["clicks"], lg["where"], kw).value for lg, kw in zip(logs, per)]
  np.testing.assert_allclose(checked.value, loop[0], rtol=1e-6)
  stack = lambda *x: jnp.stack([jnp.asarray(a) for a in x])  # noqa: E731
  batch = [stack(*[lg[k] for lg in logs]) for k in ("scores", "clicks", "where")]
  vm = jax.vmap(one)(*batch, jax.tree.map(stack, *per))
  np.testing.assert_allclose(vm.value, loop, rtol=1e-5, atol=1e-6)
  # one all-masked session contributes 0 and is left out; an all-masked log is 0, not NaN
  where = logs[0]["where"].copy()
  where[0] = False
  est = one(logs[0]["scores"], logs[0]["clicks"], where, per[0])
  assert np.isfinite(est.value) and np.all(np.isfinite(est.terms)) and float(est.terms[0]) == 0.0
  assert float(est.num_sessions) == 4.0
  none = one(logs[0]["scores"], logs[0]["clicks"], np.zeros_like(where), per[0])
  assert float(none.value) == 0.0 and np.all(np.asarray(none.terms) == 0.0)


@pytest.mark.parametrize("name", ["sips", "iips", "rips", "cascade_dr"])
def test_a_masked_tail_equals_the_truncated_list(name):
  spec = ev.get_estimator(name)
  log = _small_log(masked=False)
  logging_full = ev.plackett_luce_propensities(log["logging_scores"][:, :3], temperature=1.0)
  kw = dict(doc_ids=log["doc_ids"], model="pbm", params=_pbm_params(log))
  cut = {k: v[:, :3] if k == "doc_ids" else v for k, v in kw.items()}
  short = spec.fn(
    log["scores"][:, :3],
    log["clicks"][:, :3],
    logging=logging_full,
    **{k: cut[k] for k in spec.inputs if k != "logging"},
  )
  where = np.arange(L) < 3
  padded = ev.plackett_luce_propensities(log["logging_scores"], where=np.broadcast_to(where, (5, L)), temperature=1.0)
  long = spec.fn(
    log["scores"],
    log["clicks"],
    logging=padded,
    where=np.broadcast_to(where, (5, L)),
    **{k: kw[k] for k in spec.inputs if k != "logging"},
  )
  np.testing.assert_allclose(long.value, short.value, rtol=1e-5)


@pytest.mark.parametrize("name", ["sips", "iips", "rips", "pi"])
def test_clip_bounds_the_weights_and_counts_them(name):
  spec = ev.get_estimator(name)
  log = _small_log(masked=False)
  kw = {k: v for k, v in _registry_inputs(log).items() if k in spec.inputs}
  free = spec.fn(log["scores"], log["clicks"], temperature=0.3, **kw)
  clipped = spec.fn(log["scores"], log["clicks"], temperature=0.3, clip=1.0, **kw)
  assert int(free.num_clipped) == 0 and int(clipped.num_clipped) > 0
  assert float(clipped.value) <= float(free.value) + 1e-6 or name == "pi"


# ----------------------------------------------------------------------------
# Bad input.


def test_bad_inputs_raise_naming_the_field_and_row():
  log = _small_log(masked=False)
  logging = _inputs(log)
  s, c = log["scores"], log["clicks"]
  zero = logging._replace(item_position=logging.item_position.at[2, 1].set(0.0))
  with pytest.raises(ValueError, match=r"logging.item_position: zero propensity .* row 2"):
    ev.evaluate("iips", s, c, logging=zero)
  missing = logging._replace(prefix=logging.prefix.at[3, 0].set(jnp.nan))
  with pytest.raises(ValueError, match=r"logging.prefix: missing .* row 3"):
    ev.evaluate("rips", s, c, logging=missing)
  above = logging._replace(ranking=logging.ranking.at[1].set(1.5))
  with pytest.raises(ValueError, match=r"logging.ranking: probability outside \[0, 1\] in row 1"):
    ev.evaluate("sips", s, c, logging=above)
  with pytest.raises(ValueError, match=r"scores: shape \(5, 3\) does not match .* unequal lengths"):
    ev.evaluate("iips", s[:, :3], c, logging=logging)
  with pytest.raises(ValueError, match=r"propensities: probability outside \[0, 1\] in row 0"):
    ev.evaluate("click_dcg", s, c, propensities=np.full((5, L), 2.0))
  half = c.copy()
  half[4, 0] = 0.5
  with pytest.raises(ValueError, match=r"clicks: expected 0/1 .* row 4"):
    ev.evaluate("iips", s, half, logging=logging)
  with pytest.raises(ValueError, match=r"target_doc_ids: row 1 ranks document 99"):
    ev.target_scores_from_ranking(
      log["doc_ids"], np.concatenate([log["doc_ids"][:, :2], [[-1], [99], [-1], [-1], [-1]]], 1)
    )
  with pytest.raises(ValueError, match=r"missing input\(s\) \['logging'\]"):
    ev.evaluate("iips", s, c)
  with pytest.raises(ValueError, match=r"unknown estimator 'ipx'"):
    ev.evaluate("ipx", s, c)


def test_a_target_outside_the_logging_support_is_refused():
  log = _small_log(masked=False)
  logging_scores = -np.broadcast_to(np.arange(L, dtype=np.float32), (5, L))  # the log shows the greedy order
  greedy = ev.plackett_luce_propensities(logging_scores, temperature=0.0, matrix=True)
  with pytest.raises(ValueError, match=r"scores: row 0 puts item \d at position \d, where the logging policy never"):
    ev.evaluate("iips", log["scores"], log["clicks"], logging=greedy)
  # the logging policy's own ranking is in its support; so is any target under a Plackett-Luce logger
  ev.evaluate("iips", logging_scores, log["clicks"], logging=greedy)
  stochastic = ev.plackett_luce_propensities(logging_scores, temperature=1.0, matrix=True)
  ev.evaluate("iips", log["scores"], log["clicks"], logging=stochastic, temperature=0.5)


def test_estimators_compile_once(assert_compiles_once):
  fn = functools.partial(ev.cascade_doubly_robust, model="pbm", temperature=0.5, num_samples=4)

  def make(i):
    log = _small_log(seed=10 + i)
    kw = dict(logging=_inputs(log), doc_ids=log["doc_ids"], params=_pbm_params(log), where=log["where"])
    return (log["scores"], log["clicks"]), {**kw, "key": jax.random.key(i)}

  assert_compiles_once(fn, make)


def test_a_target_ranking_of_doc_ids_becomes_scores_of_the_same_ranking():
  doc_ids = np.array([[10, 11, 12, 13]])
  scores = ev.target_scores_from_ranking(doc_ids, np.array([[12, 10, 13, 11]]))
  np.testing.assert_array_equal(ev.target_ranks(scores), [[1, 3, 0, 2]])


def test_the_guide_example_runs_and_its_estimates_bracket_the_truth(capsys):
  text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "guides" / "off_policy_evaluation.md").read_text()
  (block,) = re.findall(r"^<!-- test: off_policy_evaluation -->\n```python\n(.*?)^```", text, re.S | re.M)
  exec(compile(block, "docs/guides/off_policy_evaluation.md", "exec"), {})  # pylint: disable=exec-used
  lines = capsys.readouterr().out.strip().split("\n")
  truth = float(lines[0].split()[1])
  rows = {line.split()[0]: [float(x.strip("[],")) for x in line.split()[1:]] for line in lines[1:7]}
  assert set(rows) == {"sips", "iips", "rips", "dm", "dr", "cascade_dr"}
  for name, (value, lower, upper) in rows.items():
    half = (upper - lower) / 2
    assert lower < value < upper and abs(value - truth) < 4 * half + 0.05, (name, value, truth)
  assert float(lines[-1].split()[-1]) > 0  # the new ranker is truly better
