"""`kernelopt bench PROBLEM --kernel CANDIDATE`: time a candidate against eager and torch.compile."""

from __future__ import annotations

from pathlib import Path

import click

from kernelopt.cli.common import dtype_option, emit, json_option, parse_overrides, set_option


@click.command(
    "bench",
    epilog="Exit codes: 0 timed; 1 no CUDA GPU (nothing timed) or the candidate failed; 2 bad input.",
)
@click.argument("problem_path", metavar="PROBLEM", type=click.Path(dir_okay=False))
@click.option("--kernel", "kernel_paths", multiple=True, type=click.Path(dir_okay=False), metavar="CANDIDATE",
              help="Candidate kernel file; repeat to time several in one worker (baselines are timed once).")
@click.option(
    "--baselines",
    default="eager,compile",
    show_default=True,
    help="Comma-separated baselines to time: eager, compile (torch.compile default mode), or none.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write the Markdown report here.")
@set_option
@dtype_option
@click.option("--warmup-ms", type=click.FloatRange(min=0), default=25.0, show_default=True, help="Minimum warm-up time.")
@click.option("--warmup-calls", type=click.IntRange(min=0), default=3, show_default=True, help="Minimum warm-up calls.")
@click.option("--min-ms", type=click.FloatRange(min=0), default=100.0, show_default=True,
              help="Minimum total measured time per label.")
@click.option("--min-calls", type=click.IntRange(min=1), default=10, show_default=True,
              help="Minimum timed calls per label.")
@click.option("--max-calls", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Stop after this many timed calls even if --min-ms is not reached.")
@click.option("--no-flush-l2", is_flag=True, help="Do not flush the L2 cache before each call (warm-cache timing).")
@click.option("--no-launch-guard", is_flag=True,
              help="Queue no GPU busy-wait before each call: the host's launch time then counts in the figures.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the inputs.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=900.0, show_default=True,
              help="Seconds each candidate may take (loading, compilation, timing) before it is killed.")
@click.option("--verify", "verify_first", is_flag=True,
              help="Verify first, in the same engine (what `check` does); wrong candidates are not timed.")
@click.option("--trials", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --verify: seeded verification trials per candidate.")
@click.option("--no-cache", is_flag=True,
              help="Time the baselines even if the cache ($XDG_CACHE_HOME/kernelopt, else ~/.cache/kernelopt) "
                   "holds them, and do not store them.")
@json_option
@click.pass_context
def bench(
    ctx: click.Context,
    problem_path: str,
    kernel_paths: tuple[str, ...],
    baselines: str,
    output: str | None,
    overrides: tuple[str, ...],
    dtype: str | None,
    warmup_ms: float,
    warmup_calls: int,
    min_ms: float,
    min_calls: int,
    max_calls: int,
    no_flush_l2: bool,
    no_launch_guard: bool,
    seed: int,
    timeout_s: float,
    verify_first: bool,
    trials: int,
    no_cache: bool,
    as_json: bool,
) -> None:
    """Time CANDIDATE on PROBLEM with CUDA events, flushed L2, a launch guard and a
    device-wide synchronize, next to the reference Model in eager PyTorch and under
    torch.compile.

    Several --kernel options are timed in one batch; --json then prints a list in
    the given order. Without a CUDA GPU nothing is timed: the command says so and
    exits 1 (with --json, the error object on stdout).
    """
    from kernelopt.errors import BadInput
    from kernelopt.harness.baselines import parse_baselines
    from kernelopt.harness.bench import bench_many, render_benchmark
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.report.progress import TerminalProgress

    if not kernel_paths:
        raise BadInput("bench needs --kernel CANDIDATE (the kernel file to time)")
    if max_calls < min_calls:
        raise BadInput(f"--max-calls {max_calls} is below --min-calls {min_calls}")
    names = parse_baselines(baselines)
    problem = load_problem(problem_path, parse_overrides(overrides), dtype)
    candidates = [load_candidate(p) for p in kernel_paths]
    with TerminalProgress() as progress:
        results = bench_many(
            problem,
            candidates,
            baselines=names,
            timeout_s=timeout_s,
            seed=seed,
            progress=progress.engine_event,
            verify=verify_first,
            trials=trials,
            cache=not no_cache,
            warmup_ms=warmup_ms,
            warmup_calls=warmup_calls,
            min_ms=min_ms,
            min_calls=min_calls,
            max_calls=max_calls,
            flush_l2=not no_flush_l2,
            launch_guard=not no_launch_guard,
        )
    reports = [render_benchmark(r) if r.failure is None else
               f"{r.candidate.path}: FAIL ({r.failure.reason}): {r.failure.message}\n" for r in results]
    report = "\n".join(reports)
    if output:
        try:
            Path(output).write_text(report)
        except OSError as exc:
            raise BadInput(f"{output}: cannot write the report: {exc.strerror or exc}") from None
    emit(results[0] if len(results) == 1 else results, as_json, lambda _: report.rstrip("\n"))
    if any(r.failure is not None for r in results):
        ctx.exit(1)
