"""The recommend stage's models: the situation asked about and what it answers (kernelopt.recommend)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kernelopt.models.common import Backend, Category, Model
from kernelopt.models.diagnosis import Diagnosis


class Situation(Model):
    """What `kernelopt.recommend.recommend` is asked about: one kernel where it stands now."""

    kernel: str = Field(description="kernel name / op family, free text (the problem's name in a run)")
    backend: Backend | None = None
    chip: str | None = Field(None, description="e.g. sm_90")
    device: str | None = Field(None, description="where it runs, e.g. 'cuda:0 (NVIDIA H100 80GB HBM3)', 'cpu (Triton interpreter)'")
    dtype: str | None = None
    family: str | None = Field(None, description="problem family, e.g. 'norm' (the suite README's column)")
    shape_class: str | None = Field(None, description="order of magnitude of the problem size (kernelopt.recommend.shape_class)")
    bottleneck: Category | None = None
    stall: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    diagnosis: Diagnosis | None = Field(None, description="the whole diagnosis, when there is one: the packs rank by all its bottlenecks")
    features: list[str] = Field(default_factory=list, description="structural features of the kernel's source "
                                                                  "(what transforms' preconditions read)")
    exclude_sources: list[str] = Field(default_factory=list, description="record sources to leave out, by prefix "
                                                                         "(a run's own records)")


class Recommendation(Model):
    strategy: str = Field(description="strategy id (a pack entry's, or a generic one such as knobs.coordinate)")
    title: str | None = None
    score: float
    reason: str
    source: Literal["pack", "experience", "both"] = "pack"
    category: str | None = None
    transform: str | None = Field(None, description="the transform the pack entry names, if any")
    generic: bool = Field(False, description="an optimizer's own move (knobs.coordinate, ...), not a pack entry")
    records: list[str] = Field(default_factory=list, description="supporting experience record ids")
    failures: list[str] = Field(default_factory=list, description="records where it failed in a similar situation")
    parts: dict[str, float] = Field(default_factory=dict, description="score components (--explain)")


class KnownFailure(Model):
    strategy: str
    records: list[str] = Field(default_factory=list)
    outcomes: dict[str, int] = Field(default_factory=dict)
    worst_speedup: float | None = None
    similarity: float | None = Field(None, description="relevance of the closest failed record; None for a pack anti-pattern")
    reason: str
    source: Literal["experience", "pack"] = "experience"


class Seed(Model):
    """Where to start: the fastest configuration measured for a similar situation."""

    knobs: dict[str, Any] = Field(description="knob values of that configuration")
    record: str = Field(description="the experience record that measured it")
    kernel: str
    time_ms: float = Field(description="its measured time (time after)")
    speedup: float | None = Field(None, description="over the starting kernel of its run, when known")
    similarity: float
    reason: str


class Advice(Model):
    """`recommend`'s answer: strategies ranked best first, the failures to avoid, and a seed."""

    recommendations: list[Recommendation] = Field(default_factory=list)
    known_failures: list[KnownFailure] = Field(default_factory=list)
    seed: Seed | None = None
    retrieval: Literal["embedding", "bm25", "structured"] = "embedding"
    notes: list[str] = Field(default_factory=list)

    def strategy_ids(self) -> list[str]:
        return [r.strategy for r in self.recommendations]

    def transforms(self) -> list[tuple[str, str]]:
        """(strategy id, transform name) of the ranked strategies that carry a transform, best first."""
        return [(r.strategy, r.transform) for r in self.recommendations if r.transform]


# The name this answer had when it came from the experience store.
ExperienceAnswer = Advice
