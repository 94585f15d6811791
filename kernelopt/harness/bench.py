"""Time candidates against the PyTorch baselines, through the evaluation engine.

`bench_many(problem, candidates)` is the library call behind `kernelopt bench`: one
engine (`kernelopt.harness.evaluate`) times every candidate and, once, every
requested baseline with `time_callable`; this side turns each Evaluation into a
`BenchResult` with speedups. A candidate that hangs, crashes or raises gets a
BenchResult whose `failure` says why.
"""

from __future__ import annotations

from typing import Any, Sequence

from kernelopt.errors import BadInput
from kernelopt.harness.baselines import BASELINES
from kernelopt.harness.timing import require_cuda, timing_defaults
from kernelopt.models.harness import BenchResult, Candidate, Problem, Timing

DEFAULT_TIMEOUT_S = 900.0


def gpu_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def bench(problem: Problem, candidate: Candidate, **options: Any) -> BenchResult:
    """Time one candidate and the baselines on `problem` (see `bench_many`)."""
    return bench_many(problem, [candidate], **options)[0]


def bench_many(
    problem: Problem,
    candidates: Sequence[Candidate],
    *,
    baselines: Sequence[str] = BASELINES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    seed: int = 0,
    progress: Any = None,
    verify: bool = False,
    trials: int = 3,
    cache: bool = True,
    **timing_opts: Any,
) -> list[BenchResult]:
    """Time `candidates` and `baselines` on `problem` through one engine; `timing_opts` go to `time_callable`.

    The baselines are timed once, by the verifier worker, and every candidate's
    speedups are against those figures. Raises MissingRequirement (exit 1) without a
    CUDA GPU -- nothing is timed. A candidate that does not build, raises, crashes or
    exceeds `timeout_s` gets a BenchResult with `failure` set (its timings empty).
    `verify=True` verifies each candidate over `trials` seeded trials first, in the same engine
    (one cold start for `check` and `bench` together); a wrong candidate is not timed.
    """
    from kernelopt.harness.evaluate import Engine
    from kernelopt.harness.envinfo import collect_env

    unknown = sorted(set(timing_opts) - set(timing_defaults()))
    if unknown:
        raise TypeError(f"unknown timing option(s): {', '.join(unknown)}")
    bad = [b for b in baselines if b not in BASELINES]
    if bad:
        raise BadInput(f"unknown baseline(s) {', '.join(bad)} (known: {', '.join(BASELINES)})")
    require_cuda("bench")
    options = {**timing_defaults(), **timing_opts, "seed": seed}
    with Engine(problem, baselines=list(baselines), timeout_s=timeout_s, seed=seed, timing=timing_opts,
                progress=progress, trials=trials if verify else 1, cache=cache) as engine:
        evaluations = engine.evaluate(list(candidates), verify=verify, time=True)
    env = collect_env(tools=False)
    device = env.gpus[0].name if env.gpus else "cuda"
    out = []
    for ev in evaluations:
        timings: dict[str, Timing] = {}
        if ev.timing is not None:
            timings["candidate"] = Timing(label="candidate", stats=ev.timing)
        timings.update(ev.baselines)
        out.append(BenchResult(problem=problem, candidate=ev.candidate, device=device, env=env.model_dump(mode="json"),
                               timings=timings, speedups=dict(ev.speedups), options=dict(options),
                               failure=ev.failure, suspect=list(ev.suspect)))
    return out


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
