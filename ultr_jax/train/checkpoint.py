"""Orbax checkpointing of the whole training state (every tower, optimizer, step, RNG)."""

import logging
import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

__all__ = ["Checkpointer"]


class _DropOrbaxInfo(logging.Filter):
  """Drops orbax's per-save INFO records (dozens per save); warnings pass."""

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno > logging.INFO or f"{os.sep}orbax{os.sep}" not in record.pathname


_ORBAX_FILTER = _DropOrbaxInfo()


def _quiet_orbax() -> None:
  logger = logging.getLogger("absl")
  if _ORBAX_FILTER not in logger.filters:
    logger.addFilter(_ORBAX_FILTER)


class Checkpointer:
  """A thin wrapper over ``orbax.checkpoint.CheckpointManager``.

  The state is any pytree of arrays (params of every tower, non-trained
  method state, optimizer state, step, RNG key data, best-so-far state); a
  small JSON ``meta`` (training history, the run's fingerprint) is stored beside it. Orbax
  writes each step to a temporary directory and renames it when complete,
  so an interrupted save never corrupts the latest good checkpoint.
  Orbax's per-save INFO log records are dropped unless ``verbose=True``.
  """

  def __init__(self, directory: str, *, max_to_keep: int = 2, verbose: bool = False):
    if not verbose:
      _quiet_orbax()
    self.directory = os.path.abspath(directory)
    self._manager = ocp.CheckpointManager(
      self.directory,
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
    )

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def save(self, step: int, state: Any, meta: dict) -> None:
    self._manager.save(
      step,
      args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
      force=True,
    )

  def restore_meta(self, step: Optional[int] = None) -> dict:
    """The JSON ``meta`` saved at ``step`` (default latest) alone, without the state (e.g. to check its fingerprint
    before restoring a state whose shapes may differ)."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
    return dict(restored["meta"] or {})

  def restore(self, state_like: Any, step: Optional[int] = None) -> tuple[Any, dict]:
    """Restores ``(state, meta)`` at ``step`` (default latest) shaped like ``state_like``."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
    restored = self._manager.restore(
      step,
      args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()),
    )
    return restored["state"], restored["meta"]

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()
