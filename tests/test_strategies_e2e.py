"""`kernelopt optimize --optimizer strategies` end to end on the CPU (Triton interpreter): the run
applies a pack's transform, verifies it, then tunes the new kernel's knobs with the strategy's hint
first; a transform that writes broken source is a failed proposal in the events, and the run goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
SOFTMAX = ROOT / "examples" / "softmax"

PACK = """\
pack: {name: e2e-transforms}
strategies:
  - id: mark-kernel
    title: Mark the kernel (test transform)
    backend: triton
    categories: [dram]
    knobs:
      - {param: num_warps, values: [2]}
    transform: {name: marker_statement, params: {MARK: 2}, requires: [triton]}
  - id: break-kernel
    title: Break the kernel (test transform)
    backend: triton
    categories: [dram]
    transform: {name: breaking}
"""

# `kernelopt` itself, with the test-only transforms registered first (a catalog-independent e2e).
LAUNCH = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import transform_fixtures; "
          "transform_fixtures.register(); from kernelopt.cli import main; main(prog_name='kernelopt')")


@pytest.mark.slow
def test_optimize_with_the_strategies_optimizer(tmp_path: Path) -> None:
    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    run = tmp_path / "run"
    env = {**os.environ, "KERNELOPT_STRATEGY_PATH": str(pack), "KERNELOPT_DB": str(tmp_path / "exp.db")}
    res = subprocess.run([sys.executable, "-c", LAUNCH, "optimize", str(SOFTMAX / "problem.py"),
                          "--kernel", str(SOFTMAX / "kernel.py"), "--set", "ROWS=16", "--set", "COLS=100",
                          "--optimizer", "strategies", "--rounds", "2", "--beam", "3", "--proposals", "2",
                          "--no-profile", "-o", str(run), "--json"],
                         capture_output=True, text=True, env=env, timeout=900, cwd=str(ROOT))
    assert res.returncode == 0, res.stderr[-3000:]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]
    proposed = {e["version"]: e for e in events if e["type"] == "proposed"}
    evaluated = {e["version"]: e["evaluation"] for e in events if e["type"] == "evaluated"}

    # round 1: the transform, with its strategy id and where it applied, verified correct
    transformed = [v for v, e in proposed.items() if (e["proposal"] or {}).get("strategy") == "mark-kernel"
                   and e["proposal"]["extra"].get("phase") == "transform"]
    assert len(transformed) == 1, proposed
    tv = transformed[0]
    assert proposed[tv]["proposal"]["extra"]["transform"] == {
        "name": "marker_statement", "site": "softmax_kernel", "params": {"MARK": 2}}
    assert proposed[tv]["proposal"]["optimizer"] == "strategies"
    assert "_ko_marker = 2" in (run / tv / "kernel.py").read_text()
    assert evaluated[tv]["failure"] is None and evaluated[tv]["verification"]["passed"]

    # the broken transform: a failed proposal with its reason, nothing evaluated, the run went on
    failed = [e for e in events if e["type"] == "proposal_failed"]
    assert len(failed) == 1 and failed[0]["strategy"] == "break-kernel" and "does not parse" in failed[0]["reason"]

    # round 2: the transformed kernel's knobs are tuned, the strategy's hint (num_warps 2) first
    children = [v for v, e in proposed.items() if e["parent"] == tv]
    assert children, "the transformed kernel's knobs were not tuned"
    first = proposed[children[0]]["proposal"]
    assert first["strategy"] == "mark-kernel" and first["extra"]["phase"] == "hint"
    assert first["knobs"]["num_warps"] == 2 and "num_warps 4 -> 2" in first["change"]
    assert evaluated[children[0]]["verification"]["passed"]
    assert json.loads(res.stdout)["finished"]
