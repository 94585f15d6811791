# x4: strategies on matvec_bf16 (GPU 0) beside knobs on six problems (GPUs 1-3)
source .gpu/setup.sh; prov s11c3
( CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 30 480 kernelopt suite run benchmarks/suite --optimizer strategies --budget-minutes 2 --no-experience --parallel-problems --problems matvec_bf16 -o .s11mv > $OUT/suite_matvec_strategies.log 2>&1; echo "suite rc=$?" >> $OUT/suite_matvec_strategies.log ) &
CUDA_VISIBLE_DEVICES=1,2,3 timeout -s INT -k 30 480 kernelopt suite run benchmarks/suite --optimizer knobs --budget-minutes 2 --no-experience --parallel-problems --problems matvec_bf16,layernorm,log_softmax,mse_loss,row_sum,matmul_fp32 -o .s11knobs > $OUT/suite_knobs.log 2>&1; echo "suite rc=$?" >> $OUT/suite_knobs.log
wait
tail -14 $OUT/suite_matvec_strategies.log | cut -c1-200; tail -16 $OUT/suite_knobs.log | cut -c1-200
tar -czf $OUT/s11c3.tgz .s11mv .s11knobs; ls -la $OUT/s11c3.tgz
