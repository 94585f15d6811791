"""`kernelopt iterate`: a thin shell over `kernelopt.optimize.agent.iterate` / `finish`."""

from __future__ import annotations

import click

from kernelopt.cli.common import emit, experience_choice, json_option


@click.command("iterate", epilog="Exit codes: 0 the new version is correct; 1 it is incorrect or failed (it is still "
                                 "recorded); 2 bad input (not a run directory, a finished run, no hypothesis, "
                                 "a kernel file that is not a candidate, a kernel already in the run).")
@click.argument("rundir", metavar="RUNDIR", type=click.Path(file_okay=False))
@click.option("--kernel", "kernel_path", type=click.Path(dir_okay=False), metavar="NEW.py",
              help="The new version (defines ModelNew or kernel_function): ONE change from its parent.")
@click.option("--hypothesis", default=None,
              help="The change and what it should do: which metric moves which way, and why.")
@click.option("--strategy", default=None, metavar="ID", help="The strategy it applies (kernelopt strategies list).")
@click.option("--parent", default=None, metavar="vN", help="The version it changes (default: the current best).")
@click.option("--expected", default=None, help="The expected metric movement, e.g. 'dram_bytes_read down'.")
@click.option("--finish", "finish_run", is_flag=True,
              help="Close the run instead: re-time v0 and the best versions A-B-B-A, name the winner.")
@click.option("--trials", type=click.IntRange(min=1), default=None,
              help="Verification trials (default: the run's, from run.json).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=None,
              help="Seconds the candidate may take (default: the run's, from run.json).")
@click.option("--no-profile", is_flag=True, help="Do not profile or diagnose the new version.")
@click.option("--no-experience", is_flag=True,
              help="Neither record the outcome in the experience store nor ask it for the next steps.")
@click.option("--experience", "experience_db", type=click.Path(dir_okay=False), default=None, metavar="DB",
              help="The experience database to record into and ask for the next steps (default: the one the run "
                   "was started with, from run.json).")
@json_option
@click.pass_context
def iterate(ctx: click.Context, rundir: str, kernel_path: str | None, hypothesis: str | None, strategy: str | None,
            parent: str | None, expected: str | None, finish_run: bool, trials: int | None, timeout_s: float | None,
            no_profile: bool, no_experience: bool, experience_db: str | None, as_json: bool) -> None:
    """Evaluate one version that an agent or a person wrote and append it to RUNDIR.

    RUNDIR is an open agent-mode run (kernelopt optimize PROBLEM --kernel K
    --optimizer agent -o RUNDIR). The new version is verified and timed through
    the engine, profiled and diagnosed when correct (on a GPU), promoted if it is
    among the best, recorded in the experience store, and the report re-rendered.
    Prints the verdict, time, speedup over its parent and v0, the diagnosis and
    the strategies to try next (--json: the same as an object).
    """
    from kernelopt.errors import BadInput
    from kernelopt.optimize import agent
    from kernelopt.report.progress import TerminalProgress

    if finish_run:
        if kernel_path or hypothesis:
            raise BadInput("--finish closes the run; give neither --kernel nor --hypothesis")
        from kernelopt.cli.optimize import render_summary
        from kernelopt.report import build_report

        with TerminalProgress() as progress:
            agent.finish(rundir, trials=trials, timeout_s=timeout_s, progress=progress.line,
                         status=progress.set_status)
        emit(build_report(rundir), as_json, render_summary)
        return
    if not kernel_path:
        raise BadInput("iterate needs --kernel NEW.py (or --finish)")
    if hypothesis is None or not hypothesis.strip():
        raise BadInput("iterate needs --hypothesis \"...\": the change and which metric should move, which way")
    # Neither flag: None, the store the run was started with (run.json).
    experience = experience_choice(no_experience, experience_db) if no_experience or experience_db else None
    with TerminalProgress() as progress:
        result = agent.iterate(rundir, kernel_path, hypothesis=hypothesis, strategy=strategy, parent=parent,
                               expected=expected, trials=trials, timeout_s=timeout_s, profile=not no_profile,
                               experience=experience, progress=progress.line, status=progress.set_status,
                               engine_progress=lambda e: progress.set_status(f"{e.candidate}: {e.text}"))
    emit(result, as_json, agent.render_iterate)
    if not result.correct:
        ctx.exit(1)
