#!/usr/bin/env bash
# One lent-GPU session: everything kernelopt measures on a GPU, by phase, tarred into $OUT.
#   KERNELOPT_COMMIT=$(git rev-parse HEAD) bash benchmarks/gpu_session.sh PHASE ...
#   phases: tests zoo-test demo env timing examples profile-cost zoo-profile zoo-time knob-search resume suite
#           throughput racing
# The lent machine gets the work tree without .git, so the commit comes from outside
# (KERNELOPT_COMMIT) and lands in every result's provenance.
# Run from the repository root on the GPU host (no package index there): the wheels
# kernelopt needs beyond the host's own torch/triton travel in .whl/ (see
# ../shared/offline-gpu/wheels.sh) and are installed with --target.
set -uo pipefail
OUT=${OUT:-/tmp/kernelopt-out}
mkdir -p "$OUT/r"
# A second invocation in the same call must add to what the first packed, not pack an empty r/ over it.
[ -f "$OUT/results.tgz" ] && tar -xzf "$OUT/results.tgz" -C "$OUT/r"
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
      # One file at a time, each test under a time limit: a hang must cost one test, not the
      # call. test_engine compiles two load_inline extensions (minutes on a bare machine).
      for f in ${GPU_TEST_FILES:-test_engine test_timing test_profile test_harness_verify}; do
        log "tests/gpu/$f.py"
        python3 -m pytest -v -rfE -p no:cacheprovider --timeout 480 --durations 5 "tests/gpu/$f.py" \
          > "$OUT/r/gpu_${f}_${gpu}.txt" 2>&1
        grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" "$OUT/r/gpu_${f}_${gpu}.txt" | tail -20
        tar -czf "$OUT/results.tgz" -C "$OUT/r" .
      done ;;
    knob-search)
      # The search again (issue #11); exhaustive search was measured once and is reused.
      log "knob search ${KNOB_CASES:-all cases}"
      python3 benchmarks/knob_search.py ${KNOB_CASES:+--cases $KNOB_CASES} --budget-minutes 1.5 \
        --exhaustive-from benchmarks/results/knob_search_h100/part1_drafts.json \
        --exhaustive-from benchmarks/results/knob_search_h100/part2_examples.json \
        --exhaustive-from benchmarks/results/knob_search_h100/max_dim1/knob_search.json -o "$OUT/r/knob_search" 2>&1 \
        | grep -v "^  " | tail -20 ;;
    suite)
      # The whole suite with the knob optimizer (issue #13), resumable across calls: carry
      # SUITE_OUT (default .gpu/suite_out) in and back out; SUITE_SECONDS bounds this call's share.
      # TERM, then KILL: the suite resumes at the problem it was on either way.
      so=${SUITE_OUT:-.gpu/suite_out}
      log "suite run into $so (${SUITE_SECONDS:-480} s)"
      timeout --signal=TERM --kill-after=20 "${SUITE_SECONDS:-480}" python3 -m kernelopt suite run benchmarks/suite \
        --budget-minutes 1 --rounds 4 ${SUITE_ARGS:-} -o "$so" 2>&1 | grep -E "^\[|skipped|resum|rror" | tail -40
      tar -czf "$OUT/suite_out.tgz" -C "$so" . ;;
    throughput)
      # Evaluations per GPU-minute and fixed overhead per problem, cold then warm caches (issue #23).
      log "throughput (${THROUGHPUT_PROBLEMS:-default problems})"
      python3 benchmarks/throughput.py "$OUT/r/throughput_${gpu}.json" ${THROUGHPUT_PROBLEMS:+--problems $THROUGHPUT_PROBLEMS} \
        ${THROUGHPUT_ARGS:-} 2>&1 | tail -20 ;;
    racing)
      # Every raced-out candidate re-timed in full: none may have belonged in the beam (issue #23).
      log "racing check (${RACING_PROBLEMS:-default problems})"
      python3 benchmarks/racing_check.py "$OUT/r/racing_check_${gpu}.json" ${RACING_PROBLEMS:+--problems $RACING_PROBLEMS} \
        ${RACING_ARGS:-} 2>&1 | grep -v "^  " | tail -20 ;;
    resume)
      # Kill then --resume against an uninterrupted run (issue #11).
      log "resume check"
      python3 benchmarks/resume_check.py benchmarks/suite/gelu/problem.py benchmarks/suite/gelu/kernel.py \
        -o "$OUT/r/resume_check" 2>&1 | tail -8 ;;
    zoo-test)
      log "tests/gpu/test_diagnose_zoo_gpu.py"
      python3 -m pytest -v -rfE -p no:cacheprovider --timeout 300 tests/gpu/test_diagnose_zoo_gpu.py \
        > "$OUT/r/gpu_test_diagnose_zoo_gpu_${gpu}.txt" 2>&1
      grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" "$OUT/r/gpu_test_diagnose_zoo_gpu_${gpu}.txt" | tail -40 ;;
    demo)
      log "demo"
      bash examples/demo.sh > "$OUT/r/demo_${gpu}.txt" 2>&1; echo "demo exit $?"; tail -30 "$OUT/r/demo_${gpu}.txt" ;;
    env)
      python3 -m kernelopt env --json > "$OUT/r/env_${gpu}.json" 2>&1; head -c 1500 "$OUT/r/env_${gpu}.json" ;;
    timing)
      log "timing stability"
      python3 benchmarks/timing_stability.py "$OUT/r/timing_stability_${gpu}.json" \
        --cases softmax_65536x4096,matvec_32768x16384 2>&1 | tail -30 ;;
    examples)
      log "profile fixtures: examples"
      python3 benchmarks/profile_fixtures.py "$OUT/r/profile_${gpu}" 2>&1 | tail -10 ;;
    profile-cost)
      log "profile cost"
      python3 benchmarks/profile_cost.py "$OUT/r/profile_cost_${gpu}.json" ${PROFILE_COST_ARGS:-} 2>&1 | tail -40 ;;
    zoo-profile)
      log "profile fixtures: zoo"
      pairs=()
      for d in benchmarks/zoo/*/; do
        n=$(basename "$d")
        [ -f "$d/label.yaml" ] || continue
        # ZOO_ENTRIES="a b": profile only those entries.
        if [ -n "${ZOO_ENTRIES:-}" ] && [[ " $ZOO_ENTRIES " != *" $n "* ]]; then continue; fi
        pairs+=("$n=$d/problem.py:$d/kernel.py" "$n.fixed=$d/problem.py:$d/fixed.py")
      done
      python3 benchmarks/profile_fixtures.py "$OUT/r/zoo_${gpu}" "${pairs[@]}" 2>&1 | tail -30 ;;
    zoo-time)
      log "zoo timings"
      python3 benchmarks/zoo_timings.py "$OUT/r/zoo_timings_${gpu}.json" 2>&1 | tail -30 ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
  # Packed after every phase: a call cut off by its time limit still returns what finished.
  tar -czf "$OUT/results.tgz" -C "$OUT/r" .
done
log "packing"
tar -czf "$OUT/results.tgz" -C "$OUT/r" . && rm -rf "$OUT/r"
ls -la "$OUT"
