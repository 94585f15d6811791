"""`--optimizer strategies` end to end on the CPU (Triton interpreter).

1. `kernelopt optimize` with the shipped packs and catalog: the run applies a transform where it
   fits the kernel, verifies it, then tunes the new kernel's knobs, the strategy's hints first;
   the events carry the strategy ids.
2. Through the library with test-only transforms: a transform that writes broken source is a
   failed proposal in the events, never retried, and the run goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transform_fixtures import fixture_transforms  # noqa: F401 - pytest fixture

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax"
SMALL = ["--set", "ROWS=16", "--set", "COLS=100"]


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_optimize_applies_a_catalog_transform_then_tunes_its_knobs(tmp_path: Path) -> None:
    from kernelopt.optimize.transforms import available
    from kernelopt.strategies import load_strategies

    run = tmp_path / "run"
    env = {**os.environ, "KERNELOPT_DB": str(tmp_path / "exp.db")}
    res = subprocess.run([sys.executable, "-m", "kernelopt", "optimize", str(SOFTMAX / "problem.py"),
                          "--kernel", str(SOFTMAX / "kernel.py"), *SMALL, "--optimizer", "strategies",
                          "--rounds", "2", "--beam", "3", "--proposals", "2", "--no-profile", "-o", str(run), "--json"],
                         capture_output=True, text=True, env=env, timeout=900, cwd=str(ROOT))
    assert res.returncode == 0, res.stderr[-3000:]
    events = _events(run)
    proposed = {e["version"]: e for e in events if e["type"] == "proposed"}
    evaluated = {e["version"]: e["evaluation"] for e in events if e["type"] == "evaluated"}
    packs = load_strategies().strategies

    transformed = {v: e["proposal"] for v, e in proposed.items()
                   if e["proposal"] and e["proposal"]["extra"].get("phase") == "transform"}
    assert transformed, "no transform was applied"
    for vid, p in transformed.items():
        spec = p["extra"]["transform"]
        assert p["optimizer"] == "strategies" and spec["name"] in available()
        assert packs[p["strategy"]].transform.name == spec["name"]  # the strategy id that carries it
        parent = proposed[vid]["parent"]
        assert spec["site"] == "softmax_kernel" and parent in proposed
        assert evaluated[vid]["failure"] is None and evaluated[vid]["verification"]["passed"], vid
        assert (run / vid / "change.diff").read_text().startswith(f"--- {parent}/kernel.py\n+++ {vid}")
    assert any(proposed[vid]["parent"] == "v0" for vid in transformed)

    # round 2 tunes a transformed kernel's knobs, its strategy's hints first, and verifies them
    # (a transformed kernel may also get another transform: they compose)
    tuned = []
    for vid, p in transformed.items():
        knob_children = [v for v, e in proposed.items()
                         if e["parent"] == vid and e["proposal"]["extra"].get("phase") != "transform"]
        if knob_children:
            tuned.append((p, proposed[knob_children[0]]["proposal"], knob_children[0]))
    assert tuned, "no transformed kernel was tuned"
    for p, first, child in tuned:
        assert first["strategy"] == p["strategy"], first
        assert evaluated[child]["verification"]["passed"], child
    report = (run / "final_report.md").read_text()
    assert any(p["strategy"] in report.split("## Which strategies paid")[1] for p in transformed.values())
    assert json.loads(res.stdout)["finished"]


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


@pytest.mark.slow
def test_a_broken_transform_is_a_failed_proposal_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture_transforms) -> None:
    from kernelopt.optimize.loop import optimize

    pack = tmp_path / "pack.yaml"
    pack.write_text(PACK)
    monkeypatch.setenv("KERNELOPT_STRATEGY_PATH", str(pack))
    run = tmp_path / "run"
    state = optimize(SOFTMAX / "problem.py", SOFTMAX / "kernel.py", run_dir=run, overrides={"ROWS": "16", "COLS": "100"},
                     optimizer="strategies", optimizer_options={"transforms": ["marker_statement", "breaking"]},
                     rounds=2, beam=3, proposals_per_member=2, profile=False, experience=False)
    assert state.finished
    events = _events(run)
    failed = [e for e in events if e["type"] == "proposal_failed"]
    assert len(failed) == 1, failed  # once: not retried in round 2, nor from another member
    assert failed[0]["strategy"] == "break-kernel" and "does not parse" in failed[0]["reason"]
    proposed = {e["version"]: e for e in events if e["type"] == "proposed"}
    marked = [v for v, e in proposed.items() if (e["proposal"] or {}).get("strategy") == "mark-kernel"
              and e["proposal"]["extra"]["phase"] == "transform"]
    assert len(marked) == 1 and "_ko_marker = 2" in (run / marked[0] / "kernel.py").read_text()
    children = [e["proposal"] for e in proposed.values() if e["parent"] == marked[0]]
    assert children and children[0]["strategy"] == "mark-kernel" and children[0]["knobs"]["num_warps"] == 2
    assert "| break-kernel | breaking | 1 | 0 | 0 |" in (run / "final_report.md").read_text()
