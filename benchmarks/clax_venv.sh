#!/usr/bin/env bash
# Creates a virtual environment of its own for CLAX (`clax-models` on PyPI) for benchmarks/clax_compare.py.
#
#   bash benchmarks/clax_venv.sh                # /tmp/clax-venv
#   CLAX_VENV=/somewhere bash benchmarks/clax_venv.sh
#
# Idempotent: an existing venv whose `import clax` works is left as it is. CLAX is never installed into the main
# environment. CLAX's trainer imports torch (only for its DataLoader), so a CPU build of torch goes in first
# (CLAX_TORCH_SPEC, else PyTorch's CPU index, else PyPI's torch, which pulls CUDA libraries of several GB).
#
# Versions tried (2026-11-27, Python 3.11): clax-models 0.1.1 with jax/jaxlib 0.7.2, flax 0.11.2, optax 0.2.8 and
# torch 2.13.0+cpu imports and fits. Unpinned (CLAX_JAX_SPEC=), pip picks jax 0.10.2 and `import clax` fails in
# flax 0.11.2 (CLAX requires flax<0.12): "cannot import name 'mutable_array' from 'jax._src.core'". Hence the pin.
set -euo pipefail

VENV="${CLAX_VENV:-${1:-/tmp/clax-venv}}"
PYTHON="${CLAX_BASE_PYTHON:-python3}"
CLAX_SPEC="${CLAX_SPEC:-clax-models==0.1.1}"
JAX_SPEC="${CLAX_JAX_SPEC-jax==0.7.2 jaxlib==0.7.2}"  # set empty for the newest
TORCH_SPEC="${CLAX_TORCH_SPEC:-torch==2.13.0+cpu}"
TORCH_INDEX="${CLAX_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"

# shellcheck source=benchmarks/_venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
if venv_ready "$VENV" "import clax"; then
  echo "CLAX venv ready: $VENV"
else
  venv_create "$VENV" "$PYTHON"
  venv_torch "$VENV" "$TORCH_SPEC" "$TORCH_INDEX" any
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install -q "$CLAX_SPEC" $JAX_SPEC
  "$VENV/bin/python" -c "import clax"
fi
venv_versions "$VENV" clax-models jax jaxlib flax optax torch pyarrow
