"""`kernelopt optimize`: a thin shell over `kernelopt.optimize.loop.optimize` / `resume`."""

from __future__ import annotations

from typing import Any

import click

from kernelopt.cli.common import (
    dtype_option,
    emit,
    experience_choice,
    json_option,
    loop_options,
    parse_overrides,
    read_api_key,
    set_option,
)


def render_summary(s: Any) -> str:
    lines = [f"run        {s.path}", f"problem    {s.problem_path}", f"device     {s.device or '-'}",
             f"stopped    {s.stop_reason or 'not finished'} after {max(0, s.rounds_finished - 1)} search round(s), "
             f"{s.evaluations_done} evaluations"]
    if s.best is not None and s.start_ms and s.best_ms:
        spread = f" (IQR range {s.speedup_low:.2f}-{s.speedup_high:.2f}x)" if s.speedup_low and s.speedup_high else ""
        lines.append(f"best       {s.best.id}: {s.best_ms:.4g} ms vs v0 {s.start_ms:.4g} ms -> {s.speedup:.2f}x{spread}"
                     f" [{s.time_label}{', re-timed A-B-B-A' if s.retimed else ''}]")
        if s.shapes:
            lines.append(f"shapes     {s.shapes}")
        for label, ratio in s.vs_baselines.items():
            lines.append(f"vs {label:<8}{ratio:.2f}x ({s.baselines_ms[label]:.4g} ms)")
    if s.lineage:
        lines.append("lineage    " + " -> ".join(f"{v.id}" + (f" [{v.change}]" if v.change and v.id != 'v0' else "")
                                              for v in s.lineage))
    lines += [f"refused    {c}" for c in s.refused]
    if s.best_kernel_refused:
        lines.append(f"refused    best_kernel.py not written: {s.best_kernel_refused}")
    lines.append("report     " + (", ".join(s.files) if s.files else "-"))
    return "\n".join(lines)


@click.command("optimize", epilog="Exit codes: 0 finished (a faster kernel or not); 1 the starting kernel failed; "
                                  "2 bad input. Interrupted runs continue with --resume RUNDIR.")
@click.argument("problem_path", metavar="PROBLEM", type=click.Path(dir_okay=False), required=False)
@click.option("--kernel", "kernel_path", type=click.Path(dir_okay=False), metavar="CANDIDATE",
              help="The starting kernel (defines ModelNew or kernel_function).")
@set_option
@dtype_option
@click.option("--optimizer", default="knobs", show_default=True,
              help="knobs (no LLM), strategies (pack transforms, then knobs; no LLM), llm, agent, or a "
                   "third-party optimizer registered as an entry point.")
@click.option("--budget-evals", type=click.IntRange(min=1), default=None, help="Stop after this many evaluations.")
@click.option("--budget-minutes", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Time budget of the whole run (engine start, baselines, profiling, search, final re-timing): "
                   "a round proposes only as many versions as fit in the minutes left (at the mean evaluation "
                   "time so far), and no round starts after it.")
@loop_options
@click.option("-o", "--out", "run_dir", type=click.Path(file_okay=False), default=None,
              help="Run directory (default: runs/<problem>-<time>).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              help="Continue the run in this directory (PROBLEM and --kernel come from it).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--provider", default=None, help="llm: openai, anthropic or command.")
@click.option("--model", default=None, help="llm: model name (or KERNELOPT_LLM_MODEL).")
@click.option("--base-url", default=None, help="llm: OpenAI-compatible endpoint (or OPENAI_BASE_URL).")
@click.option("--api-key", default=None,
              help="llm: key, or - to read it from stdin (else from the environment); never written anywhere. "
                   "A key on the command line is readable by other processes: prefer --api-key-file.")
@click.option("--api-key-file", type=click.Path(dir_okay=False), default=None,
              help="llm: read the key from this file (its first line); never written anywhere.")
@click.option("--llm-command", default=None, help="llm --provider command: the command; prompt on stdin, reply on stdout.")
@click.option("--repairs", type=click.IntRange(min=0), default=2, show_default=True,
              help="llm: times a failing candidate goes back to the model with its failure.")
@json_option
def optimize(problem_path: str | None, kernel_path: str | None, overrides: tuple[str, ...], dtype: str | None,
             optimizer: str, budget_evals: int | None, budget_minutes: float | None, rounds: int, beam: int,
             proposals_per_member: int, seed: int, run_dir: str | None, resume_dir: str | None, executor: str,
             baselines: str, trials: int, timeout_s: float, no_profile: bool, no_experience: bool, experience_db: str | None,
             no_race: bool, no_cache: bool, provider: str | None, model: str | None, base_url: str | None,
             api_key: str | None,
             api_key_file: str | None, llm_command: str | None, repairs: int, as_json: bool) -> None:
    """Search for a faster kernel that is still correct, starting from CANDIDATE.

    Every version is verified and timed through the engine; the best ones are
    profiled and diagnosed, and the optimizer proposes one change at a time. The
    run directory holds every version, the event log (the state), and at the end
    final_report.md, benchmark.md, convergence.png and best_kernel.py.
    """
    import datetime
    from pathlib import Path

    from kernelopt.errors import BadInput
    from kernelopt.harness.baselines import parse_baselines
    from kernelopt.optimize import loop
    from kernelopt.report import build_report
    from kernelopt.report.progress import TerminalProgress

    names = parse_baselines(baselines)
    common: dict[str, Any] = dict(baselines=names, trials=trials, timeout_s=timeout_s, profile=not no_profile,
                                  experience=experience_choice(no_experience, experience_db), cache=not no_cache)
    key = read_api_key(api_key, api_key_file)
    secrets = {"api_key": key} if key else {}
    with TerminalProgress() as progress:
        common.update(progress=progress.line, status=progress.set_status,
                      engine_progress=lambda e: progress.set_status(f"{e.candidate}: {e.text}"))
        if resume_dir:
            if problem_path or kernel_path:
                raise BadInput("--resume RUNDIR takes the problem and kernel from the run; give neither")
            state_dir = resume_dir
            loop.resume(resume_dir, optimizer_secrets=secrets, **common)
        else:
            if not problem_path or not kernel_path:
                raise BadInput("optimize needs PROBLEM and --kernel CANDIDATE (or --resume RUNDIR)")
            options: dict[str, Any] = {}
            if optimizer == "llm":
                options = {k: v for k, v in (("provider", provider), ("model", model), ("base_url", base_url),
                                             ("llm_command", llm_command), ("repairs", repairs)) if v is not None}
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            state_dir = run_dir or str(Path("runs") / f"{Path(problem_path).resolve().parent.name}-{stamp}")
            loop.optimize(problem_path, kernel_path, run_dir=state_dir, overrides=parse_overrides(overrides),
                          dtype=dtype, optimizer=optimizer, optimizer_options=options, optimizer_secrets=secrets,
                          budget_evals=budget_evals, budget_minutes=budget_minutes, rounds=rounds, beam=beam,
                          proposals_per_member=proposals_per_member, seed=seed, executor=executor,
                          race=not no_race, **common)
    summary = build_report(state_dir)
    agent = (optimizer == "agent" and not resume_dir) or (resume_dir and summary.optimizer == "agent")
    if agent and not as_json:
        from kernelopt.optimize.agent import next_steps

        emit(summary, False, lambda s: render_summary(s) + "\n\n" + next_steps(state_dir))
        return
    emit(summary, as_json, render_summary)
