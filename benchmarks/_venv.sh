#!/usr/bin/env bash
# Steps shared by the scripts that make a reference library's own virtual environment (clax_venv.sh, obp_venv.sh);
# sourced, not run. A reference library never goes into the main environment.

# venv_ready VENV CHECK: whether VENV's python runs the Python statement CHECK (the library imports).
venv_ready() {
  [ -x "$1/bin/python" ] && "$1/bin/python" -c "$2" >/dev/null 2>&1
}

# venv_create VENV PYTHON: a fresh venv at VENV from the interpreter PYTHON, with a current pip.
venv_create() {
  "$2" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip
}

# venv_torch VENV SPEC INDEX [any]: a CPU build of torch unless one imports already: SPEC by pip's configured
# find-links / index first, then the newest from PyTorch's CPU index INDEX, then (with a fourth argument) PyPI's
# torch, which pulls CUDA libraries of several GB.
venv_torch() {
  "$1/bin/python" -c "import torch" >/dev/null 2>&1 && return 0
  "$1/bin/python" -m pip install -q "$2" && return 0
  "$1/bin/python" -m pip install -q --retries 1 torch --index-url "$3" && return 0
  [ $# -ge 4 ] && "$1/bin/python" -m pip install -q torch
}

# venv_versions VENV DIST...: one line of the installed versions of the distributions DIST.
venv_versions() {
  local venv="$1"
  shift
  "$venv/bin/python" -c 'import importlib.metadata as md, sys
print("  ".join(f"{p} {md.version(p)}" for p in sys.argv[1:]))' "$@"
}
