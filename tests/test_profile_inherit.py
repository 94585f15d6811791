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
    assert v1.profiler == "inherited:v0" and v1.profile_of == "v0"
    assert v1.metrics == donor.metrics and v1.diagnosis == donor.diagnosis and v1.profile_failure is None


def test_profile_beam_takes_the_donors_profile_and_profiles_only_the_rest(tmp_path: Path) -> None:
    """The beam's unprofiled members: a knob variant within the margin inherits (no ncu run), a faster
    one is profiled; only real profiles count in profile_cost_s' mean."""
    from run_fixtures import build_run

    rundir = build_run(tmp_path / "run", finish=False)  # v0 8 ms profiled; v1 4 ms child of v0; v3 2 ms child of v1
    v6 = rundir.write_version("import triton\n\nBLOCK_SIZE = 2048  # the knob\n", round=3,
                              proposal=rundir.replay().versions["v3"].proposal.model_copy(update={"parent": "v3"}))
    from run_fixtures import evaluation

    rundir.record_evaluated("v6", evaluation(Path(v6.path), 2.05))
    loop = loop_mod.Loop.__new__(loop_mod.Loop)
    loop.state, loop.rundir, loop.say = rundir.replay(), rundir, (lambda _msg: None)
    loop.refresh = lambda: setattr(loop, "state", rundir.replay())
    loop.profile, loop.optimizer, loop._structures = True, SimpleNamespace(), {v: "rows" for v in loop.state.versions}
    loop.state.beam = ["v6", "v1"]
    ran: list[str] = []
    loop.profile_fits = lambda vid: True
    loop.profile_one = ran.append
    loop.spend = lambda phase, since: None
    loop.profile_beam()
    assert ran == ["v1"]  # 2x faster than v0: the bottleneck may have moved
    v6 = loop.state.versions["v6"]
    assert v6.profile_of == "v3" and v6.diagnosis == loop.state.versions["v3"].diagnosis
    loop.state.spent["profiling"] = 30.0
    assert loop.profile_cost_s("v1") >= 15.0  # 30 s over v0 and v3's profiles, not over v6's too


def test_the_prompt_says_whose_profile_an_inheriting_member_shows() -> None:
    from kernelopt.optimize.llm import prompt as prompt_mod

    loop = _profiled(_loop(ROWS), "v0")
    v1 = loop.state.versions["v1"].model_copy(update={"metrics": METRICS, "diagnosis": DIAGNOSIS,
                                                       "profiler": loop_mod.INHERITED_PREFIX + "v0"})
    notes = prompt_mod.diagnosis_context(v1)["notes"]
    assert notes and "v0" in notes[0] and "not profiled" in notes[0]
    assert not prompt_mod.diagnosis_context(loop.state.versions["v0"])["notes"]


def test_the_report_says_the_best_carries_its_ancestors_profile(tmp_path: Path) -> None:
    from run_fixtures import build_run, evaluation

    from kernelopt.report.run_report import build_report

    rundir = build_run(tmp_path / "run", finish=False)
    v3 = rundir.replay().versions["v3"]
    v6 = rundir.write_version("import triton\n\nBLOCK_SIZE = 2048  # the knob\n", round=3,
                              proposal=v3.proposal.model_copy(update={"parent": "v3"}))
    rundir.record_evaluated("v6", evaluation(Path(v6.path), 1.98))
    rundir.record_profiled("v6", metrics=v3.metrics, diagnosis=v3.diagnosis, profiler=loop_mod.INHERITED_PREFIX + "v3")
    rundir.record_promoted(["v6", "v3"])
    rundir.record_run_finished("rounds", "v6")
    summary = build_report(rundir)
    assert summary.diagnosis_after is not None and summary.diagnosis_after.profile_of == "v3"
    assert summary.diagnosis_before is not None and summary.diagnosis_before.profile_of is None
    text = (rundir.path / "final_report.md").read_text()
    assert "### After (v6)" in text and "v3's profile" in text.split("### After (v6)")[1].split("###")[0]


def test_the_experience_store_gets_measured_metrics_only(tmp_path: Path) -> None:
    """A version carrying its ancestor's profile was not measured: its metrics are not recorded as its
    own, before (as a parent) or after a change."""
    from run_fixtures import build_run, config

    from kernelopt.models.harness import Problem

    rundir = build_run(tmp_path / "run")
    state = rundir.replay()
    measured = METRICS  # v0's ncu profile
    v0 = state.versions["v0"].model_copy(update={"metrics": measured})
    v1 = state.versions["v1"].model_copy(update={"metrics": measured, "diagnosis": v0.diagnosis,
                                                 "profiler": loop_mod.INHERITED_PREFIX + "v0"})
    v3 = state.versions["v3"]
    problem = Problem(path="p.py", name="softmax")
    after = loop_mod.experience_record(v1, v0, problem, config())
    assert after.metrics_before == {k: float(v) for k, v in measured.values().items()} and after.metrics_after == {}
    before = loop_mod.experience_record(v3, v1, problem, config())
    assert before.metrics_before == {} and before.bottleneck == "launch"  # v0's diagnosis, which v3's change acted on
    assert "v0's profile" in (before.notes or "")
