"""What `kernelopt suite run` records and reports (`kernelopt.suite.run_suite`).

One `ProblemResult` per problem is appended to OUT/suite.jsonl the moment its optimize
run ends (the suite's resume state); `SuiteResult` is the whole table with fast_p and
the geometric means, written to OUT/suite_result.json and rendered as Markdown.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kernelopt.models.common import Model

# The references a speedup is taken against: the problem's eager PyTorch model, its
# torch.compile'd model (both timed by the engine), and the problem's starting kernel.
BaselineName = Literal["eager", "compile", "start"]
BASELINES: tuple[str, ...] = ("eager", "compile", "start")


class ProblemResult(Model):
    """One suite problem after its optimize run (or the reason it has none)."""

    name: str
    family: str | None = Field(None, description="op family, from the suite README's table")
    correct: bool = Field(description="a correct version exists (the starting kernel passed; the best is correct)")
    start_ms: float | None = Field(None, description="the starting kernel's median")
    best_ms: float | None = Field(None, description="the best correct version's median")
    best_version: str | None = None
    eager_ms: float | None = Field(None, description="eager PyTorch median (engine baseline); None when not timed")
    compile_ms: float | None = Field(None, description="torch.compile median (engine baseline); None when not timed")
    baseline_errors: dict[str, str] = Field(default_factory=dict, description="why a baseline has no time")
    speedup_vs_start: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    retimed: bool = Field(False, description="start and best come from the final interleaved re-timing")
    bytes: float | None = Field(None, description="the problem's BYTES at the shape run")
    flops: float | None = Field(None, description="the problem's FLOPS at the shape run")
    precision: str | None = Field(None, description="the compute ceiling FLOPS is held against (PRECISION)")
    roofline_fraction: float | None = Field(
        None, description="max(BYTES/peak bandwidth, FLOPS/peak FLOP/s) / best time; None without a known device peak")
    roofline_bound: Literal["dram", "compute"] | None = Field(None, description="which term of the bound is larger")
    roofline_ceilings: str | None = Field(None, description="where the peaks came from: measured cache or datasheet")
    device: str | None = None
    interpreter: bool = False
    time_label: str | None = Field(None, description="'GPU time' or 'interpreter wall time'")
    overrides: dict[str, object] = Field(default_factory=dict, description="constants overridden (the SMALL shape)")
    run_dir: str
    evaluations: int = Field(0, description="evaluations in the run, failed ones included")
    evaluations_run: int = Field(0, description="of those, the ones this suite process ran (the rest before a resume)")
    wall_s: float = Field(0.0, description="seconds the suite process that finished it spent on the problem")
    spent: dict[str, float] = Field(
        default_factory=dict,
        description="the run's wall seconds by phase: startup, baselines, profiling, search, retiming (every process)")
    git_commit: str | None = Field(None, description="the commit of the suite process that finished it")
    resumed: bool = Field(False, description="its run was continued from an interrupted one")
    stop_reason: str | None = None
    failure: str | None = Field(None, description="why there is no correct version (one line)")

    def speedup(self, baseline: str) -> float | None:
        return {"eager": self.speedup_vs_eager, "compile": self.speedup_vs_compile,
                "start": self.speedup_vs_start}[baseline]

    def baseline_ms(self, baseline: str) -> float | None:
        return {"eager": self.eager_ms, "compile": self.compile_ms, "start": self.start_ms}[baseline]


class FastP(Model):
    """fast_p at one threshold against each baseline; None = that baseline was never timed."""

    p: float
    eager: float | None = None
    compile: float | None = None
    start: float | None = None


class SuiteResult(Model):
    suite_dir: str
    out_dir: str
    optimizer: str
    budget_minutes: float | None = None
    budget_evals: int | None = None
    small: bool = Field(False, description="problems ran at their SMALL shapes (CPU tests and the demo)")
    parallel_problems: bool = False
    devices: list[str] = Field(default_factory=list, description="devices the problems were spread over, if given")
    device: str | None = Field(None, description="the device the problems' evaluations report")
    interpreter: bool = False
    time_label: str = Field("GPU time", description="'GPU time' or 'interpreter wall time'")
    problems: list[ProblemResult] = Field(default_factory=list, description="in the order asked")
    missing: list[str] = Field(default_factory=list, description="problems asked for with no result yet")
    complete: bool = Field(False, description="every problem asked for has a result")
    fast_p: list[FastP] = Field(default_factory=list)
    unmeasured: dict[str, int] = Field(
        default_factory=dict, description="baseline -> correct problems without a time for it (counted as not faster)")
    geomean: dict[str, float | None] = Field(
        default_factory=dict, description="baseline -> geometric-mean speedup over correct problems with that time")
    mean_roofline_fraction: float | None = None
    wall_s: float = Field(0.0, description="seconds this suite process ran")
    evaluations_run: int = Field(0, description="evaluations this suite process ran")
    problems_wall_s: float = Field(
        0.0, description="sum of the rows' wall_s: every call of a resumed run, less the time of calls cut off mid-problem")
    problems_evaluations: int = Field(0, description="sum of the rows' evaluations, over every call")
    commits: list[str] = Field(default_factory=list, description="the distinct commits the rows were finished at")
    evals_per_minute: float | None = Field(None, description="evaluations_run / wall_s * 60 (the scaling figure)")
    kernelopt_version: str | None = None
    git_commit: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    files: list[str] = Field(default_factory=list, description="what the report wrote")
