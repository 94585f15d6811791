"""Time a candidate against the PyTorch baselines, isolated in a child process.

`bench(problem, candidate)` is the library call behind `kernelopt bench`: the
child (`kernelopt.harness.timing.child_time`) prepares inputs once, times the
candidate and every requested baseline with `time_callable`, and returns the
statistics; this side turns them into a `BenchResult` with speedups. A candidate
that hangs, crashes or raises fails as the candidate (CandidateFailed, exit 1).
"""

from __future__ import annotations

from typing import Any, Sequence

from kernelopt.errors import BadInput, CandidateFailed, MissingRequirement
from kernelopt.harness.baselines import BASELINES
from kernelopt.harness.isolate import ChildResult, run_in_child
from kernelopt.harness.timing import require_cuda, speedup, timing_defaults
from kernelopt.models.harness import BenchResult, Candidate, Problem, Timing

DEFAULT_TIMEOUT_S = 900.0


def gpu_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def bench(
    problem: Problem,
    candidate: Candidate,
    *,
    baselines: Sequence[str] = BASELINES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    seed: int = 0,
    **timing_opts: Any,
) -> BenchResult:
    """Time `candidate` and `baselines` on `problem`; `timing_opts` go to `time_callable`.

    Raises MissingRequirement (exit 1) without a CUDA GPU -- nothing is timed;
    CandidateFailed (exit 1) when the candidate does not build, raises, crashes or
    exceeds `timeout_s` (which covers preparation, baseline compilation and timing).
    """
    unknown = sorted(set(timing_opts) - set(timing_defaults()))
    if unknown:
        raise TypeError(f"unknown timing option(s): {', '.join(unknown)}")
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise BadInput(f"unknown baseline(s) {', '.join(bad)} (known: {', '.join(BASELINES)})")
    require_cuda("bench")
    args = {
        "problem": problem.model_dump(mode="json"),
        "candidate": candidate.model_dump(mode="json"),
        "baselines": list(baselines),
        "seed": seed,
        "timing": timing_opts,
    }
    # Timing the Triton interpreter would be meaningless: the child always compiles for the GPU.
    res = run_in_child("time", args, timeout_s=timeout_s, env={"TRITON_INTERPRET": "0"})
    return result_from_child(res, problem, candidate, options={**timing_defaults(), **timing_opts, "seed": seed})


def result_from_child(
    res: ChildResult, problem: Problem, candidate: Candidate, *, options: dict[str, Any] | None = None
) -> BenchResult:
    """BenchResult from the child's answer, or the error the failure means."""
    if not res.ok:
        where = f"{candidate.path}: "
        if res.error_kind == "bad_input":
            raise BadInput(res.message or "bad input")
        if res.error_kind == "timeout":
            raise CandidateFailed(f"{where}timing {res.message or 'timed out'}")
        if res.error_kind == "crash":
            tail = _last_line(res.stderr_tail)
            raise CandidateFailed(f"{where}{res.message or 'crashed'}" + (f" ({tail})" if tail else ""))
        if res.message and res.message.startswith("MissingRequirement"):
            raise MissingRequirement(res.message.split(": ", 1)[-1])
        raise CandidateFailed(f"{where}{res.error_kind or 'failed'}: {res.message or 'no message'}")
    value = res.value or {}
    timings = {label: Timing.model_validate(t) for label, t in (value.get("timings") or {}).items()}
    cand = timings.get("candidate")
    speedups: dict[str, float] = {}
    for label, t in timings.items():
        ratio = speedup(t.stats, cand.stats if cand else None)
        if label != "candidate" and ratio is not None:
            speedups[label] = ratio
    return BenchResult(
        problem=problem,
        candidate=candidate,
        device=str(value.get("device", "cuda")),
        env=dict(value.get("env") or {}),
        timings=timings,
        speedups=speedups,
        options=dict(options or {}),
    )


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def render_benchmark(result: BenchResult) -> str:
    """`templates/benchmark.md` filled from `result` (the human output of `kernelopt bench`)."""
    from kernelopt.resources import render_template

    gpus = result.env.get("gpus") or []
    gpu = gpus[0] if gpus else None
    first = next((t.stats for t in result.timings.values() if t.stats), None)
    return render_template(
        "benchmark.md",
        r=result,
        gpu=gpu,
        clocks=gpu.get("clocks") if gpu else None,
        first=first,
        mib=lambda n: f"{n / 2**20:.0f} MiB",
    )
