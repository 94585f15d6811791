"""The loop names no optimizer: a third-party optimizer gets repair, isolation, its own log file and
its state back from the history by defining them (`kernelopt.optimize.base.Optimizer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
from conftest import MATVEC, FakeEngine

from kernelopt.models.harness import Candidate, Evaluation, Failure
from kernelopt.models.optimize import OptimizeContext, Proposal, Version
from kernelopt.optimize import base
from kernelopt.optimize import loop as loop_mod


class ThirdParty:
    """An optimizer a plug-in package would ship: no kernelopt code names it."""

    name = "thirdparty"
    isolation = "candidate"
    usage_log_name = "thirdparty.log"
    accepts = frozenset({"usage_log"})
    built: list["ThirdParty"] = []

    def __init__(self, usage_log: str | None = None) -> None:
        self.usage_log = usage_log
        self.extras_seen: list[dict[str, Any]] = []
        self.repaired: list[str] = []
        ThirdParty.built.append(self)

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        self.extras_seen = [a.extra for a in context.history if a.extra]
        source = Path(context.beam[0].path).read_text()
        marker = "_BROKEN = 1" if context.round == 1 else f"_ROUND = {context.round}"
        return [Proposal(source=f"{source}\n{marker}\n", parent=context.beam[0].id, change=marker,
                         extra={"token": f"r{context.round}"})]

    def repair(self, context: OptimizeContext, version: Version, evaluation: Evaluation) -> Proposal | None:
        self.repaired.append(version.id)
        source = Path(version.path).read_text().replace("_BROKEN = 1", "_FIXED = 1")
        return Proposal(source=source, parent=version.parent, change="fixed", extra={"token": "fix"})


class BreakingEngine(FakeEngine):
    """FakeEngine that fails any candidate holding `_BROKEN` and records how it was built."""

    built: list[dict[str, Any]] = []

    def __init__(self, problem: Any, **kw: Any) -> None:
        super().__init__(problem, **kw)
        BreakingEngine.built.append(kw)

    def evaluate(self, candidates: Sequence[Candidate], *, on_result: Callable[[int, Evaluation], None] | None = None,
                 **kw: Any) -> list[Evaluation]:
        out = []
        for i, cand in enumerate(candidates):
            if "_BROKEN" in Path(cand.path).read_text():
                ev = Evaluation(problem=self.problem, candidate=cand,
                                failure=Failure(reason="incorrect", message="wrong answer"))
                if on_result is not None:
                    on_result(i, ev)
                out.append(ev)
                continue
            out += super().evaluate([cand], on_result=(lambda _, e, i=i: on_result(i, e)) if on_result else None)
        return out


class _EntryPoint:
    """What importlib.metadata gives for an installed plug-in's entry point."""

    name = "thirdparty"
    value = "thirdparty_pkg:ThirdParty"
    group = base.ENTRY_POINT_GROUP

    def load(self) -> type:
        return ThirdParty


def test_a_third_party_optimizer_gets_the_loops_capabilities_without_a_name_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelopt.harness.evaluate as evaluate_mod

    monkeypatch.setattr(base.REGISTRY, "entry_points", lambda: [_EntryPoint()])
    monkeypatch.setattr(evaluate_mod, "Engine", BreakingEngine)
    ThirdParty.built.clear()
    BreakingEngine.built.clear()
    run = tmp_path / "run"
    state = loop_mod.optimize(MATVEC / "problem.py", MATVEC / "kernel.py", run_dir=run,
                              overrides={"M": "64", "K": "256"}, optimizer="thirdparty", rounds=2, beam=1,
                              proposals_per_member=1, profile=False, experience=False)
    opt = ThirdParty.built[-1]
    assert BreakingEngine.built[0]["isolate"] == "candidate"  # the run's engine: its `isolation`, not 'worker' 
    assert opt.usage_log == str(run / "thirdparty.log")  # its own log, in the run directory
    assert opt.repaired == ["v1"]  # `repair` was called for the failed version ...
    assert state.versions["v2"].proposal.change == "fixed" and state.versions["v2"].correct  # ... and its fix evaluated
    # What it recorded in Proposal.extra comes back through the history (how it resumes).
    assert {"token": "r1"} in opt.extras_seen and {"token": "fix"} in opt.extras_seen


def test_capability_defaults_for_an_optimizer_without_them() -> None:
    class Bare:
        name = "bare"

        def propose(self, context: OptimizeContext) -> list[Proposal]:
            return []

    assert isinstance(Bare(), base.Optimizer) and not isinstance(Bare(), base.Repairs)
    assert isinstance(ThirdParty(), base.Repairs)
    assert base.capability(Bare(), "isolation") == "worker" and base.capability(Bare(), "interactive") is False
    assert base.capability(Bare(), "repair") is None
    with pytest.raises(KeyError):
        base.capability(Bare(), "no_such_capability")
