"""Agent mode on the CPU (Triton interpreter, softmax 16x100): `optimize --optimizer agent`
leaves an open run with v0 measured; `kernelopt iterate` appends versions an agent wrote,
records them (correct or not) in the run and the experience store, and says what to try next."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax"
EXP2 = ROOT / "tests" / "fixtures" / "agent" / "kernel_exp2.py"
WRONG = SOFTMAX / "kernel_wrong.py"


def _cli(*args: str, db: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if db is not None:
        env["KERNELOPT_DB"] = str(db)
    return subprocess.run([sys.executable, "-m", "kernelopt", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(ROOT))


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One agent-mode run with v0 evaluated, started through the CLI; tests work on copies."""
    base = tmp_path_factory.mktemp("agent")
    run = base / "run"
    proc = _cli("optimize", SOFTMAX / "problem.py", "--kernel", SOFTMAX / "kernel.py", "--set", "ROWS=16",
                "--set", "COLS=100", "--optimizer", "agent", "--baselines", "none", "-o", run, db=base / "exp.db")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run


@pytest.fixture()
def run(agent_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(agent_run, copy)
    return copy


def _store(db: Path):  # noqa: ANN202 - the store type is imported lazily, as in the library
    from kernelopt.experience.store import ExperienceStore

    return ExperienceStore(db)


def test_optimize_agent_leaves_an_open_run_with_v0_evaluated(agent_run: Path) -> None:
    from kernelopt.optimize.base import get_optimizer

    events = _events(agent_run)
    kinds = [e["type"] for e in events]
    assert "run_finished" not in kinds
    assert [e["version"] for e in events if e["type"] == "evaluated"] == ["v0"]
    assert [e["beam"] for e in events if e["type"] == "promoted"][-1] == ["v0"]
    assert json.loads((agent_run / "run.json").read_text())["optimizer"] == "agent"
    opt = get_optimizer("agent")
    assert opt.name == "agent" and opt.interactive is True


def test_next_steps_names_a_real_iterate_command(agent_run: Path) -> None:
    from kernelopt.optimize.agent import next_steps
    from test_skill_commands import _flags, _resolve

    text = next_steps(agent_run)
    assert "best       v0:" in text and "interpreter wall time" in text
    assert "next: try " in text  # past outcomes of similar kernels, without a GPU diagnosis
    commands = [line.strip() for line in text.splitlines() if line.strip().startswith("kernelopt iterate")]
    assert commands and str(agent_run) in commands[0]
    for command in commands:
        words = shlex.split(command)
        cmd, rest = _resolve(words)
        assert cmd.name == "iterate"
        assert {w for w in rest if w.startswith("--")} <= _flags(cmd), command


def test_iterate_appends_a_correct_version_and_records_it(run: Path, tmp_path: Path) -> None:
    db = tmp_path / "exp.db"
    proc = _cli("iterate", run, "--kernel", EXP2, "--strategy", "single-pass-row",
                "--hypothesis", "exp2 with log2(e) folded in: one multiply fewer per element", db=db)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith(f"{'v1':<11}correct")
    events = _events(run)
    proposed = [e for e in events if e["type"] == "proposed" and e["version"] == "v1"]
    assert proposed and proposed[0]["parent"] == "v0"
    assert proposed[0]["proposal"]["optimizer"] == "agent"
    assert proposed[0]["proposal"]["strategy"] == "single-pass-row"
    assert (run / "v1" / "kernel.py").read_text() == EXP2.read_text()
    # Its profile's time is recorded, as the loop records its own (profile-cost estimates read it).
    started = next(i for i, e in enumerate(events) if e["type"] == "round_started" and e.get("round") == 1)
    assert any(e["type"] == "spent" and e["phase"] == "profiling" for e in events[started:])
    assert "run_finished" not in [e["type"] for e in events]  # still open for the next version
    # The time printed is the one measured, and the speedup is v0's median over it.
    v0 = json.loads((run / "v0" / "evaluation.json").read_text())["timing"]["median_ms"]
    v1 = json.loads((run / "v1" / "evaluation.json").read_text())["timing"]["median_ms"]
    assert f"time       {v1:.4g} ms" in out
    assert f"{v0 / v1:.2f}x vs v0" in out
    # Recorded in the experience store, with the strategy and hypothesis.
    recorded = [e for e in events if e["type"] == "experience_recorded" and e["version"] == "v1"]
    assert recorded and f"recorded   experience {recorded[0]['record']}" in out
    record = _store(db).get(recorded[0]["record"])
    assert record.strategies == ["single-pass-row"] and record.correct and record.kernel == "softmax"
    # The next recommendations: real Triton strategies, "next: try ID: title" lines.
    from kernelopt.strategies import load_strategies

    packs = load_strategies().strategies
    tries = [line for line in out.splitlines() if line.startswith("next: try ")]
    assert tries
    for line in tries:
        sid, _, title = line[len("next: try "):].partition(": ")
        assert sid in packs and packs[sid].backend in ("triton", "any"), line
        assert title.startswith(packs[sid].title)
    assert "| v1 |" in (run / "final_report.md").read_text()


def test_iterate_with_a_wrong_kernel_exits_1_and_is_recorded_as_incorrect(run: Path, tmp_path: Path) -> None:
    db = tmp_path / "exp.db"
    proc = _cli("iterate", run, "--kernel", WRONG, "--hypothesis", "normalise without the last column", "--json", db=db)
    assert proc.returncode == 1, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert set(doc) >= {"run_dir", "version", "parent", "round", "strategy", "hypothesis", "verdict", "message",
                        "correct", "outcome", "timing", "time_label", "speedup_vs_parent", "speedup_vs_v0", "best",
                        "diagnosis", "profiled", "next_parent", "next", "avoid", "experience_record", "notes", "report"}
    assert doc["version"] == "v1" and doc["parent"] == "v0" and doc["round"] == 1
    assert doc["correct"] is False and doc["verdict"] == "incorrect" and doc["outcome"] == "incorrect"
    assert doc["timing"] is None and doc["speedup_vs_v0"] is None
    assert "elements off" in doc["message"]
    assert doc["best"] == "v0" and doc["next_parent"] == "v0"
    assert all({"strategy", "title", "reason", "source", "score", "tried"} <= set(n) for n in doc["next"])
    evaluated = [e for e in _events(run) if e["type"] == "evaluated" and e["version"] == "v1"]
    assert evaluated and evaluated[0]["evaluation"]["verification"]["passed"] is False
    record = _store(db).get(doc["experience_record"])
    assert record.outcome == "incorrect" and record.correct is False
    assert [e["beam"] for e in _events(run) if e["type"] == "promoted"][-1] == ["v0"]


def test_bad_input_exits_2_with_one_line(run: Path, tmp_path: Path) -> None:
    from kernelopt.rundir import RunDir

    cases = [
        (tmp_path, ["--kernel", EXP2, "--hypothesis", "x"], "not a run directory"),
        (run, ["--kernel", EXP2], "--hypothesis"),
        (run, ["--kernel", SOFTMAX / "problem.py", "--hypothesis", "x"], "not a candidate"),
        (run, ["--kernel", tmp_path / "missing.py", "--hypothesis", "x"], "no such"),
        (run, ["--kernel", SOFTMAX / "kernel.py", "--hypothesis", "x"], "the same kernel as v0"),
        (run, ["--kernel", EXP2, "--hypothesis", "x", "--strategy", "no-such-strategy"], "no such strategy"),
        (run, ["--kernel", EXP2, "--hypothesis", "x", "--parent", "v7"], "no such version"),
    ]
    for where, args, expected in cases:
        proc = _cli("iterate", where, *args, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and expected in proc.stderr, (args, proc.stderr)
    # Nothing was appended by any of them.
    assert [e["type"] for e in _events(run)].count("proposed") == 1
    # A finished run takes no more versions.
    with RunDir.open(run) as rd:
        rd.record_run_finished("finished by the agent", "v0")
    proc = _cli("iterate", run, "--kernel", EXP2, "--hypothesis", "x", "--json", timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "finished" in proc.stderr
    assert json.loads(proc.stdout)["error"]["exit_code"] == 2


def test_next_steps_for_a_diagnosis_ranks_untried_pack_strategies_first() -> None:
    from kernelopt.diagnose.classifier import BottleneckClassifier
    from kernelopt.models.harness import Candidate, Evaluation, Problem, TimingStats
    from kernelopt.models.optimize import Proposal, RunState, Version
    from kernelopt.optimize.agent import next_steps_for
    from kernelopt.profile import import_metrics
    from kernelopt.recommend import situation_from
    from kernelopt.strategies import load_strategies

    metrics = import_metrics(ROOT / "tests" / "fixtures" / "profile" / "softmax" / "raw.csv")
    diagnosis = BottleneckClassifier().classify(metrics)

    def ev(ms: float) -> Evaluation:
        stats = TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, cv=0.0, count=3,
                            warmup_count=1, l2_flush_bytes=0)
        return Evaluation(problem=Problem(path="p.py", name="softmax"),
                          candidate=Candidate(path="k.py", name="k", backend="triton", entry="ModelNew", sha256="0"),
                          timing=stats)

    v0 = Version(id="v0", round=0, path="v0/kernel.py", evaluation=ev(2.0), metrics=metrics, diagnosis=diagnosis)
    state = RunState(versions={"v0": v0}, beam=["v0"])
    situation = situation_from(kernel="softmax", backend="triton", diagnosis=diagnosis)
    steps, _, notes = next_steps_for(state, v0, situation, store=None)
    packs = load_strategies().strategies
    assert steps and not notes
    assert all(packs[s.strategy].backend in ("triton", "any") and s.title == packs[s.strategy].title for s in steps)
    first = steps[0].strategy
    state.versions["v1"] = Version(id="v1", round=1, path="v1/kernel.py", parent="v0", evaluation=ev(1.0),
                                   proposal=Proposal(source="", parent="v0", strategy=first, change="c"))
    shown, _, _ = next_steps_for(state, v0, situation, store=None)
    assert first not in [s.strategy for s in shown]  # tried: the untried ones come first
    every, _, _ = next_steps_for(state, v0, situation, store=None, limit=None)
    assert every[-1].strategy == first and every[-1].tried == ["v1: faster"]
    assert not any(s.tried for s in every[:-1])


@pytest.mark.slow
def test_finish_retimes_and_closes_the_run(run: Path, tmp_path: Path) -> None:
    from kernelopt.optimize.agent import finish, iterate

    result = iterate(run, EXP2, hypothesis="exp2 with log2(e) folded in", experience=False)
    assert result.correct and result.version == "v1"
    state = finish(run)
    assert state.finished and state.stop_reason == "finished by the agent"
    assert set(state.retimed) == {"v0", "v1"} and state.best in ("v0", "v1")
    proc = _cli("iterate", run, "--finish", timeout=60)
    assert proc.returncode == 2 and "finished" in proc.stderr


def test_docs_agent_commands_and_options_exist() -> None:
    import re

    from test_skill_commands import _flags, _resolve

    text = (ROOT / "docs" / "agent.md").read_text()
    lines = [ln.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) for ln in block.splitlines()
             if ln.strip().startswith("kernelopt ")]
    assert len(lines) >= 3
    for line in lines:
        cmd, rest = _resolve(shlex.split(line))
        assert {w for w in rest if w.startswith("--")} <= _flags(cmd), line
    iterate_flags = _flags(_resolve(["kernelopt", "iterate"])[0])
    table = text.split("## `kernelopt iterate RUNDIR", 1)[1].split("What it does", 1)[0]
    documented = set(re.findall(r"`(--[a-z-]+)", table))
    assert documented and documented <= iterate_flags
    assert {f for f in iterate_flags if f.startswith("--")} <= documented


def test_iterate_and_finish_judge_with_the_runs_trials_and_timeout(run: Path, tmp_path: Path, monkeypatch) -> None:
    """run.json says 2 trials, 42 s: iterate and --finish use them unless told otherwise (they had
    their own defaults, 3 and 300 s, whatever the run was started with)."""
    from kernelopt.harness import evaluate as evaluate_mod
    from kernelopt.optimize.agent import finish, iterate

    cfg = json.loads((run / "run.json").read_text())
    cfg.update(trials=2, timeout_s=42.0)
    (run / "run.json").write_text(json.dumps(cfg))
    asked: list[dict] = []

    class Stop(Exception):
        pass

    def engine(problem, **kwargs):  # noqa: ANN001, ANN202 - stands in for Engine: records how it was asked
        asked.append(kwargs)
        raise Stop

    monkeypatch.setattr(evaluate_mod, "Engine", engine)
    with pytest.raises(Stop):
        iterate(run, EXP2, hypothesis="exp2 with log2(e) folded in", experience=False)
    with pytest.raises(Stop):
        finish(run)
    other = tmp_path / "kernel_other.py"
    other.write_text(EXP2.read_text() + "\nUNUSED = 1\n")  # not the kernel v1 already holds
    with pytest.raises(Stop):
        iterate(run, other, hypothesis="the same, told 5 trials", experience=False, trials=5, timeout_s=9.0)
    assert [(a["trials"], a["timeout_s"]) for a in asked] == [(2, 42.0), (2, 42.0), (5, 9.0)]


def test_iterate_records_into_and_asks_the_experience_database_given(tmp_path: Path, monkeypatch) -> None:
    """`iterate --experience DB`: the outcome lands in DB (not in $KERNELOPT_DB, not in the run's own),
    and the next steps come from DB's outcomes of similar kernels; without the flag, the run's own store."""
    from click.testing import CliRunner

    from conftest import FakeEngine
    from kernelopt.cli import main
    from kernelopt.harness import evaluate as evaluate_mod
    from kernelopt.models.experience import ExperienceRecord
    from kernelopt.optimize import loop as loop_mod

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: FakeEngine(problem))
    env_db, own_db, given_db = tmp_path / "env.db", tmp_path / "own.db", tmp_path / "given.db"
    monkeypatch.setenv("KERNELOPT_DB", str(env_db))
    run = tmp_path / "run"
    loop_mod.optimize(SOFTMAX / "problem.py", SOFTMAX / "kernel.py", run_dir=run, overrides={"ROWS": "16", "COLS": "100"},
                      optimizer="agent", baselines=(), profile=False, experience=str(own_db))
    with _store(given_db) as store:  # what DB remembers: a strategy that worked on softmax kernels elsewhere
        for i in range(3):
            store.add(ExperienceRecord(kernel="softmax", backend="triton", family="reduction", correct=True,
                                       outcome="success", speedup=2.0, time_before_ms=2.0, time_after_ms=1.0,
                                       strategies=["zz-remembered-move"], source=f"run:other:2026-01-01:v{i + 1}"))

    def iterate(kernel: Path, *flags: str) -> dict:
        res = CliRunner().invoke(main, ["iterate", str(run), "--kernel", str(kernel), "--hypothesis", "exp2",
                                        "--no-profile", "--json", *flags])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    doc = iterate(EXP2, "--experience", str(given_db))
    with _store(given_db) as store:
        assert store.get(doc["experience_record"]).kernel == "softmax"
    assert "zz-remembered-move" in [n["strategy"] for n in doc["next"]]
    assert not env_db.exists() or not [r for r in _store(env_db).list() if (r.source or "").startswith("run:")]
    with _store(own_db) as store:
        assert not [r for r in store.list() if (r.source or "").startswith("run:")]

    other = tmp_path / "kernel_other.py"
    other.write_text(EXP2.read_text() + "\nUNUSED = 1\n")
    doc = iterate(other)  # no flag: the store the run was started with
    with _store(own_db) as store:
        assert store.get(doc["experience_record"]).kernel == "softmax"
    assert "zz-remembered-move" not in [n["strategy"] for n in doc["next"]]
