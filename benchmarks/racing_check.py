"""Racing loses nothing (issue #23): re-time every raced-out candidate in full.

For each problem, `kernelopt optimize` runs with racing on (the default). Every version it
raced out (`TimingStats.raced_out`: timing stopped after a few calls because even the fastest
was above the beam's worst member's upper bound) is then, in one engine on this GPU:

  * verified (3 trials): a wrong candidate could not have entered the beam either;
  * re-timed in full, interleaved with the beam's worst member at the moment it was raced
    (W-R-R-W on one worker, the final re-timing's method), so both figures come from the same
    process and minute.

It "would have entered the beam" when it is correct and its pooled median is below the
worst member's. The count of those must be 0. With `--compare`, the same problem also runs
with `--no-race` (same seed and budget), and both runs' best kernels are re-timed
interleaved: racing must end on the same best kernel, or one within the timing spread.

  python3 benchmarks/racing_check.py OUT.json [--suite benchmarks/suite] [--problems gelu,softmax]
      [--budget-minutes 1] [--rounds 4] [--seed 0] [--compare]

Exit 0: no raced-out candidate would have entered the beam (and, with --compare, the bests
agree within the spread); 1: one would have, or the bests differ beyond the spread; 2: no GPU.
Provenance (GPU, driver, torch/triton, UTC date, command, the kernelopt commit: KERNELOPT_COMMIT
or git) goes into OUT.json; the run directories go beside it (OUT/<problem>/race, .../no_race).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEFAULT_PROBLEMS = "gelu,softmax,row_sum,matvec_bf16"


def events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]


def raced_with_rivals(run: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(raced-out version, the beam's worst member when it was raced, its partial timing) from the events."""
    beam: list[str] = []
    out = []
    for e in events(run):
        if e["type"] == "promoted":
            beam = list(e["beam"])
        elif e["type"] == "evaluated":
            timing = (e["evaluation"] or {}).get("timing") or {}
            if timing.get("raced_out") and beam:
                out.append((e["version"], beam[-1], timing))
    return out


def pooled(evs: list[Any], order: list[str]) -> dict[str, float | None]:
    medians: dict[str, list[float]] = {}
    for vid, ev in zip(order, evs):
        if ev.timing is not None and ev.failure is None:
            medians.setdefault(vid, []).append(ev.timing.median_ms)
    return {vid: (sum(m) / len(m) if len(m) == 2 else None) for vid, m in medians.items()}


def check_problem(folder: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    from kernelopt.harness.evaluate import Engine
    from kernelopt.optimize import loop
    from kernelopt.problem import load_candidate, load_problem

    from kernelopt.suite import small_shape

    overrides = small_shape(folder / "problem.py") if args.small else {}
    common = dict(optimizer="knobs", budget_minutes=args.budget_minutes, rounds=args.rounds, seed=args.seed,
                  experience=False, overrides=overrides,
                  progress=lambda text: print(f"  {folder.name}: {text}", flush=True))
    raced_run = out / folder.name / "race"
    state = loop.optimize(folder / "problem.py", folder / "kernel.py", run_dir=raced_run, race=True, **common)
    pairs = raced_with_rivals(raced_run)
    row: dict[str, Any] = {"problem": folder.name, "evaluations": state.evaluations_done, "raced_out": len(pairs),
                           "best": state.best, "spent": dict(state.spent), "checked": []}
    problem = load_problem(folder / "problem.py", overrides)
    kernel = lambda run, vid: load_candidate(run / vid / "kernel.py")  # noqa: E731
    would_enter = 0
    with Engine(problem, baselines=[], seed=args.seed) as engine:
        for vid, worst, partial in pairs:
            verified = engine.evaluate([kernel(raced_run, vid)], verify=True, time=False)[0]
            order = [worst, vid, vid, worst]
            evs = engine.evaluate([kernel(raced_run, v) for v in order], verify=False, time=True, workers=1)
            times = pooled(evs, order)
            enters = bool(verified.passed and times.get(vid) is not None and times.get(worst) is not None
                          and times[vid] < times[worst])
            would_enter += enters
            row["checked"].append({"version": vid, "beam_worst": worst, "partial_min_ms": partial.get("min_ms"),
                                   "partial_count": partial.get("count"), "threshold_ms": partial.get("race_against_ms"),
                                   "correct": verified.passed, "full_ms": times.get(vid),
                                   "beam_worst_ms": times.get(worst), "would_have_entered": enters})
        row["would_have_entered"] = would_enter
        if args.compare:
            full_run = out / folder.name / "no_race"
            other = loop.optimize(folder / "problem.py", folder / "kernel.py", run_dir=full_run, race=False, **common)
            row["no_race"] = {"evaluations": other.evaluations_done, "best": other.best, "spent": dict(other.spent)}
            same_source = (raced_run / "best_kernel.py").read_bytes() == (full_run / "best_kernel.py").read_bytes()
            a, b = kernel(raced_run, state.best), kernel(full_run, other.best)
            evs = engine.evaluate([a, b, b, a], verify=False, time=True, workers=1)
            times = pooled(evs, ["race", "no_race", "no_race", "race"])
            spread = max((ev.timing.iqr_ms for ev in evs if ev.timing is not None), default=0.0)
            agree = same_source or (times.get("race") is not None and times.get("no_race") is not None
                                    and abs(times["race"] - times["no_race"]) <= spread)
            row["bests"] = {"same_source": same_source, "race_ms": times.get("race"),
                            "no_race_ms": times.get("no_race"), "spread_ms": spread, "agree": agree}
    return row


def provenance(argv: list[str]) -> dict[str, Any]:
    import torch

    command = " ".join(["python3", *argv])
    if not torch.cuda.is_available():
        from kernelopt.harness.envinfo import git_commit

        return {"device": "CPU (Triton interpreter)", "command": command, "kernelopt_commit": git_commit()}
    from profile_fixtures import environment

    return {**environment(), "command": command}


def suite_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The arguments this script and benchmarks/throughput.py share."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--suite", type=Path, default=ROOT / "benchmarks" / "suite")
    parser.add_argument("--problems", default=DEFAULT_PROBLEMS)
    parser.add_argument("--budget-minutes", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true",
                        help="each problem at its SMALL shape; runs on the CPU (interpreter times: a check of the script)")
    return parser


def main(argv: list[str]) -> int:
    parser = suite_parser(__doc__ or "", rounds=4)
    parser.add_argument("--compare", action="store_true", help="also run without racing and compare the bests")
    args = parser.parse_args(argv[1:])
    import torch

    if not torch.cuda.is_available() and not args.small:
        print("racing_check: no CUDA GPU: nothing was measured", file=sys.stderr)
        return 2
    work = args.out.with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in [p.strip() for p in args.problems.split(",") if p.strip()]:
        print(f"== {name}", flush=True)
        rows.append(check_problem(args.suite / name, work, args))
        r = rows[-1]
        print(f"{name}: {r['evaluations']} evaluations, {r['raced_out']} raced out, "
              f"{r['would_have_entered']} would have entered the beam"
              + (f"; bests agree: {r['bests']['agree']}" if "bests" in r else ""), flush=True)
    total = sum(r["would_have_entered"] for r in rows)
    result = {"provenance": provenance(argv), "problems": rows, "raced_out": sum(r["raced_out"] for r in rows),
              "would_have_entered": total, "bests_agree": all(r.get("bests", {}).get("agree", True) for r in rows)}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"raced out {result['raced_out']}, would have entered the beam: {total} (goal 0); "
          f"bests agree: {result['bests_agree']}; written {args.out}")
    return 0 if total == 0 and result["bests_agree"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
