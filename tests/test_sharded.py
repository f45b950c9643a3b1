"""Training data sharded over devices: 8 host devices train as 1, and each holds 1/8 of the training lists.

The checks run in a subprocess with eight fake CPU devices (``--xla_force_host_platform_device_count=8``), so
they do not depend on how many devices the test session has.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ultr_jax import data
from ultr_jax.train import default_train_config, training_arrays
from ultr_jax.train.input import _stratified_indices
from ultr_jax.train.sharding import process_query_range, stratum_bounds

_SCRIPT = textwrap.dedent(
  """
  import json, sys
  import jax, numpy as np
  from ultr_jax import data
  from ultr_jax.train import default_train_config, fit, get_method, training_arrays

  assert jax.device_count() == 8, jax.devices()
  splits = data.make_synthetic(num_train=77, num_valid=16, num_test=4, list_size=6, num_features=5, seed=3)
  train = splits.train.with_extras(clicks=(splits.train.labels >= 2).astype(np.float32))
  out = {}

  def bytes_per_device(arrays):
    per = {}
    for a in arrays.values():
      for s in a.addressable_shards:
        per[str(s.device)] = per.get(str(s.device), 0) + s.data.nbytes
    return sorted(per.values())

  for n, shards in ((1, 8), (8, 8), (1, 0), (8, 0)):
    c = default_train_config()
    c.steps, c.batch_size, c.eval_every, c.progress, c.learning_rate = 24, 16, 8, False, 0.05
    c.num_devices, c.data_shards = n, shards
    res = {}
    for name in ("naive", "dla") if shards else ("dla",):
      m = get_method(name, {"ranker": "mlp", "hidden_sizes": [8]}, num_features=5, list_size=6)
      r = fit(m, train, splits.valid, config=c, seeds=(0, 1))
      res[name] = {
        # The output bias is left out: the listwise losses are shift-invariant, so its gradient is zero in
        # exact arithmetic and Adam turns float rounding (1e-9) into learning-rate-sized steps on it.
        "params": [
          np.asarray(x).tolist()
          for p, x in jax.tree_util.tree_leaves_with_path(r.final_params)
          if "'out']['bias']" not in jax.tree_util.keystr(p)
        ],
        "valid": [h["valid/ndcg@10"] for h in r.history],
        "loss": [h["train/loss"] for h in r.history],
      }
    out[f"{n}/{shards}"] = {"fit": res, "bytes": bytes_per_device(training_arrays(train, c))}
  json.dump(out, sys.stdout)
  """
)


@pytest.fixture(scope="module")
def eight_devices():
  import os
  import re

  env = dict(os.environ, JAX_PLATFORMS="cpu")
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=8").strip()
  proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout)


@pytest.mark.parametrize("shards", [8, 0])
def test_eight_devices_train_as_one(eight_devices, shards):
  """With K strata on 1 and 8 devices; and with the default (one permutation per epoch) on 1 device, unsharded,
  and on 8, sharded with an exact reduce-scatter gather."""
  one, eight = eight_devices[f"1/{shards}"]["fit"], eight_devices[f"8/{shards}"]["fit"]
  for name in one:
    for a, b in zip(one[name]["params"], eight[name]["params"]):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one[name]["loss"], eight[name]["loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one[name]["valid"], eight[name]["valid"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shards", [8, 0])
def test_each_of_eight_devices_holds_an_eighth(eight_devices, shards):
  one, eight = eight_devices["1/8"]["bytes"], eight_devices[f"8/{shards}"]["bytes"]
  assert len(one) == 1 and len(eight) == 8
  assert all(b * 8 == one[0] for b in eight)
  # 77 queries in 8 strata of 10 rows: 3 padding rows on top of the unpadded one-device figure.
  assert one[0] == eight_devices["1/0"]["bytes"][0] * 80 // 77


def test_strata_bounds_and_process_ranges():
  b = stratum_bounds(77, 8)
  assert b[0] == 0 and b[-1] == 77 and set(np.diff(b)) <= {9, 10}
  ranges = [process_query_range(77, 8, process_index=p, process_count=4) for p in range(4)]
  assert ranges[0][0] == 0 and ranges[-1][1] == 77
  assert all(a[1] == c[0] for a, c in zip(ranges, ranges[1:]))
  with pytest.raises(ValueError, match="multiple of the process count"):
    process_query_range(77, 6, process_index=0, process_count=4)


def test_stratified_batches_take_each_query_once_per_epoch_and_stay_in_their_stratum():
  bounds = stratum_bounds(37, 4)  # strata of 9 or 10 queries, 10 rows each
  m = 10
  rows = np.concatenate([_stratified_indices(bounds, 8, step, [5], data_seed=1)[0] for step in range(5)])
  per_stratum = rows.reshape(5, 4, 2)  # [step, stratum, B / K]
  for k in range(4):
    got = per_stratum[:, k].reshape(-1)
    assert np.all(got // m == k)  # block k of every batch is drawn from stratum k
    assert np.all(got % m < bounds[k + 1] - bounds[k])  # never a padding row
    size = bounds[k + 1] - bounds[k]
    assert len(set(got[:size].tolist())) == size  # the first epoch covers the stratum once


def test_training_arrays_pad_each_stratum_with_masked_lists():
  splits = data.make_synthetic(num_train=10, num_valid=1, num_test=1, list_size=4, num_features=3)
  c = default_train_config()
  c.num_devices, c.data_shards = 1, 4
  arrays = training_arrays(splits.train, c)
  real = np.asarray(arrays["where"]).any(-1).reshape(4, 3)
  np.testing.assert_array_equal(real.sum(1), np.diff(stratum_bounds(10, 4)))
  feats = np.asarray(arrays["features"]).reshape(4, 3, 4, 3)
  np.testing.assert_allclose(feats[0, :2], splits.train.features[:2])  # stratum 0: queries 0, 1
  np.testing.assert_allclose(feats[1, :3], splits.train.features[2:5])  # stratum 1: queries 2..4
