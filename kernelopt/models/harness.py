"""Problem, Candidate, Verification and Timing: what the harness takes and returns."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field

from kernelopt.models.common import Backend, DType, Model


class Problem(Model):
    """A KernelBench-style problem file (`Model`, `get_inputs`, `get_init_inputs`)."""

    path: str
    name: str
    overrides: dict[str, Any] = Field(default_factory=dict, description="--set NAME=VALUE, typed")
    dtype: DType | None = None
    constants: dict[str, Any] = Field(default_factory=dict, description="module-level scalars after overrides")
    atol: float | None = None
    rtol: float | None = None


class Candidate(Model):
    """A candidate kernel file defining `ModelNew` or `kernel_function`."""

    path: str
    name: str
    backend: Backend
    entry: Literal["ModelNew", "kernel_function"]
    sha256: str


FailureReason = Literal[
    "compile",  # import/compile/build failed
    "runtime",  # raised or crashed while running
    "timeout",  # exceeded the time limit
    "incorrect",  # numerically wrong
    "nonfinite",  # NaN/Inf where the reference is finite
    "shape_mismatch",
    "unwritten_output",  # output kept the poison the allocator was filled with
    "modified_input",  # candidate wrote into its inputs
    "cached_result",  # same output for different inputs
    "hidden_stream",  # result only correct after a device-wide synchronize
    "needs_gpu",  # CUDA candidate, no GPU: compiled only
    "crash",  # the process running the candidate died (segfault, abort, CUDA context lost)
    "tampered",  # the candidate replaced functions the checks rely on (torch.allclose, Tensor.__sub__, ...),
    # switched a guard off, or wrote into the judge's channels (a reply that answers no request)
    "timing_mismatch",  # correct when verified, but a timed call computed something else (it skips work when timed)
    "tool_missing",  # a tool the stage needs (ncu, nvcc) is not installed
    "tool_failed",  # a tool the stage runs (ncu, nvcc, a profiler) failed for a reason not the candidate's
]
FAILURE_REASONS: tuple[str, ...] = get_args(FailureReason)
# Failures that reach no verdict on the answer (it did not build, run, finish or get a tool);
# every other reason is a verdict: the answer was wrong or not to be trusted.
EXECUTION_FAILURES: frozenset[str] = frozenset({"compile", "runtime", "timeout", "crash", "needs_gpu", "tool_missing",
                                                "tool_failed"})
VERDICT_FAILURES: frozenset[str] = frozenset(FAILURE_REASONS) - EXECUTION_FAILURES


class OutputCheck(Model):
    index: int
    shape: list[int]
    dtype: str
    ref_shape: list[int]
    ref_dtype: str
    max_abs_error: float | None = None
    rel_l2_error: float | None = None
    mismatches: int = 0
    first_mismatch: list[int] | None = None
    nonfinite: int = 0
    passed: bool


class Trial(Model):
    seed: int
    passed: bool
    reason: FailureReason | None = None
    message: str | None = None
    outputs: list[OutputCheck] = Field(default_factory=list)


class Verification(Model):
    problem: Problem
    candidate: Candidate
    passed: bool
    reason: FailureReason | None = None
    message: str | None = None
    device: str
    interpreter: bool = False
    atol: float
    rtol: float
    trials: list[Trial] = Field(default_factory=list)
    failure: "Failure | None" = Field(None, description="the failure with its detail: traceback, captured output")
    shapes: list["ShapeCheck"] = Field(
        default_factory=list, description="`check --shapes auto`: the verdicts at the problem's other shapes")


class ShapeCheck(Model):
    """A candidate verified at one shape of its problem (`kernelopt.harness.shapes`)."""

    label: str = Field(description="'declared' (the shape it was optimized at), 'SMALL' (the problem's SMALL dict) "
                                   "or 'ragged' (each shape constant moved to an odd nearby value)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="the constants set for this check")
    passed: bool = Field(description="correct at this shape (True also when it could not be checked)")
    checked: bool = Field(True, description="False when the problem itself does not build at this shape")
    reason: FailureReason | None = None
    message: str | None = None


class TimingStats(Model):
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    cv: float = Field(description="coefficient of variation: stdev / mean")
    count: int
    warmup_count: int
    l2_flush_bytes: int
    method: str = "cuda-events, L2 flushed before every call, launch guard, device-wide synchronize"
    launch_guard_us: float = Field(
        0.0, description="GPU busy-wait queued before each timed call so host enqueue time is not measured (0: none)"
    )
    trailing_us: float = Field(
        0.0, description="median time the device stayed busy after a timed call's end event had fired, beyond "
                         "what synchronizing an idle device costs: work left on another stream, which the events "
                         "do not see (0 on the CPU)")
    race_against_ms: float | None = Field(
        None, description="racing: the time the candidate had to beat (the beam's worst member's upper bound)")
    raced_out: bool = Field(
        False, description="timing stopped early: after `count` calls even the fastest was slower than race_against_ms "
                           "(the figures are partial)")


class Timing(Model):
    label: str  # "candidate", "eager", "compile"
    stats: TimingStats | None = None
    error: str | None = None


class BenchResult(Model):
    problem: Problem
    candidate: Candidate
    device: str
    env: dict[str, Any] = Field(default_factory=dict)
    timings: dict[str, Timing] = Field(default_factory=dict)
    speedups: dict[str, float] = Field(default_factory=dict, description="baseline median / candidate median")
    options: dict[str, Any] = Field(default_factory=dict, description="timing options and seed as requested")
    failure: "Failure | None" = None
    suspect: list[str] = Field(default_factory=list, description="why the time is not credible")


class Failure(Model):
    """Why a candidate failed, as data: one taxonomy for every stage (verify, time, profile)."""

    reason: FailureReason
    stage: Literal["load", "verify", "time", "profile"] = "verify"
    message: str
    traceback: str | None = Field(None, description="the candidate's own frames, when it raised")
    stdout: str | None = Field(None, description="the candidate's captured output (tail, capped)")
    stderr: str | None = None


class Evaluation(Model):
    """One candidate through the engine: `kernelopt.harness.evaluate` returns one per candidate, in order."""

    problem: Problem
    candidate: Candidate
    device: str = Field("", description="where it ran, e.g. 'cuda:0 (NVIDIA H100 80GB HBM3)' or 'cpu (Triton interpreter)'")
    interpreter: bool = False
    verification: Verification | None = None
    timing: TimingStats | None = None
    baselines: dict[str, Timing] = Field(default_factory=dict, description="eager / compile, when asked for")
    speedups: dict[str, float] = Field(default_factory=dict, description="baseline median / candidate median")
    failure: Failure | None = None
    suspect: list[str] = Field(default_factory=list, description="why the time is not credible (roofline floor, wall clock)")
    wall_s: float = 0.0
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="seconds of wall_s by step: runner_start (only when this evaluation had to start a runner), "
                    "load, verify, time")
    worker: str | None = Field(None, description="which worker ran it (e.g. 'local:cuda:0')")

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def raced_out(self) -> bool:
        """Timing stopped early as clearly slower than the beam (not a failure; never verified, never promoted)."""
        return self.timing is not None and self.timing.raced_out

    @property
    def passed(self) -> bool:
        """Verified correct (or not asked to verify), not failed and not raced out."""
        return self.failure is None and not self.raced_out and (self.verification is None or self.verification.passed)

    @property
    def wrong_answer(self) -> bool:
        """It ran and was judged: its answer was wrong or not to be trusted (a verdict failure,
        e.g. incorrect, timing_mismatch, tampered after correct trials), as against never
        getting a verdict (build, crash, hang) or being raced out."""
        if self.verification is None:
            return False
        if self.failure is None:
            return not self.verification.passed
        return self.failure.reason in VERDICT_FAILURES

    @property
    def median_ms(self) -> float | None:
        return self.timing.median_ms if self.timing else None


BenchResult.model_rebuild()
Verification.model_rebuild()
