"""Search throughput (issue #23): one-off costs stay out of the per-evaluation figure the
optimize loop sizes its rounds with, the budget covers the whole run, and the run says
where its time went."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
from conftest import MATVEC, FakeEngine

from kernelopt.harness.evaluate import Engine
from kernelopt.models.harness import Candidate, Evaluation
from kernelopt.optimize import loop as loop_mod
from kernelopt.problem import load_candidate, load_problem

FIX = Path(__file__).resolve().parent / "fixtures" / "harness"
AXPY = FIX / "problem_axpy.py"


def test_the_first_candidate_does_not_pay_the_runner_start() -> None:
    """The worker starts its first runner with itself: the first candidate's wall_s (which the
    loop averages to decide how many versions fit) is the candidate's own cost, as the later ones are."""
    problem = load_problem(AXPY, {"N": "300"})
    texts: list[tuple[int, str]] = []
    cand = load_candidate(FIX / "axpy_ok.py")
    with Engine(problem, timeout_s=60.0, progress=lambda e: texts.append((e.index, e.text))) as engine:
        assert engine.ready[0].setup_s > 0
        first, second = engine.evaluate([cand, cand])
    assert first.passed and second.passed
    assert not any("starting a runner" in text for _, text in texts), texts
    assert "runner_start" not in first.phases
    assert {"load", "verify", "time"} <= set(first.phases)
    assert sum(first.phases.values()) <= first.wall_s + 1e-6


# --------------------------------------------------------------------------- the loop's clock



class ClockEngine(FakeEngine):
    """The fake engine on a fake clock: starting takes `start_s` (of which `baselines_s` timing
    baselines), each evaluation `eval_s` (1.5 s of it loading and timing)."""

    def __init__(self, problem: Any, clock: dict[str, float], *, start_s: float, baselines_s: float,
                 eval_s: float) -> None:
        from kernelopt.harness.protocol import ReadyReply

        super().__init__(problem)
        self.clock, self.start_s, self.eval_s = clock, start_s, eval_s
        self.ready = [ReadyReply(device="cpu", interpreter=True, atol=1e-5, rtol=1e-5, setup_s=start_s,
                                 baselines_s=baselines_s)]

    def __enter__(self) -> "ClockEngine":
        self.clock["now"] += self.start_s
        return self

    def evaluate(self, candidates: Sequence[Candidate], *, on_result: Callable[[int, Evaluation], None] | None = None,
                 **kw: Any) -> list[Evaluation]:
        def timed(i: int, ev: Evaluation) -> None:
            self.clock["now"] += self.eval_s
            ev.wall_s = self.eval_s
            ev.phases = {"load": 0.5, "verify": self.eval_s - 1.5, "time": 1.0}
            if on_result is not None:
                on_result(i, ev)

        return super().evaluate(candidates, on_result=timed, **kw)


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]


def test_the_budget_is_the_whole_runs_wall_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One minute: the engine's 20 s start (15 s of baselines) counts once, in the time spent, never
    in the per-evaluation figure; the final re-timing's share is kept back; the run records where its
    time went."""
    import kernelopt.harness.evaluate as evaluate_mod

    clock = {"now": 1000.0}
    monkeypatch.setattr(loop_mod.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(evaluate_mod, "Engine",
                        lambda problem, **kw: ClockEngine(problem, clock, start_s=20.0, baselines_s=15.0, eval_s=5.0))
    state = loop_mod.optimize(problem_path=MATVEC / "problem.py", kernel_path=MATVEC / "kernel.py",
                              run_dir=tmp_path / "run", overrides={"M": "64", "K": "256"}, optimizer="knobs",
                              budget_minutes=1.0, rounds=5, beam=1, proposals_per_member=8, profile=False,
                              experience=False)
    events = _events(tmp_path / "run")
    # v0 ends at 25 s; the re-timing of v0 and one more, twice each at 1.5 s, keeps 6 s back:
    # 29 s left at 5 s each -> 5 proposals in round 1 (8 offered). At 50 s, the re-timing of
    # the best three and v0 (12 s) no longer fits beside another round: stop.
    assert sum(1 for e in events if e["type"] == "evaluated") == 6
    assert state.stop_reason == "time budget"
    spent = state.spent
    assert spent["startup"] == pytest.approx(5.0) and spent["baselines"] == pytest.approx(15.0)
    assert spent["search"] == pytest.approx(30.0)
    # The fake's re-timing costs a whole evaluation per timing: two of each of 3 or 4 versions; then
    # the winner is verified once more (5 s) and at the ragged shape (an engine of its own: 20 + 5 s).
    assert spent["retiming"] in (pytest.approx(60.0), pytest.approx(70.0))
    assert "profiling" not in spent
    report = (tmp_path / "run" / "final_report.md").read_text()
    assert "## Where the time went" in report
    assert "| baselines | 15.0 |" in report and "| search | 30.0 |" in report


def test_the_suite_table_splits_each_problems_time(tmp_path: Path) -> None:
    from kernelopt.models.suite import ProblemResult, SuiteResult
    from kernelopt.report.suite_report import write_suite_report

    row = ProblemResult(name="matvec", correct=True, run_dir=str(tmp_path / "runs" / "matvec"),
                        spent={"startup": 4.0, "baselines": 12.5, "profiling": 20.0, "search": 60.0, "retiming": 3.5})
    summary = SuiteResult(suite_dir="suite", out_dir=str(tmp_path), optimizer="knobs", problems=[row])
    write_suite_report(summary, tmp_path)
    md = (tmp_path / "suite_report.md").read_text()
    assert "| matvec | 4.0 | 12.5 | 20.0 | 60.0 | 3.5 | 100.0 |" in md
    assert json.loads((tmp_path / "suite_result.json").read_text())["problems"][0]["spent"]["baselines"] == 12.5


def test_a_resumed_run_counts_what_the_earlier_process_spent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.rundir import RunDir

    clock = {"now": 1000.0}
    monkeypatch.setattr(loop_mod.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(evaluate_mod, "Engine",
                        lambda problem, **kw: ClockEngine(problem, clock, start_s=2.0, baselines_s=0.0, eval_s=5.0))
    state = loop_mod.optimize(problem_path=MATVEC / "problem.py", kernel_path=MATVEC / "kernel.py",
                              run_dir=tmp_path / "run", overrides={"M": "64", "K": "256"}, optimizer="knobs",
                              budget_minutes=1.0, budget_evals=3, rounds=5, beam=1, proposals_per_member=2,
                              profile=False, experience=False)
    assert state.finished
    # Take the finish away: as if killed during the re-timing after 60 s of the budget were spent.
    run = tmp_path / "run"
    # A kill truncates the log (the run directory refuses one with lines taken out of its middle).
    lines = (run / "events.jsonl").read_text().splitlines()
    lines = lines[:next(i for i, x in enumerate(lines) if json.loads(x)["type"] in ("run_finished", "retimed"))]
    lines.append(json.dumps({"seq": len(lines), "t": "2026-01-01T00:00:00Z", "type": "spent", "phase": "search",
                             "seconds": 60.0}))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    assert RunDir.open(run, readonly=True).replay().finished is False
    state = loop_mod.resume(run, profile=False, experience=False)
    assert state.finished and state.stop_reason in ("time budget", "evaluation budget")
    assert sum(1 for e in _events(run) if e["type"] == "evaluated") == 3  # nothing more was searched
