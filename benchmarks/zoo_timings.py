"""Time every diagnosis-zoo kernel against its fixed variant on the GPU.

    python3 benchmarks/zoo_timings.py OUT.json [NAME ...]

For each benchmarks/zoo/<name>/ (problem.py, kernel.py, fixed.py, label.yaml) both
candidates go through `kernelopt.harness.bench.bench` -- the one timing path, each in
its own child process -- with the eager baseline. The JSON lists, per zoo kernel,
the label, both timings and the measured speedup of the fix, plus provenance. It is
the input of benchmarks/experience/seed_from_zoo.py. Needs a CUDA GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    from kernelopt.errors import KerneloptError
    from kernelopt.harness.bench import bench, gpu_available
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.yamlio import load_yaml

    if not gpu_available():
        raise SystemExit("zoo_timings.py needs a CUDA GPU: nothing was timed")
    out = Path(sys.argv[1])
    names = sys.argv[2:] or sorted(d.name for d in (ROOT / "benchmarks" / "zoo").iterdir() if (d / "label.yaml").is_file())
    # The fixture writer's provenance, so zoo timings and zoo profiles describe a run alike.
    from profile_fixtures import environment

    prov = {**environment(), "command": "python3 benchmarks/zoo_timings.py " + " ".join(sys.argv[1:])}
    doc: dict[str, object] = {"provenance": prov, "kernels": []}
    failed = 0
    for name in names:
        zdir = ROOT / "benchmarks" / "zoo" / name
        label = load_yaml(zdir / "label.yaml").data
        entry: dict[str, object] = {"name": name, "label": label}
        problem = load_problem(str(zdir / "problem.py"))
        for which in ("kernel", "fixed"):
            try:
                res = bench(problem, load_candidate(str(zdir / f"{which}.py")), baselines=("eager",))
                entry[which] = res.model_dump(mode="json")
                entry[f"{which}_median_ms"] = res.timings["candidate"].stats.median_ms  # type: ignore[union-attr]
            except KerneloptError as exc:
                entry[f"{which}_error"] = str(exc)
                failed += 1
        if "kernel_median_ms" in entry and "fixed_median_ms" in entry:
            entry["fix_speedup"] = entry["kernel_median_ms"] / entry["fixed_median_ms"]  # type: ignore[operator]
        doc["kernels"].append(entry)  # type: ignore[union-attr]
        out.write_text(json.dumps(doc, indent=2))
        print(f"{name:20s} kernel={entry.get('kernel_median_ms')} fixed={entry.get('fixed_median_ms')} "
              f"speedup={entry.get('fix_speedup')}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
