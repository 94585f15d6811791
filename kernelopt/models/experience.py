"""Experience: recorded optimization outcomes and what the store answers with."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import Field

from kernelopt.models.common import Backend, Category, Model
from kernelopt.models.recommendation import Advice, ExperienceAnswer, KnownFailure, Recommendation, Situation

Outcome = Literal["success", "neutral", "failure", "incorrect"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ExperienceRecord(Model):
    """One tried change and what it did. Ids are UUIDs and never change (not on merge, not on import)."""

    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    created_at: str = Field(default_factory=_now)
    kernel: str = Field(description="kernel name / op family, free text")
    backend: Backend | None = None
    chip: str | None = Field(None, description="e.g. sm_90")
    device: str | None = Field(None, description="device name, e.g. NVIDIA H100 80GB HBM3")
    dims: dict[str, Any] | str | None = Field(None, description="problem signature: shapes")
    dtype: str | None = None
    family: str | None = Field(None, description="problem family, e.g. 'norm'")
    features: list[str] = Field(default_factory=list, description="structural features of the kernel before the change "
                                                                  "(kernelopt.source.features)")
    bottleneck: Category | None = Field(None, description="diagnosis category before the change")
    stall: str | None = Field(None, description="sub-cause / dominant stall before the change")
    metrics_before: dict[str, float] = Field(default_factory=dict)
    metrics_after: dict[str, float] = Field(default_factory=dict)
    strategies: list[str] = Field(default_factory=list, description="strategy ids applied")
    params: dict[str, Any] = Field(default_factory=dict, description="strategy parameters, e.g. BLOCK=128")
    hypothesis: str | None = Field(None, description="the one-variable change")
    rationale: str | None = None
    expected: str | None = None
    outcome: Outcome | None = None
    correct: bool | None = None
    speedup: float | None = Field(None, gt=0, description="time_before / time_after")
    time_before_ms: float | None = Field(None, ge=0)
    time_after_ms: float | None = Field(None, ge=0)
    notes: str | None = None
    source: str | None = Field(None, description="run id, 'curated', 'import:<file>', ...")
    merged_from: list[str] = Field(default_factory=list, description="ids folded into this one by merge")
    merged_into: str | None = Field(None, description="set when merge folded this record into another")


class SearchHit(Model):
    record: ExperienceRecord
    score: float
    seed: bool = False


class ExperienceStats(Model):
    total: int
    seed_total: int = 0
    by_outcome: dict[str, int] = Field(default_factory=dict)
    by_bottleneck: dict[str, int] = Field(default_factory=dict)
    by_backend: dict[str, int] = Field(default_factory=dict)
    success_rate_by_bottleneck: dict[str, float] = Field(default_factory=dict)
    top_strategies: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    unindexed: int = 0
    schema_version: int
    path: str


__all__ = ["Advice", "ExperienceAnswer", "ExperienceRecord", "ExperienceStats", "KnownFailure", "Outcome",
           "Recommendation", "SearchHit", "Situation"]
