"""What one-knob moves did, by the bottleneck their parent was diagnosed with: read from the committed
run folders' events (no device needed).

For every evaluated proposal whose change is a single `KNOB a -> b` (KNOB given, default num_warps) and
whose parent was timed, the parent's median over the child's (>1 = faster), grouped by the primary
subcause of the nearest profiled ancestor's diagnosis (inherited profiles count as their donor's).
Strategy packs' knob hints are ordered from this.

  python3 benchmarks/knob_outcomes.py [--knob num_warps] [--results benchmarks/results] [-o OUT.md]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def outcomes(results: Path, knob: str) -> dict[tuple[str, str, str], list[float]]:
    from kernelopt.errors import BadInput
    from kernelopt.rundir import read_events

    pattern = re.compile(rf"(?:\S+\.)?{re.escape(knob)} (\S+) -> (\S+)")
    groups: dict[tuple[str, str, str], list[float]] = collections.defaultdict(list)
    seen: set[str] = set()
    for path in sorted(results.glob("**/events.jsonl")):
        try:
            events = read_events(path)
        except BadInput:
            continue  # a damaged log: its moves are not evidence
        # a run copied into two results folders (a resumed call's copy) counts once
        first = json.dumps(events[0], sort_keys=True) if events else None
        if first is None or first in seen:
            continue
        seen.add(first)
        for key, speedup in _moves(events, pattern):
            groups[key].append(speedup)
    return groups


def _moves(events: list[dict], pattern: re.Pattern[str]) -> list[tuple[tuple[str, str, str], float]]:
    """((subcause, from, to), parent median / child median) for each timed one-knob move of a run."""
    ms: dict[str, float] = {}
    parent: dict[str, str | None] = {}
    change: dict[str, str] = {}
    subcause: dict[str, str] = {}
    for e in events:
        if e["type"] == "proposed":
            p = e.get("proposal") or {}
            parent[e["version"]] = p.get("parent")
            change[e["version"]] = (p.get("change") or "").strip()
        elif e["type"] == "evaluated":
            ev = e.get("evaluation") or {}
            t = (ev.get("timing") or {}).get("median_ms")
            # GPU times only: the interpreter's wall times say nothing about a launch knob
            if ev.get("failure") is None and t and str(ev.get("device") or "").startswith("cuda"):
                ms[e["version"]] = t
        elif e["type"] == "profiled" and e.get("diagnosis"):
            primary = e["diagnosis"].get("primary") or {}
            subcause[e["version"]] = primary.get("subcause") or primary.get("category") or "-"
    out = []
    for v, c in change.items():
        m = pattern.fullmatch(c)
        p = parent.get(v)
        if not m or v not in ms or p not in ms:
            continue
        found, walk = None, p
        while walk and found is None:
            found, walk = subcause.get(walk), parent.get(walk)
        out.append(((found or "not profiled", m[1], m[2]), ms[p] / ms[v]))
    return out


def render(groups: dict[tuple[str, str, str], list[float]], knob: str, results: Path) -> str:
    out = [f"# One-knob moves of `{knob}` by the parent's diagnosis", "",
           f"`python3 benchmarks/knob_outcomes.py --knob {knob}` over every `events.jsonl` under `{results}`",
           "(GPU evaluations only: H100 and H200 runs of sessions 7-13; a run copied into two folders counts",
           "once). Speedup: the",
           "parent's median over the child's; a win is above 1.02.", "",
           "| subcause | move | moves | median speedup | wins |", "|---|---|---:|---:|---:|"]
    for key in sorted(groups, key=lambda k: (k[0], _number(k[1]), _number(k[2]))):
        xs = groups[key]
        out.append(f"| {key[0]} | {key[1]} -> {key[2]} | {len(xs)} | {statistics.median(xs):.3f} | "
                   f"{sum(x > 1.02 for x in xs)} |")
    return "\n".join(out) + "\n"


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knob", default="num_warps")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("-o", "--out", type=Path, default=None)
    args = ap.parse_args()
    text = render(outcomes(args.results, args.knob), args.knob, args.results.relative_to(ROOT)
                  if args.results.is_relative_to(ROOT) else args.results)
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
