"""benchmarks/knob_outcomes.py: what one-knob moves did, by the parent's diagnosis, from run folders'
events (the evidence a pack's knob hints are ordered by)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _run(folder: Path, device: str, started: str) -> None:
    def evaluated(vid: str, ms: float) -> dict:
        return {"type": "evaluated", "version": vid, "evaluation": {"device": device, "timing": {"median_ms": ms}}}

    events = [
        {"type": "run_started", "t": started},
        {"type": "proposed", "version": "v0", "proposal": None},
        evaluated("v0", 3.0),
        {"type": "profiled", "version": "v0", "diagnosis": {"primary": {"category": "occupancy",
                                                                      "subcause": "register_limited"}}},
        {"type": "proposed", "version": "v1", "proposal": {"parent": "v0", "change": "num_warps 4 -> 16"}},
        evaluated("v1", 2.0),
        # v2's nearest profiled ancestor is v0, through v1 (not profiled)
        {"type": "proposed", "version": "v2", "proposal": {"parent": "v1", "change": "k.num_warps 16 -> 32"}},
        evaluated("v2", 4.0),
        {"type": "proposed", "version": "v3", "proposal": {"parent": "v0", "change": "num_warps 4 -> 8; BLOCK 1 -> 2"}},
        evaluated("v3", 1.0),
        {"type": "proposed", "version": "v4", "proposal": {"parent": "v0", "change": "num_warps 4 -> 2"}},
        {"type": "evaluated", "version": "v4", "evaluation": {"device": device, "timing": None,
                                                              "failure": {"reason": "incorrect"}}},
    ]
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(json.dumps({"seq": n, **e}) + "\n" for n, e in enumerate(events)))


def test_moves_are_grouped_by_the_nearest_diagnosis_once_per_run_on_gpu_times_only(tmp_path: Path) -> None:
    ko = load_script(ROOT / "benchmarks" / "knob_outcomes.py")
    _run(tmp_path / "a" / "runs" / "p", "cuda:0 (NVIDIA H100)", "2026-11-27T01:00:00")
    _run(tmp_path / "b" / "runs" / "p", "cuda:0 (NVIDIA H100)", "2026-11-27T01:00:00")  # a copy: counted once
    _run(tmp_path / "c" / "runs" / "p", "cpu (Triton interpreter)", "2026-11-27T02:00:00")  # no GPU times
    groups = ko.outcomes(tmp_path, "num_warps")
    assert groups == {("register_limited", "4", "16"): [1.5], ("register_limited", "16", "32"): [0.5]}
    table = ko.render(groups, "num_warps", tmp_path)
    assert "| register_limited | 4 -> 16 | 1 | 1.500 | 1 |" in table
    assert "| register_limited | 16 -> 32 | 1 | 0.500 | 0 |" in table
