r"""Feature normalisation, query filtering and dataset statistics.

Normalisations used by the papers (statistics over real documents only;
padding stays 0):

* ``"minmax"``: per-feature min-max to [0, 1], fit on the given dataset
  (the public code of CLD, Zhao et al., SIGIR-AP 2023: sklearn ``MinMaxScaler``
  fit separately on each split file).
* ``"minmax_pm1"``: per-feature min-max to [-1, 1],
  ``x' = 2 (x - min) / (max - min) - 1``, zeros (absent libsvm features) stay
  0 (the code of LBD, Chen et al., NeurIPS 2022, through ULTRA's
  ``libsvm_tools``; fit it on train+valid+test with
  :func:`fit_normalizer`).
* ``"log_minmax_pm1"``: the Istella-S variant,
  ``x' = 2 log10(x - min + 1) / log10(max - min + 1) - 1``, zeros stay 0.
* ``"query_minmax"``: per-query, per-feature min-max to [0, 1] (LETOR
  ``QueryLevelNorm``).
* ``"zscore"``: per-feature standardisation ``(x - mean) / std``.
* ``"log1p_zscore"``: ``sign(x) log1p(|x|)`` then standardised (a common choice
  for MSLR's heavy-tailed counts; SIF, Gong et al., states none in its
  Section VI).

Constant features map to 0 (never NaN).
"""

import dataclasses
from typing import NamedTuple, Optional, Sequence

import numpy as np

from ultr_jax.data.dataset import RankingDataset

__all__ = [
  "NORMALIZATIONS",
  "NormalizerStats",
  "fit_normalizer",
  "normalize_features",
  "drop_queries_without_relevant",
  "DatasetStats",
  "stats",
]

#: The feature normalisations of :func:`normalize_features` (see the module docstring).
NORMALIZATIONS = ("minmax", "minmax_pm1", "log_minmax_pm1", "query_minmax", "zscore", "log1p_zscore")


class NormalizerStats(NamedTuple):
  """Per-feature statistics ``[F]`` of a global normalisation (float64)."""

  method: str
  min: np.ndarray
  max: np.ndarray
  mean: np.ndarray
  std: np.ndarray


def _signed_log1p(x):
  return np.sign(x) * np.log1p(np.abs(x))


def fit_normalizer(datasets: Sequence[RankingDataset], method: str) -> NormalizerStats:
  r"""Fits a global normalisation on the real documents of ``datasets`` pooled.

  ``min``/``max`` are per-feature extremes, ``mean``/``std`` the moments (of
  ``sign(x) log1p|x|`` for ``"log1p_zscore"``).

  Args:
    datasets: the :class:`RankingDataset` s whose real documents are pooled.
    method: one of the global methods of the module docstring.

  Returns:
    The :class:`NormalizerStats` for :func:`normalize_features`.

  Raises:
    ValueError: ``method`` is not one of the global methods, or the datasets have no real document.

  >>> ds = RankingDataset(features=np.array([[[1.], [3.]]], np.float32), labels=np.zeros((1, 2), np.float32),
  ...     where=np.ones((1, 2), bool), qid=np.array([0]))
  >>> s = fit_normalizer([ds], "zscore")
  >>> print(s.min[0], s.max[0], s.mean[0], s.std[0])
  1.0 3.0 2.0 1.0
  """
  if method not in NORMALIZATIONS or method == "query_minmax":
    raise ValueError(f"unknown global normalisation {method!r}; choose from {NORMALIZATIONS[:3] + NORMALIZATIONS[4:]}")
  x = np.concatenate([d.features[d.where] for d in datasets]).astype(np.float64)
  if len(x) == 0:
    raise ValueError("cannot fit a normaliser on datasets without documents")
  lx = _signed_log1p(x) if method == "log1p_zscore" else x
  mean, std = lx.mean(0), lx.std(0)
  std = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, 0.0)  # constant features: rounding noise
  return NormalizerStats(method, x.min(0), x.max(0), mean, std)


def normalize_features(
  ds: RankingDataset, *, method: str = "minmax", stats: Optional[NormalizerStats] = None
) -> RankingDataset:
  r"""Normalises ``ds.features`` with ``method`` (see the module docstring).

  Global methods use ``stats`` (from :func:`fit_normalizer`, e.g. on
  train+valid+test for LBD) or are fit on ``ds`` itself (CLD's per-split
  scaler). Padding stays 0. Returns a copy; shapes unchanged ``[Q, L, F]``.

  Args:
    ds: a :class:`RankingDataset`.
    method: the normalisation (see the module docstring).
    stats: the statistics of a global method (None: fitted on ``ds``).

  Returns:
    A normalised copy of ``ds`` (shapes unchanged, padding 0).

  Raises:
    ValueError: ``method`` is not one of :data:`NORMALIZATIONS`, or ``stats`` were fit for another method.

  >>> ds = RankingDataset(features=np.array([[[0.], [2.], [4.]]], np.float32), labels=np.zeros((1, 3), np.float32),
  ...     where=np.ones((1, 3), bool), qid=np.array([0]))
  >>> print(normalize_features(ds, method="minmax").features.ravel())
  [0.  0.5 1. ]
  >>> print(normalize_features(ds, method="minmax_pm1").features.ravel())
  [0. 0. 1.]
  """
  if method not in NORMALIZATIONS:
    raise ValueError(f"unknown normalisation {method!r}; choose from {NORMALIZATIONS}")
  x = ds.features.astype(np.float64)
  mask = ds.where[..., None]
  if method == "query_minmax":
    lo = np.where(mask, x, np.inf).min(1, keepdims=True)
    hi = np.where(mask, x, -np.inf).max(1, keepdims=True)
    rng = hi - lo
    safe = np.where(rng > 0, rng, 1.0)
    out = np.where(rng > 0, (x - np.where(np.isfinite(lo), lo, 0)) / safe, 0.0)
  else:
    if stats is None:
      stats = fit_normalizer([ds], method)
    elif stats.method != method:
      raise ValueError(f"stats were fit for {stats.method!r}, not {method!r}")
    rng = stats.max - stats.min
    ok = rng > 0
    safe = np.where(ok, rng, 1.0)
    if method == "minmax":
      out = np.where(ok, (x - stats.min) / safe, 0.0)
    elif method in ("minmax_pm1", "log_minmax_pm1"):
      if method == "minmax_pm1":
        scaled = (x - stats.min) / safe
      else:
        scaled = np.log10(np.maximum(x - stats.min, 0) + 1) / np.log10(safe + 1)
      out = np.where(ok & (x != 0), 2 * scaled - 1, 0.0)
    else:
      lx = _signed_log1p(x) if method == "log1p_zscore" else x
      sd = np.where(stats.std > 0, stats.std, 1.0)
      out = np.where(stats.std > 0, (lx - stats.mean) / sd, 0.0)
  out = np.where(mask, out, 0.0).astype(np.float32)
  return ds.replace(features=out)


def drop_queries_without_relevant(ds: RankingDataset, *, threshold: float = 0.0) -> RankingDataset:
  r"""Keeps the queries with at least one real document whose label exceeds ``threshold``.

  The CLD paper's authors drop the queries whose graded labels are all 0; the LBD paper's do so for
  valid/test only.

  Args:
    ds: a :class:`RankingDataset`.
    threshold: the label a document must exceed to count as relevant.

  Returns:
    The :class:`RankingDataset` of the kept queries.

  >>> ds = RankingDataset(features=np.zeros((3, 2, 1), np.float32),
  ...     labels=np.array([[0, 0], [0, 2], [1, 0]], np.float32),
  ...     where=np.array([[True, True], [True, True], [True, False]]), qid=np.arange(3))
  >>> print(drop_queries_without_relevant(ds).qid.tolist())
  [1, 2]
  """
  keep = np.any(ds.where & (ds.labels > threshold), axis=1)
  return ds.subset(np.flatnonzero(keep))


@dataclasses.dataclass(frozen=True)
class DatasetStats:
  """Summary of a :class:`RankingDataset` (see :func:`stats`)."""

  num_queries: int
  num_documents: int
  num_features: int
  list_size: int
  mean_list_length: float
  max_list_length: int
  label_histogram: dict
  empty_queries: int

  def __str__(self) -> str:
    total = max(self.num_documents, 1)
    hist = ", ".join(f"{k:g}: {v} ({v / total:.1%})" for k, v in self.label_histogram.items())
    return (
      f"{self.num_queries} queries, {self.num_documents} documents, {self.num_features} features\n"
      f"list length: mean {self.mean_list_length:.2f}, max {self.max_list_length}"
      f" (padded to {self.list_size}); {self.empty_queries} empty queries\n"
      f"labels: {hist}"
    )


def stats(ds: RankingDataset) -> DatasetStats:
  r"""Counts queries, documents, features, the label histogram and list lengths.

  Args:
    ds: a :class:`RankingDataset`.

  Returns:
    The :class:`DatasetStats`.

  >>> ds = RankingDataset(features=np.zeros((2, 3, 4), np.float32),
  ...     labels=np.array([[2, 0, 1], [1, 0, 0]], np.float32),
  ...     where=np.array([[True, True, True], [True, True, False]]), qid=np.array([7, 9]))
  >>> s = stats(ds)
  >>> print(s.mean_list_length, s.label_histogram)
  2.5 {0.0: 2, 1.0: 2, 2.0: 1}
  """
  lengths = ds.where.sum(1)
  values, counts = np.unique(ds.labels[ds.where], return_counts=True)
  return DatasetStats(
    num_queries=ds.num_queries,
    num_documents=ds.num_documents,
    num_features=ds.num_features,
    list_size=ds.list_size,
    mean_list_length=float(lengths.mean()) if len(lengths) else 0.0,
    max_list_length=int(lengths.max()) if len(lengths) else 0,
    label_histogram={float(v): int(c) for v, c in zip(values, counts)},
    empty_queries=int((lengths == 0).sum()),
  )
