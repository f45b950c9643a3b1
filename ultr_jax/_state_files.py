"""The one reader of run-state and side files: checkpoint meta, workdir markers, propensity files, manifests.

Every such file is read through :func:`read_state_file` (or, for a value another library has parsed, checked
with :func:`check_shape`), which validates its shape against a small spec and, on any failure (missing, not
UTF-8, malformed JSON, a value of the wrong shape), raises :class:`StateFileError` naming the file, what was
expected there and how to recover, never a bare ``JSONDecodeError``, ``UnicodeDecodeError`` or ``TypeError``.

A spec is a type (or tuple of types; ``bool`` is no ``int``), ``object`` (anything), a list ``[spec]`` (a list
of such values) or a dict ``{key: spec}`` (a JSON object holding those keys; a key ending in ``?`` is
optional; other keys are allowed).

>>> import json, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "propensities.json")
>>> with open(path, "w") as f:
...   json.dump([1, 2], f)
>>> read_state_file(path, {"propensities": dict}, what="a propensities file", recovery="write it again")
Traceback (most recent call last):
ultr_jax._state_files.StateFileError: ...propensities.json: expected a propensities file, a JSON object with 'propensities' (an object), got a list; write it again
"""

import json
import os
from typing import Any, Optional

__all__ = ["StateFileError", "check_shape", "read_state_file"]


class StateFileError(ValueError):
  """A run-state or side file that is missing, unreadable or of the wrong shape (the message names the file,
  the expectation and the recovery)."""


def _kind(value: Any) -> str:
  return {dict: "an object", list: "a list", str: "a string", bool: "a bool", type(None): "null"}.get(
    type(value), "an integer" if isinstance(value, int) else "a number" if isinstance(value, float) else "a value"
  )


def _describe(spec: Any) -> str:
  if spec is object:
    return "any value"
  if isinstance(spec, dict):
    keys = ", ".join(
      f"{k.rstrip('?')!r} ({_describe(v)}{', optional' if k.endswith('?') else ''})" for k, v in spec.items()
    )
    return f"a JSON object with {keys}" if keys else "a JSON object"
  if isinstance(spec, list):
    return f"a list of {_describe(spec[0])}"
  types = spec if isinstance(spec, tuple) else (spec,)
  names = {dict: "an object", list: "a list", str: "a string", bool: "a bool", int: "an integer", float: "a number"}
  return " or ".join(names.get(t, "null" if t is type(None) else t.__name__) for t in types)


def _is(value: Any, types: tuple) -> bool:
  if isinstance(value, bool):
    return bool in types
  if isinstance(value, int) and float in types:
    return True
  return isinstance(value, types)


def _mismatch(value: Any, spec: Any, loc: str = "") -> Optional[str]:
  """Where and how ``value`` departs from ``spec`` (None when it fits); ``loc`` is where ``value`` sits."""
  got = f"{loc} holding {_kind(value)}" if loc else _kind(value)
  if spec is object:
    return None
  if isinstance(spec, dict):
    if not isinstance(value, dict):
      return got
    for key, sub in spec.items():
      name = key.rstrip("?")
      if name not in value:
        if not key.endswith("?"):
          return f"{loc + ' holding ' if loc else ''}an object without {name!r}"
        continue
      why = _mismatch(value[name], sub, f"{loc}[{name!r}]")
      if why:
        return why
    return None
  if isinstance(spec, list):
    if not isinstance(value, list):
      return got
    for i, item in enumerate(value):
      why = _mismatch(item, spec[0], f"{loc}[{i}]")
      if why:
        return why
    return None
  types = spec if isinstance(spec, tuple) else (spec,)
  return None if _is(value, types) else got


def check_shape(value: Any, spec: Any, *, path: Any, what: str, recovery: str) -> Any:
  """``value`` (read from ``path``) when it fits ``spec``; else :class:`StateFileError`.

  Args:
    value: the parsed content.
    spec: its expected shape (see the module docstring).
    path: the file it came from (named in the error).
    what: what the file is (``"a checkpoint's meta"``).
    recovery: what the user can do (``"restart=True deletes the checkpoints"``).

  Returns:
    ``value``, unchanged.

  Raises:
    StateFileError: ``"<path>: expected <what>, <spec in words>, got <where it departs>; <recovery>"``.

  >>> check_shape({"history": [{"step": "2"}]}, {"history": [{"step": int}]}, path="meta", what="meta",
  ...             recovery="restart")
  Traceback (most recent call last):
  ultr_jax._state_files.StateFileError: meta: expected meta, a JSON object with 'history' (a list of a JSON object with 'step' (an integer)), got ['history'][0]['step'] holding a string; restart
  """
  why = _mismatch(value, spec, "")
  if why is not None:
    raise StateFileError(f"{path}: expected {what}, {_describe(spec)}, got {why}; {recovery}")
  return value


def read_state_file(path: Any, spec: Any, *, what: str, recovery: str, fmt: str = "json") -> Any:
  """The content of the run-state or side file ``path``, checked against ``spec``.

  Args:
    path: the file.
    spec: the expected shape of its JSON (``fmt="json"``); ``str`` for ``fmt="text"``.
    what: what the file is, for the error.
    recovery: how to recover, for the error.
    fmt: ``"json"`` (UTF-8 JSON) or ``"text"`` (UTF-8 text).

  Returns:
    The parsed JSON value, or the text.

  Raises:
    FileNotFoundError: no such file (a caller that expects it may be absent catches this).
    StateFileError: unreadable (an ``OSError``), not UTF-8, malformed JSON (or nested too deeply to parse), or
      not of ``spec``'s shape; the message names the file, the expectation and the recovery.

  >>> import os, tempfile
  >>> path = os.path.join(tempfile.mkdtemp(), "IN_PROGRESS")
  >>> with open(path, "wb") as f:
  ...   _ = f.write(bytes([0xFF, 0xFE, 0x00]))
  >>> read_state_file(path, str, what="a workdir marker", recovery="delete it", fmt="text")
  Traceback (most recent call last):
  ultr_jax._state_files.StateFileError: ...IN_PROGRESS: expected a workdir marker, UTF-8 text, got byte 0xff at offset 0 (not UTF-8); delete it
  """
  if fmt not in ("json", "text"):
    raise ValueError(f"fmt: {fmt!r}; expected 'json' or 'text'")
  kind = "UTF-8 JSON" if fmt == "json" else "UTF-8 text"
  try:
    with open(os.fspath(path), "rb") as f:
      raw = f.read()
  except FileNotFoundError:
    raise
  except OSError as e:
    raise StateFileError(f"{path}: expected {what}, got an unreadable file ({e.strerror or e}); {recovery}") from None
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise StateFileError(
      f"{path}: expected {what}, {kind}, got byte 0x{raw[e.start]:02x} at offset {e.start} (not UTF-8); {recovery}"
    ) from None
  if fmt == "text":
    return check_shape(text, str, path=path, what=what, recovery=recovery)
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    got = "an empty file" if not text.strip() else f"malformed JSON at line {e.lineno}, column {e.colno} ({e.msg})"
    raise StateFileError(f"{path}: expected {what}, {_describe(spec)}, got {got}; {recovery}") from None
  except RecursionError:  # json's decoder recurses once per nested array or object
    got = "malformed JSON (nested too deeply to parse)"
    raise StateFileError(f"{path}: expected {what}, {_describe(spec)}, got {got}; {recovery}") from None
  return check_shape(value, spec, path=path, what=what, recovery=recovery)
