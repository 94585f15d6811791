"""The beam's probation slot (loop.PROBATION_MARGIN): a new structure -- a transform's rewrite, say --
starts with knob values tuned for its parent's structure, so one beam slot beyond --beam keeps the
fastest structure the beam lacks while it is within the margin of the best and not yet expanded, and
racing spares such structures up to the same margin. On an H200 (session 12) bias_silu_residual's flat
elementwise rewrite came in 2 % slower than the tuned row kernel with the row kernel's 16 warps: it was
raced out and its knobs were never tuned."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernelopt.models.harness import Candidate, Evaluation, Problem, TimingStats
from kernelopt.models.optimize import RunState, Version
from kernelopt.optimize import loop as loop_mod

PROBLEM = Problem(path="p.py", name="p")


def _version(vid: str, ms: float | None, parent: str | None) -> Version:
    cand = Candidate(path=f"{vid}/kernel.py", name=vid, backend="triton", entry="kernel_function", sha256="0")
    timing = TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, cv=0.0, count=10,
                         warmup_count=1, l2_flush_bytes=0) if ms is not None else None
    return Version(id=vid, round=1, path=f"{vid}/kernel.py", parent=parent,
                   evaluation=Evaluation(problem=PROBLEM, candidate=cand, timing=timing) if ms is not None else None)


def _loop(rows: list[tuple[str, float | None, str | None, str]], beam: int = 2) -> Any:
    """A Loop over versions (id, median ms or None if not evaluated yet, parent, structure)."""
    loop = loop_mod.Loop.__new__(loop_mod.Loop)
    loop.state = RunState(versions={vid: _version(vid, ms, parent) for vid, ms, parent, _ in rows})
    loop._structures = {vid: structure for vid, _, _, structure in rows}
    loop.config = SimpleNamespace(beam=beam, race=True)
    return loop


BASE = [("v0", 1.50, None, "rows"), ("v1", 0.98, "v0", "rows"), ("v2", 0.985, "v0", "rows")]


def test_a_new_structure_within_the_margin_takes_the_probation_slot() -> None:
    loop = _loop(BASE + [("v3", 1.00, "v2", "flat")])
    assert loop.on_probation(loop.correct()) == "v3"


def test_probation_ends_once_the_structure_was_expanded_and_no_child_beat_it() -> None:
    loop = _loop(BASE + [("v3", 1.00, "v2", "flat"), ("v4", 1.05, "v3", "flat")])
    assert loop.on_probation(loop.correct()) is None


def test_a_child_that_beat_it_carries_the_probation_on() -> None:
    loop = _loop(BASE + [("v3", 1.00, "v2", "flat"), ("v4", 0.99, "v3", "flat")])
    assert loop.on_probation(loop.correct()) == "v4"


def test_only_a_timed_knob_variant_ends_it() -> None:
    """A child of another structure (a transform's rewrite) or one that failed says nothing about the
    member's knobs: its probation goes on (found in review, session 12)."""
    loop = _loop(BASE + [("v3", 1.00, "v2", "flat"), ("v4", 1.30, "v3", "persistent"), ("v5", None, "v3", "flat")])
    loop.state.versions["v5"].evaluation = Evaluation(problem=PROBLEM, candidate=Candidate(
        path="v5/kernel.py", name="v5", backend="triton", entry="kernel_function", sha256="0"))  # failed: no time
    assert loop.on_probation(loop.correct()) == "v3"


def test_a_child_still_being_evaluated_does_not_end_it() -> None:
    loop = _loop(BASE + [("v3", 1.00, "v2", "flat"), ("v4", None, "v3", "flat")])
    assert loop.on_probation(loop.correct()) == "v3"


def test_no_probation_beyond_the_margin_or_for_a_structure_the_beam_has() -> None:
    far = 0.98 * (1 + loop_mod.PROBATION_MARGIN) * 1.01
    beyond = _loop(BASE + [("v3", far, "v2", "flat")])
    assert beyond.on_probation(beyond.correct()) is None
    same = _loop(BASE + [("v3", 0.99, "v2", "rows")])  # a knob variant of the beam's own structure
    assert same.on_probation(same.correct()) is None
    starting = _loop([("v0", 1.0, None, "start"), ("v1", 0.9, "v0", "a"), ("v2", 0.95, "v1", "a")])
    assert starting.on_probation(starting.correct()) is None  # v0 is never on probation


def test_the_fastest_eligible_structure_wins_the_one_slot() -> None:
    loop = _loop(BASE + [("v3", 1.02, "v2", "flat"), ("v4", 1.01, "v1", "persistent")])
    assert loop.on_probation(loop.correct()) == "v4"


def test_promote_appends_the_probation_member_after_the_beam() -> None:
    loop = _loop(BASE + [("v3", 1.00, "v2", "flat")])
    recorded: list[list[str]] = []
    loop.rundir = SimpleNamespace(record_promoted=recorded.append)
    loop.refresh = lambda: None
    assert loop.promote() == ["v1", "v2", "v3"] and recorded == [["v1", "v2", "v3"]]


def test_racing_spares_a_structure_the_beam_lacks_up_to_the_margin(monkeypatch) -> None:
    """Each candidate gets its own threshold: the beam's worst bound, and that bound times 1 + margin for
    a structure no beam member has."""
    loop = _loop(BASE + [("v3", None, "v2", "flat"), ("v4", None, "v1", "rows")])
    sent: dict[str, Any] = {}

    class Engine:
        def evaluate(self, cands: list[Candidate], *, on_result: Any = None, race_against_ms: Any = None) -> list[Any]:
            sent["races"] = race_against_ms
            return []

    loop.engine = Engine()
    loop.candidate = lambda vid: Candidate(path=f"{vid}/kernel.py", name=vid, backend="triton",
                                           entry="kernel_function", sha256="0")
    loop.refresh = lambda: None
    monkeypatch.setattr(loop_mod.Loop, "race_against_ms", lambda self: 1.0)
    loop.evaluate(["v3", "v4"])
    assert sent["races"] == [1.0 + loop_mod.PROBATION_MARGIN, 1.0]


def test_the_probation_members_proposals_take_every_other_place() -> None:
    """Optimizers list proposals member by member, best first; a round the budget cuts short must
    still reach the member on probation."""
    from kernelopt.models.optimize import Proposal

    loop = _loop(BASE + [("v3", 1.00, "v2", "flat")])
    loop.state.beam = ["v1", "v2", "v3"]
    props = [Proposal(source=f"# {i}", parent=parent, change=f"c{i}")
             for i, parent in enumerate(["v1", "v1", "v1", "v2", "v3", "v3"])]
    order = [p.parent for p in loop.interleave_probation(props)]
    assert order[:3] == ["v1", "v3", "v1"] and sorted(order) == sorted(p.parent for p in props)
    loop.state.beam = ["v1", "v2"]  # no member on probation: the optimizer's order stands
    assert loop.interleave_probation(props) == props


def test_the_reserve_counts_the_table_again_when_the_finish_runs_on_another_gpu() -> None:
    """Autotune choices are kept per verifier, and the re-timing runs on the engine's first worker: with
    several GPUs a version searched on another one pays its table again, so the reserve counts it; with
    one GPU it does not (found in review, session 12)."""
    def reserve_on(devices: list[str]) -> float:
        loop = _loop([("v0", 1.5, None, "a"), ("v1", 1.0, "v0", "a")], beam=1)
        for vid in ("v0", "v1"):
            loop.state.versions[vid].evaluation.phases = {
                "runner_start": 0.3, "load": 0.1, "verify": 11.0 if vid == "v1" else 1.0, "time": 0.5}
        loop.check_shapes = False
        loop.engine = SimpleNamespace(isolate="worker", devices=devices)
        return loop.finish_reserve_s()

    one, two = reserve_on(["cuda:0"]), reserve_on(["cuda:0", "cuda:1"])
    # v1's 10 s table, in both of its re-timings (and in the winner's last verification, at least as long
    # as the mean verification's 6.4 s)
    assert two - one == pytest.approx(2 * 10.0 + (10.9 - 6.4))


def test_the_reference_time_is_the_fastest_baseline_measured() -> None:
    """The roofline stop compares the best member with it (kernelopt.optimize.base.at_roofline)."""
    from kernelopt.models.harness import Timing

    loop = _loop(BASE)
    assert loop.reference_ms() is None  # no baselines (--baselines none, the interpreter)
    loop.state.baselines = {name: Timing(label=name, stats=_version("b", ms, None).evaluation.timing)
                            for name, ms in (("eager", 2.5), ("compile", 0.93))}
    loop.state.baselines["failed"] = Timing(label="compile", error="torch.compile failed")
    assert loop.reference_ms() == pytest.approx(0.93)


@pytest.mark.parametrize("compile_ms", [None, 0.1])
def test_the_loop_stops_at_the_roofline_only_once_no_baseline_is_faster(tmp_path, monkeypatch, compile_ms) -> None:
    """v0 at 95 % of the floor stops the run before round 1, unless torch.compile ran faster: then the
    knob search goes on (the stop, the optimizers' context and the stop message all read the baseline)."""
    import kernelopt.harness.evaluate as evaluate_mod
    from conftest import MATVEC, FakeEngine

    from kernelopt.models.harness import Timing

    v0_ms = FakeEngine(None).ms_of(Candidate(path=str(MATVEC / "kernel.py"), name="v0", backend="triton",
                                             entry="ModelNew", sha256="0"))
    baselines = {"eager": Timing(label="eager", stats=_version("e", 10 * v0_ms, None).evaluation.timing)}
    if compile_ms is not None:
        baselines["compile"] = Timing(label="compile", stats=_version("c", compile_ms * v0_ms, None).evaluation.timing)

    def engine(problem: Any, **kw: Any) -> FakeEngine:
        e = FakeEngine(problem, **kw)
        e.ready = [SimpleNamespace(reference_floor_ms=0.95 * v0_ms, baselines=baselines, baselines_cached=[],
                                   baselines_s=0.0, device=None)]
        return e

    monkeypatch.setattr(evaluate_mod, "Engine", engine)
    state = loop_mod.optimize(run_dir=tmp_path / "run", problem_path=MATVEC / "problem.py",
                              kernel_path=MATVEC / "kernel.py", overrides={"M": "64", "K": "256"}, optimizer="knobs",
                              budget_evals=4, rounds=3, beam=2, proposals_per_member=2, seed=3, profile=False,
                              experience=False)
    if compile_ms is None:
        assert state.stop_reason == "at the roofline (95% of the DRAM floor), no slower than the fastest baseline"
        assert list(state.versions) == ["v0"]
    else:
        # compile at a tenth of v0's time, below anything the fake engine's knob space reaches
        assert state.stop_reason == "evaluation budget" and len(state.versions) == 4
