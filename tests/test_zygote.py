"""Issue #23: fresh runners forked from a zygote (kernelopt.harness.zygote) instead of started cold.

On the CPU the zygote is off by default; these tests turn it on (`zygote=True`, as $KERNELOPT_ZYGOTE=1
does) and check what it must keep of a cold runner's trust: a runner no candidate can open, from
its first instruction; a tree killed as a spawned runner's is; nothing left when the verifier dies;
the same verdicts. Running the trust suites with KERNELOPT_ZYGOTE=1 checks the attacks against
forked runners (docs/harness.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.harness.evaluate import Engine, evaluate
from kernelopt.harness.zygote import ZYGOTE_VAR, resolve
from kernelopt.problem import load_problem

from conftest import unprivileged_prefix
from test_trust_process import _alive, _cands

ATT = Path(__file__).resolve().parent / "fixtures" / "attacks"
PROBLEM = ATT / "problem.py"
ZYGOTE_ARG = "kernelopt.harness.zygote"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux only")


def _marked(marker: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0"):
                if _alive(int(entry)):
                    out.append(int(entry))
        except OSError:
            continue
    return out


def _probe_runs(out: Path, names: list[str], **options: object) -> list[dict]:
    out.touch()
    os.environ["KERNELOPT_TEST_ATTACK_OUT"] = str(out)
    try:
        evs = evaluate(load_problem(PROBLEM), _cands(*names), time=False, timeout_s=120, **options)
    finally:
        del os.environ["KERNELOPT_TEST_ATTACK_OUT"]
    assert [e.failure for e in evs] == [None] * len(names)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_the_option_and_the_variable(monkeypatch):
    monkeypatch.delenv(ZYGOTE_VAR, raising=False)
    assert resolve(None, "cuda:0", "worker") and resolve(None, "cuda:1", "candidate")
    assert not resolve(None, "cpu", "worker")
    assert not resolve(True, "cuda:0", "sandbox")  # sandboxed runners keep namespaces of their own
    monkeypatch.setenv(ZYGOTE_VAR, "1")
    assert resolve(None, "cpu", "worker") and not resolve(False, "cpu", "worker")
    monkeypatch.setenv(ZYGOTE_VAR, "0")
    assert not resolve(None, "cuda:0", "worker") and resolve(True, "cuda:0", "worker")
    monkeypatch.setenv(ZYGOTE_VAR, "yes")
    with pytest.raises(BadInput, match=ZYGOTE_VAR):
        resolve(None, "cpu", "worker")
    monkeypatch.setenv(ZYGOTE_VAR, "1")
    assert all(c.zygote for c in Engine(load_problem(PROBLEM), devices=["cpu"]).configs)


def test_runners_are_forked_from_the_zygote_and_not_dumpable_from_their_first_instruction(tmp_path):
    runs = _probe_runs(tmp_path / "forked.jsonl", ["zygote_probe.py"] * 3, isolate="candidate", zygote=True)
    assert len({r["pid"] for r in runs}) == 3  # a fresh runner per candidate
    for run in runs:
        assert ZYGOTE_ARG in run["cmdline"], run["cmdline"]  # forked, never exec'd
        assert run["dumpable"] == 0, run
        assert "kernelopt-child-runner-" in run["cwd"] and run["tmpdir"] == run["cwd"]  # a private dir each
    assert len({r["cwd"] for r in runs}) == 3
    # The runner after each one was already forked (the spare) while it ran.
    assert runs[1]["pid"] in {int(p) for p in runs[0]["peers"]}
    # Started cold, the runner is `python -m kernelopt.harness.runner`, dumpable (it never calls prctl).
    (cold,) = _probe_runs(tmp_path / "cold.jsonl", ["zygote_probe.py"], isolate="candidate", zygote=False)
    assert ZYGOTE_ARG not in cold["cmdline"] and "kernelopt.harness.runner" in cold["cmdline"]
    assert cold["dumpable"] == 1


DRIVER = r"""
import json, sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], time=False, timeout_s=120,
               isolate="candidate", zygote=True)
print(json.dumps([e.failure.reason if e.failure else None for e in evs]))
"""


def test_a_candidate_cannot_open_a_later_runner(tmp_path):
    """As an ordinary user: the first candidate finds the runner forked ahead for the second (and the
    zygote) by their command line, and cannot open their memory; the second candidate ran there."""
    out = tmp_path / "probe.jsonl"
    out.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o666)
    cmd = [*unprivileged_prefix(), sys.executable, "-c", DRIVER, str(PROBLEM), str(ATT / "zygote_probe.py"),
           str(ATT / "zygote_probe.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KERNELOPT_TEST_ATTACK_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [None, None]
    first, second = (json.loads(line) for line in out.read_text().splitlines())
    peers = {int(p): how for p, how in first["peers"].items()}
    assert second["pid"] in peers, (first, second)
    assert len(peers) >= 2  # the zygote and the next runner
    assert all(how.startswith("blocked") for how in peers.values()), peers


def test_a_runners_tree_dies_with_it(tmp_path, monkeypatch):
    """A daemon a candidate leaves (setsid, double fork) shows the zygote's environment, not its
    runner's tag: it is found by the zygote's marker and killed when its runner is replaced."""
    pidfile = tmp_path / "daemon.pid"
    monkeypatch.setenv("KERNELOPT_TEST_PIDFILE", str(pidfile))
    with Engine(load_problem(PROBLEM), timeout_s=120, isolate="candidate", zygote=True) as engine:
        (ev,) = engine.evaluate(_cands("leave_daemon.py"), time=False)
        assert ev.failure is None
        daemon = int(pidfile.read_text())
        try:
            end = time.monotonic() + 20
            while _alive(daemon) and time.monotonic() < end:
                time.sleep(0.1)
            assert not _alive(daemon), "the daemon outlived its runner"
        finally:
            if _alive(daemon):
                os.kill(daemon, signal.SIGKILL)


HANG = r"""
import sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evaluate(load_problem(sys.argv[1]), [load_candidate(sys.argv[2])], time=False, timeout_s=600, zygote=True)
"""


@pytest.mark.parametrize("victim", ["verifier", "engine"])
def test_a_killed_verifier_or_engine_leaves_no_zygote_and_no_runner(tmp_path, victim):
    pidfile = tmp_path / "pids.txt"
    proc = subprocess.Popen([sys.executable, "-c", HANG, str(PROBLEM), str(ATT / "hang_report.py")],
                            env={**os.environ, "KERNELOPT_TEST_PIDFILE": str(pidfile)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marked: list[int] = []
    try:
        end = time.monotonic() + 120
        while not pidfile.exists() and time.monotonic() < end:
            time.sleep(0.1)
        assert pidfile.exists(), "the candidate never ran"
        runner, verifier = (int(p) for p in pidfile.read_text().split())
        argv = Path(f"/proc/{runner}/cmdline").read_bytes().decode().split("\0")
        marker = next(a for a in argv if a.startswith("kernelopt-zygote-"))
        marked = _marked(marker)
        assert runner in marked and len(marked) >= 3  # the zygote, the runner, the spare
        os.kill(verifier if victim == "verifier" else proc.pid, signal.SIGKILL)
        end = time.monotonic() + 20
        while _marked(marker) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _marked(marker), f"left behind: {_marked(marker)}"
    finally:
        proc.kill()
        proc.wait(60)
        for pid in marked:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_dead_zygote_means_cold_starts(tmp_path, monkeypatch):
    out = tmp_path / "probe.jsonl"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    with Engine(load_problem(PROBLEM), timeout_s=120, isolate="candidate", zygote=True) as engine:
        assert engine.evaluate(_cands("zygote_probe.py"), time=False)[0].failure is None
        first = json.loads(out.read_text().splitlines()[-1])
        marker = next(a for a in first["cmdline"] if a.startswith("kernelopt-zygote-"))
        zygote = min(_marked(marker), key=lambda p: int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[19]))
        os.kill(zygote, signal.SIGKILL)  # as a candidate can
        evs = engine.evaluate(_cands("zygote_probe.py", "zygote_probe.py"), time=False)
        assert [e.failure for e in evs] == [None, None]
    second, third = (json.loads(line) for line in out.read_text().splitlines()[1:])
    assert ZYGOTE_ARG in second["cmdline"]  # the spare, forked before the zygote died
    assert ZYGOTE_ARG not in third["cmdline"] and third["dumpable"] == 1  # cold


def test_the_verdicts_are_the_same_with_and_without_the_zygote():
    names = ("ok.py", "zeros.py", "fake_clock.py", "timing_count.py", "patch_runner.py", "ok.py")
    reasons = {}
    for zygote in (False, True):
        evs = evaluate(load_problem(PROBLEM), _cands(*names), timeout_s=120, zygote=zygote)
        reasons[zygote] = [e.failure.reason if e.failure else None for e in evs]
        assert all((e.timing is not None) == (e.failure is None) for e in evs)
    assert reasons[True] == reasons[False] == [None, "incorrect", "tampered", "timing_mismatch", "tampered", None]


def test_the_zygote_refuses_to_fork_with_a_thread():
    probe = ("import threading, time\n"
             "from kernelopt.harness.zygote import _preload, why_not_fork\n"
             "_preload()\n"
             "print(why_not_fork())\n"
             "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
             "print(why_not_fork())\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    clean, threaded = proc.stdout.strip().splitlines()
    assert clean == "None"
    assert "2 threads" in threaded


@pytest.mark.skipif(os.getuid() != 0, reason="reads another non-dumpable process's fd table: root only")
def test_a_forked_runner_holds_its_own_fds_and_no_other(tmp_path):
    """The fds a spawned runner inherits through pass_fds (the GPU arena's) reach a forked one at
    the same numbers; none of the zygote's (its socket) does."""
    from kernelopt.harness.sandbox import candidate_env
    from kernelopt.harness.zygote import Zygote

    held = tmp_path / "arena"
    held.write_bytes(b"x")
    fd = os.open(held, os.O_RDONLY)
    number = os.dup2(fd, 77, inheritable=False)
    os.close(fd)
    zygote = Zygote.start(lambda d: candidate_env({"TMPDIR": str(d)}), lambda: (number,))
    assert zygote is not None
    try:
        runner, chan = zygote.take()
        zygote.prefork()
        spare = zygote.spare[0]
        for pid in (runner.pid, spare.pid):
            fds = {int(f): os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")}
            assert fds[number] == str(held), fds
            assert not any("socket" in target for target in fds.values()), fds  # not the zygote's
            assert len(fds) == 6, fds  # stdin, stdout, stderr, its channel's two ends, the inherited one
        assert ZYGOTE_ARG in Path(f"/proc/{runner.pid}/cmdline").read_bytes().decode()
        runner.cleanup()
        chan.close()
    finally:
        zygote.close()
        os.close(number)


def test_a_forked_runner_that_cannot_start_means_cold_starts(tmp_path, monkeypatch):
    """A forked runner that dies in its start (here the problem's import kills it; on a GPU it could
    be CUDA in a forked process) fails no candidate: the verifier starts that runner and the later
    ones cold."""
    out = tmp_path / "probe.jsonl"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    evs = evaluate(load_problem(ATT / "problem_unforkable.py"), _cands("zygote_probe.py", "zygote_probe.py"),
                   time=False, timeout_s=120, isolate="candidate", zygote=True)
    assert [e.failure for e in evs] == [None, None]
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(ZYGOTE_ARG not in r["cmdline"] for r in runs), runs
