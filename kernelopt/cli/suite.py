"""`kernelopt suite run`: a thin shell over `kernelopt.suite.run_suite`."""

from __future__ import annotations

from typing import Any

import click

from kernelopt.cli.common import (emit, experience_choice, interruptible, json_option, loop_options,
                                  optimizer_options)


def render_suite(s: Any) -> str:
    from kernelopt.report.suite_report import fmt_frac, fmt_ms, fmt_pct, fmt_x

    note = s.time_label + (", SMALL shapes" if s.small else "")
    lines = [f"suite      {s.suite_dir} ({len(s.problems)} problems, optimizer {s.optimizer})",
             f"device     {s.device or '-'}; times: {note}"]
    width = max([len(r.name) for r in s.problems] + [7])
    lines.append(f"{'problem':<{width}}  correct  {'best ms':>9}  {'vs start':>12}  {'vs eager':>12}  "
                 f"{'vs compile':>12}  roofline")
    for r in s.problems:
        lines.append(f"{r.name:<{width}}  {'yes' if r.correct else 'NO ':<7}  {fmt_ms(r.best_ms):>9}  "
                     f"{fmt_x(r.speedup_vs_start) if r.correct else '-':>12}  "
                     f"{fmt_x(r.speedup_vs_eager) if r.correct else '-':>12}  "
                     f"{fmt_x(r.speedup_vs_compile) if r.correct else '-':>12}  {fmt_pct(r.roofline_fraction)}")
    for row in s.fast_p:
        if row.p in (0.0, 1.0, 2.0):
            lines.append(f"fast_{row.p:g}     eager {fmt_frac(row.eager)}, torch.compile {fmt_frac(row.compile)}, "
                         f"start {fmt_frac(row.start)}")
    lines.append(f"geomean    eager {fmt_x(s.geomean.get('eager'))}, torch.compile {fmt_x(s.geomean.get('compile'))}, "
                 f"start {fmt_x(s.geomean.get('start'))}")
    if s.interpreter:
        lines.append("note       interpreter wall times on the CPU: no GPU baseline, nothing here is a GPU figure")
    if s.missing:
        lines.append(f"missing    {', '.join(s.missing)} (run the same command again to resume)")
    lines.append("report     " + (", ".join(s.files) if s.files else "-"))
    return "\n".join(lines)


@click.group("suite")
def suite() -> None:
    """Run an optimizer over a benchmark suite and score it (fast_p, geomeans, roofline)."""


@suite.command("run", epilog="Exit codes: 0 the run completed (incorrect problems are results, shown in the table); "
                             "2 bad input. Run the same command again to resume an interrupted run.")
@click.argument("suite_dir", metavar="DIR", type=click.Path(file_okay=False))
@optimizer_options
@click.option("--budget-minutes", type=click.FloatRange(min=0, min_open=True), default=2.0, show_default=True,
              help="Per problem: the time budget of its whole optimize run (a round proposes only what fits in the minutes left).")
@click.option("--budget-evals", type=click.IntRange(min=1), default=None, help="Per problem: stop after this many evaluations.")
@click.option("--problems", default=None, metavar="A,B,...", help="Only these problems (folder names), in this order.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output folder (default: runs/suite-<time>); give it again to resume.")
@click.option("--small", is_flag=True, help="Each problem at its SMALL shape (CPU tests, the demo); timings say so.")
@click.option("--parallel-problems", is_flag=True,
              help="Run problems concurrently, one per visible GPU (refused without a GPU).")
@loop_options
@json_option
def run(suite_dir: str, optimizer: str, optimizer_options: dict[str, Any], optimizer_secrets: dict[str, Any],
        budget_minutes: float, budget_evals: int | None, problems: str | None, out_dir: str | None, small: bool,
        parallel_problems: bool, rounds: int, beam: int, proposals_per_member: int, seed: int, baselines: str,
        trials: int, timeout_s: float, no_profile: bool, no_experience: bool, experience_db: str | None,
        no_race: bool, no_cache: bool, executor: str, isolate: str | None, as_json: bool) -> None:
    """Optimize every problem of DIR (each folder with problem.py and kernel.py) and score the suite.

    Writes OUT/suite.jsonl (one line per finished problem: the resume state),
    OUT/runs/<problem>/ (each optimize run), suite_result.json, suite_report.md,
    speedup.png and roofline.png. Progress goes to stderr: every step on a terminal,
    one line per round and per problem otherwise.
    """
    import datetime
    from pathlib import Path

    from kernelopt.harness.baselines import parse_baselines
    from kernelopt.report.progress import TerminalProgress
    from kernelopt.suite import run_suite

    names = [p for p in problems.split(",")] if problems is not None else None
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = out_dir or str(Path("runs") / f"suite-{stamp}")
    again = f"kernelopt suite run {suite_dir} -o {out}" + (f" --problems {problems}" if problems else "")

    def how_to_continue() -> str | None:
        return f"the suite's results are in {out}; continue with: {again}" if Path(out).is_dir() else None

    with interruptible(how_to_continue), TerminalProgress() as progress:
        progress.line(f"suite output: {out}")
        result = run_suite(suite_dir, optimizer=optimizer, optimizer_options=optimizer_options,
                           optimizer_secrets=optimizer_secrets, budget_minutes=budget_minutes,
                           budget_evals=budget_evals, problems=names, out_dir=out, small=small,
                           parallel_problems=parallel_problems, rounds=rounds, beam=beam,
                           proposals_per_member=proposals_per_member, seed=seed, executor=executor,
                           baselines=parse_baselines(baselines), trials=trials, timeout_s=timeout_s,
                           profile=not no_profile, experience=experience_choice(no_experience, experience_db),
                           cache=not no_cache, race=not no_race, isolate=isolate,
                           progress=progress.line, status=progress.set_status, milestone=progress.milestone,
                           engine_progress=lambda e: progress.set_status(f"{e.candidate}: {e.text}"))
    emit(result, as_json, render_suite)
