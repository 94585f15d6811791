source .gpu/setup.sh; prov call4
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P() { local n=$1 name=$2; shift 2; echo "== $name $(date +%T)"; T $n python3 -m pytest -v -s -rfE -p no:cacheprovider --durations 0 "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/$name.txt | cut -c1-200 | tail -12; }
P 260 blockaxis_gpu tests/gpu/test_transforms_gpu.py -k blockaxis
echo "== transforms_rows conv3d $(date +%T)"; T 200 python3 benchmarks/transforms_rows.py --cases conv3d_block_co -o $OUT/conv3d_block_co.json > $OUT/conv3d_block_co.txt 2>&1; echo rc=$? >> $OUT/conv3d_block_co.txt; tail -15 $OUT/conv3d_block_co.txt
P 120 trust_repeat "tests/gpu/test_trust_gpu.py::test_skipping_work_when_timed_is_timing_mismatch[timing_repeat.py]"
