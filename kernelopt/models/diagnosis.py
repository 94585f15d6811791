"""Diagnosis: the classifier's ranked bottlenecks, with evidence."""

from __future__ import annotations

from pydantic import Field

from kernelopt.models.common import Category, Model
from kernelopt.models.metrics import RuleResult


class Evidence(Model):
    key: str
    value: float | None
    threshold: float | None = None
    op: str | None = Field(None, description="comparison that held, e.g. '>='")
    label: str | None = None


class Bottleneck(Model):
    category: Category
    subcause: str | None = None
    label: str | None = Field(None, description="the rule pack's own label, e.g. 'underutilized' (maps onto category)")
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: list[Evidence] = Field(default_factory=list)
    message: str
    rule_id: str
    strategies: list[str] = Field(default_factory=list)
    headroom_pct: float | None = Field(None, description="100 - utilisation of the limiting unit")
    near_roofline: bool = False
    missing_metrics: list[str] = Field(default_factory=list)
    ncu_rules: list[RuleResult] = Field(default_factory=list)


class Diagnosis(Model):
    primary: Bottleneck | None
    bottlenecks: list[Bottleneck] = Field(default_factory=list)
    headroom: dict[str, float] = Field(default_factory=dict)
    ncu_rules: list[RuleResult] = Field(default_factory=list)
    rules_pack: str
    kernel: str | None = None
    missing_metrics: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    undetermined: list[str] = Field(
        default_factory=list, description="rules that could not be decided because metrics they need are missing"
    )
