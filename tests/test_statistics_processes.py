"""Two CPU processes joined by ``jax.distributed`` (gloo) fit a click model as one: each reads its own row groups
of the session shards, the statistics are merged across processes (in memory by an all-gather, or through the
partition files of a shared spill directory, whose partitions the processes then fit a share each) and the fit
and the held-out scores equal one process's."""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from ultr_jax import data
from ultr_jax import simulation as sim

_SCRIPT = textwrap.dedent(
  """
  import json, sys
  from ultr_jax import _processes
  pid, port, shards, out_path, budget, spill = sys.argv[1:7]
  _processes.initialize_processes(int(pid), 2, f"127.0.0.1:{port}")
  import jax
  from ultr_jax import data, simulation as sim
  assert jax.process_count() == 2
  stream = lambda part: data.SessionStream(f"{shards}/{part}", batch_size=256)  # this process's row groups
  out = {}
  for spilled in (False, True):  # in memory (all-gathered), then through the partition files of a shared spill dir
    solver = sim.Statistics(
      budget=int(budget) if spilled else None, spill_dir=spill if spilled else None, num_partitions=3,
      across_processes=True,
    )
    for model in ("pbm", "ubm"):
      fit = sim.fit_click_model(model, stream("train"), solver=solver, num_docs=stream("train").num_docs, l2=1.0)
      scores = sim.evaluate_click_model_stream(model, fit.params, stream("test"), across_processes=True)
      out[f"{model}|{spilled}"] = {"attraction": fit.params["attraction"].tolist(), "perplexity": scores["perplexity"],
                                   "num_sessions": scores["num_sessions"], "log_likelihood": fit.log_likelihood}
  json.dump(out, open(out_path, "w"))
  """
)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
  d = tmp_path_factory.mktemp("long_tail")
  for part, seed, n in (("train", 0, 4000), ("test", 1, 1000)):
    batches = sim.simulate_long_tail_log(
      jax.random.key(seed), "ubm", num_sessions=n, num_queries=150, num_candidates=6, list_size=4, batch_size=500
    )
    data.write_session_shards(batches, d / part, row_group_size=200)
  return d


def _reference(shards, solver):
  stream = lambda part: data.SessionStream(shards / part, batch_size=256, process_index=0, process_count=1)
  out = {}
  for model in ("pbm", "ubm"):
    fit = sim.fit_click_model(model, stream("train"), solver=solver, num_docs=stream("train").num_docs, l2=1.0)
    scores = sim.evaluate_click_model_stream(model, fit.params, stream("test"))
    out[model] = {"attraction": fit.params["attraction"], **scores, "log_likelihood": fit.log_likelihood}
  return out


def _two_processes(tmp_path, shards, budget, spill):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  port = _free_port()
  args = lambda i: [sys.executable, "-c", _SCRIPT, str(i), str(port), str(shards), str(tmp_path / f"p{i}.json")]
  procs = [subprocess.Popen(args(i) + [str(budget), spill], env=env) for i in range(2)]
  try:
    for p in procs:
      assert p.wait(timeout=420) == 0
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  return [json.load(open(tmp_path / f"p{i}.json")) for i in range(2)]


def test_two_processes_fit_as_one(tmp_path, shards):
  """Both merges in the same two processes (one start-up): in memory, and spilled with a 3,000-byte budget."""
  spill = str(tmp_path / "spill")
  got = _two_processes(tmp_path, shards, 3000, spill)
  for spilled in (False, True):
    want = _reference(shards, sim.Statistics(budget=3000, num_partitions=3) if spilled else sim.Statistics())
    for model in ("pbm", "ubm"):
      for out in got:  # both processes hold the whole log's fit and scores, one process's to 1e-6
        o = out[f"{model}|{spilled}"]
        assert o["num_sessions"] == want[model]["num_sessions"]
        np.testing.assert_allclose(o["attraction"], want[model]["attraction"], atol=1e-6)
        assert o["perplexity"] == pytest.approx(want[model]["perplexity"], abs=1e-6)
        assert o["log_likelihood"] == pytest.approx(want[model]["log_likelihood"], abs=1e-6)
  # merged through the partition files: per model one run directory with both writers' metadata
  runs = os.listdir(spill)
  assert len(runs) == 2
  for run in runs:
    assert len([f for f in os.listdir(os.path.join(spill, run)) if f.endswith(".json")]) == 2


def _binary(args, tmp_path, n):
  """Runs a binary with ``args`` as ``n`` processes (the shared process flags); waits for all."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  port = _free_port()
  flags = lambda i: [f"--num_processes={n}", f"--process_id={i}", f"--coordinator_address=127.0.0.1:{port}"]
  procs = [subprocess.Popen([sys.executable, *args(i), *flags(i)], env=env) for i in range(n)]
  try:
    for p in procs:
      assert p.wait(timeout=420) == 0
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()


def test_identifiability_check_as_two_processes(tmp_path, shards):
  check = "experiments/identifiability/check.py"
  out = lambda name: [check, f"--click_log={shards / 'train'}", f"--out={tmp_path / name}"]
  _binary(lambda i: out("one.json"), tmp_path, 1)
  _binary(lambda i: out("two.json"), tmp_path, 2)
  one, two = (json.load(open(tmp_path / f)) for f in ("one.json", "two.json"))
  assert one == two and one["num_rows"] == 4000 * 4


@pytest.mark.slow
def test_click_model_study_as_two_processes(tmp_path, shards):
  main = "experiments/click_models/main.py"
  args = lambda workdir: (
    lambda i: [
      main,
      "--config=experiments/click_models/configs/default.py:smoke",
      f"--workdir={tmp_path / workdir}",
      f"--config.click_log={shards / 'train'}",
      "--config.fit_models=('pbm', 'ubm')",
      "--config.ctr_models=('dctr',)",
    ]
  )
  _binary(args("one"), tmp_path, 1)
  _binary(args("two"), tmp_path, 2)
  one, two = (json.load(open(tmp_path / w / "results.json")) for w in ("one", "two"))
  for model in ("pbm", "ubm", "dctr"):
    a, b = one["log"][model], two["log"][model]
    assert a["perplexity"]["mean"] == pytest.approx(b["perplexity"]["mean"], abs=1e-6)
    assert a["log_likelihood"]["mean"] == pytest.approx(b["log_likelihood"]["mean"], abs=1e-6)
