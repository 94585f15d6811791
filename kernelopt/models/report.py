"""What `kernelopt report` derives from a run directory (`kernelopt.report.run_report.summarize_run`)."""

from __future__ import annotations

from pydantic import Field

from kernelopt.models.common import Model
from kernelopt.models.harness import ShapeCheck
from kernelopt.models.optimize import KnobValue


class VersionRow(Model):
    """One version as the report lists it."""

    id: str
    parent: str | None = None
    round: int
    change: str = Field(description="the one change, or 'starting kernel' for v0")
    strategy: str | None = None
    transform: str | None = Field(None, description="'name@site' of the source transform this step applied")
    diff: str | None = Field(None, description="the step's change.diff, relative to the run directory")
    knobs: dict[str, KnobValue] = Field(default_factory=dict)
    verdict: str = Field(description="correct | not evaluated | refused (kernel.py changed after evaluation, or the "
                                     "final re-verification failed) | the failure reason (incorrect, compile, ...)")
    failure: str | None = Field(None, description="the failure's one-line message")
    median_ms: float | None = None
    iqr_ms: float | None = None
    cv: float | None = None
    speedup_vs_start: float | None = Field(None, description="v0 median / this median (evaluation timings)")
    speedup_vs_parent: float | None = None
    improved: bool = Field(False, description="faster than its parent beyond half the larger of the two IQRs")


class StrategyStats(Model):
    """Which strategies paid: every version that applied `strategy`."""

    strategy: str
    transform: str | None = Field(None, description="the source transform its proposals applied, if any")
    tried: int = Field(description="proposals evaluated, plus transform proposals that produced no source")
    correct: int
    improved: int
    best_gain: float | None = Field(None, description="largest speedup over the parent among its versions")


class BottleneckSummary(Model):
    category: str
    subcause: str | None = None
    confidence: float
    message: str
    headroom_pct: float | None = None
    evidence: list[str] = Field(default_factory=list, description="'key = value (op threshold)'")
    profile_of: str | None = Field(
        None, description="the ancestor whose profile this is: the version was not profiled itself "
                          "(its `profiled` event names `inherited:vN`)")


class ConvergencePoint(Model):
    round: int
    best_ms: float | None = Field(description="fastest correct version evaluated up to this round")
    best: str | None = None


class RejectionRow(Model):
    """A model reply (or a prompt not sent) that gave no proposal: a `rejected` event."""

    round: int | None = None
    kind: str = Field("propose", description="propose | repair | reflect")
    parent: str | None = Field(None, description="the version the reply was to change")
    strategy: str | None = None
    reason: str = Field(description="provider_error | no_code | syntax | no_entry | guard | duplicate | repeat_prompt")
    detail: str = ""


class ProfileFailureRow(Model):
    """A version the profile stage could not profile: its `profiled` event's failure."""

    version: str
    profiler: str | None = None
    reason: str
    message: str


class RunSummary(Model):
    path: str
    problem: str
    problem_path: str
    overrides: dict[str, object] = Field(default_factory=dict)
    kernel: str
    optimizer: str
    device: str | None = None
    interpreter: bool = False
    time_label: str = Field(description="'interpreter wall time' or 'GPU time'")
    method: str | None = Field(None, description="how the times were measured (TimingStats.method)")
    created_at: str | None = None
    finished: bool = False
    stop_reason: str | None = None
    rounds_finished: int = Field(0, description="rounds finished, round 0 (the starting kernel) included")
    search_rounds: int = Field(0, description="search rounds finished (round 0 not counted): what stdout and the report say")
    evaluations_done: int = 0
    resumes: int = 0
    start: VersionRow | None = None
    best: VersionRow | None = None
    start_ms: float | None = None
    best_ms: float | None = None
    retimed: bool = Field(False, description="start and best times come from the final interleaved re-timing")
    speedup: float | None = None
    speedup_low: float | None = Field(None, description="bound from the interquartile ranges of both timings")
    speedup_high: float | None = None
    within_spread: bool = Field(False, description="interpreter times whose speedup range spans 1.0: no measurable difference")
    baselines_ms: dict[str, float] = Field(default_factory=dict)
    vs_baselines: dict[str, float] = Field(default_factory=dict, description="baseline median / best median")
    lineage: list[VersionRow] = Field(default_factory=list, description="v0 ... best, parent to child")
    versions: list[VersionRow] = Field(default_factory=list)
    strategies: list[StrategyStats] = Field(default_factory=list)
    diagnosis_before: BottleneckSummary | None = None
    diagnosis_after: BottleneckSummary | None = None
    convergence: list[ConvergencePoint] = Field(default_factory=list)
    lessons: list[str] = Field(default_factory=list)
    profile_failures: list[ProfileFailureRow] = Field(
        default_factory=list, description="versions whose profile failed (ncu missing or failing, a timeout, no GPU)")
    spent: dict[str, float] = Field(
        default_factory=dict,
        description="wall seconds by phase: startup, baselines, profiling, search, retiming (every process of the run)")
    spent_total_s: float = Field(0.0, description="the sum of spent: the run's wall time as recorded")
    rejections: list[RejectionRow] = Field(default_factory=list, description="model replies that gave no proposal")
    files: list[str] = Field(default_factory=list, description="what render_run wrote")
    refused: list[str] = Field(
        default_factory=list, description="why versions were refused (their kernel.py changed after evaluation, or "
                                          "the final re-verification failed); their results are not used")
    shape_checks: list[ShapeCheck] = Field(
        default_factory=list, description="the best version verified at the problem's other shapes (SMALL, ragged)")
    shapes: str | None = Field(None, description="those checks in one line: where it holds, where it FAILS")
    shapes_hold: bool | None = Field(None, description="False: the best version is wrong at another shape")
    best_kernel_refused: str | None = Field(
        None, description="why best_kernel.py was not written (the best version's file changed)")
