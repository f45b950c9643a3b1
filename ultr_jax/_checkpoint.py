"""Orbax checkpoints of a run's whole state, and their restoring: the newest readable checkpoint of the same run.

Shared by the training loop (:func:`~ultr_jax.train.fit`: every tower, optimizer, step, RNG) and the minibatch
click-model fit (:class:`~ultr_jax.simulation.Minibatch`: the row vectors, their optimiser state, the position in
the stream). A checkpoint records its run's fingerprint (:mod:`ultr_jax._fingerprint`); :func:`restore_checkpoint`
refuses another run's, naming what differs, and falls back from an unreadable newest step.
"""

import json
import logging
import os
import shutil
from typing import Any, Callable, Mapping, Optional

from absl import logging as absl_logging
import jax
import orbax.checkpoint as ocp

from ultr_jax._state_files import check_shape
from ultr_jax._fingerprint import fingerprint_diff

__all__ = ["Checkpointer", "ON_CORRUPT", "restore_checkpoint"]

#: What :func:`restore_checkpoint` does with an unreadable newest checkpoint: set it aside and resume from the
#: newest readable one ("fallback"), or stop with an error ("raise").
ON_CORRUPT = ("fallback", "raise")
#: The shape of a training checkpoint's JSON meta (:func:`~ultr_jax.train.fit` writes every key; other writers,
#: some): what :class:`Checkpointer` checks by default.
META_SPEC = {"fingerprint?": dict, "history?": [{"step": int}], "diverged?": [bool], "stream_state?": object}
_META_WHAT = "a checkpoint's meta (the run's fingerprint, history of {step, ...} records, diverged seeds)"
#: What the default meta check's error says to do.
_RECOVERY = (
  "on_corrupt_checkpoint='fallback' (the default) sets this step aside and resumes from the newest readable "
  "one; restart=True in the train config deletes the checkpoints and starts over"
)


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

  Args:
    directory: where the steps' checkpoints go (created).
    max_to_keep: the newest steps kept.
    verbose: keep orbax's INFO log records.
    meta_spec: the shape a step's ``meta`` must have (:mod:`~ultr_jax._state_files`' spec; default the training
      loop's); one that departs from it is an unreadable step.
    recovery: what that error says to do.
  """

  def __init__(
    self,
    directory: str,
    *,
    max_to_keep: int = 2,
    verbose: bool = False,
    meta_spec: Any = None,
    recovery: str = _RECOVERY,
  ):
    if not verbose:
      _quiet_orbax()
    self.directory = os.path.abspath(directory)
    self._meta_spec = META_SPEC if meta_spec is None else meta_spec
    self._recovery = recovery
    self._manager = ocp.CheckpointManager(
      self.directory,
      options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
    )

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """The steps with a checkpoint, newest first."""
    return sorted(self._manager.all_steps(), reverse=True)

  def step_path(self, step: int) -> str:
    """The directory of ``step``'s checkpoint."""
    return os.path.join(self.directory, str(int(step)))

  def set_aside(self, step: int) -> str:
    """Moves ``step``'s checkpoint out of the way, to ``<directory>.corrupt/<step>``; returns where it went.

    Process 0 moves it (the others wait), so that the next save of that step starts from nothing."""
    aside = os.path.join(self.directory + ".corrupt", str(int(step)))
    if jax.process_index() == 0 and os.path.isdir(self.step_path(step)):
      os.makedirs(os.path.dirname(aside), exist_ok=True)
      if os.path.exists(aside):
        shutil.rmtree(aside)
      os.replace(self.step_path(step), aside)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils  # noqa: PLC0415

      multihost_utils.sync_global_devices(f"set_aside {self.directory} {step}")
    self._manager.reload()
    return aside

  def save(self, step: int, state: Any, meta: dict) -> None:
    """Saves ``state`` and ``meta`` as ``step``.

    Orbax writes in a background thread; ``meta`` is copied (through JSON) first, so that what the caller changes
    afterwards (a history it appends to) is not what lands in this step's checkpoint."""
    meta = json.loads(json.dumps(meta))
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
    return self._checked_meta(step, restored["meta"])

  def _checked_meta(self, step: int, meta: Any) -> dict:
    """``meta`` of ``step`` checked against the meta spec (:data:`META_SPEC` by default; a :class:`~ultr_jax._state_files.StateFileError`
    naming its file, which :func:`restore_checkpoint` reports as an unreadable step and falls back from)."""
    path = os.path.join(self.step_path(step), "meta", "metadata")
    return dict(
      check_shape({} if meta is None else meta, self._meta_spec, path=path, what=_META_WHAT, recovery=self._recovery)
    )

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
    return restored["state"], self._checked_meta(step, restored["meta"])

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()


#: How the training loop's messages say to start over, and where else a run could go.
_START_OVER = "restart=True in the train config (--config.train.restart=True)"
_ELSEWHERE = "another workdir"


def _corrupt(
  name: str,
  ckpt: Checkpointer,
  step: int,
  error: Exception,
  on_corrupt: str,
  warn: Callable[[str], None],
  start_over: str = _START_OVER,
) -> None:
  """Reports ``step``'s unreadable checkpoint: an error (``on_corrupt="raise"``), or a warning and the step set
  aside (``"fallback"``)."""
  path = ckpt.step_path(step)
  first_line = (str(error).strip().splitlines() or [""])[0][:300]
  what = f"[{name}] the checkpoint of step {step} ({path}) is unreadable: {type(error).__name__}: {first_line}"
  if on_corrupt == "raise":
    ckpt.close()
    raise ValueError(
      f"{what}. Set {start_over} to delete the checkpoints and start over, or on_corrupt_checkpoint='fallback' "
      "to resume from the newest readable step"
    ) from error
  aside = ckpt.set_aside(step)
  warn(f"{what}. Moved it to {aside}; resuming from the previous readable step, if any ({start_over} starts over)")


def restore_checkpoint(
  ckpt: Checkpointer,
  state_like: Any,
  fingerprint: Mapping[str, Any],
  *,
  max_step: int,
  name: str = "run",
  on_corrupt: str = "fallback",
  warn: Optional[Callable[[str], None]] = None,
  start_over: str = _START_OVER,
  elsewhere: str = _ELSEWHERE,
) -> Optional[tuple[int, Any, dict]]:
  """The newest readable checkpoint of the run with ``fingerprint``: ``(step, state, meta)``, or None when there
  is none.

  Each step, newest first: its ``meta`` is read and its fingerprint compared with the run's (another run's
  checkpoint is refused with a ``ValueError`` naming what differs, before its state, whose shapes may differ, is
  read); then its state. A step whose meta or state cannot be read (an emptied or truncated file) is reported
  with its path: with ``on_corrupt="fallback"`` it is moved aside (:meth:`Checkpointer.set_aside`) with a warning
  and the previous step is tried; with ``"raise"``, a ``ValueError`` that names ``restart=True``.

  Args:
    ckpt: the run's checkpoints.
    state_like: a state of the shapes to restore.
    fingerprint: the run's fingerprint (:func:`~ultr_jax.train.run_fingerprint`, or the minibatch fit's).
    max_step: the run's ``config.steps``; a checkpoint past it is refused (the minibatch fit, whose steps are
      not known before its first epoch ends, passes ``sys.maxsize``).
    name: the run's name, for messages.
    on_corrupt: ``"fallback"`` or ``"raise"``.
    warn: where warnings go (default: ``absl.logging.warning``).
    start_over: how the messages say to delete the checkpoints and start over (default the train config's
      ``restart=True``).
    elsewhere: where else the messages say the run could go (default another workdir).

  Returns:
    ``(step, state, meta)`` or None.

  >>> import tempfile, numpy as np
  >>> ckpt = Checkpointer(tempfile.mkdtemp())
  >>> for step in (1, 2):
  ...   ckpt.save(step, {"w": np.full(2, float(step))}, {"fingerprint": {"hash": "a"}})
  >>> ckpt.wait()
  >>> open(os.path.join(ckpt.step_path(2), "meta", "metadata"), "w").close()  # the newest step, emptied
  >>> step, state, meta = restore_checkpoint(ckpt, {"w": np.zeros(2)}, {"hash": "a"}, max_step=9, warn=print)
  ... # doctest: +ELLIPSIS
  [run] the checkpoint of step 2 (.../2) is unreadable: JSONDecodeError: ...
  >>> step, state["w"].tolist()
  (1, [1.0, 1.0])
  """
  if on_corrupt not in ON_CORRUPT:
    raise ValueError(f"config.on_corrupt_checkpoint: unknown {on_corrupt!r}; expected one of {ON_CORRUPT}")
  warn = warn or (lambda msg: absl_logging.warning("%s", msg))
  for step in ckpt.all_steps():
    try:
      meta = ckpt.restore_meta(step)
    except Exception as e:  # noqa: BLE001 (any unreadable file: reported with the step's path)
      _corrupt(name, ckpt, step, e, on_corrupt, warn, start_over)
      continue
    differ = fingerprint_diff(meta.get("fingerprint"), fingerprint)
    if differ:
      ckpt.close()
      raise ValueError(
        f"[{name}] {ckpt.directory} holds a checkpoint (step {step}) of a different run: {', '.join(differ)} "
        f"differ(s). Use {elsewhere}, or {start_over} to delete it and start over"
      )
    if step > max_step:
      ckpt.close()
      raise ValueError(
        f"[{name}] {ckpt.directory} holds a checkpoint at step {step}, past config.steps={max_step}; "
        f"use {elsewhere} or {start_over}"
      )
    try:
      state, meta = ckpt.restore(state_like, step)
    except Exception as e:  # noqa: BLE001
      _corrupt(name, ckpt, step, e, on_corrupt, warn, start_over)
      continue
    return step, state, meta
  return None
