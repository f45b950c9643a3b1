r"""The logging (production) policy of the ULTRA simulation protocol.

Joachims et al. (WSDM'17) and ULTRA (Ai et al. 2018/2021): a production
ranker is trained on a small labelled fraction of the training queries (1%)
and its ranking of every list is what the simulated users see. The papers
use SVM\ :sup:`rank`; here a linear ranker is fitted with the RankSVM
objective (rax's pairwise hinge loss, plus a small L2 penalty) by optax:

.. math::
    \min_w \sum_q \sum_{y_i > y_j} \max\bigl(0,\ 1 - w^\top(x_i - x_j)\bigr)
    + \lambda \lVert w \rVert^2

Only the resulting order is used (spec-cld 2.3, spec-lbd 4.2,
spec-identifiability 3.2.1, spec-sif 6.2). Reordering is host side (NumPy):
after :func:`apply_logging_policy`, item ``i`` of a list is the document
displayed at position ``i``.
"""

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
import rax

from ultr_jax.data import RankingDataset, is_per_item

__all__ = ["train_logging_policy", "logging_policy_scores", "apply_logging_policy"]


def train_logging_policy(dataset: RankingDataset, *, fraction: float = 0.01, seed: int = 0,
                         steps: int = 500, learning_rate: float = 0.05,
                         l2: float = 1e-4) -> np.ndarray:
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


def apply_logging_policy(dataset: RankingDataset, scores: np.ndarray, *,
                         top_k: Optional[int] = None, keep_all: bool = False,
                         record_scores: bool = False) -> RankingDataset:
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
