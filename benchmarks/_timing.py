"""Shared timing helpers for the benchmark scripts (run as ``python benchmarks/<name>.py``)."""

import statistics
import time
from typing import Callable, Optional

import jax
import numpy as np
import optax


def time_method_step(method, batch: dict, reps: int, tx: Optional[optax.GradientTransformation] = None) -> float:
  """Median seconds of one warm jitted loss + grad + optimizer update of a ``Method``.

  ``tx`` defaults to the method's own optimizer, else Adam(1e-3). The first
  call (compilation) is excluded.
  """
  tx = tx or method.optimizer or optax.adam(1e-3)
  params, extra = method.init(jax.random.key(0), batch)
  opt = tx.init(params)

  @jax.jit
  def step(params, opt, key):
    (loss, _), g = jax.value_and_grad(method.loss, has_aux=True)(params, extra, batch, key)
    u, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, u), opt, loss

  params, opt, loss = step(params, opt, jax.random.key(0))
  loss.block_until_ready()
  times = []
  for i in range(reps):
    t0 = time.perf_counter()
    params, opt, loss = step(params, opt, jax.random.key(i))
    loss.block_until_ready()
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
  """Median wall seconds of ``repeats`` calls of ``fn()`` (for host-side work; no device sync)."""
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return statistics.median(times)
