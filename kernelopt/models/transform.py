"""What source transforms declare and report: their parameters and where they apply."""

from __future__ import annotations

from pydantic import Field

from kernelopt.models.common import Model

ParamValue = int | float | str | bool | None


class TransformParam(Model):
    """A parameter a transform takes; once applied it is a knob of the new kernel (tuned after)."""

    name: str = Field(description="e.g. 'ROWS_PER_PROGRAM'")
    default: ParamValue = Field(description="the value used when none is given")
    domain: list[ParamValue] = Field(default_factory=list, description="legal values; empty = any of default's type")
    doc: str = ""


class SiteReport(Model):
    """One answer of `Transform.sites`: it applies at `site`, or it does not, and why.

    `site` is a short string id (e.g. the kernel's name, or 'kernel:line') that
    `kernelopt transforms --apply NAME@SITE` and `Transform.apply` accept."""

    transform: str
    site: str | None = Field(None, description="id of the place it applies; None when it declines the whole file")
    applies: bool
    reason: str = Field(description="one line: what it would change, or why it does not apply")
    params: dict[str, ParamValue] = Field(default_factory=dict, description="the defaults apply() would use here")
    kernel: str | None = Field(None, description="the @triton.jit function (or CUDA kernel) concerned")
    line: int | None = None
