"""Shared by the catalog transforms' tests: apply a transform and judge the result the one way
every candidate is judged (kernelopt.harness.verify on the Triton interpreter)."""

from __future__ import annotations

from pathlib import Path

from kernelopt.harness.verify import verify_many
from kernelopt.problem import load_candidate, load_problem
from kernelopt.source import parse_triton

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "suite"
FIX = ROOT / "tests" / "fixtures" / "transforms"


def rewrite(transform, path: Path, site: str | None = None, **params) -> str:
    """The transform applied at `site` (or at its only applying site) of the file at `path`."""
    source = path.read_text()
    reports = transform.sites(source, str(path))
    applying = [r for r in reports if r.applies]
    if site is None:
        assert len(applying) == 1, [(r.site, r.reason) for r in reports]
        site = applying[0].site
    else:
        assert site in {r.site for r in applying}, [(r.site, r.reason) for r in reports]
    out = transform.apply(source, site, **params)
    parse_triton(out)  # parses, kernels still found
    return out


def verify_at_shapes(problem: Path, sources: dict[str, str], shapes: list[dict[str, str]], tmp_path: Path) -> None:
    """Every source passes verification (1 trial) at every shape; failures name both."""
    files = []
    for name, text in sources.items():
        p = tmp_path / f"{name}.py"
        p.write_text(text)
        files.append(load_candidate(p))
    for shape in shapes:
        results = verify_many(load_problem(problem, shape), files, trials=1)
        for cand, v in zip(files, results):
            assert v.passed, f"{cand.name} at {shape}: {v.reason}: {v.message}"
