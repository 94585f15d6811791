"""The pure analysis of benchmarks/timing_stability.py, and its refusal to run without a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "timing_stability.py"


ts = load_script(SCRIPT)


def test_spread_is_range_over_median():
    assert ts.spread([1.0, 1.0, 1.0]) == 0.0
    assert ts.spread([0.99, 1.0, 1.01, 1.0, 1.0]) == pytest.approx(0.02)
    with pytest.raises(ValueError):
        ts.spread([])


def test_relative_difference():
    assert ts.relative_difference(1.03, 1.0) == pytest.approx(0.03)
    assert ts.relative_difference(0.97, 1.0) == pytest.approx(0.03)


def test_analyze_case_applies_criteria_only_to_long_kernels():
    ok = ts.analyze_case([0.700, 0.702, 0.701, 0.703, 0.700], [0.705, 0.704, 0.706])
    assert ok["criteria_apply"] and ok["spread_ok"] and ok["do_bench_ok"] and ok["passed"] is True
    assert ok["median_of_medians_ms"] == pytest.approx(0.701) and ok["do_bench_median_ms"] == pytest.approx(0.705)

    wide = ts.analyze_case([0.70, 0.72, 0.70, 0.70, 0.70], [0.70])
    assert wide["spread"] == pytest.approx(0.02 / 0.70) and not wide["spread_ok"] and wide["passed"] is False

    off = ts.analyze_case([1.0] * 5, [1.05])
    assert off["spread_ok"] and not off["do_bench_ok"] and off["passed"] is False

    small = ts.analyze_case([0.05, 0.06, 0.05, 0.05, 0.05], [0.05])
    assert not small["criteria_apply"] and small["passed"] is None and not small["spread_ok"]


def test_overall_verdict():
    good = {"analysis": ts.analyze_case([1.0] * 5, [1.0])}
    bad = {"analysis": ts.analyze_case([1.0, 1.1, 1.0, 1.0, 1.0], [1.0])}
    small = {"analysis": ts.analyze_case([0.01, 0.02], [0.01])}
    assert ts.overall({"a": good, "s": small}) is True
    assert ts.overall({"a": good, "b": bad}) is False
    assert ts.overall({"s": small}) is None
    assert ts.overall({"a": good, "e": {"error": "RuntimeError: x"}}) is False


def test_cases_point_at_existing_examples_and_constants():
    from kernelopt.problem import load_candidate, load_problem

    for name, (problem, candidate, overrides) in ts.CASES.items():
        p = load_problem(ROOT / problem, overrides)
        load_candidate(ROOT / candidate)
        assert p.overrides and set(p.overrides) == set(overrides), name


def test_without_gpu_it_measures_nothing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr and not out.exists()
