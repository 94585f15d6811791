"""Which transforms apply to a kernel, and applying one by name (`kernelopt transforms`).

`survey` asks every registered transform where it applies; a transform that cannot be
loaded, whose precondition (`requires`) does not hold, or that raises inside `sites()`
is reported as not applying, with the reason, never as a traceback. `apply_named` rewrites
one site and checks that the result parses. The strategies optimizer and the CLI both
go through these two calls.
"""

from __future__ import annotations

import ast
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport
from kernelopt.optimize.transforms import Transform, TransformError, available, get_transform, resolve_params


class TransformFailed(BadInput):
    """A transform raised, declined the site, or produced source that does not parse."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def missing_features(transform: Transform, features: set[str]) -> list[str]:
    """The features in `transform.requires` this source lacks ('!x' entries: present when they must not be)."""
    out = []
    for item in getattr(transform, "requires", None) or []:
        name = item.lstrip("!")
        if (name in features) == item.startswith("!"):
            out.append(item)
    return out


def sites_of(transform: Transform, source: str, path: str = "<candidate>",
             features: set[str] | None = None) -> list[SiteReport]:
    """`transform.sites(source)`, made safe: its precondition first, every exception a declining report,
    each report stamped with the transform's name and its parameter defaults."""
    name = getattr(transform, "name", "?")
    if features is None:
        features = _features(source, path)
    missing = missing_features(transform, features)
    if missing:
        from kernelopt.source import FEATURES

        first = missing[0]
        what = FEATURES.get(first.lstrip("!"), first)
        why = f"not applicable: {what}" if first.startswith("!") else f"needs {first} ({what})"
        return [SiteReport(transform=name, applies=False, reason=why)]
    try:
        reports = list(transform.sites(source, path))
    except Exception as exc:  # noqa: BLE001 - plug-in code: whatever it raised is its reason
        return [SiteReport(transform=name, applies=False, reason=f"sites() raised {_one_line(exc)}")]
    if not reports:
        return [SiteReport(transform=name, applies=False, reason="no site found")]
    try:
        defaults = resolve_params(transform, {})
    except BadInput:
        defaults = {}
    out = []
    for r in reports:
        if not isinstance(r, SiteReport):
            return [SiteReport(transform=name, applies=False, reason=f"sites() returned {type(r).__name__}, "
                               "not SiteReport")]
        update: dict[str, Any] = {"transform": name}
        if r.applies:
            update["params"] = {**defaults, **r.params}
        out.append(r.model_copy(update=update))
    return out


def _features(source: str, path: str) -> set[str]:
    from kernelopt.source import features

    try:
        return features(source, path)
    except Exception:  # noqa: BLE001 - an unreadable file has no features; each transform then says why
        return set()


def survey(source: str, path: str = "<candidate>", names: list[str] | None = None) -> list[SiteReport]:
    """Every registered transform (or those `names`), where it applies and why it does not; sorted by
    transform, applying sites first."""
    features = _features(source, path)
    out: list[SiteReport] = []
    for name in sorted(names if names is not None else available()):
        try:
            transform = get_transform(name)
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is one declining line
            out.append(SiteReport(transform=name, applies=False, reason=f"cannot load: {_one_line(exc)}"))
            continue
        reports = sites_of(transform, source, path, features)
        out.extend(sorted(reports, key=lambda r: not r.applies))
    return out


def parse_target(target: str) -> tuple[str, str | None]:
    """'NAME@SITE' -> (NAME, SITE); 'NAME' -> (NAME, None)."""
    name, sep, site = target.partition("@")
    if not name.strip() or (sep and not site.strip()):
        raise BadInput(f"--apply {target!r}: expected NAME or NAME@SITE")
    return name.strip(), (site.strip() if sep else None)


def apply_named(source: str, name: str, site: str | None = None, params: dict[str, Any] | None = None,
                path: str = "<candidate>") -> tuple[str, SiteReport, dict[str, ParamValue]]:
    """Rewrite `source` with transform `name` at `site` (the only applying site when None).

    Returns (new source, the site's report, the parameters used). BadInput for an unknown
    transform or parameter; TransformFailed when the transform declines the site, raises,
    or writes source that does not parse."""
    transform = get_transform(name)
    reports = sites_of(transform, source, path)
    applying = [r for r in reports if r.applies and r.site]
    if site is None:
        if not applying:
            reasons = "; ".join(dict.fromkeys(r.reason for r in reports))
            raise TransformFailed(f"transform {name}: does not apply to {path} ({reasons})")
        if len(applying) > 1:
            ids = ", ".join(f"{name}@{r.site}" for r in applying)
            raise TransformFailed(f"transform {name}: applies at {len(applying)} sites of {path}; choose one: {ids}")
        report = applying[0]
    else:
        report = next((r for r in reports if r.site == site), None)  # type: ignore[assignment]
        if report is None:
            known = ", ".join(r.site for r in applying if r.site) or "none"
            raise TransformFailed(f"transform {name}: no site {site!r} in {path} (applies at: {known})")
        if not report.applies:
            raise TransformFailed(f"transform {name}@{site}: does not apply ({report.reason})")
    used = resolve_params(transform, {**report.params, **(params or {})})
    try:
        new = transform.apply(source, report.site or "", **used)
    except TransformError as exc:
        raise TransformFailed(f"transform {name}@{report.site}: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # noqa: BLE001 - plug-in code: a failed proposal, never a crash
        raise TransformFailed(f"transform {name}@{report.site}: apply() raised {_one_line(exc)}") from None
    if not isinstance(new, str):
        raise TransformFailed(f"transform {name}@{report.site}: apply() returned {type(new).__name__}, not source")
    try:
        ast.parse(new)
    except SyntaxError as exc:
        raise TransformFailed(f"transform {name}@{report.site}: produced source that does not parse "
                              f"(line {exc.lineno}: {exc.msg})") from None
    if new == source:
        raise TransformFailed(f"transform {name}@{report.site}: changed nothing")
    return new, report, used
