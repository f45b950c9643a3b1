r"""Records :math:`(x_i, t_i)` of the identifiability graph from ranked lists.

The IG (Chen et al., ICML 2024, Section 3) has one node per bias factor
:math:`t` and joins two factors shown with the same feature :math:`x`. For
logged lists ``[Q, L]`` the bias factor of the item at position :math:`p` is

* :math:`t = p` (position-based model), or
* :math:`t = c \cdot L + p` with a context type :math:`c` per displayed item
  (context-dependent PBM, Section 5.2; the paper draws
  :math:`c \sim U\{0..n_c-1\}` per query-document pair).

The feature :math:`x` is a document id, or the full feature vector (two
documents with identical vectors are one node of the bipartite graph).
"""

from typing import Optional

import numpy as np

__all__ = [
  "feature_vector_ids",
  "random_contexts",
  "bias_factor_ids",
  "bias_factor_names",
  "read_svmlight_ranking",
]


def feature_vector_ids(features: np.ndarray, where: Optional[np.ndarray] = None) -> tuple[np.ndarray, int]:
  r"""Ids of distinct feature vectors: :math:`x_i = x_j \iff f_i = f_j`.

  Args:
    features: ``float[..., F]`` feature vectors.
    where: optional ``bool[...]``; masked rows get id ``-1``.

  Returns:
    ``(ids int32[...], num_distinct)``, ids in ``[0, num_distinct)``.

  >>> f = np.array([[[1., 0.], [0., 1.]], [[1., 0.], [2., 2.]]])
  >>> ids, n = feature_vector_ids(f)
  >>> print(ids.tolist(), n)
  [[0, 1], [0, 2]] 3
  """
  f = np.ascontiguousarray(np.asarray(features, np.float32))
  lead = f.shape[:-1]
  rows = f.reshape(-1, f.shape[-1])
  m = np.ones(rows.shape[0], bool) if where is None else np.asarray(where, bool).reshape(-1)
  keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))
  keys = keys.reshape(-1)
  out = np.full(rows.shape[0], -1, np.int32)
  if m.any():
    _, first, inv = np.unique(keys[m], return_index=True, return_inverse=True)
    # Number the distinct vectors in order of first appearance.
    order = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    out[m] = order[inv.reshape(-1)]
    n = int(first.size)
  else:
    n = 0
  return out.reshape(lead), n


def random_contexts(num_queries: int, list_size: int, num_contexts: int, seed: int = 0) -> np.ndarray:
  r"""A random context type per displayed item, :math:`c \sim U\{0..n_c-1\}`.

  As in the paper's code: ``randint(0, n_context, size=(Q, L))`` with a seed.

  >>> random_contexts(2, 3, 5, seed=0).shape
  (2, 3)
  """
  rng = np.random.RandomState(seed)
  return rng.randint(0, num_contexts, size=(num_queries, list_size)).astype(np.int32)


def bias_factor_ids(positions: np.ndarray, contexts: Optional[np.ndarray] = None, *, list_size: int) -> np.ndarray:
  r"""Bias factor of each item: :math:`t = p` or :math:`t = c \cdot L + p`.

  >>> bias_factor_ids(np.array([[0, 1, 2]]), np.array([[0, 2, 1]]), list_size=3)
  array([[0, 7, 5]], dtype=int32)
  """
  p = np.asarray(positions, np.int64)
  if contexts is None:
    return p.astype(np.int32)
  return (np.asarray(contexts, np.int64) * list_size + p).astype(np.int32)


def bias_factor_names(num_factors: int, *, list_size: int, with_contexts: bool) -> list[str]:
  """Readable names: ``"p3"`` or ``"c12#p3"`` (context 12, position 3).

  >>> bias_factor_names(4, list_size=2, with_contexts=True)
  ['c0#p0', 'c0#p1', 'c1#p0', 'c1#p1']
  """
  if not with_contexts:
    return [f"p{t}" for t in range(num_factors)]
  return [f"c{t // list_size}#p{t % list_size}" for t in range(num_factors)]


def read_svmlight_ranking(path, *, list_size: int = 10, num_features: Optional[int] = None):
  r"""Reads an SVMlight/LETOR file whose line order per query is the ranking.

  Lines are ``label qid:Q idx:val ...`` (1-based indices, as in LETOR); the
  first ``list_size`` lines of every query are its displayed list, position
  ``i`` being its ``i``-th line. Comments after ``#`` are ignored.

  Returns:
    ``(features float32[Q, L, F], labels float32[Q, L], where bool[Q, L],
    qid int64[Q])``.

  Raises:
    ValueError: naming the file, line and field on malformed input.

  >>> import tempfile, os
  >>> p = os.path.join(tempfile.mkdtemp(), "t.txt")
  >>> _ = open(p, "w").write("2 qid:1 1:0.5 3:1\n0 qid:1 2:1\n1 qid:4 1:1\n")
  >>> f, y, w, q = read_svmlight_ranking(p, list_size=2)
  >>> print(f.shape, y.tolist(), q.tolist())
  (2, 2, 3) [[2.0, 0.0], [1.0, 0.0]] [1, 4]
  """
  order, per_q = [], {}
  width = 0
  with open(path) as fh:
    for line_no, line in enumerate(fh, 1):
      line = line.split("#", 1)[0].split()
      if not line:
        continue
      try:
        label = float(line[0])
      except ValueError:
        raise ValueError(f"{path}:{line_no}: field 'label': {line[0]!r}") from None
      if len(line) < 2 or not line[1].startswith("qid:"):
        raise ValueError(f"{path}:{line_no}: field 'qid': missing qid:")
      try:
        q = int(line[1][4:])
      except ValueError:
        raise ValueError(f"{path}:{line_no}: field 'qid': {line[1]!r}") from None
      feats = []
      for tok in line[2:]:
        k, sep, v = tok.partition(":")
        try:
          if not sep:
            raise ValueError
          k, v = int(k), float(v)
          if k < 1:
            raise ValueError
        except ValueError:
          raise ValueError(f"{path}:{line_no}: field 'feature': bad token {tok!r}") from None
        feats.append((k - 1, v))
        width = max(width, k)
      if q not in per_q:
        per_q[q] = []
        order.append(q)
      if len(per_q[q]) < list_size:
        per_q[q].append((label, feats))
  f_dim = num_features or width
  nq = len(order)
  features = np.zeros((nq, list_size, f_dim), np.float32)
  labels = np.zeros((nq, list_size), np.float32)
  where = np.zeros((nq, list_size), bool)
  for i, q in enumerate(order):
    for j, (y, feats) in enumerate(per_q[q]):
      labels[i, j] = y
      where[i, j] = True
      for k, v in feats:
        if k < f_dim:
          features[i, j, k] = v
  return features, labels, where, np.asarray(order, np.int64)
