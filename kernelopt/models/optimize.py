"""What optimizers take and return: the loop's context, proposals, knobs and run state."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kernelopt.models.common import Category, Model
from kernelopt.models.diagnosis import Diagnosis
from kernelopt.models.harness import Evaluation, Failure, Problem, ShapeCheck, Timing, TimingStats
from kernelopt.models.metrics import Metrics
from kernelopt.models.recommendation import KnownFailure, Recommendation

KnobValue = int | float | str | bool | None


class KnobSpec(Model):
    """One tunable parameter found in a candidate's source (`kernelopt knobs`)."""

    name: str = Field(description="unique within the candidate, e.g. 'BLOCK_SIZE', 'num_warps', 'load@41.eviction_policy'")
    value: KnobValue = Field(description="current value; None where an autotuner decides")
    kernel: str | None = Field(None, description="the @triton.jit function (or CUDA kernel) it belongs to")
    line: int = Field(description="1-based line of the value in the source")
    domain: list[KnobValue] = Field(default_factory=list, description="legal values, the current one included")
    kind: str = Field("constexpr", description="constexpr | launch | autotune | directive | define | cuda_launch")


class Proposal(Model):
    """A new candidate source plus the hypothesis behind it (one change)."""

    source: str = Field(description="the whole candidate file")
    parent: str | None = Field(None, description="version id of the candidate it changes, e.g. 'v3'")
    strategy: str | None = Field(None, description="strategy id the change applies")
    change: str = Field(description="the one change made, in words, e.g. 'BLOCK_SIZE 1024 -> 4096'")
    knobs: dict[str, KnobValue] = Field(default_factory=dict, description="knob values of the new source (knob search)")
    bottleneck: Category | None = None
    metric: str | None = Field(None, description="the metric key the change should move")
    expected: str | None = Field(None, description="the expected movement, e.g. 'dram_throughput_pct up'")
    hypothesis: str | None = None
    optimizer: str | None = Field(None, description="registry name of the optimizer that proposed it")
    extra: dict[str, Any] = Field(default_factory=dict, description="optimizer-specific detail (prompt id, tokens, ...)")
    failed: str | None = Field(
        None, description="why no source came of it (a transform raised or wrote source that does not parse): "
                          "the loop records it as a `proposal_failed` event and evaluates nothing")


# A `profiled` event's profiler for a version that took an ancestor's profile: `inherited:vN`.
INHERITED_PREFIX = "inherited:"


class Version(Model):
    """A candidate the loop has evaluated: `v{n}` in the run directory."""

    id: str
    round: int
    path: str = Field(description="kernel.py of this version, inside the run directory")
    parent: str | None = None
    proposal: Proposal | None = Field(None, description="None for the starting kernel v0")
    sha256: str | None = Field(None, description="sha256 of kernel.py as the loop wrote it (its `proposed` event)")
    refused: str | None = Field(
        None, description="why this version's results are not used: its kernel.py no longer holds the bytes that "
                          "were evaluated (found on replay), or it failed the final re-verification. Never correct.")
    evaluation: Evaluation | None = None
    metrics: Metrics | None = None
    diagnosis: Diagnosis | None = None
    profiler: str | None = Field(None, description="the profiler its `profiled` event names (ncu, static, ...)")
    profile_failure: Failure | None = Field(
        None, description="why it has no profile: the profile stage's failure (ncu missing or failing, a timeout, "
                          "no GPU), recorded as data in its `profiled` event; not profiled again")

    @property
    def correct(self) -> bool:
        return self.evaluation is not None and self.evaluation.passed and self.refused is None

    @property
    def median_ms(self) -> float | None:
        return self.evaluation.median_ms if self.evaluation and self.correct else None

    @property
    def profile_of(self) -> str | None:
        """The ancestor whose metrics and diagnosis this version carries instead of a profile of its own
        (its `profiled` event names `profiler: inherited:vN`, kernelopt.optimize.loop.Loop.inherit_profile);
        None when they are its own or it has none."""
        profiler = self.profiler or ""
        return profiler[len(INHERITED_PREFIX):] if profiler.startswith(INHERITED_PREFIX) else None


class Attempt(Model):
    """One entry of a lineage's history, as an optimizer sees it."""

    version: str
    parent: str | None
    change: str
    strategy: str | None = None
    outcome: Literal["faster", "slower", "same", "incorrect", "failed"]
    speedup_vs_parent: float | None = None
    failure: str | None = Field(None, description="failure reason (compile, timeout, incorrect, ...) when it failed")
    knobs: dict[str, KnobValue] = Field(default_factory=dict, description="knob values of the version (knob search)")
    structure: str | None = Field(
        None, description="hash of the version's source with knob values masked (knobs.rewrite.structure_hash)")
    transform: str | None = Field(None, description="'name@site' of the source transform that made the version")
    median_ms: float | None = None
    lesson: str | None = None
    extra: dict[str, Any] = Field(
        default_factory=dict, description="the version's Proposal.extra: what its optimizer recorded, so that an "
                                          "optimizer rebuilds its own state from the history (a resumed run)")


class OptimizeContext(Model):
    """Everything `Optimizer.propose` may use. Built by the loop; optimizers never run stages themselves."""

    problem: Problem
    round: int
    beam: list[Version] = Field(description="current best correct versions, best first")
    recommendations: dict[str, list[Recommendation]] = Field(
        default_factory=dict, description="version id -> strategies recommended for its diagnosis"
    )
    known_failures: dict[str, list[KnownFailure]] = Field(
        default_factory=dict, description="version id -> strategies that failed in similar situations (ranked later)")
    seed_knobs: dict[str, KnobValue] = Field(
        default_factory=dict, description="knob values of the fastest configuration measured for a similar situation "
                                          "(kernelopt.recommend): every optimizer that takes knobs starts there")
    history: list[Attempt] = Field(default_factory=list)
    failed_proposals: list[Proposal] = Field(
        default_factory=list, description="proposals that produced no source (Proposal.failed says why)")
    tried_sources: list[str] = Field(default_factory=list, description="sha256 of normalised sources already evaluated")
    proposals_per_member: int = 4
    budget_left: int | None = Field(None, description="evaluations left, if bounded")
    device: str | None = None
    roofline_floor_ms: float | None = Field(
        None, description="the least time the problem's inputs and outputs allow at peak DRAM bandwidth (GPU only)")
    reference_ms: float | None = Field(
        None, description="the fastest baseline measured for the problem (eager, torch.compile): a version at the "
                          "roofline still slower than it is not done (kernelopt.optimize.base.at_roofline)")
    seed: int = 0
    options: dict[str, Any] = Field(default_factory=dict, description="optimizer options from the CLI / library call")


# --- The run directory (kernelopt.rundir): its configuration and the state its events rebuild.

EventType = Literal[
    "run_started",  # the run directory was created (config in run.json)
    "resumed",  # a process took the run over again (`optimize --resume`)
    "round_started",
    "proposed",  # a version's kernel.py is on disk; it still has to be evaluated
    "proposal_failed",  # an optimizer's proposal produced no source (a transform raised); nothing evaluated
    "evaluated",  # its Evaluation (failures included)
    "profiled",  # its metrics.json / diagnosis, or the profiler's failure (reason, message)
    "promoted",  # the new beam, best first
    "baselines",  # eager / torch.compile timings
    "retimed",  # the final interleaved re-timing of the best few (A-B-B-A)
    "verified",  # the winner verified once more (its recorded bytes), at its shape and the problem's others
    "round_finished",
    "run_finished",
    "lesson",
    "experience_recorded",
    "spent",  # wall seconds a process spent on one phase: startup, baselines, profiling, search, retiming
    "rejected",  # a model reply (or a prompt) that gave no proposal, and why (the LLM optimizer)
]

# The phases a run's wall time is split into (`spent` events; the report's time table), in run order.
PHASES: tuple[str, ...] = ("startup", "baselines", "profiling", "search", "retiming")


class RunConfig(Model):
    """What a run was asked to do and where: `run.json`. Never holds environment variables or secrets."""

    problem: str = Field(description="problem file as given")
    overrides: dict[str, Any] = Field(default_factory=dict, description="--set NAME=VALUE")
    dtype: str | None = None
    kernel: str = Field(description="starting candidate file as given")
    # Every run.json records its optimizer; this default only reads a run.json written before the field was
    # (the default optimizer then was knobs). New runs take kernelopt.optimize.DEFAULT_OPTIMIZER.
    optimizer: str = "knobs"
    optimizer_options: dict[str, Any] = Field(default_factory=dict)
    budget_evals: int | None = None
    budget_minutes: float | None = None
    rounds: int = 1
    beam: int = 1
    proposals_per_member: int = 4
    seed: int = 0
    executor: str = "local"
    family: str | None = Field(None, description="problem family, recommend matches on it: declared by the problem "
                                                 "(FAMILY, its suite README's column), else derived from the kernel's "
                                                 "structural features, else 'unknown' (kernelopt.recommend.problem_family)")
    race: bool = Field(True, description="racing: a candidate clearly slower than the beam's worst stops being timed")
    isolate: Literal["worker", "candidate", "sandbox", "auto"] | None = Field(
        None, description="--isolate: how candidates are kept apart from the judge; None: the optimizer's default")
    # How each version is judged and what the run writes besides itself: a resumed run keeps these
    # (before issue 20 they were the resuming call's arguments, so v0 could get 1 trial and v1 3).
    baselines: list[str] = Field(default_factory=lambda: ["eager", "compile"])
    trials: int = 3
    timeout_s: float = 300.0
    profile: bool = Field(True, description="profile and diagnose the beam (False: --no-profile)")
    experience: bool | str = Field(
        True, description="the experience store asked and taught: True the default, a database path, False none")
    device: str | None = Field(None, description="e.g. 'NVIDIA H100 80GB HBM3' or 'cpu (Triton interpreter)'")
    env: dict[str, str | None] = Field(
        default_factory=dict, description="software summary: driver, cuda, torch, triton, python versions"
    )
    kernelopt_version: str | None = None
    git_commit: str | None = None
    created_at: str = Field(description="ISO 8601, UTC")


class RunState(Model):
    """A run as its events describe it (`RunDir.replay()`); nothing here is stored apart from the events."""

    versions: dict[str, Version] = Field(default_factory=dict, description="by id, in the order proposed")
    beam: list[str] = Field(default_factory=list, description="version ids, best first, from the last promotion")
    round: int = Field(0, description="the last round started")
    rounds_finished: int = 0
    evaluations_done: int = Field(0, description="evaluated events, failed evaluations included")
    best: str | None = Field(None, description="the winner when finished, else the head of the beam")
    baselines: dict[str, Timing] = Field(default_factory=dict, description="eager / compile")
    retimed: dict[str, TimingStats] = Field(
        default_factory=dict, description="version id -> its final interleaved re-timing"
    )
    verified: dict[str, list[ShapeCheck]] = Field(
        default_factory=dict, description="version id -> the final re-verification: its shape first, then the "
                                          "problem's SMALL and ragged shapes")
    round_best: dict[int, str | None] = Field(
        default_factory=dict, description="round -> best version id when the round finished"
    )
    lessons: list[str] = Field(default_factory=list)
    failed_proposals: list[Proposal] = Field(default_factory=list, description="from `proposal_failed` events")
    rejections: list[dict[str, Any]] = Field(
        default_factory=list, description="`rejected` events: replies that gave no proposal, with their reasons")
    experience: list[str] = Field(default_factory=list, description="version ids recorded in the experience store")
    resumes: int = 0
    spent: dict[str, float] = Field(
        default_factory=dict, description="wall seconds by phase (PHASES), summed over every process of the run")
    started_at: str | None = None
    finished_at: str | None = None
    finished: bool = False
    stop_reason: str | None = None
