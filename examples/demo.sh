#!/usr/bin/env bash
# The README's demo: environment, verification of every example (the correct kernel
# passes, the deliberately wrong one fails with exit 1), timing, diagnosis, the
# strategies and past outcomes recommended for the bottleneck found, and an optimize run.
#
#   bash examples/demo.sh
#
# With a CUDA GPU the problems run at their full size; without one they run small
# (--set overrides) in the Triton interpreter on the CPU, and `bench` says that
# there is no GPU to time on.
set -uo pipefail
cd "$(dirname "$0")/.."

if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  gpu=1
else
  gpu=0
  export TRITON_INTERPRET=1
fi

# Small shapes for the CPU interpreter; none on a GPU (the problem's own sizes).
sizes() {
  [ "$gpu" = 1 ] && return 0
  case "$1" in
    softmax) echo "--set ROWS=16 --set COLS=100" ;;
    rmsnorm) echo "--set ROWS=16 --set DIM=100" ;;
    matvec) echo "--set M=64 --set K=300" ;;
  esac
}

failures=0
shown() {
  # The command as one could paste it: arguments with spaces or quotes are quoted.
  local arg out=""
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./=:,+@%-]+$ ]]; then
      out+="$arg "
    else
      out+="'${arg//\'/\'\\\'\'}' "
    fi
  done
  echo "${out% }"
}
step() {
  # step EXPECTED_EXIT_CODE command...: run, show, and count an unexpected exit code.
  local expected=$1
  shift
  echo
  echo "\$ $(shown "$@")"
  "$@"
  local rc=$?
  if [ "$rc" != "$expected" ]; then
    echo "demo: expected exit $expected, got $rc" >&2
    failures=$((failures + 1))
  fi
}

step 0 kernelopt env

for name in softmax rmsnorm matvec; do
  # shellcheck disable=SC2046 # sizes() is a list of arguments on purpose
  step 0 kernelopt check "examples/$name/problem.py" --kernel "examples/$name/kernel.py" $(sizes "$name")
  # shellcheck disable=SC2046
  step 1 kernelopt check "examples/$name/problem.py" --kernel "examples/$name/kernel_wrong.py" $(sizes "$name")
done

# One candidate verified (3 trials, as check) and timed in one engine: the first use on a GPU.
# bench exits 1 without a GPU (nothing to time): that is the expected outcome here.
# shellcheck disable=SC2046
step $((1 - gpu)) kernelopt bench examples/softmax/problem.py --kernel examples/softmax/kernel.py --verify $(sizes softmax)

# Diagnose: live (ncu) on a GPU; without one, from the committed H200 profile of the same kernel.
if [ "$gpu" = 1 ] && command -v ncu >/dev/null 2>&1; then
  step 0 kernelopt diagnose examples/softmax/problem.py --kernel examples/softmax/kernel.py
else
  step 0 kernelopt diagnose --metrics tests/fixtures/profile/softmax/raw.csv
fi

# What to try for that bottleneck: the strategy packs, then past outcomes (a fresh store
# here, so only the shipped seed experience answers).
step 0 kernelopt strategies list --backend triton --category dram
# Everything the demo writes goes to a temporary folder (said so at the end), never to runs/
# or your experience store.
demo_dir=$(mktemp -d)
# The diagnosis as JSON, so that recommend takes the bottleneck, sub-cause and measured
# values from it and the packs' conditions are checked (same source as the step above).
diagnosis="$demo_dir/diagnosis.json"
if [ "$gpu" = 1 ] && command -v ncu >/dev/null 2>&1; then
  kernelopt diagnose examples/softmax/problem.py --kernel examples/softmax/kernel.py --json >"$diagnosis"
else
  kernelopt diagnose --metrics tests/fixtures/profile/softmax/raw.csv --json >"$diagnosis"
fi
# A fresh experience store (the default one under a temporary XDG_DATA_HOME, created on first
# use), so only the shipped seed experience answers.
step 0 env XDG_DATA_HOME="$demo_dir" KERNELOPT_DB= kernelopt experience recommend --diagnosis "$diagnosis" \
  --kernel "row softmax" --backend triton --chip sm_90 -n 3

# Optimize: the default optimizer (strategies) applies the packs' source transforms that fit the
# kernel and tunes their knobs and the launch parameters, verifying and timing every version,
# then re-times the best few interleaved and writes the report. On a GPU at full size (about two
# minutes); on the CPU a small interpreter run whose times are interpreter wall times.
run_dir="$demo_dir/optimize-matvec"
if [ "$gpu" = 1 ]; then
  step 0 kernelopt optimize examples/matvec/problem.py --kernel examples/matvec/kernel.py -o "$run_dir" \
    --budget-minutes 2 --no-experience
else
  # shellcheck disable=SC2046
  step 0 kernelopt optimize examples/matvec/problem.py --kernel examples/matvec/kernel.py $(sizes matvec) \
    -o "$run_dir" --rounds 2 --beam 1 --proposals 3 --no-experience
fi
step 0 kernelopt report "$run_dir"

echo
echo "demo: its files (the diagnosis, the experience store, the optimize run) are in the temporary folder $demo_dir"
if [ "$failures" = 0 ]; then
  echo "demo: all steps behaved as expected"
else
  echo "demo: $failures step(s) did not behave as expected" >&2
  exit 1
fi
