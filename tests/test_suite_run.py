"""`kernelopt suite run`: fast_p and geomeans as KernelBench computes them, the roofline
fraction, suite.jsonl, a CPU run end to end (small shapes, interpreter), kill and resume.

CPU tests avoid matmul_bf16 and linear_bias_gelu: the Triton interpreter's bf16 tl.dot is wrong."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.models.suite import ProblemResult
from kernelopt.suite import (append_result, fast_p, geomean_speedup, read_results, roofline_fraction, score,
                             shape_figures, unmeasured)

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "suite"
H100 = "NVIDIA H100 80GB HBM3"
PNG = b"\x89PNG\r\n\x1a\n"


def _row(name: str, correct: bool, eager: float | None = None, compile_: float | None = None,
         start: float | None = None) -> ProblemResult:
    """A problem whose best kernel is `x` times faster than each baseline given (best = 1 ms)."""
    best = 1.0 if correct else None
    return ProblemResult(
        name=name, correct=correct, run_dir=f"runs/{name}", best_ms=best,
        eager_ms=eager, compile_ms=compile_, start_ms=start,
        speedup_vs_eager=eager / best if correct and eager else None,
        speedup_vs_compile=compile_ / best if correct and compile_ else None,
        speedup_vs_start=start / best if correct and start else None,
    )


# Five problems, speedups over eager: 2.0, exactly 1.0, 0.6, (incorrect), 1.6.
ROWS = [_row("a", True, eager=2.0), _row("b", True, eager=1.0), _row("c", True, eager=0.6),
        _row("d", False, eager=3.0), _row("e", True, eager=1.6)]


@pytest.mark.parametrize("p, expected", [
    (0.0, 4 / 5),   # p = 0: every correct problem; the incorrect one stays in the denominator
    (0.5, 4 / 5),
    (0.8, 3 / 5),   # 2.0, 1.0, 1.6
    (1.0, 2 / 5),   # strictly faster: b's 1.0 does not count
    (1.5, 2 / 5),
    (2.0, 0 / 5),   # a's 2.0 is not > 2
])
def test_fast_p_counts_correct_and_faster_over_all_problems(p: float, expected: float) -> None:
    assert fast_p(ROWS, p, "eager") == pytest.approx(expected)


def test_geomean_is_over_the_correct_problems_only() -> None:
    assert geomean_speedup(ROWS, "eager") == pytest.approx((2.0 * 1.0 * 0.6 * 1.6) ** 0.25)
    assert geomean_speedup([_row("x", False, eager=5.0)], "eager") is None


def test_a_baseline_never_timed_is_not_measured_not_zero() -> None:
    rows = [_row("a", True, start=2.0), _row("b", False, start=1.0)]
    assert fast_p(rows, 1.0, "eager") is None and fast_p(rows, 0.0, "compile") is None
    assert geomean_speedup(rows, "compile") is None
    assert fast_p(rows, 1.0, "start") == pytest.approx(1 / 2)
    table, geo, missing = score(rows)
    assert [r.p for r in table] == [0.0, 0.5, 0.8, 1.0, 1.5, 2.0]
    assert all(r.eager is None and r.compile is None for r in table)
    assert geo["eager"] is None and geo["start"] == pytest.approx(2.0)
    assert "eager" not in missing and "compile" not in missing


def test_a_correct_problem_missing_its_own_baseline_counts_as_not_faster() -> None:
    rows = [_row("a", True, compile_=3.0), _row("b", True), _row("c", False, compile_=1.0)]
    assert fast_p(rows, 1.0, "compile") == pytest.approx(1 / 3)
    assert fast_p(rows, 0.0, "compile") == pytest.approx(2 / 3)  # p = 0 is "correct"
    assert unmeasured(rows, "compile") == 1
    assert geomean_speedup(rows, "compile") == pytest.approx(3.0)


def test_unknown_baseline_is_bad_input() -> None:
    with pytest.raises(BadInput):
        fast_p(ROWS, 1.0, "cudnn")


def test_shape_figures_follow_the_small_shape_without_running_the_problem() -> None:
    # gelu: BYTES = 2 * ROWS * COLS * 4, FLOPS = 20 * ROWS * COLS at SMALL = 3 x 300.
    assert shape_figures(SUITE / "gelu" / "problem.py", {"ROWS": "3", "COLS": "300"}) == (7200.0, 18000.0, "fp32")
    # conv3d's BYTES goes through floor divisions and powers: at SMALL, D_OUT = H_OUT = 2, W_OUT = 5,
    # OUTPUTS = 1*2*2*2*5 = 40; BYTES = (1*2*2*2*5 + 2*2*27 + 40) * 4 = 752; FLOPS = 2*40*2*27 = 4320.
    small = {"BATCH": "1", "IN_CHANNELS": "2", "OUT_CHANNELS": "2", "DEPTH": "2", "HEIGHT": "2", "WIDTH": "5"}
    assert shape_figures(SUITE / "conv3d" / "problem.py", small) == (752.0, 4320.0, "tf32_tensor")


def test_shape_figures_never_call_anything(tmp_path: Path) -> None:
    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nN = 4\nBYTES = len('x' * N)\nFLOPS = 2 * N\n"
                       "class Model(torch.nn.Module):\n    pass\n"
                       "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    assert shape_figures(problem) == (None, 8.0, None)


def test_roofline_fraction_from_the_datasheet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no measured ceilings: the datasheet row
    # H100 SXM: 3.35 TB/s; 3.35e9 bytes take 1 ms at the peak, so a 2 ms kernel is at half of it.
    fraction, bound, source = roofline_fraction(3.35e9, 1.0, "fp32", 2.0, H100)
    assert fraction == pytest.approx(0.5) and bound == "dram" and "datasheet" in (source or "")
    # FP32 67 TFLOP/s: 6.7e10 FLOPs take 1 ms, more than the 1e3 bytes do.
    fraction, bound, _ = roofline_fraction(1e3, 6.7e10, "fp32", 4.0, H100)
    assert fraction == pytest.approx(0.25) and bound == "compute"
    assert roofline_fraction(3.35e9, 1.0, "fp32", 2.0, "cpu (Triton interpreter)") == (None, None, None)
    assert roofline_fraction(3.35e9, 1.0, "fp32", None, H100) == (None, None, None)


def test_suite_jsonl_ignores_and_then_cuts_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "suite.jsonl"
    append_result(path, _row("a", True, eager=2.0))
    with open(path, "ab") as fh:
        fh.write(b'{"name": "b", "corr')  # a kill in the middle of the next append
    assert [r.name for r in read_results(path)] == ["a"]
    append_result(path, _row("c", False))
    assert [r.name for r in read_results(path)] == ["a", "c"]
    path.write_bytes(b"garbage\n" + path.read_bytes())
    with pytest.raises(BadInput):
        read_results(path)


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelopt", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))


def test_unknown_problem_is_one_line_exit_2(tmp_path: Path) -> None:
    res = _cli("suite", "run", str(SUITE), "--problems", "gelu,nope", "-o", str(tmp_path / "out"), timeout=120)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "nope" in res.stderr
    assert not (tmp_path / "out").exists()


def test_parallel_problems_without_a_gpu_is_refused(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    res = _cli("suite", "run", str(SUITE), "--problems", "gelu", "--parallel-problems", "-o", str(tmp_path / "o"),
               "--json", timeout=120)
    assert res.returncode == 2
    assert "GPU" in json.loads(res.stdout)["error"]["message"]


SMALL_RUN = ["--small", "--budget-evals", "2", "--rounds", "1", "--beam", "1", "--proposals", "1",
             "--no-experience", "--no-profile"]


@pytest.mark.slow
def test_small_suite_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _cli("suite", "run", str(SUITE), "--problems", "gelu,row_sum", *SMALL_RUN, "-o", str(out), "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert [p["name"] for p in summary["problems"]] == ["gelu", "row_sum"]
    assert summary["complete"] and summary["small"] and summary["interpreter"]
    assert summary["time_label"] == "interpreter wall time"
    for p in summary["problems"]:
        assert p["correct"] and p["best_ms"] > 0 and p["start_ms"] > 0
        assert p["speedup_vs_start"] == pytest.approx(p["start_ms"] / p["best_ms"])
        # No GPU: no baseline time, no roofline, and nothing stands in for them.
        assert p["eager_ms"] is None and p["speedup_vs_compile"] is None and p["roofline_fraction"] is None
        assert p["overrides"] and 0 < p["evaluations"] <= 2
        assert (out / "runs" / p["name"] / "final_report.md").is_file()
    assert all(row["eager"] is None and row["compile"] is None for row in summary["fast_p"])
    assert next(r for r in summary["fast_p"] if r["p"] == 0.0)["start"] == 1.0
    assert summary["geomean"]["eager"] is None
    assert len(read_results(out / "suite.jsonl")) == 2
    report = (out / "suite_report.md").read_text()
    assert "interpreter wall times" in report and "SMALL" in report and "| gelu |" in report
    assert "not measured" in report
    for png in ("speedup.png", "roofline.png"):
        data = (out / png).read_bytes()
        assert data[:8] == PNG and len(data) > 5000, png
    assert json.loads((out / "suite_result.json").read_text())["problems"][1]["name"] == "row_sum"


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_kill_then_resume_skips_the_finished_problem(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "kernelopt", "suite", "run", str(SUITE), "--problems", "gelu,row_sum", *SMALL_RUN,
           "-o", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(ROOT))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if (out / "suite.jsonl").is_file() and (out / "suite.jsonl").read_bytes().count(b"\n") >= 1:
            break
        if proc.poll() is not None:
            pytest.fail(f"the suite ended before it could be killed: {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    first = read_results(out / "suite.jsonl")
    assert [r.name for r in first] == ["gelu"]
    gelu_events = (out / "runs" / "gelu" / "events.jsonl").read_bytes()
    res = _cli("suite", "run", str(SUITE), "--problems", "gelu,row_sum", *SMALL_RUN, "-o", str(out), "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    # The finished problem was not run again; the other one was run (or resumed) to the end.
    assert (out / "runs" / "gelu" / "events.jsonl").read_bytes() == gelu_events
    assert [r.name for r in read_results(out / "suite.jsonl")] == ["gelu", "row_sum"]
    summary = json.loads(res.stdout)
    assert summary["complete"] and [p["name"] for p in summary["problems"]] == ["gelu", "row_sum"]
    assert summary["problems"][0] == first[0].model_dump(mode="json")
    assert _events(out / "runs" / "row_sum")[-1]["type"] == "run_finished"


@pytest.mark.slow
def test_the_interrupted_problem_resumes_its_run(tmp_path: Path) -> None:
    """A run dir left without run_finished (a kill during the final re-timing) is resumed, not restarted."""
    from kernelopt.optimize.loop import optimize
    from kernelopt.suite import run_suite

    out = tmp_path / "out"
    run = out / "runs" / "gelu"
    optimize(SUITE / "gelu" / "problem.py", SUITE / "gelu" / "kernel.py", run_dir=run,
             overrides={"ROWS": "3", "COLS": "300"}, budget_evals=2, rounds=1, beam=1, proposals_per_member=1,
             profile=False, experience=False)
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    # A kill truncates the log (one with lines taken out of its middle is refused as edited).
    kept = lines[:next(i for i, line in enumerate(lines) if json.loads(line)["type"] in ("retimed", "run_finished"))]
    (run / "events.jsonl").write_text("".join(kept))
    evaluated = sum(json.loads(line)["type"] == "evaluated" for line in kept)
    result = run_suite(SUITE, problems=["gelu"], out_dir=out, small=True, budget_evals=2, rounds=1, beam=1,
                       proposals_per_member=1, profile=False, experience=False)
    events = _events(run)
    assert events[: len(kept)] == [json.loads(line) for line in kept]
    assert any(e["type"] == "resumed" for e in events) and events[-1]["type"] == "run_finished"
    assert sum(e["type"] == "evaluated" for e in events) == evaluated  # nothing evaluated again
    row = result.problems[0]
    assert row.resumed and row.correct and row.evaluations == evaluated and row.evaluations_run == 0
    assert not math.isnan(row.speedup_vs_start or float("nan"))


def test_report_from_a_gpu_like_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Markdown and both plots from rows with eager and torch.compile times (what a GPU run records)."""
    from kernelopt.models.suite import SuiteResult
    from kernelopt.report.suite_report import write_suite_report
    from kernelopt.suite import finish_summary

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rows = [_row(r.name, r.correct, eager=r.eager_ms, compile_=(r.eager_ms or 0) * 0.5 or None, start=2.0)
            for r in ROWS]
    rows = [r.model_copy(update={"device": H100, "roofline_fraction": 0.5, "roofline_bound": "dram"}) if r.correct else r
            for r in rows]
    summary = finish_summary(SuiteResult(suite_dir="s", out_dir=str(tmp_path), optimizer="knobs", problems=rows))
    assert summary.device == H100 and summary.time_label == "GPU time" and not summary.interpreter
    files = write_suite_report(summary, tmp_path)
    assert {p.name for p in files} == {"speedup.png", "roofline.png", "suite_report.md", "suite_result.json"}
    md = (tmp_path / "suite_report.md").read_text()
    # p = 0.8 against eager: 3 of 5; against torch.compile (half the eager time): only a's 1.0x -> 1.0 > 0.8.
    assert "| 0.8 | 0.60 | 0.20 | 0.80 |" in md
    assert "not measured" not in md.split("## Problems")[1].split("## fast_p")[0]  # every row has both baselines
    assert "interpreter" not in md
    for png in ("speedup.png", "roofline.png"):
        assert (tmp_path / png).read_bytes()[:8] == PNG


def test_totals_count_every_call_of_a_resumed_run(tmp_path: Path) -> None:
    """Rows finished by earlier calls (and commits) count in the totals; "this process" stays the last call."""
    from kernelopt.models.suite import SuiteResult
    from kernelopt.report.suite_report import write_suite_report
    from kernelopt.suite import finish_summary

    rows = [r.model_copy(update={"wall_s": 10.0 * (i + 1), "evaluations": i + 2, "git_commit": "aaa" if i < 2 else "bbb"})
            for i, r in enumerate(ROWS)]
    summary = finish_summary(SuiteResult(suite_dir="s", out_dir=str(tmp_path), optimizer="knobs", problems=rows,
                                         wall_s=50.0, evaluations_run=6))
    assert (summary.problems_wall_s, summary.problems_evaluations, summary.commits) == (150.0, 20, ["aaa", "bbb"])
    write_suite_report(summary, tmp_path)
    md = (tmp_path / "suite_report.md").read_text()
    assert "- This process: 50 s, 6 evaluations (7.2 per minute)" in md
    assert "- All problems, over every call: 150 s, 20 evaluations; rows finished at commits aaa, bbb" in md


def test_parallel_problems_give_each_problem_to_one_gpu_once() -> None:
    import threading

    from kernelopt.suite import _run_parallel

    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def work(name: str, device: str) -> None:
        time.sleep(0.01)
        with lock:
            seen.append((name, device))

    names = [f"p{i}" for i in range(7)]
    _run_parallel(names, ["cuda:0", "cuda:1"], work)
    assert sorted(n for n, _ in seen) == names
    assert {d for _, d in seen} == {"cuda:0", "cuda:1"}

    def boom(name: str, device: str) -> None:
        raise BadInput(f"{name}: broken")

    with pytest.raises(BadInput):
        _run_parallel(["x", "y"], ["cuda:0", "cuda:1"], boom)


def test_shape_figures_agree_with_the_executed_problem_files() -> None:
    """The syntax-tree arithmetic gives what Python gives, for every suite problem, full size and SMALL."""
    from kernelopt.problem import declared_family, import_problem, load_problem
    from kernelopt.suite import problem_names, small_shape

    for name in problem_names(SUITE):
        path = SUITE / name / "problem.py"
        assert declared_family(path), f"{name}: no family in the suite README"
        for overrides in ({}, small_shape(path)):
            module = import_problem(load_problem(path, overrides))
            expected = (float(module.BYTES), float(module.FLOPS), module.PRECISION)
            assert shape_figures(path, overrides) == expected, (name, overrides)


@pytest.mark.slow
def test_suite_asks_and_records_into_the_experience_database_given(tmp_path: Path) -> None:
    """`suite run --experience DB`: every problem's outcomes land in DB, with the family the README gives."""
    from kernelopt.experience.store import ExperienceStore

    db = tmp_path / "exp.db"
    run = [a for a in SMALL_RUN if a != "--no-experience"]
    res = _cli("suite", "run", str(SUITE), "--problems", "gelu", *run, "--experience", str(db), "-o",
               str(tmp_path / "out"), "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    with ExperienceStore(db, seed=False) as store:
        records = store.list()
    assert records and {r.kernel for r in records} == {"gelu"}
    assert {r.family for r in records} == {"elementwise, activation"}
    assert all(r.strategies for r in records)
    both = _cli("suite", "run", str(SUITE), "--problems", "gelu", *SMALL_RUN, "--experience", str(db),
                "-o", str(tmp_path / "out2"))
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1 and "--no-experience" in both.stderr
