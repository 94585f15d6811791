"""The layout has no upward arrow and no circle where the design draws none (shared/DESIGN.md):
checked on every import statement, lazy ones inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kernelopt"


def imports_of(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def files(where: str) -> list[Path]:
    target = PKG / where
    return sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]


@pytest.mark.parametrize("where, forbidden", [
    ("report", ("kernelopt.optimize",)),  # report reads the run directory from the floor (kernelopt.rundir)
    ("harness/worker", ("kernelopt.profile",)),  # device ceilings are the floor's (kernelopt.devices)
    ("experience", ("kernelopt.profile", "kernelopt.recommend", "kernelopt.strategies")),  # storage and search only
    ("devices", ("kernelopt.profile", "kernelopt.optimize", "kernelopt.report", "kernelopt.harness")),
    ("rundir", ("kernelopt.optimize.", "kernelopt.report", "kernelopt.harness")),
])
def test_no_upward_import(where: str, forbidden: tuple[str, ...]) -> None:
    bad = sorted(f"{p.relative_to(PKG.parent)}: {m}" for p in files(where) for m in imports_of(p)
                 if m.startswith(forbidden))
    assert not bad, bad


def test_the_run_directory_has_one_home() -> None:
    """kernelopt.rundir only: the old kernelopt.optimize.rundir alias is gone and nothing imports it."""
    assert not (PKG / "optimize" / "rundir.py").exists()
    root = PKG.parent
    users = []
    for where in ("kernelopt", "tests", "benchmarks", "scripts"):
        for p in (root / where).rglob("*.py"):
            try:
                names = imports_of(p)
            except SyntaxError:  # fixtures that are broken on purpose
                names = set()
            if "results" not in p.parts and any(m.startswith("kernelopt.optimize.rundir") for m in names):
                users.append(str(p.relative_to(root)))
    assert not users, users
