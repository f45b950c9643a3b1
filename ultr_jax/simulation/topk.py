r"""Top-k selection logs for CLD (Zhao et al., SIGIR-AP'23, Section 6).

A deterministic production ranker orders every candidate of a query; only
the top ``k`` are shown (:math:`s = 1`), the rest are never clicked. A shown
document at 1-based position :math:`p` is examined with
:math:`\rho_p = (1/p)^\eta` (CLD Eq. 13) and clicked with
:math:`\rho_p\,(r + (1 - r)\,\epsilon^-)` for binary relevance :math:`r`
(grade :math:`\ge` ``threshold``). ``N`` sessions draw their query
uniformly with replacement.

Because the ranking of a query is the same in every session, the log is
stored as **aggregated counts**: sessions per query :math:`n_q`
and clicks per document :math:`n_c \sim \mathrm{Binomial}(n_q, P(C=1))`.
Pointwise CLD on counts is exactly the per-session log (see
:func:`ultr_jax.losses.cld_loss`).

* :func:`topk_click_probability`: the per-item click probability and
  examination of the top-k PBM;
* :func:`simulate_topk_log`: draws ``N`` sessions, returns the log as
  ``[..., L]`` arrays (jittable);
* :func:`topk_selection_data`: host-side pipeline from a labelled
  :class:`~ultr_jax.data.Splits` with optional **hidden** features (seen by
  the logging ranker, not by the learner: selection on unobservables, a case
  beyond the CLD paper's Section 6 setup) to production-ordered, binarised splits with a ``shown`` mask.
"""

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.data import RankingDataset, Splits
from ultr_jax.simulation import probabilities as P
from ultr_jax.simulation.click_models.pbm import PBM
from ultr_jax.simulation.logging_policy import apply_logging_policy, logging_policy_scores, train_logging_policy
from ultr_jax.types import Array, PRNGKey

__all__ = ["topk_click_probability", "simulate_topk_log", "topk_selection_data", "topk_log_dataset"]


def topk_click_probability(
  labels: Array,
  *,
  k: int,
  eta: float = 1.0,
  noise: float = 0.1,
  threshold: float = 2.0,
  where: Optional[Array] = None,
  positions: Optional[Array] = None,
) -> tuple[Array, Array]:
  r"""Click probability and examination of the top-k PBM (CLD Eq. 13).

  .. math::
      \rho_p = (1/p)^\eta\,\mathbb{1}[p \le k], \qquad
      P(C = 1) = \rho_p\,\big(r + (1 - r)\,\epsilon^-\big), \quad r = \mathbb{1}[y \ge \tau]

  Args:
    labels: ``[..., L]`` graded labels (or binary with ``threshold=1``).
    k: display cut-off.
    eta: position-bias severity.
    noise: :math:`\epsilon^-`, click probability of an examined irrelevant item.
    threshold: :math:`\tau`, smallest relevant grade (paper 3, released code 2).
    where: ``bool[..., L]``.
    positions: ``int[..., L]`` 0-based positions (default: item index).

  Returns:
    ``(click_prob, examination)``, both ``float32[..., L]`` (0 beyond ``k`` and at padding).

  >>> p, e = topk_click_probability(jnp.array([3., 0., 3., 0.]), k=3, eta=1.0, noise=0.1)
  >>> print(np.asarray(p).round(4))
  [1.     0.05   0.3333 0.    ]
  """
  labels = jnp.asarray(labels)
  if positions is None:
    positions = jnp.broadcast_to(jnp.arange(labels.shape[-1], dtype=jnp.int32), labels.shape)
  exam = PBM.examination(positions, eta=eta, top_k=k)
  if where is not None:
    exam = jnp.where(where, exam, 0.0)
  attraction = P.binary_relevance_probability(labels, threshold=threshold, eps=noise, eps_plus=1.0)
  return exam * attraction, exam


def simulate_topk_log(
  key: PRNGKey,
  labels: Array,
  *,
  where: Array,
  k: int,
  num_sessions: int,
  eta: float = 1.0,
  noise: float = 0.1,
  threshold: float = 2.0,
  assumed_eta: Optional[float] = None,
) -> dict:
  r"""Draws ``num_sessions`` top-k sessions and returns the aggregated log.

  .. math::
      q_s \sim \mathcal{U}\{1..Q\},\quad n_q = \#\{s: q_s = q\},\quad
      n_c(q, d) \sim \mathrm{Binomial}\big(n_q,\ \rho_p (r + (1-r)\epsilon^-)\big)

  Items are in production order (item ``i`` at position ``i + 1``).

  Args:
    key: PRNG key.
    labels: ``[Q, L]`` graded labels of every candidate.
    where: ``bool[Q, L]``.
    k: display cut-off (as :func:`topk_click_probability`).
    eta: position-bias severity.
    noise: :math:`\epsilon^-`, click probability of an examined irrelevant item.
    threshold: :math:`\tau`, smallest relevant grade.
    num_sessions: ``N``.
    assumed_eta: the :math:`\hat\eta` of the propensities handed to the
      learners (misspecification, RQ4); default ``eta``.

  Returns:
    dict of ``sessions float32[Q]``, ``click_counts float32[Q, L]``,
    ``clicks`` (the CTR :math:`n_c/n_q`, 0 for unseen queries), ``shown
    bool[Q, L]``, ``examination`` (assumed :math:`\hat\rho`, 0 off the top k),
    ``true_examination`` and ``positions int32[Q, L]``.

  >>> out = simulate_topk_log(jax.random.key(0), jnp.ones((2, 3)), where=jnp.ones((2, 3), bool),
  ...                         k=2, num_sessions=1000)
  >>> print(float(out["sessions"].sum()), float(out["click_counts"][:, 2].sum()))
  1000.0 0.0
  """
  labels = jnp.asarray(labels)
  q, l = labels.shape
  k_q, k_c = jax.random.split(key)
  qs = jax.random.randint(k_q, (int(num_sessions),), 0, q)
  sessions = jax.ops.segment_sum(jnp.ones_like(qs, jnp.float32), qs, num_segments=q)
  positions = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (q, l))
  shown = where & (positions < k)
  p_click, exam = topk_click_probability(
    labels, k=k, eta=eta, noise=noise, threshold=threshold, where=where, positions=positions
  )
  n = jnp.broadcast_to(sessions[:, None], (q, l))
  counts = jax.random.binomial(k_c, n, jnp.clip(p_click, 0.0, 1.0)).astype(jnp.float32)
  counts = jnp.where(shown & (n > 0), counts, 0.0)
  ctr = jnp.where(n > 0, counts / jnp.maximum(n, 1.0), 0.0)
  a_eta = eta if assumed_eta is None else assumed_eta
  assumed = jnp.where(shown, PBM.examination(positions, eta=a_eta, top_k=k), 0.0)
  return {
    "sessions": sessions,
    "click_counts": counts,
    "clicks": ctr,
    "shown": shown,
    "examination": assumed,
    "true_examination": exam,
    "positions": positions,
  }


def topk_selection_data(
  splits: Splits,
  *,
  num_hidden: int = 0,
  threshold: float = 2.0,
  logging_fraction: float = 0.01,
  seed: int = 0,
  logging_steps: int = 300,
) -> tuple[Splits, np.ndarray]:
  r"""Production-orders every split, hides features, binarises labels (CLD paper, Section 6).

  The production ranker is a linear RankSVM fitted on ``logging_fraction``
  of the training queries with **all** features
  (:func:`~ultr_jax.simulation.train_logging_policy`); it ranks every
  candidate of every query. Then the last ``num_hidden`` features are
  removed, so they drive both relevance and selection but are invisible to
  the learners (selection on unobservables; with ``num_hidden=0`` selection
  depends only on the observed features and there is no Heckman-type bias). Labels become :math:`\mathbb{1}[y \ge \tau]`; the graded
  labels are kept in ``extras["grades"]``.

  Args:
    splits: the labelled :class:`~ultr_jax.data.Splits` (graded labels, all features).
    num_hidden: how many trailing features to hide from the learners, in ``[0, F)``.
    threshold: :math:`\tau`, the grade from which a label is relevant (1).
    logging_fraction: the fraction of training queries the production ranker is fitted on.
    seed: the seed of that sample of queries.
    logging_steps: the production ranker's Adam steps.

  Returns:
    ``(splits, logging_weights)``; each split is ordered by the production
    ranker (item ``i`` at position ``i + 1``), with ``extras["logging_scores"]``;
    ``logging_weights`` is the ranker's ``[F]`` weight vector over all features.

  Raises:
    ValueError: if ``num_hidden`` is not in ``[0, F)``.

  >>> from ultr_jax.data import make_synthetic
  >>> s, w = topk_selection_data(make_synthetic(40, 10, 10, list_size=6, num_features=5), num_hidden=2,
  ...                            logging_fraction=0.5, logging_steps=50)
  >>> print(s.train.num_features, w.shape, sorted(np.unique(s.test.labels).tolist()))
  3 (5,) [0.0, 1.0]
  """
  if not 0 <= num_hidden < splits.train.num_features:
    raise ValueError(f"num_hidden must be in [0, {splits.train.num_features}), got {num_hidden}")
  w = train_logging_policy(splits.train, fraction=logging_fraction, seed=seed, steps=logging_steps)
  out = []
  for ds in splits:
    ordered = apply_logging_policy(ds, logging_policy_scores(w, ds), record_scores=True)
    f = ordered.num_features - num_hidden
    out.append(
      ordered.replace(
        features=np.ascontiguousarray(ordered.features[..., :f]),
        labels=np.where(ordered.where, ordered.labels >= threshold, False).astype(np.float32),
        extras={**ordered.extras, "grades": ordered.labels},
      )
    )
  return Splits(*out), w


def topk_log_dataset(
  train: RankingDataset, log: dict, *, shown_only: bool = False, drop_unseen: bool = True
) -> RankingDataset:
  r"""The training lists carrying a top-k log from :func:`simulate_topk_log` as extras.

  ``shown_only`` masks the unshown documents (Naive / IPS train on the top-k
  records only); ``drop_unseen`` removes queries no session drew (they
  are not in the log). Per-query ``sessions`` travel as weights.

  Args:
    train: the training :class:`~ultr_jax.data.RankingDataset` the log was drawn on (``[Q, L]`` lists).
    log: :func:`simulate_topk_log`'s dict (arrays ``[Q, L]`` or ``[Q]``; ``shown`` and ``sessions`` are read).
    shown_only: mask the documents outside the top k (``where & shown``).
    drop_unseen: drop the queries with zero ``sessions``.

  Returns:
    The :class:`~ultr_jax.data.RankingDataset` with the log's entries as extras.

  >>> ds = RankingDataset(np.zeros((2, 3, 1), np.float32), np.ones((2, 3), np.float32),
  ...                     np.ones((2, 3), bool), np.arange(2))
  >>> log = simulate_topk_log(jax.random.key(0), ds.labels, where=ds.where, k=1, num_sessions=5)
  >>> print(topk_log_dataset(ds, log, shown_only=True).where.sum(-1))
  [1 1]
  """
  log = {name: np.asarray(v) for name, v in jax.device_get(log).items()}
  ds = train.with_extras(**log)
  if shown_only:
    ds = ds.replace(where=ds.where & log["shown"])
  if drop_unseen:
    ds = ds.subset(np.flatnonzero(log["sessions"] > 0))
  return ds
