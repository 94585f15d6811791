"""What the evaluation engine costs on KernelBench-sized problems (issue #10's targets).

For each problem in benchmarks/engine/ (get_inputs() allocates >= 4 GB):
  first  -- one `evaluate(problem, [kernel])` call from nothing: worker start, inputs and
            references built on the GPU, 3 verification trials and timing (goal <= 20 s);
  batch  -- one `evaluate(problem, variants)` call with ten variants of the kernel (launch
            parameters changed), again from nothing (goal <= 60 s together).
Wall-clock from the call to its return, measured in this process, which never imports
torch itself. Writes JSON and Markdown with provenance.

  python3 benchmarks/engine_cost.py [-o benchmarks/results/engine_cost_<gpu>] [--problems rmsnorm_4gb,matvec_4gb]
  python3 benchmarks/engine_cost.py --cpu   # the CPU target: 8 variants in one call vs one, Triton interpreter
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# problem -> (the launch-parameter assignments the variants change, ten value sets)
VARIANTS: dict[str, tuple[str, ...]] = {
    "rmsnorm_4gb": ("BLOCK_S", "num_warps"),
    "matvec_4gb": ("BLOCK_M", "BLOCK_K"),
}
VALUES: dict[str, list[tuple[int, int]]] = {
    "rmsnorm_4gb": [(256, 1), (256, 2), (512, 2), (512, 4), (1024, 2), (1024, 8), (2048, 4), (2048, 8), (4096, 8),
                    (4096, 16)],
    "matvec_4gb": [(1, 1024), (2, 512), (4, 512), (4, 1024), (8, 256), (8, 512), (16, 128), (32, 128), (32, 64),
                   (64, 64)],
}
# CPU run: small shapes for the interpreter
CPU_SHAPES: dict[str, dict[str, str]] = {
    "rmsnorm_4gb": {"BATCH": "2", "FEATURES": "8", "DIM1": "4", "DIM2": "8"},
    "matvec_4gb": {"M": "20", "K": "300"},
}


def make_variants(problem: str, kernel: Path, folder: Path, count: int) -> list[Path]:
    """Copies of `kernel` with its launch parameters set to VALUES[problem][:count]."""
    source = kernel.read_text()
    names = VARIANTS[problem]
    out = []
    for i, values in enumerate(VALUES[problem][:count]):
        text = source
        for name, value in zip(names, values):
            if name == "num_warps":
                text, n = re.subn(r"num_warps=\d+", f"num_warps={value}", text)
            else:
                text, n = re.subn(rf"^(\s*){name} = \d+$", rf"\g<1>{name} = {value}", text, flags=re.M)
            if n == 0:
                raise SystemExit(f"{kernel}: no assignment of {name} to vary")
        path = folder / f"{problem}_v{i}.py"
        path.write_text(text)
        out.append(path)
    return out


def measure(problem_name: str, overrides: dict[str, str], count: int, folder: Path) -> dict[str, Any]:
    from kernelopt.harness.evaluate import Engine
    from kernelopt.problem import load_candidate, load_problem

    base = ROOT / "benchmarks" / "engine" / problem_name
    problem = load_problem(base / "problem.py", overrides)
    kernel = load_candidate(base / "kernel.py")
    variants = [load_candidate(p) for p in make_variants(problem_name, base / "kernel.py", folder, count)]
    out: dict[str, Any] = {"problem": f"benchmarks/engine/{problem_name}", "overrides": overrides}
    for label, cands in (("first", [kernel]), ("batch", variants)):
        t0 = time.monotonic()
        with Engine(problem) as engine:
            ready = engine.ready[0]
            evs = engine.evaluate(cands)
        wall = time.monotonic() - t0
        out[label] = {
            "wall_s": round(wall, 2),
            "candidates": len(cands),
            "worker_setup_s": round(ready.setup_s, 2),
            "device": ready.device,
            "results": [
                {"candidate": Path(e.candidate.path).name, "passed": e.passed,
                 "failure": e.failure.reason if e.failure else None,
                 "median_ms": e.median_ms, "wall_s": round(e.wall_s, 2), "suspect": e.suspect}
                for e in evs
            ],
        }
        print(f"{problem_name} {label}: {len(cands)} candidate(s) in {wall:.1f} s "
              f"(worker setup {ready.setup_s:.1f} s); passed {sum(e.passed for e in evs)}/{len(evs)}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default=None, help="output path without suffix (.json and .md are written)")
    ap.add_argument("--problems", default=",".join(VARIANTS))
    ap.add_argument("--cpu", action="store_true", help="the CPU target: 1 vs 8 variants in the interpreter")
    args = ap.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kernelopt-engine-cost-") as tmp:
        for name in args.problems.split(","):
            if args.cpu:
                results[name] = measure_cpu(name, Path(tmp))
            else:
                results[name] = measure(name, {}, 10, Path(tmp))
    doc = {"results": results, "provenance": provenance(started, args.cpu)}
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / ("engine_cost_cpu" if args.cpu else "engine_cost")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(doc, args.cpu))
    print(f"wrote {out.with_suffix('.json')} and .md")
    return 0


def measure_cpu(problem_name: str, folder: Path) -> dict[str, Any]:
    from kernelopt.harness.evaluate import evaluate
    from kernelopt.problem import load_candidate, load_problem

    base = ROOT / "benchmarks" / "engine" / problem_name
    problem = load_problem(base / "problem.py", CPU_SHAPES[problem_name])
    paths = make_variants(problem_name, base / "kernel.py", folder, 8)
    out: dict[str, Any] = {"problem": f"benchmarks/engine/{problem_name}", "overrides": CPU_SHAPES[problem_name]}
    for label, cands in (("one", paths[:1]), ("eight", paths)):
        t0 = time.monotonic()
        evs = evaluate(problem, [load_candidate(p) for p in cands], time=False)
        out[label] = {"wall_s": round(time.monotonic() - t0, 2), "passed": sum(e.passed for e in evs), "of": len(evs)}
    out["ratio"] = round(out["eight"]["wall_s"] / out["one"]["wall_s"], 2)
    print(f"{problem_name}: one {out['one']['wall_s']} s, eight {out['eight']['wall_s']} s, ratio {out['ratio']}")
    return out


def provenance(started: datetime.datetime, cpu: bool) -> dict[str, Any]:
    import platform

    from profile_fixtures import environment

    from kernelopt.harness.envinfo import git_commit

    prov: dict[str, Any] = {"command": "python3 " + " ".join(["benchmarks/engine_cost.py", *sys.argv[1:]]),
                            "started": started.isoformat(timespec="seconds")}
    if cpu:
        prov.update({"device": "CPU (Triton interpreter)", "python": platform.python_version(),
                     "kernelopt_commit": git_commit()})
    else:
        prov.update(environment())
    return prov


def render(doc: dict[str, Any], cpu: bool) -> str:
    prov = doc["provenance"]
    lines = ["# Evaluation engine cost", "", "Provenance: " + ", ".join(f"{k} {v}" for k, v in prov.items()), ""]
    if cpu:
        lines += ["| problem | 1 variant (s) | 8 variants (s) | ratio (goal <= 3) |", "|---|---|---|---|"]
        for name, r in doc["results"].items():
            lines.append(f"| {name} | {r['one']['wall_s']} | {r['eight']['wall_s']} | {r['ratio']} |")
        return "\n".join(lines) + "\n"
    lines += ["| problem | first candidate, 3 trials + timing (goal <= 20 s) | 10 variants in one batch (goal <= 60 s) | "
              "worker setup | passed |", "|---|---|---|---|---|"]
    for name, r in doc["results"].items():
        lines.append(f"| {name} | {r['first']['wall_s']} s | {r['batch']['wall_s']} s | "
                     f"{r['first']['worker_setup_s']} s | {sum(x['passed'] for x in r['batch']['results'])}/10 |")
    lines += ["", "Per variant (batch):", ""]
    for name, r in doc["results"].items():
        for x in r["batch"]["results"]:
            med = f"{x['median_ms']:.4f} ms" if x["median_ms"] is not None else "-"
            lines.append(f"- {name} {x['candidate']}: {'PASS' if x['passed'] else 'FAIL ' + str(x['failure'])}, "
                         f"median {med}, {x['wall_s']} s" + (f", suspect: {x['suspect']}" if x["suspect"] else ""))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
