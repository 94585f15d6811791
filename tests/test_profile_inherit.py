"""A beam member that is a knob variant of a profiled ancestor, within INHERIT_PROFILE_MARGIN of its
time, takes that ancestor's metrics and diagnosis instead of an ncu run of its own (about 10 s of a
2-minute budget on an H100): Loop.profile_donor, Loop.inherit_profile."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from test_probation import _loop

from kernelopt.models.diagnosis import Diagnosis
from kernelopt.models.metrics import Metrics
from kernelopt.optimize import loop as loop_mod

METRICS = Metrics(source="ncu", combined={"dram_throughput_pct": 91.0})
DIAGNOSIS = Diagnosis(primary=None, rules_pack="test")


def _profiled(loop: Any, *vids: str) -> Any:
    for vid in vids:
        loop.state.versions[vid].metrics = METRICS
        loop.state.versions[vid].diagnosis = DIAGNOSIS
        loop.state.versions[vid].profiler = "ncu"
    loop.optimizer = SimpleNamespace()
    return loop


ROWS = [("v0", 1.727, None, "rows"), ("v1", 1.7269, "v0", "rows"), ("v2", 1.321, "v0", "rows"),
        ("v3", 1.70, "v0", "flat"), ("v4", 1.74, "v1", "rows")]


def test_a_knob_variant_within_the_margin_inherits_its_ancestors_profile() -> None:
    loop = _profiled(_loop(ROWS), "v0")
    assert loop.profile_donor("v1").id == "v0"
    assert loop.profile_donor("v4").id == "v0"  # through v1, which was never profiled itself


def test_a_faster_variant_or_another_structure_is_profiled_anew() -> None:
    loop = _profiled(_loop(ROWS), "v0")
    assert loop.profile_donor("v2") is None  # 24 % faster: the bottleneck may have moved
    assert loop.profile_donor("v3") is None  # a transform's rewrite: another kernel
    assert loop.profile_donor("v0") is None  # no ancestor


def test_an_inherited_profile_is_not_a_donor_and_agents_get_their_own() -> None:
    loop = _profiled(_loop(ROWS), "v0")
    loop.state.versions["v0"].profiler = loop_mod.INHERITED_PREFIX + "v9"
    assert loop.profile_donor("v1") is None
    loop = _profiled(_loop(ROWS), "v0")
    loop.optimizer = SimpleNamespace(interactive=True)
    assert loop.profile_donor("v1") is None


def test_the_inherited_profile_is_recorded_and_replayed_with_its_donor(tmp_path: Path) -> None:
    from run_fixtures import build_run

    rundir = build_run(tmp_path / "run")  # v0 profiled; v1 a child of v0
    loop = loop_mod.Loop.__new__(loop_mod.Loop)
    loop.state, loop.rundir, loop.refresh, loop.say = rundir.replay(), rundir, (lambda: None), (lambda _msg: None)
    donor = loop.state.versions["v0"]
    loop.inherit_profile("v1", donor)
    v1 = rundir.replay().versions["v1"]
    assert v1.profiler == "inherited:v0" and loop_mod.inherited(v1)
    assert v1.metrics == donor.metrics and v1.diagnosis == donor.diagnosis and v1.profile_failure is None
