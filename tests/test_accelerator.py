"""What an accelerator needs of the OPE bootstrap, checked on CPU: jitted (as the OPE study runs it), its
steady-state calls make no implicit host transfer, its program calls back to no host code, and it compiles once
for fixed shapes (``fit``'s steps: tests/test_train_state.py)."""

import jax
import jax.numpy as jnp
import numpy as np

from conftest import check_compiles_once
from ultr_jax.evaluation import bootstrap_interval, paired_bootstrap_interval
from ultr_jax.evaluation._common import Estimate


def _estimate(i: int, n: int = 64) -> Estimate:
  terms = jnp.asarray(np.random.default_rng(i).normal(size=n), jnp.float32)
  return Estimate(jnp.mean(terms), terms, jnp.array(0), jnp.array(float(n)), jnp.ones(n))


def _bootstrap(est, key):
  return bootstrap_interval(est, key, num_replicates=64, chunk_size=16)


def test_bootstrap_steady_state_makes_no_implicit_transfer():
  run = jax.jit(_bootstrap)
  inputs = [(_estimate(i), jax.random.key(i)) for i in range(3)]  # on the devices before the guard
  jax.block_until_ready(run(*inputs[0]))
  with jax.transfer_guard("disallow"):
    for est, key in inputs[1:]:
      ci = jax.block_until_ready(run(est, key))
  assert bool(ci.lower < ci.value < ci.upper)
  # The guard sees arguments and eager values; a host callback inside the program shows in its HLO.
  hlo = run.lower(*inputs[0]).as_text()
  assert "callback" not in hlo.lower(), "the bootstrap's program calls back to the host"


def test_paired_bootstrap_steady_state_makes_no_implicit_transfer():
  run = jax.jit(lambda a, b, key: paired_bootstrap_interval(a, b, key, num_replicates=64, chunk_size=16))
  inputs = [(_estimate(i), _estimate(i + 10), jax.random.key(i)) for i in range(2)]
  jax.block_until_ready(run(*inputs[0]))
  with jax.transfer_guard("disallow"):
    jax.block_until_ready(run(*inputs[1]))


def test_bootstrap_compiles_once_for_fixed_shapes():
  check_compiles_once(_bootstrap, lambda i: ((_estimate(i), jax.random.key(i)), {}))
