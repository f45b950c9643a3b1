"""What an accelerator needs, checked on CPU: the OPE bootstrap, jitted (as the OPE study runs it), makes no implicit
host transfer in its steady-state calls, calls back to no host code and compiles once for fixed shapes (``fit``'s
steps: tests/test_train_state.py); the training path stays float32; float64 only where a module says why."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def test_the_training_state_and_step_stay_float32_with_x64_enabled():
  """A TPU runs float32: the training path keeps float32 data, params, optimizer state and losses even where a
  user (or a float64 study) turned x64 on and the data came in float64."""
  from ultr_jax import data  # noqa: PLC0415
  from ultr_jax.train import (  # noqa: PLC0415
    create_train_state,
    default_train_config,
    get_method,
    make_mesh,
    make_optimizer,
    make_train_steps,
    place_train,
  )
  from ultr_jax.train.sharding import replicated  # noqa: PLC0415

  with jax.enable_x64(True):
    train = data.make_synthetic(num_train=8, num_valid=1, num_test=1, list_size=4, num_features=3).train
    train = train.with_extras(clicks=(train.labels >= 2).astype(np.float64))
    train = dataclasses.replace(train, features=train.features.astype(np.float64))
    m = get_method("naive", {"ranker": "linear"}, num_features=3, list_size=4)
    mesh, c = make_mesh(1), default_train_config()
    tx = make_optimizer(c)
    arrays, layout = place_train(train, mesh, c, seeds=(0,))
    state = create_train_state(
      m, tx, np.array([0], np.uint32), arrays, layout.indices(0), layout=layout, sharding=replicated(mesh)
    )
    steps = make_train_steps(m, tx, layout=layout, click_fn=None, display="logged", batch_sharding=replicated(mesh))
    state, sm, _ = steps(state, arrays, np.stack([layout.indices(0)]), np.array([True]))
  floats = {k: v.dtype for k, v in arrays.items() if jnp.issubdtype(v.dtype, jnp.floating)}
  assert set(floats.values()) == {jnp.dtype(jnp.float32)}, floats
  for path, leaf in jax.tree_util.tree_leaves_with_path((state.params, state.opt_state, sm)):
    if jnp.issubdtype(leaf.dtype, jnp.floating):
      assert leaf.dtype == jnp.float32, (jax.tree_util.keystr(path), leaf.dtype)


# The library's float64-only paths, each with the reason its module states: none now. The identifiability fits
# (table1.py, context.py) take ``dtype`` and turn x64 on only for float64 (their float32 variants: tested below).
FLOAT64_PATHS: dict[str, str] = {}


def test_table1_float32_variant_runs_with_x64_off_and_matches_float64(monkeypatch):
  """The identifiability fits' float32 variant (a TPU's precision): x64 stays off while it runs, every array it
  returns is float32, and on a small design graph its node-merging MCC is float64's to 0.01."""
  from ultr_jax.graph.synthetic import DESIGN_GRAPHS, generate_design_dataset  # noqa: PLC0415
  from ultr_jax.studies.identifiability import table1  # noqa: PLC0415

  ds = generate_design_dataset(DESIGN_GRAPHS[2], block_size=40, num_queries=60, borrow=3)
  seen = []
  simulate = table1._simulate_runs
  monkeypatch.setattr(
    table1, "_simulate_runs", lambda *a, **k: seen.append(jax.config.read("jax_enable_x64")) or simulate(*a, **k)
  )
  kw = dict(method="dla", runs=2, epochs=300, canonical=table1.node_merging_canonical(ds))
  m32 = table1.run_method(jax.random.key(0), ds, dtype="float32", **kw)
  m64 = table1.run_method(jax.random.key(0), ds, **kw)
  assert seen == [False, True]
  assert {k: v.dtype for k, v in m32.items()} == {k: np.dtype(np.float32) for k in m32}
  assert {v.dtype for v in m64.values()} == {np.dtype(np.float64)}
  np.testing.assert_allclose(m32["mcc"], m64["mcc"], atol=0.01)
  with pytest.raises(ValueError, match="dtype='float16'"):
    table1.run_method(jax.random.key(0), ds, dtype="float16", **kw)


def test_context_study_float32_variant_runs_with_x64_off_and_matches_float64(monkeypatch):
  """The context study's float32 variant: x64 off while it runs, float32 metrics, float64's MCC to 0.01 (node
  merging, where the fit converges)."""
  from ultr_jax.studies.identifiability import context  # noqa: PLC0415

  features, labels, where = context.synthetic_letor(0, num_queries=60, num_docs=200)
  seen = []
  clicks = context._clicks
  monkeypatch.setattr(context, "_clicks", lambda *a: seen.append(jax.config.read("jax_enable_x64")) or clicks(*a))
  w = np.random.default_rng(0).uniform(-1, 1, 10)
  kw = dict(num_contexts=2, w=w, epochs=50, two_tower_epochs=50, log=lambda *_: None)
  r32 = context.context_study(jax.random.key(0), features, labels, where, dtype="float32", **kw)
  r64 = context.context_study(jax.random.key(0), features, labels, where, **kw)
  assert seen == [False, True]
  rows = [k for k in r32 if k not in ("report", "merge_pairs")]
  assert {r32[k]["mcc"].dtype for k in rows} == {np.dtype(np.float32)}
  assert {r64[k]["mcc"].dtype for k in rows} == {np.dtype(np.float64)}
  np.testing.assert_allclose(r32["DLA + node merging"]["mcc"], r64["DLA + node merging"]["mcc"], atol=0.01)


def test_float64_only_where_a_module_says_why():
  import pathlib  # noqa: PLC0415
  import re  # noqa: PLC0415

  root = pathlib.Path(__file__).resolve().parent.parent / "ultr_jax"
  found = set()
  for path in root.rglob("*.py"):
    code = "\n".join(line for line in path.read_text().splitlines() if ">>>" not in line and "..." not in line[:8])
    if re.search(r"enable_x64\(\s*True\s*\)|jax_enable_x64", code.split('"""', 2)[-1]):
      found.add(str(path.relative_to(root)))
  assert found <= set(FLOAT64_PATHS), f"float64 defaults without a stated reason: {sorted(found - set(FLOAT64_PATHS))}"
  for rel in FLOAT64_PATHS:
    assert "float64" in (root / rel).read_text().split('"""')[1], f"{rel}'s docstring does not say it needs float64"
