source .gpu/setup.sh; prov s9call1
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
P() { local n=$1 name=$2; shift 2; echo "== $name $(date +%T)"; T $n python3 -m pytest -v -s -rfE -p no:cacheprovider --durations 0 "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; grep -E "PASSED|FAILED|ERROR|passed|failed|rc=" $OUT/$name.txt | cut -c1-220 | tail -25; }
echo "== re-export probe $(date +%T)"
T 60 python3 -c "
import os,subprocess,sys
from kernelopt.harness.cuda_fd import SharedCudaBuffer
b=SharedCudaBuffer.allocate(1<<21,0); os.set_inheritable(b.fd,True)
c='''import sys,ctypes
from kernelopt.harness.cuda_fd import SharedCudaBuffer,_cu
s=SharedCudaBuffer.open(int(sys.argv[1]),int(sys.argv[2]),0); h=ctypes.c_uint64(); fd=ctypes.c_int(-1)
print('retain',_cu().cuMemRetainAllocationHandle(ctypes.byref(h),ctypes.c_void_p(s.ptr)),'export',_cu().cuMemExportToShareableHandle(ctypes.byref(fd),h,1,ctypes.c_uint64(0)),'fd',fd.value)'''
subprocess.run([sys.executable,'-c',c,str(b.fd),str(b.nbytes)],pass_fds=(b.fd,),check=True)" > $OUT/reexport_probe.txt 2>&1; echo rc=$? >> $OUT/reexport_probe.txt; cat $OUT/reexport_probe.txt | tail -4
cat > /tmp/drv.py <<'PY'
import json, sys, time
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
t=time.time()
evs = evaluate(load_problem(sys.argv[1], {"N": "1048576"}), [load_candidate(c) for c in sys.argv[2:]], timeout_s=120)
print(json.dumps([[e.failure.reason if e.failure else None, (e.failure.message or "")[:200] if e.failure else None, e.timing.median_ms if e.timing else None] for e in evs]), round(time.time()-t,1))
PY
A="tests/fixtures/attacks/problem.py tests/fixtures/attacks/slot_filler.py tests/fixtures/attacks/ok.py"
echo "== slot_filler on c1e938b (old) $(date +%T)"; PYTHONPATH=$PWD/.gpu/old:$PYTHONPATH T 150 python3 /tmp/drv.py $A > $OUT/slot_filler_old.txt 2>&1; echo rc=$? >> $OUT/slot_filler_old.txt; tail -3 $OUT/slot_filler_old.txt | cut -c1-600
echo "== slot_filler new $(date +%T)"; T 150 python3 /tmp/drv.py $A > $OUT/slot_filler_new.txt 2>&1; echo rc=$? >> $OUT/slot_filler_new.txt; tail -3 $OUT/slot_filler_new.txt | cut -c1-600
echo "== eval_profile 4GB softmax new $(date +%T)"; T 200 python3 benchmarks/eval_profile.py --zygote on --candidates 3 -o $OUT/eval_profile_new.txt > $OUT/eval_profile_new.log 2>&1; echo rc=$? >> $OUT/eval_profile_new.log; tail -14 $OUT/eval_profile_new.log | cut -c1-200
echo "== eval_profile 4GB softmax old $(date +%T)"; PYTHONPATH=$PWD/.gpu/old:$PYTHONPATH T 200 python3 benchmarks/eval_profile.py --zygote on --candidates 3 -o $OUT/eval_profile_old.txt > $OUT/eval_profile_old.log 2>&1; echo rc=$? >> $OUT/eval_profile_old.log; tail -14 $OUT/eval_profile_old.log | cut -c1-200
P 560 trust_gpu tests/gpu/test_trust_gpu.py
ls /dev/shm | wc -l
