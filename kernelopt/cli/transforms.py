"""`kernelopt transforms`: a thin shell over kernelopt.optimize.transforms.survey."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kernelopt.cli.common import emit, json_option

if TYPE_CHECKING:
    from kernelopt.models.transform import SiteReport


def render_survey(reports: list["SiteReport"]) -> str:
    if not reports:
        return "no transforms registered"
    rows = [(r.transform, r.site or "-", "yes" if r.applies else "no",
             ", ".join(f"{k}={v}" for k, v in r.params.items()) if r.applies else "", r.reason) for r in reports]
    head = ("transform", "site", "applies", "params", "reason")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[4] for r in [head, *rows]]
    hits = sum(1 for r in reports if r.applies)
    lines.append(f"{hits} site(s) where a transform applies; apply one with --apply NAME@SITE -o NEW.py")
    return "\n".join(lines)


def _params(pairs: tuple[str, ...]) -> dict[str, str]:
    from kernelopt.errors import BadInput

    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"-p {pair!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


@click.command("transforms")
@click.argument("candidate", metavar="CANDIDATE", type=click.Path(dir_okay=False))
@click.option("--apply", "target", metavar="NAME[@SITE]", default=None,
              help="Rewrite CANDIDATE with this transform (at SITE; needed when it applies at several).")
@click.option("-p", "--param", "params", multiple=True, metavar="K=V", help="A transform parameter (repeatable).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Where --apply writes the rewritten kernel.")
@json_option
def transforms(candidate: str, target: str | None, params: tuple[str, ...], output: str | None, as_json: bool) -> None:
    """List which source transforms apply to CANDIDATE, where, and why the others do not.

    Read statically (never run). `--json`: a list of {transform, site, applies, reason,
    params, kernel, line}. With `--apply NAME[@SITE] [-p K=V ...] -o NEW.py` the kernel
    rewritten by that transform is written to NEW.py (verify it with `kernelopt check`);
    its new parameters are knobs (`kernelopt knobs NEW.py`). See docs/transforms.md.
    """
    from pathlib import Path

    from kernelopt.errors import BadInput
    from kernelopt.files import read_text

    source = read_text(candidate, "candidate")
    if target is None:
        if params or output:
            raise BadInput("-p and -o go with --apply NAME[@SITE]")
        from kernelopt.optimize.transforms.survey import survey

        emit(survey(source, candidate), as_json, render_survey)
        return
    if output is None:
        raise BadInput("--apply needs -o NEW.py (where the rewritten kernel goes)")
    from kernelopt.optimize.transforms.survey import apply_named, parse_target

    name, site = parse_target(target)
    new, report, used = apply_named(source, name, site, _params(params), candidate)
    from kernelopt.rundir import atomic_write

    atomic_write(Path(output), new)
    result: dict[str, Any] = {"transform": name, "site": report.site, "params": used, "output": output,
                              "reason": report.reason}
    emit(result, as_json, lambda r: f"{output}: {name}@{report.site} applied "
         f"({', '.join(f'{k}={v}' for k, v in used.items()) or 'no parameters'}); verify it with kernelopt check")
