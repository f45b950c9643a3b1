"""Data-parallel sharding over queries with a ``jax.sharding.Mesh``."""

from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

__all__ = ["make_mesh", "data_sharding", "replicated", "round_up", "maybe_initialize_distributed"]

DATA_AXIS = "data"


def make_mesh(num_devices: Optional[int] = None, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
  """A 1-D mesh named ``"data"`` over ``num_devices`` (default: all devices).

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


def maybe_initialize_distributed(enabled: bool) -> None:
  """Calls ``jax.distributed.initialize()`` for multi-host runs.

  On TPU pods and SLURM/MPI clusters JAX discovers the coordinator from the
  environment; the mesh then spans every process's devices and each process
  feeds the same (deterministic) batch indices.
  """
  if enabled:
    jax.distributed.initialize()
