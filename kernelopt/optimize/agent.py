"""Agent mode: an external coding agent (or a person) writes each version; kernelopt measures it.

    kernelopt optimize PROBLEM --kernel K --optimizer agent -o RUN   # v0: verified, timed, profiled; run left open
    kernelopt iterate RUN --kernel NEW.py --hypothesis "..."           # v1, v2, ...: one change each
    kernelopt iterate RUN --finish                                     # re-time the best A-B-B-A, close the run

`AgentOptimizer` proposes nothing: it only marks the run as interactive, so the loop stops
after v0. `iterate` appends one version through the same pieces the loop uses (the run
directory, the engine, `Loop.evaluate` / `promote` / `record_experience`), so an agent's
versions are measured, promoted, reported and remembered exactly like the loop's own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from kernelopt.errors import BadInput
from kernelopt.models.agent import AgentStatus, IterateResult, NextStep
from kernelopt.models.optimize import OptimizeContext, Proposal, RunState, Version

NEXT_SHOWN = 5


class AgentOptimizer:
    """The agent-mode optimizer: proposes nothing; `kernelopt iterate` brings the versions."""

    name = "agent"
    interactive = True
    accepts: frozenset[str] = frozenset()  # the agent decides what to change: an option here would be ignored
    # Its versions are model-written, as the LLM's: the run's engine (a resume evaluates what an
    # interrupted `iterate` left pending) isolates as `iterate` and `finish` do.
    isolation = "auto"

    def __init__(self, **options: Any) -> None:
        # Accepted and ignored: the agent, not the optimizer, decides what to change.
        self.options = dict(options)

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        return []


def iterate(
    run_dir: str | Path,
    kernel_path: str | Path,
    *,
    hypothesis: str,
    strategy: str | None = None,
    parent: str | None = None,
    expected: str | None = None,
    devices: Sequence[str] | None = None,
    trials: int | None = None,
    timeout_s: float | None = None,
    profile: bool = True,
    experience: Any = None,
    progress: Callable[[str], None] | None = None,
    status: Callable[[str], None] | None = None,
    engine_progress: Callable[[Any], None] | None = None,
) -> IterateResult:
    """Append one version written outside kernelopt to the open agent-mode run at `run_dir`.

    The version is written as the next `v{n}` (its own round), verified and timed through the
    run's engine, profiled and diagnosed when correct (ncu on a GPU; static report otherwise),
    promoted, recorded in the experience store and the report is re-rendered. An incorrect or
    failing version is recorded too; the result says so (`correct` False). Bad input (not a run,
    a finished run, no hypothesis, a kernel file that is not a candidate): BadInput.
    `trials` / `timeout_s` default to the run's own (run.json), so every version is judged alike.
    `experience`, the store the outcome is recorded in and the next steps are asked of, as optimize
    takes it (True: the default database, a path: that one, an open ExperienceStore, False: none);
    None: the run's own (run.json, what `optimize --experience` was given).
    """
    from kernelopt.files import read_text
    from kernelopt.optimize.loop import Loop, normalized_source_hash
    from kernelopt.problem import load_candidate, load_problem

    say = progress or (lambda text: None)
    if not hypothesis or not hypothesis.strip():
        raise BadInput("--hypothesis: say what the change is and which metric should move, which way")
    rundir = _open_agent_run(run_dir)
    store, own = None, False
    try:
        state = rundir.replay()
        config = rundir.config
        candidate = load_candidate(kernel_path)  # BadInput for a missing file or one with no entry point
        source = read_text(kernel_path, "candidate")
        parent = parent or state.best or (state.beam[0] if state.beam else None)
        if parent is None or parent not in state.versions:
            known = ", ".join(state.versions) or "none"
            raise BadInput(f"--parent {parent}: no such version in {rundir.path} (versions: {known})")
        if state.versions[parent].evaluation is None:
            raise BadInput(f"--parent {parent}: not evaluated yet; continue the run first (kernelopt optimize --resume {rundir.path})")
        digest = normalized_source_hash(source)
        for v in state.versions.values():
            if normalized_source_hash(read_text(v.path)) == digest:
                raise BadInput(f"{kernel_path}: the same kernel as {v.id} (comments and blank lines aside); change one thing")
        if strategy is not None:
            _check_strategy(strategy)
        problem = load_problem(config.problem, config.overrides, config.dtype)
        trials, timeout_s = _judged_as(config, trials, timeout_s)

        round_ = max(state.round + 1, state.rounds_finished)
        proposal = Proposal(source=source, parent=parent, strategy=strategy, change=_first_line(hypothesis),
                            hypothesis=hypothesis.strip(), expected=expected, optimizer="agent",
                            extra={"submitted": str(Path(kernel_path).resolve())})
        store, own = _experience_store(config, experience, say)
        rundir.record_round_started(round_)
        vid = rundir.write_version(source, round=round_, proposal=proposal).id
        say(f"{vid}: {candidate.name} (parent {parent})")

        from kernelopt.harness.evaluate import Engine

        # No baselines: eager / compile were timed with v0 and are in the run already.
        # An agent's candidates are model-written: a real OS sandbox where there is one.
        with Engine(problem, trials=trials, timeout_s=timeout_s, seed=config.seed, executor=config.executor,
                    devices=devices, progress=engine_progress, isolate=config.isolate or "auto") as engine:
            loop = Loop(rundir, problem, config, engine=engine, optimizer=AgentOptimizer(), profile=profile,
                        experience=store, progress=progress, status=status)
            # Evaluated with it: a version an earlier iterate wrote but was killed before evaluating.
            pending = rundir.pending()
            loop.evaluate(pending)
            profiled = "no"
            if profile and loop.state.versions[vid].correct:
                since = time.monotonic()
                profiled = loop.profile_one(vid)
                # Recorded like the loop's own profiles: the next profile's cost is estimated from them.
                loop.spend("profiling", since)
            loop.promote()
            loop.profile_beam()
            loop.record_experience(pending)
        loop.refresh()
        rundir.record_round_finished(round_, loop.state.beam[0] if loop.state.beam else None)
        state = rundir.replay()
        record_id = next((e.get("record") for e in reversed(rundir.events())
                          if e["type"] == "experience_recorded" and e.get("version") == vid), None)
        files = _render(rundir, say)
        result = _result(rundir.path, state, vid, profiled, store, problem, config, candidate.backend)
        wanted = config.experience if experience is None else experience
    finally:
        rundir.close()
        if store is not None and own:
            store.close()
    result.experience_record = record_id
    result.report = files
    if store is None and wanted:
        result.notes.append("experience store unavailable: the outcome is not recorded")
    return result


def agent_status(run_dir: str | Path, *, experience: Any = None) -> AgentStatus:
    """Where a run stands for an agent: the best version, its diagnosis, what to try next (asked of
    the store `experience` names, as `iterate` takes it; None: the run's own)."""
    from kernelopt.optimize.loop import version_situation
    from kernelopt.rundir import RunDir
    from kernelopt.problem import load_candidate, load_problem
    from kernelopt.report.run_report import GPU_LABEL, INTERPRETER_LABEL, _best

    run = RunDir.open(run_dir, readonly=True)
    state = run.replay()
    best = _best(state)
    v0 = state.versions.get("v0")
    interpreter = any(v.evaluation.interpreter for v in state.versions.values() if v.evaluation)
    out = AgentStatus(run_dir=str(run.path), finished=state.finished, versions=len(state.versions),
                      time_label=INTERPRETER_LABEL if interpreter else GPU_LABEL)
    if best is None:
        out.notes.append("no correct version yet")
        return out
    out.best, out.best_ms = best.id, best.median_ms
    out.best_speedup_vs_v0 = _ratio(v0, best)
    out.diagnosis = best.diagnosis
    store, own = _experience_store(run.config, experience, lambda text: None)
    backend = load_candidate(best.path).backend
    problem = best.evaluation.problem if best.evaluation else load_problem(run.config.problem, run.config.overrides,
                                                                           run.config.dtype)
    try:
        out.next, out.avoid, notes = next_steps_for(state, best, version_situation(best, problem, run.config, backend),
                                                    store)
    finally:
        if store is not None and own:
            store.close()
    out.notes += notes
    return out


def next_steps(run_dir: str | Path) -> str:
    """What the agent should do next, as text: printed by `kernelopt optimize --optimizer agent`."""
    s = agent_status(run_dir)
    run = s.run_dir
    lines = []
    if s.finished:
        lines.append(f"run {run} is finished; start a new one to go on from its best kernel")
    if s.best is None:
        lines.append(f"run {run}: no correct version yet; fix the starting kernel (kernelopt check) and start again")
        return "\n".join(lines)
    ratio = f" ({s.best_speedup_vs_v0:.2f}x v0)" if s.best_speedup_vs_v0 and s.best != "v0" else ""
    lines.append(f"best       {s.best}: {_ms(s.best_ms)} [{s.time_label}]{ratio}")
    lines += _diagnosis_lines(s.diagnosis)
    lines += _next_lines(s.next, s.avoid)
    lines += [f"note: {n}" for n in s.notes]
    if not s.finished:
        top = next((n.strategy for n in s.next if not n.tried), None)
        kernel = Path(run) / s.best / "kernel.py"
        lines += [
            "",
            f"Next: copy {kernel} to a new file, make ONE change, then measure it:",
            f'  kernelopt iterate {run} --kernel NEW.py --hypothesis "what changes, which metric moves which way"'
            + (f" --strategy {top}" if top else ""),
            f"When done: kernelopt iterate {run} --finish",
        ]
    return "\n".join(lines)


def finish(
    run_dir: str | Path,
    *,
    devices: Sequence[str] | None = None,
    trials: int | None = None,
    timeout_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    status: Callable[[str], None] | None = None,
    engine_progress: Callable[[Any], None] | None = None,
) -> RunState:
    """Close an agent-mode run: re-time v0 and the best few interleaved and verify the fastest once
    more (the loop's `choose_winner`), name the winner, record `run_finished`, render the report.
    `trials` / `timeout_s` default to the run's own (run.json)."""
    from kernelopt.harness.evaluate import Engine
    from kernelopt.optimize.loop import Loop
    from kernelopt.problem import load_problem

    rundir = _open_agent_run(run_dir)
    try:
        config = rundir.config
        problem = load_problem(config.problem, config.overrides, config.dtype)
        trials, timeout_s = _judged_as(config, trials, timeout_s)
        # An agent's candidates are model-written: a real OS sandbox where there is one.
        with Engine(problem, trials=trials, timeout_s=timeout_s, seed=config.seed, executor=config.executor,
                    devices=devices, progress=engine_progress, isolate=config.isolate or "auto") as engine:
            loop = Loop(rundir, problem, config, engine=engine, optimizer=AgentOptimizer(), profile=False,
                        progress=progress, status=status, timeout_s=timeout_s)
            loop.evaluate(rundir.pending())
            loop.promote()
            winner = loop.choose_winner()
        rundir.record_run_finished("finished by the agent", winner)
        state = rundir.replay()
        _render(rundir, progress or (lambda text: None))
    finally:
        rundir.close()
    return state


# --- pieces ----------------------------------------------------------------------------------


def _judged_as(config: Any, trials: int | None, timeout_s: float | None) -> tuple[int, float]:
    """The trials and timeout a version is judged with: the call's when given, else the run's."""
    return (config.trials if trials is None else trials), (config.timeout_s if timeout_s is None else timeout_s)


def _open_agent_run(run_dir: str | Path) -> Any:
    """The run directory, locked, when it is an open agent-mode run whose v0 was evaluated."""
    from kernelopt.rundir import RunDir

    rundir = RunDir.open(run_dir)
    try:
        state = rundir.replay()
        if state.finished:
            raise BadInput(f"{rundir.path}: the run is finished ({state.stop_reason}); "
                           "start a new one with kernelopt optimize ... --optimizer agent")
        if rundir.config.optimizer != "agent":
            raise BadInput(f"{rundir.path}: not an agent-mode run (optimizer {rundir.config.optimizer}); "
                           f"continue it with kernelopt optimize --resume {rundir.path}")
        v0 = state.versions.get("v0")
        if v0 is None or v0.evaluation is None:
            raise BadInput(f"{rundir.path}: v0 was not evaluated; continue with kernelopt optimize --resume {rundir.path}")
        if not v0.correct:
            raise BadInput(f"{rundir.path}: the starting kernel failed; fix it and start a new run")
    except BaseException:
        rundir.close()
        raise
    return rundir


def _check_strategy(strategy: str) -> None:
    from kernelopt.strategies import load_strategies

    if strategy not in load_strategies().strategies:
        raise BadInput(f"--strategy {strategy}: no such strategy (kernelopt strategies list); "
                       "leave it out for a change no pack names")


def _experience_store(config: Any, experience: Any, say: Callable[[str], None]) -> tuple[Any, bool]:
    """(the store to record in and ask, whether it was opened here and is closed here): `experience`
    as optimize takes it, None for the run's own setting (run.json)."""
    from kernelopt.optimize.loop import open_experience

    if hasattr(experience, "add"):
        return experience, False
    return open_experience(config.experience if experience is None else experience, say), True


def _render(rundir: Any, say: Callable[[str], None]) -> list[str]:
    from kernelopt.report.run_report import render_run

    try:
        return [str(p) for p in render_run(rundir.path)]
    except Exception as exc:  # noqa: BLE001 - the report can be re-rendered with `kernelopt report`
        say(f"report not rendered ({exc}); run `kernelopt report {rundir.path}`")
        return []


def _result(path: Path, state: RunState, vid: str, profiled: str, store: Any, problem: Any, config: Any,
            backend: str) -> IterateResult:
    from kernelopt.optimize.loop import attempt_of, version_situation
    from kernelopt.report.run_report import GPU_LABEL, INTERPRETER_LABEL, _best, verdict

    version = state.versions[vid]
    parent = state.versions.get(version.parent or "")
    ev = version.evaluation
    what, message = verdict(ev)
    best = _best(state)
    v0 = state.versions.get("v0")
    proposal = version.proposal
    assert proposal is not None
    result = IterateResult(
        run_dir=str(path), version=vid, parent=version.parent, round=version.round, strategy=proposal.strategy,
        hypothesis=proposal.hypothesis or proposal.change, verdict=what, message=message, correct=version.correct,
        outcome=attempt_of(version, parent).outcome,
        timing=ev.timing if ev is not None and version.correct else None,
        time_label=INTERPRETER_LABEL if ev is not None and ev.interpreter else GPU_LABEL,
        suspect=list(ev.suspect) if ev is not None else [],
        speedup_vs_parent=_ratio(parent, version), speedup_vs_v0=_ratio(v0, version),
        best=best.id if best else None, best_speedup_vs_v0=_ratio(v0, best) if best else None,
        diagnosis=version.diagnosis, profiled=profiled,  # type: ignore[arg-type]
        next_parent=best.id if best else None,
    )
    failed = version.profile_failure
    if version.correct and profiled == "no":
        result.notes.append(f"not profiled ({version.profiler or 'profiler'}): {failed.reason}: {_first_line(failed.message)}"
                            if failed is not None else
                            "not profiled here: a static report needs a CUDA GPU, a diagnosis also Nsight Compute")
    elif profiled == "static":
        result.notes.append("static report only (no ncu): no diagnosis")
    if best is not None:
        result.next, result.avoid, notes = next_steps_for(state, best, version_situation(best, problem, config, backend),
                                                          store)
        result.notes += notes
    return result


def next_steps_for(state: RunState, version: Version, situation: Any, store: Any,
                   limit: int | None = NEXT_SHOWN) -> tuple[list[NextStep], list[Any], list[str]]:
    """Strategies to try on `version` in `situation` (`loop.version_situation`: what the loop asks
    about it): the recommend stage's ranking, the packs for its diagnosis blended with the experience
    store when one is open; those this run already tried last, the first `limit` of them; known
    failures to avoid; notes on what the recommendations could not use."""
    from kernelopt.optimize.loop import attempt_of
    from kernelopt.recommend import recommend

    notes: list[str] = []
    if version.diagnosis is None:
        notes.append(f"{version.id} has no diagnosis (needs a GPU with Nsight Compute): "
                     "recommendations come from past outcomes of similar kernels only")
    try:
        advice = recommend(situation, store, n=NEXT_SHOWN * 2)
    except Exception as exc:  # noqa: BLE001 - advisory: a broken pack or store must not hide the measurement
        notes.append(f"recommendations unavailable ({exc})")
        return [], [], notes
    notes += advice.notes
    if advice.seed is not None:
        knobs = ", ".join(f"{k}={v}" for k, v in advice.seed.knobs.items())
        notes.append(f"start from: {knobs} ({advice.seed.reason})")
    tried: dict[str, list[str]] = {}
    for v in state.versions.values():
        if v.proposal is not None and v.proposal.strategy and v.evaluation is not None:
            parent = state.versions.get(v.parent or "")
            tried.setdefault(v.proposal.strategy, []).append(f"{v.id}: {attempt_of(v, parent).outcome}")
    steps = [NextStep(strategy=r.strategy, title=r.title, reason=r.reason, source=r.source, score=r.score,
                      tried=tried.get(r.strategy, [])) for r in advice.recommendations]
    # Untried first, then an optimizer's generic moves (stable: each group keeps its ranking);
    # a tried one stays visible, marked.
    generic = {r.strategy for r in advice.recommendations if r.generic}
    steps.sort(key=lambda s: (bool(s.tried), s.strategy in generic))
    return steps[:limit], advice.known_failures[:3], notes


def _ratio(base: Version | None, new: Version | None) -> float | None:
    if base is None or new is None or not base.median_ms or not new.median_ms:
        return None
    return base.median_ms / new.median_ms


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0].strip()
    return line if len(line) <= 200 else line[:197] + "..."


def _ms(value: float | None) -> str:
    return f"{value:.4g} ms" if value is not None else "-"


# --- human output ------------------------------------------------------------------------------


def _diagnosis_lines(diagnosis: Any) -> list[str]:
    if diagnosis is None or diagnosis.primary is None:
        return []
    p = diagnosis.primary
    sub = f"/{p.subcause}" if p.subcause else ""
    head = f"diagnosis  {p.category}{sub} (confidence {p.confidence:.2f})"
    if p.headroom_pct is not None:
        head += f", headroom {p.headroom_pct:.0f}%" + (" - near the roofline" if p.near_roofline else "")
    lines = [head, f"           {p.message}"]
    for e in p.evidence[:4]:
        if e.value is not None:
            lines.append(f"           {e.key} = {e.value:g}" + (f" ({e.op} {e.threshold:g})" if e.op and e.threshold is not None else ""))
    return lines


def _next_lines(steps: list[NextStep], avoid: list[Any]) -> list[str]:
    lines = []
    for s in steps:
        tried = f"  (tried: {', '.join(s.tried)})" if s.tried else ""
        lines.append(f"next: try {s.strategy}: {s.title or s.strategy}{tried}")
        lines.append(f"        why: {s.reason}")
    for f in avoid:
        lines.append(f"avoid: {f.strategy}: {f.reason}")
    return lines


def render_iterate(r: IterateResult) -> str:
    """The human output of `kernelopt iterate`."""
    head = f"{r.version:<11}{'correct' if r.correct else 'FAIL ' + r.verdict}"
    if r.message and not r.correct:
        head += f": {r.message}"
    lines = [head, f"parent     {r.parent}" + (f"  strategy {r.strategy}" if r.strategy else "")]
    if r.timing is not None:
        spread = f" (IQR {r.timing.iqr_ms:.3g} ms, CV {r.timing.cv:.1%})"
        lines.append(f"time       {_ms(r.timing.median_ms)}{spread} [{r.time_label}]")
        if r.suspect:
            lines.append(f"suspect    {'; '.join(r.suspect)}")
    vs = []
    if r.speedup_vs_parent is not None:
        vs.append(f"{r.speedup_vs_parent:.2f}x vs {r.parent} ({r.outcome})")
    if r.speedup_vs_v0 is not None and r.parent != "v0":
        vs.append(f"{r.speedup_vs_v0:.2f}x vs v0")
    if vs:
        lines.append("speedup    " + ", ".join(vs))
    best = f"{r.best}" + (f" ({r.best_speedup_vs_v0:.2f}x v0)" if r.best_speedup_vs_v0 and r.best != "v0" else "")
    lines.append(f"best       {best or '-'}")
    lines += _diagnosis_lines(r.diagnosis)
    if r.experience_record:
        lines.append(f"recorded   experience {r.experience_record}")
    lines += _next_lines(r.next, r.avoid)
    lines += [f"note: {n}" for n in r.notes]
    if r.next_parent:
        lines.append(f"next parent {r.next_parent}: {Path(r.run_dir) / r.next_parent / 'kernel.py'}")
    return "\n".join(lines)


__all__ = ["AgentOptimizer", "iterate", "finish", "agent_status", "next_steps", "next_steps_for", "render_iterate"]
