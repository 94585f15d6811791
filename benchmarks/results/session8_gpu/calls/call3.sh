source .gpu/setup.sh; prov call3
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P() { local n=$1 name=$2; shift 2; echo "== $name $(date +%T)"; T $n python3 -m pytest -v -rfE -p no:cacheprovider --durations 0 "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/$name.txt | cut -c1-200 | tail -8; }
TMPDIR=/dev/shm P 200 trust_timing_devshm "tests/gpu/test_trust_gpu.py::test_skipping_work_when_timed_is_timing_mismatch"
P 150 trust_rest tests/gpu/test_trust_gpu.py::test_forged_reply_fails_only_its_candidate tests/gpu/test_trust_gpu.py::test_fake_clock_fakes_no_gpu_time tests/gpu/test_trust_gpu.py::test_an_ordinary_user_runs_the_engine_on_the_gpu
P 200 engine tests/gpu/test_engine.py
ls /dev/shm | wc -l
