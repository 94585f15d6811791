"""Every place that sorts failure reasons sorts them alike: a verdict on the answer (incorrect,
timing_mismatch, tampered, ...) against no verdict (compile, crash, timeout, ...), and a
raced-out candidate is slower, not wrong."""

from __future__ import annotations

from kernelopt.models.harness import (EXECUTION_FAILURES, FAILURE_REASONS, VERDICT_FAILURES, Candidate, Evaluation,
                                      Failure, Problem, TimingStats, Verification)
from kernelopt.models.optimize import Attempt, OptimizeContext, Proposal, Version

problem = Problem(path="p.py", name="p")
cand = Candidate(path="v1/kernel.py", name="v1", backend="triton", entry="kernel_function", sha256="0")


def _ev(reason: str | None, *, verified: bool = True, raced: bool = False) -> Evaluation:
    ver = Verification(problem=problem, candidate=cand, passed=True, device="cpu", atol=1e-4, rtol=1e-4)
    timing = TimingStats(median_ms=5.0, mean_ms=5.0, min_ms=4.0, max_ms=6.0, iqr_ms=0.1, cv=0.01, count=3,
                         warmup_count=1, l2_flush_bytes=0, race_against_ms=2.0, raced_out=True) if raced else None
    return Evaluation(problem=problem, candidate=cand, verification=ver if verified else None, timing=timing,
                      failure=Failure(reason=reason, stage="time", message="a timed call computed something else")
                      if reason else None)


def test_every_reason_is_either_a_verdict_or_not() -> None:
    assert set(FAILURE_REASONS) == EXECUTION_FAILURES | VERDICT_FAILURES
    assert "timing_mismatch" in VERDICT_FAILURES and "crash" in EXECUTION_FAILURES


def test_knob_search_never_reads_a_verdict_as_a_resource_failure() -> None:
    from kernelopt.optimize.knobs.search import _is_resource_failure

    for reason in ("timing_mismatch", "incorrect", "tampered"):
        attempt = Attempt(version="v1", parent="v0", change="BLOCK 64 -> 128", outcome="incorrect",
                          failure=f"{reason}: too many mismatches in the shared memory tile")
        assert not _is_resource_failure(attempt), reason
    oom = Attempt(version="v1", parent="v0", change="x", outcome="failed",
                  failure="compile: out of resource: shared memory, required 300000")
    assert _is_resource_failure(oom)


def test_a_timing_mismatch_is_incorrect_in_history_and_experience() -> None:
    from kernelopt.optimize.loop import attempt_of

    v0 = Version(id="v0", round=0, path="v0/kernel.py", evaluation=_ev(None))
    v1 = Version(id="v1", round=1, path="v1/kernel.py", parent="v0",
                 proposal=Proposal(parent="v0", strategy="s", change="c", source="x"),
                 evaluation=_ev("timing_mismatch"))
    assert attempt_of(v1, v0).outcome == "incorrect"
    v1.evaluation = _ev("crash")
    assert attempt_of(v1, v0).outcome == "failed"


def test_the_llm_reflection_calls_a_raced_out_candidate_slower_and_a_timing_mismatch_incorrect() -> None:
    from kernelopt.optimize.llm.optimizer import _measured

    ctx = OptimizeContext(problem=problem, round=1, beam=[])
    v1 = Version(id="v1", round=1, path="v1/kernel.py", parent="v0")
    word, lines = _measured(ctx, v1, _ev(None, verified=False, raced=True))
    assert word.startswith("slower") and lines
    assert _measured(ctx, v1, _ev("timing_mismatch"))[0] == "incorrect"
    assert _measured(ctx, v1, _ev("unwritten_output"))[0] == "incorrect"
