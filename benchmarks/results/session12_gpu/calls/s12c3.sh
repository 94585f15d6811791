# x4: GPU tests of the landed-for-test changes on GPUs 0,1 (other_gpu, second GPU, autotune store, trust, timing);
# strategies suite at the new commit on four problems on GPUs 2,3
source .gpu/setup.sh; prov s12c3
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
( CUDA_VISIBLE_DEVICES=2,3 timeout -s INT -k 30 ${SUITE_S:-450} kernelopt suite run benchmarks/suite --optimizer strategies --budget-minutes 2 --no-experience --parallel-problems --problems bias_silu_residual,matmul_bf16,layernorm,linear_bias_gelu -o .suite12b > $OUT/suite_b.log 2>&1; echo "suite rc=$?" >> $OUT/suite_b.log ) &
SP=$!
export CUDA_VISIBLE_DEVICES=0,1
T 200 python3 -m pytest -v -rfE --tb=short -p no:cacheprovider tests/gpu/test_trust_gpu.py -k "other_gpu or second_gpu" > $OUT/gpuvis.txt 2>&1; echo rc=$? >> $OUT/gpuvis.txt
T 100 python3 -m pytest -v -rfE --tb=short -p no:cacheprovider tests/gpu/test_autotune_store_gpu.py >> $OUT/gpuvis.txt 2>&1; echo rc=$? >> $OUT/gpuvis.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/gpuvis.txt | cut -c1-220 | tail -16
T 260 python3 -m pytest -v -rfE --tb=short -p no:cacheprovider tests/gpu/test_trust_gpu.py -k "not other_gpu and not second_gpu and not fake_clock and not ordinary_user" > $OUT/trust_gpu.txt 2>&1; echo rc=$? >> $OUT/trust_gpu.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu.txt | cut -c1-220 | tail -26
unset CUDA_VISIBLE_DEVICES
wait $SP
tail -12 $OUT/suite_b.log | cut -c1-250
tar -czf $OUT/suite12b.tgz .suite12b; ls -la $OUT/suite12b.tgz
