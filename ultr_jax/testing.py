"""Helpers for tests and benchmarks (public so downstream projects can reuse)."""

import os
import pathlib
from typing import Optional

__all__ = ["shared_data_dir"]


def shared_data_dir() -> Optional[pathlib.Path]:
  """Locates the read-only reference data (``../shared/data``), or None.

  Looks at ``$ULTR_JAX_SHARED_DATA`` first, then ``../shared/data`` relative
  to the repository root. The data is read in place and never copied.
  """
  env = os.environ.get("ULTR_JAX_SHARED_DATA")
  candidates = [pathlib.Path(env)] if env else []
  root = pathlib.Path(__file__).resolve().parent.parent
  candidates.append(root.parent / "shared" / "data")
  for path in candidates:
    if path.is_dir():
      return path
  return None
