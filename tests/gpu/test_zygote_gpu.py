"""Issue #23's zygote on a GPU (skipped without CUDA): fresh runners forked from a zygote that never
initialised CUDA, each opening the arena (CUDA IPC) and timing in a context of its own.

    python3 -m pytest -q -s tests/gpu/test_zygote_gpu.py

On a CUDA device the zygote is on by default. A runner forked from it that cannot start makes the
verifier start its runners cold from then on (one line on stderr): these tests check that the
runners really came from the zygote (their command line is the zygote's), as root and as an
ordinary user, and that a runner's start costs less than a cold one's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from kernelopt.harness.evaluate import Engine, evaluate  # noqa: E402
from kernelopt.problem import load_candidate, load_problem  # noqa: E402

from conftest import unprivileged_prefix  # noqa: E402

ATT = Path(__file__).resolve().parent.parent / "fixtures" / "attacks"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ZYGOTE_ARG = "kernelopt.harness.zygote"


def test_the_zygote_is_on_by_default_on_a_gpu(monkeypatch):
    monkeypatch.delenv("KERNELOPT_ZYGOTE", raising=False)
    assert all(c.zygote for c in Engine(load_problem(ATT / "problem.py"), devices=["cuda:0"]).configs)
    assert not any(c.zygote for c in Engine(load_problem(ATT / "problem.py"), devices=["cuda:0"], zygote=False).configs)


_DRIVER = r"""
import json, sys
from kernelopt.harness.evaluate import evaluate
from kernelopt.problem import load_candidate, load_problem
evs = evaluate(load_problem(sys.argv[1]), [load_candidate(c) for c in sys.argv[2:]], timeout_s=300)
print(json.dumps([[e.failure.reason if e.failure else None, e.timing is not None, e.phases] for e in evs]))
"""


@pytest.mark.parametrize("user", ["root", "ordinary"])
def test_timed_candidates_run_in_forked_runners(tmp_path, user):
    """Three timed candidates (each gets a fresh runner on a GPU): forked from the zygote, not
    dumpable, verified and timed through the CUDA IPC arena; as an ordinary user too, whose runner
    has no debugger-like access to its verifier (the IPC window is what gives it)."""
    prefix = unprivileged_prefix() if user == "ordinary" else []
    out = tmp_path / "probe.jsonl"
    out.touch()
    os.chmod(tmp_path, 0o777)
    os.chmod(out, 0o666)
    env = {k: v for k, v in os.environ.items() if k != "KERNELOPT_ZYGOTE"}
    cmd = [*prefix, sys.executable, "-c", _DRIVER, str(ATT / "problem.py"), *[str(ATT / "zygote_probe.py")] * 3]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**env, "KERNELOPT_TEST_ATTACK_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r[:2] for r in results] == [[None, True]] * 3, (results, proc.stderr[-3000:])
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len({r["pid"] for r in runs}) == 3
    for run in runs:
        assert ZYGOTE_ARG in run["cmdline"] and run["dumpable"] == 0, (run, proc.stderr[-3000:])
    print(user, "runner_start s:", [round(r[2].get("runner_start", 0.0), 3) for r in results])


def test_forked_runner_start_is_cheaper_and_the_verdicts_are_the_same():
    """examples/softmax, a right, a wrong and two right kernels, timed, with and without the zygote:
    the same verdicts, the times within 5 % of each other, and a forked runner's start below a
    cold one's (printed with -s)."""
    problem = load_problem(EXAMPLES / "softmax" / "problem.py")
    names = ["kernel.py", "kernel_wrong.py", "kernel.py", "kernel.py"]
    cands = [load_candidate(EXAMPLES / "softmax" / n) for n in names]
    runs = {}
    for zygote in (False, True):
        evs = evaluate(problem, cands, timeout_s=300, zygote=zygote)
        runs[zygote] = evs
        assert [e.failure.reason if e.failure else None for e in evs] == [None, "incorrect", None, None], \
            [e.failure for e in evs]
        assert all(not e.suspect for e in evs if e.timing is not None)
    starts = {z: [e.phases["runner_start"] for e in evs if "runner_start" in e.phases] for z, evs in runs.items()}
    print("runner_start s, cold:", [round(s, 3) for s in starts[False]], "forked:", [round(s, 3) for s in starts[True]])
    assert len(starts[True]) >= 2 and len(starts[False]) >= 2
    assert sum(starts[True]) / len(starts[True]) < 0.8 * sum(starts[False]) / len(starts[False]), starts
    for cold, forked in zip(runs[False], runs[True]):
        if cold.timing is not None:
            assert forked.timing is not None
            assert abs(forked.timing.median_ms - cold.timing.median_ms) <= 0.05 * cold.timing.median_ms, \
                (cold.timing.median_ms, forked.timing.median_ms)
