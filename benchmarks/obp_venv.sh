#!/usr/bin/env bash
# Creates a virtual environment of its own for the Open Bandit Pipeline (`obp` on PyPI) for benchmarks/ope_obp.py.
#
#   bash benchmarks/obp_venv.sh                 # /tmp/obp-venv
#   OBP_VENV=/somewhere bash benchmarks/obp_venv.sh
#
# Idempotent: an existing venv whose `from obp.ope import SlateCascadeDoublyRobust` works is left as it is. OBP is
# never installed into the main environment. obp 0.5.7 pins pandas<2 and scikit-learn<1.2, which have no wheels
# for this Python and do not build from source here, so obp goes in without its dependencies
# (--no-deps --ignore-requires-python) and current releases of them follow. Its package imports torch (for its
# neural estimators, which the slate estimators never touch): a CPU build goes in (OBP_TORCH_SPEC; an unpinned
# torch pulls CUDA libraries of several GB).
#
# Versions tried (2026-11-28, Python 3.11): obp 0.5.7 with numpy 2.x, pandas 2.x, scikit-learn 1.x and
# torch 2.13.0 imports, and its slate estimators (SlateStandardIPS, SlateIndependentIPS,
# SlateRewardInteractionIPS, SlateCascadeDoublyRobust) run.
set -euo pipefail

VENV="${OBP_VENV:-${1:-/tmp/obp-venv}}"
PYTHON="${OBP_BASE_PYTHON:-python3}"
OBP_SPEC="${OBP_SPEC:-obp==0.5.7}"
TORCH_SPEC="${OBP_TORCH_SPEC:-torch==2.13.0}"
TORCH_INDEX="${OBP_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
DEPS="numpy scipy pandas scikit-learn tqdm matplotlib seaborn pyyaml mypy_extensions"
CHECK="from obp.ope import SlateStandardIPS, SlateIndependentIPS, SlateRewardInteractionIPS, SlateCascadeDoublyRobust"

# shellcheck source=benchmarks/_venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
if venv_ready "$VENV" "$CHECK"; then
  echo "OBP venv ready: $VENV"
else
  venv_create "$VENV" "$PYTHON"
  venv_torch "$VENV" "$TORCH_SPEC" "$TORCH_INDEX"
  "$VENV/bin/python" -m pip install -q --no-deps --ignore-requires-python "$OBP_SPEC"
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install -q $DEPS
  "$VENV/bin/python" -c "$CHECK"
fi
venv_versions "$VENV" obp numpy pandas scikit-learn scipy torch
