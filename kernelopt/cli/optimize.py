"""`kernelopt optimize`: a thin shell over `kernelopt.optimize.loop.optimize` / `resume`."""

from __future__ import annotations

from typing import Any

import click

from kernelopt.cli.common import (dtype_option, emit, experience_choice, given_params, interruptible, json_option,
                                  loop_options, optimizer_options, parse_overrides, set_option)


def render_summary(s: Any) -> str:
    lines = [f"run        {s.path}", f"problem    {s.problem_path}", f"device     {s.device or '-'}",
             f"stopped    {s.stop_reason or 'not finished'} after {s.search_rounds} search round(s), "
             f"{s.evaluations_done} evaluations"]
    if s.best is not None and s.start_ms and s.best_ms:
        spread = f" (IQR range {s.speedup_low:.2f}-{s.speedup_high:.2f}x)" if s.speedup_low and s.speedup_high else ""
        verdict = f"no measurable difference: {s.speedup:.2f}x is inside the spread{spread}" if s.within_spread \
            else f"{s.speedup:.2f}x{spread}"
        lines.append(f"best       {s.best.id}: {s.best_ms:.4g} ms vs v0 {s.start_ms:.4g} ms -> {verdict}"
                     f" [{s.time_label}{', re-timed A-B-B-A' if s.retimed else ', search timings'}]")
        if s.shapes:
            lines.append(f"shapes     {s.shapes}")
        for label, ratio in s.vs_baselines.items():
            lines.append(f"vs {label:<8}{ratio:.2f}x ({s.baselines_ms[label]:.4g} ms)")
    if s.lineage:
        lines.append("lineage    " + " -> ".join(f"{v.id}" + (f" [{v.change}]" if v.change and v.id != 'v0' else "")
                                              for v in s.lineage) + " (per-step times: search timings, in the report)")
    if s.rejections:
        lines.append(f"rejected   {len(s.rejections)} model repl{'y' if len(s.rejections) == 1 else 'ies'} gave no "
                     "proposal (reasons in final_report.md and events.jsonl)")
    lines += [f"refused    {c}" for c in s.refused]
    if s.best_kernel_refused:
        lines.append(f"refused    best_kernel.py not written: {s.best_kernel_refused}")
    lines.append("report     " + (", ".join(s.files) if s.files else "-"))
    return "\n".join(lines)


# CLI parameter -> RunConfig field, for the options a resume compares with the run's own.
_RESUME_FIELDS = {"dtype": "dtype", "optimizer": "optimizer", "budget_evals": "budget_evals",
                  "budget_minutes": "budget_minutes", "rounds": "rounds", "beam": "beam",
                  "proposals_per_member": "proposals_per_member", "seed": "seed", "executor": "executor",
                  "trials": "trials", "timeout_s": "timeout_s", "isolate": "isolate"}


@click.command("optimize", epilog="Exit codes: 0 finished (a faster kernel or not); 1 the starting kernel failed; "
                                  "2 bad input. Interrupted runs continue with --resume RUNDIR, with the options "
                                  "they started with (give --rounds or a budget again to extend them).")
@click.argument("problem_path", metavar="PROBLEM", type=click.Path(dir_okay=False), required=False)
@click.option("--kernel", "kernel_path", type=click.Path(dir_okay=False), metavar="CANDIDATE",
              help="The starting kernel (defines ModelNew or kernel_function).")
@set_option
@dtype_option
@optimizer_options
@click.option("--budget-evals", type=click.IntRange(min=1), default=None, help="Stop after this many evaluations.")
@click.option("--budget-minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Time budget of the whole run (engine start, baselines, profiling, search, final re-timing): "
                   "a round proposes only as many versions as fit in the minutes left (at the mean evaluation "
                   "time so far), and no round starts after it.")
@loop_options
@click.option("-o", "--out", "run_dir", type=click.Path(file_okay=False), default=None,
              help="Run directory (default: runs/<problem>-<time>). A directory whose run never evaluated "
                   "anything (a usage error stopped it) is started again in place.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              help="Continue the run in this directory with its own options (PROBLEM, --kernel and the rest "
                   "come from its run.json); --rounds, --budget-evals, --budget-minutes, --llm-timeout and "
                   "--llm-retries given again are applied, any other option that differs is refused.")
@json_option
@click.pass_context
def optimize(ctx: click.Context, problem_path: str | None, kernel_path: str | None, overrides: tuple[str, ...],
             dtype: str | None, optimizer: str, optimizer_options: dict[str, Any], optimizer_secrets: dict[str, Any],
             budget_evals: int | None, budget_minutes: float | None, rounds: int, beam: int,
             proposals_per_member: int, seed: int, baselines: str, trials: int, timeout_s: float, no_profile: bool,
             no_experience: bool, experience_db: str | None, no_race: bool, no_cache: bool,
             executor: str, isolate: str | None, run_dir: str | None,
             resume_dir: str | None, as_json: bool) -> None:
    """Search for a faster kernel that is still correct, starting from CANDIDATE.

    Every version is verified and timed through the engine; the best ones are
    profiled and diagnosed, and the optimizer proposes one change at a time. The
    run directory holds every version, the event log (the state), and at the end
    final_report.md, benchmark.md, convergence.png and best_kernel.py. Progress goes
    to stderr: every step on a terminal, one line per round otherwise.
    """
    import datetime
    from pathlib import Path

    from kernelopt.errors import BadInput
    from kernelopt.harness.baselines import parse_baselines
    from kernelopt.optimize import loop
    from kernelopt.report import build_report
    from kernelopt.report.progress import TerminalProgress

    state_dir: str | None = None

    def how_to_continue() -> str | None:
        if state_dir is None or not (Path(state_dir) / "run.json").is_file():
            return None
        return f"the run is in {state_dir}; continue it with: kernelopt optimize --resume {state_dir}"

    with interruptible(how_to_continue), TerminalProgress() as progress:
        callbacks: dict[str, Any] = dict(progress=progress.line, status=progress.set_status,
                                         milestone=progress.milestone, cache=not no_cache,
                                         engine_progress=lambda e: progress.set_status(f"{e.candidate}: {e.text}"))
        if resume_dir:
            if problem_path or kernel_path:
                raise BadInput("--resume RUNDIR takes the problem and kernel from the run; give neither")
            given = given_params(ctx)
            if "run_dir" in given:
                raise BadInput("-o: --resume continues RUNDIR in place; leave -o out")
            values = dict(dtype=dtype, optimizer=optimizer, budget_evals=budget_evals, budget_minutes=budget_minutes,
                          rounds=rounds, beam=beam, proposals_per_member=proposals_per_member, seed=seed,
                          executor=executor, trials=trials, timeout_s=timeout_s, isolate=isolate)
            again: dict[str, Any] = {field: values[param] for param, field in _RESUME_FIELDS.items() if param in given}
            if "overrides" in given:
                again["overrides"] = parse_overrides(overrides)
            if "baselines" in given:
                again["baselines"] = parse_baselines(baselines)
            if "no_profile" in given:
                again["profile"] = not no_profile
            if "no_race" in given:
                again["race"] = not no_race
            if "no_experience" in given or "experience_db" in given:
                again["experience"] = experience_choice(no_experience, experience_db)
            if optimizer_options:
                again["optimizer_options"] = optimizer_options
            state_dir = resume_dir
            loop.resume(resume_dir, optimizer_secrets=optimizer_secrets, **callbacks, **again)
        else:
            if not problem_path or not kernel_path:
                raise BadInput("optimize needs PROBLEM and --kernel CANDIDATE (or --resume RUNDIR)")
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            state_dir = run_dir or str(Path("runs") / f"{Path(problem_path).resolve().parent.name}-{stamp}")
            loop.optimize(problem_path, kernel_path, run_dir=state_dir, overrides=parse_overrides(overrides),
                          dtype=dtype, optimizer=optimizer, optimizer_options=optimizer_options,
                          optimizer_secrets=optimizer_secrets, budget_evals=budget_evals,
                          budget_minutes=budget_minutes, rounds=rounds, beam=beam,
                          proposals_per_member=proposals_per_member, seed=seed, executor=executor, race=not no_race,
                          isolate=isolate,
                          baselines=parse_baselines(baselines), trials=trials, timeout_s=timeout_s,
                          profile=not no_profile, experience=experience_choice(no_experience, experience_db),
                          **callbacks)
    summary = build_report(state_dir)
    if summary.optimizer == "agent" and not summary.finished and not as_json:
        from kernelopt.optimize.agent import next_steps

        emit(summary, False, lambda s: render_summary(s) + "\n\n" + next_steps(state_dir))
        return
    emit(summary, as_json, render_summary)
