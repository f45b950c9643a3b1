"""Two CPU processes joined by ``jax.distributed`` (gloo collectives) train as one process.

Each process loads only its own queries (``sharding.process_query_range``) and ``fit`` builds the global,
sharded training array from them (``jax.make_array_from_process_local_data``). The processes run with a
time limit and are killed on failure.
"""

import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import numpy as np

_SCRIPT = textwrap.dedent(
  """
  import json, sys
  import jax
  import numpy as np

  mode, out_path, steps, workdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] or None
  if mode == "mp":
    pid, port = int(sys.argv[5]), int(sys.argv[6])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
  from ultr_jax import data
  from ultr_jax.train import default_train_config, fit, get_method
  from ultr_jax.train.sharding import process_query_range

  splits = data.make_synthetic(num_train=41, num_valid=12, num_test=4, list_size=6, num_features=5, seed=7)
  train = splits.train.with_extras(clicks=(splits.train.labels >= 2).astype(np.float32))
  if mode == "mp":
    assert jax.process_count() == 2 and jax.device_count() == 2
    lo, hi = process_query_range(train.num_queries, 2)
    train = train.subset(np.arange(lo, hi))  # this process holds its queries only
  c = default_train_config()
  c.steps, c.batch_size, c.eval_every, c.progress, c.learning_rate = steps, 8, 10, False, 0.05
  c.num_devices, c.data_shards, c.local_data = (1 if mode == "ref" else 0), 2, mode == "mp"
  m = get_method("naive", {"ranker": "linear"}, num_features=5, list_size=6)
  r = fit(m, train, splits.valid, config=c, seeds=(0, 1), workdir=workdir)
  out = {
    # The score bias is left out: the softmax loss is shift-invariant, so its gradient is zero in exact
    # arithmetic and Adam turns float rounding into learning-rate-sized steps on it.
    "params": [
      np.asarray(x).tolist()
      for p, x in jax.tree_util.tree_leaves_with_path(r.final_params)
      if not jax.tree_util.keystr(p).endswith("['bias']")
    ],
    "loss": [h["train/loss"] for h in r.history],
    "valid": [h["valid/ndcg@10"] for h in r.history],
    "num_queries": train.num_queries,
  }
  with open(out_path, "w") as f:
    json.dump(out, f)
  """
)


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _two_processes(tmp_path, env, steps, workdir):
  """Runs the script in two processes joined through a coordinator on 127.0.0.1; their outputs."""
  port = _free_port()
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", _SCRIPT, "mp", str(tmp_path / f"p{i}.json"), str(steps), workdir, str(i), str(port)],
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  try:
    errs = []
    for p in procs:
      _, err = p.communicate(timeout=300)
      errs.append(err)
    assert all(p.returncode == 0 for p in procs), "\n".join(e[-3000:] for e in errs)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  return [json.loads((tmp_path / f"p{i}.json").read_text()) for i in range(2)]


def test_two_processes_train_as_one_and_resume_from_their_checkpoint(tmp_path):
  """The two processes train 10 steps and checkpoint (orbax, both writing one directory), then a second pair
  resumes to step 20; the result equals one process training 20 steps without a stop."""
  env = _env()
  ref_path = tmp_path / "ref.json"
  subprocess.run([sys.executable, "-c", _SCRIPT, "ref", str(ref_path), "20", ""], env=env, check=True, timeout=300)
  workdir = str(tmp_path / "mp_run")
  first = _two_processes(tmp_path, env, 10, workdir)
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "naive", "10")), os.listdir(workdir)
  parts = _two_processes(tmp_path, env, 20, workdir)
  ref = json.loads(ref_path.read_text())
  assert len(first[0]["loss"]) == 1 and len(parts[0]["loss"]) == 2  # evaluations at steps 10, then 10 and 20
  assert sum(p["num_queries"] for p in parts) == ref["num_queries"] and all(p["num_queries"] < 41 for p in parts)
  assert ref["params"]
  for part in parts:
    for a, b in zip(ref["params"], part["params"]):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref["loss"], part["loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref["valid"], part["valid"], rtol=1e-5, atol=1e-6)
