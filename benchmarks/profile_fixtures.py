"""Profile problem/kernel pairs with NcuProfiler and write CPU-test fixtures with provenance.

    python3 benchmarks/profile_fixtures.py OUTDIR                      # every examples/*/ pair
    python3 benchmarks/profile_fixtures.py OUTDIR NAME=PROBLEM:KERNEL ...   # any pairs (the zoo)

For each pair, OUTDIR/NAME/ gets: raw.csv (`ncu -i REP --csv --page raw`), details.txt
(`--page details --print-rule-details`), metrics.json + ncu_summary.md + ncu_details.md
(what `kernelopt profile` writes), provenance.json (GPU, driver, ncu, torch, triton,
date, command), and profile.ncu-rep only when it is under --max-rep-bytes (else removed,
and said so in provenance.json). Needs a CUDA GPU and ncu with counters permitted.
Exit 1 if any pair failed (the others are still written).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def example_pairs() -> list[tuple[str, Path, Path]]:
    return [(d.name, d / "problem.py", d / "kernel.py") for d in sorted((ROOT / "examples").iterdir())
            if (d / "problem.py").is_file() and (d / "kernel.py").is_file()]


def parse_pair(text: str) -> tuple[str, Path, Path]:
    name, sep, rest = text.partition("=")
    problem, sep2, kernel = rest.partition(":")
    if not sep or not sep2:
        raise SystemExit(f"bad pair {text!r}: expected NAME=PROBLEM.py:KERNEL.py")
    return name, Path(problem), Path(kernel)


def require_ncu() -> str:
    from kernelopt.harness.envinfo import find_tool

    ncu = find_tool("ncu")
    if ncu is None:
        raise SystemExit("ncu not found (PATH, CUDA_HOME/bin, /opt/nvidia/nsight-compute)")
    return ncu


def tool_out(argv: list[str], timeout: float = 120) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc}"
    return proc.stdout if proc.returncode == 0 else proc.stdout + proc.stderr


def environment(ncu: str | None = None) -> dict[str, object]:
    """Provenance of a GPU run: device, driver, versions, date (and ncu's version when given)."""
    import torch
    import triton

    smi = tool_out(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).strip()
    env: dict[str, object] = {
        "gpu": torch.cuda.get_device_name(),
        "nvidia_smi": smi,
        "driver": smi.splitlines()[0].rpartition(", ")[2] if ", " in smi else None,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    from kernelopt.harness.envinfo import git_commit

    commit = git_commit()
    if commit:
        env["kernelopt_commit"] = commit
    if ncu:
        env["ncu_version"] = tool_out([ncu, "--version"]).strip().splitlines()[-1]
    return env


def main() -> int:
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.profile.ncu import EXTRA_METRICS, NcuProfiler, ncu_command, supported_metrics
    from kernelopt.profile.report import write_outputs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("pairs", nargs="*", help="NAME=PROBLEM.py:KERNEL.py (default: every examples/*/ pair)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--max-rep-bytes", type=int, default=1 << 20)
    opts = ap.parse_args()
    ncu = require_ncu()
    env = environment(ncu)
    metrics_ok, dropped = supported_metrics(ncu, EXTRA_METRICS)
    if dropped:
        print(f"this ncu/GPU does not know these metrics, profiling without them: {dropped}", file=sys.stderr)
    pairs = [parse_pair(p) for p in opts.pairs] or example_pairs()
    overrides = dict(o.split("=", 1) for o in opts.overrides)
    failed = 0
    for name, problem_path, kernel_path in pairs:
        out = opts.outdir / name
        out.mkdir(parents=True, exist_ok=True)
        t0 = datetime.datetime.now()
        try:
            problem = load_problem(problem_path, overrides)
            candidate = load_candidate(kernel_path)
            metrics = NcuProfiler(timeout_s=opts.timeout, metrics=metrics_ok).profile(problem, candidate, out_dir=out)
            (out / "metrics.json").write_text(metrics.model_dump_json(indent=2))
            write_outputs(metrics, out)
        except Exception as exc:  # noqa: BLE001 - record and go on with the next pair
            failed += 1
            print(f"{name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            (out / "error.txt").write_text(f"{type(exc).__name__}: {exc}\n")
            continue
        seconds = (datetime.datetime.now() - t0).total_seconds()
        rep = out / "profile.ncu-rep"
        (out / "raw.csv").write_text(tool_out([ncu, "-i", str(rep), "--csv", "--page", "raw"]))
        (out / "details.txt").write_text(tool_out([ncu, "-i", str(rep), "--page", "details", "--print-rule-details"]))
        rep_bytes = rep.stat().st_size
        kept = rep_bytes <= opts.max_rep_bytes
        if not kept:
            rep.unlink()
        prefix = ncu_command("ncu", "profile", metrics=metrics_ok)
        provenance = {
            **env,
            "problem": str(problem_path), "kernel": str(kernel_path), "overrides": overrides,
            "command": " ".join(prefix + ["python", "-m", "kernelopt.harness.isolate", "REQUEST", "RESULT"]),
            "generated_by": "python3 benchmarks/profile_fixtures.py " + " ".join(sys.argv[1:]),
            "exports": {"raw.csv": "ncu -i profile.ncu-rep --csv --page raw",
                        "details.txt": "ncu -i profile.ncu-rep --page details --print-rule-details"},
            "metrics_dropped_unknown_to_ncu": dropped,
            "ncu_rep_bytes": rep_bytes, "ncu_rep_kept": kept, "profile_wall_s": round(seconds, 2),
            "kernels": [k.name for k in metrics.kernels],
        }
        (out / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
        print(f"{name}: {len(metrics.kernels)} kernel(s), {seconds:.1f} s, report {rep_bytes} bytes"
              f"{'' if kept else ' (not kept)'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
