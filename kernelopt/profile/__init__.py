"""Profiling: `Profiler.profile(problem, candidate, ...) -> Metrics`.

`NcuProfiler` (Nsight Compute, one invocation per candidate) is the default;
`StaticProfiler` reports compiler resources only, for machines where hardware
counters are not permitted. `import_metrics` builds Metrics from files a user
already has (ncu raw CSV, .ncu-rep, JSON dumps). Heavy modules load lazily.

`profile_result(profiler, problem, candidate, ...) -> ProfileResult` is the stage's seam
for a caller that goes on when profiling fails (the optimize loop): a profiler's failure
comes back as data, with a reason from the engine's failure taxonomy, never as an exception.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Protocol, runtime_checkable

from kernelopt.registry import Registry

if TYPE_CHECKING:
    from kernelopt.models import Candidate, Failure, Metrics, Problem, ProfileResult


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


def profile_failure(exc: BaseException) -> "Failure":
    """A profiler's exception as the engine's failure data (stage 'profile'): the reason the raiser
    gave (`KerneloptError.reason`), else by kind - a candidate that failed under the profiler:
    runtime; a missing requirement (no GPU): needs_gpu; a tool's failure: tool_failed; a timeout
    (the tool's or the GPU lock's): timeout; a missing executable: tool_missing."""
    import subprocess

    from kernelopt.errors import CandidateFailed, KerneloptError, MissingRequirement
    from kernelopt.models.harness import FAILURE_REASONS, Failure

    given = getattr(exc, "reason", None) if isinstance(exc, KerneloptError) else None
    if given in FAILURE_REASONS:
        reason = given
    elif isinstance(exc, CandidateFailed):
        reason = "runtime"
    elif isinstance(exc, MissingRequirement):
        reason = "needs_gpu"
    elif isinstance(exc, (TimeoutError, subprocess.TimeoutExpired)):
        reason = "timeout"
    elif isinstance(exc, FileNotFoundError):
        reason = "tool_missing"
    else:
        reason = "tool_failed"
    message = str(exc) if isinstance(exc, KerneloptError) else f"{type(exc).__name__}: {exc}"
    return Failure(reason=reason, stage="profile", message=" ".join(message.split())[:2000] or type(exc).__name__)


def profile_result(profiler: Profiler, problem: "Problem", candidate: "Candidate", *, out_dir: str | Path,
                   seed: int = 0, guard: ContextManager[Any] | None = None) -> "ProfileResult":
    """Profile `candidate` with `profiler` inside `guard` (e.g. the per-GPU lock, so a profile never
    overlaps a timing); a failure of either is the result's `failure` (`profile_failure`), never an
    exception: a version that cannot be profiled is still a measured version. Interrupts propagate."""
    from kernelopt.models import ProfileResult

    started = time.monotonic()
    name = getattr(profiler, "name", type(profiler).__name__)
    try:
        with guard if guard is not None else contextlib.nullcontext():
            metrics = profiler.profile(problem, candidate, out_dir=out_dir, seed=seed)
        if metrics is None:
            from kernelopt.errors import ToolFailed

            raise ToolFailed(f"profiler {name} returned no metrics for {candidate.name}")
    except Exception as exc:  # noqa: BLE001 - every profiler failure is data (see profile_failure)
        return ProfileResult(profiler=name, failure=profile_failure(exc), wall_s=time.monotonic() - started)
    return ProfileResult(profiler=name, metrics=metrics, wall_s=time.monotonic() - started,
                         notes=[n for n in metrics.notes if n.startswith("FALLBACK")])


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


__all__ = ["PROFILERS", "Profiler", "StaticProfiler", "get_profiler", "import_metrics", "profile_candidate",
           "profile_failure", "profile_result"]
