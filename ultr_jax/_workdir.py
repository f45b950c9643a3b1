"""One run per workdir: the ``IN_PROGRESS`` marker as an exclusive lock.

A run takes its workdir by creating ``workdir/IN_PROGRESS`` with ``O_CREAT | O_EXCL`` (so of two runs that try at
once, exactly one succeeds), holding its PID, host, start time and command. A second run finds the marker and
stops with an error that names the workdir and the PID and host holding it. A marker whose run is over (its
process is no longer alive on this host, or it records a failure) is stale: the next run takes it over with a
warning. Within one process the lock is re-entrant (a :func:`~ultr_jax.train.fit` inside the binary's
:func:`~ultr_jax.train.run_in_progress` of the same workdir). In a multi-process run (``jax.distributed``),
process 0 holds it for all.
"""

import contextlib
import datetime
import os
import re
import socket
import sys
import threading
from typing import Iterator, Optional

from absl import logging

from ultr_jax._state_files import read_state_file

__all__ = [
  "LOCK_NAME",
  "WorkdirLockedError",
  "acquire",
  "release",
  "held",
  "holder",
  "check_not_held_by_another",
  "unfinished",
]

LOCK_NAME = "IN_PROGRESS"
# The locks this process holds: workdir (absolute) -> (the holding thread's ident, nesting depth). Process-wide
# state by nature (the marker names the process; the threads of one process must still exclude each other), guarded
# by _HELD_LOCK.
_HELD: dict[str, tuple[int, int]] = {}
_HELD_LOCK = threading.Lock()


class WorkdirLockedError(RuntimeError):
  """Another live run holds the workdir."""


def _refuse_thread(key: str) -> None:
  raise WorkdirLockedError(
    f"{key} holds a run in progress in another thread of this process (thread {_HELD[key][0]}, pid {os.getpid()}): "
    "wait for it to finish, or use another workdir"
  )


def _path(workdir: str) -> str:
  return os.path.join(os.path.abspath(workdir), LOCK_NAME)


def _lock_process() -> bool:
  """Whether this process takes workdir locks: always, but in a multi-process run only process 0."""
  import jax  # noqa: PLC0415 (the data layer's conversions take the lock without importing jax up front)

  return not jax.distributed.is_initialized() or jax.process_index() == 0


def holder(workdir: str) -> Optional[dict]:
  """The run holding ``workdir``'s marker: ``{"pid", "host", "failed", "text"}``, or None without a marker.

  Args:
    workdir: the run's directory.

  Returns:
    The marker's PID (None if it names none), host (None: written before hosts were recorded, taken as this
    one), whether it records a failure, and its text.

  Raises:
    ultr_jax._state_files.StateFileError: a marker that is not UTF-8 text, naming it and how to recover.

  >>> import tempfile
  >>> w = tempfile.mkdtemp()
  >>> acquire(w)
  True
  >>> holder(w)["pid"] == os.getpid()
  True
  >>> release(w); holder(w) is None
  True
  """
  try:
    text = read_state_file(
      _path(workdir),
      str,
      what="a workdir marker (the UTF-8 lines 'pid N', 'host H', 'started T', 'command C' of the run holding it)",
      recovery="if no run is using this workdir (a crashed or killed one left the file), delete the file",
      fmt="text",
    )
  except FileNotFoundError:
    return None
  pid = re.search(r"\bpid (\d+)", text)
  host = re.search(r"^host (\S+)$", text, re.MULTILINE)
  return {
    "pid": int(pid.group(1)) if pid else None,
    "host": host.group(1) if host else None,
    "failed": bool(re.search(r"^failed: ", text, re.MULTILINE)),
    "text": text,
  }


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's live process
    return True
  return True


def _stale(info: dict, workdir: str) -> Optional[str]:
  """Why the marker ``info`` no longer holds the workdir (None: its run is live, or may be on another host)."""
  same_host = info["host"] in (None, socket.gethostname())
  if info["failed"]:
    return "its run failed"
  if info["pid"] is None:
    return "it names no process"
  if same_host and info["pid"] == os.getpid() and os.path.abspath(workdir) not in _HELD:
    return "this process left it"
  if same_host and not _alive(info["pid"]):
    return f"process {info['pid']} is no longer alive"
  return None


def _create(path: str) -> bool:
  """Creates the marker exclusively; False if it exists."""
  try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
  except FileExistsError:
    return False
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(f"pid {os.getpid()}\nhost {socket.gethostname()}\nstarted {started}\ncommand {' '.join(sys.argv)}\n")
  return True


def _refuse(workdir: str, info: dict) -> None:
  raise WorkdirLockedError(
    f"{os.path.abspath(workdir)} holds a run in progress: pid {info['pid']} on host {info['host'] or '?'} "
    f"({_path(workdir)}). Wait for it to finish, or use another workdir; if that run is gone (a crashed host), "
    "delete the file"
  )


def acquire(workdir: str) -> bool:
  r"""Takes ``workdir`` for this run: creates its ``IN_PROGRESS`` marker exclusively (``O_EXCL``).

  Re-entrant within a thread (each :func:`acquire` is matched by a :func:`release`); a stale marker (its
  process gone from this host, or its run failed) is taken over with a warning. In a multi-process run only
  process 0 takes the lock.

  Args:
    workdir: the run's directory (created if needed).

  Returns:
    True when this call created the marker, False when this process already held it (or is not process 0).

  Raises:
    WorkdirLockedError: another live run holds the workdir (the message names the PID and host).

  >>> import tempfile
  >>> w = tempfile.mkdtemp()
  >>> acquire(w), acquire(w)  # the second is nested in the first
  (True, False)
  >>> release(w); release(w); os.listdir(w)
  []
  """
  key = os.path.abspath(workdir)
  if not _lock_process():
    return False
  with _HELD_LOCK:
    if key in _HELD:
      thread, depth = _HELD[key]
      if thread != threading.get_ident():
        _refuse_thread(key)
      _HELD[key] = (thread, depth + 1)
      return False
    os.makedirs(key, exist_ok=True)
    return _take(key)


def _take(key: str) -> bool:
  """Creates ``key``'s marker for this thread, taking over a stale one (``_HELD_LOCK`` held)."""
  path = _path(key)
  for _ in range(8):
    if _create(path):
      _HELD[key] = (threading.get_ident(), 1)
      return True
    info = holder(key)
    if info is None:
      continue  # released meanwhile
    why = _stale(info, key)
    if why is None:
      _refuse(key, info)
    logging.warning("%s: taking over a stale lock (%s): %s", path, why, info["text"].strip().replace("\n", "; "))
    taken = f"{path}.stale.{os.getpid()}"
    try:
      os.rename(path, taken)  # of two runs taking over the same stale marker, one renames it
    except FileNotFoundError:
      continue
    os.remove(taken)
  raise WorkdirLockedError(f"{key}: could not take {LOCK_NAME} (other runs keep taking it)")


def release(workdir: str, *, failure: Optional[str] = None) -> None:
  """Ends this process's hold of ``workdir``: the outermost release removes the marker, or, given ``failure``,
  leaves it with ``failed: <failure>`` appended (a stale marker the next run takes over).

  Args:
    workdir: the run's directory.
    failure: what ended the run, for a failed run.

  >>> import tempfile
  >>> w = tempfile.mkdtemp()
  >>> acquire(w); release(w, failure="ValueError: x")
  True
  >>> holder(w)["failed"]
  True
  """
  key = os.path.abspath(workdir)
  with _HELD_LOCK:  # the marker goes with the entry, so no other thread takes it over in between
    if key not in _HELD or _HELD[key][0] != threading.get_ident():
      return
    thread, depth = _HELD[key]
    if depth > 1:
      _HELD[key] = (thread, depth - 1)
      return
    del _HELD[key]
    if failure is not None:
      with open(_path(key), "a", encoding="utf-8") as f:
        f.write(f"failed: {failure}\n")
    elif os.path.exists(_path(key)):
      os.remove(_path(key))


def check_not_held_by_another(workdir: str) -> None:
  """Raises :class:`WorkdirLockedError` when another live run holds ``workdir`` (e.g. before writing its results).

  >>> import tempfile
  >>> check_not_held_by_another(tempfile.mkdtemp())  # no marker: nothing to say
  """
  key = os.path.abspath(workdir)
  if key in _HELD and _HELD[key][0] != threading.get_ident():
    _refuse_thread(key)
  if key in _HELD or not _lock_process():
    return
  info = holder(key)
  if info is not None and _stale(info, key) is None:
    _refuse(key, info)


def unfinished(workdir: str) -> Optional[str]:
  r"""Why ``workdir`` holds another run's unfinished work (its ``IN_PROGRESS``), or None (no marker, or this
  process holds it).

  Args:
    workdir: a run's or a conversion's directory.

  Returns:
    None, or a sentence naming the marker and its run: live (wait for it) or over without finishing (it failed,
    naming the failure, or its process is gone).

  >>> import tempfile
  >>> w = tempfile.mkdtemp()
  >>> unfinished(w) is None
  True
  >>> with open(os.path.join(w, LOCK_NAME), "w") as f:
  ...   _ = f.write("pid 999999999\nhost " + socket.gethostname() + "\nfailed: OSError: No space left on device\n")
  >>> print(unfinished(w).split(" (")[0])
  the run that wrote it did not finish
  """
  key = os.path.abspath(workdir)
  if key in _HELD:
    thread = _HELD[key][0]
    if thread == threading.get_ident():
      return None
    return f"a run in progress in another thread of this process holds it (thread {thread}, {_path(key)}): wait for it"
  info = holder(key)
  if info is None:
    return None
  why = _stale(info, key)
  if why is None:
    return f"a run in progress holds it (pid {info['pid']} on host {info['host'] or '?'}, {_path(key)}): wait for it"
  failure = re.search(r"^failed: (.*)$", info["text"], re.MULTILINE)
  what = f"it failed: {failure.group(1)}" if failure else why
  return f"the run that wrote it did not finish ({what}; {_path(key)})"


@contextlib.contextmanager
def held(workdir: Optional[str]) -> Iterator[None]:
  """Holds ``workdir`` (None: nothing) for the block: :func:`acquire`, then :func:`release` however it ends.

  >>> import tempfile
  >>> w = tempfile.mkdtemp()
  >>> with held(w):
  ...   print(os.listdir(w))
  ['IN_PROGRESS']
  >>> os.listdir(w)
  []
  """
  if workdir is None:
    yield
    return
  acquire(workdir)
  try:
    yield
  finally:
    release(workdir)
