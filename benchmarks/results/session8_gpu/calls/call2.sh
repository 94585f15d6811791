source .gpu/setup.sh; prov call2
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P() { local n=$1 name=$2; shift 2; echo "== $name"; T $n python3 -m pytest -q -rfE -p no:cacheprovider "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; tail -3 $OUT/$name.txt | cut -c1-300; }
P 150 arena_gpu tests/gpu/test_arena_gpu.py
echo "== optimize sandbox"; rm -rf /tmp/ro; T 170 kernelopt optimize examples/softmax/problem.py --kernel examples/softmax/kernel.py --isolate sandbox --budget-evals 4 -o /tmp/ro > $OUT/opt_sandbox.txt 2>&1; echo rc=$? >> $OUT/opt_sandbox.txt
grep -h '"profiled"' /tmp/ro/events.jsonl | cut -c1-800 > $OUT/opt_sandbox_profiled.txt; tail -4 $OUT/opt_sandbox.txt | cut -c1-300; cut -c1-300 $OUT/opt_sandbox_profiled.txt
P 100 trust_examples "tests/gpu/test_trust_gpu.py::test_examples_pass_and_are_timed_in_every_mode"
P 60 trust_root "tests/gpu/test_trust_gpu.py::test_root_in_the_gpu_sandbox_cannot_reach_the_judge"
TMPDIR=/dev/shm P 60 trust_count_devshm "tests/gpu/test_trust_gpu.py::test_skipping_work_when_timed_is_timing_mismatch[timing_count.py]"
P 60 trust_count "tests/gpu/test_trust_gpu.py::test_skipping_work_when_timed_is_timing_mismatch[timing_count.py]"
ls /dev/shm | wc -l
