r"""Fully synthetic datasets with a prescribed IG (Chen et al., ICML 2024, 5.1).

The paper's datasets have 10,000 one-hot documents, 1,150 queries of 10
documents and an IG with ``K = 1..4`` components over the 10 positions
(Figure 5). Their generator is not described; this one reproduces the
structure found in the authors' published files: documents fall in 10
blocks of 1,000, position ``p`` shows every document of block ``p`` once
plus ``borrow`` documents from each block ``q`` adjacent to ``p`` in a
*design graph* ``H`` on the positions (the rest of its slots repeat its own
block), so the IG of the data is exactly ``H``. Labels are drawn i.i.d. per
document.
"""

from typing import Optional, Sequence

import numpy as np

from ultr_jax.data.dataset import RankingDataset

__all__ = ["DESIGN_GRAPHS", "LABEL_PROBS", "generate_design_dataset"]

#: Design graphs on the 10 positions (edges), for K = 1..4 components: the
#: published graphs for K = 1, 2 and the published components for K = 3, 4.
DESIGN_GRAPHS = {
  1: [
    (0, 1),
    (0, 2),
    (0, 3),
    (1, 3),
    (1, 4),
    (3, 4),
    (3, 5),
    (4, 5),
    (4, 6),
    (5, 6),
    (5, 7),
    (6, 7),
    (6, 8),
    (6, 9),
    (7, 8),
    (7, 9),
    (8, 9),
  ],
  2: [
    (0, 1),
    (0, 2),
    (0, 3),
    (1, 2),
    (1, 3),
    (4, 5),
    (4, 6),
    (5, 6),
    (5, 7),
    (6, 7),
    (6, 8),
    (6, 9),
    (7, 8),
    (7, 9),
    (8, 9),
  ],
  3: [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (4, 5), (4, 6), (5, 6), (7, 8), (7, 9), (8, 9)],
  4: [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5), (6, 7), (8, 9)],
}

#: Label distribution over unique documents in the published data.
LABEL_PROBS = (0.386, 0.343, 0.222, 0.036, 0.014)


def generate_design_dataset(
  edges: Sequence[tuple[int, int]],
  *,
  seed: int = 0,
  num_positions: int = 10,
  block_size: int = 1000,
  num_queries: int = 1150,
  borrow: int = 50,
  label_probs: Optional[Sequence[float]] = None,
) -> RankingDataset:
  r"""A dataset whose IG over positions equals the design graph ``edges``.

  Column ``p`` of the ``[num_queries, num_positions]`` display table holds a
  permutation of block ``p`` (``block_size`` documents, ids
  ``p * block_size + i``), ``borrow`` uniform draws from every neighbour's
  block, and repeats of its own block; columns are shuffled independently
  and no list shows a document twice.

  Args:
    edges: design-graph edges between positions.
    seed: NumPy seed.
    num_positions, block_size, num_queries, borrow: sizes (``num_queries >
      block_size``; a position borrows ``min(borrow, (num_queries -
      block_size) // degree)`` documents from each neighbour).
    label_probs: distribution of the 5-level labels (default
      ``LABEL_PROBS``).

  Returns:
    A :class:`RankingDataset` with ``doc_ids``, ``labels``, ``positions``
    and an empty feature axis (documents are one-hot).

  >>> ds = generate_design_dataset(DESIGN_GRAPHS[2], block_size=50,
  ...                              num_queries=70, borrow=3)
  >>> ds.doc_ids.shape, int(ds.doc_ids.max()) < 500
  ((70, 10), True)
  """
  rng = np.random.default_rng(seed)
  probs = np.asarray(label_probs or LABEL_PROBS, np.float64)
  probs = probs / probs.sum()
  num_docs = num_positions * block_size
  doc_label = rng.choice(len(probs), size=num_docs, p=probs).astype(np.float32)
  nbrs = [[] for _ in range(num_positions)]
  for a, b in edges:
    if a != b:
      nbrs[a].append(b)
      nbrs[b].append(a)
  table = np.empty((num_queries, num_positions), np.int64)
  for p in range(num_positions):
    own = p * block_size + rng.permutation(block_size)
    adj = sorted(set(nbrs[p]))
    spare = num_queries - block_size
    per = min(borrow, spare // max(len(adj), 1))
    if adj and per < 1:
      raise ValueError(
        f"num_queries={num_queries} leaves no slot of position {p} for its"
        f" {len(adj)} neighbours (block_size={block_size})"
      )
    borrowed = [q * block_size + rng.integers(0, block_size, per) for q in adj]
    fill = spare - per * len(adj)
    extra = p * block_size + rng.integers(0, block_size, fill)
    table[:, p] = rng.permutation(np.concatenate([own, *borrowed, extra]))
  # Remove repeated documents within a list by swapping with other rows.
  for _ in range(100):
    srt = np.sort(table, axis=1)
    bad_rows = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
    if bad_rows.size == 0:
      break
    for i in bad_rows:
      row = table[i]
      _, first = np.unique(row, return_index=True)
      dup_pos = np.setdiff1d(np.arange(num_positions), first)
      for p in dup_pos:
        j = rng.integers(num_queries)
        table[i, p], table[j, p] = table[j, p], table[i, p]
  doc_ids = table.astype(np.int32)
  return RankingDataset(
    features=np.zeros((num_queries, num_positions, 0), np.float32),
    labels=doc_label[doc_ids],
    where=np.ones((num_queries, num_positions), bool),
    qid=np.arange(num_queries, dtype=np.int64),
    doc_ids=doc_ids,
    extras={"positions": np.broadcast_to(np.arange(num_positions, dtype=np.int32), doc_ids.shape).copy()},
  )
