"""The report of an optimize run: final_report.md, benchmark.md, convergence.png, best_kernel.py.

Everything is derived from the run directory's events (`RunDir.replay`), so the report
renders the same from a finished run, a run killed half-way, or one still running
(it opens the directory read-only and takes no lock).
"""

from __future__ import annotations

from pathlib import Path

from kernelopt.errors import BadInput
from kernelopt.harness.timing import speedup
from kernelopt.models.diagnosis import Diagnosis
from kernelopt.models.harness import Evaluation, Timing, TimingStats
from kernelopt.models.optimize import Proposal, RunState, Version
from kernelopt.models.report import (BottleneckSummary, ConvergencePoint, ProfileFailureRow, RejectionRow, RunSummary,
                                     StrategyStats, VersionRow)
from kernelopt.rundir import RunDir, atomic_write, iter_versions, verified_bytes

INTERPRETER_LABEL = "interpreter wall time"
GPU_LABEL = "GPU time"
NO_STRATEGY = "(none)"


def render_run(rundir: str | Path | RunDir) -> list[Path]:
    """Write the report files into the run directory; return their paths."""
    return [Path(p) for p in build_report(rundir).files]


def build_report(rundir: str | Path | RunDir) -> RunSummary:
    """Write final_report.md, benchmark.md, convergence.png and best_kernel.py; return the summary."""
    from kernelopt.report.plots import plot_convergence
    from kernelopt.resources import render_template

    run = rundir if isinstance(rundir, RunDir) else RunDir.open(rundir, readonly=True)
    state = run.replay()
    summary = summarize_run(run, state)
    written: list[Path] = []

    best = state.versions.get(summary.best.id) if summary.best else None
    if best is not None:
        target = run.path / "best_kernel.py"
        try:
            # The bytes that were evaluated (their hash was recorded when the loop wrote them),
            # read once: a file edited after its evaluation is never shipped.
            data = verified_bytes(best)
        except BadInput as exc:
            summary.best_kernel_refused = str(exc)
            target.unlink(missing_ok=True)  # an earlier copy would pass for the verified kernel
        else:
            atomic_write(target, data)
            written.append(target)

    png = run.path / "convergence.png"
    plot_convergence(summary, png)
    written.append(png)

    bench = run.path / "benchmark.md"
    rows = benchmark_rows(state, summary)
    first = next((stats for _, _, stats, _ in rows if stats is not None), None)
    atomic_write(bench, render_template("run_benchmark.md", s=summary, rows=rows, first=first))
    written.append(bench)

    final = run.path / "final_report.md"
    files = [p.name for p in written]
    atomic_write(final, render_template("final_report.md", s=summary, files=files, fmt_ms=fmt_ms, fmt_x=fmt_x))
    written.append(final)

    summary.files = [str(p) for p in sorted(written)]
    return summary


def summarize_run(run: RunDir, state: RunState | None = None) -> RunSummary:
    """Every figure the report shows, computed from the events."""
    state = state if state is not None else run.replay()
    config = run.config
    versions = list(iter_versions(state))
    evaluations = [v.evaluation for v in versions if v.evaluation is not None]
    interpreter = any(e.interpreter for e in evaluations)
    method = next((e.timing.method for e in evaluations if e.timing is not None), None)
    start = state.versions.get("v0")
    start_ms = start.median_ms if start else None

    rows = {v.id: _row(v, state, start_ms) for v in versions}
    best = _best(state)
    summary = RunSummary(
        path=str(run.path),
        problem=_problem_name(evaluations, config.problem),
        problem_path=config.problem,
        overrides=dict(config.overrides),
        kernel=config.kernel,
        optimizer=config.optimizer,
        device=next((e.device for e in evaluations if e.device), None) or config.device,
        interpreter=interpreter,
        time_label=INTERPRETER_LABEL if interpreter else GPU_LABEL,
        method=method,
        created_at=config.created_at,
        finished=state.finished,
        stop_reason=state.stop_reason,
        rounds_finished=state.rounds_finished,
        search_rounds=max(0, state.rounds_finished - 1),
        evaluations_done=state.evaluations_done,
        resumes=state.resumes,
        start=rows.get("v0"),
        best=rows.get(best.id) if best else None,
        versions=list(rows.values()),
        strategies=strategy_stats(list(rows.values()), state.failed_proposals),
        convergence=convergence(state),
        lessons=list(state.lessons),
        profile_failures=[ProfileFailureRow(version=v.id, profiler=v.profiler,
                                            reason=v.profile_failure.reason,
                                            message=_one_line(v.profile_failure.message))
                          for v in versions if v.profile_failure is not None],
        spent=spent_by_phase(state),
        spent_total_s=sum(state.spent.values()),
        refused=[v.refused for v in versions if v.refused],
        rejections=[RejectionRow.model_validate({**{k: r[k] for k in RejectionRow.model_fields if k in r},
                                                 "kind": r.get("call") or "propose"}) for r in state.rejections],
    )
    if best is not None:
        summary.lineage = [rows[vid] for vid in lineage(state, best.id)]
        _fill_speedup(summary, state, start, best)
        _fill_baselines(summary, state, best)
        summary.diagnosis_after = bottleneck_summary(best.diagnosis, best.profile_of)
        others = state.verified.get(best.id, [])[1:]  # [0] is the re-verification at the run's shape
        if others:
            from kernelopt.harness.shapes import describe

            summary.shape_checks = others
            summary.shapes = describe(others)
            summary.shapes_hold = all(c.passed for c in others)
    if start is not None:
        summary.diagnosis_before = bottleneck_summary(start.diagnosis, start.profile_of)
    return summary


def spent_by_phase(state: RunState) -> dict[str, float]:
    """The run's wall seconds by phase, in run order (PHASES first, then any other recorded)."""
    from kernelopt.models.optimize import PHASES

    order = [p for p in PHASES if p in state.spent] + sorted(set(state.spent) - set(PHASES))
    return {p: state.spent[p] for p in order}


def verdict(evaluation: Evaluation | None) -> tuple[str, str | None]:
    """('correct' | failure reason | 'not evaluated', one-line message)."""
    if evaluation is None:
        return "not evaluated", None
    if evaluation.raced_out and evaluation.timing is not None:
        t = evaluation.timing
        return "raced out", (f"clearly slower than the beam: the fastest of {t.count} timed calls, {t.min_ms:.4g} ms, "
                             f"above the time to beat {t.race_against_ms:.4g} ms (median so far "
                             f"{t.median_ms:.4g} ms); not verified, never promoted")
    if evaluation.failure is not None:
        return evaluation.failure.reason, _one_line(evaluation.failure.message)
    if evaluation.verification is not None and not evaluation.verification.passed:
        v = evaluation.verification
        return v.reason or "incorrect", _one_line(v.message) if v.message else None
    return "correct", None


def lineage(state: RunState, version_id: str) -> list[str]:
    """Version ids from the root (v0) down to `version_id`."""
    chain: list[str] = []
    seen: set[str] = set()
    current: str | None = version_id
    while current is not None and current in state.versions and current not in seen:
        seen.add(current)
        chain.append(current)
        current = state.versions[current].parent
    return chain[::-1]


def strategy_stats(rows: list[VersionRow], failed: list[Proposal] | None = None) -> list[StrategyStats]:
    """Per strategy: versions tried, correct, improved on their parent, best gain; most improved first.

    A transform counts like any other strategy: its versions are the strategy's versions, and a
    transform proposal that produced no source (`failed`) counts as tried, never correct."""
    stats: dict[str, StrategyStats] = {}
    for p in failed or []:
        name = p.strategy or NO_STRATEGY
        s = stats.setdefault(name, StrategyStats(strategy=name, tried=0, correct=0, improved=0))
        s.tried += 1
        s.transform = s.transform or (p.extra.get("transform") or {}).get("name")
    for row in rows:
        if row.id == "v0" or row.verdict == "not evaluated":
            continue
        name = row.strategy or NO_STRATEGY
        s = stats.setdefault(name, StrategyStats(strategy=name, tried=0, correct=0, improved=0))
        if row.transform:
            s.transform = row.transform.partition("@")[0]
        s.tried += 1
        s.correct += row.verdict == "correct"
        s.improved += row.improved
        if row.speedup_vs_parent is not None and (s.best_gain is None or row.speedup_vs_parent > s.best_gain):
            s.best_gain = row.speedup_vs_parent
    return sorted(stats.values(), key=lambda s: (-s.improved, -(s.best_gain or 0.0), s.strategy))


def convergence(state: RunState) -> list[ConvergencePoint]:
    """Fastest correct version evaluated up to each round (rounds with no evaluation included)."""
    versions = list(iter_versions(state))
    if not versions:
        return []
    last = max(max(v.round for v in versions), state.round)
    points: list[ConvergencePoint] = []
    best: Version | None = None
    for r in range(0, last + 1):
        for v in versions:
            if v.round == r and v.median_ms is not None and (best is None or v.median_ms < (best.median_ms or 0.0)):
                best = v
        points.append(ConvergencePoint(round=r, best_ms=best.median_ms if best else None, best=best.id if best else None))
    return points


def bottleneck_summary(diagnosis: Diagnosis | None, profile_of: str | None = None) -> BottleneckSummary | None:
    """The primary bottleneck as the report shows it; `profile_of`: the ancestor whose profile it is."""
    if diagnosis is None or diagnosis.primary is None:
        return None
    b = diagnosis.primary
    evidence = [
        f"{e.key} = {e.value:g}" + (f" ({e.op} {e.threshold:g})" if e.op and e.threshold is not None else "")
        for e in b.evidence
        if e.value is not None
    ]
    return BottleneckSummary(
        category=b.category,
        subcause=b.subcause,
        confidence=b.confidence,
        message=b.message,
        headroom_pct=b.headroom_pct,
        evidence=evidence,
        profile_of=profile_of,
    )


def benchmark_rows(state: RunState, summary: RunSummary) -> list[tuple[str, str, TimingStats | None, str | None]]:
    """(label, version or source, stats, error) for benchmark.md: best, start, then the baselines."""
    rows: list[tuple[str, str, TimingStats | None, str | None]] = []
    for label, row in (("best", summary.best), ("start", summary.start)):
        if row is None:
            continue
        version = state.versions[row.id]
        stats = state.retimed.get(row.id) if summary.retimed else None
        stats = stats or (version.evaluation.timing if version.evaluation and version.correct else None)
        rows.append((label, row.id, stats, None if stats else row.failure or row.verdict))
    for label, timing in _baselines(state).items():
        rows.append((label, "reference model", timing.stats, timing.error))
    return rows


def fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def fmt_x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


# ----------------------------------------------------------------------------- helpers


def _row(v: Version, state: RunState, start_ms: float | None) -> VersionRow:
    what, message = ("refused", v.refused) if v.refused else verdict(v.evaluation)
    stats = v.evaluation.timing if v.evaluation is not None and v.correct else None
    parent = state.versions.get(v.parent) if v.parent else None
    parent_stats = parent.evaluation.timing if parent is not None and parent.evaluation and parent.correct else None
    vs_parent = speedup(parent_stats, stats)
    improved = False
    if stats is not None and parent_stats is not None:
        noise = max(stats.iqr_ms, parent_stats.iqr_ms) / 2
        improved = parent_stats.median_ms - stats.median_ms > noise
    proposal = v.proposal
    spec = proposal.extra.get("transform") if proposal else None
    diff = Path(v.path).parent / "change.diff"
    return VersionRow(
        id=v.id,
        parent=v.parent,
        round=v.round,
        change=proposal.change if proposal else "starting kernel",
        strategy=proposal.strategy if proposal else None,
        transform=f"{spec['name']}@{spec.get('site') or ''}" if isinstance(spec, dict) and spec.get("name") else None,
        diff=f"{v.id}/change.diff" if v.parent and diff.is_file() else None,
        knobs=dict(proposal.knobs) if proposal else {},
        verdict=what,
        failure=message,
        median_ms=stats.median_ms if stats else None,
        iqr_ms=stats.iqr_ms if stats else None,
        cv=stats.cv if stats else None,
        speedup_vs_start=(start_ms / stats.median_ms) if stats and start_ms and stats.median_ms > 0 else None,
        speedup_vs_parent=vs_parent,
        improved=improved,
    )


def _best(state: RunState) -> Version | None:
    """The loop's winner when it named one and it is correct, else the fastest correct version."""
    named = state.versions.get(state.best) if state.best else None
    if named is not None and named.correct:
        return named
    correct = [v for v in state.versions.values() if v.median_ms is not None]
    return min(correct, key=lambda v: v.median_ms or 0.0) if correct else None


def _fill_speedup(summary: RunSummary, state: RunState, start: Version | None, best: Version) -> None:
    # The interleaved re-timing (same process, A-B-B-A) is the fairer comparison; use it when
    # both ends have one, never one re-timed figure against one from the search.
    retimed = start is not None and start.id in state.retimed and best.id in state.retimed
    s0 = state.retimed[start.id] if retimed and start else (start.evaluation.timing if start and start.correct and start.evaluation else None)
    s1 = state.retimed[best.id] if retimed else (best.evaluation.timing if best.evaluation else None)
    summary.retimed = retimed
    summary.start_ms = s0.median_ms if s0 else None
    summary.best_ms = s1.median_ms if s1 else None
    summary.speedup = speedup(s0, s1)
    if s0 is not None and s1 is not None:
        low_den = s1.median_ms + s1.iqr_ms / 2
        high_den = s1.median_ms - s1.iqr_ms / 2
        summary.speedup_low = (s0.median_ms - s0.iqr_ms / 2) / low_den if low_den > 0 else None
        summary.speedup_high = (s0.median_ms + s0.iqr_ms / 2) / high_den if high_den > 0 else None
        # Interpreter wall times are noisy CPU figures: a gain inside the spread is not a speedup.
        summary.within_spread = bool(
            summary.interpreter and summary.speedup_low is not None and summary.speedup_high is not None
            and summary.speedup_low <= 1.0 <= summary.speedup_high)


def _baselines(state: RunState) -> dict[str, Timing]:
    """The run's baselines event, else the baselines an evaluation carried (v0's first)."""
    if state.baselines:
        return dict(state.baselines)
    for v in iter_versions(state):
        if v.evaluation is not None and v.evaluation.baselines:
            return dict(v.evaluation.baselines)
    return {}


def _fill_baselines(summary: RunSummary, state: RunState, best: Version) -> None:
    for label, timing in _baselines(state).items():
        if timing.stats is None:
            continue
        summary.baselines_ms[label] = timing.stats.median_ms
        if summary.best_ms:
            summary.vs_baselines[label] = timing.stats.median_ms / summary.best_ms


def _problem_name(evaluations: list[Evaluation], path: str) -> str:
    return evaluations[0].problem.name if evaluations else Path(path).stem


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:197] + "..."
