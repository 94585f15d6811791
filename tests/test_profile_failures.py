"""Profiling through the evaluation seam: a profiler that fails (ncu missing or failing, a timeout,
no GPU) is data - a `ProfileResult` with a reason from the engine's one failure taxonomy, recorded in
the version's `profiled` event and in the report - and the run goes on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kernelopt.errors import CandidateFailed, MissingRequirement, ToolFailed

ROOT = Path(__file__).resolve().parent.parent
MATVEC = ROOT / "examples" / "matvec"


class RaisingProfiler:
    name = "ncu"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.calls: list[str] = []

    def profile(self, problem: Any, candidate: Any, *, out_dir: Any, seed: int = 0) -> Any:
        self.calls.append(candidate.name)
        raise self.exc


@pytest.mark.parametrize("exc, reason", [
    (ToolFailed("ncu timed out after 5 s profiling v1", reason="timeout"), "timeout"),
    (ToolFailed("ncu (Nsight Compute) not found on PATH or under CUDA_HOME", reason="tool_missing"), "tool_missing"),
    (ToolFailed("==ERROR== the profiler failed"), "tool_failed"),
    (CandidateFailed("v1: crash: segfault under ncu", reason="crash"), "crash"),
    (MissingRequirement("no CUDA GPU is available"), "needs_gpu"),
    (TimeoutError("cuda:0: the GPU lock was held for 600 s"), "timeout"),
    (subprocess.TimeoutExpired(["ncu"], 5), "timeout"),
    (FileNotFoundError(2, "No such file or directory", "ncu"), "tool_missing"),
    (RuntimeError("a third-party profiler's bug"), "tool_failed"),
])
def test_a_profiler_failure_is_a_result_with_a_reason(tmp_path: Path, exc: BaseException, reason: str) -> None:
    from kernelopt.models.harness import Candidate, Problem
    from kernelopt.profile import profile_result

    cand = Candidate(path="k.py", name="v1", backend="triton", entry="ModelNew", sha256="0")
    result = profile_result(RaisingProfiler(exc), Problem(path="p.py", name="p"), cand, out_dir=tmp_path)
    assert not result.ok and result.metrics is None and result.profiler == "ncu"
    assert result.failure is not None and result.failure.reason == reason and result.failure.stage == "profile"
    assert result.failure.message


def test_a_guard_that_times_out_is_a_result_and_an_interrupt_is_not_caught(tmp_path: Path) -> None:
    import contextlib

    from kernelopt.models.harness import Candidate, Problem
    from kernelopt.profile import profile_result

    @contextlib.contextmanager
    def lock_held():  # noqa: ANN202 - the per-GPU lock that another process never lets go of
        raise TimeoutError("cuda:0: the GPU lock was held for 600 s")
        yield

    cand = Candidate(path="k.py", name="v1", backend="triton", entry="ModelNew", sha256="0")
    profiler = RaisingProfiler(AssertionError("never called"))
    result = profile_result(profiler, Problem(path="p.py", name="p"), cand, out_dir=tmp_path, guard=lock_held())
    assert result.failure is not None and result.failure.reason == "timeout" and not profiler.calls
    with pytest.raises(KeyboardInterrupt):
        profile_result(RaisingProfiler(KeyboardInterrupt()), Problem(path="p.py", name="p"), cand, out_dir=tmp_path)


def test_the_run_goes_on_and_its_events_and_report_record_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every profile raises: the run finishes its rounds, each beam version has one `profiled` event
    with the reason (profiled once, not again every round), and the report lists them."""
    import kernelopt.harness.evaluate as evaluate_mod
    import kernelopt.profile as profile_mod
    from conftest import FakeEngine
    from kernelopt.optimize import loop as loop_mod
    from kernelopt.rundir import RunDir

    profiler = RaisingProfiler(ToolFailed("ncu timed out after 5 s profiling", reason="timeout"))
    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: FakeEngine(problem))
    monkeypatch.setattr(profile_mod, "get_profiler", lambda name="ncu", **kw: profiler)
    lines: list[str] = []
    run = tmp_path / "run"
    state = loop_mod.optimize(MATVEC / "problem.py", MATVEC / "kernel.py", run_dir=run,
                              overrides={"M": "64", "K": "256"}, optimizer="knobs", rounds=3, beam=2,
                              proposals_per_member=2, seed=1, profile=True, experience=False, baselines=(),
                              progress=lines.append)
    assert state.finished and state.evaluations_done > 3 and state.best is not None
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]
    profiled = [e for e in events if e["type"] == "profiled"]
    assert profiled and {e["failure"]["reason"] for e in profiled} == {"timeout"}
    assert all(e["profiler"] == "ncu" and e["failure"]["stage"] == "profile" and e["metrics"] is None
               for e in profiled)
    assert len({e["version"] for e in profiled}) == len(profiled) == len(profiler.calls)  # once per version
    assert any("not profiled (ncu): timeout: ncu timed out" in line for line in lines)
    replayed = RunDir.open(run, readonly=True).replay()
    assert replayed.versions["v0"].profile_failure is not None
    assert replayed.versions["v0"].profile_failure.reason == "timeout"
    report = (run / "final_report.md").read_text()
    assert "### Profiles that failed" in report and "| v0 | ncu | timeout | ncu timed out after 5 s profiling |" in report


def test_the_ncu_profiler_missing_failing_or_hanging_gives_its_reason(tmp_path: Path) -> None:
    """The real NcuProfiler, with an ncu that is not there, one that fails and one that hangs past
    the time limit: tool_missing, tool_failed and timeout, each with what happened."""
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.profile import profile_result
    from kernelopt.profile.ncu import NcuProfiler

    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    cand = load_candidate(MATVEC / "kernel.py")

    def fake_ncu(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
        return str(path)

    cases = [
        (str(tmp_path / "no-such-ncu"), 30.0, "tool_missing", "no-such-ncu"),
        (fake_ncu("failing", "echo '==ERROR== fake ncu failed' >&2; exit 1"), 30.0, "tool_failed", "fake ncu failed"),
        (fake_ncu("hanging", "sleep 60"), 2.0, "timeout", "timed out after 2 s"),
    ]
    for ncu, limit, reason, said in cases:
        result = profile_result(NcuProfiler(ncu=ncu, timeout_s=limit), problem, cand, out_dir=tmp_path / reason)
        assert result.failure is not None and result.failure.reason == reason, (ncu, result.failure)
        assert said in result.failure.message and result.metrics is None
