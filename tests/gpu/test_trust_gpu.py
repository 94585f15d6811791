"""Issue #19's attacks on a GPU (skipped without CUDA).

    python3 -m pytest -q tests/gpu/test_trust_gpu.py

Checks that the hardened verifier (non-dumpable) still shares its arena with its runner through
CUDA IPC, in every isolation mode, sandbox included; that a forged reply fails only its own
candidate; that kernels which skip their work when timed fail as `timing_mismatch`; that a fake
clock with the guard switched off fakes no GPU time; that GPU times still come out; and, with
2 GPUs, that a runner sees its verifier's GPU only, so work queued on another GPU cannot hide from
the timer, and that an evaluation on the second GPU verifies and times:

    python3 -m pytest -v tests/gpu/test_trust_gpu.py -k "other_gpu or second_gpu"
"""

from __future__ import annotations

import json
from pathlib import Path
import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from kernelopt.harness.evaluate import evaluate  # noqa: E402
from kernelopt.problem import load_candidate, load_problem  # noqa: E402

from conftest import unprivileged_prefix  # noqa: E402

ATT = Path(__file__).resolve().parent.parent / "fixtures" / "attacks"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cands(*names: str) -> list:
    return [load_candidate(ATT / n) for n in names]


@pytest.mark.parametrize("isolate", ["worker", "candidate", "sandbox"])
def test_examples_pass_and_are_timed_in_every_mode(isolate):
    from kernelopt.harness.evaluate import resolve_isolation

    if isolate == "sandbox" and resolve_isolation("sandbox", ["cuda:0"]) != "sandbox":
        pytest.skip("no sandbox on this host")
    problem = load_problem(EXAMPLES / "softmax" / "problem.py")
    cands = [load_candidate(EXAMPLES / "softmax" / "kernel.py"), load_candidate(EXAMPLES / "softmax" / "kernel_wrong.py"),
             load_candidate(EXAMPLES / "softmax" / "kernel.py")]
    evs = evaluate(problem, cands, isolate=isolate, timeout_s=300)
    assert [e.failure.reason if e.failure else None for e in evs] == [None, "incorrect", None], [e.failure for e in evs]
    for ev in (evs[0], evs[2]):
        assert ev.timing is not None and ev.timing.median_ms > 0 and "cuda-events" in ev.timing.method
        assert not ev.suspect, ev.suspect


def test_root_in_the_gpu_sandbox_cannot_reach_the_judge(monkeypatch):
    """The forged reply and the reference rewrite from root of the GPU sandbox (no pid namespace
    there: the verifier is visible, but not open to a process of another user namespace), then a
    right and a wrong kernel: only the right one passes, and no reply was forged."""
    from kernelopt.harness.evaluate import resolve_isolation

    if resolve_isolation("sandbox", ["cuda:0"]) != "sandbox":
        pytest.skip("no sandbox on this host")
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", "/dev/stderr")  # the file system is read-only in there
    evs = evaluate(load_problem(ATT / "problem.py"), _cands("forge_verdict.py", "rewrite_reference.py", "ok.py",
                                                           "zeros.py", "ok.py"), time=False, timeout_s=120, isolate="sandbox")
    assert [e.passed for e in evs] == [False, False, True, False, True], [e.failure for e in evs]
    assert evs[0].failure.reason in ("runtime", "incorrect"), evs[0].failure
    # The rewrite fixture reads its inputs on the host (.numpy()): on a GPU it fails before it can
    # try, and the references it would rewrite live in device memory anyway (issue #19).
    assert evs[1].failure.reason in ("runtime", "incorrect"), evs[1].failure


def test_forged_reply_fails_only_its_candidate(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(tmp_path / "attack.txt"))
    evs = evaluate(load_problem(ATT / "problem.py"), _cands("forge_verdict.py", "ok.py", "zeros.py", "ok.py"),
                   time=False, timeout_s=120)
    assert not evs[0].passed and evs[0].failure.reason in ("tampered", "incorrect")
    assert [e.failure.reason if e.failure else None for e in evs[1:]] == [None, "incorrect", None]


@pytest.mark.parametrize("name", ["timing_stack.py", "timing_count.py", "timing_repeat.py", "slot_filler.py",
                                  "side_stream.py"])
def test_skipping_work_when_timed_is_timing_mismatch(name):
    evs = evaluate(load_problem(ATT / "problem.py", {"N": "1048576"}), _cands(name, "ok.py"), timeout_s=120)
    assert evs[0].failure is not None and evs[0].failure.reason == "timing_mismatch", evs[0].failure
    assert evs[1].failure is None and evs[1].timing is not None


def test_garbage_until_the_last_timed_calls_is_timing_mismatch(tmp_path, monkeypatch):
    """timing_late_honest.py: honest in the trials and the warm-up, zeros on every timed call except
    those it predicts (from `sample_calls`' locals) are the last 10 of its timing. The judged call is
    drawn uniformly over the timed calls (`runner.JudgedDraw`), so a timing passes with probability
    f = honest timed calls / timed calls. The attack logs each honest timed call, which bounds f by
    (honest lines) / (the largest timed call logged); asserted at most 0.015 for each of 3 timings
    (about 10 of the thousands of calls a 4 MB kernel gets in max_wall_s), and at least 2 of the 3
    must be `timing_mismatch`: a pass by luck is at most 3 f^2 < 7e-4. Against the old draw (the
    judged outputs replaced with probability 1/3 after each call) each timing passed with probability
    about 0.98 where the prediction holds (tests/test_timing_stats.py, on fake CUDA: 59 of 60)."""
    out = tmp_path / "late_honest.jsonl"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    evs = evaluate(load_problem(ATT / "problem.py", {"N": "1048576"}),
                   _cands("timing_late_honest.py", "timing_late_honest.py", "timing_late_honest.py", "ok.py"),
                   timeout_s=120)
    assert evs[3].failure is None and evs[3].timing is not None, evs[3].failure
    runs: dict[str, list[int]] = {}
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        runs.setdefault(rec["run"], []).append(rec["timed_call"])
    # Each timing was the attack it claims: honest on a few timed calls, at its end.
    assert len(runs) == 3, runs.keys()
    for calls in runs.values():
        assert len(calls) / max(calls) <= 0.015, (len(calls), max(calls))
    reasons = [e.failure.reason if e.failure else None for e in evs[:3]]
    assert reasons.count("timing_mismatch") >= 2, [e.failure for e in evs[:3]]
    assert all(r in ("timing_mismatch", None) for r in reasons), [e.failure for e in evs[:3]]


def test_work_hidden_beside_the_launch_guard_is_timing_mismatch():
    """The guard holds every SM (`kernelopt.harness.gpu_guard`): the side stream's work waits for it,
    runs after the start event, and trails the timed stream's end."""
    evs = evaluate(load_problem(ATT / "problem.py", {"N": "1048576"}), _cands("guard_overlap.py", "ok.py"), timeout_s=120)
    assert evs[1].failure is None and evs[1].timing is not None, evs[1].failure
    assert evs[0].failure is not None and evs[0].failure.reason == "timing_mismatch", (evs[0].failure, evs[0].timing,
                                                                                       evs[0].suspect)


def test_a_thread_that_fills_the_output_slot_fails_verification():
    """Garbage on every call while a thread of the candidate keeps the right outputs in the GPU
    arena's slot: the runner's keyed device digest of what the call returned differs from the slot."""
    evs = evaluate(load_problem(ATT / "problem.py", {"N": "1048576"}),
                   [load_candidate(ATT / "slot_filler_always.py"), load_candidate(ATT / "ok.py")], time=False, timeout_s=120)
    assert evs[0].failure is not None and evs[0].failure.reason == "incorrect", evs[0].failure
    # Caught by the digest when the helper wrote the slot after the copy, else judged on the
    # garbage the call returned: never a pass, whichever way the race went.
    assert evs[0].failure.stage == "verify" and ("not what the call returned" in evs[0].failure.message
                                                 or "elements off" in evs[0].failure.message), evs[0].failure
    assert evs[1].failure is None and evs[1].passed


def test_device_digest_tells_one_changed_word_and_matches_the_same_bytes():
    """The keyed device fingerprint over more than one table row and a ragged byte tail."""
    from kernelopt.harness.arena import output_digest

    t = torch.randn(3 * (1 << 20) + 5, device="cuda", dtype=torch.float16)
    a = output_digest(t, 7)
    assert a == output_digest(t.clone(), 7)
    u = t.clone()
    u[2 * (1 << 20) + 1] += 1
    assert output_digest(u, 7) != a and output_digest(t, 8) != a


def test_fake_clock_fakes_no_gpu_time():
    evs = evaluate(load_problem(ATT / "problem.py"), _cands("fake_clock.py", "slow.py"), timeout_s=120)
    assert evs[0].failure is not None and evs[0].failure.reason == "tampered"
    # slow.py sleeps 123 ms on the host between the events of each call: about 118 ms of GPU time
    # (the launch guard's 5 ms busy-wait comes before the start event), timed in a fresh runner.
    assert evs[1].failure is None and evs[1].timing is not None
    assert evs[1].timing.median_ms >= 100.0, evs[1].timing


_USER_DRIVER = r"""
import json, sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], timeout_s=300)
print(json.dumps([e.failure.reason if e.failure else None for e in evs]))
"""


def test_an_ordinary_user_runs_the_engine_on_the_gpu(tmp_path):
    """The verifier is non-dumpable; a runner of an ordinary user (no CAP_SYS_PTRACE, unlike root on
    the GPU host) must still open its CUDA IPC arena (the verifier is dumpable only while a fresh
    runner opens it), and a forged reply must still be blocked."""
    import subprocess
    import sys

    prefix = unprivileged_prefix()
    out = tmp_path / "attack.txt"
    out.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o666)
    cmd = [*prefix, sys.executable, "-c", _USER_DRIVER, str(EXAMPLES / "softmax" / "problem.py"),
           str(EXAMPLES / "softmax" / "kernel.py"), str(EXAMPLES / "softmax" / "kernel_wrong.py"),
           str(ATT / "forge_verdict.py"), str(EXAMPLES / "softmax" / "kernel.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KERNELOPT_TEST_ATTACK_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    reasons = json.loads(proc.stdout.strip().splitlines()[-1])
    assert reasons[0] is None and reasons[1] == "incorrect" and reasons[3] is None, (reasons, proc.stderr[-3000:])
    assert reasons[2] in ("incorrect", "shape_mismatch", "runtime"), reasons  # forge_verdict returns zeros of x's shape
    assert "blocked" in out.read_text()


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


@two_gpus
@pytest.mark.parametrize("zygote", [True, False])
def test_other_gpu_work_cannot_hide_from_the_timer(tmp_path, monkeypatch, zygote):
    """other_gpu.py, timed on cuda:1: a runner sees that GPU only (CUDA_VISIBLE_DEVICES by UUID,
    read when the runner initialised CUDA, before the candidate was imported: dropping the variable
    widens nothing), so its work on "another GPU" has nowhere to go. It ends as an honest time, no
    faster than its honest twin's, or fails; never a time of work the timer did not wait for."""
    out = tmp_path / "other_gpu.jsonl"
    monkeypatch.setenv("KERNELOPT_TEST_ATTACK_OUT", str(out))
    evs = evaluate(load_problem(ATT / "problem.py", {"N": "65536"}), _cands("other_gpu.py", "other_gpu_honest.py"),
                   devices=["cuda:1"], zygote=zygote, timeout_s=300)
    attack, honest = evs
    assert honest.failure is None and honest.timing is not None, honest.failure
    assert all("cuda:1" in e.device for e in evs), [e.device for e in evs]
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    assert seen, "the attack was never imported"
    for rec in seen:
        assert rec["visible"].startswith("GPU-"), rec
        assert rec["torch"] == rec["torch_after"] == rec["driver_after"] == 1, rec
    if attack.failure is not None:
        assert attack.failure.reason == "timing_mismatch", attack.failure
    else:
        assert attack.timing is not None
        assert attack.timing.median_ms >= 0.8 * honest.timing.median_ms, (attack.timing, honest.timing)


@two_gpus
@pytest.mark.parametrize("isolate,zygote", [("worker", True), ("worker", False), ("sandbox", False)])
def test_the_second_gpu_verifies_and_times(isolate, zygote):
    """On the verifier's cuda:1 (the runner's cuda:0): the arena opens, the every-SM launch guard
    loads, a right kernel passes and is timed, a wrong one fails."""
    from kernelopt.harness.evaluate import resolve_isolation
    from kernelopt.harness.timing import METHOD

    if isolate == "sandbox" and resolve_isolation("sandbox", ["cuda:1"]) != "sandbox":
        pytest.skip("no sandbox on this host")
    problem = load_problem(EXAMPLES / "softmax" / "problem.py")
    cands = [load_candidate(EXAMPLES / "softmax" / "kernel.py"), load_candidate(EXAMPLES / "softmax" / "kernel_wrong.py")]
    evs = evaluate(problem, cands, devices=["cuda:1"], isolate=isolate, zygote=zygote, timeout_s=300)
    assert [e.failure.reason if e.failure else None for e in evs] == [None, "incorrect"], [e.failure for e in evs]
    assert all("cuda:1" in e.device for e in evs), [e.device for e in evs]
    assert evs[0].timing is not None and evs[0].timing.median_ms > 0 and evs[0].timing.method == METHOD, evs[0].timing
    assert not evs[0].suspect, evs[0].suspect
