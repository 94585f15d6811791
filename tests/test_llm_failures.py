"""Issue 20: model failures are visible; usage errors leave no run directory behind; the optimizer
options are one set shared by `optimize` and `suite run`.

A provider that exits non-zero, replies without code, returns a kernel the guard rejects, or
hangs used to end with exit 0 and "converged: no new proposals", nothing on stderr, nothing in
the run directory. The engine is a fake (every candidate 1 ms), so the loop, the LLM optimizer,
the command provider and the CLI are the real ones and each test takes seconds.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import FakeEngine

from kernelopt.cli import main
from kernelopt.models.harness import Candidate

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax"
SUITE = ROOT / "benchmarks" / "suite"
SMALL = ["--set", "ROWS=4", "--set", "COLS=32"]


class ConstantEngine(FakeEngine):
    """The Engine's surface the loop uses: every candidate correct at 1 ms."""

    count = 3

    def ms_of(self, cand: Candidate) -> float:
        return 1.0


@pytest.fixture(autouse=True)
def engine(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelopt.harness.evaluate as evaluate_mod

    monkeypatch.setattr(evaluate_mod, "Engine", ConstantEngine)


def _model(tmp_path: Path, body: str) -> str:
    script = tmp_path / "model.py"
    script.write_text(textwrap.dedent(body))
    return f"{sys.executable} {script}"


def _optimize(run: Path, *extra: str) -> Any:
    return CliRunner().invoke(main, ["optimize", str(SOFTMAX / "problem.py"), "--kernel", str(SOFTMAX / "kernel.py"),
                                     *SMALL, "-o", str(run), "--rounds", "2", "--beam", "1", "--proposals", "2",
                                     "--no-profile", "--no-experience", *extra])


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]


GUARDED = '''
print("CHANGE: run a shell")
print("```python")
print("import subprocess\\nclass ModelNew:\\n    def forward(self, x):\\n        subprocess.run(['ls'])\\n        return x")
print("```")
'''


@pytest.mark.parametrize("body, reason, words", [
    ("import sys\nsys.stdin.read()\nsys.stderr.write('quota exceeded')\nsys.exit(1)\n", "provider_error",
     "exited with code 1: quota exceeded"),
    ("import sys\nsys.stdin.read()\nprint('I would rather not write code today.')\n", "no_code", ""),
    ("import sys\nsys.stdin.read()\n" + GUARDED, "guard", ""),
])
def test_a_model_that_gives_nothing_usable_says_so(tmp_path: Path, body: str, reason: str, words: str) -> None:
    run = tmp_path / "run"
    res = _optimize(run, "--optimizer", "llm", "--provider", "command", "--llm-command", _model(tmp_path, body),
                    "--json")
    assert res.exit_code == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["stop_reason"].startswith("the model produced nothing usable: ")
    assert reason in summary["stop_reason"] and words in summary["stop_reason"]
    rejected = [e for e in _events(run) if e["type"] == "rejected"]
    assert rejected and {e["reason"] for e in rejected} == {reason}
    assert all(e["round"] == 1 and e["parent"] == "v0" and e["detail"] for e in rejected)
    assert "nothing usable" in res.stderr  # on stderr, though it is not a terminal
    report = (run / "final_report.md").read_text()
    assert "Model replies that gave no proposal" in report and f"| {reason} |" in report


def test_llm_timeout_and_retries_bound_a_hung_command(tmp_path: Path) -> None:
    hang = _model(tmp_path, "import sys, time\nsys.stdin.read()\ntime.sleep(60)\n")
    started = time.monotonic()
    res = _optimize(tmp_path / "run", "--optimizer", "llm", "--provider", "command", "--llm-command", hang,
                    "--llm-timeout", "1", "--llm-retries", "0", "--proposals", "1", "--json")
    assert res.exit_code == 0, res.stderr
    assert time.monotonic() - started < 30  # was 4 x 120 s per call
    assert "no reply within 1 s" in json.loads(res.stdout)["stop_reason"]
    options = json.loads((tmp_path / "run" / "run.json").read_text())["optimizer_options"]
    assert options["timeout_s"] == 1 and options["retries"] == 0


@pytest.mark.parametrize("extra, needle", [
    (["--optimizer", "llm"], "needs --provider"),
    (["--optimizer", "nosuch"], "unknown optimizer"),
    (["--optimizer", "llm", "--provider", "nosuch"], "unknown LLM provider"),
    (["--optimizer", "llm", "--provider", "openai", "--llm-command", "x"], "does not take --llm-command"),
    (["--optimizer", "llm", "--provider", "command", "--llm-command", "no-such-llm-tool-xyz"], "no such program"),
    (["--provider", "command"], "--optimizer strategies: does not use --provider"),  # the default optimizer
    (["--optimizer", "agent", "--model", "m"], "--optimizer agent: does not use --model"),
    (["--llm-timeout", "5"], "does not use --llm-timeout"),
])
def test_usage_errors_leave_no_run_directory(tmp_path: Path, extra: list[str], needle: str) -> None:
    run = tmp_path / "run"
    res = _optimize(run, *extra)
    assert res.exit_code == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not run.exists()


def test_a_dead_end_directory_is_started_again_in_place(tmp_path: Path) -> None:
    """A directory left by an older kernelopt (run.json and a lone run_started) is not a dead end."""
    from run_fixtures import config

    from kernelopt.rundir import RunDir

    run = tmp_path / "run"
    RunDir.create(run, config()).close()
    res = _optimize(run, "--json")
    assert res.exit_code == 0, res.stderr
    assert [e["type"] for e in _events(run)].count("run_started") == 1
    assert json.loads((run / "run.json").read_text())["problem"] == str((SOFTMAX / "problem.py").resolve())


def test_suite_run_takes_the_same_optimizer_options(tmp_path: Path) -> None:
    out = tmp_path / "out"
    model = _model(tmp_path, "import sys\nsys.stdin.read()\nsys.exit(3)\n")
    res = CliRunner().invoke(main, ["suite", "run", str(SUITE), "--problems", "gelu", "--small", "-o", str(out),
                                    "--optimizer", "llm", "--provider", "command", "--llm-command", model,
                                    "--llm-retries", "0", "--rounds", "1", "--beam", "1", "--proposals", "1",
                                    "--no-profile", "--no-experience", "--baselines", "none", "--json"])
    assert res.exit_code == 0, res.stderr
    run = out / "runs" / "gelu"
    options = json.loads((run / "run.json").read_text())["optimizer_options"]
    assert options["provider"] == "command" and options["llm_command"] == model and options["retries"] == 0
    assert any(e["type"] == "rejected" for e in _events(run))
    assert "[1/1] gelu" in res.stderr  # the per-problem line, though stderr is not a terminal
    # ... and the same refusals, before OUT exists
    bad = CliRunner().invoke(main, ["suite", "run", str(SUITE), "--problems", "gelu", "--small", "-o",
                                    str(tmp_path / "bad"), "--provider", "command"])
    assert bad.exit_code == 2 and "does not use --provider" in bad.stderr and not (tmp_path / "bad").exists()


def test_suite_run_refuses_an_optimize_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert _optimize(run).exit_code == 0
    res = CliRunner().invoke(main, ["suite", "run", str(SUITE), "--problems", "gelu", "--small", "-o", str(run)])
    assert res.exit_code == 2 and "holds an optimize run" in res.stderr


def test_a_full_size_problem_on_the_cpu_is_announced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: matvec at 8192 x 8192 ran silently for 317 s in the interpreter. One line on
    stderr before it starts, with the way out (--set, or the problem's SMALL shape)."""
    import kernelopt.harness.evaluate as evaluate_mod

    monkeypatch.setattr(evaluate_mod, "visible_devices", lambda: ["cpu"])
    gelu = SUITE / "gelu"
    res = CliRunner().invoke(main, ["optimize", str(gelu / "problem.py"), "--kernel", str(gelu / "kernel.py"),
                                    "-o", str(tmp_path / "full"), "--rounds", "1", "--no-profile",
                                    "--no-experience", "--json"])
    assert res.exit_code == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if "no GPU" in line]
    assert len(notes) == 1 and "ROWS=32768" in notes[0] and "--set ROWS=3 --set COLS=300" in notes[0]
    json.loads(res.stdout)  # the note is not on stdout
    res = _optimize(tmp_path / "small")  # softmax at ROWS=4, COLS=32
    assert res.exit_code == 0 and "no GPU" not in res.stderr


def test_a_cpu_run_leaves_no_empty_profile_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: SKILL.md's CPU path found an empty v0/profile/ suggesting a profile that is not there."""
    import kernelopt.optimize.loop as loop_mod

    tried: list[str] = []
    real = loop_mod.profile_version
    monkeypatch.setattr(loop_mod, "profile_version", lambda *a, **k: tried.append(str(a[2])) or real(*a, **k))
    run = tmp_path / "run"
    res = CliRunner().invoke(main, ["optimize", str(SOFTMAX / "problem.py"), "--kernel", str(SOFTMAX / "kernel.py"),
                                    *SMALL, "-o", str(run), "--optimizer", "agent", "--no-experience"])
    assert res.exit_code == 0, res.stderr
    assert tried  # profiling was attempted (and, on the CPU, gave nothing)
    assert not (run / "v0" / "profile").exists() and not (run / "v0" / "diagnosis.json").exists()
