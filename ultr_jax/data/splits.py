r"""Splits, query padding and fixed-shape batching of :class:`RankingDataset`\ s."""

from typing import Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np

from ultr_jax.data.dataset import RankingDataset

__all__ = [
  "Splits",
  "train_valid_test_split",
  "held_out_sessions",
  "pad_queries",
  "take_queries",
  "batches",
  "concatenate",
]


class Splits(NamedTuple):
  """A (train, valid, test) triple of :class:`RankingDataset`."""

  train: RankingDataset
  valid: RankingDataset
  test: RankingDataset


def _pad_value(name: str, dtype) -> int:  # -1, or 0 (False for a bool array)
  if name in ("doc_ids", "qid"):
    return -1
  return False if dtype == np.bool_ else 0


def take_queries(ds: RankingDataset, indices: Union[Sequence[int], np.ndarray]) -> RankingDataset:
  r"""The queries at ``indices``, where an index ``-1`` yields an all-masked query.

  Padding queries have ``where`` all False, zero features/labels/extras and
  ``qid``/``doc_ids`` -1. Shapes: ``[len(indices), L, ...]``.

  Args:
    ds: a :class:`RankingDataset`.
    indices: query indices; ``-1`` gives an all-masked query.

  Returns:
    A :class:`RankingDataset` of ``len(indices)`` queries.

  >>> ds = RankingDataset(features=np.ones((2, 3, 1), np.float32), labels=np.ones((2, 3), np.float32),
  ...     where=np.ones((2, 3), bool), qid=np.array([4, 5]))
  >>> out = take_queries(ds, [1, -1])
  >>> print(out.where.sum(), out.qid.tolist(), out.features.sum())
  3 [5, -1] 3.0
  """
  idx = np.asarray(indices, np.int64)
  pad = idx < 0
  safe = np.where(pad, 0, idx)

  def take(name, arr):
    out = arr[safe] if len(arr) else np.zeros((len(idx),) + arr.shape[1:], arr.dtype)
    if pad.any():
      out[pad] = _pad_value(name, arr.dtype)
    return out

  return RankingDataset(
    features=take("features", ds.features),
    labels=take("labels", ds.labels),
    where=take("where", ds.where),
    qid=take("qid", ds.qid),
    doc_ids=None if ds.doc_ids is None else take("doc_ids", ds.doc_ids),
    extras={k: take(k, v) for k, v in ds.extras.items()},
  )


def pad_queries(ds: RankingDataset, multiple: int) -> RankingDataset:
  r"""Appends all-masked queries so that ``Q`` is a multiple of ``multiple``.

  Used to shard the query axis over ``multiple`` devices:
  ``Q' = multiple * ceil(Q / multiple)``.

  Args:
    ds: a :class:`RankingDataset`.
    multiple: the number the query count must divide by (the devices).

  Returns:
    ``ds`` with all-masked queries appended: ``[Q', L, ...]``.

  Raises:
    ValueError: ``multiple`` < 1.

  >>> ds = RankingDataset(features=np.ones((5, 2, 1), np.float32), labels=np.zeros((5, 2), np.float32),
  ...     where=np.ones((5, 2), bool), qid=np.arange(5))
  >>> p = pad_queries(ds, 4)
  >>> print(p.num_queries, p.num_documents)
  8 10
  """
  if multiple < 1:
    raise ValueError(f"multiple must be >= 1, got {multiple}")
  q = ds.num_queries
  total = -(-q // multiple) * multiple
  if total == q:
    return ds
  return take_queries(ds, np.concatenate([np.arange(q), np.full(total - q, -1)]))


def concatenate(datasets: Sequence[RankingDataset]) -> RankingDataset:
  r"""Concatenates datasets along the query axis (same ``L`` and ``F``; extras present in all).

  Args:
    datasets: the :class:`RankingDataset` s, of one ``L`` and ``F`` and with the same extras.

  Returns:
    One :class:`RankingDataset` with their queries in order.

  >>> ds = RankingDataset(features=np.ones((2, 3, 1), np.float32), labels=np.ones((2, 3), np.float32),
  ...     where=np.ones((2, 3), bool), qid=np.array([4, 5]))
  >>> print(concatenate([ds, ds]).num_queries)
  4
  """
  keys = set.intersection(*(set(d.extras) for d in datasets))
  doc_ids = [d.doc_ids for d in datasets if d.doc_ids is not None]
  has_ids = len(doc_ids) == len(datasets)  # every dataset has them
  return RankingDataset(
    features=np.concatenate([d.features for d in datasets]),
    labels=np.concatenate([d.labels for d in datasets]),
    where=np.concatenate([d.where for d in datasets]),
    qid=np.concatenate([d.qid for d in datasets]),
    doc_ids=np.concatenate(doc_ids) if has_ids else None,
    extras={k: np.concatenate([d.extras[k] for d in datasets]) for k in sorted(keys)},
  )


def train_valid_test_split(ds: RankingDataset, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0) -> Splits:
  r"""Splits the queries at random into train/valid/test (deterministic in ``seed``).

  With a permutation ``pi`` of the ``Q`` queries and boundaries
  ``b_k = round(Q * sum_{j<=k} f_j)``, split ``k`` holds ``pi[b_{k-1}:b_k]``,
  sorted back into file order. ``fractions`` must be non-negative and sum to
  at most 1 (the rest is dropped).

  Args:
    ds: a :class:`RankingDataset`.
    fractions: the three splits' shares of the queries (non-negative, summing to at most 1).
    seed: the permutation's seed.

  Returns:
    The :class:`Splits` ``(train, valid, test)``.

  Raises:
    ValueError: ``fractions`` is not three non-negative numbers summing to at most 1.

  >>> ds = RankingDataset(features=np.zeros((10, 2, 1), np.float32), labels=np.zeros((10, 2), np.float32),
  ...     where=np.ones((10, 2), bool), qid=np.arange(10))
  >>> s = train_valid_test_split(ds, (0.6, 0.2, 0.2), seed=0)
  >>> print(len(s.train), len(s.valid), len(s.test))
  6 2 2
  """
  f = np.asarray(fractions, np.float64)
  if f.shape != (3,) or np.any(f < 0) or f.sum() > 1 + 1e-9:
    raise ValueError(f"fractions must be 3 non-negative numbers summing to <= 1, got {fractions}")
  q = ds.num_queries
  perm = np.random.default_rng(seed).permutation(q)
  bounds = np.round(np.cumsum(f) * q).astype(np.int64).clip(0, q)
  parts, lo = [], 0
  for hi in bounds:
    parts.append(ds.subset(np.sort(perm[lo:hi])))
    lo = hi
  return Splits(*parts)


def batches(
  ds: RankingDataset,
  batch_size: int,
  *,
  seed: Optional[int] = None,
  shuffle: bool = True,
  epochs: Optional[int] = 1,
  drop_qid: bool = False,
) -> Iterator[dict]:
  r"""Yields fixed-shape batch dicts (:meth:`RankingDataset.as_batch`) of ``batch_size`` queries.

  Every batch has shape ``[batch_size, L, ...]``: the last partial batch of
  an epoch is padded with all-masked queries (``where`` False, ``qid`` -1),
  never dropped, so a jitted step compiles once. With ``shuffle`` each epoch
  uses a fresh permutation drawn from ``np.random.default_rng(seed)``
  (``seed=None`` means 0), so the order is reproducible. ``epochs=None``
  repeats forever; the number of batches per epoch is ``ceil(Q / batch_size)``.

  Args:
    ds: the :class:`RankingDataset` to batch.
    batch_size: queries per batch.
    seed: the shuffle's seed (None: 0).
    shuffle: draw a fresh permutation of the queries every epoch.
    epochs: the number of passes (None: forever).
    drop_qid: leave the ``qid`` key out of the batches.

  Returns:
    An iterator of batch dicts, each ``[batch_size, L, ...]``.

  Raises:
    ValueError: ``batch_size`` < 1.

  >>> ds = RankingDataset(features=np.zeros((5, 2, 1), np.float32), labels=np.zeros((5, 2), np.float32),
  ...     where=np.ones((5, 2), bool), qid=np.arange(5))
  >>> bs = list(batches(ds, 2, seed=0))
  >>> print(len(bs), bs[-1]["where"].shape, int(sum(b["where"].sum() for b in bs)))
  3 (2, 2) 10
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  q = ds.num_queries
  rng = np.random.default_rng(0 if seed is None else seed)
  epoch = 0
  while epochs is None or epoch < epochs:
    order = rng.permutation(q) if shuffle else np.arange(q)
    n = -(-q // batch_size) * batch_size
    order = np.concatenate([order, np.full(n - q, -1, np.int64)])
    for a in range(0, n, batch_size):
      batch = take_queries(ds, order[a : a + batch_size]).as_batch()
      if drop_qid:
        batch.pop("qid")
      yield batch
    epoch += 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
  """SplitMix64's finaliser (Steele, Lea & Flood, OOPSLA'14), elementwise on ``uint64`` (wrapping)."""
  x = x + np.uint64(0x9E3779B97F4A7C15)
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def held_out_sessions(sessions, *, fraction: float, seed: int = 0) -> np.ndarray:
  r"""Which sessions are held out (the test split): a deterministic function of each session's id and ``seed``.

  .. math::
      \text{held out}(s) \iff 2^{-53} \lfloor h(h(\text{seed}) \oplus s) / 2^{11} \rfloor < \text{fraction}

  with :math:`h` SplitMix64's finaliser. A session's side depends on nothing else (not on the order,
  the batching, the shards or the process that reads it), so a log split in memory and the same log
  split batch by batch over a stream agree exactly; the held-out share is ``fraction`` in expectation.

  Args:
    sessions: ``int[...]`` session ids (non-negative: the ``session`` index of
      :class:`~ultr_jax.data.SessionStream` batches, the rows of
      :func:`~ultr_jax.data.click_log_sessions`); negative ids (padding) are never held out.
    fraction: the held-out share, in ``[0, 1]``.
    seed: the split's seed.

  Returns:
    ``bool[...]``.

  Raises:
    ValueError: ``fraction`` is outside ``[0, 1]``, or ``sessions`` are not integers.

  >>> held_out_sessions(np.arange(8), fraction=0.5, seed=0).tolist()
  [False, True, False, False, True, True, True, True]
  >>> float(held_out_sessions(np.arange(100000), fraction=0.2, seed=1).mean())
  0.1991
  """
  if not 0.0 <= float(fraction) <= 1.0:
    raise ValueError(f"fraction must be in [0, 1], got {fraction}")
  s = np.asarray(sessions)
  if not np.issubdtype(s.dtype, np.integer):
    raise ValueError(f"sessions must be integer ids, got {s.dtype}")
  key = _splitmix64(np.asarray([int(seed) & (2**64 - 1)], np.uint64))[0]
  h = _splitmix64(s.astype(np.int64).astype(np.uint64) ^ key)
  u = (h >> np.uint64(11)).astype(np.float64) * 2.0**-53
  return (u < float(fraction)) & (s >= 0)
