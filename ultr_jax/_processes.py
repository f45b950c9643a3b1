"""Several processes through JAX's distributed runtime: starting them, and the host-side collectives that merge
what each process reduced from its own part of a log (gloo on CPU).

The binaries that stream a log (the click-model study, the identifiability check) take the same three flags
(:func:`define_process_flags`) and call :func:`initialize_processes` with them; each process then reads its own
row groups (:class:`~ultr_jax.data.SessionStream`'s ``process_index`` / ``process_count``), reduces them, and
the reductions are merged with :func:`allgather_rows` / :func:`process_sum` (associative merges, so the result is
the one-process result).
"""

from typing import Optional

import jax
import numpy as np

__all__ = ["define_process_flags", "initialize_processes", "allgather_rows", "process_sum", "barrier"]


def define_process_flags() -> dict:
  """Defines ``--process_id``, ``--num_processes`` and ``--coordinator_address`` (absl) and returns their holders.

  >>> sorted(define_process_flags())
  ['coordinator_address', 'num_processes', 'process_id']
  """
  from absl import flags  # noqa: PLC0415 (binaries only)

  if "num_processes" in flags.FLAGS:
    return {k: flags.FLAGS[k] for k in ("process_id", "num_processes", "coordinator_address")}
  return {
    "process_id": flags.DEFINE_integer("process_id", 0, "This process's index (0..num_processes-1)."),
    "num_processes": flags.DEFINE_integer(
      "num_processes", 1, "Processes reading the log, each its own row groups; their statistics are merged."
    ),
    "coordinator_address": flags.DEFINE_string(
      "coordinator_address", "127.0.0.1:12355", "host:port of process 0 (jax.distributed's coordinator)."
    ),
  }


def initialize_processes(process_id: int, num_processes: int, coordinator_address: Optional[str]) -> None:
  """``jax.distributed.initialize`` for ``num_processes > 1`` (gloo collectives on CPU); nothing for one.

  Args:
    process_id: this process's index.
    num_processes: how many processes run.
    coordinator_address: ``host:port`` of process 0.
  """
  if int(num_processes) <= 1:
    return
  if not 0 <= int(process_id) < int(num_processes):
    raise ValueError(f"--process_id must be in [0, {num_processes}), got {process_id}")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(
    coordinator_address=coordinator_address, num_processes=int(num_processes), process_id=int(process_id)
  )


def process_sum(x) -> np.ndarray:
  """The sum over processes of a same-shape host array (itself with one process).

  >>> process_sum(np.array([1.0, 2.0])).tolist()
  [1.0, 2.0]
  """
  x = np.asarray(x)
  if jax.process_count() == 1:
    return x
  from jax.experimental import multihost_utils  # noqa: PLC0415

  return np.asarray(multihost_utils.process_allgather(x)).sum(axis=0).astype(x.dtype)


def allgather_rows(*arrays: np.ndarray) -> list:
  """Every process's ``arrays`` (a different number of rows each, the same trailing shapes and dtypes), as one
  tuple per process in process order (rows padded to the longest for the collective, then cut back).

  >>> [a.tolist() for (a,) in allgather_rows(np.arange(3))]
  [[0, 1, 2]]
  """
  arrays = tuple(np.asarray(a) for a in arrays)
  if jax.process_count() == 1:
    return [arrays]
  from jax.experimental import multihost_utils  # noqa: PLC0415

  rows = np.asarray(multihost_utils.process_allgather(np.asarray([a.shape[0] for a in arrays], np.int64)))
  top = int(rows.max()) if rows.size else 0
  gathered = []
  for j, a in enumerate(arrays):
    padded = np.zeros((max(top, 1),) + a.shape[1:], a.dtype)
    padded[: a.shape[0]] = a
    gathered.append(np.asarray(multihost_utils.process_allgather(padded)))
  return [tuple(g[p, : rows[p, j]] for j, g in enumerate(gathered)) for p in range(rows.shape[0])]


def barrier(name: str) -> None:
  """Waits until every process reaches ``barrier(name)``."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # noqa: PLC0415

    multihost_utils.sync_global_devices(name)
