"""Shared pytest fixtures for ultr_jax.

* Eight fake CPU devices, so sharding tests run on any machine.
* XLA:CPU compiles fast rather than well: the test workloads are tiny, so
  compiling dominates their time. The LLVM backend optimisation is off
  (``--xla_backend_optimization_level=0``; the baselines smoke binary: 75 s at
  the default level, 43 s at 0, with the same expected metrics) and fusions
  use the classic elemental emitters instead of the MLIR fusion emitters
  (``--xla_cpu_use_fusion_emitters=false``; a further third off: the same
  binary 33 s -> 22 s, the first loss tests of a worker 29 s -> 19 s).
  Subprocesses (binaries, notebook kernels) inherit both via
  ``subprocess_env``. Set either in ``XLA_FLAGS`` to override it.
  Expected-metric files are recorded with XLA's defaults, as users run the
  binaries; a smoke run whose numbers move beyond its file's tolerance under
  these settings runs with the defaults (``default_xla_env``).
* ``shared_data``: the read-only reference data in ``../shared/data``, read
  in place; tests that need it skip with a clear reason where it is absent.
* One persistent XLA compilation cache shared by the run's workers and subprocesses.
* Doctests see ``jax``, ``jnp`` and ``np``.
* JAX's compiled programs are dropped after each test module, so a worker's memory stays bounded.
* ``assert_compiles_once``: a function compiles once for every call a user makes with new values of the
  same shapes (see :func:`check_compiles_once`).
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
for _flag, _value in (
  ("xla_force_host_platform_device_count", "8"),
  ("xla_backend_optimization_level", "0"),
  ("xla_cpu_use_fusion_emitters", "false"),
):
  if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()

# One persistent compilation cache for the whole run: both xdist workers and every binary or notebook a test
# starts (they inherit the environment) reuse a program compiled once, which the suite does often (the same
# smoke binary several times, the same fit in a test and a doctest). Created by the first process (the xdist
# controller), removed when it ends. An entry half-written by another worker reads as a cache error, which JAX
# reports as a warning and compiles instead.
_OWNS_COMPILATION_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ and "PYTEST_XDIST_WORKER" not in os.environ
if _OWNS_COMPILATION_CACHE:
  import tempfile

  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="ultr_jax_test_xla_cache_")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import contextlib  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
from typing import Any, Callable  # noqa: E402

import jax  # noqa: E402
import jax.monitoring  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from ultr_jax.testing import shared_data_dir  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
  """Drops JAX's compiled programs after each test module.

  A worker keeps every executable it compiled: without this, each of the two workers of the default run grew past
  5 GB by a third of the suite, and a worker killed for memory fails whichever test it was running.
  """
  yield
  jax.clear_caches()


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
  """Path to ``../shared/data``; skips the test where it is absent."""
  path = shared_data_dir()
  if path is None:
    pytest.skip("reference data ../shared/data is absent (set ULTR_JAX_SHARED_DATA to its location to run this test)")
  return path


@pytest.fixture
def subprocess_env() -> dict:
  """Environment for a binary or notebook kernel run from a test: CPU, one device, Agg plots.

  Keeps this session's other XLA flags (the optimisation level above) and puts this checkout first on
  ``PYTHONPATH``.
  """
  env = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
  # A binary run as ``python experiments/<study>/main.py`` puts its own folder first on sys.path, so without
  # this it imports whichever ultr_jax is installed, not this checkout's.
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  return env


@pytest.fixture
def default_xla_env(subprocess_env) -> dict:
  """``subprocess_env`` with XLA's default compiler settings, as a user runs a binary.

  For the slow smoke runs whose tiny test sets turn float rounding into metric steps larger than
  their expected-metrics tolerance (CLD: one query of 40 moves NDCG@1 by 0.0125), and for the online
  study's NSGD entries, whose learner turns a rounding difference into another trajectory after ~240
  impressions (the default run compares the other entries at the fast settings).
  """
  flags = re.sub(r"--xla_(backend_optimization_level|cpu_use_fusion_emitters)=\w+", "", subprocess_env["XLA_FLAGS"])
  return {**subprocess_env, "XLA_FLAGS": " ".join(flags.split())}


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
  doctest_namespace.update(jax=jax, jnp=jnp, np=np)


_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def _count_compiles():
  """Counts XLA backend compilations (``jax.monitoring``'s compile event) inside the block: ``[count]``."""
  count = [0]

  def listener(event: str, duration: float, **kwargs: Any) -> None:
    del duration, kwargs
    if event == _BACKEND_COMPILE:
      count[0] += 1

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield count
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


def check_compiles_once(fn: Callable[..., Any], make_args: Callable[[int], tuple], *, jit: bool = True, calls: int = 3):
  """Asserts that ``fn`` traces once and compiles nothing after its first call.

  ``make_args(i)`` returns call ``i``'s ``(args, kwargs)``: new values of the same shapes every call (a
  second and third batch), with Python scalars (weak-typed) where ``fn`` takes a scalar, their values
  changing too. With ``jit=True`` the helper jits ``fn`` itself and counts its traces (a Python side
  effect in the traced function) as well; ``jit=False`` calls ``fn`` as a user does (a library entry point
  that jits inside) and counts XLA compilations only. Either way any compilation after the first call
  fails the check: a retrace on values (a static argument, a fresh ``jax.jit`` per call, a Python float
  baked into the program) shows as one. jit's cache is keyed on shapes and dtypes, so calling an already
  jitted function again with same-shaped arrays can never retrace; that is why the values and scalars
  change here. Returns the last call's output.
  """
  traces = [0]
  if jit:

    def counted(*args: Any, **kwargs: Any) -> Any:
      traces[0] += 1
      return fn(*args, **kwargs)

    run = jax.jit(counted)
  else:
    run = fn
  inputs = [make_args(i) for i in range(calls)]  # built first: their own eager ops are not counted
  outs = [jax.block_until_ready(run(*inputs[0][0], **inputs[0][1]))]  # compiles (and warms eager primitives)
  with _count_compiles() as compiles:
    for args, kwargs in inputs[1:]:
      outs.append(jax.block_until_ready(run(*args, **kwargs)))
  if jit:
    assert traces[0] == 1, f"{getattr(fn, '__name__', fn)} traced {traces[0]} times over {calls} calls"
  assert compiles[0] == 0, f"{getattr(fn, '__name__', fn)} compiled {compiles[0]} more times after its first call"
  return outs


@pytest.fixture
def assert_compiles_once() -> Callable[..., Any]:
  """:func:`check_compiles_once`, as a fixture."""
  return check_compiles_once


def assert_batches_equal(got: list, want: list) -> None:
  """Two sequences of batch dicts hold the same keys, arrays and dtypes (naming the batch and key that differ)."""
  assert len(got) == len(want)
  for i, (g, w) in enumerate(zip(got, want)):
    assert set(g) == set(w), (i, sorted(g), sorted(w))
    for k in w:
      np.testing.assert_array_equal(g[k], w[k], err_msg=f"batch {i}, {k}")
      assert g[k].dtype == w[k].dtype, (k, g[k].dtype, w[k].dtype)


def fit_leaves(result) -> list:
  """A ``fit`` result's final parameters but the score's output bias: the listwise loss is shift-invariant, so its
  gradient is zero in exact arithmetic and Adam turns float rounding (1e-9) into learning-rate-sized steps on it."""
  return [
    np.asarray(x)
    for p, x in jax.tree_util.tree_leaves_with_path(result.final_params)
    if not jax.tree_util.keystr(p).endswith("['out']['bias']")
  ]


def assert_same_fit(a, b, tol: float = 1e-6) -> None:
  """Two ``fit`` results agree: parameters (:func:`fit_leaves`), evaluation steps, losses and validation nDCG."""
  for x, y in zip(fit_leaves(a), fit_leaves(b)):
    np.testing.assert_allclose(x, y, rtol=tol, atol=tol)
  assert [h["step"] for h in a.history] == [h["step"] for h in b.history]
  for ha, hb in zip(a.history, b.history):
    np.testing.assert_allclose(ha["train/loss"], hb["train/loss"], rtol=tol, atol=tol)
    np.testing.assert_allclose(ha["valid/ndcg@10"], hb["valid/ndcg@10"], rtol=tol, atol=tol)


def pytest_unconfigure(config):
  """Removes the run's compilation cache (see the top of this file) in the process that made it."""
  if _OWNS_COMPILATION_CACHE:
    import shutil  # noqa: PLC0415

    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
