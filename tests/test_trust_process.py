"""Issue #19, the process side: a watchdog over the verifier, nothing left behind by a candidate
that kills its ancestors or by an interrupt (daemons, arenas, scratch files), `--isolate
candidate` that really starts a fresh runner, `--isolate sandbox`, and the GPU time-credibility
flag (`Verifier._suspect`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from typing import Any

import pytest

from kernelopt.harness import evaluate as evaluate_mod
from kernelopt.harness.evaluate import Engine, evaluate
from kernelopt.problem import load_candidate, load_problem

ATT = Path(__file__).resolve().parent / "fixtures" / "attacks"
PROBLEM = ATT / "problem.py"


def _cands(*names: str) -> list:
    return [load_candidate(ATT / n) for n in names]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(path: Path, timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert path.exists(), f"{path} never appeared"


DRIVER = r"""
import sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], time=False, timeout_s=600)
"""


# --- 6. the watchdog --------------------------------------------------------------------------


def test_a_stopped_verifier_is_killed_and_its_candidate_times_out(monkeypatch):
    monkeypatch.setattr(evaluate_mod, "SILENCE_LIMIT_S", 8.0)
    t0 = time.monotonic()
    evs = evaluate(load_problem(PROBLEM), _cands("stop_verifier.py", "ok.py"), time=False, timeout_s=10)
    elapsed = time.monotonic() - t0
    assert evs[0].failure is not None and evs[0].failure.reason == "timeout", evs[0].failure
    assert "killed" in evs[0].failure.message
    assert evs[1].failure is None
    # The silence limit, not `3 x timeout + 600 s`; the restart of the verifier comes on top.
    assert elapsed < 8.0 + 90.0, elapsed


def _arenas() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.glob("kernelopt-arena-*")} if shm.is_dir() else set()


def test_a_candidate_that_kills_its_ancestors_leaves_no_daemon(tmp_path):
    arenas_before = _arenas()
    pidfile = tmp_path / "daemon.pid"
    env = {**os.environ, "KERNELOPT_TEST_PIDFILE": str(pidfile)}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(PROBLEM), str(ATT / "kill_ancestors.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(pidfile)
        assert proc.wait(120) == -signal.SIGKILL  # the engine was killed by its candidate
        daemon = int(pidfile.read_text())
        end = time.monotonic() + 20
        while _alive(daemon) and time.monotonic() < end:
            time.sleep(0.2)
        assert not _alive(daemon), "the candidate's daemon outlived the engine and the verifier it killed"
        # ... nor the arena of the verifier it killed (the runner, last to go, removes its owner's dir)
        while _arenas() - arenas_before and time.monotonic() < end:
            time.sleep(0.2)
        assert not _arenas() - arenas_before, "the killed verifier's arena was left in /dev/shm"
    finally:
        proc.kill()
        if pidfile.exists() and _alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_runner_gives_up_a_verifier_stopped_for_the_grace_period(tmp_path):
    """A stopped verifier (SIGSTOP from outside): its runner, and the candidate in it, give up once
    their owner has been stopped for the grace period instead of living as long as it stays stopped.
    (A stopped engine is not waited out: its verifier continues it, see the stop_engine tests.)"""
    pidfile = tmp_path / "pids.txt"
    env = {**os.environ, "KERNELOPT_TEST_PIDFILE": str(pidfile), "KERNELOPT_OWNER_STOP_GRACE_S": "3"}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(PROBLEM), str(ATT / "hang_report.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    others: list[int] = []
    try:
        _wait_for(pidfile)
        runner, verifier = (int(p) for p in pidfile.read_text().split())
        others += [verifier, runner]
        os.kill(verifier, signal.SIGSTOP)
        end = time.monotonic() + 30
        while _alive(runner) and time.monotonic() < end:
            time.sleep(0.2)
        assert not _alive(runner)
    finally:
        _end_run(proc.pid, others)
        proc.wait(30)


REPORT = r"""
import json, sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], time=False, timeout_s=600)
print(json.dumps([[e.failure.reason, e.failure.message] if e.failure else None for e in evs]))
"""


def _end_run(engine: int, others: list[int]) -> None:
    """Continue everything, then SIGKILL the engine: its verifier's watch then kills the runner and
    removes its dir and arena (a SIGKILL of all of them at once would leave the arena in /dev/shm).
    Whatever is still there after 20 s is SIGKILLed: a stopped process must not outlive a failed test."""
    for pid in [engine, *others]:
        if _alive(pid):
            os.kill(pid, signal.SIGCONT)
    if _alive(engine):
        os.kill(engine, signal.SIGKILL)
    end = time.monotonic() + 20
    while any(_alive(p) for p in others) and time.monotonic() < end:
        time.sleep(0.2)
    for pid in others:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGTSTP"])
def test_a_candidate_that_stops_the_engine_fails_and_the_command_ends(tmp_path, sig):
    """SIGSTOP to the engine from a candidate: its verifier, running while its engine is stopped (a
    Ctrl-Z would have stopped the verifier first), fails the candidate as tampered and continues the
    engine, so the command ends instead of staying stopped forever. SIGTSTP (what a Ctrl-Z sends)
    from a candidate is ignored: the engine is no terminal's foreground job, so it came from below."""
    pidfile = tmp_path / "pids.txt"
    env = {**os.environ, "KERNELOPT_TEST_PIDFILE": str(pidfile), "KERNELOPT_TEST_SIGNAL": sig}
    proc = subprocess.Popen([sys.executable, "-c", REPORT, str(PROBLEM), str(ATT / "stop_engine.py"), str(ATT / "ok.py")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out, _ = proc.communicate(timeout=60)  # about 10 s; before the fix it never ended
        assert proc.returncode == 0
        (stopper, ok) = json.loads(out.strip().splitlines()[-1])
        if sig == "SIGSTOP":
            assert stopper is not None and stopper[0] == "tampered" and "stopped" in stopper[1], stopper
        else:
            assert stopper is None  # ignored, and the candidate is right
        assert ok is None
    finally:
        if proc.poll() is None:  # failed: the engine's own exit did not clean up
            _end_run(proc.pid, [int(p) for p in pidfile.read_text().split()[:2]] if pidfile.exists() else [])
        proc.wait(30)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _children_table() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _alive(int(entry)):
            try:
                out[int(entry)] = _parent(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def test_ctrl_z_stops_the_whole_run_and_is_not_taken_for_a_candidate(tmp_path):
    """A terminal's Ctrl-Z: the verifier and the runner run in sessions of their own, so the SIGTSTP
    reaches the engine alone. The engine stops them first, then itself; the verifier, stopped too,
    does not take the stopped engine for a candidate's SIGSTOP (it would continue it); and when the
    engine is continued (fg), the run goes on."""
    import pty

    pidfile = tmp_path / "pids.txt"
    env = {**os.environ, "KERNELOPT_TEST_PIDFILE": str(pidfile)}
    argv = [sys.executable, "-c", DRIVER, str(PROBLEM), str(ATT / "hang_report.py")]
    shell, master = pty.fork()
    if shell == 0:  # a shell: the engine is its foreground job, in a process group of its own
        try:
            child = os.fork()
            if child == 0:
                os.setpgid(0, 0)
                os.execve(argv[0], argv, env)
            try:
                os.setpgid(child, child)
            except OSError:
                pass  # the child did it first and exec'd
            os.tcsetpgrp(0, child)
            os.waitpid(child, 0)
        finally:
            os._exit(0)
    others: list[int] = []
    try:
        _wait_for(pidfile)
        runner, verifier = (int(p) for p in pidfile.read_text().split())
        engine = _parent(verifier)
        others += [verifier, runner]
        os.write(master, b"\x1a")  # Ctrl-Z
        end = time.monotonic() + 20
        while any(_state(p) != "T" for p in (engine, verifier, runner)) and time.monotonic() < end:
            time.sleep(0.1)
        assert [_state(p) for p in (engine, verifier, runner)] == ["T", "T", "T"]
        time.sleep(3)  # the verifier's watch polls every 0.25 s: it must not continue the engine
        assert [_state(p) for p in (engine, verifier, runner)] == ["T", "T", "T"]
        os.kill(engine, signal.SIGCONT)  # fg
        end = time.monotonic() + 20
        while any(_state(p) == "T" for p in (engine, verifier, runner)) and time.monotonic() < end:
            time.sleep(0.1)
        assert all(_state(p) not in ("T", "gone") for p in (engine, verifier, runner))
    finally:
        engines = [p for p, ppid in _children_table().items() if ppid == shell]  # the shell's job
        for engine in engines:
            _end_run(engine, others)
        os.close(master)
        os.waitpid(shell, 0)


# --- 7. arenas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_no_arena_survives_an_interrupt(tmp_path, sig):
    pidfile = tmp_path / "arena.txt"
    env = {**os.environ, "KERNELOPT_TEST_PIDFILE": str(pidfile)}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(PROBLEM), str(ATT / "hang_in_arena.py")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(pidfile)
        arenas = [Path(p).parent for p in pidfile.read_text().split()]
        assert arenas and all(a.name.startswith("kernelopt-arena-") and a.exists() for a in arenas)
        proc.send_signal(sig)
        proc.wait(60)
        end = time.monotonic() + 20
        while any(a.exists() for a in arenas) and time.monotonic() < end:
            time.sleep(0.2)
        assert not any(a.exists() for a in arenas), f"left behind: {arenas}"
    finally:
        proc.kill()


# --- 8. the runner's cwd and TMPDIR, and `--isolate candidate` ---------------------------------


def _scratch_runs(tmp_path, isolate: str) -> list[dict]:
    out = tmp_path / f"scratch-{isolate}.jsonl"
    os.environ["KERNELOPT_TEST_ATTACK_OUT"] = str(out)
    try:
        evs = evaluate(load_problem(PROBLEM), _cands("scratch.py", "scratch.py", "scratch.py"), time=False,
                       timeout_s=60, isolate=isolate)
    finally:
        del os.environ["KERNELOPT_TEST_ATTACK_OUT"]
    assert [e.failure for e in evs] == [None, None, None]
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_runner_cwd_and_tmpdir_are_private_and_removed(tmp_path):
    runs = _scratch_runs(tmp_path, "worker")
    for run in runs:
        assert run["cwd"] != os.getcwd() and "kernelopt-child-runner-" in run["cwd"]
        assert run["tmp_file"].startswith(run["cwd"])
        assert not Path(run["cwd_file"]).exists() and not Path(run["tmp_file"]).exists()
    assert not (Path.cwd() / "scratch-in-cwd.txt").exists()
    assert len({r["pid"] for r in runs}) == 1  # worker mode: one runner for the batch


def test_isolate_candidate_starts_a_fresh_runner_for_every_candidate(tmp_path):
    runs = _scratch_runs(tmp_path, "candidate")
    assert len({r["pid"] for r in runs}) == 3, runs


# --- 10. --isolate sandbox ----------------------------------------------------------------------


def _need_sandbox() -> None:
    from kernelopt.harness.sandbox import sandbox_unavailable

    why = sandbox_unavailable("cpu")
    if why:
        pytest.skip(f"no sandbox here: {why}")


def test_sandbox_keeps_a_root_candidate_from_the_judge(monkeypatch):
    """The forged reply and the reference rewrite, from root of the sandbox's namespaces: the
    judge's process is not even visible (its parent pid is 0), let alone its fds or memory."""
    _need_sandbox()
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", "/dev/stderr")  # the file system is read-only
    evs = evaluate(load_problem(PROBLEM), _cands("forge_verdict.py", "rewrite_reference.py", "ok.py"), time=False,
                   timeout_s=60, isolate="sandbox")
    assert [e.passed for e in evs] == [False, False, True], [e.failure for e in evs]
    assert evs[0].failure.reason in ("runtime", "incorrect") and evs[0].failure.reason != "tampered"
    assert evs[1].failure.reason == "incorrect" and "blocked" in (evs[1].failure.stderr or "")


def test_a_sandboxed_candidate_cannot_have_the_live_arena_removed_with_its_runner_dir(monkeypatch):
    """The arena's dir is read-only to the runner (only the arena's file is writable): a candidate
    that could rewrite the dir's owner mark would have the verifier's live arena removed with its
    own runner dir, and the candidates after it crash at their runner's start."""
    _need_sandbox()
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", "/dev/stderr")
    evs = evaluate(load_problem(PROBLEM), _cands("arena_unlink.py", "ok.py", "ok.py"), time=False, timeout_s=60,
                   isolate="sandbox")
    # The attack swallows its blocked writes: it is right, and so are the two after it.
    assert [e.passed for e in evs] == [True, True, True], [e.failure for e in evs]


def test_sandbox_view_is_read_only_without_network_and_pids(tmp_path, monkeypatch):
    _need_sandbox()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    # The probe reports through its captured stdout: the file system is read-only in there.
    monkeypatch.setenv("KERNELOPT_TEST_VICTIM", str(victim))
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", "/dev/stdout")
    (ev,) = evaluate(load_problem(PROBLEM), _cands("escape.py"), time=False, timeout_s=60, isolate="sandbox")
    assert ev.failure is not None and ev.failure.reason == "incorrect"
    report = json.loads([line for line in (ev.failure.stdout or "").splitlines() if line.startswith("{")][-1])
    assert report["uid"] == 0 and report["pid"] == 1  # root, but of its own namespaces
    assert report["visible_pids"] < 10  # the verifier, the engine and the host's processes are not visible
    for key in ("parent_environ", "parent_mem", "write_user_file", "network", "remount"):
        assert report[key].startswith("blocked"), (key, report[key])
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("isolate", ["worker", "sandbox"])
def test_only_the_sandbox_keeps_a_candidate_from_rewriting_the_event_log(tmp_path, isolate):
    """The limit docs/harness.md states: a candidate running as the user finds the run directory from
    its own `__file__` and rewrites events.jsonl (nothing can tell without a secret it cannot read);
    in the sandbox the run directory is read-only to it."""
    import shutil

    if isolate == "sandbox":
        _need_sandbox()
    version = tmp_path / "run" / "v1"
    version.mkdir(parents=True)
    log = tmp_path / "run" / "events.jsonl"
    log.write_text('{"seq": 0}\n')
    shutil.copy(ATT / "rewrite_log.py", version / "kernel.py")
    (ev,) = evaluate(load_problem(PROBLEM), [load_candidate(version / "kernel.py")], time=False, timeout_s=60,
                     isolate=isolate)
    assert ev.failure is not None and ev.failure.reason == "incorrect", ev.failure
    if isolate == "worker":
        assert "REWROTE" in (ev.failure.stdout or "") and "forged" in log.read_text()
    else:
        assert "BLOCKED" in (ev.failure.stdout or "") and "Read-only file system" in (ev.failure.stdout or "")
        assert log.read_text() == '{"seq": 0}\n'


def test_sandbox_falls_back_in_one_line_where_there_is_none(monkeypatch, capsys):
    from kernelopt.harness import sandbox

    monkeypatch.setattr(sandbox, "_sandbox_probe", {"cpu": "user namespaces are not available (test)"})
    monkeypatch.setattr(evaluate_mod, "_noted", set())
    assert evaluate_mod.resolve_isolation("sandbox", ["cpu"]) == "candidate"
    assert evaluate_mod.resolve_isolation("auto", ["cpu"]) == "worker"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no sandbox here" in err[0]
    monkeypatch.setattr(sandbox, "_sandbox_probe", {"cpu": None})
    assert evaluate_mod.resolve_isolation("auto", ["cpu"]) == "sandbox"
    assert evaluate_mod.resolve_isolation("worker", ["cpu"]) == "worker"


# --- 11. the GPU time-credibility flag -----------------------------------------------------------


def _verifier(floor_ms: float | None):
    from kernelopt.harness.worker import Verifier

    v = object.__new__(Verifier)  # no device, no problem: only the flag's arithmetic
    v.cuda = True
    v.floor_ms = floor_ms
    return v


def _stats(median_ms: float, count: int = 100, warmup: int = 5, guard_us: float = 0.0):
    from kernelopt.models.harness import TimingStats

    return TimingStats(median_ms=median_ms, mean_ms=median_ms, min_ms=median_ms, max_ms=median_ms, iqr_ms=0.0,
                       cv=0.0, count=count, warmup_count=warmup, l2_flush_bytes=0, launch_guard_us=guard_us)


def test_suspect_below_the_roofline_floor():
    from kernelopt.harness.worker import FLOOR_FRACTION

    v = _verifier(floor_ms=1.0)
    assert v._suspect(_stats(FLOOR_FRACTION * 1.0 * 0.99), wall_s=0.0)
    assert "roofline" in v._suspect(_stats(0.5), wall_s=0.0)[0]
    assert v._suspect(_stats(FLOOR_FRACTION * 1.0 * 1.01), wall_s=0.0) == []


def test_suspect_when_the_wall_clock_disagrees():
    from kernelopt.harness.worker import WALL_FACTOR, WALL_SLACK_MS

    v = _verifier(floor_ms=None)
    calls = 105
    median = 0.1
    honest = (median + WALL_SLACK_MS) * calls / 1000.0
    assert v._suspect(_stats(median), wall_s=honest) == []
    faked = (median * (WALL_FACTOR + 2) + WALL_SLACK_MS) * calls / 1000.0
    out = v._suspect(_stats(median), wall_s=faked)
    assert len(out) == 1 and "host wall" in out[0]
    # The launch guard's busy-wait is accounted for, not held against the time.
    guard_us = (median * (WALL_FACTOR + 2)) * 1000.0
    assert v._suspect(_stats(median, guard_us=guard_us), wall_s=faked) == []


def _gpu_timing_verifier(monkeypatch, reply_for_time):
    """A GPU verifier whose runner is `ask` (answers: a CallRequest, then TimeRequests by `reply_for_time`)."""
    import contextlib
    from types import SimpleNamespace

    import kernelopt.harness.timing as timing_mod
    from kernelopt.harness.protocol import CallRequest, RunnerReply
    from kernelopt.models.harness import Trial

    v = _verifier(floor_ms=None)
    v.device, v.baselines, v.in_specs = "cuda:0", {}, []
    v.cfg = SimpleNamespace(timing={})
    v.arena = SimpleNamespace(write=lambda specs, values: None)
    v.progress = lambda index, text: None
    v.inputs_for = lambda seed: []
    v._new_case, v._drop_case = (lambda: 7), (lambda seed: None)
    v._rewritten = lambda seed, infos, call: None
    v._judge_timed = lambda seed, infos, call: Trial(seed=seed, passed=True)
    v._trial = lambda seed, deadline: (RunnerReply(ok=True), Trial(seed=seed, passed=True), None)
    monkeypatch.setattr(timing_mod, "gpu_lock", lambda device, **kw: contextlib.nullcontext())
    asked: list[str] = []

    def ask(request, deadline):
        asked.append(type(request).__name__)
        if isinstance(request, CallRequest):
            time.sleep(0.4)  # the first call: compile and autotune
            return RunnerReply(ok=True)
        return reply_for_time(len([a for a in asked if a == "TimeRequest"]))

    v.ask = ask
    return v, asked


def _timed(v, phase=None) -> Any:
    from types import SimpleNamespace

    from kernelopt.models.harness import Candidate, Evaluation, Problem

    ev = Evaluation(problem=Problem(path="p.py", name="p"),
                    candidate=Candidate(path="k.py", name="k", backend="triton", entry="ModelNew", sha256=""))
    v._time(SimpleNamespace(index=0, race_against_ms=None), ev, deadline=time.monotonic() + 60, phase=phase)
    return ev


@pytest.mark.parametrize("trailing, passes", [((24.0, 2.0), True), ((24.0, 24.0), False)])
def test_a_trailing_time_over_its_allowance_is_timed_once_more(monkeypatch, trailing, passes):
    """A loaded host pushed an honest 38 us kernel's trailing time (host wall time around a synchronize)
    over its allowance once; work hidden on another stream trails in every timing. One more timing
    decides, and only one."""
    from kernelopt.harness.protocol import RunnerReply

    def reply(n):
        stats = _stats(0.038, count=10, warmup=1).model_copy(update={"trailing_us": trailing[min(n, 2) - 1]})
        return RunnerReply(ok=True, timing=stats, calls=11)

    v, asked = _gpu_timing_verifier(monkeypatch, reply)
    ev = _timed(v)
    assert asked == ["CallRequest", "TimeRequest", "TimeRequest"]
    if passes:
        assert ev.failure is None and ev.timing is not None and ev.timing.trailing_us == 2.0
    else:
        assert ev.failure is not None and ev.failure.reason == "timing_mismatch"
        assert ev.failure.message.startswith("in two timings: ") and "stayed busy" in ev.failure.message


def test_the_first_timings_outputs_are_judged_before_it_is_timed_again(monkeypatch):
    """Wrong outputs in a timing that also trailed fail at once: a second timing that behaves must not
    wash them out (found in review, session 12)."""
    from kernelopt.harness.protocol import RunnerReply
    from kernelopt.models.harness import Trial

    v, asked = _gpu_timing_verifier(monkeypatch, lambda n: RunnerReply(
        ok=True, timing=_stats(0.038, count=10, warmup=1).model_copy(update={"trailing_us": 24.0 if n == 1 else 2.0}),
        calls=11, judged_call=n))
    judged: list[str] = []

    def judge(seed, infos, call):  # the first timing's outputs are garbage, the second's right
        judged.append(call)
        return Trial(seed=seed, passed=len(judged) > 1, reason=None if len(judged) > 1 else "incorrect",
                     message=None if len(judged) > 1 else "garbage")

    v._judge_timed = judge
    ev = _timed(v)
    assert asked == ["CallRequest", "TimeRequest"]
    assert ev.failure is not None and ev.failure.reason == "timing_mismatch" and "garbage" in ev.failure.message


def test_a_gpu_timing_calls_once_before_the_wall_clock_starts(monkeypatch):
    """The timing runner's first call compiles (an autotuned kernel benchmarks its table there): it runs as
    one untimed call before the TimeRequest, so the wall-clock check does not hold seconds of compile
    against the GPU time. With the compile inside the clock, this honest candidate was flagged suspect."""
    from kernelopt.harness.protocol import RunnerReply

    v, asked = _gpu_timing_verifier(monkeypatch, lambda n: RunnerReply(ok=True, timing=_stats(0.1, count=10, warmup=1),
                                                                       calls=11))
    phases: list[tuple[str, int]] = []
    ev = _timed(v, phase=lambda name: phases.append((name, len(asked))))
    assert asked == ["CallRequest", "TimeRequest"]
    # The first call is a phase of its own (what a later runner pays again unless it keeps the choice).
    assert phases == [("time", 0), ("first_call", 1)]
    assert ev.failure is None and ev.timing is not None and ev.suspect == []


def test_a_timing_within_its_allowance_is_not_repeated(monkeypatch):
    from kernelopt.harness.protocol import RunnerReply

    v, asked = _gpu_timing_verifier(monkeypatch, lambda n: RunnerReply(
        ok=True, timing=_stats(0.038, count=10, warmup=1).model_copy(update={"trailing_us": 3.0}), calls=11))
    ev = _timed(v)
    assert asked == ["CallRequest", "TimeRequest"] and ev.failure is None


def test_suspect_is_for_gpu_times_only():
    v = _verifier(floor_ms=1.0)
    v.cuda = False
    assert v._suspect(_stats(0.001), wall_s=100.0) == []
    assert _verifier(1.0)._suspect(None, wall_s=1.0) == []


def test_a_gpu_run_asks_for_the_sandbox_like_a_cpu_run(monkeypatch):
    """The sandbox passed on an H100 once its /dev/shm was its own (benchmarks/results/session7_h100/):
    a CUDA device is no reason to fall back any more; only a missing unshare or user namespace is."""
    from kernelopt.harness import evaluate as ev_mod
    from kernelopt.harness import sandbox

    monkeypatch.setattr(sandbox, "_sandbox_probe", {})
    monkeypatch.setattr(ev_mod, "_noted", set())
    why = sandbox.sandbox_unavailable("cuda:0")
    assert "CUDA" not in (why or "")
    if why is None:
        assert ev_mod.resolve_isolation("sandbox", ["cuda:0"]) == "sandbox"
    # The fd-shared arena crosses pid namespaces: a GPU runner gets one too (tests/gpu/test_arena_gpu.py,
    # seen on an H100 and an H200); only a legacy CUDA IPC arena (old drivers) goes without.
    assert "--pid" in sandbox.sandbox_argv(["true"], writable=[], device="cuda:0")
    assert "--pid" not in sandbox.sandbox_argv(["true"], writable=[], device="cuda:0", pid_namespace=False)


