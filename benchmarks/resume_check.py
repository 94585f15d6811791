"""Kill then `--resume` against an uninterrupted run with the same seed (issue #11's target).

Runs `kernelopt optimize` twice on one problem with the same seed and budget:

  A  uninterrupted;
  B  killed with SIGKILL once `--kill-after` evaluations are recorded, then `--resume`d.

Reported: evaluations repeated in B (goal 0), whether the events written before the kill
are unchanged after the resume, the kernelopt processes still alive after the kill
(SIGKILL reaches only the CLI; its verifier and runner must die with it), and whether B's
best kernel is A's (the same source). On a GPU the search path depends on measured times,
so A and B agree only where the choices are not within timing noise; the sequence of
proposed knob values of both runs is recorded to show where they part, if they do.

  python3 benchmarks/resume_check.py PROBLEM KERNEL [--set N=V ...] [--kill-after 3]
      [--budget-evals 8] [--rounds 4] [--beam 1] [--proposals 2] [-o OUT]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def _events(run: Path) -> list[dict[str, Any]]:
    path = run / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kernelopt_processes(exclude: int) -> list[str]:
    """Command lines of live processes that belong to kernelopt (verifier, runner, CLI)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (exclude, os.getpid()):
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if "kernelopt" in cmd and "resume_check" not in cmd:
            out.append(f"{entry.name}: {cmd[:160]}")
    return out


def _summary(run: Path) -> dict[str, Any]:
    events = _events(run)
    proposed = [e for e in events if e["type"] == "proposed"]
    finished = [e for e in events if e["type"] == "run_finished"]
    best = finished[-1].get("best") if finished else None
    best_src = (run / best / "kernel.py").read_text() if best else None
    evaluated = Counter(e["version"] for e in events if e["type"] == "evaluated")
    knobs = []
    for e in proposed:
        prop = e.get("proposal") or {}
        knobs.append({"version": e.get("version"), "knobs": prop.get("knobs"), "change": prop.get("change")})
    times = {e["version"]: ((e.get("evaluation") or {}).get("timing") or {}).get("median_ms")
             for e in events if e["type"] == "evaluated"}
    return {"best": best, "best_source": best_src, "best_ms": times.get(best) if best else None,
            "stop_reason": finished[-1].get("stop_reason") if finished else None, "evaluated": dict(evaluated),
            "proposals": knobs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("kernel")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--kill-after", type=int, default=3, help="evaluations recorded before the kill")
    ap.add_argument("--budget-evals", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--proposals", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--out", default=str(ROOT / "benchmarks" / "results" / "resume_check"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    sets = [x for s in args.set for x in ("--set", s)]
    common = [args.problem, "--kernel", args.kernel, *sets, "--budget-evals", str(args.budget_evals), "--rounds",
              str(args.rounds), "--beam", str(args.beam), "--proposals", str(args.proposals), "--seed", str(args.seed),
              "--no-experience"]
    cli = [sys.executable, "-m", "kernelopt", "optimize"]
    doc: dict[str, Any] = {"args": vars(args)}

    run_a, run_b = out / "run_a", out / "run_b"
    t0 = time.monotonic()
    a = subprocess.run([*cli, *common, "-o", str(run_a)], capture_output=True, text=True, timeout=900)
    doc["a"] = {"rc": a.returncode, "wall_s": round(time.monotonic() - t0, 1), "stderr_tail": a.stderr[-1500:],
                **_summary(run_a)}
    print(f"A: rc {a.returncode}, best {doc['a']['best']} in {doc['a']['wall_s']} s", flush=True)

    t0 = time.monotonic()
    proc = subprocess.Popen([*cli, *common, "-o", str(run_b)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed_at = None
    while time.monotonic() - t0 < 900:
        if sum(e["type"] == "evaluated" for e in _events(run_b)) >= args.kill_after:
            killed_at = round(time.monotonic() - t0, 1)
            break
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    time.sleep(3.0)  # the children's own death watch (parent gone -> exit) needs a moment
    left = _kernelopt_processes(proc.pid)
    before = _events(run_b)
    r = subprocess.run([*cli, "--resume", str(run_b), "--no-experience"], capture_output=True, text=True, timeout=900)
    after = _events(run_b)
    b = _summary(run_b)
    doc["b"] = {"killed_after_s": killed_at, "evaluations_before_kill": sum(e["type"] == "evaluated" for e in before),
                "processes_alive_3s_after_kill": left, "resume_rc": r.returncode, "resume_stderr_tail": r.stderr[-1500:],
                "events_before_kill_unchanged": after[: len(before)] == before,
                "repeated_evaluations": {v: n for v, n in b["evaluated"].items() if n > 1},
                "wall_s": round(time.monotonic() - t0, 1), **b}
    doc["same_best_source"] = bool(doc["a"]["best_source"]) and doc["a"]["best_source"] == b["best_source"]
    doc["same_proposals"] = [p["knobs"] for p in doc["a"]["proposals"]] == [p["knobs"] for p in b["proposals"]]
    try:
        from profile_fixtures import environment

        doc["provenance"] = {**environment(), "command": "python3 benchmarks/resume_check.py " + " ".join(sys.argv[1:]),
                             "started": started.isoformat(timespec="seconds")}
    except Exception as exc:  # noqa: BLE001 - provenance on the CPU has no GPU name
        doc["provenance"] = {"error": str(exc), "started": started.isoformat(timespec="seconds")}
    for run in ("a", "b"):
        doc[run].pop("best_source", None)
    (out / "resume_check.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("same_best_source", "same_proposals")}
                     | {"repeated": doc["b"]["repeated_evaluations"], "alive": left,
                        "unchanged": doc["b"]["events_before_kill_unchanged"]}), flush=True)
    ok = (not doc["b"]["repeated_evaluations"] and doc["b"]["events_before_kill_unchanged"] and r.returncode == 0
          and a.returncode == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
