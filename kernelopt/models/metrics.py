"""Metrics: what a Profiler (or an importer) returns and the classifier reads.

Metric values are keyed by the catalog's short keys (see `kernelopt.profile.catalog`);
the raw ncu names are kept beside them so nothing is lost or relabelled silently.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kernelopt.models.common import Model
from kernelopt.models.harness import Failure


class MetricValue(Model):
    key: str | None = Field(None, description="catalog key, None when the metric is not in the catalog")
    name: str = Field(description="ncu metric name as collected")
    value: float | str | None
    unit: str | None = None


class RuleResult(Model):
    """One Nsight Compute guided-analysis rule result."""

    rule: str = Field(description="rule identifier, e.g. 'SOLBottleneck'")
    section: str | None = None
    type: Literal["OPT", "INF", "WRN", "ERR", "OK"] = "INF"
    message: str
    est_speedup_pct: float | None = None
    speedup_type: Literal["local", "global"] | None = None
    focus_metrics: list[dict[str, Any]] = Field(default_factory=list)


class StaticResources(Model):
    """Compile-time resource report: no hardware counters needed."""

    kernel: str
    source: Literal["triton", "ptxas"]
    registers_per_thread: int | None = None
    spill_bytes: int | None = None
    shared_mem_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    threads_per_block: int | None = None
    grid: list[int] | None = None


class KernelMetrics(Model):
    name: str
    index: int = 0
    grid: list[int] | None = None
    block: list[int] | None = None
    duration_ns: float | None = None
    time_fraction: float | None = Field(None, description="share of the candidate's profiled GPU time")
    dominant: bool = False
    metrics: dict[str, MetricValue] = Field(default_factory=dict, description="by catalog key")
    raw: dict[str, MetricValue] = Field(default_factory=dict, description="by ncu name, metrics outside the catalog")
    rules: list[RuleResult] = Field(default_factory=list)


class Roofline(Model):
    device: str
    peak_dram_bytes_per_s: float | None = None
    peak_flops_per_s: float | None = None
    precision: str | None = None
    measured: bool = False
    sm_clock_scale: float | None = Field(
        None, description="profiled SM clock / max SM clock, applied to datasheet FLOP peaks (ncu locks base clocks)"
    )
    achieved_bytes_per_s: float | None = None
    achieved_flops_per_s: float | None = None
    dram_fraction: float | None = None
    compute_fraction: float | None = None
    tensor_fraction: float | None = Field(
        None,
        description="tensor-core pipe utilisation ncu measured (pipe_tensor_pct / 100): the distance to the "
        "tensor roofline; tensor FLOPs themselves are not counted",
    )


class Metrics(Model):
    source: Literal["ncu", "ncu-rep", "ncu-csv", "json", "static"]
    device: str | None = None
    kernels: list[KernelMetrics] = Field(default_factory=list)
    combined: dict[str, float] = Field(
        default_factory=dict, description="duration-weighted view over all kernels, by catalog key"
    )
    static: list[StaticResources] = Field(default_factory=list)
    roofline: Roofline | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    def values(self) -> dict[str, float]:
        """The numeric view the classifier reads: `combined` if present, else the dominant kernel."""
        if self.combined:
            return dict(self.combined)
        kernel = next((k for k in self.kernels if k.dominant), self.kernels[0] if self.kernels else None)
        if kernel is None:
            return {}
        return {
            key: float(mv.value)
            for key, mv in kernel.metrics.items()
            if isinstance(mv.value, (int, float))
        }

    def rules(self) -> list[RuleResult]:
        """Rule results of the dominant kernel(s)."""
        dominant = [k for k in self.kernels if k.dominant] or self.kernels[:1]
        return [r for k in dominant for r in k.rules]


class ProfileResult(Model):
    """One candidate through the profile stage (`kernelopt.profile.profile_result`): its metrics, or
    why there are none. A profiler that fails (ncu missing or failing, a timeout, no GPU, the
    candidate crashing under ncu) is data here, in the engine's one failure taxonomy, like a
    verification or timing failure in an `Evaluation`: the run records it and goes on."""

    profiler: str = Field(description="which profiler was asked: 'ncu', 'static' or a registered third-party one")
    metrics: Metrics | None = None
    failure: Failure | None = Field(None, description="why there are no metrics (stage 'profile'); None when there are")
    notes: list[str] = Field(default_factory=list, description="what limits the profile, e.g. static resources only")
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None and self.metrics is not None
