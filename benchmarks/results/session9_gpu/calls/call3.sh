source .gpu/setup.sh; prov s9call3
T() { local n=$1; shift; timeout -s TERM -k 5 $n "$@"; }
echo "== sandbox cost: eval_profile 4GB softmax, sandbox vs worker+zygote $(date +%T)"
T 120 python3 benchmarks/eval_profile.py --isolate sandbox --candidates 3 -o $OUT/eval_profile_sandbox.txt > $OUT/eval_profile_sandbox.log 2>&1; echo rc=$? >> $OUT/eval_profile_sandbox.log; grep -E "^cand|setup|rc=" $OUT/eval_profile_sandbox.log | cut -c1-250
T 90 python3 benchmarks/eval_profile.py --isolate worker --candidates 3 -o $OUT/eval_profile_worker.txt > $OUT/eval_profile_worker.log 2>&1; echo rc=$? >> $OUT/eval_profile_worker.log; grep -E "^cand|setup|rc=" $OUT/eval_profile_worker.log | cut -c1-250
echo "== optimize throughput: suite softmax 4GB, knobs, 3 min, profile on $(date +%T)"
S=benchmarks/suite/softmax
T 280 kernelopt optimize $S/problem.py --kernel $S/kernel.py --optimizer knobs --budget-minutes 3 -o $OUT/opt_softmax_knobs --json > $OUT/opt_softmax_knobs.json 2> $OUT/opt_softmax_knobs.err; echo rc=$? >> $OUT/opt_softmax_knobs.err
tail -3 $OUT/opt_softmax_knobs.err | cut -c1-300; python3 -c "
import json,sys
evs=[json.loads(l) for l in open('$OUT/opt_softmax_knobs/events.jsonl')]
from collections import Counter; print(Counter(e.get('type') or e.get('kind') for e in evs))" 2>&1 | tail -3
