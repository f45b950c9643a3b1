#!/usr/bin/env bash
# The accelerator checks in one go (time limits summing to 480 s, under 8 minutes on one GPU): the device name, the GPU-relevant tests
# (device counting equals host counting, the sharded and multi-process tests), then the click-model, training-step
# and IG benchmarks in small sizes. Every figure goes, with the device name, into one report file.
#
#   bash benchmarks/device_check.sh [OUT_DIR]      # OUT_DIR: default $OUT, else /tmp/device_check
#   JAX_PLATFORMS=cpu bash benchmarks/device_check.sh /tmp/dc_cpu   # the same on CPU (a few minutes)
#
# Each step has its own time limit (times DEVICE_CHECK_TIME_SCALE, default 1: e.g. 4 on a shared, loaded CPU) and
# the script goes on past a failing step; the report ends with one line per
# step (ok / FAILED rc / TIMED OUT) and the script's exit code is the number of failed steps.
set -u
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-/tmp/device_check}}"
mkdir -p "$OUT_DIR"
REPORT="$OUT_DIR/device_check.txt"
WORK="$(mktemp -d)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
: >"$REPORT"
FAILED=0
SUMMARY=()

step() {  # step NAME SECONDS COMMAND...
  local name="$1" limit=$(($2 * ${DEVICE_CHECK_TIME_SCALE:-1}))
  shift 2
  echo "=== $name (limit ${limit}s) $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$REPORT"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$REPORT" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    SUMMARY+=("$name: ok (${took}s)")
  elif [ $rc -eq 124 ]; then
    SUMMARY+=("$name: TIMED OUT after ${limit}s")
    FAILED=$((FAILED + 1))
  else
    SUMMARY+=("$name: FAILED rc=$rc (${took}s)")
    FAILED=$((FAILED + 1))
  fi
  echo "--- $name: rc=$rc, ${took}s" | tee -a "$REPORT"
}

{
  echo "device_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), git $(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
} | tee -a "$REPORT"
step devices 20 python -c "import jax; print('backend', jax.default_backend(), 'devices', jax.devices())"

# Tests: device counting equals the host's (forced on CPU, the default on an accelerator), spilled statistics,
# the sharded training (eight devices) and two processes fitting a click model as one.
step tests_counting 80 python -m pytest -q -p no:cacheprovider -n 0 tests/test_statistics_budget.py \
  -k "device or spilled"
step tests_sharded 60 python -m pytest -q -p no:cacheprovider -n 0 tests/test_sharded.py
step tests_processes 80 python -m pytest -q -p no:cacheprovider -n 0 tests/test_statistics_processes.py \
  -k "fit_as_one"

# Benchmarks, small: counting on the device against NumPy (the figure behind the default), the item click models
# on a long-tail log (phases, peak RSS), the training step, the IG kernel.
step bench_counting 40 python benchmarks/device_count.py --items 2000000 --repeats 3
step bench_long_tail 90 python benchmarks/long_tail.py --sessions=200000 --memory_budget_mb=64 \
  --workdir="$WORK/long_tail"
step bench_train_step 60 python benchmarks/train_step.py --steps 100 --methods naive,ips
step bench_ig 30 python benchmarks/ig_connectivity.py --scale=0.1 --repeats 1
# The minibatch click-model fit on a mesh (tables split by rows) against no mesh: one device on one GPU, the
# fake host devices on a CPU.
step bench_minibatch_mesh 20 python benchmarks/minibatch_mesh.py --sessions=20000 --models=pbm --devices=1,8

{
  echo "=== summary"
  printf '%s\n' "${SUMMARY[@]}"
} | tee -a "$REPORT"
rm -rf "$WORK"
exit "$FAILED"
