source .gpu/setup.sh; prov call5
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P() { local n=$1 name=$2; shift 2; echo "== $name $(date +%T)"; T $n python3 -m pytest -v -s -rfE -p no:cacheprovider --durations 0 "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/$name.txt | cut -c1-200 | tail -12; }
P 200 zygote_gpu tests/gpu/test_zygote_gpu.py tests/gpu/test_arena_gpu.py
echo "== eval_profile both $(date +%T)"; T 200 python3 benchmarks/eval_profile.py --zygote both --candidates 3 -o $OUT/eval_profile_zygote.txt > $OUT/eval_profile_zygote.log 2>&1; echo rc=$? >> $OUT/eval_profile_zygote.log; tail -12 $OUT/eval_profile_zygote.log | cut -c1-200
P 150 trust_zygote tests/gpu/test_trust_gpu.py::test_forged_reply_fails_only_its_candidate tests/gpu/test_trust_gpu.py::test_fake_clock_fakes_no_gpu_time "tests/gpu/test_trust_gpu.py::test_skipping_work_when_timed_is_timing_mismatch[timing_stack.py]"
ls /dev/shm | wc -l
