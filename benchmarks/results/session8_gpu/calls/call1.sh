source .gpu/setup.sh; prov call1
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
echo "== vmm probe"; T 120 python3 .gpu/vmm_probe.py 2>&1 | tee $OUT/vmm_probe.txt
echo "== start cost"; T 60 bash .gpu/startcost.sh 2>&1 | tee $OUT/start_cost.txt
echo "== optimize sandbox ncu"; rm -rf /tmp/ro; T 200 kernelopt optimize examples/softmax/problem.py examples/softmax/kernel.py --isolate sandbox --budget-evals 4 -o /tmp/ro > $OUT/opt_sandbox.txt 2>&1; echo rc=$? >> $OUT/opt_sandbox.txt
grep -h '"profiled"' /tmp/ro/events.jsonl | cut -c1-600 > $OUT/opt_sandbox_profiled.txt; tail -5 $OUT/opt_sandbox.txt; cat $OUT/opt_sandbox_profiled.txt | cut -c1-400
echo "== trust gpu TMPDIR=/dev/shm"; TMPDIR=/dev/shm T 240 python3 -m pytest -q -rfE -p no:cacheprovider tests/gpu/test_trust_gpu.py > $OUT/trust_gpu_devshm.txt 2>&1; tail -5 $OUT/trust_gpu_devshm.txt
ls /dev/shm | head
