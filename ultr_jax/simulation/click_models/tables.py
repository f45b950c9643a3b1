r"""Parameter tables: how a per-document parameter (a click model's ``attraction``, the DBN's ``satisfaction``)
is stored, one logit per document or compressed into fewer rows.

A table maps each document id :math:`d` to :math:`P` rows :math:`r_1(d), \dots, r_P(d)` of one vector
:math:`v` of :meth:`ParameterTable.num_rows` logits, and the document's logit is their sum:

.. math::
    \theta_d = \sum_{p=1}^{P} v_{r_p(d)}

* :class:`FullTable`: one row per document (:math:`P = 1`, :math:`r_1(d) = d`), the click models' own layout.
* :class:`HashedTable`: the hashing trick (Weinberger et al. ICML'09, "Feature hashing for large scale multitask
  learning", Eq. 1 without the sign hash): :math:`r_1(d) = h(d) \bmod m`, ``m`` rows shared by colliding
  documents.
* :class:`QuotientRemainderTable`: the quotient-remainder trick (Shi et al. KDD'20, "Compositional embeddings
  using complementary partitions", Sec. 3.1, combined by a sum): :math:`r_1(d) = d \bmod m`,
  :math:`r_2(d) = m + \lfloor d / m \rfloor`, so every document has its own pair of rows out of
  :math:`m + \lceil D / m \rceil`.

The row map runs on the host (NumPy): :func:`~ultr_jax.simulation.fit_click_model_minibatch` computes each
batch's rows where it prepares the batch and updates only the rows a batch touches.
"""

import dataclasses
from typing import Mapping

import jax.numpy as jnp
import numpy as np

from ultr_jax.types import Array

__all__ = ["ParameterTable", "FullTable", "HashedTable", "QuotientRemainderTable", "table_logits"]


@dataclasses.dataclass(frozen=True)
class ParameterTable:
  """Base class: a map from document ids to rows of one logit vector (see the module docstring)."""

  #: Rows summed per document (:math:`P`).
  rows_per_doc = 1

  def num_rows(self, num_docs: int) -> int:
    """The length of the logit vector for ``num_docs`` documents."""
    raise NotImplementedError

  def rows(self, doc_ids: np.ndarray) -> np.ndarray:
    """``int64[..., P]``: the rows of each document id (host side)."""
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class FullTable(ParameterTable):
  """One row per document.

  >>> FullTable().rows(np.array([3, 0])).tolist(), FullTable().num_rows(5)
  ([[3], [0]], 5)
  """

  def num_rows(self, num_docs: int) -> int:
    return int(num_docs)

  def rows(self, doc_ids: np.ndarray) -> np.ndarray:
    return np.asarray(doc_ids, np.int64)[..., None]


#: Multiplier of the 64-bit mixing hash (2^64 / golden ratio, odd).
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
  """A 64-bit mixing function (the finaliser of SplitMix64, Steele et al. OOPSLA'14) on ``uint64``."""
  x = x ^ (x >> np.uint64(30))
  x = x * np.uint64(0xBF58476D1CE4E5B9)
  x = x ^ (x >> np.uint64(27))
  x = x * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


@dataclasses.dataclass(frozen=True)
class HashedTable(ParameterTable):
  """The hashing trick: ``num_buckets`` rows, document :math:`d` at :math:`h(d) \\bmod m`.

  Attributes:
    num_buckets: ``m``.
    seed: varies the hash.

  >>> t = HashedTable(num_buckets=1000)
  >>> t.num_rows(10**6), t.rows(np.arange(3)).ravel().tolist()
  (1000, [0, 535, 700])
  >>> np.bincount(t.rows(np.arange(10**5)).ravel()).std() < 1.2 * np.sqrt(100)  # about Poisson's spread
  np.True_
  """

  num_buckets: int
  seed: int = 0

  def __post_init__(self):
    if self.num_buckets < 1:
      raise ValueError(f"HashedTable: num_buckets must be >= 1, got {self.num_buckets}")

  def num_rows(self, num_docs: int) -> int:
    del num_docs
    return int(self.num_buckets)

  def rows(self, doc_ids: np.ndarray) -> np.ndarray:
    x = np.asarray(doc_ids, np.int64).astype(np.uint64) + np.uint64(self.seed)
    with np.errstate(over="ignore"):
      h = _mix(x * _GOLDEN)
    return (h % np.uint64(self.num_buckets)).astype(np.int64)[..., None]


@dataclasses.dataclass(frozen=True)
class QuotientRemainderTable(ParameterTable):
  """The quotient-remainder trick: document :math:`d` sums rows :math:`d \\bmod m` and
  :math:`m + \\lfloor d / m \\rfloor`.

  Attributes:
    num_buckets: ``m`` (about :math:`\\sqrt{D}` makes the fewest rows, :math:`2\\sqrt{D}`).

  >>> t = QuotientRemainderTable(num_buckets=3)
  >>> t.num_rows(7), t.rows(np.array([0, 4, 6])).tolist()
  (6, [[0, 3], [1, 4], [0, 5]])
  """

  num_buckets: int
  rows_per_doc = 2

  def __post_init__(self):
    if self.num_buckets < 1:
      raise ValueError(f"QuotientRemainderTable: num_buckets must be >= 1, got {self.num_buckets}")

  def num_rows(self, num_docs: int) -> int:
    return int(self.num_buckets + -(-int(num_docs) // self.num_buckets))

  def rows(self, doc_ids: np.ndarray) -> np.ndarray:
    d = np.asarray(doc_ids, np.int64)
    return np.stack([d % self.num_buckets, self.num_buckets + d // self.num_buckets], axis=-1)


def table_logits(tables: Mapping[str, ParameterTable], vectors: Mapping[str, Array], num_docs: int) -> dict:
  r"""Every document's logit :math:`\theta_d = \sum_p v_{r_p(d)}` of each table, ``float32[num_docs]``.

  Args:
    tables: name -> :class:`ParameterTable`.
    vectors: name -> its logit vector ``[num_rows]``.
    num_docs: ``D``.

  Returns:
    dict name -> ``float32[D]``.

  >>> t = {"attraction": QuotientRemainderTable(num_buckets=2)}
  >>> print(table_logits(t, {"attraction": jnp.array([0.0, 1.0, 10.0, 20.0])}, 4)["attraction"])
  [10. 11. 20. 21.]
  """
  ids = np.arange(int(num_docs))
  out = {}
  for k, t in tables.items():
    v = jnp.asarray(vectors[k], jnp.float32)
    out[k] = v[: int(num_docs)] if type(t) is FullTable else jnp.sum(v[t.rows(ids)], axis=-1)
  return out
