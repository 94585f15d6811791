"""Search throughput (issue #23): evaluations per GPU-minute and fixed overhead per problem.

Runs `kernelopt optimize` (knob search, profiling of the beam on, racing on unless --no-race)
on suite problems, twice: a cold pass with an empty baseline cache, then a warm pass (same
cache, a fresh run directory). From each run's `spent` events (docs/optimize.md) it reports

  * evaluations per minute of the run's whole wall time (goal >= 30 on the suite's 4 GB problems),
    and per minute of the search phase alone;
  * fixed overhead: startup + baselines + final re-timing (goal <= 20 s on the warm pass), and
    profiling, shown apart (it recurs for every new beam member).

  python3 benchmarks/throughput.py OUT.json [--problems gelu,softmax,row_sum,matvec_bf16]
      [--budget-minutes 1] [--rounds 8] [--no-race] [--small]

The cold pass uses a fresh XDG_CACHE_HOME (the measured ceilings of `env --measure` are copied
into it, so the roofline floor is the same); Triton's own cache (~/.triton) is left as it is.
Writes OUT.json (provenance, per run figures) and OUT.md (the table); the run directories go
to OUT/<pass>/<problem>. Exit 0 when measured, 2 without a GPU (unless --small: SMALL shapes in
the interpreter, a check of this script whose figures say nothing about a GPU).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

FIXED = ("startup", "baselines", "retiming")


def figures(name: str, state: Any, wall_s: float) -> dict[str, Any]:
    spent = dict(state.spent)
    total = sum(spent.values())
    search = spent.get("search", 0.0)
    evals = state.evaluations_done
    raced = sum(1 for v in state.versions.values() if v.evaluation is not None and v.evaluation.raced_out)
    return {
        "problem": name, "evaluations": evals, "raced_out": raced, "stop_reason": state.stop_reason,
        "wall_s": round(wall_s, 2), "spent": {k: round(v, 2) for k, v in spent.items()},
        "evals_per_minute": round(evals / total * 60, 2) if total else None,
        "evals_per_search_minute": round(evals / search * 60, 2) if search else None,
        "fixed_overhead_s": round(sum(spent.get(k, 0.0) for k in FIXED), 2),
        "profiling_s": round(spent.get("profiling", 0.0), 2),
    }


def run_pass(label: str, names: list[str], work: Path, args: Any) -> list[dict[str, Any]]:
    from kernelopt.optimize import loop
    from kernelopt.suite import small_shape

    rows = []
    for name in names:
        folder = args.suite / name
        overrides = small_shape(folder / "problem.py") if args.small else {}
        t0 = time.monotonic()
        state = loop.optimize(folder / "problem.py", folder / "kernel.py", run_dir=work / label / name,
                              overrides=overrides, optimizer="knobs", budget_minutes=args.budget_minutes,
                              rounds=args.rounds, seed=args.seed, experience=False, race=not args.no_race)
        rows.append(figures(name, state, time.monotonic() - t0))
        r = rows[-1]
        print(f"{label} {name}: {r['evaluations']} evaluations ({r['raced_out']} raced out), "
              f"{r['evals_per_minute']} per minute, fixed overhead {r['fixed_overhead_s']} s, "
              f"profiling {r['profiling_s']} s, spent {r['spent']}", flush=True)
    return rows


def render(doc: dict[str, Any]) -> str:
    prov = doc["provenance"]
    lines = ["# Search throughput", "", "Provenance: " + ", ".join(f"{k} {v}" for k, v in prov.items()), "",
             "| pass | problem | evaluations | raced out | evals / min (goal >= 30) | evals / search min | "
             "fixed overhead s (goal <= 20 warm) | profiling s | startup s | baselines s | search s | re-timing s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label in ("cold", "warm"):
        for r in doc[label]:
            s = r["spent"]
            lines.append(f"| {label} | {r['problem']} | {r['evaluations']} | {r['raced_out']} | {r['evals_per_minute']} | "
                         f"{r['evals_per_search_minute']} | {r['fixed_overhead_s']} | {r['profiling_s']} | "
                         f"{s.get('startup', 0)} | {s.get('baselines', 0)} | {s.get('search', 0)} | "
                         f"{s.get('retiming', 0)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    from racing_check import provenance, suite_parser

    parser = suite_parser(__doc__ or "", rounds=8)
    parser.add_argument("--no-race", action="store_true")
    args = parser.parse_args(argv[1:])
    import torch

    if not torch.cuda.is_available() and not args.small:
        print("throughput: no CUDA GPU: nothing was measured", file=sys.stderr)
        return 2

    from kernelopt.files import cache_dir

    work = args.out.with_suffix("")
    if work.exists():
        shutil.rmtree(work)
    cache = work / "xdg_cache"
    ceilings = cache_dir() / "ceilings.json"
    (cache / "kernelopt").mkdir(parents=True)
    if ceilings.is_file():
        shutil.copy(ceilings, cache / "kernelopt" / "ceilings.json")
    os.environ["XDG_CACHE_HOME"] = str(cache)  # the cold pass starts with no cached baseline
    names = [p.strip() for p in args.problems.split(",") if p.strip()]
    doc: dict[str, Any] = {"provenance": provenance(argv), "budget_minutes": args.budget_minutes,
                           "race": not args.no_race, "small": args.small}
    doc["cold"] = run_pass("cold", names, work, args)
    doc["warm"] = run_pass("warm", names, work, args)
    for label in ("cold", "warm"):
        rows = doc[label]
        evals = sum(r["evaluations"] for r in rows)
        total = sum(sum(r["spent"].values()) for r in rows)
        doc[f"{label}_evals_per_minute"] = round(evals / total * 60, 2) if total else None
        doc[f"{label}_mean_fixed_overhead_s"] = round(sum(r["fixed_overhead_s"] for r in rows) / len(rows), 2)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(render(doc))
    print(f"cold: {doc['cold_evals_per_minute']} evals/min, fixed overhead {doc['cold_mean_fixed_overhead_s']} s; "
          f"warm: {doc['warm_evals_per_minute']} evals/min, fixed overhead {doc['warm_mean_fixed_overhead_s']} s "
          f"(goals: >= 30 evals/min, <= 20 s warm); written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
