"""Tests of fit_click_model's Minibatch solver over a device mesh: the batches split by sessions, the per-document
tables and their optimiser state split by rows over the devices; the steps are the one-device steps, each device
holds its share of every table, and a step moves the batch's rows between devices, never a table.

The eight fake CPU devices come from tests/conftest.py.
"""

import functools
import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ultr_jax import simulation as sim
from ultr_jax.simulation import minibatch as mb
from ultr_jax.simulation.click_models import tables as tb
from ultr_jax.train.sharding import make_mesh

NUM_QUERIES, LIST_SIZE = 40, 5
NUM_DOCS = NUM_QUERIES * LIST_SIZE  # 200: a multiple of 8 and 2, not of 3
# Adam's step is g / (sqrt(v) + eps): with the default eps = 1e-8 a gradient that is 0 on one device and 1e-11 on
# eight (float sums in another order) moves a row by a whole learning rate. A larger eps keeps the steps
# continuous in the gradient, so that the two fits can be compared to float precision.
OPTIMIZER = optax.adam(0.05, eps=1e-3)

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs the eight fake devices of tests/conftest.py")


@functools.cache
def _log(model, num_sessions):
  """A simulated log's (doc_ids, clicks), read-only, simulated once per model and size."""
  rng = np.random.default_rng(0)
  a = rng.uniform(0.05, 0.9, size=(NUM_QUERIES, LIST_SIZE)).astype(np.float32)
  kw = {"satisfaction": rng.uniform(0.2, 0.8, size=a.shape).astype(np.float32)} if model == "dbn" else {}
  log = sim.simulate_session_log(jax.random.key(0), model, a, num_sessions=num_sessions, noise=1.0, **kw)
  ids, clicks = np.array(log["doc_ids"]), np.array(log["clicks"])
  ids.flags.writeable = clicks.flags.writeable = False
  return ids, clicks


def _batches(model, batch_size=100, num_sessions=600):
  ids, clicks = _log(model, num_sessions)
  return [
    {"doc_ids": ids[i : i + batch_size], "clicks": clicks[i : i + batch_size]} for i in range(0, len(ids), batch_size)
  ]


def _assert_same_fit(got, want):
  assert got.iterations == want.iterations
  assert abs(got.log_likelihood - want.log_likelihood) < 1e-6
  for k in want.logits:
    np.testing.assert_allclose(np.asarray(got.logits[k]), np.asarray(want.logits[k]), rtol=0, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("model", ["pbm", "ubm", "dbn"])
def test_a_fit_over_a_mesh_takes_the_one_device_steps_and_splits_the_tables(model):
  batches = _batches(model)
  kw = {"optimizer": OPTIMIZER, "epochs": 2, "sparse": True, "steps_per_call": 3}
  one = sim.fit_click_model(model, batches, solver=sim.Minibatch(**kw), l2=1.0)
  for n in (8, 2):
    fit = sim.fit_click_model(model, batches, solver=sim.Minibatch(mesh=make_mesh(n), **kw), l2=1.0)
    _assert_same_fit(fit, one)
    for k in fit.logits:  # per-document logits split by rows, one share per device; the bias replicated
      shards = fit.logits[k].addressable_shards
      assert len(shards) == n
      per_doc = fit.logits[k].shape == (NUM_DOCS,)
      assert {s.data.shape for s in shards} == ({(NUM_DOCS // n,)} if per_doc else {fit.logits[k].shape}), k


@pytest.mark.parametrize(
  "case",
  [
    {"sparse": False, "init": True},  # dense steps from a given start: the start padded with the mesh's rows
    {"sparse": True, "tables": {"attraction": tb.QuotientRemainderTable(15)}},  # 15 + 14 rows
  ],
  ids=["dense_init", "sparse_qr"],
)
def test_rows_and_sessions_padded_to_the_mesh_change_nothing(case):
  """200 documents and batches of 70 sessions on 3 devices: rows and sessions are padded to multiples of 3."""
  batches = _batches("pbm", batch_size=70, num_sessions=700)
  solver = {"optimizer": OPTIMIZER, "sparse": case["sparse"], "tables": case.get("tables")}
  kw = {"l2": 1.0}
  if case.get("init"):
    kw["init"] = {"attraction": np.linspace(-1, 1, NUM_DOCS, dtype=np.float32), "examination": np.zeros(LIST_SIZE)}
  _assert_same_fit(
    sim.fit_click_model("pbm", batches, solver=sim.Minibatch(mesh=make_mesh(3), **solver), **kw),
    sim.fit_click_model("pbm", batches, solver=sim.Minibatch(**solver), **kw),
  )


def _collective_dims(hlo: str) -> list:
  """The dimensions of every array a collective of the compiled program produces."""
  ops = r"(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)(-start)?\("
  dims = []
  for line in hlo.splitlines():
    found = re.search(ops, line)
    if found and "=" in line[: found.start()]:
      result = line[: found.start()].split("=", 1)[1]  # "(f32[320]{0}, f32[]) " or "s32[64,5]{1,0} "
      dims += [int(d) for shape in re.findall(r"\w+\[([\d,]+)\]", result) for d in shape.split(",")]
  return dims


@pytest.mark.parametrize("sparse", [True, False])
def test_each_device_holds_its_rows_and_a_step_moves_no_table(sparse):
  """The state: vectors and Adam's moments of 8,000 rows, 1,000 on each of 8 devices; the compiled steps: no
  collective produces an array as long as a device's share of a table (what moves is the batch's rows)."""
  m, rows = sim.get_click_model("ubm"), 8000
  tables = {"attraction": tb.FullTable()}
  placement = mb._placement(make_mesh(8))
  num_rows = {"attraction": rows}
  state, run = mb._sharded_start(m, OPTIMIZER, tables, num_rows, num_rows, LIST_SIZE, None, "data_mean", placement)
  vectors, bias, vector_states, bias_state = state
  mu, nu = vector_states["attraction"][0].mu, vector_states["attraction"][0].nu
  for a in (vectors["attraction"], mu, nu):
    assert [s.data.shape for s in a.addressable_shards] == [(rows // 8,)] * 8
  for a in jax.tree.leaves((bias, bias_state)):
    assert a.sharding.is_fully_replicated
  plan = mb._Plan(
    m,
    tables,
    num_rows,
    rows,
    LIST_SIZE,
    sparse,
    1.0,
    {"attraction": np.ones(rows + 1, np.float32)},
    {"attraction": np.full(rows + 1, -1, np.int32)},
    8,
  )
  rng = np.random.default_rng(0)
  batch = {"doc_ids": rng.integers(0, rows, (64, LIST_SIZE)), "clicks": rng.random((64, LIST_SIZE)) < 0.3}
  xs = next(mb._groups(plan, [batch, batch], 2))
  hlo = run.lower(m, OPTIMIZER, sparse, state, xs, jnp.float32(0.1)).compile().as_text()
  dims = _collective_dims(hlo)
  assert dims and max(dims) < rows // 8, max(dims)


_TWO_PROCESSES = textwrap.dedent(
  """
  import json, sys
  from ultr_jax import _processes
  pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
  _processes.initialize_processes(pid, 2, f"127.0.0.1:{port}")
  import jax, numpy as np, optax
  from jax.experimental import multihost_utils
  from ultr_jax import simulation as sim
  from ultr_jax.train.sharding import make_mesh
  assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
  batches = [{k: np.asarray(v) for k, v in b.items()} for b in json.loads(sys.argv[4])]  # the same in each
  solver = sim.Minibatch(optimizer=optax.adam(0.05, eps=1e-3), mesh=make_mesh())
  fit = sim.fit_click_model("pbm", batches, solver=solver)
  attraction = multihost_utils.process_allgather(fit.logits["attraction"], tiled=True)  # each holds its rows
  json.dump({"attraction": np.asarray(attraction).tolist(), "log_likelihood": fit.log_likelihood,
             "examination": np.asarray(fit.logits["examination"]).tolist()}, open(out, "w"))
  """
)


def test_two_processes_take_the_one_process_steps(tmp_path):
  """Two CPU processes on 127.0.0.1 (jax.distributed, gloo), two devices each, every process passing the same
  batches: the tables split over the four devices of both, the fit the one-process fit."""
  batches = _batches("pbm")
  one = sim.fit_click_model("pbm", batches, solver=sim.Minibatch(optimizer=OPTIMIZER))
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=2".strip()
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  payload = json.dumps([{k: v.tolist() for k, v in b.items()} for b in batches])
  out = [tmp_path / f"p{i}.json" for i in range(2)]
  cmd = lambda i: [sys.executable, "-c", _TWO_PROCESSES, str(i), str(port), str(out[i]), payload]  # noqa: E731
  procs = [subprocess.Popen(cmd(i), env=env) for i in range(2)]
  try:
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
  finally:
    for p in procs:
      p.kill()
  for path in out:
    got = json.loads(path.read_text())
    assert abs(got["log_likelihood"] - one.log_likelihood) < 1e-6
    for k in ("attraction", "examination"):
      np.testing.assert_allclose(got[k], np.asarray(one.logits[k]), rtol=0, atol=1e-6, err_msg=k)
