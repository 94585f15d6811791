"""Speed of the experience store on this CPU machine.

  python benchmarks/experience/bench_perf.py [--records 10000] [--repeats 50] [--cold 11]

Measures (writes benchmarks/experience/results/perf.json):
  import_s          `ExperienceStore.import_` of N synthetic records into a fresh database,
                    embeddings included (goal <= 60 s at 10,000)
  recommend_ms      in-process `recommend` p50/p90 at N records, warm (goal p50 <= 20 ms), over
                    11 situations asked in turn: after the first round each query text's
                    embedding comes from the cache table
  recommend_new_query_text_ms
                    the same, every query a kernel text never seen before (the model runs)
  cold_cli_s        `kernelopt experience recommend` as a new process, p50/p90 (goal p50 <= 1.5 s);
                    each run uses a different kernel text, so the query embedding is never cached
  cold_add_s        `kernelopt experience add` as a new process, p50 (goal about 1 s)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import provenance, synthetic_records, write_jsonl, write_result  # noqa: E402

from kernelopt.experience.store import ExperienceStore  # noqa: E402
from kernelopt.models import Situation  # noqa: E402
from kernelopt.recommend import recommend  # noqa: E402

QUERIES = ["rms norm", "fused softmax", "batched gemm", "paged attention decode", "layer norm backward",
           "bias gelu", "transpose 2d", "histogram atomics", "topk selection", "conv2d nhwc", "group norm"]


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    prov = provenance("python benchmarks/experience/bench_perf.py " + " ".join(sys.argv[1:]))  # at the start: loadavg before the run
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--kernels", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--cold", type=int, default=11)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kernelopt-exp-bench-"))
    db = tmp / "bench.db"
    src = tmp / "records.jsonl"
    write_jsonl(synthetic_records(args.records, args.kernels), src)

    t0 = time.perf_counter()
    with ExperienceStore(db) as store:
        read, new = store.import_(src)
    import_s = time.perf_counter() - t0

    with ExperienceStore(db) as store:
        recommend(Situation(kernel="warm up", backend="triton", bottleneck="dram"), store=store)
        times = []
        for i in range(args.repeats):
            q = QUERIES[i % len(QUERIES)]
            situation = Situation(kernel=q, backend="triton", chip="sm_90", bottleneck="dram", stall="long_scoreboard")
            t = time.perf_counter()
            recommend(situation, n=5, store=store)
            times.append((time.perf_counter() - t) * 1000)
        # Every query a new kernel text: the query embedding is computed each time.
        times_new = []
        for i in range(args.repeats):
            situation = Situation(kernel=f"{QUERIES[i % len(QUERIES)]} variant {i}", backend="triton",
                                  chip="sm_90", bottleneck="dram")
            t = time.perf_counter()
            recommend(situation, n=5, store=store)
            times_new.append((time.perf_counter() - t) * 1000)
        # The same without the packs: the experience part alone.
        times_exp = []
        for i in range(args.repeats):
            situation = Situation(kernel=QUERIES[i % len(QUERIES)], backend="triton", chip="sm_90", bottleneck="dram")
            t = time.perf_counter()
            recommend(situation, n=5, include_packs=False, store=store)
            times_exp.append((time.perf_counter() - t) * 1000)

    env = {**os.environ, "KERNELOPT_DB": str(db), "HF_HUB_OFFLINE": "1"}
    cold = []
    for i in range(args.cold):
        cmd = ["kernelopt", "experience", "recommend", "--kernel", f"cold query kernel {i} rms norm",
               "--backend", "triton", "--chip", "sm_90", "--bottleneck", "dram", "--json"]
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        cold.append(time.perf_counter() - t)
    adds = []
    for i in range(args.cold):
        cmd = ["kernelopt", "experience", "add", "--kernel", f"cold add {i}", "--backend", "triton",
               "--bottleneck", "memory_bound", "--optimization", "coalesced_access", "--speedup", "1.1"]
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        adds.append(time.perf_counter() - t)

    result = {
        "records": args.records, "distinct_kernels": args.kernels, "imported": new,
        "import_s": round(import_s, 2), "import_goal_s": 60,
        "recommend_ms": {"p50": round(statistics.median(times), 2), "p90": round(pct(times, 0.9), 2),
                         "repeats": args.repeats, "goal_p50": 20, "with_packs": True},
        "recommend_new_query_text_ms": {"p50": round(statistics.median(times_new), 2),
                                        "p90": round(pct(times_new, 0.9), 2), "repeats": args.repeats},
        "recommend_experience_only_ms": {"p50": round(statistics.median(times_exp), 2),
                                         "p90": round(pct(times_exp, 0.9), 2)},
        "cold_cli_recommend_s": {"p50": round(statistics.median(cold), 3), "p90": round(pct(cold, 0.9), 3),
                                 "runs": args.cold, "goal_p50": 1.5, "all": [round(c, 3) for c in cold]},
        "cold_cli_add_s": {"p50": round(statistics.median(adds), 3), "runs": args.cold, "goal": 1.0},
        "provenance": prov,
    }
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    print(write_result("perf", result))
    print({k: v for k, v in result.items() if k != "provenance"})


if __name__ == "__main__":
    main()
