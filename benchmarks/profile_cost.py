"""Cost of profiling one candidate: plain run vs kernelopt's section set vs `--set full`.

    python3 benchmarks/profile_cost.py OUT.json [--repeats N] [NAME=PROBLEM:KERNEL ...]

For each pair (default: every examples/*/ pair) the same profiled child
(`kernelopt.profile.target:child_profile`: warm-up, then one candidate call in the
`kernelopt` NVTX range) runs three ways, each `--repeats` times, timed by wall clock:
  plain   no ncu
  ours    ncu with kernelopt.profile.ncu.SECTIONS + EXTRA_METRICS (what NcuProfiler runs)
  sections  ncu with the six SECTIONS only (to show what EXTRA_METRICS cost)
  full    ncu --set full, same NVTX filter
The overhead of a mode is its median wall time minus the plain median. Writes OUT.json
with per-run seconds, report sizes and provenance. Needs a CUDA GPU and ncu.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    from profile_fixtures import arguments, environment, example_pairs, parse_pair, require_ncu

    from kernelopt.harness.isolate import run_in_child
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.profile.ncu import EXTRA_METRICS, SECTIONS, ncu_command
    from kernelopt.profile.target import NVTX_RANGE

    ap = arguments(__doc__ or "", "out")
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args()
    ncu = require_ncu()
    pairs = [parse_pair(p) for p in opts.pairs] or example_pairs()
    results: list[dict[str, object]] = []
    doc: dict[str, object] = {
        "what": "wall seconds of one profiled child run (warm-up + one candidate call in the NVTX range)",
        "sections_ours": list(SECTIONS), "extra_metrics_ours": list(EXTRA_METRICS),
        "repeats": opts.repeats, "provenance": {**environment(ncu), "command": " ".join(sys.argv)},
        "results": results,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, problem_path, kernel_path in pairs:
            problem, candidate = load_problem(problem_path), load_candidate(kernel_path)
            args = {"problem": problem.model_dump(mode="json"), "candidate": candidate.model_dump(mode="json")}
            full_prefix = [ncu, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
                           "--set", "full", "-o", f"{tmp}/full", "-f", "--"]
            modes = {
                "plain": None,
                "ours": ncu_command(ncu, f"{tmp}/ours", sections=SECTIONS, metrics=EXTRA_METRICS),
                "sections": ncu_command(ncu, f"{tmp}/sections", sections=SECTIONS, metrics=()),
                "full": full_prefix,
            }
            row: dict[str, object] = {"name": name, "problem": str(problem_path), "kernel": str(kernel_path)}
            for mode, prefix in modes.items():
                times, errors = [], []
                for _ in range(opts.repeats):
                    t0 = time.monotonic()
                    res = run_in_child("profile", args, timeout_s=opts.timeout, prefix=prefix, env={"TRITON_INTERPRET": "0"})
                    times.append(round(time.monotonic() - t0, 3))
                    if not res.ok:
                        errors.append(f"{res.error_kind}: {res.message} {res.stderr_tail[-300:]}")
                row[mode] = {"wall_s": times, "median_s": statistics.median(times), "errors": errors}
                rep = Path(f"{tmp}/{mode}.ncu-rep")
                if rep.is_file():
                    row[mode]["report_bytes"] = rep.stat().st_size  # type: ignore[index]
                print(name, mode, times, errors[:1], flush=True)
            plain = row["plain"]["median_s"]  # type: ignore[index]
            for mode in ("ours", "sections", "full"):
                row[mode]["overhead_s"] = round(row[mode]["median_s"] - plain, 3)  # type: ignore[index]
            results.append(row)
            doc["results"] = results
            # written after every pair, so a run cut short still leaves what it measured
            opts.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
