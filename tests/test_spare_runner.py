"""The spare runner (issue #23, throughput; issue #19, trust): where candidates get fresh runners, the
verifier keeps one runner started ahead, with no candidate, and takes it when the next candidate
needs one. Its start is paid while the previous candidate runs; it never ran candidate code before
it was taken, nothing of a candidate reaches it while it waits, and it dies with everything else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem

ATT = Path(__file__).resolve().parent / "fixtures" / "attacks"
PROBLEM = ATT / "problem.py"
INFO = ATT / "runner_info.py"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]


@pytest.mark.parametrize("harm", ["stop", "kill"])
def test_a_candidate_that_stops_or_kills_the_spare_does_not_fail_the_next(tmp_path, monkeypatch, harm):
    out = tmp_path / "runs.jsonl"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    monkeypatch.setenv("KERNELOPT_TEST_HARM", harm)
    t0 = time.monotonic()
    evs = evaluate(load_problem(PROBLEM), [load_candidate(ATT / "harm_spare.py"), load_candidate(INFO)], time=True,
                   timeout_s=120, isolate="candidate")
    assert [e.failure for e in evs] == [None, None]
    # Not the spare's start timeout (180 s): a stopped spare is continued when it is taken, a killed
    # one replaced by a runner started there and then.
    assert time.monotonic() - t0 < 90
    harmed, info = _records(out)
    assert len(harmed["harmed"]) == 1, harmed
    assert (info["pid"] == harmed["harmed"][0]) is (harm == "stop")


DRIVER = r"""
import sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], time=False, timeout_s=600,
               isolate="candidate")
sys.exit(0 if all(e.passed for e in evs) else 1)
"""


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int, *, spare: bool = True,
         timed: bool = False) -> list[dict]:
    out = tmp_path / "runs.jsonl"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    if not spare:
        monkeypatch.setenv("KERNELOPT_SPARE_RUNNER", "0")
    evs = evaluate(load_problem(PROBLEM), [load_candidate(INFO)] * count, time=timed, timeout_s=120,
                   isolate="candidate")
    assert [e.failure for e in evs] == [None] * count
    runs = _records(out)
    assert len(runs) == count
    return runs


def test_the_next_candidate_runs_in_the_spare_started_before_this_one_ran(tmp_path, monkeypatch):
    runs = _run(tmp_path, monkeypatch, 3, timed=True)
    assert len({r["pid"] for r in runs}) == 3  # a fresh runner for every candidate, as before
    for this, after in zip(runs, runs[1:]):
        # The runner of the next candidate was already running while this one ran ...
        assert after["started_s"] < this["now_s"], (this, after)
        # ... and it was the one spare this candidate saw beside itself.
        assert this["others"] == [after["pid"]], (this, after)


def test_without_the_spare_each_runner_starts_after_the_previous_candidate(tmp_path, monkeypatch):
    """KERNELOPT_SPARE_RUNNER=0 (the measurement's baseline): no runner waits beside a candidate."""
    runs = _run(tmp_path, monkeypatch, 2, spare=False)
    assert runs[0]["others"] == [] and runs[1]["others"] == []
    assert runs[1]["started_s"] > runs[0]["now_s"]


def test_a_spare_never_ran_candidate_code_and_nothing_reaches_it_while_it_waits(tmp_path):
    """As an ordinary user (root passes every ptrace check; see test_trust_attacks.py)."""
    from test_trust_attacks import _unprivileged_prefix

    out = tmp_path / "runs.jsonl"
    cmd = [*_unprivileged_prefix(), sys.executable, "-c", DRIVER, str(PROBLEM), str(INFO), str(INFO), str(INFO)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KERNELOPT_TEST_ATTACK_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _records(out)
    pids = [r["pid"] for r in runs]
    assert len(set(pids)) == 3, runs
    for i, run in enumerate(runs):
        assert run["others"], run  # a spare waited beside every candidate
        for spare in run["others"]:
            # The spare seen beside candidate i hosted none of the candidates up to i ...
            assert spare not in pids[: i + 1], runs
            # ... and its /proc files were closed to that candidate (non-dumpable while it waits):
            # no code or request could be planted in it through its memory or pipes.
            assert run["opened"][str(spare)] == [], run
        # What the previous candidate wrote into this runner's private dir while it was the spare
        # was gone when this candidate ran.
        assert not run["found_planted"], runs
    assert all(run["planted"] for run in runs)  # the plant itself worked
    # The spare left at the end was never taken: it ran nothing ...
    assert not set(runs[-1]["others"]) & set(pids)
    # ... and it is gone, with every runner and the verifier.
    for pid in [*pids, *runs[-1]["others"], runs[0]["verifier"]]:
        assert not _alive(pid), pid


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_runner_survives_the_engine(tmp_path, sig):
    """The engine is interrupted while a candidate hangs and a spare waits: runner, spare and verifier
    all go (SIGKILL: through the children's watch on their owner)."""
    out = tmp_path / "runs.jsonl"
    env = {**os.environ, "KERNELOPT_TEST_ATTACK_OUT": str(out), "KERNELOPT_TEST_HANG": "1"}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(PROBLEM), str(INFO)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        end = time.monotonic() + 120
        while not (out.exists() and _records(out)) and time.monotonic() < end:
            time.sleep(0.1)
        run = _records(out)[0]
        pids = [run["pid"], run["verifier"], *run["others"]]
        assert run["others"], "no spare was waiting beside the candidate"
        assert all(_alive(p) for p in pids)
        proc.send_signal(sig)
        proc.wait(60)
        end = time.monotonic() + 20
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], f"outlived the engine: {pids}"
    finally:
        proc.kill()
        proc.wait(30)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


DRIVER_TIMED = DRIVER.replace("time=False", "time=True")


def test_a_spare_stopped_for_a_timing_dies_with_a_killed_verifier(tmp_path):
    """The verifier stops a spare that is still starting while it times a candidate; a candidate that
    kills the verifier and the engine then must not leave that stopped spare behind (its own watch on
    its owner cannot run while it is stopped: the kernel kills it, PR_SET_PDEATHSIG)."""
    out = tmp_path / "runs.jsonl"
    env = {**os.environ, "KERNELOPT_TEST_ATTACK_OUT": str(out), "KERNELOPT_TEST_INIT_SLEEP": "10"}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER_TIMED, str(ATT / "problem_slow_init.py"),
                             str(ATT / "kill_when_timed.py")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        assert proc.wait(180) == -signal.SIGKILL  # killed by its candidate
        seen = _records(out)[0]
        spares = {int(p): state for p, state in seen["spares"].items()}
        pids = [seen["runner"], *spares]
        assert spares and set(spares.values()) == {"T"}, seen  # stopped while starting (10 s)
        end = time.monotonic() + 20
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], f"outlived the engine: {pids} (spares were {spares})"
    finally:
        proc.kill()
        proc.wait(30)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
