"""The loop names no optimizer: a third-party optimizer gets repair, isolation, its own log file and
its state back from the history by defining them (`kernelopt.optimize.base.Optimizer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
from conftest import MATVEC, FakeEngine, Killed

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


# --- --opt KEY=VALUE: options for any optimizer -----------------------------------------------------------


class Tunable:
    """A third-party optimizer with options of its own (no CLI flag of kernelopt names them)."""

    name = "tunable"
    resume_changeable = frozenset({"label"})  # a resumed run may change it; the others are the run's
    built: list[dict[str, Any]] = []

    def __init__(self, *, step: int = 1, ratio: float = 1.0, greedy: bool = False, kinds: list[str] | None = None,
                 label: str = "") -> None:
        Tunable.built.append(dict(step=step, ratio=ratio, greedy=greedy, kinds=kinds, label=label))

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        return []


class _TunableEntryPoint(_EntryPoint):
    name = "tunable"
    value = "thirdparty_pkg:Tunable"

    def load(self) -> type:
        return Tunable


def test_opt_values_are_typed_where_they_parse() -> None:
    from kernelopt.cli.common import parse_opt_values
    from kernelopt.errors import BadInput

    assert parse_opt_values(("step=4", "ratio=0.5", "greedy=true", "g2=False", 'kinds=["launch"]', "label=fast",
                             "empty=")) == {"step": 4, "ratio": 0.5, "greedy": True, "g2": False,
                                            "kinds": ["launch"], "label": "fast", "empty": ""}
    for bad in (("noequals",), ("1x=2",), ("a=1", "a=2")):
        with pytest.raises(BadInput, match="--opt"):
            parse_opt_values(bad)


def test_opt_reaches_a_third_party_optimizer_is_recorded_and_kept_on_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.cli import main

    monkeypatch.setattr(base.REGISTRY, "entry_points", lambda: [_TunableEntryPoint()])
    kill: dict[str, int | None] = {"after": 0}

    def engine(problem: Any, **kw: Any) -> FakeEngine:
        e = FakeEngine(problem, **kw)
        e.kill_after = kill["after"]
        FakeEngine.recorded = 0
        return e

    monkeypatch.setattr(evaluate_mod, "Engine", engine)
    Tunable.built.clear()
    run = tmp_path / "run"
    with pytest.raises(Killed):  # killed before v0 is evaluated: a run left to resume
        CliRunner().invoke(main, ["optimize", str(MATVEC / "problem.py"), "--kernel", str(MATVEC / "kernel.py"),
                                  "-o", str(run), "--optimizer", "tunable", "--opt", "step=4", "--opt", "ratio=0.5",
                                  "--opt", "greedy=true", "--opt", 'kinds=["launch"]', "--opt", "label=fast",
                                  "--no-profile", "--no-experience", "--set", "M=64", "--set", "K=256"],
                           catch_exceptions=False)
    typed = {"step": 4, "ratio": 0.5, "greedy": True, "kinds": ["launch"], "label": "fast"}
    assert Tunable.built == [typed]
    assert json.loads((run / "run.json").read_text())["optimizer_options"] == typed
    # A resumed run builds its optimizer from run.json: the same options, without giving them again;
    # one the optimizer declares `resume_changeable` may be given with another value.
    kill["after"] = None
    res = CliRunner().invoke(main, ["optimize", "--resume", str(run), "--opt", "label=slow"])
    assert res.exit_code == 0, res.output
    assert Tunable.built == [typed, {**typed, "label": "slow"}]
    assert json.loads((run / "run.json").read_text())["optimizer_options"]["label"] == "slow"
    # Given again with another value: refused, like any option a resumed run started with.
    res = CliRunner().invoke(main, ["optimize", "--resume", str(run), "--opt", "step=5"])
    assert res.exit_code == 2 and "--opt step" in res.output


def test_opt_the_optimizer_does_not_take_is_refused_in_one_line(tmp_path: Path) -> None:
    """The default optimizer (strategies) names itself in the refusal."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "kernelopt", "optimize", str(MATVEC / "problem.py"), "--kernel",
                          str(MATVEC / "kernel.py"), "-o", str(tmp_path / "run"), "--opt", "no_such=1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["kernelopt: --optimizer strategies: does not use --opt no_such; "
                                               "leave it out"]
    assert not (tmp_path / "run").exists()


def test_the_llm_declares_which_options_a_resume_may_change() -> None:
    from kernelopt.errors import BadInput
    from kernelopt.models.optimize import RunConfig

    config = RunConfig(problem="p.py", kernel="k.py", optimizer="llm", created_at="2026-01-01T00:00:00Z",
                       optimizer_options={"provider": "command", "llm_command": "x", "timeout_s": 120.0})
    new, changes = loop_mod.reconcile(config, {"optimizer_options": {"timeout_s": 5.0, "retries": 0}})
    assert new.optimizer_options["timeout_s"] == 5.0 and changes["optimizer_options.retries"] == [None, 0]
    with pytest.raises(BadInput, match="cannot change --llm-command"):
        loop_mod.reconcile(config, {"optimizer_options": {"llm_command": "y"}})
