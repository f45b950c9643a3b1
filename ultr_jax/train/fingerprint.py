"""Fingerprints: what shapes a :func:`~ultr_jax.train.fit` run, so that a checkpoint of another run is never
resumed."""

import json
from typing import Any, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax._fingerprint import arrays_digest, digest
from ultr_jax.data import RankingDataset
from ultr_jax.train import results as results_lib
from ultr_jax.train.defaults import NOT_FINGERPRINTED, with_defaults
from ultr_jax.train.method import Method
from ultr_jax.types import ClickFn

__all__ = ["run_fingerprint", "make_fingerprint", "dataset_digest", "stream_digest", "canonical"]


def canonical(value: Any) -> Any:
  """``value`` as plain JSON types (tuples as lists, NumPy scalars as numbers), for comparison."""
  return json.loads(json.dumps(results_lib._jsonable(value), sort_keys=True, default=str))


def dataset_digest(ds: Optional[RankingDataset]) -> Optional[dict]:
  """The shapes of ``ds``'s arrays and a digest of all of their content (:func:`arrays_digest`).

  Args:
    ds: the lists (None: None).

  Returns:
    ``{"shapes": {name: shape}, "digest": str}``.

  >>> from ultr_jax import data
  >>> ds = data.make_synthetic(num_train=4, num_valid=1, num_test=1, list_size=3, num_features=2).train
  >>> dataset_digest(ds)["shapes"]["features"]
  [4, 3, 2]
  """
  if ds is None:
    return None
  arrays = ds.as_batch()
  return {"shapes": {k: list(np.shape(v)) for k, v in sorted(arrays.items())}, "digest": arrays_digest(arrays)}


def _click_digest(click_fn: Optional[ClickFn], batch: Mapping[str, jax.Array]) -> Optional[str]:
  """A digest of what ``click_fn`` makes of ``batch`` under a fixed key (its outputs rounded to 5 decimals),
  so that another click model, or other parameters of it, give another digest."""
  if click_fn is None:
    return None
  out = jax.device_get(click_fn(jax.random.key(0), batch))
  return digest(*(x for k in sorted(out) for x in (k, np.round(np.asarray(out[k], np.float64), 5))))


def _across_processes(part: Any) -> Any:
  """``part`` on one process; in a multi-process run, where each process digests its own share of the data
  (``config.local_data``, a stream per process), the digest of every process's ``part`` in process order, the
  same on all of them (an all-gather), so that every process accepts or refuses a checkpoint alike."""
  if jax.process_count() == 1 or part is None:
    return part
  from jax.experimental import multihost_utils  # noqa: PLC0415

  mine = np.frombuffer(digest(part).encode("ascii"), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))
  return {"processes": int(jax.process_count()), "digest": digest(every)}


def run_fingerprint(
  method: Method,
  train: RankingDataset,
  valid: Optional[RankingDataset] = None,
  *,
  click_fn: Optional[ClickFn] = None,
  config: Optional[ml_collections.ConfigDict] = None,
  seeds: Sequence[int] = (0,),
) -> dict:
  """What shapes a :func:`fit` run: the method (name, full config, initial state's shapes), the data, the clicks
  and the training config; a checkpoint records it, and one whose fingerprint differs is not resumed.

  ``hash`` digests the rest. Fields of the training config that do not change what is computed
  (``progress``, ``eval_batch_size``, ``steps``, ...) are left out, so a finished run can be extended.

  Args:
    method: the :class:`~ultr_jax.train.Method` (its name, config and initial state's shapes).
    train: the training :class:`~ultr_jax.data.RankingDataset`, or a stream (its ``identity()`` and first batch).
    valid: the validation dataset (None: none).
    click_fn: the click simulator (None: the logged clicks).
    config: the training config (None: the defaults); fields that do not change what is computed are left out.
    seeds: the seeds trained.

  Returns:
    The fingerprint dict, with its ``hash``.

  >>> from ultr_jax import data
  >>> from ultr_jax.train import fingerprint_diff, get_method
  >>> splits = data.make_synthetic(num_train=8, num_valid=2, num_test=2, list_size=4, num_features=3)
  >>> m = get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)
  >>> a = run_fingerprint(m, splits.train)
  >>> b = run_fingerprint(m, splits.train, config={"learning_rate": 0.5})
  >>> fingerprint_diff(a, b)
  ['train_config.learning_rate']
  """
  config = with_defaults(config)
  batch = {k: jnp.asarray(v) for k, v in train.as_batch(np.arange(min(8, train.num_queries))).items() if k != "qid"}
  return make_fingerprint(method, batch, dataset_digest(train), valid, click_fn, config, seeds)


def make_fingerprint(method, batch, train_digest, valid, click_fn, config, seeds) -> dict:
  key = jax.random.key(0)
  shapes = jax.eval_shape(lambda k, b: method.init(k, b), key, batch)
  leaves = jax.tree_util.tree_leaves_with_path(shapes)
  fp = {
    "method": method.name,
    "method_config": canonical(method.config) if method.config is not None else None,
    "method_state": digest([(jax.tree_util.keystr(p), list(x.shape), str(x.dtype)) for p, x in leaves]),
    # data_shards=0 (the default) is left out, so fingerprints made before the key existed still match.
    "train_config": canonical(
      {k: v for k, v in config.items() if k not in NOT_FINGERPRINTED and not (k == "data_shards" and not v)}
    ),
    "seeds": [int(s) for s in seeds],
    "train_data": _across_processes(train_digest),
    "valid_data": dataset_digest(valid),
    "clicks": _across_processes(_click_digest(click_fn, batch)),
  }
  fp["hash"] = digest(fp)
  return fp


def stream_digest(source: Any, first: Mapping[str, np.ndarray]) -> dict:
  """What identifies a stream of training batches: its ``identity()`` (where it has one: the data it reads and
  every option that changes its batches, :mod:`ultr_jax.data`'s streams), its type, and the first batch's
  shapes and full content (:func:`arrays_digest`), so that a run over other data is never resumed from another's
  checkpoint and stream position.

  Args:
    source: the stream (an iterable of batches), at its start.
    first: its first batch ``{name: [B, ...]}``.

  Returns:
    ``{"stream": type name, "identity": str or None, "batch_shapes": {name: shape}, "first_batch": digest}``.

  >>> d = stream_digest([], {"where": np.ones((2, 3), bool)})
  >>> d["stream"], d["identity"], d["batch_shapes"]
  ('list', None, {'where': [2, 3]})
  """
  identity = getattr(source, "identity", None)
  return {
    "stream": type(source).__name__,
    "identity": str(identity()) if callable(identity) else None,
    "batch_shapes": {k: list(np.shape(v)) for k, v in first.items()},
    "first_batch": arrays_digest(first),
  }
