"""The optimize loop end to end on the CPU (Triton interpreter): run directory, report,
dedup, experience, and a kill followed by --resume that repeats no evaluation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kernelopt.optimize.loop import normalized_source_hash

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "examples" / "softmax"
SMALL = ["--set", "ROWS=16", "--set", "COLS=100"]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelopt", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT))


def _events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if line.strip()]


def test_normalized_hash_ignores_comments_and_blank_lines():
    a = "x = 1  # one\n\n\ny = 2\n"
    b = "x = 1\ny = 2   \n"
    assert normalized_source_hash(a) == normalized_source_hash(b)
    assert normalized_source_hash(a) != normalized_source_hash("x = 2\ny = 2\n")


@pytest.mark.slow
def test_optimize_end_to_end_on_the_cpu(tmp_path):
    run = tmp_path / "run"
    db = tmp_path / "exp.db"
    env_db = {"KERNELOPT_DB": str(db)}
    proc = subprocess.run([sys.executable, "-m", "kernelopt", "optimize", str(SOFTMAX / "problem.py"), "--kernel",
                           str(SOFTMAX / "kernel.py"), *SMALL, "-o", str(run), "--rounds", "2", "--beam", "2",
                           "--proposals", "2", "--json"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env_db}, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["finished"] and summary["interpreter"]
    assert summary["time_label"] == "interpreter wall time"
    for name in ("final_report.md", "benchmark.md", "convergence.png", "best_kernel.py", "run.json"):
        assert (run / name).is_file(), name
    assert (run / "convergence.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = _events(run)
    evaluated = Counter(e["version"] for e in events if e["type"] == "evaluated")
    assert evaluated and max(evaluated.values()) == 1
    # No two versions are the same candidate.
    sources = [normalized_source_hash(p.read_text()) for p in sorted(run.glob("v*/kernel.py"))]
    assert len(sources) == len(set(sources)) >= 3
    # Every proposal changed one thing and every outcome went into the experience store.
    recorded = [e for e in events if e["type"] == "experience_recorded"]
    assert len(recorded) == len(evaluated) - 1
    listing = subprocess.run([sys.executable, "-m", "kernelopt", "experience", "list", "--json", "--limit", "100"],
                             capture_output=True, text=True, env={**os.environ, **env_db}, timeout=120)
    records = json.loads(listing.stdout)
    assert sum(1 for r in records if (r.get("source") or "").startswith("run:")) == len(recorded)
    best = summary["best"]["id"]
    assert (run / "best_kernel.py").read_text() == (run / best / "kernel.py").read_text()
    assert "interpreter wall time" in (run / "final_report.md").read_text()
    # The winner was verified once more at the run's shape, then at a ragged one (16x100 -> 15x99).
    verified = [e for e in events if e["type"] == "verified"]
    assert [e["version"] for e in verified] == [best]
    assert [(c["label"], c["passed"]) for c in verified[0]["checks"]] == [("declared", True), ("ragged", True)]
    assert verified[0]["checks"][1]["overrides"] == {"ROWS": 15, "COLS": 99}
    assert summary["shapes_hold"] is True and "holds at ragged (ROWS=15, COLS=99)" in summary["shapes"]
    config = json.loads((run / "run.json").read_text())  # provenance: where it ran, with what
    assert config["device"].startswith("cpu") and config["env"]["python"] and config["env"]["triton"]


@pytest.mark.slow
def test_kill_then_resume_repeats_no_evaluation(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "kernelopt", "optimize", str(SOFTMAX / "problem.py"), "--kernel",
           str(SOFTMAX / "kernel.py"), *SMALL, "-o", str(run), "--rounds", "3", "--beam", "2", "--proposals", "2",
           "--no-experience"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(ROOT))
    deadline = time.monotonic() + 300
    # Kill it once a few proposals have been evaluated, mid-run.
    while time.monotonic() < deadline:
        if (run / "events.jsonl").exists() and sum(e["type"] == "evaluated" for e in _events(run)) >= 3:
            break
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    before = _events(run)
    assert not any(e["type"] == "run_finished" for e in before)
    done_before = {e["version"] for e in before if e["type"] == "evaluated"}
    res = _cli("optimize", "--resume", str(run), "--no-experience")
    assert res.returncode == 0, res.stderr[-2000:]
    after = _events(run)
    # Nothing written before the kill changed, and nothing finished was evaluated again.
    assert after[: len(before)] == before
    evaluated = Counter(e["version"] for e in after if e["type"] == "evaluated")
    assert max(evaluated.values()) == 1
    assert done_before <= set(evaluated)
    assert any(e["type"] == "resumed" for e in after) and after[-1]["type"] == "run_finished"


def test_resume_of_a_non_run_is_one_line(tmp_path):
    res = _cli("optimize", "--resume", str(tmp_path), timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_optimize_needs_a_kernel():
    res = _cli("optimize", str(SOFTMAX / "problem.py"), timeout=60)
    assert res.returncode == 2 and "--kernel" in res.stderr


def test_a_failing_starting_kernel_exits_1(tmp_path):
    """CandidateFailed is exit 1 through the real entry point (the documented code for a failed candidate)."""
    res = _cli("optimize", str(SOFTMAX / "problem.py"), "--kernel", str(SOFTMAX / "kernel_wrong.py"), *SMALL,
               "-o", str(tmp_path / "run"), "--no-experience", "--json", timeout=300)
    assert res.returncode == 1, res.stderr[-1000:]
    assert json.loads(res.stdout)["error"]["type"] == "CandidateFailed"
    assert "starting kernel failed" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    events = _events(tmp_path / "run")
    assert events[-1]["type"] == "run_finished" and events[-1]["stop_reason"] == "starting kernel failed"


@pytest.mark.slow
def test_llm_path_repairs_and_reflects_through_the_loop(tmp_path):
    """A scripted model (command provider) proposes a buggy kernel; the loop sends it back with its
    failure, evaluates the repair, and records the model's lessons with the outcomes."""
    gelu = ROOT / "benchmarks" / "suite" / "gelu"
    run = tmp_path / "run"
    env = {**os.environ, "KERNELOPT_DB": str(tmp_path / "exp.db"), "OPENAI_API_KEY": "sk-must-not-be-written"}
    res = subprocess.run([sys.executable, "-m", "kernelopt", "optimize", str(gelu / "problem.py"), "--kernel",
                          str(gelu / "kernel.py"), "--set", "ROWS=3", "--set", "COLS=300", "-o", str(run),
                          "--optimizer", "llm", "--provider", "command", "--llm-command",
                          f"{sys.executable} {ROOT / 'benchmarks' / 'llm_scripted' / 'reply.py'}",
                          "--rounds", "1", "--beam", "1", "--proposals", "1", "--json"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=str(ROOT))
    assert res.returncode == 0, res.stderr[-2000:]
    events = _events(run)
    evaluated = {e["version"]: e["evaluation"] for e in events if e["type"] == "evaluated"}
    assert evaluated["v1"]["failure"]["reason"] == "incorrect"  # the buggy proposal
    assert evaluated["v2"]["failure"] is None  # its repair
    proposed = {e["version"]: e for e in events if e["type"] == "proposed"}
    assert proposed["v2"]["parent"] == "v0" and proposed["v2"]["proposal"]["extra"].get("repair") == 1
    lessons = [e for e in events if e["type"] == "lesson"]
    assert {e["version"] for e in lessons} == {"v1", "v2"}
    assert (run / "llm_usage.jsonl").is_file()
    written = "".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file() and p.suffix != ".png")
    assert "sk-must-not-be-written" not in written
    summary = json.loads(res.stdout)
    assert summary["best"]["id"] == "v2"
