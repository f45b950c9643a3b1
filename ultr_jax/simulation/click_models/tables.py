r"""Parameter tables: one logit per document, fewer rows shared by compression, or a module of features.

How a per-document parameter (a click model's ``attraction``, the DBN's ``satisfaction``) is stored: one logit
per document, compressed into fewer rows, or computed from the document's features.

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
* :class:`FeatureTable`: no rows at all: :math:`\theta_d = f_\phi(x_d)`, a flax module applied to the
  document's features, whose few parameters :math:`\phi` every document shares (a document never seen in
  training gets its logit from its features; the parameters do not grow with the number of documents).

The row map runs on the host (NumPy): :class:`~ultr_jax.simulation.Minibatch` computes each
batch's rows where it prepares the batch and updates only the rows a batch touches (a feature table's rows of
features are looked up there the same way, and its module's parameters take dense steps).
"""

import dataclasses
import functools
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ultr_jax.types import Array

__all__ = ["ParameterTable", "FullTable", "HashedTable", "QuotientRemainderTable", "FeatureTable", "table_logits"]


@dataclasses.dataclass(frozen=True)
class ParameterTable:
  """Base class: a map from document ids to rows of one logit vector (see the module docstring)."""

  #: Rows summed per document (:math:`P`).
  rows_per_doc = 1
  #: Whether the parameter is computed from the documents' features by a module (:class:`FeatureTable`) rather
  #: than summed from rows of a logit vector.
  from_features = False

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


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureTable(ParameterTable):
  r"""A per-document logit computed from the document's features by a flax module,
  :math:`\theta_d = f_\phi(x_d)`.

  Click models whose parameters are computed from features by a network are CLAX's (Hager et al. 2025, "CLAX:
  Fast and flexible neural click models in JAX"); with a ``flax.linen.Dense`` layer of one output, :math:`f_\phi(x) = w^\top x + b`. The table holds the
  features of every document id on the host, ``float[D, F]`` (a NumPy array or ``np.memmap``); a fit looks up
  the rows of each batch's documents there, as ``[B, L, F]`` (the library's layout), where it prepares the batch.
  Two tables are equal only if they are the same object.

  Attributes:
    module: a ``flax.linen.Module`` mapping ``float32[..., F]`` to ``[..., 1]`` or ``[...]`` logits.
    features: ``float[D, F]``: row :math:`d` is document :math:`d`'s features (also those of documents no
      training batch shows: their logits are :math:`f_\phi(x_d)` all the same).

  >>> import flax.linen as nn
  >>> t = FeatureTable(nn.Dense(1), np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], np.float32))
  >>> params = t.init(jax.random.key(0))
  >>> w, b = params["params"]["kernel"][:, 0], params["params"]["bias"][0]
  >>> new = np.array([[3.0, -1.0]], np.float32)  # a document the table has never seen
  >>> print(t.logits(params, new).shape, np.allclose(t.logits(params, new), new @ w + b))
  (1,) True
  >>> t.num_rows(3), t.lookup(np.array([[2, 0]])).shape
  (0, (1, 2, 2))
  """

  module: Any
  features: Any
  from_features = True
  rows_per_doc = 0

  __hash__ = object.__hash__  # identity (the features are an array)

  def __eq__(self, other: object) -> bool:
    return self is other

  def __post_init__(self):
    if np.ndim(self.features) != 2:
      raise ValueError(f"FeatureTable: features must be [num_docs, F], got shape {np.shape(self.features)}")

  def num_rows(self, num_docs: int) -> int:
    """0: the table has no per-document rows (its parameters are the module's)."""
    del num_docs
    return 0

  def rows(self, doc_ids: np.ndarray) -> np.ndarray:
    raise TypeError("FeatureTable has no rows: its logits are computed from features (lookup, logits)")

  def lookup(self, doc_ids: np.ndarray) -> np.ndarray:
    """The features of ``doc_ids``, read on the host (what a fit does for each batch).

    Args:
      doc_ids: ``int[...]`` document ids (e.g. a batch's ``[B, L]``).

    Returns:
      ``float32[..., F]``.

    Raises:
      ValueError: an id past the features' rows, naming it and the row count.
    """
    doc_ids = np.asarray(doc_ids, np.int64)
    n = np.shape(self.features)[0]
    if doc_ids.size and (doc_ids.max() >= n or doc_ids.min() < 0):
      bad = int(doc_ids.max() if doc_ids.max() >= n else doc_ids.min())
      raise ValueError(f"FeatureTable: document id {bad}, but the features have rows for ids 0..{n - 1}")
    return np.asarray(self.features[doc_ids.ravel()], np.float32).reshape(doc_ids.shape + (-1,))

  def init(self, key: jax.Array) -> Any:
    """The module's initial parameters.

    Args:
      key: PRNG key of ``module.init`` (applied to one row of the features).

    Returns:
      the module's variables (a pytree, ``{"params": ...}``).
    """
    return self.module.init(key, jnp.asarray(np.asarray(self.features[:1], np.float32)))

  def logits(self, params: Any, features: Any) -> jax.Array:
    r"""The logits :math:`f_\phi(x)` of any documents' features, seen in training or not (cold start).

    Args:
      params: the module's variables (:meth:`init`, or a fit's ``feature_params[name]``).
      features: ``float[..., F]``.

    Returns:
      ``float32[...]``.
    """
    out = self.module.apply(params, jnp.asarray(features, jnp.float32))
    return out[..., 0] if out.ndim == jnp.ndim(features) else out

  def document_logits(self, params: Any, num_docs: int, chunk: int = 1 << 16) -> jax.Array:
    """The logits of documents ``0..num_docs - 1`` from their rows of ``features``.

    Args:
      params: the module's variables.
      num_docs: ``D`` (at most the features' rows).
      chunk: rows applied at a time (each chunk's logits are written in place into the one ``[D]`` output).

    Returns:
      ``float32[D]``.
    """
    if np.shape(self.features)[0] < num_docs:
      raise ValueError(f"FeatureTable: {num_docs} documents, but features for {np.shape(self.features)[0]}")
    apply = jax.jit(self.logits)
    out = _fill(int(num_docs), chunk, lambda start, stop: {"": apply(params, self.lookup(np.arange(start, stop)))})
    return out.get("", jnp.zeros(0, jnp.float32))


#: Documents whose logits :func:`table_logits` maps at a time: its work space is a few arrays of this length
#: (the row map's ``int64`` temporaries), besides the one ``[D]`` output each table's logits are written into.
_CHUNK = 1 << 16


@functools.partial(jax.jit, donate_argnums=(0,))
def _put(out: jax.Array, values: jax.Array, start) -> jax.Array:
  """``out[start : start + len(values)] = values``, in place (``out`` donated)."""
  return jax.lax.dynamic_update_slice(out, values.astype(out.dtype), (start,))


@jax.jit
def _row_sums(vector: jax.Array, rows: jax.Array) -> jax.Array:
  return jnp.sum(vector[rows], axis=-1)


def _row_logits(table: ParameterTable, vectors: Mapping[str, jax.Array], num_docs: int) -> dict:
  """:math:`\\sum_p v_{r_p(d)}` of documents ``0..num_docs - 1`` for each of ``vectors`` (tables equal to
  ``table``), their rows mapped once per chunk of ``_CHUNK`` ids."""

  def chunk(start: int, stop: int) -> dict:
    rows = table.rows(np.arange(start, stop)).astype(np.int32)
    return {k: _row_sums(v, rows) for k, v in vectors.items()}

  out = _fill(num_docs, _CHUNK, chunk)
  return {k: out.get(k, jnp.zeros(0, jnp.float32)) for k in vectors}


def _fill(num_docs: int, chunk: int, values: Callable[[int, int], Mapping[str, jax.Array]]) -> dict:
  """Name -> one ``[num_docs]`` array (the dtype of its first chunk) of ``values(start, stop)[name]`` over the
  chunks ``[start, stop)`` of ``chunk`` ids, each written in place: no chunk list to concatenate, no second copy
  (empty for ``num_docs = 0``)."""
  if chunk < 1:
    raise ValueError(f"table logits: chunk must be >= 1, got {chunk}")
  out = {}
  for start in range(0, num_docs, chunk):
    for k, part in values(start, min(start + chunk, num_docs)).items():
      out[k] = _put(out[k] if k in out else jnp.zeros(num_docs, part.dtype), part, start)
  return out


def table_logits(tables: Mapping[str, ParameterTable], vectors: Mapping[str, Array], num_docs: int) -> dict:
  r"""Every document's logit :math:`\theta_d = \sum_p v_{r_p(d)}` of each table, ``float32[num_docs]``.

  The documents' rows are mapped ``_CHUNK`` ids at a time (once for all the equal tables) and each chunk's
  logits written in place into the table's one output array, so the work space beyond the outputs is a few
  arrays of ``_CHUNK`` entries, whatever ``num_docs`` (a :class:`FullTable`'s logits are its vector's first
  ``num_docs`` entries: no copy when it has exactly that many).

  Args:
    tables: name -> :class:`ParameterTable`.
    vectors: name -> its logit vector ``[num_rows]`` (a :class:`FeatureTable`'s: its module's parameters).
    num_docs: ``D``.

  Returns:
    dict name -> ``float32[D]``.

  >>> t = {"attraction": QuotientRemainderTable(num_buckets=2)}
  >>> print(table_logits(t, {"attraction": jnp.array([0.0, 1.0, 10.0, 20.0])}, 4)["attraction"])
  [10. 11. 20. 21.]
  """
  num_docs = int(num_docs)
  out, equal = {}, {}  # equal: the first name of each distinct table of rows -> the names of the tables equal to it
  for k, t in tables.items():
    if t.from_features:
      assert isinstance(t, FeatureTable)  # the tables computed from features
      out[k] = t.document_logits(vectors[k], num_docs)
    elif type(t) is FullTable:
      out[k] = jnp.asarray(vectors[k], jnp.float32)[:num_docs]
    else:
      equal.setdefault(next((j for j in equal if tables[j] == t), k), []).append(k)
  for first, names in equal.items():
    out.update(_row_logits(tables[first], {k: jnp.asarray(vectors[k], jnp.float32) for k in names}, num_docs))
  return {k: out[k] for k in tables}
