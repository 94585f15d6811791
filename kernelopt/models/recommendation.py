"""Recommendation: a strategy picked for a diagnosed situation, with its reason."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kernelopt.models.common import Model


class Recommendation(Model):
    strategy: str = Field(description="strategy id")
    title: str | None = None
    score: float
    reason: str
    source: Literal["pack", "experience", "both"] = "pack"
    category: str | None = None
    records: list[str] = Field(default_factory=list, description="supporting experience record ids")
    parts: dict[str, float] = Field(default_factory=dict, description="score components (--explain)")
