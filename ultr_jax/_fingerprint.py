"""Fingerprints of what shapes a run, compared so that a checkpoint of another run is never resumed: digests of
JSON values and of arrays, and the keys where two fingerprints differ.

Shared by the training loop's checkpoints (:mod:`ultr_jax.train.fingerprint` builds a run's fingerprint from
these) and the minibatch click-model fit's (:class:`~ultr_jax.simulation.Minibatch`).

>>> a = {"model": "dbn", "config": {"l2": 1.0, "epochs": 2}}
>>> fingerprint_diff(a, {"model": "dbn", "config": {"l2": 0.5, "epochs": 2}})
['config.l2']
"""

import hashlib
import json
from typing import Any, Collection, Mapping, Optional

import numpy as np

__all__ = ["arrays_digest", "digest", "fingerprint_diff"]


def digest(*parts: Any) -> str:
  """16 hex characters of the SHA-256 of ``parts``: arrays by their shape, dtype and bytes, anything else by its
  JSON (sorted keys; what JSON cannot hold by its ``str``).

  >>> digest({"a": 1}) == digest({"a": 1}), digest(np.zeros(2)) == digest(np.zeros(3))
  (True, False)
  """
  h = hashlib.sha256()
  for part in parts:
    if isinstance(part, np.ndarray):
      h.update(str((part.shape, part.dtype.str)).encode())
      h.update(np.ascontiguousarray(part).tobytes())
    else:
      h.update(json.dumps(part, sort_keys=True, default=str).encode())
  return h.hexdigest()[:16]


_CHUNK_BYTES = 1 << 24  # the full digests read arrays in chunks of about 16 MB (no copy of a whole array)


def _array_digest(h: Any, name: str, v: np.ndarray) -> None:
  """Feeds ``name``, ``v``'s shape and dtype and all of its bytes to the hash ``h``, a chunk of rows at a time."""
  v = np.asarray(v)
  h.update(json.dumps([name, list(v.shape), v.dtype.str]).encode())
  if v.ndim == 0 or v.size == 0:
    h.update(np.ascontiguousarray(v).tobytes())
    return
  rows = max(1, _CHUNK_BYTES // max(1, v[0].nbytes))
  for start in range(0, v.shape[0], rows):
    h.update(np.ascontiguousarray(v[start : start + rows]).data.cast("B"))


def arrays_digest(arrays: Mapping[str, np.ndarray]) -> str:
  r"""A digest of every byte of ``arrays`` (with their names, shapes and dtypes), in name order.

  .. math:: \mathrm{BLAKE2b}(\text{name}_1, \text{shape}_1, \text{dtype}_1, \text{bytes}_1, \ldots)

  Read in chunks of about 16 MB, so an array is hashed without a copy of it; two arrays differing in any
  entry (two labels swapped, one feature changed) give different digests.

  Args:
    arrays: ``{name: array}``.

  Returns:
    32 hex characters.

  >>> a = {"labels": np.array([[0.0, 1.0]])}
  >>> arrays_digest(a) == arrays_digest({"labels": np.array([[1.0, 0.0]])})
  False
  """
  h = hashlib.blake2b(digest_size=16)
  for k in sorted(arrays):
    _array_digest(h, k, arrays[k])
  return h.hexdigest()


def fingerprint_diff(
  old: Optional[Mapping[str, Any]], new: Mapping[str, Any], *, whole: Collection[str] = ("train_data", "valid_data")
) -> list[str]:
  """The keys (``a.b`` for nested ones) where two fingerprints differ; ``hash`` is not compared.

  Args:
    old: a checkpoint's fingerprint (None: none recorded).
    new: this run's fingerprint.
    whole: keys whose values are compared whole, not key by key (the training data's digests).

  Returns:
    The sorted list of differing keys (all of ``new``'s when ``old`` is None).

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
    if isinstance(a, Mapping) and isinstance(b, Mapping) and k not in whole:
      out += [f"{k}.{kk}" for kk in sorted(set(a) | set(b)) if a.get(kk) != b.get(kk)]
    elif a != b:
      out.append(k)
  return out
