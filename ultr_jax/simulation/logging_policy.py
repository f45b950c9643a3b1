r"""The logging (production) policy of the ULTRA simulation protocol.

Joachims et al. (WSDM'17) and ULTRA (Ai et al. 2018/2021): a production
ranker is trained on a small labelled fraction of the training queries (1%)
and its ranking of every list is what the simulated users see. The papers
use SVM\ :sup:`rank`; here a linear ranker is fitted with the RankSVM
objective (rax's pairwise hinge loss, plus a small L2 penalty) by optax:

.. math::
    \min_w \sum_q \sum_{y_i > y_j} \max\bigl(0,\ 1 - w^\top(x_i - x_j)\bigr)
    + \lambda \lVert w \rVert^2

Only the resulting order is used, as in the simulations of the CLD, LBD, identifiability and SIF
papers. Reordering is host side (NumPy):
after :func:`apply_logging_policy`, item ``i`` of a list is the document
displayed at position ``i``.

A stochastic logging policy (:func:`stochastic_logging_click_fn`) instead
samples each session's display from the Plackett-Luce model of the logging
scores, so under a top-k cut every candidate has a chance to be shown;
:func:`policy_examination` is then each item's expected examination over the
policy's displays, the propensity of the policy-aware estimator (Oosterhuis &
de Rijke, "Policy-Aware Unbiased Learning to Rank for Top-k Rankings", SIGIR'20).
"""

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
import rax

from ultr_jax.data import RankingDataset, is_per_item
from ultr_jax.simulation.interleaving import plackett_luce_sample

__all__ = [
  "train_logging_policy",
  "logging_policy_scores",
  "apply_logging_policy",
  "stochastic_logging_click_fn",
  "policy_examination",
]


def train_logging_policy(
  dataset: RankingDataset,
  *,
  fraction: float = 0.01,
  seed: int = 0,
  steps: int = 500,
  learning_rate: float = 0.05,
  l2: float = 1e-4,
) -> np.ndarray:
  r"""Fits a linear RankSVM-style production ranker on a fraction of the queries.

  .. math::
      w = \arg\min_w \ \mathrm{mean}_q\,\ell_{\text{hinge}}(X_q w, y_q) + \lambda \lVert w \rVert^2

  ``max(1, round(fraction * Q))`` queries are drawn without replacement
  with ``np.random.default_rng(seed)``; the fit is full batch with Adam for
  ``steps`` steps (one jitted ``lax.scan``).

  Args:
    dataset: the training lists (graded ``labels``, ``features [Q, L, F]``).
    fraction: labelled fraction of queries (ULTRA: 0.01).
    seed: sampling seed.
    steps: Adam steps.
    learning_rate: Adam learning rate.
    l2: L2 penalty :math:`\lambda`.

  Returns:
    ``float32[F]`` weights; scores are ``features @ w``.

  Raises:
    ValueError: if ``fraction`` is not in (0, 1].

  >>> feats = np.random.default_rng(0).normal(size=(20, 5, 3)).astype(np.float32)
  >>> ds = RankingDataset(feats, (feats[..., 0] > 0).astype(np.float32),
  ...                     np.ones((20, 5), bool), np.arange(20))
  >>> w = train_logging_policy(ds, fraction=0.5, steps=200)
  >>> print(int(np.argmax(np.abs(w))))
  0
  """
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"fraction must be in (0, 1], got {fraction}")
  q = dataset.num_queries
  n = max(1, int(round(fraction * q)))
  idx = np.sort(np.random.default_rng(seed).choice(q, size=n, replace=False))
  x = jnp.asarray(dataset.features[idx], jnp.float32)
  y = jnp.asarray(dataset.labels[idx], jnp.float32)
  where = jnp.asarray(dataset.where[idx])
  w = _fit(x, y, where, steps=int(steps), learning_rate=float(learning_rate), l2=float(l2))
  return np.asarray(w, np.float32)


def _fit(x, y, where, *, steps, learning_rate, l2):
  tx = optax.adam(learning_rate)

  def loss_fn(w):
    scores = x @ w
    return rax.pairwise_hinge_loss(scores, y, where=where) + l2 * jnp.sum(w * w)

  @jax.jit
  def run(w0):
    def step(carry, _):
      w, opt = carry
      g = jax.grad(loss_fn)(w)
      updates, opt = tx.update(g, opt, w)
      return (optax.apply_updates(w, updates), opt), None

    (w, _), _ = jax.lax.scan(step, (w0, tx.init(w0)), None, length=steps)
    return w

  return run(jnp.zeros((x.shape[-1],), jnp.float32))


def logging_policy_scores(weights: np.ndarray, dataset: RankingDataset) -> np.ndarray:
  r"""Scores of the linear production ranker, :math:`s = X w` (host side).

  Args:
    weights: ``float[F]`` from :func:`train_logging_policy`.
    dataset: lists with ``features [Q, L, F]``.

  Returns:
    ``float32[Q, L]`` (padding scored ``-inf``).

  Raises:
    ValueError: if ``weights`` is not ``[F]`` for the dataset's ``F`` features.

  >>> ds = RankingDataset(np.ones((1, 2, 2), np.float32), np.zeros((1, 2), np.float32),
  ...                     np.array([[True, False]]), np.arange(1))
  >>> print(logging_policy_scores(np.array([1.0, 2.0]), ds))
  [[  3. -inf]]
  """
  weights = np.asarray(weights, np.float32)
  if weights.shape != (dataset.num_features,):
    raise ValueError(f"weights must be [{dataset.num_features}], got {weights.shape}")
  scores = dataset.features @ weights
  return np.where(dataset.where, scores, -np.inf).astype(np.float32)


def apply_logging_policy(
  dataset: RankingDataset,
  scores: np.ndarray,
  *,
  top_k: Optional[int] = None,
  keep_all: bool = False,
  record_scores: bool = False,
) -> RankingDataset:
  r"""Orders every list by descending logging score (item ``i`` shown at position ``i``).

  .. math::
      \pi_0(q) = \operatorname{argsort}_{\downarrow}(s_q)

  Ties keep the original order (stable); padding stays last; NaN scores
  rank below every real score. Per-item arrays (``features``, ``labels``,
  ``where``, ``doc_ids`` and every extra whose second axis is ``L``) are
  permuted; per-query extras are kept.

  Args:
    dataset: the lists.
    scores: ``float[Q, L]`` logging scores (e.g. :func:`logging_policy_scores`).
    top_k: display cut-off. Without ``keep_all`` the lists are truncated to
      ``min(top_k, L)`` items (ULTRA: only the top 10 are displayed).
    keep_all: keep every candidate and add ``extras["shown"]`` (``bool[Q, L]``,
      True for the displayed top ``k``), as CLD needs.
    record_scores: also store the (reordered) scores in
      ``extras["logging_scores"]``.

  Returns:
    The reordered :class:`~ultr_jax.data.RankingDataset`.

  Raises:
    ValueError: if ``scores`` is not ``[Q, L]`` like the dataset's lists, or ``top_k < 1``.

  >>> ds = RankingDataset(np.zeros((1, 3, 1), np.float32), np.array([[0., 1., 2.]], np.float32),
  ...                     np.array([[True, True, False]]), np.arange(1))
  >>> print(apply_logging_policy(ds, np.array([[0.1, 0.9, 5.0]])).labels)
  [[1. 0. 2.]]
  """
  scores = np.asarray(scores, np.float64)
  q, l = dataset.where.shape
  if scores.shape != (q, l):
    raise ValueError(f"scores must be [{q}, {l}], got {scores.shape}")
  if top_k is not None and top_k < 1:
    raise ValueError(f"top_k must be >= 1, got {top_k}")
  key = np.where(np.isnan(scores), -np.inf, scores)
  # lexsort: last key is primary (padding last), then descending score; stable.
  order = np.lexsort((-key, ~dataset.where), axis=-1)

  def permute(a):
    return np.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1)

  keep = l if (top_k is None or keep_all) else min(int(top_k), l)
  cut = lambda a: permute(a)[:, :keep]
  extras = {}
  for name, value in dataset.extras.items():
    value = np.asarray(value)
    extras[name] = cut(value) if is_per_item(value, l) else value
  where = cut(dataset.where)
  if keep_all and top_k is not None:
    extras["shown"] = where & (np.arange(keep) < top_k)
  if record_scores:
    extras["logging_scores"] = np.where(where, cut(scores), -np.inf).astype(np.float32)
  return RankingDataset(
    features=cut(dataset.features),
    labels=cut(dataset.labels),
    where=where,
    qid=dataset.qid,
    doc_ids=None if dataset.doc_ids is None else cut(dataset.doc_ids),
    extras=extras,
  )


def stochastic_logging_click_fn(click_fn, *, temperature: float = 1.0, score_key: str = "logging_score"):
  r"""A click function whose users see a Plackett-Luce sample of the logging scores, not their fixed order.

  Each call draws the display :math:`y \sim \pi(y) = \prod_t e^{z_{y_t}/\tau} / \sum_{u \ge t}
  e^{z_{y_u}/\tau}` of every list from ``batch[score_key]`` (:math:`z`, temperature :math:`\tau`;
  :func:`~ultr_jax.simulation.plackett_luce_sample`) and runs ``click_fn`` on it: the batch's
  ``positions`` become the sampled ranks, so a click model with ``top_k`` shows each session's own top k
  (its ``shown`` and ``examination`` are those of that display). As :math:`\tau \to 0` it is the
  deterministic logging order. ``positions`` in the output are the sampled ranks.

  Args:
    click_fn: ``click_fn(key, batch) -> dict`` (e.g. :func:`~ultr_jax.simulation.make_click_fn`) that reads
      ``batch["positions"]``.
    temperature: :math:`\tau > 0`.
    score_key: the batch entry with the logging scores.

  Returns:
    ``fn(key, batch) -> dict``: ``click_fn``'s output on the sampled display, with ``positions`` (``int[..., L]``)
    the sampled 0-based ranks.

  Raises:
    ValueError: if ``temperature`` is not positive.

  >>> from ultr_jax.simulation import make_click_fn
  >>> fn = stochastic_logging_click_fn(make_click_fn({"name": "pbm_table", "top_k": 1}), temperature=1e-3)
  >>> out = fn(jax.random.key(0), {"labels": jnp.array([1.0, 4.0]), "where": jnp.ones(2, bool),
  ...                              "logging_score": jnp.array([0.0, 1.0])})
  >>> out["positions"].tolist(), out["shown"].tolist()  # the second item leads the display
  ([1, 0], [False, True])
  """
  if not temperature > 0:
    raise ValueError(f"stochastic_logging_click_fn: temperature must be > 0, got {temperature}")

  def fn(key, batch):
    k_display, k_click = jax.random.split(key)
    where = jnp.asarray(batch["where"]).astype(bool)
    z = jnp.where(where, jnp.asarray(batch[score_key], jnp.float32), 0.0) / temperature
    positions = plackett_luce_sample(k_display, z, where=where)
    out = click_fn(k_click, {**batch, "positions": positions})
    return {**out, "positions": positions}

  return fn


def policy_examination(
  key,
  click_fn,
  batch,
  *,
  num_samples: int = 1000,
  temperature: float = 1.0,
  score_key: str = "logging_score",
  chunk: int = 100,
):
  r"""Each item's expected examination over a stochastic logging policy's displays: the policy-aware propensity.

  .. math::
      \rho_d = \mathbb{E}_{y \sim \pi}\bigl[\theta_{\mathrm{rank}_y(d)}\bigr]
             = \sum_y \pi(y)\, \theta_{\mathrm{rank}_y(d)}

  (Oosterhuis & de Rijke, SIGIR'20, Eq. 9), estimated from ``num_samples`` displays of
  :func:`stochastic_logging_click_fn` (the ``examination`` ``click_fn`` reports for each, 0 beyond its
  ``top_k``). With it IPS, :math:`c_d / \rho_d`, is unbiased for every item the policy can show, where
  the examination of the one display a click came from gives weight 0 to items that display left out
  (the policy-oblivious estimator, biased by each item's chance to be shown). Run it once per dataset,
  with many samples (its noise enters the denominator); ``chunk`` samples at a time are vmapped.

  Args:
    key: PRNG key.
    click_fn: ``click_fn(key, batch) -> dict`` reporting ``examination`` (e.g.
      :func:`~ultr_jax.simulation.make_click_fn`); it reads ``batch["positions"]``.
    temperature: :math:`\tau > 0` of the Plackett-Luce policy.
    score_key: the batch entry with the logging scores.
    batch: lists ``[..., L]`` with ``where`` and ``batch[score_key]`` (and what ``click_fn`` reads).
    num_samples: displays to average (a multiple of ``chunk`` is used, rounded up).
    chunk: displays vmapped at once.

  Returns:
    ``float32[..., L]``.

  >>> from ultr_jax.simulation import make_click_fn
  >>> fn = make_click_fn({"name": "pbm_table", "top_k": 1, "table": (1.0, 0.5)})
  >>> b = {"labels": jnp.zeros(2), "where": jnp.ones(2, bool), "logging_score": jnp.array([0.0, 0.0])}
  >>> print(np.round(policy_examination(jax.random.key(0), fn, b, num_samples=4000), 1))  # each shown half the time
  [0.5 0.5]
  """
  sample = stochastic_logging_click_fn(click_fn, temperature=temperature, score_key=score_key)
  chunk = max(1, min(int(chunk), int(num_samples)))
  rounds = -(-int(num_samples) // chunk)

  @jax.jit
  def one_round(k):
    return jnp.mean(jax.vmap(lambda kk: sample(kk, batch)["examination"])(jax.random.split(k, chunk)), axis=0)

  keys = jax.random.split(key, rounds)
  return jnp.mean(jnp.stack([one_round(k) for k in keys]), axis=0)
