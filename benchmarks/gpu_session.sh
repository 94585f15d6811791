#!/usr/bin/env bash
# One lent-GPU session: everything kernelopt measures on a GPU, by phase, tarred into $OUT.
#   bash benchmarks/gpu_session.sh tests|timing|examples|zoo-profile|zoo-time ...
# Run from the repository root on the GPU host (no package index there): the wheels
# kernelopt needs beyond the host's own torch/triton travel in .whl/ (see
# ../shared/offline-gpu/wheels.sh) and are installed with --target.
set -uo pipefail
OUT=${OUT:-/tmp/kernelopt-out}
mkdir -p "$OUT/r"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
# The `kernelopt` console script, for the demo and the CLI tests (the host's own torch stays).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name().split()[1].lower())" 2>/dev/null || echo gpu)
log() { echo "== $(date -u +%H:%M:%S) $*"; }
for phase in "$@"; do
  case "$phase" in
    tests)
      log "tests/gpu"
      python3 -m pytest -q tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/r/gpu_tests_${gpu}.txt" | tail -25 ;;
    demo)
      log "demo"
      bash examples/demo.sh > "$OUT/r/demo_${gpu}.txt" 2>&1; echo "demo exit $?"; tail -30 "$OUT/r/demo_${gpu}.txt" ;;
    env)
      python3 -m kernelopt env --json > "$OUT/r/env_${gpu}.json" 2>&1; head -c 1500 "$OUT/r/env_${gpu}.json" ;;
    timing)
      log "timing stability"
      python3 benchmarks/timing_stability.py "$OUT/r/timing_stability_${gpu}.json" 2>&1 | tail -20 ;;
    examples)
      log "profile fixtures: examples"
      python3 benchmarks/profile_fixtures.py "$OUT/r/profile" 2>&1 | tail -10
      log "profile cost"
      python3 benchmarks/profile_cost.py "$OUT/r/profile_cost_${gpu}.json" 2>&1 | tail -10 ;;
    zoo-profile)
      log "profile fixtures: zoo"
      pairs=()
      for d in benchmarks/zoo/*/; do
        n=$(basename "$d")
        [ -f "$d/label.yaml" ] || continue
        pairs+=("$n=$d/problem.py:$d/kernel.py" "$n.fixed=$d/problem.py:$d/fixed.py")
      done
      python3 benchmarks/profile_fixtures.py "$OUT/r/zoo" "${pairs[@]}" 2>&1 | tail -30 ;;
    zoo-time)
      log "zoo timings"
      python3 benchmarks/zoo_timings.py "$OUT/r/zoo_timings_${gpu}.json" 2>&1 | tail -30 ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
done
log "packing"
tar -czf "$OUT/results.tgz" -C "$OUT/r" . && rm -rf "$OUT/r"
ls -la "$OUT"
