"""Data-parallel sharding over queries with a ``jax.sharding.Mesh``."""

from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

__all__ = [
  "make_mesh",
  "data_sharding",
  "replicated",
  "round_up",
  "stratum_bounds",
  "process_query_range",
  "shard_query_arrays",
  "maybe_initialize_distributed",
]

DATA_AXIS = "data"


def make_mesh(num_devices: Optional[int] = None, devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A 1-D mesh named ``"data"`` over ``num_devices`` (default: all devices).

  Args:
    num_devices: the number of devices (None: all).
    devices: the devices to use (None: ``jax.devices()``).

  Returns:
    The ``jax.sharding.Mesh`` with axis ``"data"``.

  >>> make_mesh(1).shape["data"]
  1
  """
  devices = list(devices if devices is not None else jax.devices())
  if num_devices is not None and num_devices > 0:
    if num_devices > len(devices):
      raise ValueError(f"asked for {num_devices} devices, only {len(devices)} available")
    devices = devices[:num_devices]
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def data_sharding(mesh: Mesh) -> NamedSharding:
  """Shards the leading (query) axis over the mesh."""
  return NamedSharding(mesh, P(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
  """Replicates an array on every device of the mesh."""
  return NamedSharding(mesh, P())


def round_up(n: int, multiple: int) -> int:
  """The smallest multiple of ``multiple`` that is >= ``n``.

  >>> round_up(10, 8)
  16
  """
  return -(-n // multiple) * multiple


def stratum_bounds(num_queries: int, num_strata: int) -> np.ndarray:
  r"""``int64[K + 1]`` boundaries of ``K`` contiguous data strata over ``num_queries`` queries.

  Stratum :math:`k` holds queries :math:`[\lfloor kQ/K \rfloor, \lfloor (k+1)Q/K \rfloor)`, so sizes differ by
  at most one; on the devices each stratum is padded to :math:`\lceil Q/K \rceil` rows with fully masked lists.

  >>> stratum_bounds(10, 4).tolist()
  [0, 2, 5, 7, 10]
  """
  k = np.arange(num_strata + 1, dtype=np.int64)
  return (k * int(num_queries)) // int(num_strata)


def process_query_range(
  num_queries: int, num_strata: int, process_index: Optional[int] = None, process_count: Optional[int] = None
) -> tuple[int, int]:
  """The queries ``[lo, hi)`` one process loads in a multi-process run: the strata on its devices.

  The mesh lists every process's devices in process order and each holds ``num_strata / num_devices`` whole
  strata, so process ``p`` of ``P`` holds strata ``[p K / P, (p + 1) K / P)``. Pass those queries (and only
  them) to :func:`~ultr_jax.train.fit` in that process.

  >>> process_query_range(10, 4, process_index=1, process_count=2)
  (5, 10)
  """
  p = jax.process_index() if process_index is None else int(process_index)
  n = jax.process_count() if process_count is None else int(process_count)
  if num_strata % n:
    raise ValueError(f"data_shards={num_strata} is not a multiple of the process count {n}")
  b = stratum_bounds(num_queries, num_strata)
  per = num_strata // n
  return int(b[p * per]), int(b[(p + 1) * per])


def maybe_initialize_distributed(enabled: bool) -> None:
  """Calls ``jax.distributed.initialize()`` for multi-host runs.

  On TPU pods and SLURM/MPI clusters JAX discovers the coordinator from the environment (elsewhere, call
  ``jax.distributed.initialize(coordinator_address=..., num_processes=..., process_id=...)`` yourself). The
  mesh then spans every process's devices, in process order; the training lists are sharded over it in
  ``config.data_shards`` strata (``sharding.stratum_bounds``; one per device by default) and each process feeds only
  the queries of the strata on its own devices (``sharding.process_query_range``), from which
  :func:`~ultr_jax.train.fit` builds the global array with ``jax.make_array_from_process_local_data``. With
  ``config.local_data=True`` each process loads and passes only those queries; otherwise it passes the
  whole set and ``fit`` keeps its part. Every process computes the same (deterministic) batch indices; each
  device gathers its part of the batch from its own shard.

  Args:
    enabled: call ``jax.distributed.initialize()`` (False: do nothing).
  """
  if enabled:
    jax.distributed.initialize()


def _mesh_rows(mesh: Mesh, rows_per_device: int) -> tuple[int, int]:
  """The global rows ``[lo, hi)`` held by this process's devices of the 1-D ``mesh`` (each ``rows_per_device``)."""
  positions = sorted(i for i, d in enumerate(mesh.devices.flat) if d.process_index == jax.process_index())
  if positions != list(range(positions[0], positions[-1] + 1)):
    raise ValueError("this process's devices are not contiguous in the mesh")
  return positions[0] * rows_per_device, (positions[-1] + 1) * rows_per_device


def shard_query_arrays(
  arrays: dict, mesh: Mesh, num_strata: int, num_queries: Optional[int] = None
) -> tuple[dict, np.ndarray]:
  """Places per-query arrays sharded over the mesh's data axis, in ``num_strata`` padded strata.

  The global array has ``K * m`` rows, ``m = ceil(Q / K)``: row ``k * m + j`` is query ``bounds[k] + j`` of
  stratum ``k`` (``sharding.stratum_bounds``), or a padding row (zeros, ``where`` False) past the stratum's end.
  Each device holds ``K / N`` whole strata, so ``1 / N`` of the rows. In a multi-process run ``arrays``
  are this process's queries only (``sharding.process_query_range``) and ``num_queries`` the global count.

  Args:
    arrays: ``{name: [Q_local, ...]}`` NumPy arrays, ``where`` among them.
    mesh: the 1-D data mesh.
    num_strata: ``K``, a multiple of the mesh size.
    num_queries: the global query count (default: ``Q_local``, one process).

  Returns:
    ``({name: jax.Array [K * m, ...]}, bounds)``.

  >>> a, b = shard_query_arrays({"where": np.ones((5, 2), bool)}, make_mesh(1), 2)
  >>> a["where"].shape, a["where"][:, 0].tolist(), b.tolist()
  ((6, 2), [True, True, False, True, True, True], [0, 2, 5])
  """
  n_dev = mesh.size
  if num_strata % n_dev:
    raise ValueError(f"data_shards={num_strata} must be a multiple of the number of devices ({n_dev})")
  q_local = len(arrays["where"])
  q = q_local if num_queries is None else int(num_queries)
  bounds = stratum_bounds(q, num_strata)
  m = max(1, int(np.max(np.diff(bounds))))
  lo_row, hi_row = _mesh_rows(mesh, (num_strata // n_dev) * m)
  k0, k1 = lo_row // m, hi_row // m
  if bounds[k1] - bounds[k0] != q_local:
    raise ValueError(
      f"this process holds {q_local} queries; its strata {k0}..{k1 - 1} hold queries "
      f"[{bounds[k0]}, {bounds[k1]}) (sharding.process_query_range)"
    )
  # local padded row -> local query (or -1)
  k = np.arange(k0, k1)[:, None]
  j = np.arange(m)[None, :]
  src = np.where(j < (bounds[k + 1] - bounds[k]), bounds[k] - bounds[k0] + j, -1).reshape(-1)
  sharding = data_sharding(mesh)
  out = {}
  for name, v in arrays.items():
    v = np.asarray(v)
    if v.dtype == np.float64:
      v = v.astype(np.float32)
    elif v.dtype == np.int64:
      v = v.astype(np.int32)
    local = v[np.maximum(src, 0)] if q_local else np.zeros((len(src),) + v.shape[1:], v.dtype)
    mask = (src >= 0).reshape((-1,) + (1,) * (v.ndim - 1))
    local = np.where(mask, local, np.zeros((), v.dtype))
    out[name] = jax.make_array_from_process_local_data(sharding, local, (num_strata * m,) + v.shape[1:])
  return out, bounds
