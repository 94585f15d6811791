"""Issue 20: a resumed run keeps every option it started with; options given again are applied
(more rounds, a larger budget) or refused in one line; a finished run is left alone; a run
killed in the middle of a round finishes that round; long runs print a line per round.

The engine is the fake of test_resume_determinism (times a function of the knobs), so the
loop, the run directory and the knob optimizer are the real ones and each test takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_resume_determinism import MATVEC, FakeEngine, Killed

from kernelopt.cli import main
from kernelopt.errors import BadInput
from kernelopt.optimize import loop as loop_mod

COMMON: dict[str, Any] = dict(problem_path=MATVEC / "problem.py", kernel_path=MATVEC / "kernel.py",
                              overrides={"M": "64", "K": "256"}, optimizer="knobs", rounds=3, beam=1,
                              proposals_per_member=2, seed=3)


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture()
def engines(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Installs the fake engine; records the keyword arguments of every Engine made, and kills
    the run after `kill_after` results when set."""
    import kernelopt.harness.evaluate as evaluate_mod

    seen: dict[str, Any] = {"made": [], "kill_after": None}

    def engine(problem: Any, **kw: Any) -> FakeEngine:
        seen["made"].append(kw)
        e = FakeEngine(problem, **kw)
        e.kill_after = seen["kill_after"]
        FakeEngine.recorded = 0
        return e

    monkeypatch.setattr(evaluate_mod, "Engine", engine)
    return seen


@pytest.fixture()
def stores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """Every ExperienceStore the run opens (a run with --no-experience must open none)."""
    import kernelopt.experience.store as store_mod

    opened: list[Any] = []
    real = store_mod.ExperienceStore

    def make(*args: Any, **kw: Any) -> Any:
        store = real(tmp_path / "exp.db")
        opened.append(store)
        return store

    monkeypatch.setattr(store_mod, "ExperienceStore", make)
    return opened


def _killed_run(path: Path, engines: dict[str, Any], kill_after: int, **options: Any) -> None:
    engines["kill_after"] = kill_after
    with pytest.raises(Killed):
        loop_mod.optimize(run_dir=path, **{**COMMON, **options})
    engines["kill_after"] = None


def test_run_json_records_every_option_and_resume_uses_them(tmp_path: Path, engines: dict[str, Any],
                                                              stores: list[Any]) -> None:
    run = tmp_path / "run"
    _killed_run(run, engines, 2, trials=1, timeout_s=42.0, baselines=("eager",), profile=False, experience=False,
                isolate="candidate")
    saved = json.loads((run / "run.json").read_text())
    assert (saved["trials"], saved["timeout_s"], saved["baselines"], saved["profile"], saved["experience"],
            saved["isolate"]) == (1, 42.0, ["eager"], False, False, "candidate")
    loop_mod.resume(run)  # no options: the run's own
    # The run's engine in each process (the winner's checks at other shapes make their own).
    first, resumed = [kw for kw in engines["made"] if "executor" in kw]
    assert first["isolate"] == "candidate"  # not the knobs optimizer's default, worker
    for key in ("trials", "timeout_s", "baselines", "isolate"):
        assert resumed[key] == first[key], key
    assert resumed["trials"] == 1 and list(resumed["baselines"]) == ["eager"]
    assert stores == []  # --no-experience kept: nothing opened, nothing written
    assert not any(e["type"] in ("profiled", "experience_recorded") for e in _events(run))


def test_resume_applies_more_rounds_and_a_larger_budget(tmp_path: Path, engines: dict[str, Any]) -> None:
    run = tmp_path / "run"
    _killed_run(run, engines, 2, rounds=1, budget_evals=3, profile=False, experience=False)
    state = loop_mod.resume(run, rounds=3, budget_evals=6)
    assert state.evaluations_done == 6  # the old budget was 3; 3 rounds would take 7
    saved = json.loads((run / "run.json").read_text())
    assert (saved["rounds"], saved["budget_evals"]) == (3, 6)
    resumed = next(e for e in _events(run) if e["type"] == "resumed")
    assert resumed["changes"] == {"rounds": [1, 3], "budget_evals": [3, 6]}


def test_resume_refuses_other_changes_in_one_line_and_appends_nothing(tmp_path: Path,
                                                                       engines: dict[str, Any]) -> None:
    run = tmp_path / "run"
    _killed_run(run, engines, 2, trials=3, profile=False, experience=False)
    before = (run / "events.jsonl").read_bytes()
    with pytest.raises(BadInput, match=r"cannot change --trials \(this run: 3\).*-o") as err:
        loop_mod.resume(run, trials=5, rounds=3)
    assert "\n" not in str(err.value)
    assert (run / "events.jsonl").read_bytes() == before
    loop_mod.resume(run, trials=3, profile=False)  # given again with the run's own values: fine


def test_resume_cli_refuses_out_and_changed_options_and_applies_rounds(tmp_path: Path,
                                                                        engines: dict[str, Any]) -> None:
    run = tmp_path / "run"
    _killed_run(run, engines, 2, rounds=1, profile=False, experience=False)
    runner = CliRunner()
    for extra, needle in ((["-o", str(tmp_path / "other")], "-o: --resume continues"),
                          (["--trials", "5"], "--trials (this run: 3)"),
                          (["--seed", "7"], "--seed (this run: 3)"),
                          (["--isolate", "sandbox"], "--isolate (this run: None)"),
                          (["--optimizer", "llm", "--provider", "command"], "--optimizer"),
                          (["--set", "M=128"], "--set")):
        res = runner.invoke(main, ["optimize", "--resume", str(run), *extra])
        assert res.exit_code == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "other").exists()
    res = runner.invoke(main, ["optimize", "--resume", str(run), "--rounds", "2", "--no-profile", "--json"])
    assert res.exit_code == 0, res.stderr
    assert json.loads((run / "run.json").read_text())["rounds"] == 2
    assert json.loads(res.stdout)["rounds_finished"] == 3  # round 0 (the start) and rounds 1-2


def test_optimize_cli_passes_isolate_to_the_engine_and_run_json(tmp_path: Path, engines: dict[str, Any]) -> None:
    run = tmp_path / "run"
    res = CliRunner().invoke(main, ["optimize", str(MATVEC / "problem.py"), "--kernel", str(MATVEC / "kernel.py"),
                                    "--set", "M=64", "--set", "K=256", "--rounds", "1", "--no-profile",
                                    "--no-experience", "--isolate", "candidate", "-o", str(run)])
    assert res.exit_code == 0, res.stderr
    assert json.loads((run / "run.json").read_text())["isolate"] == "candidate"
    assert [kw["isolate"] for kw in engines["made"] if "executor" in kw] == ["candidate"]
    res = CliRunner().invoke(main, ["optimize", str(MATVEC / "problem.py"), "--kernel", str(MATVEC / "kernel.py"),
                                    "--isolate", "chroot", "-o", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "--isolate" in res.stderr


def test_resume_of_a_finished_run_changes_nothing(tmp_path: Path, engines: dict[str, Any]) -> None:
    run = tmp_path / "run"
    loop_mod.optimize(run_dir=run, **COMMON, profile=False, experience=False)
    before = (run / "events.jsonl").read_bytes()
    res = CliRunner().invoke(main, ["optimize", "--resume", str(run)])
    assert res.exit_code == 0 and "already finished" in res.stderr, res.stderr
    assert (run / "events.jsonl").read_bytes() == before  # no `resumed` after `run_finished`
    res = CliRunner().invoke(main, ["optimize", "--resume", str(run), "--rounds", "9"])
    assert res.exit_code == 2 and "already finished" in res.stderr
    assert (run / "events.jsonl").read_bytes() == before


def test_a_round_killed_midway_is_finished_on_resume_even_when_the_budget_is_spent(
        tmp_path: Path, engines: dict[str, Any]) -> None:
    """v0 + 2 proposals in round 1 + 2 in round 2 = the budget of 5; the kill lands after the
    first proposal of round 2 is evaluated. The resumed run evaluates the second, and round 2
    is recorded as finished, as in the uninterrupted run."""
    options = dict(budget_evals=5, profile=False, experience=False)
    loop_mod.optimize(run_dir=tmp_path / "a", **{**COMMON, **options})
    _killed_run(tmp_path / "b", engines, 4, **options)
    loop_mod.resume(tmp_path / "b")
    rounds = {run: [e["round"] for e in _events(tmp_path / run) if e["type"] == "round_finished"] for run in "ab"}
    assert rounds["a"] == [0, 1, 2]
    assert rounds["b"] == rounds["a"]


def test_a_line_per_round_reaches_the_milestone_callback(tmp_path: Path, engines: dict[str, Any]) -> None:
    lines: list[str] = []
    details: list[str] = []
    loop_mod.optimize(run_dir=tmp_path / "run", **COMMON, profile=False, experience=False,
                      progress=details.append, milestone=lines.append)
    rounds = [line for line in lines if line.startswith("round ")]
    assert [line.split(":")[0] for line in rounds] == ["round 1/3", "round 2/3", "round 3/3"]
    assert all("evaluations, best v" in line and "x v0" in line for line in rounds)
    assert not any(line.startswith("round ") and "/" in line.split(":")[0] for line in details)


def test_cli_prints_round_lines_on_stderr_when_it_is_not_a_terminal(tmp_path: Path, engines: dict[str, Any]) -> None:
    res = CliRunner().invoke(main, ["optimize", str(MATVEC / "problem.py"), "--kernel", str(MATVEC / "kernel.py"),
                                    "--set", "M=64", "--set", "K=256", "-o", str(tmp_path / "run"), "--rounds", "2",
                                    "--beam", "1", "--proposals", "2", "--no-profile", "--no-experience", "--json"])
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert [line.split("] ", 1)[1].split(":")[0] for line in lines if "round " in line] == ["round 1/2", "round 2/2"]
    json.loads(res.stdout)  # stdout stays clean JSON


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(15, 143), (2, 130)])
def test_an_interrupted_run_names_its_directory_and_the_resume_command(tmp_path: Path, signum: int,
                                                                       code: int) -> None:
    """Issue 20: on Ctrl-C or SIGTERM, one line naming the run directory and the --resume command."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    softmax = MATVEC.parent / "softmax"
    proc = subprocess.Popen([sys.executable, "-m", "kernelopt", "optimize", str(softmax / "problem.py"), "--kernel",
                             str(softmax / "kernel.py"), "--set", "ROWS=4", "--set", "COLS=32", "-o", str(run),
                             "--no-experience", "--rounds", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TRITON_INTERPRET": "1"})
    deadline = time.monotonic() + 120
    while not (run / "events.jsonl").is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.Signals(signum))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last == f"kernelopt: interrupted; the run is in {run}; continue it with: kernelopt optimize --resume {run}"
    assert "Traceback" not in err
