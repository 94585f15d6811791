#!/usr/bin/env bash
# Install kernelopt and what it needs on this machine.
#   bash scripts/install.sh          # the library and CLI
#   bash scripts/install.sh --test   # plus the test tools
# A torch that is already installed (e.g. a CUDA build on a GPU host) is kept. Without
# one, the CPU build of torch 2.13.0 is installed first, so no multi-GB CUDA build is
# pulled onto a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras=""
[ "${1:-}" = "--test" ] && extras="[test]"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$PY" -m pip install -q torch
  else
    "$PY" -m pip install -q "torch==2.13.0" || "$PY" -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
  fi
fi
"$PY" -m pip install -q -e ".${extras}"
