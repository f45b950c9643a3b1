"""Shared pytest fixtures for ultr_jax.

* Eight fake CPU devices, so sharding tests run on any machine.
* ``shared_data``: the read-only reference data in ``../shared/data``, read
  in place; tests that need it skip with a clear reason where it is absent.
* Doctests see ``jax``, ``jnp`` and ``np``.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
  ).strip()

import pathlib  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ultr_jax.testing import shared_data_dir  # noqa: E402


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
  """Path to ``../shared/data``; skips the test where it is absent."""
  path = shared_data_dir()
  if path is None:
    pytest.skip(
        "reference data ../shared/data is absent (set ULTR_JAX_SHARED_DATA to"
        " its location to run this test)"
    )
  return path


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
  doctest_namespace.update(jax=jax, jnp=jnp, np=np)
