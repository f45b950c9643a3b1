"""JAX's persistent compilation cache for the experiment binaries: one switch, one convention.

The studies that train many programs (LBD, CLD, SIF) read ``compilation_cache_dir`` from their
config: ``""`` leaves the cache off, a relative path is taken under the run's ``--workdir``, an
absolute path is used as is (shared across runs). Within one run it already pays: :func:`ultr_jax.train.fit` builds fresh closures per call, so grid points
and seeds whose programs are identical compile once.
"""

import os
from typing import Optional

import jax

__all__ = ["enable_compilation_cache"]


def enable_compilation_cache(path: str, workdir: Optional[str] = None) -> Optional[str]:
  """Turns on JAX's persistent compilation cache at ``path`` (every program, however small).

  Args:
    path: cache directory; ``""`` does nothing; relative paths are under ``workdir``.
    workdir: the run's output directory (required for a relative ``path``).

  Returns:
    The absolute cache directory, or None when ``path`` is empty.

  >>> enable_compilation_cache("") is None
  True
  """
  if not path:
    return None
  if not os.path.isabs(path):
    if workdir is None:
      raise ValueError(f"compilation_cache_dir={path!r} is relative: it needs a workdir")
    path = os.path.join(os.path.abspath(workdir), path)
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  return path
