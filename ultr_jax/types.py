"""Shared types and the batch layout used across ultr_jax.

A batch of ranked lists is a ``dict`` of arrays whose trailing axis is the
list (``[..., list_size]``; features ``[..., list_size, num_features]``),
padded to a fixed ``list_size`` and masked by the bool array ``where``.
Item ``i`` of a list is the document displayed at position ``i`` (0-based)
by the logging policy, unless the batch carries an explicit ``positions``.

Standard keys (all optional except ``where``):

==============  ==========================  =====================================
key             shape / dtype               meaning
==============  ==========================  =====================================
``features``    ``[..., L, F]`` float32     query-document ranking features
``where``       ``[..., L]`` bool           True for real items, False for padding
``labels``      ``[..., L]`` float32        graded relevance 0..4 (evaluation only)
``positions``   ``[..., L]`` int32          0-based displayed rank
``clicks``      ``[..., L]`` float32        0/1 clicks (or CTRs in aggregated mode)
``examination`` ``[..., L]`` float32        true examination probability (oracle
                                            propensity; from the simulator)
``doc_ids``     ``[..., L]`` int32          document ids, -1 for padding
``qid``         ``[...]`` int32             query ids
``shown``       ``[..., L]`` bool           top-k selection indicator (CLD)
``context``     ``[...]`` int32             context type (context-dependent PBM)
==============  ==========================  =====================================
"""

from typing import Any, Mapping

import jax

Array = jax.Array
Batch = Mapping[str, Array]
Params = Any
PRNGKey = jax.Array

__all__ = ["Array", "Batch", "Params", "PRNGKey"]
