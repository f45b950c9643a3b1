"""The host-side container for a padded set of ranked lists."""

import dataclasses
from typing import Mapping, Optional, Sequence, Union

import numpy as np

__all__ = ["RankingDataset", "check_labels", "is_per_item"]


def check_labels(
  labels: np.ndarray,
  where: Optional[np.ndarray] = None,
  *,
  what: str = "labels",
  qid: Optional[np.ndarray] = None,
) -> None:
  r"""Refuses a graded relevance label that is not finite and non-negative, naming its list and position.

  Graded labels :math:`y \in [0, \infty)` (Baidu-ULTR's and LETOR's 0-4 grades): a NaN would make every
  metric of its list NaN, a negative one would lift nDCG above 1. Padding (``where`` False) is not read.

  Args:
    labels: ``[..., L]`` graded labels (NumPy or concrete JAX values).
    where: ``bool[..., L]``, the valid items (None: all).
    what: how the error names the array (e.g. ``"valid RankingDataset.labels"``).
    qid: ``[Q]`` query ids of a ``[Q, L]`` array, named beside the list index.

  Raises:
    ValueError: ``"<what>: list <i> (qid <q>), position <j> is nan; graded labels must be finite and >= 0"``.

  >>> check_labels(np.array([[2.0, 0.0], [1.0, -1.0]]), qid=np.array([7, 9]))
  Traceback (most recent call last):
  ValueError: labels: list 1 (qid 9), position 1 is -1.0; graded relevance labels must be finite and >= 0
  """
  y = np.asarray(labels)
  bad = ~(np.isfinite(y) & (y >= 0)) if y.dtype.kind == "f" else (y < 0)
  if where is not None:
    bad &= np.broadcast_to(np.asarray(where, bool), y.shape)
  if not bad.any():
    return
  at = np.unravel_index(int(np.argmax(bad.reshape(-1))), y.shape)
  lists, pos = at[:-1], int(at[-1])
  name = ", ".join(str(int(i)) for i in lists) if lists else "0"
  q = f" (qid {np.asarray(qid).reshape(-1)[int(lists[0])]})" if qid is not None and len(lists) == 1 else ""
  raise ValueError(
    f"{what}: list {name}{q}, position {pos} is {float(y[at])!r}; graded relevance labels must be finite and >= 0"
  )


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
    check_labels(self.labels, self.where, what="RankingDataset.labels", qid=self.qid)

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
