"""`kernelopt check`: a thin shell over `kernelopt.harness.verify.verify_many`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kernelopt.cli.common import dtype_option, emit, json_option, parse_overrides, set_option

if TYPE_CHECKING:
    from kernelopt.models.harness import Verification


def render_verification(v: "Verification", debug: bool = False) -> str:
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
    if v.shapes:
        from kernelopt.harness.shapes import describe

        lines.append(f"shapes    {describe(v.shapes)}")
    if v.passed:
        count = len(v.trials)
        lines.append(f"PASS: correct in {count} trial{'s' if count != 1 else ''}"
                     + (" and at the problem's other shapes" if v.shapes else ""))
    else:
        lines.append(f"FAIL ({v.reason}): {v.message}")
        lines += _failure_detail(v, debug)
    return "\n".join(lines)


def _failure_detail(v: "Verification", debug: bool) -> list[str]:
    f = v.failure
    if f is None:
        return []
    if not debug:
        hint = [x for x, present in (("traceback", f.traceback), ("output", f.stdout or f.stderr)) if present]
        return [f"(the candidate's {' and '.join(hint)}: kernelopt --debug check ..., or --json)"] if hint else []
    out = []
    for title, text in (("traceback", f.traceback), ("stdout", f.stdout), ("stderr", f.stderr)):
        if text:
            out += [f"--- candidate {title} ---", text.rstrip()[-4000:]]
    return out


def render_table(results: list["Verification"]) -> str:
    rows = [("candidate", "verdict", "trials", "max rel L2", "detail")]
    for v in results:
        worst = max((c.rel_l2_error or 0.0 for t in v.trials for c in t.outputs), default=None)
        rows.append((
            v.candidate.name,
            "PASS" if v.passed else f"FAIL {v.reason}",
            f"{sum(t.passed for t in v.trials)}/{len(v.trials)}",
            f"{worst:.3g}" if worst is not None else "-",
            "" if v.passed else (v.message or "")[:90],
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    failed = sum(not v.passed for v in results)
    device = results[0].device if results else "-"
    lines.append(f"{len(results) - failed} of {len(results)} correct on {device}")
    return "\n".join(lines)


@click.command("check")
@click.argument("problem_path", metavar="PROBLEM", type=click.Path(dir_okay=False))
@click.option("--kernel", "kernel_paths", multiple=True, type=click.Path(dir_okay=False), metavar="CANDIDATE",
              help="Candidate kernel file (defines ModelNew or kernel_function); repeat to check several in one worker.")
@set_option
@dtype_option
@click.option("--trials", type=click.IntRange(min=1), default=3, show_default=True,
              help="Trials, each with its own seed and fresh inputs (3 or more recommended).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default: problem's `atol`, else by dtype).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default: problem's `rtol`, else by dtype).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds each candidate may take before its process is killed.")
@click.option("--isolate", type=click.Choice(["worker", "candidate", "sandbox"]), default="worker", show_default=True,
              help="worker: candidates share a long-lived runner process (restarted after a crash); "
                   "candidate: a fresh process per candidate; sandbox: a fresh process per candidate in its own "
                   "user, mount, network (and on the CPU pid) namespaces with a read-only view of the files, "
                   "for untrusted code (docs/harness.md).")
@click.option("--shapes", type=click.Choice(["given", "auto"]), default="given", show_default=True,
              help="auto: a candidate correct at the given shape is verified again at the problem's SMALL shape "
                   "and at a ragged one (each shape constant moved to an odd nearby value); a failure there fails it.")
@json_option
@click.pass_context
def check(ctx: click.Context, problem_path: str, kernel_paths: tuple[str, ...], overrides: tuple[str, ...],
          dtype: str | None, trials: int, atol: float | None, rtol: float | None, timeout_s: float, isolate: str,
          shapes: str, as_json: bool) -> None:
    """Verify candidate kernels against the reference model of PROBLEM.

    Several --kernel options are checked in one batch (inputs and references are
    built once); --json then prints a list in the given order.

    Exit 0: every candidate is correct. 1: a candidate is wrong or failed (compile,
    runtime, timeout, crash, incorrect, a cheat, or a CUDA candidate without a GPU;
    with --shapes auto, also wrong at another shape of the problem).
    2: bad input.
    """
    from kernelopt.errors import BadInput
    from kernelopt.harness.verify import verify_many
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.report.progress import TerminalProgress

    if not kernel_paths:
        raise BadInput("check: --kernel CANDIDATE is required")
    problem = load_problem(problem_path, parse_overrides(overrides), dtype)
    candidates = [load_candidate(p) for p in kernel_paths]
    debug = bool(ctx.obj and ctx.obj.get("debug"))
    with TerminalProgress() as progress:
        results = verify_many(problem, candidates, trials=trials, atol=atol, rtol=rtol, timeout_s=timeout_s,
                              isolate=isolate, progress=progress.engine_event)
        if shapes == "auto":
            from kernelopt.harness.shapes import with_shapes

            results = with_shapes(problem, results, trials=trials, timeout_s=timeout_s, progress=progress.engine_event,
                                  isolate=isolate)
    if len(results) == 1:
        emit(results[0], as_json, lambda v: render_verification(v, debug))
    else:
        emit(results, as_json, lambda rs: render_table(rs) + ("\n" + "\n".join(
            f"\n{v.candidate.name}:\n" + "\n".join(_failure_detail(v, True)) for v in rs if not v.passed and v.failure
        ) if debug else ""))
    if any(not v.passed for v in results):
        ctx.exit(1)
