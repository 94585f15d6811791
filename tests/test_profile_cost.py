"""The pure parts of benchmarks/profile_cost.py (commands, pass parsing, analysis, Markdown),
and its refusal to run without a GPU. The timings below are test inputs, not measurements."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "profile_cost.py"
FIXTURES = ROOT / "tests" / "fixtures" / "profile"


pc = load_script(SCRIPT)


# ---------------------------------------------------------------- commands


def test_every_prefix_comes_from_ncu_command():
    from kernelopt.profile.ncu import EXTRA_METRICS, SECTIONS, NcuProfiler, ncu_command

    assert pc.ncu_prefix("plain", "ncu", "R") is None
    ours = pc.ncu_prefix("ours", "ncu", "R")
    profiler = NcuProfiler()
    assert ours == ncu_command("ncu", "R", sections=profiler.sections, metrics=profiler.metrics)
    assert ours == ncu_command("ncu", "R", sections=SECTIONS, metrics=EXTRA_METRICS)

    minimal = pc.ncu_prefix("ncu-minimal", "ncu", "R")
    assert "--section" not in minimal and "--set" not in minimal
    assert minimal[minimal.index("--metrics") + 1] == "gpu__time_duration.sum"

    full = pc.ncu_prefix("full", "ncu", "R")
    assert full == [*ncu_command("ncu", "R", sections=(), metrics=())[:-4], "--set", "full", "-o", "R", "-f", "--"]
    assert "--section" not in full and "--metrics" not in full

    one = pc.ncu_prefix("section:Occupancy", "ncu", "R")
    assert one == ncu_command("ncu", "R", sections=("Occupancy",), metrics=())
    assert one.count("--section") == 1 and "--metrics" not in one
    # every prefix keeps kernelopt's NVTX filter and ends where the child command starts
    for config in pc.ALL_CONFIGS[1:]:
        prefix = pc.ncu_prefix(config, "ncu", "R")
        assert prefix[-4:] == ["-o", "R", "-f", "--"] and "kernelopt/" in prefix
    with pytest.raises(ValueError):
        pc.ncu_prefix("fast", "ncu", "R")


def test_section_configs_are_kernelopts_sections():
    from kernelopt.profile.ncu import SECTIONS

    assert pc.ALL_CONFIGS[:4] == ("plain", "ncu-minimal", "ours", "full")
    assert [c.split(":", 1)[1] for c in pc.ALL_CONFIGS[4:]] == list(SECTIONS)


# ---------------------------------------------------------------- pass parsing


@pytest.mark.parametrize("name", ["matvec", "rmsnorm", "softmax"])
def test_parse_passes_on_real_ncu_output(name):
    # ncu_output.txt: what NcuProfiler kept of ncu's stdout+stderr on an H200 (ncu 2025.3.1)
    text = (FIXTURES / name / "ncu_output.txt").read_text()
    assert pc.parse_passes(text) == [{"kernel": f"{name}_kernel", "id": 0, "passes": 21}]


def test_parse_passes_forms():
    real = '==PROF== Profiling "matvec_kernel" - 0: 0%....50%....100% - 21 passes'
    assert pc.parse_passes(real) == [{"kernel": "matvec_kernel", "id": 0, "passes": 21}]
    # several kernels, C++ names with parentheses, one pass, a line glued to program output
    text = (
        "==PROF== Connected to process 20936 (/app)\n"
        '==PROF== Profiling "warmingup(float*)" - 1: 0%....50%....100% - 1 pass\n'
        'Running ...==PROF== Profiling "k2" - 2: 0%....50%....100% - 38 passes\n'
        "==PROF== Report: /tmp/full.ncu-rep\n"
    )
    assert pc.parse_passes(text) == [
        {"kernel": "warmingup(float*)", "id": 1, "passes": 1},
        {"kernel": "k2", "id": 2, "passes": 38},
    ]
    assert pc.parse_passes("") == []
    assert pc.parse_passes("==WARNING== No kernels were profiled.\n==PROF== Report: x.ncu-rep") == []


# ---------------------------------------------------------------- schedule


def test_schedule_round_robin_rotates_and_counts():
    configs = ["plain", "ncu-minimal", "ours", "full", "section:Occupancy", "section:LaunchStats"]
    order = pc.schedule(configs, repeats=3, section_repeats=1)
    counts = {c: sum(1 for _, x in order if x == c) for c in configs}
    assert counts == {"plain": 3, "ncu-minimal": 3, "ours": 3, "full": 3, "section:Occupancy": 1,
                      "section:LaunchStats": 1}
    rounds = [[c for r, c in order if r == k] for k in range(3)]
    assert rounds[0] == configs
    assert rounds[1] == ["ncu-minimal", "ours", "full", "plain"]
    assert rounds[2] == ["ours", "full", "plain", "ncu-minimal"]
    # no main configuration always runs first: drift cannot favour one
    assert len({r[0] for r in rounds}) == 3
    assert [r for r, _ in order] == sorted(r for r, _ in order)  # round by round
    assert all(not c.startswith("section:") for _, c in pc.schedule(configs, 2, 0))
    assert pc.schedule([], 3, 1) == []


def test_names_all_and_none():
    assert pc.names("all", pc.CASES) == list(pc.CASES)
    assert pc.names("none", pc.CASES) == []
    assert pc.names(" softmax , matvec ,", pc.CASES) == ["softmax", "matvec"]


# ---------------------------------------------------------------- analysis


def _run(wall, passes=None, call=None, report=None, ok=True):
    run = {"wall_s": wall, "ok": ok, "kernels": [] if passes is None else [{"kernel": "k", "id": 0, "passes": passes}],
           "profiled_call_s": call}
    if report:
        run["report_bytes"] = report
    if not ok:
        run["error"] = "runtime: boom"
    return run


RUNS = {
    "plain": [_run(5.0, call=0.001), _run(6.0, call=0.001), _run(5.5, call=0.001)],
    "ncu-minimal": [_run(7.5, 1, 0.75, 59_000), _run(8.0, 1, 0.80, 59_000), _run(8.5, 1, 0.70, 59_000)],
    "ours": [_run(8.5, 21, 1.80, 169_000), _run(9.0, 21, 1.75, 169_000), _run(8.0, 21, 1.85, 169_000)],
    "full": [_run(11.0, 38, 4.0, 1_400_000), _run(12.0, 38, 4.2, 1_400_000), _run(11.5, 38, 3.9, 1_400_000),
             _run(0.5, ok=False)],
    "section:SpeedOfLight": [_run(7.7, 10, 1.1, 95_000)],
}


def test_summarize_uses_ok_runs_only():
    s = pc.summarize(RUNS["full"])
    assert s["n"] == 3 and s["errors"] == ["runtime: boom"]
    assert (s["median_s"], s["min_s"], s["max_s"]) == (11.5, 11.0, 12.0)
    assert s["passes"] == 38 and "passes_vary" not in s
    assert s["profiled_call_median_s"] == 4.0 and s["profiled_call_min_s"] == 3.9
    assert s["report_bytes"] == 1_400_000
    assert pc.summarize([_run(1.0, ok=False)]) == {"n": 0, "errors": ["runtime: boom"]}
    two_kernels = _run(2.0, call=0.5)
    two_kernels["kernels"] = [{"kernel": "a", "id": 0, "passes": 21}, {"kernel": "b", "id": 1, "passes": 21}]
    varying = pc.summarize([two_kernels, _run(2.0, 30, 0.5)])
    assert varying["passes"] == 42 and varying["passes_vary"] == [30, 42]


def test_analyze_case_overheads_variable_costs_and_ratios():
    summary = {c: pc.summarize(r) for c, r in RUNS.items()}
    a = pc.analyze_case(summary)
    assert a["overhead_s"]["ncu-minimal"] == pytest.approx(2.5)
    assert a["overhead_s"]["ours"] == pytest.approx(3.0)
    assert a["overhead_s"]["full"] == pytest.approx(6.0)
    assert a["variable_s"]["ours"] == pytest.approx(0.5)
    assert a["variable_s"]["full"] == pytest.approx(3.5)
    assert a["variable_s"]["section:SpeedOfLight"] == pytest.approx(-0.3)
    assert a["full_minus_ours_s"] == pytest.approx(3.0)
    assert a["ours_over_full"] == pytest.approx(0.5)
    assert a["variable_ratio"] == pytest.approx(0.5 / 3.5)
    assert a["passes_ratio"] == pytest.approx(21 / 38)
    # replay: in-range medians 1.80 / 4.0 against ncu-minimal's 0.75
    assert a["replay_variable_s"]["ours"] == pytest.approx(1.05)
    assert a["replay_variable_s"]["full"] == pytest.approx(3.25)
    assert a["replay_variable_ratio"] == pytest.approx(1.05 / 3.25)
    # outside the profiled call: overhead minus what the call itself gained over plain
    assert a["outside_s"]["ours"] == pytest.approx(3.0 - (1.80 - 0.001))
    assert a["separated"] is True and a["replay_separated"] is True


def test_analyze_case_overlap_and_missing_configs():
    runs = dict(RUNS, ours=[_run(8.0, 21, 1.8), _run(11.2, 21, 1.9), _run(9.0, 21, 4.1)])
    a = pc.analyze_case({c: pc.summarize(r) for c, r in runs.items()})
    assert a["separated"] is False and a["replay_separated"] is False
    no_plain = pc.analyze_case({"ours": pc.summarize(RUNS["ours"])})
    assert no_plain == {"overhead_s": {}, "variable_s": {}}
    no_minimal = pc.analyze_case({c: pc.summarize(RUNS[c]) for c in ("plain", "ours", "full")})
    assert no_minimal["variable_s"] == {} and "variable_ratio" not in no_minimal
    assert no_minimal["ours_over_full"] == pytest.approx(0.5) and "replay_variable_s" not in no_minimal


# ---------------------------------------------------------------- Markdown


def _doc():
    summary = {c: pc.summarize(r) for c, r in RUNS.items()}
    return {
        "repeats": 3, "section_repeats": 1, "complete": False,
        "provenance": {"gpu": "Test GPU", "driver": "1.0", "ncu_version": "Version 0", "torch": "t", "triton": "tr",
                       "python": "3", "date": "d", "command": "profile_cost.py OUT.json"},
        "cases": {
            "softmax": {"overrides": {}, "runs": RUNS, "summary": summary, "analysis": pc.analyze_case(summary)},
            "matvec_big": {"overrides": {"M": "32768"}, "error": "BadInput: no"},
        },
    }


def test_render_markdown_rows():
    md = pc.render_markdown(_doc())
    assert "GPU Test GPU, driver 1.0, ncu Version 0" in md and "**Incomplete run.**" in md
    row = next(line for line in md.splitlines() if line.startswith("| softmax |"))
    assert row == ("| softmax | 5.50 | +2.50 / +3.00 / +6.00 | 21 / 38 | +0.50 / +3.50 | +1.05 / +3.25 "
                   "| 0.50, 0.14, 0.32 | yes / yes | 169 KB / 1.40 MB |")
    assert "| matvec_big | error: BadInput: no |" in md
    assert "### softmax (problem defaults)" in md
    full = next(line for line in md.splitlines() if line.startswith("| full |"))
    assert full.startswith("| full | 3 (1 failed) | 11.50 | 11.00 | 12.00 | +6.00 | +3.50 | 38 | 4.000 | +3.25 |")
    assert "| section:SpeedOfLight | 1 | 7.70 |" in md
    done = dict(_doc(), complete=True, note="re-rendered")
    assert "Incomplete" not in pc.render_markdown(done) and "Note: re-rendered" in pc.render_markdown(done)


def test_render_option_needs_no_gpu(tmp_path):
    out = tmp_path / "r.json"
    out.write_text(json.dumps(_doc()))
    r = subprocess.run([sys.executable, str(SCRIPT), str(out), "--render"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == pc.render_markdown(_doc())


# ---------------------------------------------------------------- cases and the CLI


def test_cases_point_at_existing_examples_and_constants():
    from kernelopt.problem import load_candidate, load_problem

    for name, (problem, candidate, overrides) in pc.CASES.items():
        p = load_problem(ROOT / problem, overrides)
        load_candidate(ROOT / candidate)
        assert set(p.overrides) == set(overrides), name
    assert set(pc.DEFAULT_CASES) <= set(pc.CASES) and set(pc.DEFAULT_SECTION_CASES) <= set(pc.DEFAULT_CASES)
    # each example at its problem's size and at a large one
    for example in ("softmax", "rmsnorm", "matvec"):
        sizes = [o for (p, _, o) in pc.CASES.values() if p == f"examples/{example}/problem.py"]
        assert {} in sizes and any(sizes), example


def test_bad_arguments_exit_2(tmp_path):
    out = tmp_path / "r.json"
    for extra in (["--cases", "nope"], ["--configs", "ours,turbo"], ["--repeats", "0"]):
        r = subprocess.run([sys.executable, str(SCRIPT), str(out), *extra], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2 and "profile_cost:" in r.stderr and not out.exists()


def test_without_gpu_it_measures_nothing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr and not out.exists()
    assert len(r.stderr.strip().splitlines()) == 1
