"""The host-side container for a padded set of ranked lists."""

import dataclasses
from typing import Mapping, Optional, Sequence, Union

import numpy as np

__all__ = ["RankingDataset", "is_per_item"]


def is_per_item(value: np.ndarray, list_size: int) -> bool:
  """Whether an extra is per item (``[Q, L, ...]``) rather than per query (``[Q]``).

  A ``[Q, K]`` array with ``K != L`` (e.g. a per-query vector of another length) is per query.

  Args:
    value: an extra's array, ``[Q, ...]``.
    list_size: the dataset's ``L``.

  Returns:
    True for a per-item extra.

  >>> is_per_item(np.zeros((4, 10, 3)), 10), is_per_item(np.zeros(4), 10), is_per_item(np.zeros((4, 5)), 10)
  (True, False, False)
  """
  return value.ndim >= 2 and value.shape[1] == list_size


@dataclasses.dataclass(frozen=True)
class RankingDataset:
  """Queries padded to a fixed list size, as NumPy arrays with a query axis.

  Attributes:
    features: ``float32[Q, L, F]`` ranking features (zero at padding).
    labels: ``float32[Q, L]`` graded relevance (0 at padding).
    where: ``bool[Q, L]``, True for real documents.
    qid: ``int64[Q]`` query ids.
    doc_ids: ``int32[Q, L]`` document ids, -1 at padding (optional).
    extras: further per-item ``[Q, L, ...]`` or per-query ``[Q]`` arrays
      that travel with the lists (``clicks``, ``shown``, ``context`` ...).

  Item ``i`` of a list is the document displayed at position ``i`` once a
  logging policy has ordered the lists.

  >>> ds = RankingDataset(
  ...     features=np.zeros((2, 3, 4), np.float32),
  ...     labels=np.array([[2, 0, 1], [1, 0, 0]], np.float32),
  ...     where=np.array([[True, True, True], [True, True, False]]),
  ...     qid=np.array([7, 9]))
  >>> ds.num_queries, ds.list_size, ds.num_features, ds.num_documents
  (2, 3, 4, 5)
  >>> ds.subset([1]).qid
  array([9])
  """

  features: np.ndarray
  labels: np.ndarray
  where: np.ndarray
  qid: np.ndarray
  doc_ids: Optional[np.ndarray] = None
  extras: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    q, l = self.where.shape
    if self.where.dtype != np.bool_:
      raise ValueError(f"where must be bool, got {self.where.dtype}")
    if self.features.ndim != 3 or self.features.shape[:2] != (q, l):
      raise ValueError(f"features must be [Q, L, F] = [{q}, {l}, F], got {self.features.shape}")
    if self.labels.shape != (q, l):
      raise ValueError(f"labels must be [{q}, {l}], got {self.labels.shape}")
    if self.qid.shape != (q,):
      raise ValueError(f"qid must be [{q}], got {self.qid.shape}")
    if self.doc_ids is not None and self.doc_ids.shape != (q, l):
      raise ValueError(f"doc_ids must be [{q}, {l}], got {self.doc_ids.shape}")
    for name, value in self.extras.items():
      if value.shape[:1] != (q,):
        raise ValueError(f"extras[{name!r}] must lead with Q={q}, got {value.shape}")

  @property
  def num_queries(self) -> int:
    return self.where.shape[0]

  @property
  def list_size(self) -> int:
    return self.where.shape[1]

  @property
  def num_features(self) -> int:
    return self.features.shape[2]

  @property
  def num_documents(self) -> int:
    return int(self.where.sum())

  def __len__(self) -> int:
    return self.num_queries

  def subset(self, indices: Union[Sequence[int], np.ndarray]) -> "RankingDataset":
    """The queries at ``indices`` (any NumPy index), extras included."""
    idx = np.asarray(indices)
    return RankingDataset(
      features=self.features[idx],
      labels=self.labels[idx],
      where=self.where[idx],
      qid=self.qid[idx],
      doc_ids=None if self.doc_ids is None else self.doc_ids[idx],
      extras={k: v[idx] for k, v in self.extras.items()},
    )

  def first_items(self, k: int) -> "RankingDataset":
    """Every list cut to its first ``k`` items (the per-item arrays; per-query ones are kept).

    Per-item are ``features``, ``labels``, ``where``, ``doc_ids`` and every extra whose second axis is
    the list size (:func:`is_per_item`).

    >>> ds = RankingDataset(np.zeros((1, 3, 2), np.float32), np.array([[2., 1., 0.]], np.float32),
    ...                     np.ones((1, 3), bool), np.arange(1), extras={"w": np.ones(1)})
    >>> short = ds.first_items(2)
    >>> short.labels, short.features.shape, short.extras["w"].shape
    (array([[2., 1.]], dtype=float32), (1, 2, 2), (1,))
    """
    cut = lambda a: a[:, :k] if is_per_item(a, self.list_size) else a  # noqa: E731
    return RankingDataset(
      features=self.features[:, :k],
      labels=self.labels[:, :k],
      where=self.where[:, :k],
      qid=self.qid,
      doc_ids=None if self.doc_ids is None else self.doc_ids[:, :k],
      extras={name: cut(np.asarray(v)) for name, v in self.extras.items()},
    )

  def replace(self, **changes) -> "RankingDataset":
    return dataclasses.replace(self, **changes)

  def with_extras(self, **arrays: np.ndarray) -> "RankingDataset":
    """A copy with ``arrays`` added to (or replacing entries of) ``extras``."""
    return dataclasses.replace(self, extras={**self.extras, **arrays})

  def as_batch(self, indices: Optional[Union[Sequence[int], np.ndarray]] = None) -> dict[str, np.ndarray]:
    """The standard batch dict (see :mod:`ultr_jax.types`) for ``indices``."""
    ds = self if indices is None else self.subset(indices)
    batch = {
      "features": ds.features,
      "labels": ds.labels,
      "where": ds.where,
      "qid": ds.qid,
      **ds.extras,
    }
    if ds.doc_ids is not None:
      batch["doc_ids"] = ds.doc_ids
    return batch
