"""A test-only Transform (the catalog's real ones live in kernelopt/optimize/transforms/).

`marker_statement` inserts `_ko_marker = MARK` as the first statement of each @triton.jit
kernel: a structural change that computes the same answer, so the loop, the CLI and the
optimizer can be tested without depending on a catalog transform.
"""

from __future__ import annotations

import ast

import pytest

from kernelopt.models.transform import SiteReport, TransformParam
from kernelopt.optimize.transforms import TransformError
from kernelopt.source import SourceFile, apply_edits, indent_of, parse_triton

NAME = "marker_statement"


class MarkerStatement:
    name = NAME
    backend = "triton"
    summary = "insert a no-op statement at the top of a kernel (test fixture)"
    requires = ["triton"]
    params = [TransformParam(name="MARK", default=1, domain=[1, 2, 3], doc="the value assigned")]

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        try:
            _, _, kernels = parse_triton(source, path)
        except Exception as exc:  # noqa: BLE001 - a file it cannot read is one report
            return [SiteReport(transform=NAME, applies=False, reason=f"cannot parse: {exc}")]
        if not kernels:
            return [SiteReport(transform=NAME, applies=False, reason="no @triton.jit kernel")]
        out = []
        for name, k in kernels.items():
            marked = any(isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "_ko_marker" for t in s.targets)
                         for s in k.fn.body)
            if marked:
                out.append(SiteReport(transform=NAME, site=name, applies=False, kernel=name,
                                      reason="already marked"))
            else:
                out.append(SiteReport(transform=NAME, site=name, applies=True, kernel=name, line=k.fn.lineno,
                                      reason="adds a marker statement", params={"MARK": 1}))
        return out

    def apply(self, source: str, site: str, **params: object) -> str:
        src, _, kernels = parse_triton(source)
        if site not in kernels:
            raise TransformError(f"no kernel {site!r}")
        first = kernels[site].fn.body[0]
        at = src.line_starts[first.lineno - 1]
        line = f"{indent_of(src, first)}_ko_marker = {params.get('MARK', 1)}\n"
        return apply_edits(source, [(at, at, line)])


class Exploding:
    """sites() raises: the survey must report it as not applying, never a traceback."""

    name = "exploding"
    backend = "triton"
    summary = "raises (test fixture)"
    requires: list[str] = []
    params: list[TransformParam] = []

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        raise RuntimeError("boom in sites")

    def apply(self, source: str, site: str, **params: object) -> str:
        raise TransformError("boom in apply")


class Breaking:
    """apply() returns source that does not parse: a failed proposal."""

    name = "breaking"
    backend = "triton"
    summary = "writes invalid Python (test fixture)"
    requires = ["triton"]
    params: list[TransformParam] = []

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        _, _, kernels = parse_triton(source, path)
        return [SiteReport(transform=self.name, site=n, applies=True, kernel=n, reason="breaks it") for n in kernels]

    def apply(self, source: str, site: str, **params: object) -> str:
        return source + "\ndef broken(:\n"


class _AppliesEverywhere:
    """Applies at every @triton.jit kernel; subclasses misbehave in sites() or apply()."""

    backend = "triton"
    requires = ["triton"]
    params: list[TransformParam] = []
    name = "?"

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        _, _, kernels = parse_triton(source, path)
        return [SiteReport(transform=self.name, site=n, applies=True, kernel=n, reason="looks fine") for n in kernels]

    def apply(self, source: str, site: str, **params: object) -> str:
        return source + "\n_ko_fine = 1\n"


class HangingApply(_AppliesEverywhere):
    """apply() never returns (a pure-Python loop: no thread can interrupt it)."""

    name = "hanging_apply"
    summary = "apply() loops forever (test fixture)"

    def apply(self, source: str, site: str, **params: object) -> str:
        while True:
            pass


class RaisingApply(_AppliesEverywhere):
    """apply() raises something other than TransformError (a plug-in bug)."""

    name = "raising_apply"
    summary = "apply() raises KeyError (test fixture)"

    def apply(self, source: str, site: str, **params: object) -> str:
        return {}["missing key"]  # type: ignore[return-value]


class HangingSites(_AppliesEverywhere):
    """sites() never returns: a catastrophically backtracking regex, stuck inside the C matcher."""

    name = "hanging_sites"
    summary = "sites() hangs in a regex (test fixture)"

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        import re

        re.match(r"(a|aa)+$", "a" * 200 + "b")
        return super().sites(source, path)


class DyingApply(_AppliesEverywhere):
    """apply() kills the process it runs in (a plug-in calling os._exit)."""

    name = "dying_apply"
    summary = "apply() exits the process (test fixture)"

    def apply(self, source: str, site: str, **params: object) -> str:
        import os

        os._exit(3)


STUCK = {c.name: f"{__name__}:{c.__name__}" for c in (HangingApply, RaisingApply, HangingSites, DyingApply)}

EXTRA = {NAME: f"{__name__}:MarkerStatement", "exploding": f"{__name__}:Exploding",
         "breaking": f"{__name__}:Breaking"}


def register() -> None:
    """For a `kernelopt` process started by a test (python -c): the fixtures join the registry."""
    from kernelopt.optimize import transforms

    transforms.BUILTIN.update(EXTRA)


@pytest.fixture
def fixture_transforms(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Registers the fixtures in the transform registry for one test."""
    from kernelopt.optimize import transforms

    monkeypatch.setattr(transforms, "BUILTIN", {**transforms.BUILTIN, **EXTRA})
    monkeypatch.setattr(transforms.REGISTRY, "builtin", {**transforms.BUILTIN, **EXTRA})
    return EXTRA


STUCK_TIMEOUT_S = 2.0


@pytest.fixture
def stuck_transforms(monkeypatch: pytest.MonkeyPatch, fixture_transforms: dict[str, str]) -> dict[str, str]:
    """The fixtures plus the misbehaving ones (STUCK), with the time limit on a plug-in call
    cut to STUCK_TIMEOUT_S so a hang costs seconds."""
    from kernelopt.optimize import transforms
    from kernelopt.optimize.transforms import survey

    both = {**transforms.BUILTIN, **STUCK}
    monkeypatch.setattr(transforms, "BUILTIN", both)
    monkeypatch.setattr(transforms.REGISTRY, "builtin", both)
    monkeypatch.setattr(survey, "CALL_TIMEOUT_S", STUCK_TIMEOUT_S, raising=False)
    return STUCK
