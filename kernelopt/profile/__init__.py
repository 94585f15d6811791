"""Profiling: `Profiler.profile(problem, candidate, ...) -> Metrics`.

`NcuProfiler` (Nsight Compute, one invocation per candidate) is the default;
`StaticProfiler` reports compiler resources only, for machines where hardware
counters are not permitted. `import_metrics` builds Metrics from files a user
already has (ncu raw CSV, .ncu-rep, JSON dumps). Heavy modules load lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kernelopt.registry import Registry

if TYPE_CHECKING:
    from kernelopt.models import Candidate, Metrics, Problem


@runtime_checkable
class Profiler(Protocol):
    name: str

    def profile(self, problem: "Problem", candidate: "Candidate", *, out_dir: str | Path, seed: int = 0) -> "Metrics":
        """Profile one call of `candidate` on `problem`'s inputs; files (reports) go to `out_dir`."""
        ...


class StaticProfiler:
    """Compiler resources only (ptxas -v / Triton JIT caches), no hardware counters."""

    name = "static"

    def profile(self, problem: "Problem", candidate: "Candidate", *, out_dir: str | Path, seed: int = 0) -> "Metrics":
        from kernelopt.profile.ncu import static_profile

        return static_profile(problem, candidate, seed=seed)


# name -> "module:class"; third parties may add entries before calling get_profiler.
PROFILERS: dict[str, str] = {
    "ncu": "kernelopt.profile.ncu:NcuProfiler",
    "static": "kernelopt.profile:StaticProfiler",
}


# Third-party profilers register in the entry-point group `kernelopt.profilers`.
REGISTRY = Registry("profiler", "kernelopt.profilers", PROFILERS)


def get_profiler(name: str = "ncu", **options: Any) -> Profiler:
    factory = REGISTRY.factory(name)
    if factory is None:
        raise KeyError(f"unknown profiler {name!r}; known: {', '.join(sorted(REGISTRY.available()))}")
    return factory(**options)


def import_metrics(path: str | Path) -> "Metrics":
    """Metrics from an ncu raw CSV, an .ncu-rep or a JSON dump, with the roofline when the device is known."""
    from kernelopt.profile.devices import attach_roofline
    from kernelopt.profile.importers import import_file

    return attach_roofline(import_file(path))


def profile_candidate(
    problem_path: str | Path,
    kernel_path: str | Path,
    *,
    overrides: dict[str, str] | None = None,
    dtype: str | None = None,
    out_dir: str | Path,
    profiler: str = "ncu",
    seed: int = 0,
    **options: Any,
) -> "Metrics":
    """Load problem + candidate, profile, and write metrics.json, ncu_summary.md, ncu_details.md to `out_dir`."""
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.profile.report import write_outputs

    problem = load_problem(problem_path, overrides, dtype)
    candidate = load_candidate(kernel_path)
    metrics = get_profiler(profiler, **options).profile(problem, candidate, out_dir=out_dir, seed=seed)
    write_outputs(metrics, out_dir)
    return metrics


__all__ = ["PROFILERS", "Profiler", "StaticProfiler", "get_profiler", "import_metrics", "profile_candidate"]
