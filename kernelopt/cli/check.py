"""`kernelopt check`: a thin shell over `kernelopt.harness.verify.verify`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kernelopt.cli.common import dtype_option, emit, json_option, kernel_option, parse_overrides, set_option

if TYPE_CHECKING:
    from kernelopt.models.harness import Verification


def render_verification(v: "Verification") -> str:
    lines = [f"problem   {v.problem.path}", f"candidate {v.candidate.path} ({v.candidate.backend}, {v.candidate.entry})",
             f"device    {v.device}", f"tolerance atol={v.atol:g} rtol={v.rtol:g}"]
    if v.trials:
        lines.append(f"{'trial':>5} {'seed':>5} {'out':>3}  {'shape':<16} {'dtype':<9} {'max abs err':>11} "
                     f"{'rel L2 err':>10} {'mismatches':>10}  result")
    for number, trial in enumerate(v.trials, 1):
        for c in trial.outputs:
            max_abs = f"{c.max_abs_error:.3g}" if c.max_abs_error is not None else "-"
            rel = f"{c.rel_l2_error:.3g}" if c.rel_l2_error is not None else "-"
            lines.append(f"{number:>5} {trial.seed:>5} {c.index:>3}  {str(c.shape):<16} {c.dtype:<9} {max_abs:>11} "
                         f"{rel:>10} {c.mismatches:>10}  {'ok' if c.passed else 'FAIL'}")
        if not trial.outputs:
            lines.append(f"{number:>5} {trial.seed:>5}   -  {'-':<16} {'-':<9} {'-':>11} {'-':>10} {'-':>10}  "
                         f"{'ok' if trial.passed else 'FAIL'}")
    if v.passed:
        count = len(v.trials)
        lines.append(f"PASS: correct in {count} trial{'s' if count != 1 else ''}")
    else:
        lines.append(f"FAIL ({v.reason}): {v.message}")
    return "\n".join(lines)


@click.command("check")
@click.argument("problem_path", metavar="PROBLEM", type=click.Path(dir_okay=False))
@kernel_option
@set_option
@dtype_option
@click.option("--trials", type=click.IntRange(min=1), default=3, show_default=True,
              help="Trials, each with its own seed and fresh inputs (3 or more recommended).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default: problem's `atol`, else by dtype).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default: problem's `rtol`, else by dtype).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds before the candidate's child process is killed.")
@json_option
@click.pass_context
def check(ctx: click.Context, problem_path: str, kernel_path: str | None, overrides: tuple[str, ...], dtype: str | None,
          trials: int, atol: float | None, rtol: float | None, timeout_s: float, as_json: bool) -> None:
    """Verify a candidate kernel against the reference model of PROBLEM.

    Exit 0: correct. 1: the candidate is wrong or failed (compile, runtime, timeout,
    incorrect, a cheat, or a CUDA candidate without a GPU). 2: bad input.
    """
    from kernelopt.errors import BadInput
    from kernelopt.harness.verify import verify
    from kernelopt.problem import load_candidate, load_problem

    if not kernel_path:
        raise BadInput("check: --kernel CANDIDATE is required")
    problem = load_problem(problem_path, parse_overrides(overrides), dtype)
    candidate = load_candidate(kernel_path)
    result = verify(problem, candidate, trials=trials, atol=atol, rtol=rtol, timeout_s=timeout_s)
    emit(result, as_json, render_verification)
    if not result.passed:
        ctx.exit(1)
