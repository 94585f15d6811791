"""A killed and resumed run ends where an uninterrupted one with the same seed does.

Measured times are noise on a real device, so here the engine is replaced by one whose
times are a fixed function of the candidate's knob values: the loop, the run directory
and the knob optimizer are the real ones. The kill lands in the middle of a batch, after
some of its evaluations are recorded and before the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pytest
from conftest import MATVEC, FakeEngine, Killed

from kernelopt.models.harness import Candidate, Evaluation
from kernelopt.optimize import loop as loop_mod


def _proposals(run: Path) -> list[dict[str, Any]]:
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]
    return [(e["proposal"] or {}).get("knobs") for e in events if e["type"] == "proposed"]


def _evaluated(run: Path) -> list[str]:
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]
    return [e["version"] for e in events if e["type"] == "evaluated"]


@pytest.mark.parametrize(("kill_after", "optimizer"), [(1, "knobs"), (4, "knobs"), (6, "knobs"), (4, "strategies")])
def test_kill_and_resume_ends_with_the_uninterrupted_runs_best(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  kill_after: int, optimizer: str) -> None:
    import kernelopt.harness.evaluate as evaluate_mod

    kill: dict[str, int | None] = {"after": None}

    def engine(problem: Any, **kw: Any) -> FakeEngine:
        e = FakeEngine(problem, **kw)
        e.kill_after = kill["after"]
        FakeEngine.recorded = 0
        return e

    monkeypatch.setattr(evaluate_mod, "Engine", engine)
    common = dict(problem_path=MATVEC / "problem.py", kernel_path=MATVEC / "kernel.py",
                  overrides={"M": "64", "K": "256"}, optimizer=optimizer, budget_evals=10, rounds=6, beam=2,
                  proposals_per_member=2, seed=3, profile=False, experience=False)
    a = loop_mod.optimize(run_dir=tmp_path / "a", **common)

    kill["after"] = kill_after
    with pytest.raises(Killed):
        loop_mod.optimize(run_dir=tmp_path / "b", **common)
    done_before = _evaluated(tmp_path / "b")
    assert len(done_before) == kill_after  # the kill landed where it was meant to
    kill["after"] = None
    b = loop_mod.resume(tmp_path / "b", profile=False, experience=False)

    evaluated = _evaluated(tmp_path / "b")
    assert len(evaluated) == len(set(evaluated))  # no evaluation repeated
    assert evaluated[:kill_after] == done_before
    assert _proposals(tmp_path / "b") == _proposals(tmp_path / "a")  # the same search, step for step
    assert a.best and b.best == a.best and a.best != "v0"
    assert (tmp_path / "b" / "best_kernel.py").read_text() == (tmp_path / "a" / "best_kernel.py").read_text()
    assert b.evaluations_done == a.evaluations_done
    if optimizer == "strategies":  # the transforms are part of the search that was resumed
        events = [json.loads(x) for x in (tmp_path / "b" / "events.jsonl").read_text().splitlines() if x.strip()]
        assert any((e.get("proposal") or {}).get("extra", {}).get("phase") == "transform"
                   for e in events if e["type"] == "proposed")


def test_a_round_proposes_only_what_fits_in_the_time_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 0.6 minutes and 10 s per evaluation, v0 leaves room for 2 more: a round of 8
    proposals is cut to what fits instead of overrunning the budget by a whole batch, and no round
    starts that cannot fit one evaluation."""
    import kernelopt.harness.evaluate as evaluate_mod

    clock = {"now": 1000.0}
    monkeypatch.setattr(loop_mod.time, "monotonic", lambda: clock["now"])

    class SlowEngine(FakeEngine):
        def evaluate(self, candidates: Sequence[Candidate], **kw: Any) -> list[Evaluation]:
            evs = []

            def on_result(i: int, ev: Evaluation) -> None:
                clock["now"] += 10.0
                ev.wall_s = 10.0
                evs.append(ev)
                if kw.get("on_result"):
                    kw["on_result"](i, ev)

            super().evaluate(candidates, on_result=on_result)
            return evs

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: SlowEngine(problem))
    state = loop_mod.optimize(problem_path=MATVEC / "problem.py", kernel_path=MATVEC / "kernel.py",
                              run_dir=tmp_path / "run", overrides={"M": "64", "K": "256"}, optimizer="knobs",
                              budget_minutes=0.6, rounds=5, beam=1, proposals_per_member=8, profile=False,
                              experience=False)
    # v0 ends at 10 s; 26 s left at 10 s each -> round 1 gets 2 of its 8 proposals; at 30 s the 6 s
    # left cannot hold a 10 s evaluation, so no round 2 starts (it would end 4 s late). Uncapped,
    # round 1 alone would have run 8 (9 evaluations in all).
    assert len(_evaluated(tmp_path / "run")) == 3
    assert state.stop_reason == "time budget"
