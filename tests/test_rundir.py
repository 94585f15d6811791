"""The optimize run directory: event log, crash safety, locking, replay, pending versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_fixtures import SOURCE, build_run, config, diagnosis, evaluation, metrics, proposal

from kernelopt.errors import BadInput
from kernelopt.rundir import RunDir, atomic_write, read_events


def test_events_are_numbered_lines_and_run_json_holds_the_config(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run")
    raw = (tmp_path / "run" / "events.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    events = [json.loads(line) for line in raw.splitlines()]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert all({"seq", "t", "type"} <= set(e) for e in events)
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved == run.config.model_dump(mode="json")


def test_replay_equals_the_state_built_incrementally(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", config())
    expected = {}
    run.record_round_started(0)
    v0 = run.write_version(SOURCE.format(block=64), round=0)
    ev0 = evaluation(Path(v0.path), 8.0)
    run.record_evaluated("v0", ev0)
    expected["v0"] = v0.model_copy(update={"evaluation": ev0})
    run.record_round_started(1)
    v1 = run.write_version(SOURCE.format(block=256), round=1, proposal=proposal(256, "v0"))
    ev1 = evaluation(Path(v1.path), 4.0)
    run.record_evaluated("v1", ev1)
    m, d = metrics(), diagnosis("dram", "near peak")
    run.record_profiled("v1", metrics=m, diagnosis=d)
    expected["v1"] = v1.model_copy(update={"evaluation": ev1, "metrics": m, "diagnosis": d})
    run.record_promoted(["v1", "v0"])

    state = run.replay()
    assert state.versions == expected
    assert state.versions["v1"].proposal is not None
    assert state.versions["v1"].proposal.source == SOURCE.format(block=256)  # read back from kernel.py
    assert state.beam == ["v1", "v0"] and state.best == "v1"
    assert state.round == 1 and state.evaluations_done == 2 and not state.finished
    # A second reader sees the same state.
    assert RunDir.open(tmp_path / "run", readonly=True).replay() == state


def test_finished_run_state(tmp_path: Path) -> None:
    state = build_run(tmp_path / "run").replay()
    assert state.finished and state.stop_reason == "rounds" and state.best == "v3"
    assert state.evaluations_done == 6 and state.rounds_finished == 3
    assert set(state.baselines) == {"eager", "compile"}
    assert state.round_best == {0: "v0", 1: "v1", 2: "v3"}
    assert state.lessons == ["BLOCK_SIZE above 4096 does not compile"]


def test_version_files_are_written(tmp_path: Path) -> None:
    build_run(tmp_path / "run")
    v0, v1 = tmp_path / "run" / "v0", tmp_path / "run" / "v1"
    assert (v0 / "kernel.py").read_text() == SOURCE.format(block=64)
    assert "starting kernel" in (v0 / "hypothesis.txt").read_text()
    hyp = (v1 / "hypothesis.txt").read_text()
    assert "change: BLOCK_SIZE -> 256" in hyp and "parent: v0" in hyp and "More programs fill the SMs." in hyp
    assert json.loads((v0 / "evaluation.json").read_text())["timing"]["median_ms"] == 8.0
    assert json.loads((v0 / "diagnosis.json").read_text())["primary"]["category"] == "launch"
    assert json.loads((v0 / "metrics.json").read_text())["source"] == "static"
    assert (v0 / "ncu_summary.md").read_text() == "# static only\n"
    assert not (v1 / "metrics.json").exists()  # v1 was never profiled
    assert not list((tmp_path / "run").rglob("*.tmp"))  # no temporary file left behind


def test_kernel_is_on_disk_before_its_proposed_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunDir.create(tmp_path / "run", config())
    seen: list[bool] = []
    original = RunDir.append

    def spy(self: RunDir, kind, **payload):  # type: ignore[no-untyped-def]
        if kind == "proposed":
            seen.append((self.path / payload["path"]).read_text() == SOURCE.format(block=32))
        return original(self, kind, **payload)

    monkeypatch.setattr(RunDir, "append", spy)
    run.write_version(SOURCE.format(block=32), round=0)
    assert seen == [True]


def test_pending_lists_proposed_but_unevaluated_versions(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", config())
    v0 = run.write_version(SOURCE.format(block=64), round=0)
    run.record_evaluated("v0", evaluation(Path(v0.path), 8.0))
    run.write_version(SOURCE.format(block=128), round=1, proposal=proposal(128, "v0"))
    v2 = run.write_version(SOURCE.format(block=256), round=1, proposal=proposal(256, "v0"))
    run.write_version(SOURCE.format(block=512), round=1, proposal=proposal(512, "v0"))
    run.record_evaluated("v2", evaluation(Path(v2.path), 4.0))
    assert run.pending() == ["v1", "v3"]
    assert run.next_version_id() == "v4"
    run.close()
    assert RunDir.open(tmp_path / "run").pending() == ["v1", "v3"]


def test_torn_last_line_is_ignored_then_cut_on_next_append(tmp_path: Path) -> None:
    run = build_run(tmp_path / "run", finish=False)
    run.close()
    events = tmp_path / "run" / "events.jsonl"
    intact = events.read_bytes()
    before = run.replay()
    with open(events, "ab") as fh:  # a kill in the middle of a write
        fh.write(b'{"seq":99,"t":"2026-01-01T00:00:00","type":"evalu')
    assert len(read_events(events)) == len(intact.splitlines())
    assert RunDir.open(tmp_path / "run", readonly=True).replay() == before

    resumed = RunDir.open(tmp_path / "run")
    resumed.record_resumed()
    raw = events.read_bytes()
    assert raw.startswith(intact)  # nothing before the torn line was touched
    tail = raw[len(intact):]
    assert tail.count(b"\n") == 1 and json.loads(tail)["type"] == "resumed"
    assert json.loads(tail)["seq"] == json.loads(intact.splitlines()[-1])["seq"] + 1
    assert resumed.replay().resumes == 1


def test_kill_mid_run_truncating_the_log_mid_line(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    events = tmp_path / "run" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    # Cut in the middle of the evaluated event of v4: v4 and v5 have not been evaluated.
    cut = next(i for i, line in enumerate(lines) if b'"evaluated","version":"v4"' in line)
    events.write_bytes(b"".join(lines[:cut]) + lines[cut][: len(lines[cut]) // 2])

    run = RunDir.open(tmp_path / "run")
    assert run.pending() == ["v4", "v5"]
    state = run.replay()
    assert state.versions["v3"].evaluation is not None and state.versions["v4"].evaluation is None
    assert not state.finished
    # The resumed loop evaluates exactly the pending versions.
    for vid in run.pending():
        run.record_evaluated(vid, evaluation(run.kernel_path(vid), 3.0))
    assert run.pending() == []
    after = run.replay()
    assert after.evaluations_done == state.evaluations_done + 2
    assert all(json.loads(line) for line in events.read_bytes().splitlines())


def test_damaged_line_in_the_middle_is_reported(tmp_path: Path) -> None:
    build_run(tmp_path / "run").close()
    events = tmp_path / "run" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    lines[3] = b"not json\n"
    events.write_bytes(b"".join(lines))
    with pytest.raises(BadInput, match=r"events.jsonl:4: not a JSON event"):
        RunDir.open(tmp_path / "run", readonly=True).replay()


def test_second_writer_is_refused_in_process_and_across_processes(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", config())
    with pytest.raises(BadInput, match=rf"run directory is in use by pid {os.getpid()}$"):
        RunDir.open(tmp_path / "run")
    code = (
        "import sys\nfrom kernelopt.errors import BadInput\nfrom kernelopt.rundir import RunDir\n"
        "try:\n    RunDir.open(sys.argv[1])\nexcept BadInput as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out.endswith(f"run directory is in use by pid {os.getpid()}")
    # Readers need no lock; they cannot append.
    reader = RunDir.open(tmp_path / "run", readonly=True)
    with pytest.raises(BadInput, match="read-only"):
        reader.record_lesson("x")
    run.close()
    RunDir.open(tmp_path / "run").record_lesson("after the first writer closed")


def test_appends_from_threads_keep_seq_contiguous(tmp_path: Path) -> None:
    import threading

    run = RunDir.create(tmp_path / "run", config())
    threads = [threading.Thread(target=lambda i=i: [run.record_lesson(f"t{i}-{k}") for k in range(20)])
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = run.events()
    assert [e["seq"] for e in events] == list(range(81))
    assert len(run.replay().lessons) == 80
    run.close()
    with pytest.raises(BadInput, match="closed"):
        run.record_lesson("after close")


def test_create_and_open_refuse_what_is_not_theirs(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(BadInput, match="not empty"):
        RunDir.create(busy, config())
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    with pytest.raises(BadInput, match=r"not a run directory"):
        RunDir.open(busy)
    with pytest.raises(BadInput, match=r"missing: no such directory"):
        RunDir.open(tmp_path / "missing")
    build_run(tmp_path / "run").close()
    with pytest.raises(BadInput, match="already a run directory"):
        RunDir.create(tmp_path / "run", config())
    empty = tmp_path / "empty"
    empty.mkdir()
    RunDir.create(empty, config()).close()
    assert (empty / "events.jsonl").is_file()


def test_run_json_never_carries_credentials(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"optimizer_options.api_key"):
        RunDir.create(tmp_path / "run", config(optimizer_options={"model": "m", "api_key": "sk-test"}))
    assert not (tmp_path / "run" / "run.json").exists()


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic_write(target, "old")
    atomic_write(target, b"new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_run_json_gets_the_device_and_software_once_the_engine_knows_them(tmp_path: Path) -> None:
    """Provenance: run.json's device and env are filled (were empty in every committed run), once."""
    from kernelopt.harness.envinfo import software_summary

    run = RunDir.create(tmp_path / "run", config().model_copy(update={"device": None, "env": {}}))
    assert run.config.device is None and run.config.env == {}
    env = software_summary()
    assert env["python"] and "torch" in env and "triton" in env
    run.record_environment("cuda:0 (NVIDIA H100 80GB HBM3)", env)
    run.record_environment("cuda:1 (another one)", {"python": "0"})  # a resumed run keeps the first
    run.close()
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored["device"] == "cuda:0 (NVIDIA H100 80GB HBM3)" and stored["env"] == env
    assert RunDir.open(tmp_path / "run", readonly=True).config.device == stored["device"]


def test_a_run_that_never_evaluated_anything_starts_again_in_place(tmp_path: Path) -> None:
    """Issue 20: a usage error found after the directory was made left run.json and a lone
    `run_started`; the corrected command was refused as 'already a run directory'."""
    dead = RunDir.create(tmp_path / "run", config(rounds=1))
    dead.write_version(SOURCE.format(block=64), round=0)  # proposed, never evaluated
    dead.close()
    again = RunDir.create(tmp_path / "run", config(rounds=5))
    assert [e["type"] for e in again.events()] == ["run_started"]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["rounds"] == 5
    assert not (tmp_path / "run" / "v0").exists()
    # ... but not while another process holds it (it may be evaluating its v0 right now).
    with pytest.raises(BadInput, match="in use by pid"):
        RunDir.create(tmp_path / "run", config())
    again.close()
