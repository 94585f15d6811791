source .gpu/setup.sh; prov call6
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
U="unshare --user --map-user=1000 --map-group=1000 --"
echo "== preload as ordinary user $(date +%T)"
T 90 $U python3 -c "
import faulthandler, sys, time; faulthandler.dump_traceback_later(60, exit=True)
t=time.time(); from kernelopt.harness.sandbox import harden_process; harden_process()
import kernelopt.harness.zygote as z; z._preload(); print('preload ok', round(time.time()-t,2), z.why_not_fork())" > $OUT/preload_user.txt 2>&1; echo rc=$? >> $OUT/preload_user.txt; tail -30 $OUT/preload_user.txt
echo "== driver as ordinary user $(date +%T)"
cat > /tmp/drv.py <<'PY'
import json, sys, time, faulthandler
faulthandler.dump_traceback_later(150, exit=True)
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
t=time.time()
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], timeout_s=300)
print(json.dumps([[e.failure.reason if e.failure else None, e.timing is not None, e.phases] for e in evs]), round(time.time()-t,1))
PY
chmod 644 /tmp/drv.py; mkdir -p /tmp/u; chmod 777 /tmp/u; touch /tmp/u/probe.jsonl; chmod 666 /tmp/u/probe.jsonl
KERNELOPT_TEST_ATTACK_OUT=/tmp/u/probe.jsonl T 170 $U python3 /tmp/drv.py tests/fixtures/attacks/problem.py tests/fixtures/attacks/zygote_probe.py tests/fixtures/attacks/zygote_probe.py > $OUT/driver_user.txt 2>&1; echo rc=$? >> $OUT/driver_user.txt; tail -40 $OUT/driver_user.txt | cut -c1-300; cat /tmp/u/probe.jsonl | cut -c1-300
