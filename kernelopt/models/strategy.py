"""Strategy packs: the optimization playbook as data.

A pack is YAML validated by `StrategyPack`; the recommender, the knob optimizer and
the LLM prompts all read the same `Strategy` objects.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from kernelopt.models.common import Category, Model

StrategyBackend = Literal["triton", "cuda", "any"]

_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# A knob parameter is a launch/meta parameter name, optionally a glob (BLOCK_*) so one
# strategy can address every block dimension of a kernel.
_PARAM = re.compile(r"^[A-Za-z_*][A-Za-z0-9_*]*$")


def _kebab(v: str) -> str:
    if not _KEBAB.match(v):
        raise ValueError(f"{v!r} is not kebab-case (lowercase letters, digits, single dashes)")
    return v


KebabName = Annotated[str, AfterValidator(_kebab)]

# Subcauses are the classifier's snake_case tags (e.g. uncoalesced_access, grid_too_small)
# and warp-stall names (long_scoreboard, barrier): one vocabulary with the diagnosis.
_SNAKE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")


def _snake(v: str) -> str:
    if not _SNAKE.match(v):
        raise ValueError(f"{v!r} is not snake_case (the diagnosis subcause vocabulary)")
    return v


class Knob(Model):
    """A move the knob optimizer can apply on its own: try these values, or scale the current one."""

    param: str = Field(description="meta/launch parameter, e.g. num_warps or a glob like BLOCK_*")
    values: list[int | float | str | bool] | None = Field(None, description="absolute values to try")
    scale: list[float] | None = Field(None, description="factors applied to the current value")

    @field_validator("param")
    @classmethod
    def _param_name(cls, v: str) -> str:
        if not _PARAM.match(v):
            raise ValueError(f"{v!r} is not a parameter name or glob (letters, digits, _ and *)")
        return v

    @field_validator("scale")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(f <= 0 for f in v):
            raise ValueError("scale factors must be > 0")
        return v

    @model_validator(mode="after")
    def _one_form(self) -> Knob:
        if (self.values is None) == (self.scale is None):
            raise ValueError("give exactly one of `values` or `scale`")
        if not (self.values or self.scale):
            raise ValueError("`values`/`scale` must not be empty")
        return self


# A transform precondition names a structural feature of the source (kernelopt.source.FEATURES),
# optionally negated with a leading '!' (the feature must be absent).
_FEATURE_REQ = re.compile(r"^!?[a-z0-9]+(_[a-z0-9]+)*$")

TransformParamValue = int | float | str | bool | None


class StrategyTransform(Model):
    """The executable side of a strategy: a registered source transform, its parameters, and
    the structure it needs in the source (checked statically, beside the metric conditions)."""

    name: str = Field(description="registry name of the transform (kernelopt transforms lists them)")
    params: dict[str, TransformParamValue] = Field(
        default_factory=dict, description="values for the transform's parameters; tried first as knob hints"
    )
    requires: list[str] = Field(
        default_factory=list,
        description="structural features the source must have (kernelopt.source.FEATURES); '!name' = must not",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SNAKE.match(v):
            raise ValueError(f"{v!r} is not a transform name (snake_case)")
        return v

    @field_validator("requires")
    @classmethod
    def _features(cls, v: list[str]) -> list[str]:
        from kernelopt.source import FEATURES

        for item in v:
            if not _FEATURE_REQ.match(item) or item.lstrip("!") not in FEATURES:
                raise ValueError(f"{item!r} is not a source feature (known: {', '.join(sorted(FEATURES))})")
        return v

    def holds(self, features: set[str]) -> tuple[bool, str]:
        """(whether `requires` holds for a source with these features, the first reason it does not)."""
        for item in self.requires:
            name = item.lstrip("!")
            if item.startswith("!") and name in features:
                return False, f"requires no {name}"
            if not item.startswith("!") and name not in features:
                return False, f"requires {name}"
        return True, "requires " + (", ".join(self.requires) if self.requires else "nothing")


class Strategy(Model):
    id: KebabName = Field(description="unique, kebab-case")
    title: str
    backend: StrategyBackend
    categories: list[Category] = Field(min_length=1)
    subcauses: list[Annotated[str, AfterValidator(_snake)]] = Field(default_factory=list)
    when: str | None = Field(None, description="precondition over metric keys; must hold (or be unknown)")
    avoid_when: str | None = Field(None, description="condition over metric keys under which this hurts")
    pitfall: str | None = Field(None, description="prose: when this does not help or backfires")
    anti_pattern: bool = Field(False, description="an entry that warns against a change rather than proposes it")
    expect: str | None = Field(None, description="what should move in the profile (metric keys)")
    knobs: list[Knob] = Field(default_factory=list)
    change: str | None = Field(None, description="code change, with a short before/after sketch")
    transform: StrategyTransform | None = Field(None, description="a source transform that makes the change")
    references: list[str] = Field(default_factory=list)
    # Set by the loader, not by the YAML author.
    pack: str | None = None

    @field_validator("title")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @model_validator(mode="after")
    def _has_change(self) -> Strategy:
        if not self.knobs and not self.transform and not (self.change and self.change.strip()):
            raise ValueError(
                "a strategy needs `change` (code change), `knobs` (moves the optimizer applies) or `transform`"
            )
        return self


class PackInfo(Model):
    name: KebabName
    version: int | str = 1
    description: str | None = None


class StrategyPack(Model):
    """One pack file. Ids unique within a pack are checked by the loader (it knows their lines)."""

    pack: PackInfo
    strategies: list[Strategy] = Field(default_factory=list)
    # Set by the loader: where the pack came from ("builtin", "path", "entry-point:<name>") and its file.
    origin: str | None = None
    path: str | None = None


class Override(Model):
    """A later pack replaced a strategy of an earlier one (reported, never silent)."""

    strategy: str
    old_pack: str
    new_pack: str
    old_path: str | None = None
    new_path: str | None = None


class StrategySet(Model):
    """Every loaded strategy after overrides, the packs in load order, and what was overridden."""

    packs: list[StrategyPack] = Field(default_factory=list)
    strategies: dict[str, Strategy] = Field(default_factory=dict)
    overrides: list[Override] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class PackCheck(Model):
    """Result of validating one pack file (`kernelopt strategies validate`)."""

    path: str
    ok: bool
    pack: str | None = None
    strategies: int = 0
    errors: list[str] = Field(default_factory=list, description="'file:line: field: message'")
    warnings: list[str] = Field(default_factory=list)
