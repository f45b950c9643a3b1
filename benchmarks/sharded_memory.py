"""Bytes of the training lists per device: 1 vs 8 (fake, host) devices.

``python benchmarks/sharded_memory.py [--num_train 20000]``: in a subprocess per device count
(``--xla_force_host_platform_device_count``), places a synthetic training set the way ``fit`` holds it
(``ultr_jax.train.training_arrays``, ``data_shards=8``) and prints ``sum(s.data.nbytes for s in
a.addressable_shards)`` per device, and the one-device figure of the default config (no strata, no padding).
"""

import argparse
import json
import os
import re
import subprocess
import sys

_CHILD = """
import json, sys
import jax
from ultr_jax import data
from ultr_jax.train import default_train_config, training_arrays

n, num_train, shards = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
train = data.make_synthetic(num_train=num_train, num_valid=1, num_test=1, list_size=20, num_features=136).train
c = default_train_config()
c.num_devices, c.data_shards = n, shards
per = {}
for a in training_arrays(train, c).values():
  for s in a.addressable_shards:
    per[str(s.device)] = per.get(str(s.device), 0) + s.data.nbytes
json.dump(sorted(per.values()), sys.stdout)
"""


def _run(devices: int, num_train: int, shards: int) -> list:
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = subprocess.run(
    [sys.executable, "-c", _CHILD, str(devices), str(num_train), str(shards)],
    env=env,
    cwd=root,
    capture_output=True,
    text=True,
    check=True,
  )
  return json.loads(out.stdout)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--num_train", type=int, default=20000)
  args = parser.parse_args()
  default = _run(1, args.num_train, 0)
  one = _run(1, args.num_train, 8)
  eight = _run(8, args.num_train, 8)
  mib = 2**20
  print(f"training set: {args.num_train} queries x 20 documents x 136 features (float32)")
  print(f"1 device, default config (no strata):  {default[0] / mib:9.2f} MiB on its one device")
  print(f"1 device, data_shards=8:               {one[0] / mib:9.2f} MiB on its one device")
  print(
    f"8 devices, data_shards=8:              {max(eight) / mib:9.2f} MiB per device (max; min {min(eight) / mib:.2f})"
  )
  print(f"ratio (8 devices, per device / 1 device): {max(eight) / one[0]:.4f}")


if __name__ == "__main__":
  main()
