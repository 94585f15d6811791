# x4: diagnose (ncu extras reader in-process; bench trailing under load), strategies suite on GPUs 1-3, failing trust tests on GPU 0
source .gpu/setup.sh; prov s12c2
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
CUDA_VISIBLE_DEVICES=0 T 60 python3 -c "
import sys; sys.modules['ncu_report'] = None
from kernelopt.profile.importers import ncu_report_module
m = ncu_report_module(); print('extras reader:', m.__file__)
ctx = m.load_report('tests/fixtures/zoo_h100/tiny_launch/profile.ncu-rep'); print('ranges', ctx.num_ranges())
" > $OUT/ncu_extras.txt 2>&1; echo "rc=$?" >> $OUT/ncu_extras.txt; cat $OUT/ncu_extras.txt | tail -5
mkdir -p .suite12; [ -f .gpu/suite12.tgz ] && tar -xzf .gpu/suite12.tgz
PROBS=${PROBS:-conv3d,linear_bias_gelu,matmul_bf16,matmul_fp32,avgpool2d,softmax,cross_entropy,rmsnorm,layernorm,log_softmax,bias_silu_residual,depthwise_conv2d,maxpool2d,max_dim1,gelu,cumsum,mse_loss,row_sum,matvec_bf16}
( CUDA_VISIBLE_DEVICES=${SUITE_GPUS:-1,2,3} timeout -s INT -k 30 ${SUITE_S:-520} kernelopt suite run benchmarks/suite --optimizer strategies --budget-minutes 2 --no-experience --parallel-problems --problems $PROBS -o .suite12 > $OUT/suite_strategies.log 2>&1; echo "suite rc=$?" >> $OUT/suite_strategies.log ) &
SP=$!
export CUDA_VISIBLE_DEVICES=0
for i in 1 2 3; do T 60 kernelopt bench examples/softmax/problem.py --kernel examples/softmax/kernel.py --json > $OUT/bench_softmax_$i.json 2>&1; python3 -c "
import json,sys; d=json.load(open(sys.argv[1])); f=d.get('failure'); t=d.get('timings',{})
print('bench', sys.argv[1][-6:], (f or {}).get('message','')[:160], {k:(v.get('median_ms'), v.get('trailing_us')) for k,v in t.items() if isinstance(v,dict)})" $OUT/bench_softmax_$i.json; done
T 400 python3 -m pytest -v -rfE --tb=long -p no:cacheprovider tests/gpu/test_trust_gpu.py tests/gpu/test_arena_gpu.py -k "fills_the_output_slot or fake_clock or garbage_until or user or leak or key or tampered or not examples" > $OUT/trust_gpu.txt 2>&1; echo rc=$? >> $OUT/trust_gpu.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/trust_gpu.txt | cut -c1-220 | tail -24
unset CUDA_VISIBLE_DEVICES
wait $SP
tail -30 $OUT/suite_strategies.log | cut -c1-250
tar -czf $OUT/suite12.tgz .suite12; ls -la $OUT/suite12.tgz
