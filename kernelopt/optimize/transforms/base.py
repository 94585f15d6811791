"""The Transform protocol: a source rewrite that changes a kernel's structure, not its meaning.

A transform reads a candidate's source (never runs it), says where it applies - a list of
sites, and for every kernel where it does not apply a one-line reason - and rewrites one
site with given parameters. The result is an ordinary candidate whose new parameters are
knobs (`kernelopt knobs` finds them), so the knob search tunes what a transform made.
Verification judges every result like any proposal: a transform that is wrong for some
kernel costs one failed evaluation, never a wrong answer.

Read and rewrite source through `kernelopt.source` (aliases, @triton.jit discovery,
bindings, literal resolution, byte-preserving edits) - the one set of primitives the
knob discovery uses too.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam


class TransformError(Exception):
    """A transform cannot rewrite this site (raised by `apply`); the optimizer records the reason."""


@runtime_checkable
class Transform(Protocol):
    name: str  # registry name, snake_case, e.g. 'rows_per_program'
    backend: str  # 'triton' | 'cuda'
    summary: str  # one line: what the rewrite does
    requires: list[str]  # structural features of the source it needs (kernelopt.source.features)
    params: list[TransformParam]  # what apply() takes; each becomes a knob of the result

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        """Where it applies (applies=True, with a site id) and, for each kernel it does not
        apply to, applies=False with a one-line reason. Never raises on odd source: a file it
        cannot read is one report with applies=False."""
        ...

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        """The whole rewritten source. Raises TransformError when this site cannot be rewritten."""
        ...


def resolve_params(transform: Transform, given: dict[str, Any]) -> dict[str, ParamValue]:
    """Defaults overlaid with `given`, checked against the declared parameters (BadInput)."""
    declared = {p.name: p for p in transform.params}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(sorted(declared)) or "none"
        raise BadInput(f"transform {transform.name}: unknown parameter {unknown[0]!r} (known: {known})")
    out: dict[str, ParamValue] = {name: p.default for name, p in declared.items()}
    for name, value in given.items():
        p = declared[name]
        if isinstance(value, str) and not isinstance(p.default, str):
            value = _coerce(value, p, transform.name)
        if p.domain and value not in p.domain:
            raise BadInput(f"transform {transform.name}: {name}={value!r} is outside its domain {p.domain}")
        out[name] = value
    return out


def _coerce(text: str, p: TransformParam, transform: str) -> ParamValue:
    """A value typed on the command line (-p K=V) as the parameter's type."""
    kind = type(p.default) if p.default is not None else type(p.domain[0]) if p.domain else str
    try:
        if kind is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind in (int, float):
            return kind(text)
    except ValueError:
        raise BadInput(f"transform {transform}: {p.name}={text!r} is not a {kind.__name__}") from None
    return text
