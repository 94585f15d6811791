"""benchmarks/strategies_vs_knobs.py: the two optimizers' winners re-timed head to head, one verdict each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MATVEC, FakeEngine, load_script

from kernelopt.optimize.knobs.rewrite import set_knobs

ROOT = Path(__file__).resolve().parents[1]


def _suite(out: Path, optimizer: str, kernels: dict[str, str]) -> Path:
    rows = []
    for name, source in kernels.items():
        (out / "runs" / name).mkdir(parents=True)
        (out / "runs" / name / "best_kernel.py").write_text(source)
        rows.append({"name": name, "correct": True, "overrides": {"M": "64", "K": "256"}, "best_version": "v1"})
    rows.append({"name": "unsolved", "correct": False, "overrides": {}})
    (out / "suite_result.json").write_text(json.dumps({"suite_dir": str(ROOT / "examples"), "optimizer": optimizer,
                                                       "git_commit": "abc", "problems": rows}))
    return out


def test_head_to_head_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelopt.harness.evaluate as evaluate_mod

    script = load_script(ROOT / "benchmarks" / "strategies_vs_knobs.py")
    monkeypatch.setattr(evaluate_mod, "Engine", FakeEngine)  # times are a fixed function of the knobs
    monkeypatch.setattr(script, "transform_steps", lambda run_dir: ["single-pass-row (single_pass_row@k)"])
    start = (MATVEC / "kernel.py").read_text()
    better = set_knobs(start, {"BLOCK_K": 512, "num_warps": 8})  # nearer the cost's optimum
    knobs = _suite(tmp_path / "k", "knobs", {"matvec": start})
    strategies = _suite(tmp_path / "s", "strategies", {"matvec": better})
    assert script.main([str(knobs), str(strategies), "-o", str(tmp_path / "cmp")]) == 0
    doc = json.loads((tmp_path / "cmp.json").read_text())
    (row,) = [r for r in doc["results"] if r["problem"] == "matvec"]
    assert row["verdict"] == "better" and row["ratio"] > 1 and row["strategies_ms"] < row["knobs_ms"]
    md = (tmp_path / "cmp.md").read_text()
    assert "| matvec |" in md and "| better | single-pass-row (single_pass_row@k) |" in md
    assert "1 problems compared: 1 better, 0 same, 0 worse." in md
    # the other way round the strategies winner is worse
    assert script.main([str(strategies), str(knobs), "-o", str(tmp_path / "rev"), "--problems", "matvec"]) == 0
    assert json.loads((tmp_path / "rev.json").read_text())["results"][0]["verdict"] == "worse"
