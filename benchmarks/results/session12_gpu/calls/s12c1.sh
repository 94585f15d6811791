# x4 call: GPU timing+trust tests on GPU 0, then it joins; strategies suite on GPUs 1-3 (resumable in .suite12)
source .gpu/setup.sh; prov s12c1
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
mkdir -p .suite12; [ -f .gpu/suite12.tgz ] && tar -xzf .gpu/suite12.tgz
PROBS=${PROBS:-conv3d,linear_bias_gelu,matmul_bf16,matmul_fp32,avgpool2d,softmax,cross_entropy,rmsnorm,layernorm,log_softmax,bias_silu_residual,depthwise_conv2d,maxpool2d,max_dim1,gelu,cumsum,mse_loss,row_sum,matvec_bf16}
( CUDA_VISIBLE_DEVICES=${SUITE_GPUS:-1,2,3} timeout -s INT -k 30 ${SUITE_S:-540} kernelopt suite run benchmarks/suite --optimizer ${OPT:-strategies} --budget-minutes 2 --no-experience --parallel-problems --problems $PROBS -o .suite12 > $OUT/suite_${OPT:-strategies}.log 2>&1; echo "suite rc=$?" >> $OUT/suite_${OPT:-strategies}.log ) &
SP=$!
if [ -n "$TESTS" ]; then
  export CUDA_VISIBLE_DEVICES=0
  T 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_timing.py > $OUT/timing_gpu.txt 2>&1; echo rc=$? >> $OUT/timing_gpu.txt
  grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/timing_gpu.txt | cut -c1-220 | tail -10
  T 330 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_trust_gpu.py tests/gpu/test_arena_gpu.py > $OUT/trust_gpu.txt 2>&1; echo rc=$? >> $OUT/trust_gpu.txt
  grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu.txt | cut -c1-220 | tail -24
  unset CUDA_VISIBLE_DEVICES
fi
wait $SP
tail -30 $OUT/suite_${OPT:-strategies}.log | cut -c1-250
tar -czf $OUT/suite12.tgz .suite12; ls -la $OUT/suite12.tgz
