r"""Synthetic ranking data with a known relevance function (the binaries' default data)."""

from typing import Optional, Sequence

import numpy as np

from ultr_jax.data.dataset import RankingDataset
from ultr_jax.data.splits import Splits

__all__ = ["DEFAULT_LABEL_FRACTIONS", "make_synthetic"]

#: The share of each label grade 0..4 in :func:`make_synthetic`'s data (about what LETOR sets show).
DEFAULT_LABEL_FRACTIONS = (0.45, 0.30, 0.15, 0.07, 0.03)


def make_synthetic(
  num_train: int = 1000,
  num_valid: int = 200,
  num_test: int = 200,
  list_size: int = 20,
  num_features: int = 32,
  seed: int = 0,
  *,
  min_list_size: Optional[int] = None,
  hidden_size: int = 32,
  noise: float = 0.5,
  query_shift: float = 0.5,
  label_fractions: Sequence[float] = DEFAULT_LABEL_FRACTIONS,
) -> Splits:
  r"""Generates train/valid/test lists whose relevance is a fixed random MLP of the features.

  Features ``x ~ N(mu_q, I)`` with a per-query shift ``mu_q ~ N(0, query_shift^2 I)``.
  The true score is a fixed random 2-layer MLP, standardised over documents,

  .. math::  s(x) = (w_2^T \tanh(W_1 x + b_1) - m) / \sigma,

  and graded labels are ``y = #{k : s(x) + noise \cdot \epsilon > t_k}`` with
  ``epsilon ~ N(0, 1)`` and thresholds ``t_k`` at the pooled quantiles
  ``sum_{j<k} label_fractions[j]``, so the label histogram matches
  ``label_fractions`` (default ~[0.45, 0.3, 0.15, 0.07, 0.03]). The MLP
  depends on ``(seed, num_features, hidden_size)`` only, so it is the same
  function in every split and for every dataset size.

  Args:
    num_train: queries in the train split.
    num_valid: queries in the validation split.
    num_test: queries in the test split.
    list_size: ``L``; with ``min_list_size`` each list has a uniform length
      in ``[min_list_size, L]`` and the rest is padding.
    num_features: ``F``.
    seed: everything is a deterministic function of the seed.
    min_list_size: the shortest list length (None: every list has ``L`` items).
    hidden_size: the width of the random MLP that scores the documents.
    noise: the standard deviation of the label noise :math:`\epsilon`.
    query_shift: the standard deviation of the per-query feature shift :math:`\mu_q`.
    label_fractions: the target share of each label grade (its length fixes the number of grades).

  Returns:
    :class:`Splits` of :class:`RankingDataset` (``features float32[Q, L, F]``,
    ``labels`` 0..4, ``qid`` unique over the splits, ``doc_ids`` unique over
    the splits, -1 at padding) with ``extras["true_score"]`` ``float32[Q, L]``,
    the noiseless latent relevance ``s(x)`` (0 at padding).

  Raises:
    ValueError: ``label_fractions`` has a negative share or does not sum to 1, or ``min_list_size`` is outside
      ``[1, list_size]``.

  >>> s = make_synthetic(num_train=50, num_valid=10, num_test=10, list_size=8, num_features=4, seed=0)
  >>> print(s.train.features.shape, round(float((s.train.labels[s.train.where] == 0).mean()), 2))
  (50, 8, 4) 0.41
  """
  fr = np.asarray(label_fractions, np.float64)
  if np.any(fr < 0) or not np.isclose(fr.sum(), 1.0):
    raise ValueError(f"label_fractions must be non-negative and sum to 1, got {label_fractions}")
  if min_list_size is not None and not 1 <= min_list_size <= list_size:
    raise ValueError(f"min_list_size must be in [1, list_size={list_size}], got {min_list_size}")
  model_ss, data_ss = np.random.SeedSequence(seed).spawn(2)
  mrng = np.random.default_rng(model_ss)
  w1 = mrng.standard_normal((num_features, hidden_size)) / np.sqrt(num_features)
  b1 = 0.1 * mrng.standard_normal(hidden_size)
  w2 = mrng.standard_normal(hidden_size) / np.sqrt(hidden_size)

  rng = np.random.default_rng(data_ss)
  sizes = (num_train, num_valid, num_test)
  q = sum(sizes)
  shift = query_shift * rng.standard_normal((q, 1, num_features))
  x = (rng.standard_normal((q, list_size, num_features)) + shift).astype(np.float32)
  if min_list_size is None:
    lengths = np.full(q, list_size)
  else:
    lengths = rng.integers(min_list_size, list_size + 1, size=q)
  where = np.arange(list_size)[None, :] < lengths[:, None]
  raw = np.tanh(x.astype(np.float64) @ w1 + b1) @ w2
  real = raw[where]
  score = (raw - real.mean()) / max(real.std(), 1e-12)
  latent = score + noise * rng.standard_normal(score.shape)
  thresholds = np.quantile(latent[where], np.cumsum(fr)[:-1])
  labels = np.searchsorted(thresholds, latent, side="right").astype(np.float32)
  doc_ids = np.full((q, list_size), -1, np.int32)
  doc_ids[where] = np.arange(int(where.sum()), dtype=np.int32)
  full = RankingDataset(
    features=np.where(where[..., None], x, 0).astype(np.float32),
    labels=np.where(where, labels, 0).astype(np.float32),
    where=where,
    qid=np.arange(q, dtype=np.int64),
    doc_ids=doc_ids,
    extras={"true_score": np.where(where, score, 0).astype(np.float32)},
  )
  bounds = np.cumsum((0,) + sizes)
  return Splits(*(full.subset(np.arange(bounds[i], bounds[i + 1])) for i in range(3)))
