#!/usr/bin/env bash
# Evaluation throughput of `kernelopt suite run` on one GPU against two (issue #13's scaling goal).
#   OUT=dir bash benchmarks/suite_scaling.sh [PROBLEMS]
# The same problems and per-problem evaluation budget run twice: with only GPU 0 visible
# (problems one after another), then with --parallel-problems over every visible GPU.
# Each run's suite_result.json counts its evaluations; wall times come from `date`.
set -uo pipefail
OUT=${OUT:-/tmp/kernelopt-scaling}
PROBLEMS=${1:-gelu,row_sum,matvec_bf16,max_dim1,mse_loss,cumsum}
mkdir -p "$OUT/r"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 KERNELOPT_DB=/tmp/scaling-exp.db
common=(benchmarks/suite --optimizer knobs --problems "$PROBLEMS" --budget-evals 6 --rounds 3 --beam 1 --proposals 3
        --baselines none --no-profile --no-experience --json)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUT/r/gpus.txt"
t0=$(date +%s.%N)
CUDA_VISIBLE_DEVICES=0 python3 -m kernelopt suite run "${common[@]}" -o "$OUT/r/one_gpu" > "$OUT/r/one_gpu.json" 2> "$OUT/r/one_gpu.err"
t1=$(date +%s.%N)
python3 -m kernelopt suite run "${common[@]}" --parallel-problems -o "$OUT/r/two_gpus" > "$OUT/r/two_gpus.json" 2> "$OUT/r/two_gpus.err"
t2=$(date +%s.%N)
python3 - "$OUT/r" "$t0" "$t1" "$t2" "$PROBLEMS" <<'PY'
import json, sys, datetime, pathlib, subprocess
out, t0, t1, t2, problems = pathlib.Path(sys.argv[1]), *map(float, sys.argv[2:5]), sys.argv[5]
def evals(name):
    d = json.loads((out / name / "suite_result.json").read_text())
    rs = d.get("results") or d.get("problems") or []
    return sum(r.get("evaluations_run") or 0 for r in rs), sum(1 for r in rs if r.get("correct")), len(rs)
one, two = evals("one_gpu"), evals("two_gpus")
w1, w2 = t1 - t0, t2 - t1
doc = {"problems": problems, "one_gpu": {"wall_s": round(w1, 1), "evaluations": one[0], "correct": one[1], "n": one[2],
       "evals_per_min": one[0] / w1 * 60}, "two_gpus": {"wall_s": round(w2, 1), "evaluations": two[0], "correct": two[1],
       "n": two[2], "evals_per_min": two[0] / w2 * 60}}
doc["throughput_ratio"] = doc["two_gpus"]["evals_per_min"] / doc["one_gpu"]["evals_per_min"]
doc["gpus"] = (out / "gpus.txt").read_text().strip().splitlines()
import torch, triton, platform
doc["provenance"] = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "command": "bash benchmarks/suite_scaling.sh " + problems}
(out / "scaling.json").write_text(json.dumps(doc, indent=2) + "\n")
print(json.dumps(doc))
PY
tar -czf "$OUT/results.tgz" -C "$OUT/r" . 
