"""Fingerprints: what shapes a :func:`~ultr_jax.train.fit` run, so that a checkpoint of another run is never
resumed."""

import hashlib
import json
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from ultr_jax.data import RankingDataset
from ultr_jax.train import results as results_lib
from ultr_jax.train.defaults import NOT_FINGERPRINTED, with_defaults
from ultr_jax.train.method import Method

__all__ = ["run_fingerprint", "fingerprint_diff", "make_fingerprint", "dataset_digest", "stream_digest", "canonical"]

ClickFn = Callable[[jax.Array, Mapping[str, jax.Array]], Mapping[str, jax.Array]]


def canonical(value: Any) -> Any:
  """``value`` as plain JSON types (tuples as lists, NumPy scalars as numbers), for comparison."""
  return json.loads(json.dumps(results_lib._jsonable(value), sort_keys=True, default=str))


def _digest(*parts: Any) -> str:
  h = hashlib.sha256()
  for part in parts:
    if isinstance(part, np.ndarray):
      h.update(str((part.shape, part.dtype.str)).encode())
      h.update(np.ascontiguousarray(part).tobytes())
    else:
      h.update(json.dumps(part, sort_keys=True, default=str).encode())
  return h.hexdigest()[:16]


def dataset_digest(ds: Optional[RankingDataset]) -> Optional[dict]:
  """Shapes of ``ds``'s arrays and a cheap content digest: up to 64 evenly spaced queries and each array's sum."""
  if ds is None:
    return None
  arrays = {k: np.asarray(v) for k, v in ds.as_batch().items()}
  rows = np.unique(np.linspace(0, max(ds.num_queries - 1, 0), num=min(64, ds.num_queries)).astype(np.int64))
  parts = []
  for k in sorted(arrays):
    v = arrays[k]
    total = float(np.sum(v, dtype=np.float64)) if v.dtype.kind in "biuf" else 0.0
    parts += [k, np.ascontiguousarray(v[rows]) if v.ndim else v, round(total, 4)]
  return {"shapes": {k: list(v.shape) for k, v in sorted(arrays.items())}, "digest": _digest(*parts)}


def _click_digest(click_fn: Optional[ClickFn], batch: Mapping[str, jax.Array]) -> Optional[str]:
  """A digest of what ``click_fn`` makes of ``batch`` under a fixed key (its outputs rounded to 5 decimals),
  so that another click model, or other parameters of it, give another digest."""
  if click_fn is None:
    return None
  out = jax.device_get(click_fn(jax.random.key(0), batch))
  return _digest(*(x for k in sorted(out) for x in (k, np.round(np.asarray(out[k], np.float64), 5))))


def _across_processes(part: Any) -> Any:
  """``part`` on one process; in a multi-process run, where each process digests its own share of the data
  (``config.local_data``, a stream per process), the digest of every process's ``part`` in process order, the
  same on all of them (an all-gather), so that every process accepts or refuses a checkpoint alike."""
  if jax.process_count() == 1 or part is None:
    return part
  from jax.experimental import multihost_utils  # noqa: PLC0415

  mine = np.frombuffer(_digest(part).encode("ascii"), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))
  return {"processes": int(jax.process_count()), "digest": _digest(every)}


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

  >>> from ultr_jax import data
  >>> from ultr_jax.train import get_method
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
    "method_state": _digest([(jax.tree_util.keystr(p), list(x.shape), str(x.dtype)) for p, x in leaves]),
    # data_shards=0 (the default) is left out, so fingerprints made before the key existed still match.
    "train_config": canonical(
      {k: v for k, v in config.items() if k not in NOT_FINGERPRINTED and not (k == "data_shards" and not v)}
    ),
    "seeds": [int(s) for s in seeds],
    "train_data": _across_processes(train_digest),
    "valid_data": dataset_digest(valid),
    "clicks": _across_processes(_click_digest(click_fn, batch)),
  }
  fp["hash"] = _digest(fp)
  return fp


def fingerprint_diff(old: Optional[Mapping[str, Any]], new: Mapping[str, Any]) -> list[str]:
  """The keys (``a.b`` for nested ones) where two fingerprints differ; ``hash`` is not compared.

  >>> fingerprint_diff({"method": "ips", "train_config": {"lr": 1}}, {"method": "ips", "train_config": {"lr": 2}})
  ['train_config.lr']
  """
  if old is None:
    return ["<no fingerprint in the checkpoint>"]
  out = []
  for k in sorted(set(old) | set(new)):
    if k == "hash":
      continue
    a, b = old.get(k), new.get(k)
    if isinstance(a, Mapping) and isinstance(b, Mapping) and k != "train_data" and k != "valid_data":
      out += [f"{k}.{kk}" for kk in sorted(set(a) | set(b)) if a.get(kk) != b.get(kk)]
    elif a != b:
      out.append(k)
  return out


def stream_digest(source: Any, first: Mapping[str, np.ndarray]) -> dict:
  """What identifies a stream of training batches: its type and the first batch's shapes.

  Args:
    source: the stream (an iterable of batches).
    first: its first batch ``{name: [B, ...]}``.

  Returns:
    ``{"stream": type name, "batch_shapes": {name: shape}}``.

  >>> stream_digest([], {"where": np.ones((2, 3), bool)})
  {'stream': 'list', 'batch_shapes': {'where': [2, 3]}}
  """
  return {"stream": type(source).__name__, "batch_shapes": {k: list(v.shape) for k, v in first.items()}}
