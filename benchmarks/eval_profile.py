"""Where one evaluation's wall time goes, on the verifier's side (issue #23).

    python3 benchmarks/eval_profile.py [--problem P --kernel K] [--candidates 3] [--zygote on|off|both]
                                       [--isolate worker|candidate|sandbox] [-o OUT.txt]

Runs the verifier in this process (its runner is still a separate process, as in the engine),
evaluates the same kernel N times, stamps every progress line it reports (runner start, each trial,
timing) with the time since the evaluation began, and prints cProfile's top functions by
cumulative time over all N evaluations. Time the verifier spends waiting on its runner shows up
as the channel's read; the rest (building inputs and references, writing the arena, judging) is
the verifier's own. The runners' own cProfile stats (KERNELOPT_RUNNER_PROFILE) follow.

`--zygote both` runs it all twice, runners started cold and forked from a zygote
(kernelopt.harness.zygote), and ends with each one's `runner_start` phases side by side; the
default is the engine's own choice for the device (forked on a GPU, cold on the CPU).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default=str(ROOT / "benchmarks" / "suite" / "softmax" / "problem.py"))
    parser.add_argument("--kernel", default=str(ROOT / "benchmarks" / "suite" / "softmax" / "kernel.py"))
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--small", action="store_true", help="the problem at its SMALL shape")
    parser.add_argument("--isolate", choices=("worker", "candidate", "sandbox"), default="worker",
                        help="candidate: a fresh runner per candidate on the CPU too (on a GPU every timed one gets "
                             "one); sandbox: each runner in namespaces of its own (no zygote), its cost per candidate")
    parser.add_argument("--zygote", choices=("on", "off", "both", "auto"), default="auto",
                        help="runners forked from a zygote, started cold, both in turn, or the engine's default")
    parser.add_argument("-o", "--out", default=None)
    args = parser.parse_args(argv)

    from kernelopt.harness.evaluate import visible_devices
    from kernelopt.harness.protocol import EvaluateRequest, WorkerConfig
    from kernelopt.harness.worker import Verifier
    from kernelopt.problem import load_candidate, load_problem

    device = args.device or visible_devices()[0]
    problem, cand = load_problem(args.problem), load_candidate(args.kernel)
    if args.small:
        from kernelopt.problem import small_shape

        problem = load_problem(args.problem, overrides=small_shape(args.problem))
    import os
    import tempfile

    from kernelopt.harness.runner import PROFILE_VAR
    from kernelopt.harness.zygote import resolve

    settings = {"on": [True], "off": [False], "both": [False, True],
                "auto": [resolve(None, device, args.isolate)]}[args.zygote]
    texts: list[str] = []
    starts: dict[bool, list[float]] = {}
    for zygote in settings:
        lines: list[str] = [f"=== runners {'forked from a zygote' if zygote else 'started cold'} ==="]
        t_eval = [time.monotonic()]

        def progress(index: int, what: str) -> None:
            lines.append(f"  cand {index} +{time.monotonic() - t_eval[0]:7.3f} s  {what}")

        runner_stats = tempfile.mkdtemp(prefix="kernelopt-runner-prof-")
        os.environ[PROFILE_VAR] = runner_stats  # the runners inherit it (KERNELOPT_* is allowlisted)
        t0 = time.monotonic()
        verifier = Verifier(WorkerConfig(problem=problem, device=device, baselines=[], isolate=args.isolate,
                                         zygote=zygote), progress)
        lines.append(f"verifier setup {time.monotonic() - t0:.2f} s (device {device})")
        prof = cProfile.Profile()
        for i in range(args.candidates):
            t_eval[0] = time.monotonic()
            prof.enable()
            ev = verifier.evaluate(EvaluateRequest(index=i, candidate=cand))
            prof.disable()
            if "runner_start" in ev.phases:
                starts.setdefault(zygote, []).append(ev.phases["runner_start"])
            lines.append(f"cand {i}: wall {ev.wall_s:.2f} s phases {({k: round(v, 3) for k, v in (ev.phases or {}).items()})} "
                         f"failure {ev.failure.reason if ev.failure else None} "
                         f"median {ev.timing.median_ms if ev.timing else None} count {ev.timing.count if ev.timing else None}")
        forked = verifier.zygote is not None and verifier.zygote.failed is None
        verifier.close()
        if zygote and not forked:
            lines.append("(the zygote failed: later runners started cold; its stderr is the verifier's)")
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(45)
        files = sorted(str(f) for f in Path(runner_stats).glob("runner-*.prof"))
        if files:
            buf.write(f"\n=== the runners ({len(files)} processes), handling requests ===\n")
            pstats.Stats(*files, stream=buf).sort_stats("cumulative").print_stats(45)
        shutil.rmtree(runner_stats, ignore_errors=True)  # read: nothing of it outlives the script
        texts.append("\n".join(lines) + "\n\n" + buf.getvalue())
    summary = ["runner_start (s) per candidate that started a runner:" if starts else
               "no candidate started a runner (the first runner starts with the verifier; see --isolate)"]
    for zygote, values in starts.items():
        summary.append(f"  {'forked' if zygote else 'cold  '}: {' '.join(f'{v:.3f}' for v in values)}"
                       f"  (median {sorted(values)[len(values) // 2]:.3f})")
    text = "\n".join(texts) + "\n" + "\n".join(summary) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
