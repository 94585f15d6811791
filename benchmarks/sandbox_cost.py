"""Per-candidate cost of each `--isolate` mode (issue #19), on the GPU if there is one.

    python3 benchmarks/sandbox_cost.py [--problem examples/softmax/problem.py] [--kernel examples/softmax/kernel.py]
                                       [--candidates 6] [--json]

Evaluates the same correct kernel N times in one engine per mode (worker, candidate, sandbox) with
verification and timing, and prints the engine's start time and the mean wall time per candidate
after the first (the first also pays one-off compilation). In worker mode on a GPU each timed
candidate after the first already gets a fresh runner (its CUDA events are the runner's), so the
difference between modes on a GPU is the sandbox's own setup: namespaces, the read-only remount
and an empty compiler cache (every sandboxed runner compiles its Triton kernels afresh).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(problem_path: str, kernel_path: str, isolate: str, n: int) -> dict:
    from kernelopt.harness.evaluate import Engine, resolve_isolation
    from kernelopt.problem import load_candidate, load_problem

    problem = load_problem(problem_path)
    cand = load_candidate(kernel_path)
    effective = resolve_isolation(isolate)
    t0 = time.monotonic()
    with Engine(problem, isolate=isolate, timeout_s=600) as engine:
        started = time.monotonic() - t0
        evs = engine.evaluate([cand] * n)
    failures = [e.failure.reason for e in evs if e.failure]
    walls = [e.wall_s for e in evs]
    return {"isolate": isolate, "effective": effective, "device": evs[0].device, "engine_start_s": round(started, 2),
            "first_candidate_s": round(walls[0], 2),
            "per_candidate_s": round(statistics.fmean(walls[1:]), 3) if n > 1 else None,
            "per_candidate_stdev_s": round(statistics.stdev(walls[1:]), 3) if n > 2 else None,
            "median_ms": [round(e.timing.median_ms, 4) for e in evs if e.timing], "failures": failures}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default=str(ROOT / "examples" / "softmax" / "problem.py"))
    parser.add_argument("--kernel", default=str(ROOT / "examples" / "softmax" / "kernel.py"))
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--modes", default="worker,candidate,sandbox")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.json:
        rows = [measure(args.problem, args.kernel, mode, args.candidates) for mode in args.modes.split(",")]
        print(json.dumps(rows, indent=2))
        return 0
    # One row as each mode is measured: a run cut off by a time limit keeps what it finished.
    print(f"{'mode':10} {'runs as':10} {'engine start s':>14} {'first s':>8} {'per candidate s':>16}  device", flush=True)
    for mode in args.modes.split(","):
        r = measure(args.problem, args.kernel, mode, args.candidates)
        print(f"{r['isolate']:10} {r['effective']:10} {r['engine_start_s']:>14} {r['first_candidate_s']:>8} "
              f"{str(r['per_candidate_s']) + ' +- ' + str(r['per_candidate_stdev_s']):>16}  {r['device']}"
              + (f"  FAILURES {r['failures']}" if r["failures"] else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
