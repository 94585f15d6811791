"""The optimize run's report: final_report.md, benchmark.md, convergence.png, best_kernel.py, `kernelopt report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from run_fixtures import SOURCE, build_run, config, evaluation, stats

from kernelopt.cli import main
from kernelopt.rundir import RunDir
from kernelopt.report import build_report, render_run, summarize_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_render_writes_the_four_files(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    paths = render_run(tmp_path / "run")
    names = sorted(p.name for p in paths)
    assert names == ["benchmark.md", "best_kernel.py", "convergence.png", "final_report.md"]
    assert all(p.is_file() and p.parent == tmp_path / "run" for p in paths)
    assert (tmp_path / "run" / "best_kernel.py").read_text() == SOURCE.format(block=1024)  # v3's kernel
    png = (tmp_path / "run" / "convergence.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000


def test_final_report_holds_lineage_versions_strategies_and_diagnoses(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    render_run(tmp_path / "run")
    text = (tmp_path / "run" / "final_report.md").read_text()
    lineage = text.split("## Lineage of the best version")[1].split("## Every version")[0]
    rows = [line for line in lineage.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split("|")[2].strip() for row in rows] == ["v0", "v1", "v3"]
    assert "BLOCK_SIZE -> 256" in rows[1] and "BLOCK_SIZE -> 1024" in rows[2]
    assert "4.000x" in text  # 8 ms / 2 ms
    assert "Versus eager: 3.000x" in text and "Versus compile: 2.500x" in text
    assert "interpreter wall time" in text
    assert "| v4 | v1 | 2 | BLOCK_SIZE -> 8192 | tune-block-size | compile: out of resources" in text
    assert "| v5 | v1 | 2 | BLOCK_SIZE -> 512 | evict-first | incorrect" in text
    assert "| tune-block-size |  | 3 | 2 | 2 | 2.000x |" in text  # no transform
    assert "**launch**" in text and "**dram**" in text
    assert "Status: finished (rounds)" in text


def test_summary_figures(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    s = summarize_run(run)
    assert s.best is not None and s.best.id == "v3" and s.start_ms == 8.0 and s.best_ms == 2.0
    assert s.speedup == pytest.approx(4.0)
    assert s.speedup_low is not None and s.speedup_high is not None
    assert s.speedup_low < 4.0 < s.speedup_high
    assert s.interpreter and s.time_label == "interpreter wall time"
    assert [p.best for p in s.convergence] == ["v0", "v1", "v3"]
    assert [p.best_ms for p in s.convergence] == [8.0, 4.0, 2.0]
    shrink = next(st for st in s.strategies if st.strategy == "shrink-tile")
    assert (shrink.tried, shrink.improved, shrink.best_gain) == (1, 0, pytest.approx(0.8))


def test_gpu_run_is_not_labelled_interpreter(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", config(device="NVIDIA H100 80GB HBM3"))
    v0 = run.write_version(SOURCE.format(block=64), round=0)
    run.record_evaluated("v0", evaluation(Path(v0.path), 1.0, interpreter=False))
    s = summarize_run(run)
    assert not s.interpreter and s.time_label == "GPU time"
    render_run(run)
    assert "interpreter" not in (tmp_path / "run" / "final_report.md").read_text()


def test_retimed_figures_are_preferred_for_the_speedup(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", finish=False)
    run.record_retimed({"v3": stats(2.5), "v1": stats(4.2), "v0": stats(7.5)})
    run.record_run_finished("converged", "v3")
    s = summarize_run(run)
    assert s.retimed and s.best_ms == 2.5 and s.start_ms == 7.5 and s.speedup == pytest.approx(3.0)
    render_run(run)
    assert "final interleaved re-timing" in (tmp_path / "run" / "final_report.md").read_text()
    bench = (tmp_path / "run" / "benchmark.md").read_text()
    assert "| best | v3 | 2.5000 |" in bench and "| start | v0 | 7.5000 |" in bench


def test_report_of_a_killed_run(tmp_path: Path) -> None:
    build_run(tmp_path / "run", finish=False).close()
    events = tmp_path / "run" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"evaluated","version":"v3"' in line)
    events.write_bytes(b"".join(lines[:cut]) + lines[cut][:40])  # killed while logging v3's evaluation
    render_run(tmp_path / "run")
    text = (tmp_path / "run" / "final_report.md").read_text()
    assert "**not finished**" in text
    assert "| v3 | v1 | 2 | BLOCK_SIZE -> 1024 | tune-block-size | not evaluated |" in text
    assert (tmp_path / "run" / "best_kernel.py").read_text() == SOURCE.format(block=256)  # v1, the best so far
    assert (tmp_path / "run" / "convergence.png").read_bytes().startswith(PNG_MAGIC)


def test_report_with_no_correct_version(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", config())
    v0 = run.write_version(SOURCE.format(block=64), round=0)
    run.record_evaluated("v0", evaluation(Path(v0.path), None, failure="compile"))
    names = sorted(p.name for p in render_run(run))
    assert names == ["benchmark.md", "convergence.png", "final_report.md"]
    assert "No correct version has been timed (start: compile" in (tmp_path / "run" / "final_report.md").read_text()
    assert (tmp_path / "run" / "convergence.png").read_bytes().startswith(PNG_MAGIC)


def test_cli_report_prints_paths_and_json(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    result = CliRunner().invoke(main, ["report", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert sorted(Path(p).name for p in result.output.split()) == [
        "benchmark.md", "best_kernel.py", "convergence.png", "final_report.md"]
    result = CliRunner().invoke(main, ["report", str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["best"]["id"] == "v3" and [r["id"] for r in data["lineage"]] == ["v0", "v1", "v3"]
    assert len(data["files"]) == 4


def test_cli_report_on_a_non_run_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "not a run directory" in lines[0] and "Traceback" not in result.output


def test_report_works_while_the_run_is_locked(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", finish=False)  # still holds the writer's lock
    summary = build_report(tmp_path / "run")
    assert summary.best is not None and summary.best.id == "v3" and not summary.finished
    run.record_run_finished("budget", "v3")  # the writer is unaffected by the reader


def test_log_axes_label_only_1_2_5_steps_in_plain_numbers() -> None:
    """Speedup and convergence plots: readable labels (every minor tick labelled piled them up near 1x)."""
    from matplotlib.figure import Figure

    from kernelopt.report.plots import plain_log_axis

    fig = Figure()
    ax = fig.subplots()
    ax.set_yscale("log")
    ax.set_ylim(0.03, 4.0)
    plain_log_axis(ax.yaxis)
    fig.canvas.draw()
    major = [t.get_text() for t in ax.get_yticklabels() if 0.03 <= t.get_position()[1] <= 4.0]
    assert major == ["0.05", "0.1", "0.2", "0.5", "1", "2"]
    assert not any(t.get_text() for t in ax.yaxis.get_minorticklabels())


def test_headline_and_lineage_say_where_their_times_come_from(tmp_path: Path) -> None:
    """Issue 20: the headline (re-timed, 1.17x) and the lineage (search timings, 0.978x) disagreed
    without saying why; stdout and the report counted rounds differently (6 against 7)."""
    from kernelopt.cli.optimize import render_summary

    run = build_run(tmp_path / "run", finish=False)
    run.record_retimed({"v3": stats(2.5), "v1": stats(4.2), "v0": stats(7.5)})
    run.record_run_finished("converged", "v3")
    summary = build_report(run)
    report = (tmp_path / "run" / "final_report.md").read_text()
    assert "median ms (search)" in report and "the speedup above comes from the final interleaved re-timing" in report
    assert "Search rounds finished: 2 " in report
    text = render_summary(summary)
    assert "after 2 search round(s)" in text and "re-timed A-B-B-A" in text and "search timings" in text


def test_an_interpreter_gain_inside_the_spread_is_not_called_a_speedup(tmp_path: Path) -> None:
    from kernelopt.cli.optimize import render_summary

    run = build_run(tmp_path / "run", finish=False)
    run.record_retimed({"v3": stats(7.4, iqr=1.0), "v0": stats(7.5, iqr=1.0)})  # 1.01x, spread 0.89-1.15x
    run.record_run_finished("rounds", "v3")
    summary = build_report(run)
    assert summary.within_spread
    assert "No measurable difference" in (tmp_path / "run" / "final_report.md").read_text()
    assert "no measurable difference" in render_summary(summary)
    # A gain well outside the spread is still a speedup.
    run2 = build_run(tmp_path / "run2", finish=False)
    run2.record_retimed({"v3": stats(2.5), "v0": stats(7.5)})
    run2.record_run_finished("rounds", "v3")
    assert not build_report(run2).within_spread
