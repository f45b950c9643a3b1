"""Online LTR throughput: the jitted PDGD, DBGD, MGD and NSGD learners vs per-impression NumPy learners.

Impressions per second of :func:`ultr_jax.train.online_learning` (one jitted ``lax.scan`` over
impressions, ``--seeds`` runs vmapped; linear ranker, 20 candidates, top 10 shown, the
informational cascade user) against, in the same process, a NumPy learner in the style of the
reference online-LTR code (Lerot, Oosterhuis's PDGD code): one impression at a time in Python,
with NumPy inside the impression (Plackett-Luce sampling by successive softmax draws, the cascade
user as a loop over positions, PDGD's pair weights from the swapped rankings, team-draft
interleaving as a loop; MGD with probabilistic multileaving as in that code: the list drawn slot by
slot, the assignment posterior per clicked item, and the candidates' outcomes from
``--pm-samples`` sampled assignments, where ultr_jax computes them exactly; NSGD with team-draft
multileaving, its null space by an SVD per impression, as the authors' code). Both learners use the
same data and user; the NumPy one runs ``--numpy-impressions`` impressions of one seed.

  python benchmarks/online.py                     # 10,000 impressions x 5 seeds
  python benchmarks/online.py --impressions 2000 --seeds 1 --numpy-impressions 200   # quick
"""

import argparse
import time

import jax.numpy as jnp
import numpy as np

from ultr_jax.data import make_synthetic
from ultr_jax.metrics import ndcg
from ultr_jax.train import ONLINE_CLICK_MODELS, online_learner_config, online_learning

CLICK, STOP = (np.asarray(v) for v in ONLINE_CLICK_MODELS["informational"])


def _user(rng, labels_shown):
  clicks = np.zeros(len(labels_shown))
  for i, y in enumerate(labels_shown.astype(int)):
    if rng.random() < CLICK[y]:
      clicks[i] = 1.0
      if rng.random() < STOP[y]:
        break
  return clicks


def _pl_sample(rng, scores):
  remaining = list(range(len(scores)))
  order = []
  while remaining:
    s = scores[remaining]
    p = np.exp(s - s.max())
    pick = rng.choice(len(remaining), p=p / p.sum())
    order.append(remaining.pop(pick))
  return np.asarray(order)


def _log_prob(s_ordered):
  suffix = np.log(np.cumsum(np.exp(s_ordered[::-1] - s_ordered.max()))[::-1]) + s_ordered.max()
  return float(np.sum(s_ordered - suffix))


def numpy_pdgd(train, impressions, top_k=10, lr=0.1, seed=0):
  rng = np.random.default_rng(seed)
  w = np.zeros(train.num_features)
  for _ in range(impressions):
    q = rng.integers(train.num_queries)
    x, y = train.features[q], train.labels[q]
    scores = x @ w
    order = _pl_sample(rng, scores)
    clicks = _user(rng, y[order[:top_k]])
    if not clicks.any():
      continue
    last = int(np.flatnonzero(clicks).max())
    considered = min(last + 2, top_k)
    s_ordered = scores[order]
    base = _log_prob(s_ordered)
    doc_weights = np.zeros(len(scores))
    for a in range(considered):
      for b in range(considered):
        if clicks[a] and not clicks[b]:
          swapped = s_ordered.copy()
          swapped[a], swapped[b] = swapped[b], swapped[a]
          other = _log_prob(swapped)
          rho = 1.0 / (1.0 + np.exp(base - other))
          p = 1.0 / (1.0 + np.exp(-(s_ordered[a] - s_ordered[b])))
          doc_weights[order[a]] += rho * p * (1 - p)
          doc_weights[order[b]] -= rho * p * (1 - p)
    w += lr * doc_weights @ x
  return w


def _team_draft(rng, order_a, order_b):
  shown, teams, counts = [], [], [0, 0]
  taken = set()
  while len(shown) < len(order_a):
    team = 0 if counts[0] < counts[1] or (counts[0] == counts[1] and rng.random() < 0.5) else 1
    doc = next(d for d in (order_a if team == 0 else order_b) if d not in taken)
    taken.add(doc)
    shown.append(doc)
    teams.append(team)
    counts[team] += 1
  return np.asarray(shown), np.asarray(teams)


def numpy_dbgd(train, impressions, top_k=10, unit=1.0, lr=0.01, seed=0):
  rng = np.random.default_rng(seed)
  w = np.zeros(train.num_features)
  for _ in range(impressions):
    q = rng.integers(train.num_queries)
    x, y = train.features[q], train.labels[q]
    u = rng.standard_normal(w.shape)
    u /= np.linalg.norm(u)
    shown, teams = _team_draft(
      rng, np.argsort(-(x @ w), kind="stable"), np.argsort(-(x @ (w + unit * u)), kind="stable")
    )
    clicks = _user(rng, y[shown[:top_k]])
    credit = np.bincount(teams[:top_k], weights=clicks, minlength=2)
    if credit[1] > credit[0]:
      w += lr * u
  return w


def _rank_weights(scores, tau=3.0):
  ranks = np.empty(scores.shape)
  for j, row in enumerate(scores):
    ranks[j, np.argsort(-row, kind="stable")] = np.arange(1, scores.shape[1] + 1)
  return ranks**-tau


def numpy_mgd_pm(train, impressions, top_k=10, unit=1.0, lr=0.01, candidates=9, samples=1000, seed=0):
  rng = np.random.default_rng(seed)
  w = np.zeros(train.num_features)
  for _ in range(impressions):
    q = rng.integers(train.num_queries)
    x, y = train.features[q], train.labels[q]
    u = rng.standard_normal((candidates, w.size))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    weights = _rank_weights(np.concatenate([(x @ w)[None], (w + unit * u) @ x.T]))
    left = np.ones(x.shape[0], bool)
    shown, slot_probs = [], []
    for _slot in range(top_k):
      team = rng.integers(weights.shape[0])
      p = np.where(left, weights[team], 0.0)
      doc = rng.choice(len(p), p=p / p.sum())
      slot_probs.append(weights[:, doc] / (weights * left).sum(axis=1))
      shown.append(doc)
      left[doc] = False
    clicks = _user(rng, y[np.asarray(shown)])
    post = np.asarray(slot_probs)[clicks > 0]
    if not len(post):
      continue
    post /= post.sum(axis=1, keepdims=True)
    owners = np.stack([rng.choice(post.shape[1], size=samples, p=row) for row in post])  # [clicks, samples]
    counts = np.stack([(owners == j).sum(axis=0) for j in range(post.shape[1])])  # [rankers, samples]
    wins = np.mean(np.sign(counts[1:] - counts[0]), axis=1) > 0
    if wins.any():
      w += lr * u[wins].mean(axis=0)
  return w


def _team_draft_multileave(rng, orders, length):
  """Team-draft multileaving of ``orders`` (one ranking per ranker): rounds in a random team order."""
  shown, teams, taken = [], [], set()
  while len(shown) < length:
    for team in rng.permutation(len(orders)):
      if len(shown) == length:
        break
      doc = next(d for d in orders[team] if d not in taken)
      taken.add(doc)
      shown.append(doc)
      teams.append(team)
  return np.asarray(shown), np.asarray(teams)


def numpy_nsgd(
  train,
  impressions,
  top_k=10,
  unit=1.0,
  lr=0.01,
  candidates=9,
  history=60,
  worst=25,
  tie_queries=10,
  tie_window=50,
  seed=0,
):
  """NSGD as the authors' code runs it, one impression at a time: the null space of the worst remembered
  losing directions (SVD), 2 (n + 1) draws ranked by |u . x_mean|, team-draft multileaving, ties broken
  on the stored difficult queries. The ranker has a bias weight (a constant feature), as the JAX linear
  ranker does: NSGD's preselection sees it (|u . x_mean + u_b|); the ranking weights are returned."""
  rng = np.random.default_rng(seed)
  features = np.concatenate([train.features, np.ones(train.features.shape[:2] + (1,), train.features.dtype)], -1)
  w = np.zeros(features.shape[-1])
  ring, margins, head = np.zeros((history, w.size)), np.full(history, np.inf), 0
  hard = []  # [rr, time, query, clicked docs]
  for t in range(impressions):
    q = rng.integers(train.num_queries)
    x, y = features[q], train.labels[q]
    losers = ring[np.argsort(margins, kind="stable")[:worst]]
    basis = np.eye(w.size)
    if worst and np.any(losers):
      _, sv, vh = np.linalg.svd(losers)
      basis = vh[int(np.sum(sv > sv.max() * max(losers.shape) * 1e-7)) :]
    pool = rng.standard_normal((2 * (candidates + 1), len(basis))) @ basis
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    u = pool[np.argsort(-np.abs(pool @ x.mean(axis=0)), kind="stable")[:candidates]]
    rankers = np.concatenate([w[None], w + unit * u])
    orders = [np.argsort(-(x @ r), kind="stable") for r in rankers]
    shown, teams = _team_draft_multileave(rng, orders, min(top_k, len(y)))
    clicks = _user(rng, y[shown])
    credit = np.bincount(teams, weights=clicks, minlength=len(rankers))
    margin = credit[1:] - credit[0]
    wins = np.flatnonzero(margin > 0)
    rr = float(np.sum(clicks / (np.arange(len(clicks)) + 1.0)))
    if rr > 0 and tie_queries:
      entry = [rr, t, q, shown[clicks > 0]]
      stale = [i for i, e in enumerate(hard) if t - e[1] > tie_window]
      if len(hard) < tie_queries:
        hard.append(entry)
      elif stale:
        hard[stale[0]] = entry
      elif max(e[0] for e in hard) > rr:
        hard[int(np.argmax([e[0] for e in hard]))] = entry
    if len(wins) > 1 and hard:
      score = np.zeros(len(wins))
      for _, _, hq, docs in hard:
        s = features[hq] @ rankers[1 + wins].T  # [L, winners]
        s[~train.where[hq]] = -np.inf
        for j in range(len(wins)):
          rank = np.empty(len(s), int)
          rank[np.argsort(-s[:, j], kind="stable")] = np.arange(1, len(s) + 1)
          score[j] += np.sum(1.0 / rank[docs])
      wins = wins[[int(np.argmax(score))]]
    if len(wins):
      w += lr * u[wins].mean(axis=0)
    kth = np.sort(np.concatenate([[0.0], margin]))[min(4, candidates + 1) - 1]
    for i in np.flatnonzero((margin < 0) & (margin <= kth)):
      ring[head], margins[head], head = u[i], margin[i], (head + 1) % history
  return w[:-1]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--impressions", type=int, default=10000)
  parser.add_argument("--seeds", type=int, default=5)
  parser.add_argument("--numpy-impressions", type=int, default=1000)
  parser.add_argument("--pm-samples", type=int, default=1000)
  args = parser.parse_args()
  data = make_synthetic(num_train=1000, num_valid=1, num_test=200, list_size=20, num_features=32, seed=0)
  config = online_learner_config()
  config.num_impressions = args.impressions
  config.eval_every = args.impressions // 10
  seeds = tuple(range(args.seeds))
  print(
    f"{args.impressions} impressions x {args.seeds} seeds (JAX, vmapped); "
    f"{args.numpy_impressions} impressions x 1 seed (NumPy)"
  )
  config.mgd.multileave = "probabilistic"
  numpy_mgd = lambda train, n: numpy_mgd_pm(train, n, samples=args.pm_samples)
  for method, reference in (("pdgd", numpy_pdgd), ("dbgd", numpy_dbgd), ("mgd", numpy_mgd), ("nsgd", numpy_nsgd)):
    t = time.perf_counter()
    online_learning(method, data.train, data.test, click_model="informational", config=config, seeds=seeds)
    first = time.perf_counter() - t
    t = time.perf_counter()
    out = online_learning(method, data.train, data.test, click_model="informational", config=config, seeds=seeds)
    warm = time.perf_counter() - t
    jax_rate = args.impressions * args.seeds / warm
    t = time.perf_counter()
    w = reference(data.train, args.numpy_impressions)
    numpy_rate = args.numpy_impressions / (time.perf_counter() - t)
    numpy_ndcg = float(
      ndcg(jnp.asarray(data.test.features @ w.astype(np.float32)), data.test.labels, where=data.test.where, topn=10)
    )
    at = int(np.searchsorted(out["impressions"], args.numpy_impressions))
    same = f"JAX {out['curve'][:, at].mean():.4f} at {out['impressions'][at]}" if at < len(out["impressions"]) else ""
    print(
      f"{method}: JAX {jax_rate:,.0f} impressions/s warm (first call with compilation {first:.1f} s, "
      f"warm {warm:.2f} s incl. {config.num_impressions // config.eval_every + 1} test evaluations); "
      f"NumPy {numpy_rate:,.0f} impressions/s; ratio {jax_rate / numpy_rate:.1f}x"
    )
    print(f"  test nDCG@10 (sanity): NumPy {numpy_ndcg:.4f} after {args.numpy_impressions} impressions; {same}")


if __name__ == "__main__":
  main()
