"""A killed and resumed run ends where an uninterrupted one with the same seed does.

Measured times are noise on a real device, so here the engine is replaced by one whose
times are a fixed function of the candidate's knob values: the loop, the run directory
and the knob optimizer are the real ones. The kill lands in the middle of a batch, after
some of its evaluations are recorded and before the rest.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from kernelopt.models.harness import Candidate, Evaluation, TimingStats
from kernelopt.optimize import loop as loop_mod
from kernelopt.optimize.knobs import knob_values

ROOT = Path(__file__).resolve().parent.parent
MATVEC = ROOT / "examples" / "matvec"


class Killed(BaseException):
    """Stands in for SIGKILL: nothing in the loop may catch it."""


def cost(knobs: dict[str, Any]) -> float:
    """Deterministic 'time' with its optimum inside the space (BLOCK_M 16, BLOCK_K 512, 8 warps).
    A knob a transform took away (an autotune table decides it) counts at the starting value."""
    def get(name: str, default: int) -> int:
        value = knobs.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    return 1.0 + (math.log2(get("BLOCK_M", 16)) - 4) ** 2 + (math.log2(get("BLOCK_K", 128)) - 9) ** 2 \
        + 0.5 * (math.log2(get("num_warps", 4)) - 3) ** 2 + 0.1 * get("num_stages", 3)


class FakeEngine:
    """The Engine's surface the loop uses, with times from `cost`; raises Killed after `kill_after` results."""

    recorded = 0

    def __init__(self, problem: Any, **_: Any) -> None:
        self.problem = problem
        self.devices = ["cpu"]
        self.ready: list[Any] = []
        self.kill_after: int | None = None

    def __enter__(self) -> "FakeEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def evaluate(self, candidates: Sequence[Candidate], *, on_result: Callable[[int, Evaluation], None] | None = None,
                 **_: Any) -> list[Evaluation]:
        out = []
        for i, cand in enumerate(candidates):
            if self.kill_after is not None and FakeEngine.recorded >= self.kill_after:
                raise Killed()
            ms = cost(knob_values(Path(cand.path).read_text()))
            timing = TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, cv=0.0, count=10,
                                 warmup_count=1, l2_flush_bytes=0)
            ev = Evaluation(problem=self.problem, candidate=cand, timing=timing)
            out.append(ev)
            FakeEngine.recorded += 1
            if on_result is not None:
                on_result(i, ev)
        return out


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
    proposals is cut to what fits instead of overrunning the budget by a whole batch."""
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
    # v0 ends at 10 s; 26 s left at 10 s each -> round 1 gets 2 of its 8 proposals; round 2 starts
    # with 6 s left and gets 1 (a round never starts empty); then the time is up. Uncapped, round 1
    # alone would have run 8 (9 evaluations in all).
    assert len(_evaluated(tmp_path / "run")) == 4
    assert state.stop_reason == "time budget"
