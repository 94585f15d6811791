"""Issue #19: a hostile candidate must not forge its verdict, fake its time or read the user's keys.

Each attack is a fixture in tests/fixtures/attacks/ written from the issue's description. The
ones that depend on the kernel's same-user rules (/proc/<pid>/{fd,mem,environ} of a
non-dumpable process) run the whole engine as an ordinary user: these tests run as root here,
and root passes every ptrace check, so the engine is started in a user namespace as uid 1000
without capabilities (`unshare --user --map-user=1000`), which the kernel treats like any
unprivileged user. A root candidate is what `--isolate sandbox` is for (tests/test_isolate_sandbox.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.harness.evaluate import Engine, evaluate
from kernelopt.problem import load_candidate, load_problem

from conftest import unprivileged_prefix

ATT = Path(__file__).resolve().parent / "fixtures" / "attacks"
PROBLEM = ATT / "problem.py"
SECRET = "sk-test-1f2e3d4c5b6a-must-not-leak"

# Runs the engine in a process of its own; prints one JSON line per candidate.
DRIVER = r"""
import json, sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[3:]], time=sys.argv[2] == "time",
               timeout_s=60)
print(json.dumps([{"reason": e.failure.reason if e.failure else None,
                   "message": e.failure.message if e.failure else None,
                   "passed": e.passed} for e in evs]))
"""


def run_as_user(candidates: list[str], *, time_it: bool = False, env: dict[str, str] | None = None,
                engine_env: dict[str, str] | None = None) -> list[dict]:
    """The engine as an ordinary user; `engine_env` reaches only the engine's own initial
    environment (through `env`), not its ancestors'."""
    cmd = [*unprivileged_prefix(), "env", *(f"{k}={v}" for k, v in (engine_env or {}).items()),
           sys.executable, "-c", DRIVER, str(PROBLEM), "time" if time_it else "verify",
           *(str(ATT / c) for c in candidates)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cands(*names: str) -> list:
    return [load_candidate(ATT / n) for n in names]


# --- 1. forged verdicts ---------------------------------------------------------------------


def test_forged_reply_fails_its_candidate_and_shifts_nothing(tmp_path, monkeypatch):
    """As root (here) the candidate can open /proc/<ppid>/fd/WRITE_FD and writes its reply: the
    nonce check must fail it as tampered, and the next candidates get their own verdicts."""
    out = tmp_path / "attack.txt"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    evs = evaluate(load_problem(PROBLEM), _cands("forge_verdict.py", "ok.py", "zeros.py", "ok.py"), time=False,
                   timeout_s=60)
    reasons = [e.failure.reason if e.failure else None for e in evs]
    assert reasons[0] in ("tampered", "incorrect"), evs[0].failure
    assert not evs[0].passed
    if os.getuid() == 0:
        assert "forged" in out.read_text()
        assert reasons[0] == "tampered" and "forged its verdict" in evs[0].failure.message
    assert reasons[1:] == [None, "incorrect", None]


def test_forged_reply_is_blocked_for_an_ordinary_user(tmp_path):
    out = tmp_path / "attack.txt"
    out.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o666)
    results = run_as_user(["forge_verdict.py", "ok.py", "zeros.py"], env={"KERNELOPT_TEST_ATTACK_OUT": str(out)})
    assert [r["reason"] for r in results] == ["incorrect", None, "incorrect"], results
    assert "blocked" in out.read_text()


# --- 2. references rewritten through /proc/<ppid>/mem ---------------------------------------


def test_reference_rewrite_through_proc_mem_is_blocked(tmp_path):
    out = tmp_path / "attack.txt"
    out.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o666)
    results = run_as_user(["rewrite_reference.py", "ok.py"], env={"KERNELOPT_TEST_ATTACK_OUT": str(out)})
    assert results[0]["reason"] == "incorrect", (results, out.read_text())
    assert results[1]["reason"] is None
    assert "blocked" in out.read_text()


# --- 3. keys read from an ancestor's environ / cmdline --------------------------------------


def test_candidate_reads_no_key_from_its_ancestors(tmp_path):
    out = tmp_path / "attack.txt"
    out.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o666)
    results = run_as_user(["read_secrets.py"], env={"KERNELOPT_TEST_ATTACK_OUT": str(out)},
                          engine_env={"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET})
    text = out.read_text()
    assert results[0]["reason"] is None, results
    assert "environ" in text and "cmdline" in text  # the probe ran and tried every ancestor
    assert SECRET not in text


def test_engine_and_verifier_are_not_dumpable():
    from kernelopt.harness.sandbox import is_hardened

    probe = ("from kernelopt.harness.sandbox import harden_process, is_hardened; "
             "print(is_hardened(), harden_process(), is_hardened())")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["False", "True", "True"]
    with Engine(load_problem(PROBLEM), timeout_s=60) as engine:
        assert is_hardened()  # the engine's own process
        verifier = engine.workers[0].child.pid
        dumpable = Path(f"/proc/{verifier}/status").read_text()
        # Linux shows a non-dumpable process's /proc entries as root's: the verifier's are.
        assert os.stat(f"/proc/{verifier}/environ").st_uid == 0, dumpable


# --- 4. timed calls that skip the work -------------------------------------------------------


@pytest.mark.parametrize("name, reason", [("timing_stack.py", "timing_mismatch"), ("timing_count.py", "timing_mismatch"),
                                          ("timing_repeat.py", "timing_mismatch"), ("timing_cache.py", "timing_mismatch"),
                                          ("queued_replies.py", "tampered"),
                                          ("slot_filler.py", "timing_mismatch")])
def test_a_kernel_that_skips_work_when_timed_fails(name, reason):
    """Correct when verified; garbage, a cached copy or replies written in advance when timed, or
    garbage whose slot in the arena a helper process fills with the right outputs after the copy."""
    evs = evaluate(load_problem(PROBLEM), _cands(name, "ok.py"), timeout_s=60)
    assert evs[0].failure is not None and evs[0].failure.reason == reason, evs[0].failure
    assert evs[0].failure.stage == "time" and evs[0].timing is None and not evs[0].speedups
    assert evs[1].failure is None and evs[1].timing is not None


def test_a_helper_that_fills_the_output_slot_after_the_copy_fails_verification():
    """A kernel that returns garbage on every call while a process it forked writes the right
    outputs into the arena's slot after the runner's copy: the trial's digest of what the call
    returned does not match the slot, so it fails verification however the race goes."""
    evs = evaluate(load_problem(PROBLEM), [load_candidate(ATT / "slot_filler_always.py"), load_candidate(ATT / "ok.py")],
                   time=False, timeout_s=60)
    assert evs[0].failure is not None and evs[0].failure.reason == "incorrect", evs[0].failure
    # Caught by the digest when the helper wrote the slot after the copy, else judged on the
    # garbage the call returned: never a pass, whichever way the race went.
    assert evs[0].failure.stage == "verify" and ("not what the call returned" in evs[0].failure.message
                                                 or "elements off" in evs[0].failure.message), evs[0].failure
    assert evs[1].failure is None and evs[1].passed


# --- 5. a fake clock with the guard switched off ---------------------------------------------


def test_fake_clock_with_guard_switched_off_fakes_no_time():
    """The issue's attack: 123 ms measured as 0.13 ms after a candidate replaced the clock."""
    evs = evaluate(load_problem(PROBLEM), _cands("fake_clock.py", "slow.py"), timeout_s=60, isolate="worker")
    assert evs[0].failure is not None and evs[0].failure.reason == "tampered", evs[0].failure
    assert "time.perf_counter" in evs[0].failure.message
    assert evs[1].failure is None and evs[1].timing is not None
    assert evs[1].timing.median_ms >= 100.0, evs[1].timing


def test_replacing_the_running_guard_itself_is_tampering():
    (ev,) = evaluate(load_problem(PROBLEM), _cands("patch_runner.py"), time=False, timeout_s=60)
    assert ev.failure is not None and ev.failure.reason == "tampered", ev.failure
    assert "Guard.changed" in ev.failure.message and "time.perf_counter" in ev.failure.message


@pytest.mark.parametrize("owner, attr", [("kernelopt.harness.runner.Runner", "_collect_outputs"),
                                         # which call is judged (a replacement could judge only honest calls)
                                         ("kernelopt.harness.runner.Runner", "_after_timed_call"),
                                         ("kernelopt.harness.runner.JudgedDraw", "keep"),
                                         ("kernelopt.harness.runner", "_bytes"), ("kernelopt.harness.runner", "_describe"),
                                         ("torch.cuda.Stream", "synchronize"), ("torch.Tensor", "zero_"),
                                         # the trailing time's measure, and what the stats go through on their way out
                                         ("kernelopt.harness.timing", "_idle_sync_us"), ("statistics", "median"),
                                         ("kernelopt.harness.timing", "clearly_slower"),
                                         ("kernelopt.harness.timing", "mark_raced"),
                                         ("kernelopt.harness.timing", "TimingStats"),
                                         # the launch guard queued before each start event (gpu_guard)
                                         ("kernelopt.harness.timing", "_guard_wait"),
                                         ("kernelopt.harness.gpu_guard", "occupying_guard"),
                                         ("kernelopt.harness.gpu_guard", "LOADED"),
                                         ("kernelopt.harness.gpu_guard.OccupyingGuard", "__call__"),
                                         ("kernelopt.harness.gpu_guard.OccupyingGuard", "grid"),
                                         ("kernelopt.harness.gpu_guard", "_LAUNCH_KERNEL")])
def test_the_guard_sees_a_replaced_hook_between_timed_calls(monkeypatch, owner, attr):
    """What the runner calls after a timed call's end event and before the next call's start event
    (keeping its outputs, the timed stream's synchronize, the L2 flush): a replacement could run the
    call's real work there, on the timed stream, unseen by the events."""
    from kernelopt.harness.runner import Guard, _resolve

    guard = Guard()
    assert guard.changed() == []
    monkeypatch.setattr(_resolve(owner), attr, lambda *a, **k: None)
    assert f"{owner}.{attr}" in guard.changed()


def test_the_interpreter_time_is_the_verifiers_clock():
    """Even a fake clock the guard misses cannot shorten a time: the runner holds no clock."""
    from kernelopt.harness.timing import INTERPRETER_METHOD

    (ev,) = evaluate(load_problem(PROBLEM), _cands("slow.py"), timeout_s=60)
    assert ev.timing is not None and ev.timing.median_ms >= 100.0
    assert ev.timing.method == INTERPRETER_METHOD and "verifier" in INTERPRETER_METHOD


# --- 9. the verdict of a tampered candidate names its reason ---------------------------------


def test_tampered_verdict_prints_a_reason(tmp_path):
    from click.testing import CliRunner

    from kernelopt.cli import main

    fix = Path(__file__).resolve().parent / "fixtures" / "harness"
    res = CliRunner().invoke(main, ["check", str(fix / "problem_axpy.py"), "--kernel", str(fix / "tamper_timer.py"),
                                    "--set", "N=64", "--timeout", "60"])
    assert res.exit_code == 1, res.output
    assert "None" not in res.output, res.output
    assert "tampered" in res.output and "time.perf_counter" in res.output
