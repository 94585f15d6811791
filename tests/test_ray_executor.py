"""The Ray executor on the CPU (Triton interpreter), with a real local Ray instance.

Two verifier actors judge one batch of good and hostile candidates; a killed actor fails
its candidate as a crash and is replaced; and nothing the test's Ray instance started
outlives `engine.close()`.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.harness import sandbox
from kernelopt.harness.evaluate import Engine, get_executor
from kernelopt.problem import load_candidate, load_problem

FIX = Path(__file__).resolve().parent / "fixtures" / "harness"
AXPY = FIX / "problem_axpy.py"

# candidate file -> the failure reason expected (None: passes)
BATCH = [
    ("axpy_ok.py", None),
    ("runtime_error.py", "runtime"),
    ("cheat_segfault.py", "crash"),
    ("cheat_cached_result.py", "cached_result"),
    ("axpy_ok.py", None),
]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, cmdline) of every process we can read."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(entry)] = (int(raw.rsplit(b")", 1)[1].split()[1]), cmd)
    return out


def _descendants(root: int) -> set[int]:
    table = _table()
    found: set[int] = set()
    stack = [root]
    while stack:
        parent = stack.pop()
        for pid, (ppid, _) in table.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                stack.append(pid)
    return found


def _running(session: str) -> set[int]:
    """Everything the test's Ray instance runs: its processes below this one (GCS, raylet,
    agents, the actors and their candidate runners) and any naming its session."""
    return _descendants(os.getpid()) | {p for p, (_, cmd) in _table().items() if session in cmd}


def test_without_ray_the_executor_is_bad_input(monkeypatch):
    # None in sys.modules makes `import ray` raise ImportError, as if Ray were not installed.
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(BadInput) as info:
        get_executor("ray")
    assert str(info.value) == "--executor ray needs Ray: pip install 'kernelopt[ray]'"
    assert info.value.exit_code == 2


def test_bad_options_are_bad_input():
    pytest.importorskip("ray")
    from kernelopt.harness.ray_executor import RayExecutor

    with pytest.raises(BadInput, match="num_workers 0"):
        RayExecutor(num_workers=0)
    with pytest.raises(BadInput, match="gpus_per_worker"):
        RayExecutor(gpus_per_worker=0)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process checks read /proc")
def test_two_ray_workers_judge_a_batch_and_leave_nothing_behind(monkeypatch):
    ray = pytest.importorskip("ray")
    from kernelopt.harness.ray_executor import RayExecutor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a private local instance, whatever the host has
    assert not ray.is_initialized()
    problem = load_problem(AXPY, {"N": "64"})
    cands = [load_candidate(FIX / name) for name, _ in BATCH]
    executor = RayExecutor(num_workers=2)
    engine = Engine(problem, executor=executor, devices=["cpu", "cpu"], timeout_s=30.0)
    t0 = time.monotonic()
    # Children this test process already had (an earlier test's multiprocessing resource tracker,
    # say) are not the engine's.
    before = _descendants(os.getpid())
    try:
        engine.start()
        assert ray.is_initialized() and executor.connected
        session = ray.get_runtime_context().get_session_name()
        actor_pids = [w.where["pid"] for w in executor.workers]
        arenas = [Path(w.where["arena_dir"]) for w in executor.workers]
        records = [w.where["record"] for w in executor.workers]
        assert all(a.is_dir() for a in arenas)
        assert len(set(actor_pids)) == 2 and all(_alive(p) for p in actor_pids)
        assert [r.interpreter for r in engine.ready] == [True, True]

        evs = engine.evaluate(cands)
        assert [Path(e.candidate.path).name for e in evs] == [name for name, _ in BATCH]
        for (name, want), ev in zip(BATCH, evs):
            got = ev.failure.reason if ev.failure else None
            assert got == want, (name, ev.failure)
            if want is None:
                assert ev.verification is not None and ev.verification.passed
                assert len(ev.verification.trials) == 3
        # Both actors took candidates, and each result names the actor that judged it.
        used = {ev.worker for ev in evs}
        assert used == {w.name for w in engine.workers} and len(used) == 2
        started = _running(session) - before
        assert set(actor_pids) <= started
        # The actors' candidate runners are in it too (each actor kept its runner alive).
        runners = {p for p in started if "kernelopt.harness.runner" in _table().get(p, (0, ""))[1]}
        assert len(runners) >= 2

        # A verifier actor that dies fails its candidate as a crash; a new actor takes over.
        first = executor.workers[0]
        os.kill(first.where["pid"], signal.SIGKILL)
        ok = load_candidate(FIX / "axpy_ok.py")
        after = engine.evaluate([ok, ok], workers=1)
        assert after[0].failure is not None and after[0].failure.reason == "crash", after[0].failure
        assert "Ray verifier actor died" in (after[0].failure.message or "")
        assert after[1].failure is None and after[1].verification is not None and after[1].verification.passed
        assert first.where["pid"] not in actor_pids and _alive(first.where["pid"])
        started |= _running(session) - before
        assert {w.where["pid"] for w in executor.workers} <= started
        arenas += [Path(w.where["arena_dir"]) for w in executor.workers]
        records += [w.where["record"] for w in executor.workers]
    finally:
        engine.close()
    elapsed = time.monotonic() - t0
    assert not ray.is_initialized() and not executor.connected
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.1)
    left = {p: _table().get(p, (0, "?"))[1][:120] for p in started if _alive(p)}
    assert not left, f"still running after engine.close(): {left}"
    assert not any(session in cmd for p, (_, cmd) in _table().items() if _alive(p))
    assert not [a for a in arenas if a.exists()], "the actors' shared arenas are freed"
    # The runners' dirs of the actor killed mid-run too (named with its owner record, as its arena).
    assert all(records) and not [p for p, r in sandbox.owned_dirs() if r in records]
    assert elapsed < 60.0


_DRIVER = """
import sys
from pathlib import Path
from kernelopt.harness.evaluate import Engine
from kernelopt.harness.ray_executor import RayExecutor
from kernelopt.problem import load_candidate, load_problem
import ray

fix = Path(sys.argv[1])
problem = load_problem(fix / "problem_axpy.py", {"N": "64"})
executor = RayExecutor(num_workers=1)
engine = Engine(problem, executor=executor, devices=["cpu"], timeout_s=120.0)
engine.start()
print("SESSION", ray.get_runtime_context().get_session_name(), flush=True)
print("ARENAS", *[w.where["arena_dir"] for w in executor.workers], flush=True)
print("RECORDS", *[w.where["record"] for w in executor.workers], flush=True)
engine.evaluate([load_candidate(fix / "cheat_hang.py")])
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process checks read /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_candidate_leaves_no_ray_process(tmp_path, signum):
    pytest.importorskip("ray")
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["TRITON_INTERPRET"] = "1"
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(FIX)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, cwd=tmp_path, text=True)
    try:
        assert driver.stdout is not None
        line = driver.stdout.readline()
        assert line.startswith("SESSION "), line
        session = line.split()[1]
        line = driver.stdout.readline()
        assert line.startswith("ARENAS "), line
        arenas = [Path(a) for a in line.split()[1:]]
        assert arenas and all(a.name.startswith("kernelopt-arena-") and a.is_dir() for a in arenas)
        line = driver.stdout.readline()
        assert line.startswith("RECORDS "), line
        records = line.split()[1:]
        # Wait until the actor's runner is inside the hanging candidate.
        deadline = time.monotonic() + 30.0
        started: set[int] = set()
        while time.monotonic() < deadline:
            started = _descendants(driver.pid) | {p for p, (_, cmd) in _table().items() if session in cmd}
            if any("kernelopt.harness.runner" in _table().get(p, (0, ""))[1] for p in started):
                break
            time.sleep(0.2)
        else:
            pytest.fail("no runner started")
        time.sleep(1.0)
        started |= _descendants(driver.pid)
        driver.send_signal(signum)
        code = driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # SIGTERM: the reaper's exit 143; SIGINT: an uncaught KeyboardInterrupt, which Python ends by SIGINT.
    assert code == (143 if signum == signal.SIGTERM else -signal.SIGINT)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(_alive(p) for p in started):
        time.sleep(0.1)
    left = {p: _table().get(p, (0, "?"))[1][:120] for p in started if _alive(p)}
    assert not left, f"still running after the signal: {left}"
    assert not any(session in cmd for p, (_, cmd) in _table().items() if _alive(p))
    # Ray kills its actors with SIGKILL, so no exit hook of theirs frees the arena: the driver must.
    assert not [a for a in arenas if a.exists()], "the actor's arena was left in /dev/shm"
    assert records and not [p for p, r in sandbox.owned_dirs() if r in records], "the actor's dirs were left"
