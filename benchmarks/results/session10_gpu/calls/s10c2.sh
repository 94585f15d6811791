# x4 call: strategies suite on GPUs 1-3 (resumable in .suite10), GPU tests on GPU 0
source .gpu/setup.sh; prov s10c2
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
mkdir -p .suite10; [ -f .gpu/suite10.tgz ] && tar -xzf .gpu/suite10.tgz
PROBS=conv3d,linear_bias_gelu,matmul_bf16,matmul_fp32,avgpool2d,softmax,cross_entropy,rmsnorm,layernorm,log_softmax,bias_silu_residual,depthwise_conv2d,maxpool2d,max_dim1,gelu,cumsum,mse_loss,row_sum,matvec_bf16
( CUDA_VISIBLE_DEVICES=${SUITE_GPUS:-1,2,3} timeout -s INT -k 20 ${SUITE_S:-530} kernelopt suite run benchmarks/suite --optimizer strategies --budget-minutes 2 --no-experience --parallel-problems --problems $PROBS -o .suite10 > $OUT/suite_strategies.log 2>&1; echo "suite rc=$?" >> $OUT/suite_strategies.log ) &
SP=$!
if [ -n "$TESTS" ]; then
  export CUDA_VISIBLE_DEVICES=0
  T 230 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu/test_trust_gpu.py -k "skipping_work or examples_pass or fake_clock" > $OUT/trust_gpu.txt 2>&1; echo rc=$? >> $OUT/trust_gpu.txt
  grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu.txt | cut -c1-220 | tail -14
  T 200 python3 -m pytest -v -s --tb=short -p no:cacheprovider tests/gpu/test_transforms_gpu.py -k "conv3d_oh_8 or row_fma or blockaxis/matvec" > $OUT/blockaxis_gpu.txt 2>&1; echo rc=$? >> $OUT/blockaxis_gpu.txt
  grep -E "PASSED|FAILED|ERROR|passed|failed|rc=|Error|error" $OUT/blockaxis_gpu.txt | cut -c1-300 | tail -20
  unset CUDA_VISIBLE_DEVICES
fi
wait $SP
tail -30 $OUT/suite_strategies.log | cut -c1-250
tar -czf $OUT/suite10.tgz .suite10; ls -la $OUT/suite10.tgz
