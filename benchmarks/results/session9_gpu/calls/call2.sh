source .gpu/setup.sh; prov s9call2
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P() { local n=$1 name=$2; shift 2; echo "== $name $(date +%T)"; T $n python3 -m pytest -v -s -rfE -p no:cacheprovider --durations 0 "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/$name.txt | cut -c1-220 | tail -25; }
cat > /tmp/drv.py <<'PY'
import json, sys, time
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
import kernelopt; print("kernelopt from", kernelopt.__file__)
t=time.time()
evs = evaluate(load_problem(sys.argv[1], {"N": "1048576"}), [load_candidate(c) for c in sys.argv[2:]], timeout_s=120)
print(json.dumps([[e.failure.reason if e.failure else None, (e.failure.message or "")[:200] if e.failure else None, e.timing.median_ms if e.timing else None] for e in evs]), round(time.time()-t,1))
PY
R=$PWD
echo "== slot_filler on c1e938b (old tree, run from it) $(date +%T)"
(cd .gpu/oldrepo && PYTHONPATH=/tmp/site:$R/.gpu/oldrepo T 150 python3 /tmp/drv.py $R/tests/fixtures/attacks/problem.py $R/tests/fixtures/attacks/slot_filler.py $R/tests/fixtures/attacks/ok.py) > $OUT/slot_filler_old.txt 2>&1; echo rc=$? >> $OUT/slot_filler_old.txt; tail -4 $OUT/slot_filler_old.txt | cut -c1-600
echo "== sandbox cost: eval_profile 4GB softmax, sandbox vs worker+zygote $(date +%T)"
T 150 python3 benchmarks/eval_profile.py --isolate sandbox --candidates 3 -o $OUT/eval_profile_sandbox.txt > $OUT/eval_profile_sandbox.log 2>&1; echo rc=$? >> $OUT/eval_profile_sandbox.log; grep -E "^cand|setup|rc=" $OUT/eval_profile_sandbox.log | cut -c1-250
T 120 python3 benchmarks/eval_profile.py --isolate worker --candidates 3 -o $OUT/eval_profile_worker.txt > $OUT/eval_profile_worker.log 2>&1; echo rc=$? >> $OUT/eval_profile_worker.log; grep -E "^cand|setup|rc=" $OUT/eval_profile_worker.log | cut -c1-250
P 200 transforms_gpu tests/gpu/test_transforms_gpu.py -k "dotloop or blockaxis"
echo "== transforms_rows conv3d_dot_rank1 $(date +%T)"; T 150 python3 benchmarks/transforms_rows.py --cases conv3d_dot_rank1 -o $OUT/rows_conv3d_dot > $OUT/rows_conv3d_dot.log 2>&1; echo rc=$? >> $OUT/rows_conv3d_dot.log; tail -15 $OUT/rows_conv3d_dot.log | cut -c1-250
echo "== transfer $(date +%T)"; T ${TR:-240} python3 benchmarks/transfer.py --optimizer strategies --no-profile --budget-evals 10 --problems softmax,log_softmax,cross_entropy,rmsnorm,layernorm,bias_silu_residual -o .transfer > $OUT/transfer.log 2>&1; echo rc=$? >> $OUT/transfer.log; tail -8 $OUT/transfer.log | cut -c1-250
cp -r .transfer $OUT/transfer
