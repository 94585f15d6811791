# x4: knobs on the 12 problems (conv3d: session 10 call 4) not compared in call 3 (all four GPUs)
source .gpu/setup.sh; prov s11c4
CUDA_VISIBLE_DEVICES=0,1,2,3 timeout -s INT -k 30 ${SUITE_S:-540} kernelopt suite run benchmarks/suite --optimizer knobs --budget-minutes 2 --no-experience --parallel-problems --problems linear_bias_gelu,matmul_bf16,avgpool2d,softmax,cross_entropy,rmsnorm,bias_silu_residual,depthwise_conv2d,maxpool2d,max_dim1,gelu,cumsum -o .s11knobs2 > $OUT/suite_knobs2.log 2>&1; echo "suite rc=$?" >> $OUT/suite_knobs2.log
tail -24 $OUT/suite_knobs2.log | cut -c1-200
tar -czf $OUT/s11c4.tgz .s11knobs2; ls -la $OUT/s11c4.tgz
