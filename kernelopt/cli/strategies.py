"""`kernelopt strategies list | show | validate`: a thin shell over kernelopt.strategies."""

from __future__ import annotations

import textwrap

import click

from kernelopt.cli.common import emit, json_option
from kernelopt.models.common import CATEGORIES
from kernelopt.models.strategy import PackCheck, Strategy


@click.group("strategies")
def strategies() -> None:
    """List, show and validate strategy packs.

    Packs load from the built-in strategies/, then KERNELOPT_STRATEGY_PATH
    (os.pathsep-separated files or directories), then installed packages exposing
    the entry-point group `kernelopt.strategies`; a later pack overrides an earlier
    strategy with the same id, and the override is reported on stderr.
    """


def _report_overrides(warnings: list[str]) -> None:
    for w in warnings:
        click.echo(f"kernelopt: note: {w}", err=True)


@strategies.command("list")
@click.option("--backend", type=click.Choice(["triton", "cuda", "any"]), default=None,
              help="Only strategies for this backend (plus backend-independent ones).")
@click.option("--category", type=click.Choice(list(CATEGORIES)), default=None,
              help="Only strategies addressing this diagnosis category.")
@json_option
def list_cmd(backend: str | None, category: str | None, as_json: bool) -> None:
    """List loaded strategies (id, backend, categories, pack, title)."""
    from kernelopt.strategies import list_strategies

    found, loaded = list_strategies(backend, category)
    _report_overrides(loaded.warnings)

    def human(items: list[Strategy]) -> str:
        if not items:
            return "no strategies match"
        width = max(len(s.id) for s in items)
        rows = []
        for s in items:
            mark = " (anti-pattern)" if s.anti_pattern else ""
            rows.append(f"{s.id:<{width}}  {s.backend:<6}  {','.join(s.categories):<28}  {s.pack}  {s.title}{mark}")
        return "\n".join(rows) + f"\n{len(items)} strategies"

    emit(found, as_json, human)


@strategies.command("show")
@click.argument("strategy_id", metavar="ID")
@json_option
def show_cmd(strategy_id: str, as_json: bool) -> None:
    """Show one strategy in full."""
    from kernelopt.strategies import get_strategy

    def human(s: Strategy) -> str:
        lines = [f"{s.id}: {s.title}" + ("  [anti-pattern]" if s.anti_pattern else ""),
                 f"  pack: {s.pack}   backend: {s.backend}   categories: {', '.join(s.categories)}"]
        if s.subcauses:
            lines.append(f"  subcauses: {', '.join(s.subcauses)}")
        for label, value in (("when", s.when), ("avoid_when", s.avoid_when)):
            if value:
                lines.append(f"  {label}: {value}")
        for label, value in (("expect", s.expect), ("pitfall", s.pitfall)):
            if value:
                lines.append(f"  {label}:")
                lines.append(textwrap.indent(textwrap.fill(value, 88), "    "))
        if s.knobs:
            lines.append("  knobs:")
            for k in s.knobs:
                moves = f"values {k.values}" if k.values is not None else f"scale {k.scale}"
                lines.append(f"    {k.param}: {moves}")
        if s.transform:
            t = s.transform
            lines.append(f"  transform: {t.name}")
            if t.params:
                lines.append("    params: " + ", ".join(f"{k}={v!r}" for k, v in t.params.items()))
            lines.append(f"    requires: {', '.join(t.requires) if t.requires else '(nothing)'}")
        if s.change:
            lines.append("  change:")
            lines.append(textwrap.indent(s.change.rstrip(), "    "))
        if s.references:
            lines.append("  references:")
            lines.extend(f"    - {r}" for r in s.references)
        return "\n".join(lines)

    emit(get_strategy(strategy_id), as_json, human)


@strategies.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@json_option
def validate_cmd(paths: tuple[str, ...], as_json: bool) -> None:
    """Validate pack files (or directories of *.yaml): exit 0 if all are valid, else 2.

    Each error is printed as `file:line: field: message`.
    """
    from kernelopt.strategies import validate_packs

    reports = validate_packs(paths)

    def human(items: list[PackCheck]) -> str:
        out = []
        for r in items:
            if r.ok:
                out.append(f"{r.path}: ok ({r.pack}, {r.strategies} strategies)")
            out.extend(r.errors)
            out.extend(f"warning: {w}" for w in r.warnings)
        return "\n".join(out)

    emit(reports, as_json, human)
    if not all(r.ok for r in reports):
        click.get_current_context().exit(2)
