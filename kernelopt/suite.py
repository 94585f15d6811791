"""`kernelopt suite run`: an optimizer over every problem of a benchmark suite, and its score.

Each problem runs through `kernelopt.optimize.loop.optimize` in its own run directory
(OUT/runs/<name>); the engine inside that run already spreads evaluations over every
visible GPU, so problems simply run one after another. `parallel_problems=True` runs
one problem per GPU instead (the multi-GPU scaling measurement).

State and resume. OUT/suite.jsonl gets one line (a ProblemResult) per finished
problem, appended and fsynced as the optimize run's events.jsonl is. A killed suite
run started again with the same OUT skips the problems listed there, and the problem
that was running continues through `kernelopt.optimize.loop.resume` from its run
directory, so nothing it finished is evaluated again.

Scores. fast_p and the geometric means are computed as KernelBench computes them
(see `fast_p`). Baselines (eager, torch.compile) are the times the engine recorded in
each run; without a GPU there are none, and every figure against them is None
("not measured"), never 0.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from kernelopt.errors import BadInput, work_closed, work_opened
from kernelopt.models.suite import BASELINES, FastP, ProblemResult, SuiteResult
from kernelopt.optimize import DEFAULT_OPTIMIZER
from kernelopt.problem import declared_family

P_VALUES: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
RESULTS = "suite.jsonl"
CONFIG = "suite_config.json"
RESULT_JSON = "suite_result.json"
LOCK = ".suite.lock"
RUNS = "runs"


# ----------------------------------------------------------------------------- scores


def fast_p(results: Sequence[ProblemResult], p: float, baseline: str) -> float | None:
    """The fraction of ALL problems that are correct and more than `p` times faster than `baseline`.

    As KernelBench defines it (ScalingIntelligence/KernelBench, src/score.py, `fastp`):
    speedups are taken over the correct samples only, `np.sum(speed_up > p)` of them
    count, and the sum is divided by n, the number of ALL samples, so incorrect
    problems stay in the denominator. p = 0 is the fraction correct.

    None when no problem has a time for `baseline` (not measured: no GPU). A correct
    problem whose own baseline time is missing (its torch.compile failed, say) cannot
    be shown faster and counts as not faster; `unmeasured` reports how many did.
    """
    if baseline not in BASELINES:
        raise BadInput(f"baseline {baseline!r}: expected one of {', '.join(BASELINES)}")
    if not results or not any(r.baseline_ms(baseline) is not None for r in results):
        return None
    fast = 0
    for r in results:
        if not r.correct:
            continue
        ratio = r.speedup(baseline)
        if p <= 0:
            # Any finite positive speedup is > 0: p = 0 counts every correct problem.
            fast += 1
        elif ratio is not None and ratio > p:
            fast += 1
    return fast / len(results)


def unmeasured(results: Sequence[ProblemResult], baseline: str) -> int:
    """Correct problems that have no speedup against `baseline` (its time missing)."""
    return sum(1 for r in results if r.correct and r.speedup(baseline) is None)


def geomean_speedup(results: Sequence[ProblemResult], baseline: str) -> float | None:
    """Geometric mean of the speedups of the correct problems (KernelBench's
    `geometric_mean_speed_ratio_correct_only`, src/score.py), over those with a time for
    `baseline`; None when there is none (KernelBench returns 0 there, which reads as a
    measured slowdown, so this says "not measured" instead)."""
    ratios = [r.speedup(baseline) for r in results if r.correct]
    values = [x for x in ratios if x is not None and x > 0]
    if not values:
        return None
    return math.exp(sum(math.log(x) for x in values) / len(values))


def score(results: Sequence[ProblemResult], ps: Iterable[float] = P_VALUES) -> tuple[list[FastP], dict[str, float | None], dict[str, int]]:
    """fast_p rows, geometric means and unmeasured counts against every baseline."""
    rows = [FastP(p=p, **{b: fast_p(results, p, b) for b in BASELINES}) for p in ps]
    geo = {b: geomean_speedup(results, b) for b in BASELINES}
    # Only where the baseline was timed at all: an untimed one is "not measured" as a whole.
    missing = {b: unmeasured(results, b) for b in BASELINES if any(r.baseline_ms(b) is not None for r in results)}
    return rows, geo, missing


# ----------------------------------------------------------------------------- the suite on disk


def problem_names(suite_dir: Path) -> list[str]:
    """Folders of `suite_dir` holding a problem.py and a kernel.py, sorted."""
    if not suite_dir.is_dir():
        raise BadInput(f"{suite_dir}: not a directory")
    names = sorted(p.name for p in suite_dir.iterdir()
                   if p.is_dir() and (p / "problem.py").is_file() and (p / "kernel.py").is_file())
    if not names:
        raise BadInput(f"{suite_dir}: no problems (folders with problem.py and kernel.py)")
    return names


def select(names: list[str], problems: str | Sequence[str] | None) -> list[str]:
    """The problems asked for, in the order asked; unknown names are bad input."""
    if problems is None:
        return list(names)
    asked = [p.strip() for p in (problems.split(",") if isinstance(problems, str) else problems) if p.strip()]
    unknown = [p for p in asked if p not in names]
    if unknown:
        raise BadInput(f"--problems: unknown problem{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                       f"(known: {', '.join(names)})")
    if not asked:
        raise BadInput("--problems: no problem named")
    return list(dict.fromkeys(asked))


def _module_tree(path: Path) -> ast.Module:
    from kernelopt.files import read_text

    try:
        return ast.parse(read_text(path, "problem"), filename=str(path))
    except SyntaxError as exc:
        raise BadInput(f"{path}:{exc.lineno or ''}: syntax error: {exc.msg}") from None


def small_shape(problem_path: Path) -> dict[str, str]:
    """The problem's module-level SMALL dict as `--set` strings (read statically, never run)."""
    from kernelopt.problem import small_shape as declared

    small = declared(problem_path)
    if small is None:
        raise BadInput(f"{problem_path}: --small needs a module-level SMALL dict of constant overrides")
    return small


_ARITH: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_LIMIT = 1e30  # far above any tensor's bytes or FLOPs; stops a pathological `**` early


def _arith(node: ast.AST, env: dict[str, Any]) -> Any:
    """Integer/float arithmetic over earlier module constants; anything else raises ValueError.

    Problem files are user code and run only in child processes; BYTES and FLOPS are
    formulas over the shape constants, so they are worked out here from the syntax tree."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arith(node.operand, env)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        left, right = _arith(node.left, env), _arith(node.right, env)
        if not all(isinstance(v, (int, float)) for v in (left, right)):
            raise ValueError("not a number")
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > _LIMIT):
            raise ValueError("exponent out of range")
        value = _ARITH[type(node.op)](left, right)
        if abs(value) > _LIMIT:
            raise ValueError("out of range")
        return value
    raise ValueError(f"unsupported expression {type(node).__name__}")


def shape_figures(problem_path: Path, overrides: dict[str, str] | None = None) -> tuple[float | None, float | None, str | None]:
    """(BYTES, FLOPS, PRECISION) of a problem at its constants after `overrides`; None where not declared."""
    from kernelopt.problem import load_problem

    typed = load_problem(problem_path, overrides).overrides  # typed as --set types them, checked
    env: dict[str, Any] = {}
    for node in _module_tree(problem_path).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name in typed:
            env[name] = typed[name]
            continue
        try:
            env[name] = _arith(node.value, env)
        except (ValueError, ZeroDivisionError, OverflowError, TypeError, RecursionError):
            env.pop(name, None)
    figures = []
    for key in ("BYTES", "FLOPS"):
        value = env.get(key)
        figures.append(float(value) if isinstance(value, (int, float)) and value >= 0 else None)
    precision = env.get("PRECISION")
    return figures[0], figures[1], precision if isinstance(precision, str) else None


def roofline_fraction(nbytes: float | None, flops: float | None, precision: str | None, best_ms: float | None,
                      device: str | None) -> tuple[float | None, str | None, str | None]:
    """(fraction, 'dram' | 'compute', ceilings source) for the best time on `device`.

    fraction = max(BYTES / peak bandwidth, FLOPS / peak FLOP/s) / best time: the share of
    the roofline's lower bound on the time that the kernel reaches. Peaks are the
    measured ones cached by `kernelopt env --measure` where present, else the datasheet's
    (`knowledge/devices.yaml`): `kernelopt.devices.dram_peak` / `compute_peak`.
    None on a device with no known peaks (the CPU interpreter) or without BYTES/FLOPS."""
    from kernelopt.devices import compute_peak, dram_peak

    if not best_ms or best_ms <= 0 or not device or (nbytes is None and flops is None):
        return None, None, None
    bw, bw_source = dram_peak(device)
    peak, peak_source = compute_peak(device, precision)
    sources = [x for x in (bw_source, peak_source) if x]
    terms = {"dram": nbytes / bw if nbytes is not None and bw else None,
             "compute": flops / peak if flops is not None and peak else None}
    known = {k: v for k, v in terms.items() if v is not None}
    if not known:
        return None, None, None
    bound = max(known, key=lambda k: known[k])
    return known[bound] / (best_ms * 1e-3), bound, ", ".join(sources)


# ----------------------------------------------------------------------------- suite.jsonl


def read_results(path: Path) -> list[ProblemResult]:
    """Finished problems from suite.jsonl; a torn last line (a kill mid-append) is ignored."""
    if not path.exists():
        return []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    out: list[ProblemResult] = []
    for number, line in enumerate(lines[:-1], start=1):
        if not line.strip():
            continue
        try:
            out.append(ProblemResult.model_validate_json(line))
        except ValueError:
            raise BadInput(f"{path}:{number}: not a suite result line (the file is damaged)") from None
    return out


def append_result(path: Path, result: ProblemResult) -> None:
    """One line, one write, fsynced; a torn tail left by an earlier kill is cut first."""
    from kernelopt.errors import Interrupted, interrupted_by
    from kernelopt.rundir import append_line, cut_torn_tail

    if interrupted_by() is not None:
        # As RunDir.append: after a swallowed interrupt the problem's row (a failure made by the
        # killed workers) is not true, and a written row would make the suite's resume skip it.
        raise Interrupted()
    cut_torn_tail(path)
    append_line(path, (result.model_dump_json() + "\n").encode("utf-8"))


class _SuiteLock:
    """An exclusive flock on OUT: two suite processes on one OUT would run the same problems."""

    def __init__(self, out: Path) -> None:
        from kernelopt.rundir import take_lock

        self.fd: int | None = take_lock(out / LOCK, lambda pid: f"{out}: a suite run is already using it (pid {pid})")
        # While the suite runs, an interrupt stays marked for all its threads, between problems too.
        work_opened()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None
            work_closed()


# ----------------------------------------------------------------------------- running


_IDENTITY = ("suite_dir", "small", "optimizer")


def _check_config(out: Path, config: dict[str, Any], resume: bool) -> None:
    """A new OUT gets suite_config.json; an existing one must be the same suite, shapes and optimizer."""
    from kernelopt.rundir import atomic_write

    path = out / CONFIG
    if path.exists():
        if not resume:
            raise BadInput(f"{out}: already holds a suite run; run it again to resume, or give a new -o")
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            raise BadInput(f"{path}: not a suite configuration") from None
        changed = [k for k in _IDENTITY if before.get(k) != config.get(k)]
        if changed:
            what = ", ".join(f"{k} {before.get(k)!r} -> {config.get(k)!r}" for k in changed)
            raise BadInput(f"{out}: was started with other settings ({what}); resume with the same ones or give a new -o")
        return
    atomic_write(path, json.dumps(config, indent=2) + "\n")


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _result_of(name: str, run_dir: Path, *, family: str | None, figures: tuple[float | None, float | None, str | None],
               overrides: dict[str, str], wall_s: float, evaluations_before: int, resumed: bool,
               failure: str | None) -> ProblemResult:
    """The problem's row, from its run directory's report summary (the same figures `kernelopt report` shows)."""
    from kernelopt.rundir import RunDir
    from kernelopt.report.run_report import summarize_run

    nbytes, flops, precision = figures
    base = ProblemResult(name=name, family=family, correct=False, run_dir=str(run_dir), bytes=nbytes, flops=flops,
                         precision=precision, overrides=dict(overrides), wall_s=wall_s, resumed=resumed,
                         failure=failure)
    if not (run_dir / "events.jsonl").is_file():
        return base
    run = RunDir.open(run_dir, readonly=True)
    state = run.replay()
    s = summarize_run(run, state)
    baseline_errors = {label: _one_line(t.error) for label, t in state.baselines.items() if t.stats is None and t.error}
    correct = s.best is not None and s.best_ms is not None
    if failure is None and not correct:
        start = s.start
        failure = (f"starting kernel: {start.verdict}" + (f": {start.failure}" if start.failure else "")) if start \
            else "no version was evaluated"
    fraction, bound, ceilings = roofline_fraction(nbytes, flops, precision, s.best_ms if correct else None, s.device)
    best = s.best_ms if correct else None
    eager, compiled = s.baselines_ms.get("eager"), s.baselines_ms.get("compile")
    return base.model_copy(update=dict(
        correct=correct, start_ms=s.start_ms, best_ms=best, best_version=s.best.id if correct and s.best else None,
        eager_ms=eager, compile_ms=compiled, baseline_errors=baseline_errors,
        speedup_vs_start=s.speedup if correct else None,
        speedup_vs_eager=eager / best if eager and best else None,
        speedup_vs_compile=compiled / best if compiled and best else None,
        retimed=s.retimed, roofline_fraction=fraction, roofline_bound=bound, roofline_ceilings=ceilings,
        device=s.device, interpreter=s.interpreter, time_label=s.time_label, evaluations=s.evaluations_done,
        evaluations_run=max(0, s.evaluations_done - evaluations_before), stop_reason=s.stop_reason, spent=dict(s.spent),
        failure=None if correct else failure,
    ))


def run_problem(name: str, suite_dir: Path, out: Path, *, family: str | None, small: bool, optimizer: str,
                budget_minutes: float | None, budget_evals: int | None, devices: Sequence[str] | None,
                options: dict[str, Any], progress: Callable[[str], None], status: Callable[[str], None],
                engine_progress: Callable[[Any], None] | None, milestone: Callable[[str], None] | None = None,
                secrets: dict[str, Any] | None = None) -> ProblemResult:
    """Optimize one problem in OUT/runs/<name> (or continue its interrupted run) and return its row."""
    from kernelopt.errors import CandidateFailed, KerneloptError
    from kernelopt.optimize import loop
    from kernelopt.rundir import RunDir

    folder = suite_dir / name
    overrides = small_shape(folder / "problem.py") if small else {}
    figures = shape_figures(folder / "problem.py", overrides)
    run_dir = out / RUNS / name
    say = lambda text: progress(f"{name}: {text}")  # noqa: E731 - every line names its problem
    tell = lambda text: status(f"{name}: {text}")  # noqa: E731
    note = (lambda text: milestone(f"{name}: {text}")) if milestone else say  # noqa: E731
    # A resumed problem keeps the options in its run.json (the suite's own config was checked on resume).
    common: dict[str, Any] = dict(devices=devices, progress=say, status=tell, engine_progress=engine_progress,
                                  milestone=note, optimizer_secrets=secrets,
                                  **{k: options[k] for k in ("cache",) if k in options})
    started = time.monotonic()
    failure: str | None = None
    state = RunDir.open(run_dir, readonly=True).replay() if (run_dir / "events.jsonl").is_file() else None
    resumed = state is not None
    before = state.evaluations_done if state is not None else 0
    if state is None and run_dir.exists() and any(run_dir.iterdir()):
        # Killed between run.json and the first event: nothing was evaluated; set it aside, start afresh.
        aside = run_dir.with_name(f"{name}.incomplete-{int(time.time())}")
        run_dir.rename(aside)
        say(f"an incomplete run directory was moved to {aside}")
    try:
        if state is not None:
            if state.finished:
                say("its run had finished before the suite was interrupted")
            else:
                say(f"resuming its run ({before} evaluations done)")
                store = options.get("experience")
                loop.resume(run_dir, **common, **({"experience": store} if hasattr(store, "add") else {}))
        else:
            loop.optimize(folder / "problem.py", folder / "kernel.py", run_dir=run_dir, overrides=overrides,
                          optimizer=optimizer, family=family, budget_minutes=budget_minutes, budget_evals=budget_evals,
                          **{k: options[k] for k in ("rounds", "beam", "proposals_per_member", "seed", "executor",
                                                     "optimizer_options", "race", "isolate", "baselines", "trials",
                                                     "timeout_s", "profile", "experience") if k in options},
                          **common)
    except CandidateFailed as exc:
        failure = _one_line(str(exc))
    except BadInput:
        raise
    except KerneloptError as exc:  # a missing tool or GPU for this problem: its row says so, the suite goes on
        failure = _one_line(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - one problem's crash must not lose the other problems' results
        failure = _one_line(f"error: {type(exc).__name__}: {exc}")
    return _result_of(name, run_dir, family=family, figures=figures, overrides=overrides,
                      wall_s=time.monotonic() - started, evaluations_before=before, resumed=resumed, failure=failure)


def _describe(r: ProblemResult) -> str:
    if not r.correct:
        return f"INCORRECT ({r.failure or 'no correct version'})"
    parts = [f"best {r.best_ms:.4g} ms" if r.best_ms else "best n/a"]
    if r.speedup_vs_start:
        parts.append(f"{r.speedup_vs_start:.2f}x start")
    for label, x in (("eager", r.speedup_vs_eager), ("torch.compile", r.speedup_vs_compile)):
        if x:
            parts.append(f"{x:.2f}x {label}")
    if r.roofline_fraction is not None:
        parts.append(f"{r.roofline_fraction:.0%} of roofline")
    return ", ".join(parts) + (f" [{r.time_label}]" if r.time_label else "")


def run_suite(
    suite_dir: str | Path,
    *,
    optimizer: str = DEFAULT_OPTIMIZER,
    budget_minutes: float | None = 2.0,
    budget_evals: int | None = None,
    problems: str | Sequence[str] | None = None,
    out_dir: str | Path,
    small: bool = False,
    devices: Sequence[str] | None = None,
    parallel_problems: bool = False,
    resume: bool = True,
    rounds: int = 8,
    beam: int = 2,
    proposals_per_member: int = 4,
    seed: int = 0,
    executor: str = "local",
    baselines: Sequence[str] = ("eager", "compile"),
    trials: int = 3,
    timeout_s: float = 300.0,
    profile: bool = True,
    experience: bool | str | Path = True,
    cache: bool = True,
    race: bool = True,
    isolate: str | None = None,
    optimizer_options: dict[str, Any] | None = None,
    optimizer_secrets: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    status: Callable[[str], None] | None = None,
    engine_progress: Callable[[Any], None] | None = None,
    milestone: Callable[[str], None] | None = None,
) -> SuiteResult:
    """Optimize every problem of `suite_dir` (or `problems`), resumably, and score the suite.

    Writes OUT/suite.jsonl (one line per finished problem), OUT/runs/<name>/ (each optimize
    run), and the report: OUT/suite_result.json, OUT/suite_report.md, OUT/speedup.png,
    OUT/roofline.png. Incorrect problems are results, not errors. `experience`: True the
    default store, a path that database, False none (every problem's run asks and records there;
    `benchmarks/transfer.py` gives each problem its own). `milestone` gets one line per finished
    problem and per round (`progress` the detail lines; it defaults to `progress`);
    `optimizer_secrets` (an API key) reach the optimizer only.
    """
    from kernelopt.harness.envinfo import git_commit, kernelopt_version
    from kernelopt.rundir import now_iso

    say = progress or (lambda text: None)
    tell = status or (lambda text: None)
    note = milestone or say
    suite = Path(suite_dir)
    names = select(problem_names(suite), problems)
    if budget_evals is not None and budget_evals < 1:
        raise BadInput(f"--budget-evals {budget_evals}: need at least 1")
    if budget_minutes is not None and budget_minutes <= 0:
        raise BadInput(f"--budget-minutes {budget_minutes}: must be positive")
    if small:
        for name in names:  # every problem has its SMALL shape before anything runs
            small_shape(suite / name / "problem.py")
    slots: list[str] = []
    if parallel_problems:
        from kernelopt.harness.evaluate import visible_devices

        slots = [d for d in (list(devices) if devices else visible_devices()) if d.startswith("cuda")]
        if not slots:
            raise BadInput("--parallel-problems: no GPU is visible (it runs one problem per GPU); "
                           "leave it out to run the problems one after another")
    # The optimizer and its options, checked before OUT exists: a usage error leaves nothing behind.
    from kernelopt.optimize.base import check_options, get_optimizer

    check_options(optimizer, {**dict(optimizer_options or {}), **(optimizer_secrets or {})})
    get_optimizer(optimizer, **dict(optimizer_options or {}), **(optimizer_secrets or {}))
    out = Path(out_dir)
    from kernelopt.rundir import CONFIG as RUN_CONFIG, EVENTS as RUN_EVENTS

    if (out / RUN_CONFIG).exists() or (out / RUN_EVENTS).exists():
        raise BadInput(f"{out}: holds an optimize run, not a suite run; give a new -o")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{out}: cannot create: {exc.strerror or exc}") from None
    lock = _SuiteLock(out)
    try:
        config = {"suite_dir": str(suite.resolve()), "small": small, "optimizer": optimizer,
                  "budget_minutes": budget_minutes, "budget_evals": budget_evals}
        _check_config(out, config, resume)
        options: dict[str, Any] = dict(rounds=rounds, beam=beam, proposals_per_member=proposals_per_member, seed=seed,
                                       executor=executor, optimizer_options=dict(optimizer_options or {}),
                                       baselines=tuple(baselines), trials=trials, timeout_s=timeout_s,
                                       profile=profile, experience=experience, cache=cache, race=race,
                                       isolate=isolate)
        started_at, started = now_iso(), time.monotonic()
        commit = git_commit()  # once: each row finished by this process carries it
        done = {r.name: r for r in read_results(out / RESULTS)}
        todo = [n for n in names if n not in done]
        for n in names:
            if n in done:
                say(f"{n}: finished in an earlier run, skipped")
        write_lock = threading.Lock()
        fresh: dict[str, ProblemResult] = {}

        def finish(result: ProblemResult, index: int) -> None:
            with write_lock:
                append_result(out / RESULTS, result)
                fresh[result.name] = result
            note(f"[{index}/{len(names)}] {result.name}: {_describe(result)}")

        def one(name: str, index: int, on: Sequence[str] | None) -> None:
            tell(f"{name}: starting")
            say(f"[{index}/{len(names)}] {name}: optimizing" + (f" on {', '.join(on)}" if on else ""))
            result = run_problem(name, suite, out, family=declared_family(suite / name / "problem.py"), small=small,
                                 optimizer=optimizer, budget_minutes=budget_minutes, budget_evals=budget_evals,
                                 devices=on, options=options, progress=say, status=tell, engine_progress=engine_progress,
                                 milestone=milestone, secrets=optimizer_secrets)
            finish(result.model_copy(update={"git_commit": commit}), index)

        position = {n: i for i, n in enumerate(names, start=1)}
        if parallel_problems:
            _run_parallel(todo, slots, lambda n, d: one(n, position[n], [d]))
        else:
            for name in todo:
                one(name, position[name], devices)
        results = {**done, **fresh}
        summary = SuiteResult(
            suite_dir=str(suite), out_dir=str(out), optimizer=optimizer, budget_minutes=budget_minutes,
            budget_evals=budget_evals, small=small, parallel_problems=parallel_problems,
            devices=slots if parallel_problems else list(devices or []),
            problems=[results[n] for n in names if n in results], missing=[n for n in names if n not in results],
            wall_s=time.monotonic() - started, evaluations_run=sum(r.evaluations_run for r in fresh.values()),
            kernelopt_version=kernelopt_version(), git_commit=commit, started_at=started_at, finished_at=now_iso(),
        )
        finish_summary(summary)
        from kernelopt.report.suite_report import write_suite_report

        write_suite_report(summary, out)
        return summary
    finally:
        lock.close()


def finish_summary(summary: SuiteResult) -> SuiteResult:
    """Fill the scores and the labels that follow from the problem rows (in place)."""
    results = summary.problems
    summary.complete = not summary.missing
    summary.fast_p, summary.geomean, summary.unmeasured = score(results)
    fractions = [r.roofline_fraction for r in results if r.roofline_fraction is not None]
    summary.mean_roofline_fraction = sum(fractions) / len(fractions) if fractions else None
    summary.interpreter = any(r.interpreter for r in results)
    summary.time_label = "interpreter wall time" if summary.interpreter else "GPU time"
    summary.device = next((r.device for r in results if r.device), None)
    if summary.wall_s > 0 and summary.evaluations_run:
        summary.evals_per_minute = summary.evaluations_run / summary.wall_s * 60.0
    # A resumed suite run spans calls (and maybe commits): "this process" is only the last call.
    summary.problems_wall_s = sum(r.wall_s for r in results)
    summary.problems_evaluations = sum(r.evaluations for r in results)
    summary.commits = sorted({r.git_commit for r in results if r.git_commit})
    return summary


def _run_parallel(names: list[str], slots: list[str], work: Callable[[str, str], None]) -> None:
    """One thread per GPU, each taking the next problem when its last one ends.

    Threads suffice: each optimize run evaluates in child processes (its engine's
    workers). The reaper's signal handlers need the main thread, so they go in here."""
    import queue

    from kernelopt.harness.evaluate import in_threads
    from kernelopt.harness.sandbox import install_reaper

    install_reaper()
    pending: "queue.Queue[str]" = queue.Queue()
    for n in names:
        pending.put(n)
    failed = threading.Event()

    def worker(device: str) -> None:
        while not failed.is_set():
            try:
                name = pending.get_nowait()
            except queue.Empty:
                return
            try:
                work(name, device)
            except BaseException:
                failed.set()  # the other GPUs take no new problem; in_threads re-raises this one
                raise

    in_threads(worker, slots[: max(1, len(names))])


__all__ = ["run_suite", "run_problem", "fast_p", "geomean_speedup", "score", "roofline_fraction", "shape_figures",
           "read_results", "append_result", "P_VALUES"]
