"""Where a run's finish went (issue #23): the `retiming` phase of each run split from its events.

The finish (kernelopt/optimize/loop.py `choose_winner`) re-times v0 and the best few A-B-B-A in
fresh runners (`retimed` event), then verifies the winner once more and checks it at the problem's
other shapes, an engine each (`verified` event). Neither event records its evaluations' wall times,
so the split is by event timestamps: the A-B-B-A block runs from the last event of the search to
`retimed`, the verification from there to `verified`. Each re-timed version's share of the block
is estimated from its search evaluation with the loop's own model (`timing_alone_s`: what timing
it alone in a fresh runner costs, first call included; x2 for A-B-B-A); the estimates are printed
next to the measured block so their sum can be checked against it.

  python3 benchmarks/finish_split.py RUNS_DIR [--json OUT.json]

RUNS_DIR holds one run directory per problem (e.g. a suite's runs/). A version counts as autotuned
when its kernel carries an `@triton.autotune` table: a proposal when its knobs name a table's
configs (`config0.BLOCK_M`, ...; the `autotune_table` transform's knobs), v0 when its file (or the
suite's kernel.py with the same sha256) says so; '?' where neither is at hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FINISH_EVENTS = ("retimed", "verified", "run_finished")
_TABLE_KNOB = re.compile(r"^config\d+\.")


def _t(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["t"]).timestamp()


def _autotuned(version: Any, run_dir: Path) -> bool | None:
    if version.proposal is not None:
        return any(_TABLE_KNOB.match(k) for k in version.proposal.knobs)
    # v0's file is not committed with the runs: the suite's kernel.py, when its bytes are v0's.
    ev = version.evaluation
    problem = Path(ev.problem.path) if ev is not None else None
    for path in (run_dir / version.path, ROOT / "benchmarks" / "suite" / run_dir.name / "kernel.py",
                 *([problem.parent / "kernel.py"] if problem is not None else [])):
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == version.sha256:
            return "@triton.autotune" in path.read_text()
    return None


def split(run_dir: Path) -> dict[str, Any] | None:
    from kernelopt.optimize.loop import _warm_verify_s, timing_alone_s
    from kernelopt.rundir import read_events, replay_events

    events = read_events(run_dir / "events.jsonl")
    # The committed runs keep no metrics.json: the profiles are not needed here.
    state = replay_events([e for e in events if e["type"] != "profiled"], run_dir)
    first = next((i for i, e in enumerate(events) if e["type"] in FINISH_EVENTS), None)
    if first is None or first == 0:
        return None
    start = _t(events[first - 1])
    by_type = {e["type"]: e for e in events[first:]}
    retimed, verified = by_type.get("retimed"), by_type.get("verified")
    block = _t(retimed) - start if retimed else 0.0
    ship = _t(verified) - (_t(retimed) if retimed else start) if verified else 0.0
    evs = [v.evaluation for v in state.versions.values() if v.evaluation is not None]
    warm = _warm_verify_s(evs)
    rows = []
    for vid, stats in (retimed or {}).get("timings", {}).items():
        version = state.versions[vid]
        ev = version.evaluation
        est = 2 * timing_alone_s(ev.phases, warm) if ev is not None else None
        rows.append({"version": vid, "autotuned": _autotuned(version, run_dir),
                     "estimate_s": round(est, 2) if est is not None else None,
                     "search_phases": {k: round(v, 2) for k, v in (ev.phases if ev else {}).items()},
                     "median_ms": round(stats["median_ms"], 4)})
    checks = [c["label"] for c in (verified or {}).get("checks", [])]
    winner = (verified or {}).get("version")
    return {
        "problem": run_dir.name, "retiming_s": round(state.spent.get("retiming", 0.0), 2),
        "abba_s": round(block, 2), "verify_and_shapes_s": round(ship, 2), "checks": checks,
        "winner": winner, "winner_autotuned": _autotuned(state.versions[winner], run_dir) if winner else None,
        "retimed": rows,
        "estimate_s": round(sum(r["estimate_s"] or 0.0 for r in rows), 2),
        "autotuned_estimate_s": round(sum(r["estimate_s"] or 0.0 for r in rows if r["autotuned"]), 2),
    }


def _mark(autotuned: bool | None) -> str:
    return "*" if autotuned else "?" if autotuned is None else ""


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| problem | retiming s | A-B-B-A s (estimate; autotuned share) | verify + shapes s (checks) | "
             "winner | re-timed versions: estimate s (* autotuned) |",
             "|---|---:|---:|---:|---|---|"]
    for r in rows:
        versions = ", ".join(f"{x['version']}{_mark(x['autotuned'])} {x['estimate_s']}" for x in r["retimed"])
        lines.append(f"| {r['problem']} | {r['retiming_s']} | {r['abba_s']} ({r['estimate_s']}; "
                     f"{r['autotuned_estimate_s']}) | {r['verify_and_shapes_s']} ({', '.join(r['checks'][1:]) or '-'}) | "
                     f"{r['winner'] or '-'}{_mark(r['winner_autotuned']) if r['winner'] else ''} | {versions or '-'} |")
    tuned = [r for r in rows if r["winner_autotuned"] or any(x["autotuned"] for x in r["retimed"])]
    rest = [r for r in rows if r not in tuned]
    for label, group in (("with an autotuned version", tuned), ("without", rest)):
        if group:
            lines.append("")
            lines.append(f"{label} ({len(group)} problems), median: retiming "
                         f"{statistics.median(r['retiming_s'] for r in group):.1f} s, A-B-B-A "
                         f"{statistics.median(r['abba_s'] for r in group):.1f} s, verify + shapes "
                         f"{statistics.median(r['verify_and_shapes_s'] for r in group):.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        print(f"{args.runs}: not a directory", file=sys.stderr)
        return 2
    rows = [r for d in sorted(args.runs.iterdir()) if (d / "events.jsonl").is_file() and (r := split(d))]
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
