"""Trust in a run directory under a hostile candidate (issue 19): honest hashes, a checked
event log, the promotion filter, keys kept off the disk.

The loop tests replace the engine with one whose verdicts and times are a fixed function of
the candidate's source: what is under test is what the loop and the run directory do with
them (which bytes they credit, re-time, name the winner and ship)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest
from run_fixtures import build_run, evaluation

from kernelopt.errors import BadInput
from kernelopt.models.harness import Candidate, Evaluation, Failure, ShapeCheck, TimingStats, Verification
from kernelopt.optimize import loop as loop_mod
from kernelopt.rundir import RunDir
from kernelopt.report.run_report import build_report

ROOT = Path(__file__).resolve().parent.parent
MATVEC = ROOT / "examples" / "matvec"
NO_OP = "def kernel_function(*args):\n    return None  # does no work\n"


# ----------------------------------------------------------------------------- the event log


def _lines(run: Path) -> list[bytes]:
    return (run / "events.jsonl").read_bytes().splitlines(keepends=True)


def _write(run: Path, lines: list[bytes]) -> None:
    (run / "events.jsonl").write_bytes(b"".join(lines))


def _line_of(lines: list[bytes], kind: str, version: str | None = None) -> int:
    for i, line in enumerate(lines):
        e = json.loads(line)
        if e["type"] == kind and (version is None or e.get("version") == version):
            return i
    raise AssertionError(f"no {kind} {version}")


def test_a_duplicated_line_is_refused_with_its_line_number(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    lines = _lines(tmp_path / "run")
    i = _line_of(lines, "evaluated", "v3")
    _write(tmp_path / "run", lines[: i + 1] + [lines[i]] + lines[i + 1:])
    with pytest.raises(BadInput, match=rf"events.jsonl:{i + 2}: seq \d+ after \d+ \(repeats a number"):
        RunDir.open(tmp_path / "run", readonly=True).replay()


def test_reordered_lines_are_refused(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    lines = _lines(tmp_path / "run")
    i = _line_of(lines, "evaluated", "v1")
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    _write(tmp_path / "run", lines)
    with pytest.raises(BadInput, match=rf"events.jsonl:{i + 1}: seq"):
        RunDir.open(tmp_path / "run", readonly=True).replay()


def test_a_deleted_line_is_refused(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    lines = _lines(tmp_path / "run")
    i = _line_of(lines, "evaluated", "v4")  # deleting a failure would leave v4 pending, to be evaluated again
    _write(tmp_path / "run", lines[:i] + lines[i + 1:])
    with pytest.raises(BadInput, match=rf"events.jsonl:{i + 1}: seq \d+ after \d+ \(skips a number"):
        RunDir.open(tmp_path / "run", readonly=True).replay()


def test_a_forged_second_evaluation_is_refused_even_with_the_right_seq(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", finish=False)
    run.close()
    lines = _lines(tmp_path / "run")
    last = json.loads(lines[-1])
    # A forged verdict for v5 (it was evaluated incorrect): "passed, 0.001 ms", numbered to follow on.
    forged = {"seq": last["seq"] + 1, "t": last["t"], "type": "evaluated", "version": "v5",
              "evaluation": evaluation(tmp_path / "run" / "v5" / "kernel.py", 0.001).model_dump(mode="json")}
    _write(tmp_path / "run", lines + [(json.dumps(forged) + "\n").encode()])
    with pytest.raises(BadInput, match=rf"events.jsonl:{len(lines) + 1}: v5 evaluated a second time"):
        RunDir.open(tmp_path / "run", readonly=True).replay()


def test_an_evaluation_before_its_proposal_is_refused(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    lines = _lines(tmp_path / "run")
    p, e = _line_of(lines, "proposed", "v2"), _line_of(lines, "evaluated", "v2")
    events = [json.loads(x) for x in lines]
    moved = events[e]
    del events[e]
    events.insert(p, moved)
    for seq, event in enumerate(events):  # renumbered: only the order of the two is wrong
        event["seq"] = seq
    _write(tmp_path / "run", [(json.dumps(x) + "\n").encode() for x in events])
    with pytest.raises(BadInput, match=rf"events.jsonl:{p + 1}: v2 evaluated before it was proposed"):
        RunDir.open(tmp_path / "run", readonly=True).replay()


def test_a_forged_evaluation_of_other_bytes_is_not_credited(tmp_path: Path) -> None:
    """A well-ordered forged `evaluated` line for a pending version still names the hash of the
    bytes it claims to be of; the version's file was written with another, so it is refused."""
    run = build_run(tmp_path / "run", finish=False)
    pending = run.write_version(NO_OP, round=3)
    other = tmp_path / "cheat.py"
    other.write_text(NO_OP + "# another file\n")
    forged = evaluation(other, 0.001)
    run.record_evaluated(pending.id, forged)
    state = run.replay()
    assert state.versions[pending.id].refused and "other bytes" in state.versions[pending.id].refused
    assert not state.versions[pending.id].correct


# ----------------------------------------------------------------------------- honest hashes


def test_the_proposed_event_records_the_hash_of_the_bytes_written(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    events = [json.loads(x) for x in _lines(tmp_path / "run")]
    for e in (e for e in events if e["type"] == "proposed"):
        data = (tmp_path / "run" / e["path"]).read_bytes()
        assert e["sha256"] == hashlib.sha256(data).hexdigest()


def test_an_edited_winner_never_becomes_best_kernel_and_the_report_says_why(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()  # v3 is the winner (2.0 ms), v1 the runner-up (4.0 ms)
    (tmp_path / "run" / "v3" / "kernel.py").write_text(NO_OP)
    summary = build_report(tmp_path / "run")
    assert summary.best is not None and summary.best.id == "v1"
    shipped = (tmp_path / "run" / "best_kernel.py").read_bytes()
    assert shipped == (tmp_path / "run" / "v1" / "kernel.py").read_bytes()
    assert b"does no work" not in shipped
    assert any("v3/kernel.py: changed after it was written" in r for r in summary.refused)
    row = next(r for r in summary.versions if r.id == "v3")
    assert row.verdict == "refused" and row.median_ms is None
    report = (tmp_path / "run" / "final_report.md").read_text()
    assert "Refused versions" in report and "v3/kernel.py: changed after it was written" in report
    cli = subprocess.run([sys.executable, "-m", "kernelopt", "report", str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=120, cwd=str(ROOT))
    assert cli.returncode == 0 and "refused: v3/kernel.py: changed after it was written" in cli.stdout


def test_a_deleted_winner_is_refused_not_a_crash(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    (tmp_path / "run" / "v3" / "kernel.py").unlink()
    summary = build_report(tmp_path / "run")
    assert summary.best is not None and summary.best.id == "v1"
    assert any("v3/kernel.py: missing" in r for r in summary.refused)


def test_best_kernel_is_written_from_bytes_that_match_the_record(tmp_path: Path, monkeypatch) -> None:
    """The file changes between the replay and the copy: the copy is refused, not shipped, and an
    earlier best_kernel.py does not stay behind passing for the verified one."""
    import kernelopt.report.run_report as rr

    build_run(tmp_path / "run").close()
    build_report(tmp_path / "run")
    assert (tmp_path / "run" / "best_kernel.py").is_file()
    real = rr.verified_bytes

    def swapped(version: Any) -> bytes:
        Path(version.path).write_text(NO_OP)  # the race: rewritten after the replay read it
        return real(version)

    monkeypatch.setattr(rr, "verified_bytes", swapped)
    summary = build_report(tmp_path / "run")
    assert summary.best_kernel_refused and "changed after it was written" in summary.best_kernel_refused
    assert not (tmp_path / "run" / "best_kernel.py").exists()


# ----------------------------------------------------------------------------- the loop, with a fake engine


def _stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, cv=0.0, count=10, warmup_count=1,
                       l2_flush_bytes=0)


class FakeEngine:
    """The Engine's surface the loop uses. A source with `MS = X` is correct at X ms, `suspect` in it
    marks its time not credible, `wrong` fails verification, and the no-op is a correct-looking
    0.001 ms (the engine of a hostile candidate's dreams: it is only ever reached through a file
    edited after its evaluation). `after(index, candidate)` runs after each result (an attack)."""

    def __init__(self, problem: Any, **_: Any) -> None:
        self.problem = problem
        self.devices = ["cpu"]
        self.ready: list[Any] = []
        self.after: Callable[[Candidate], None] | None = None
        self.calls: list[tuple[list[str], bool, bool]] = []

    def __enter__(self) -> "FakeEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def evaluate(self, candidates: Sequence[Candidate], *, verify: bool = True, time: bool = True,
                 on_result: Callable[[int, Evaluation], None] | None = None, **_: Any) -> list[Evaluation]:
        self.calls.append(([Path(c.path).parent.name for c in candidates], verify, time))
        out = []
        for i, cand in enumerate(candidates):
            data = Path(cand.path).read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            source = data.decode()
            ev = Evaluation(problem=self.problem, candidate=cand)
            if sha != cand.sha256:  # what the worker does when the runner loaded other bytes
                ev.failure = Failure(reason="tampered", stage="load", message="other bytes")
            elif "wrong" in source and verify:
                ev.verification = Verification(problem=self.problem, candidate=cand, passed=False, reason="incorrect",
                                               message="max abs err 1", device="cpu", atol=1e-4, rtol=1e-4)
            else:
                m = re.search(r"^MS = ([0-9.]+)$", source, re.MULTILINE)
                ms = float(m.group(1)) if m else 0.001
                if time:
                    ev.timing = _stats(ms)
                if "suspect" in source:
                    ev.suspect = ["faster than the DRAM floor"]
            out.append(ev)
            if on_result is not None:
                on_result(i, ev)
            if self.after is not None:
                self.after(cand)
        return out


class ListOptimizer:
    """Proposes the given sources once, in order, as children of v0."""

    name = "list"

    def __init__(self, sources: list[str]) -> None:
        self.sources = sources

    def propose(self, context: Any) -> list[Any]:
        from kernelopt.models.optimize import Proposal

        if context.round > 1:
            return []
        return [Proposal(source=s, parent="v0", change=f"variant {i}") for i, s in enumerate(self.sources)]


def kernel(ms: float, tag: str = "") -> str:
    # In code, not in comments: the loop drops a proposal that differs from a known one only there.
    return f"MS = {ms}\nTAG = {tag!r}\n\n\ndef kernel_function(x):\n    return x\n"


def _run_loop(tmp_path: Path, sources: list[str], *, after: Callable[[Any, Candidate], None] | None = None,
              shapes: list[ShapeCheck] | None = None, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, FakeEngine]:
    from kernelopt.harness import shapes as shapes_mod
    from kernelopt.models.optimize import RunConfig
    from kernelopt.problem import load_problem

    start = tmp_path / "start.py"
    start.write_text(kernel(10.0))
    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    config = RunConfig(problem=problem.path, overrides={"M": "64", "K": "256"}, kernel=str(start), optimizer="list",
                       rounds=2, beam=2, created_at="2026-01-01T00:00:00+00:00")
    monkeypatch.setattr(shapes_mod, "check_shapes", lambda *a, **k: list(shapes or []))
    rundir = RunDir.create(tmp_path / "run", config)
    engine = FakeEngine(problem)
    loop = loop_mod.Loop(rundir, problem, config, engine=engine, optimizer=ListOptimizer(sources), profile=False)
    if after is not None:
        engine.after = lambda cand: after(loop, cand)
    state = loop.run()
    build_report(rundir)
    rundir.close()
    return state, engine


def test_a_version_edited_after_its_evaluation_is_not_retimed_nor_shipped(tmp_path: Path, monkeypatch) -> None:
    """The issue's attack: a candidate rewrites the fastest version's file to a no-op once it has
    passed. Without the recorded hash the final re-timing times the no-op (0.001 ms) and ships it."""
    edited: list[str] = []

    def attack(loop: Any, cand: Candidate) -> None:
        if Path(cand.path).parent.name == "v2" and not edited:  # v1 has passed and is recorded by now
            (loop.rundir.path / "v1" / "kernel.py").write_text(NO_OP)
            edited.append("v1")

    state, engine = _run_loop(tmp_path, [kernel(2.0), kernel(4.0)], after=attack, monkeypatch=monkeypatch)
    run = tmp_path / "run"
    assert edited == ["v1"]
    assert state.best == "v2"  # the runner-up, verified once more
    assert b"does no work" not in (run / "best_kernel.py").read_bytes()
    assert (run / "best_kernel.py").read_bytes() == (run / "v2" / "kernel.py").read_bytes()
    retimed = [ids for ids, verify, time in engine.calls if not verify and time]
    assert retimed and all("v1" not in ids for ids in retimed)
    assert "v1" not in state.retimed
    assert state.versions["v1"].refused and "changed after it was written" in state.versions["v1"].refused


def test_a_pending_version_edited_before_it_is_sent_is_failed_not_evaluated(tmp_path: Path, monkeypatch) -> None:
    """A candidate of a batch rewrites a later version of the same batch before that one is sent."""
    def attack(loop: Any, cand: Candidate) -> None:
        target = loop.rundir.path / "v2" / "kernel.py"
        if target.exists() and b"MS = 3.0" in target.read_bytes():
            target.write_text(kernel(0.5, "cheat"))

    # The engine loads candidates one by one in the real loop; here v2 is loaded before v1 runs,
    # so the edit lands between the engine's hash and the runner's load: the worker's check.
    state, engine = _run_loop(tmp_path, [kernel(2.0), kernel(3.0)], after=attack, monkeypatch=monkeypatch)
    v2 = state.versions["v2"]
    assert not v2.correct and v2.evaluation is not None and v2.evaluation.failure is not None
    assert v2.evaluation.failure.reason == "tampered"
    assert state.best == "v1"


def test_resume_refuses_a_pending_version_whose_file_changed(tmp_path: Path, monkeypatch) -> None:
    from kernelopt.models.optimize import Proposal, RunConfig
    from kernelopt.problem import load_problem

    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    start = tmp_path / "start.py"
    start.write_text(kernel(10.0))
    config = RunConfig(problem=problem.path, kernel=str(start), optimizer="list", rounds=1, beam=1,
                       created_at="2026-01-01T00:00:00+00:00")
    run = RunDir.create(tmp_path / "run", config)
    run.write_version(kernel(10.0), round=0)
    run.write_version(kernel(1.0), round=1, proposal=Proposal(source=kernel(1.0), parent="v0", change="faster"))
    (tmp_path / "run" / "v1" / "kernel.py").write_text(kernel(0.01, "swapped in while the run was down"))
    engine = FakeEngine(problem)
    loop = loop_mod.Loop(run, problem, config, engine=engine, optimizer=ListOptimizer([]), profile=False,
                         check_shapes=False)
    loop.evaluate(run.pending())
    v1 = run.replay().versions["v1"]
    assert v1.evaluation is not None and v1.evaluation.failure is not None
    assert v1.evaluation.failure.reason == "tampered" and "changed after it was written" in v1.evaluation.failure.message
    assert all("v1" not in ids for ids, _, _ in engine.calls)  # never sent
    run.close()


def test_the_winner_is_verified_once_more_and_a_failure_there_refuses_it(tmp_path: Path, monkeypatch) -> None:
    """The fastest passes in the search, then fails when verified once more (a candidate that
    changes its behaviour on the second look): the next one is the winner."""
    calls = {"n": 0}
    real = FakeEngine.evaluate

    def flaky(self: FakeEngine, candidates: Sequence[Candidate], **kw: Any) -> list[Evaluation]:
        evs = real(self, candidates, **kw)
        if kw.get("verify", True) and not kw.get("time", True):
            calls["n"] += 1
            for ev in evs:
                if Path(ev.candidate.path).parent.name == "v1":
                    ev.verification = Verification(problem=self.problem, candidate=ev.candidate, passed=False,
                                                   reason="incorrect", message="wrong the second time", device="cpu",
                                                   atol=1e-4, rtol=1e-4)
        return evs

    monkeypatch.setattr(FakeEngine, "evaluate", flaky)
    state, engine = _run_loop(tmp_path, [kernel(2.0), kernel(4.0)], monkeypatch=monkeypatch)
    assert calls["n"] == 2 and state.best == "v2"
    assert state.verified["v1"][0].passed is False and state.verified["v2"][0].passed is True
    assert state.versions["v1"].refused and "final re-verification" in state.versions["v1"].refused
    assert (tmp_path / "run" / "best_kernel.py").read_bytes() == (tmp_path / "run" / "v2" / "kernel.py").read_bytes()


def test_a_winner_failing_at_another_shape_is_reported_next_to_the_speedup(tmp_path: Path, monkeypatch) -> None:
    bad = [ShapeCheck(label="ragged", overrides={"M": 63, "K": 255}, passed=False, reason="incorrect",
                      message="max abs err 3.1 > atol")]
    state, _ = _run_loop(tmp_path, [kernel(2.0)], shapes=bad, monkeypatch=monkeypatch)
    assert state.best == "v1"  # still the fastest correct kernel at its own shape
    summary = build_report(tmp_path / "run")
    assert summary.shapes_hold is False and "FAILS at ragged (M=63, K=255): incorrect" in (summary.shapes or "")
    assert "FAILS at ragged (M=63, K=255)" in (tmp_path / "run" / "final_report.md").read_text()
    from kernelopt.cli.optimize import render_summary

    assert "FAILS at ragged" in render_summary(summary)


# ----------------------------------------------------------------------------- the promotion filter


def test_a_suspect_time_is_never_promoted_retimed_or_the_winner(tmp_path: Path, monkeypatch) -> None:
    """v1 is the fastest by far, but its time is suspect (below the DRAM floor): it must not enter
    the beam, the re-timing or best_kernel.py. Dropping the check in Loop.correct fails this."""
    state, engine = _run_loop(tmp_path, [kernel(0.5, "suspect"), kernel(4.0)], monkeypatch=monkeypatch)
    assert state.versions["v1"].evaluation is not None and state.versions["v1"].evaluation.suspect
    assert "v1" not in state.beam and state.best == "v2"
    assert all("v1" not in ids for ids, verify, time in engine.calls if not verify)
    promoted = [json.loads(x)["beam"] for x in _lines(tmp_path / "run") if json.loads(x)["type"] == "promoted"]
    assert promoted and all("v1" not in beam for beam in promoted)


def test_correct_orders_credible_times_and_leaves_out_suspect_failed_and_refused(tmp_path: Path) -> None:
    from kernelopt.models.optimize import RunState, Version

    def version(vid: str, ms: float | None, *, suspect: bool = False, failed: bool = False,
                refused: str | None = None) -> Version:
        cand = Candidate(path=f"{vid}/kernel.py", name=vid, backend="triton", entry="kernel_function", sha256="0")
        ev = Evaluation(problem=problem, candidate=cand, timing=_stats(ms) if ms else None,
                        suspect=["below the floor"] if suspect else [],
                        failure=Failure(reason="incorrect", message="x") if failed else None)
        return Version(id=vid, round=1, path=f"{vid}/kernel.py", evaluation=ev, refused=refused)

    from kernelopt.models.harness import Problem

    problem = Problem(path="p.py", name="p")
    loop = loop_mod.Loop.__new__(loop_mod.Loop)
    loop.state = RunState(versions={v.id: v for v in [
        version("v0", 10.0), version("v1", 0.1, suspect=True), version("v2", 0.2, failed=True),
        version("v3", 0.3, refused="v3/kernel.py: changed"), version("v4", 5.0), version("v5", 5.0)]})
    assert [v.id for v in loop.correct()] == ["v4", "v5", "v0"]



# ----------------------------------------------------------------------------- the engine side of the hash


@pytest.mark.slow
def test_the_record_keeps_the_engines_hash_not_the_candidates_own(tmp_path: Path) -> None:
    """A candidate that rewrites its module's `__kernelopt_sha256__` (the runner's report of what it
    loaded), and one whose file changes after the engine hashed it, both fail as tampered; neither
    evaluation carries a hash other than the engine's."""
    from kernelopt.harness.evaluate import evaluate
    from kernelopt.problem import load_candidate, load_problem

    softmax = ROOT / "examples" / "softmax"
    good = (softmax / "kernel.py").read_text()
    forger = tmp_path / "forger.py"
    forger.write_text(good + "\n__kernelopt_sha256__ = '" + "0" * 64 + "'\n")
    swapped = tmp_path / "swapped.py"
    swapped.write_text(good)
    plain = tmp_path / "plain.py"
    plain.write_text(good)
    cands = [load_candidate(p) for p in (forger, swapped, plain)]
    swapped.write_text(good + "\nEXTRA = 1  # rewritten after the engine hashed the file\n")
    problem = load_problem(softmax / "problem.py", {"ROWS": "16", "COLS": "100"})
    evs = evaluate(problem, cands, time=False, trials=1)
    for cand, ev in zip(cands, evs):
        assert ev.candidate.sha256 == cand.sha256
    assert evs[0].failure is not None and evs[0].failure.reason == "tampered"
    assert "rewrote its hash" in evs[0].failure.message
    assert evs[1].failure is not None and evs[1].failure.reason == "tampered"
    assert "changed after the engine hashed it" in evs[1].failure.message and "not run" in evs[1].failure.message
    assert evs[2].passed


def test_the_runner_runs_the_checked_text_not_the_file_as_it_is_now(tmp_path: Path) -> None:
    """The verifier reads the file, checks it against the engine's hash and sends the text: a file
    rewritten after that check (between the verifier's read and the runner's import) does not run."""
    from kernelopt.harness.worker import checked_source
    from kernelopt.problem import import_candidate, load_candidate

    path = tmp_path / "k.py"
    path.write_text("WHO = 'checked'\n\n\ndef kernel_function(x):\n    return x\n")
    cand = load_candidate(path)
    text, refused = checked_source(cand)
    assert refused is None and text is not None
    path.write_text("WHO = 'swapped in'\n\n\ndef kernel_function(x):\n    return x\n")
    module = import_candidate(cand, "kernelopt_test_checked_text", source=text)
    assert module.WHO == "checked" and module.__kernelopt_sha256__ == cand.sha256
    again, why = checked_source(cand)
    assert again is None and why is not None and "changed after the engine hashed it" in why


# ----------------------------------------------------------------------------- keys off the command line

KEY = "sk-test-4f1c9a7e-must-never-be-written"


def _llm_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_args: list[str], stdin: str | None = None) -> Any:
    """`kernelopt optimize --optimizer llm` in process, the engine faked, the model a loopback server."""
    from click.testing import CliRunner
    from llm_fakes import LoopbackServer, Reply, answer

    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.cli import main

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: FakeEngine(problem))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    start = tmp_path / "start.py"
    start.write_text(kernel(10.0))
    replies = [Reply(answer(kernel(2.0), hypothesis="fewer loads")), Reply(f"lesson about {KEY}")]
    with LoopbackServer("openai", replies * 3) as srv:
        result = CliRunner().invoke(main, [
            "optimize", str(MATVEC / "problem.py"), "--kernel", str(start), "--set", "M=64", "--set", "K=256",
            "-o", str(tmp_path / "run"), "--optimizer", "llm", "--provider", "openai", "--model", "m",
            "--base-url", srv.url, "--rounds", "1", "--beam", "1", "--proposals", "1", "--no-profile",
            "--no-experience", "--baselines", "none", *key_args], input=stdin, catch_exceptions=False)
    return result, srv


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_a_key_from_a_file_or_stdin_is_used_and_never_written(tmp_path: Path, monkeypatch, how: str) -> None:
    keyfile = tmp_path / "key.txt"
    keyfile.write_text(KEY + "\n")
    args = ["--api-key-file", str(keyfile)] if how == "file" else ["--api-key", "-"]
    result, srv = _llm_run(tmp_path, monkeypatch, args, stdin=KEY + "\n" if how == "stdin" else None)
    assert result.exit_code == 0, result.output
    assert srv.requests and srv.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # it was used...
    assert "warning: --api-key" not in result.stderr  # not on the command line: nothing to warn about
    leaked = [p for p in (tmp_path / "run").rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []  # ...and no file of the run holds it (run.json, events, reports, usage log)
    assert KEY not in result.output


def test_a_key_on_the_command_line_is_warned_about(tmp_path: Path, monkeypatch) -> None:
    result, srv = _llm_run(tmp_path, monkeypatch, ["--api-key", KEY])
    assert result.exit_code == 0, result.output
    assert srv.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: --api-key")]
    assert len(warnings) == 1 and "--api-key-file" in warnings[0] and KEY not in warnings[0]
    assert [p for p in (tmp_path / "run").rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()] == []


def test_a_missing_or_empty_key_file_is_one_line_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kernelopt.cli import main

    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path, message in ((tmp_path / "nope", "no such API key file"), (empty, "empty; expected the API key")):
        result = CliRunner().invoke(main, ["optimize", str(MATVEC / "problem.py"), "--kernel",
                                           str(MATVEC / "kernel.py"), "--optimizer", "llm", "--api-key-file", str(path)])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


# ----------------------------------------------------------------------------- other shapes

TAIL_BUG = '''import torch


def kernel_function(x):
    y = torch.softmax(x, dim=-1)
    if x.shape[-1] % 32:  # a tail the kernel gets wrong: right only at multiples of its block
        y[:, -1] = 0.0
    return y
'''


def test_other_shapes_are_small_then_ragged_from_the_problems_own_constants() -> None:
    from kernelopt.harness.shapes import other_shapes
    from kernelopt.problem import load_problem

    suite = ROOT / "benchmarks" / "suite" / "softmax" / "problem.py"
    full = load_problem(suite)
    shapes = other_shapes(full)
    assert shapes[0] == ("SMALL", {"ROWS": "3", "COLS": "1100"})
    rows, cols = full.constants["ROWS"], full.constants["COLS"]
    assert shapes[1][0] == "ragged" and shapes[1][1] == {"ROWS": rows - 1 if rows % 2 == 0 else rows + 2,
                                                          "COLS": cols - 1 if cols % 2 == 0 else cols + 2}
    small = load_problem(suite, {"ROWS": "3", "COLS": "1100"})
    assert other_shapes(small) == [("ragged", {"ROWS": 5, "COLS": 1099})]  # at SMALL already: only ragged
    # No SMALL: the integer constants of 8 or more are the sizes.
    example = load_problem(ROOT / "examples" / "softmax" / "problem.py", {"ROWS": "16", "COLS": "128"})
    assert other_shapes(example) == [("ragged", {"ROWS": 15, "COLS": 127})]


def test_the_other_shapes_engines_run_at_the_same_time_and_report_in_order(tmp_path: Path, monkeypatch) -> None:
    """Each shape's engine is mostly its own start and times nothing: they overlap (the finish's
    largest one-off cost, #23), and the checks still come back SMALL first, then ragged."""
    import threading

    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.harness.shapes import check_shapes
    from kernelopt.problem import load_problem

    problem = load_problem(ROOT / "benchmarks" / "suite" / "softmax" / "problem.py")
    both = threading.Barrier(2, timeout=10)  # broken (an error) unless both engines are running at once
    seen: list[dict[str, Any]] = []

    def fake_evaluate(at: Any, candidates: Any, **options: Any) -> list[Evaluation]:
        both.wait()
        small = at.constants["ROWS"] == 3
        if small:
            threading.Event().wait(0.2)  # SMALL answers last
        seen.append(dict(at.constants))
        ev = evaluation(tmp_path / "k.py", None, incorrect=small)
        return [ev.model_copy(update={"problem": at})]

    monkeypatch.setattr(evaluate_mod, "evaluate", fake_evaluate)
    checks = check_shapes(problem, evaluation(tmp_path / "k.py", 1.0).candidate, devices=["cpu"])
    assert [c.label for c in checks] == ["SMALL", "ragged"]
    assert [c.passed for c in checks] == [False, True] and checks[0].reason == "incorrect"
    assert seen[0]["ROWS"] != 3 and seen[1]["ROWS"] == 3  # ragged answered first


@pytest.mark.slow
def test_check_shapes_auto_fails_a_kernel_right_only_at_the_given_shape(tmp_path: Path) -> None:
    kernel_file = tmp_path / "tail_bug.py"
    kernel_file.write_text(TAIL_BUG)
    base = [sys.executable, "-m", "kernelopt", "check", str(ROOT / "examples" / "softmax" / "problem.py"), "--kernel",
            str(kernel_file), "--set", "ROWS=16", "--set", "COLS=128", "--trials", "1"]
    given = subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert given.returncode == 0, given.stderr[-2000:]  # right at the shape it was given
    auto = subprocess.run(base + ["--shapes", "auto", "--json"], capture_output=True, text=True, timeout=600,
                          cwd=str(ROOT))
    assert auto.returncode == 1, auto.stderr[-2000:]
    result = json.loads(auto.stdout)
    assert result["passed"] is False and result["reason"] == "incorrect"
    assert result["shapes"][0]["label"] == "ragged" and result["shapes"][0]["overrides"] == {"ROWS": 15, "COLS": 127}
    assert "FAILS at ragged (ROWS=15, COLS=127)" in result["message"]
    human = subprocess.run(base + ["--shapes", "auto"], capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert human.returncode == 1 and "shapes    FAILS at ragged (ROWS=15, COLS=127): incorrect" in human.stdout


# ----------------------------------------------------------------------------- waits that end


def test_profiling_gives_up_on_a_gpu_lock_held_by_another_process(tmp_path: Path, monkeypatch) -> None:
    """Any process of the user can hold the per-GPU lock (a stopped worker mid-timing, a candidate's
    daemon): the loop's profiling waits a bounded time, then goes on without the profile (a timeout
    failure, as data)."""
    import fcntl
    import tempfile
    import time as time_mod

    from kernelopt.harness.timing import gpu_lock
    from kernelopt.problem import load_candidate, load_problem

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with gpu_lock("cuda:7", timeout_s=1.0):
        pass  # free: taken at once
    held = next(tmp_path.glob("kernelopt-gpu-*.lock"))
    fd = os.open(held, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: the lock is held against gpu_lock's own
    try:
        start = time_mod.monotonic()
        with pytest.raises(TimeoutError, match="GPU lock"):
            with gpu_lock("cuda:7", what="profiling", timeout_s=0.3):
                pass
        assert time_mod.monotonic() - start < 5.0
        problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
        result, diagnosis, summary = loop_mod.profile_version(problem, load_candidate(MATVEC / "kernel.py"),
                                                              tmp_path / "p", "cuda:7", lock_timeout_s=0.3)
        assert result.metrics is None and diagnosis is None and summary is None
        assert result.failure is not None and result.failure.reason == "timeout" and "GPU lock" in result.failure.message
    finally:
        os.close(fd)


def test_report_of_an_edited_log_is_one_line_exit_2(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    lines = _lines(tmp_path / "run")
    i = _line_of(lines, "evaluated", "v3")
    _write(tmp_path / "run", lines[: i + 1] + [lines[i]] + lines[i + 1:])
    cli = subprocess.run([sys.executable, "-m", "kernelopt", "report", str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=120, cwd=str(ROOT))
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert re.search(rf"events.jsonl:{i + 2}: seq \d+ after \d+ \(repeats a number", cli.stderr)
    assert len(cli.stderr.strip().splitlines()) == 1


def test_the_winner_is_checked_at_other_shapes_under_the_runs_isolation(tmp_path: Path, monkeypatch) -> None:
    """The last code a run executes, the winner at the problem's other shapes, runs in engines of
    its own: a sandboxed run's winner must be sandboxed there too, not run in worker mode."""
    from kernelopt.harness import shapes as shapes_mod
    from kernelopt.models.optimize import RunConfig
    from kernelopt.problem import load_problem

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(shapes_mod, "check_shapes", lambda *a, **k: seen.append(k) or [])
    start = tmp_path / "start.py"
    start.write_text(kernel(10.0))
    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    config = RunConfig(problem=problem.path, overrides={"M": "64", "K": "256"}, kernel=str(start), optimizer="list",
                       rounds=1, beam=2, created_at="2026-01-01T00:00:00+00:00")
    rundir = RunDir.create(tmp_path / "run", config)
    engine = FakeEngine(problem)
    engine.isolate = "sandbox"
    loop_mod.Loop(rundir, problem, config, engine=engine, optimizer=ListOptimizer([kernel(2.0)]), profile=False).run()
    rundir.close()
    assert seen and all(k.get("isolate") == "sandbox" for k in seen)


def test_check_shapes_runs_each_shape_under_the_isolation_given(monkeypatch) -> None:
    from kernelopt.harness import evaluate as evaluate_mod
    from kernelopt.harness import shapes as shapes_mod
    from kernelopt.problem import load_candidate, load_problem

    from kernelopt.errors import BadInput

    got: list[dict[str, Any]] = []

    def refuse(problem: Any, candidates: Any, **options: Any) -> list[Any]:
        got.append(options)
        raise BadInput("not at this shape")  # reported as unchecked; enough to see the options

    monkeypatch.setattr(evaluate_mod, "evaluate", refuse)
    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    checks = shapes_mod.check_shapes(problem, load_candidate(MATVEC / "kernel.py"), isolate="sandbox", devices=["cpu"])
    assert checks and got and all(o["isolate"] == "sandbox" for o in got)


def test_an_agent_runs_engine_isolates_as_iterate_does(tmp_path: Path, monkeypatch) -> None:
    """`kernelopt optimize --resume` of an agent-mode run evaluates what `kernelopt iterate` left
    pending (agent-written code): under the isolation iterate uses ('auto': the sandbox where there
    is one), not in worker mode."""
    from kernelopt.harness import evaluate as evaluate_mod
    from kernelopt.models.optimize import RunConfig
    from kernelopt.problem import load_problem

    seen: list[Any] = []

    class Stop(Exception):
        pass

    def engine(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("isolate"))
        raise Stop()

    monkeypatch.setattr(evaluate_mod, "Engine", engine)
    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    config = RunConfig(problem=problem.path, overrides={"M": "64", "K": "256"}, kernel=str(MATVEC / "kernel.py"),
                       optimizer="agent", rounds=1, beam=1, experience=False,
                       created_at="2026-01-01T00:00:00+00:00")
    RunDir.create(tmp_path / "run", config).close()
    with pytest.raises(Stop):
        loop_mod.resume(tmp_path / "run")
    assert seen == ["auto"]


def test_a_sandboxed_run_profiles_its_candidates_in_the_sandbox(tmp_path: Path, monkeypatch) -> None:
    """Profiling runs the candidate's code (ncu, or the static report): under the run's isolation."""
    from kernelopt.harness import isolate as isolate_mod
    from kernelopt.harness import shapes as shapes_mod
    from kernelopt.models.optimize import RunConfig
    from kernelopt.models.metrics import ProfileResult
    from kernelopt.problem import load_problem

    seen: list[tuple[str, str]] = []

    def fake_profile(problem: Any, cand: Any, out_dir: Any, device: str, **_: Any) -> tuple[Any, Any, Any]:
        seen.append(isolate_mod._CHILD_ISOLATION.get())
        return ProfileResult(profiler="static"), None, None

    monkeypatch.setattr(loop_mod, "profile_version", fake_profile)
    monkeypatch.setattr(shapes_mod, "check_shapes", lambda *a, **k: [])
    start = tmp_path / "start.py"
    start.write_text(kernel(10.0))
    problem = load_problem(MATVEC / "problem.py", {"M": "64", "K": "256"})
    config = RunConfig(problem=problem.path, overrides={"M": "64", "K": "256"}, kernel=str(start), optimizer="list",
                       rounds=1, beam=2, created_at="2026-01-01T00:00:00+00:00")
    rundir = RunDir.create(tmp_path / "run", config)
    engine = FakeEngine(problem)
    engine.isolate = "sandbox"
    loop_mod.Loop(rundir, problem, config, engine=engine, optimizer=ListOptimizer([kernel(2.0)]), profile=True).run()
    rundir.close()
    assert seen and all(mode == "sandbox" for mode, _ in seen)
    assert isolate_mod._CHILD_ISOLATION.get()[0] == "worker"  # only for the profile stage
