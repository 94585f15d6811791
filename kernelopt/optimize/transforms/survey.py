"""Which transforms apply to a kernel, and applying one by name (`kernelopt transforms`).

`survey` asks every registered transform where it applies; a transform that cannot be
loaded, whose precondition (`requires`) does not hold, or that raises inside `sites()`
is reported as not applying, with the reason, never as a traceback. `apply_named` rewrites
one site and checks that the result parses. The strategies optimizer and the CLI both
go through these two calls.

Plug-in code runs under a time limit (`guarded`): `sites()` and `apply()` run in a forked
child, so one that hangs (a backtracking regex holds the GIL in C, out of any thread's
reach), exhausts memory or ends its process costs CALL_TIMEOUT_S and one reason, never
the run.
"""

from __future__ import annotations

import ast
from typing import Any, Callable, TypeVar

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport
from kernelopt.optimize.transforms import Transform, TransformError, available, get_transform, resolve_params


class TransformFailed(BadInput):
    """A transform raised, declined the site, or produced source that does not parse."""


# The most seconds one call of a transform's sites() or apply() may take. Both read and edit
# source text only (milliseconds on any real kernel); the limit is for a plug-in that hangs.
CALL_TIMEOUT_S = 30.0

T = TypeVar("T")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class CallFailed(Exception):
    """A guarded plug-in call did not return: it raised, did not finish in time, or ended its
    process. str(): what happened, one line ('raised KeyError: ...'); `declined`: what it raised
    was a TransformError (the transform's own reason, `reason`)."""

    def __init__(self, what: str, *, declined: bool = False, reason: str = "") -> None:
        super().__init__(what)
        self.declined = declined
        self.reason = reason


def guarded(fn: Callable[..., T], *args: Any, timeout_s: float | None = None, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a forked child process, killed after `timeout_s` (CALL_TIMEOUT_S).

    Returns what it returned; raises CallFailed when it raised ('raised TypeName: message'),
    ran out of time ('did not finish within N s') or ended its process ('ended its process
    (exit code N)'). A thread cannot stop a call stuck in C code (a regex), and a signal
    handler runs only between bytecodes of the main thread; a child process can always be
    killed. Fork, not spawn: the transform object, registered in this process (entry points,
    test fixtures), needs no pickling, and fork costs milliseconds. Without fork (not Linux)
    the call runs here, unguarded."""
    import multiprocessing as mp

    limit = CALL_TIMEOUT_S if timeout_s is None else timeout_s
    if "fork" not in mp.get_all_start_methods():
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - plug-in code: whatever it raised is its reason
            raise CallFailed(f"raised {_one_line(exc)}", declined=isinstance(exc, TransformError),
                             reason=str(exc)) from None
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        receive.close()
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as text: any exception, pickled or not
            send.send(("raised", _one_line(exc), isinstance(exc, TransformError), str(exc)))
            return
        try:
            send.send(("ok", value))
        except Exception:  # noqa: BLE001 - a result that does not pickle is the plug-in's failure
            send.send(("failed", f"returned {type(value).__name__}, which cannot be passed back", False, ""))

    process = ctx.Process(target=child, daemon=True)
    process.start()
    send.close()
    try:
        # Read before join: a large result fills the pipe, and the child waits until it is read.
        if not receive.poll(limit):
            raise CallFailed(f"did not finish within {limit:g} s")
        try:
            message = receive.recv()
        except EOFError:
            process.join(5)
            code = process.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise CallFailed(f"ended its process ({how})") from None
        if message[0] == "ok":
            return message[1]
        kind, text, declined, reason = message
        raise CallFailed(f"raised {text}" if kind == "raised" else text, declined=declined, reason=reason)
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
        process.join()


def missing_features(transform: Transform, features: set[str]) -> list[str]:
    """The features in `transform.requires` this source lacks ('!x' entries: present when they must not be)."""
    out = []
    for item in getattr(transform, "requires", None) or []:
        name = item.lstrip("!")
        if (name in features) == item.startswith("!"):
            out.append(item)
    return out


def sites_of(transform: Transform, source: str, path: str = "<candidate>",
             features: set[str] | None = None, *, strict: bool = False) -> list[SiteReport]:
    """`transform.sites(source)`, made safe: its precondition first, run under the time limit
    (`guarded`), every failure a declining report ('sites() raised ...', 'sites() did not finish
    within N s'), each report stamped with the transform's name and its parameter defaults.
    `strict`: a sites() that raised, hung or returned something else raises TransformFailed
    instead (the optimizer makes it a failed proposal, with the reason in the events)."""
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
        reports = guarded(_listed, transform.sites, source, path)
    except CallFailed as exc:
        if strict:
            raise TransformFailed(f"transform {name}: sites() {exc}") from None
        return [SiteReport(transform=name, applies=False, reason=f"sites() {exc}")]
    if not reports:
        return [SiteReport(transform=name, applies=False, reason="no site found")]
    try:
        defaults = resolve_params(transform, {})
    except BadInput:
        defaults = {}
    out = []
    for r in reports:
        if not isinstance(r, SiteReport):
            if strict:
                raise TransformFailed(f"transform {name}: sites() returned {type(r).__name__}, not SiteReport")
            return [SiteReport(transform=name, applies=False, reason=f"sites() returned {type(r).__name__}, "
                               "not SiteReport")]
        update: dict[str, Any] = {"transform": name}
        if r.applies:
            update["params"] = {**defaults, **r.params}
        out.append(r.model_copy(update=update))
    return out


def _listed(sites: Callable[[str, str], Any], source: str, path: str) -> list[Any]:
    """sites(source, path) as a list (a generator runs in the child, under the limit)."""
    return list(sites(source, path))


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
                path: str = "<candidate>", *, reports: list[SiteReport] | None = None
                ) -> tuple[str, SiteReport, dict[str, ParamValue]]:
    """Rewrite `source` with transform `name` at `site` (the only applying site when None).

    Returns (new source, the site's report, the parameters used). BadInput for an unknown
    transform or parameter; TransformFailed when the transform declines the site, raises,
    hangs, or writes source that does not parse. `reports`: the transform's `sites_of` this
    source, when the caller has them (sites() is not asked again)."""
    transform = get_transform(name)
    if reports is None:
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
        new = guarded(transform.apply, source, report.site or "", **used)
    except CallFailed as exc:
        if exc.declined:  # a TransformError: the transform's own reason why this site cannot be rewritten
            raise TransformFailed(f"transform {name}@{report.site}: {' '.join(exc.reason.split())}") from None
        raise TransformFailed(f"transform {name}@{report.site}: apply() {exc}") from None
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
