source .gpu/setup.sh; prov call7
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
U="unshare --user --map-user=1000 --map-group=1000 --"
cat > /tmp/drv.py <<'PY'
import json, sys, time
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
t=time.time()
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], timeout_s=300)
print(json.dumps([[e.failure.reason if e.failure else None, e.timing.median_ms if e.timing else None, {k: round(v, 2) for k, v in e.phases.items()}] for e in evs]), round(time.time()-t,1))
PY
chmod 644 /tmp/drv.py
A="tests/fixtures/attacks/problem.py tests/fixtures/attacks/ok.py tests/fixtures/attacks/ok.py"
echo "== user, zygote off"; KERNELOPT_ZYGOTE=0 T 100 $U python3 /tmp/drv.py $A 2>&1 | tail -3 | cut -c1-400
echo "== user, zygote on"; KERNELOPT_ZYGOTE=1 T 100 $U python3 /tmp/drv.py $A 2>&1 | tail -3 | cut -c1-400
echo "== root, zygote on"; KERNELOPT_ZYGOTE=1 T 80 python3 /tmp/drv.py $A 2>&1 | tail -3 | cut -c1-400
