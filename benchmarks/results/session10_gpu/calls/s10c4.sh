# x4 call: trust tests on GPU 0; strategies then knobs on conv3d,gelu,matvec_bf16 on GPUs 1-3
source .gpu/setup.sh; prov s10c4
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P=conv3d,gelu,matvec_bf16
( export CUDA_VISIBLE_DEVICES=1,2,3
  timeout -s INT -k 20 200 kernelopt suite run benchmarks/suite --optimizer strategies --budget-minutes 2 --no-experience --parallel-problems --problems $P -o .s10strat > $OUT/suite_strategies.log 2>&1; echo "rc=$?" >> $OUT/suite_strategies.log
  timeout -s INT -k 20 200 kernelopt suite run benchmarks/suite --optimizer knobs --budget-minutes 2 --no-experience --parallel-problems --problems $P -o .s10knobs > $OUT/suite_knobs.log 2>&1; echo "rc=$?" >> $OUT/suite_knobs.log
  tar -czf $OUT/s10_suites.tgz .s10strat .s10knobs ) &
SP=$!
CUDA_VISIBLE_DEVICES=0 T 380 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_trust_gpu.py tests/gpu/test_arena_gpu.py > $OUT/trust_gpu.txt 2>&1; echo rc=$? >> $OUT/trust_gpu.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu.txt | cut -c1-200 | tail -22
wait $SP
tail -12 $OUT/suite_strategies.log | cut -c1-200; tail -12 $OUT/suite_knobs.log | cut -c1-200
