"""StrategiesOptimizer on synthetic contexts: transforms first (recommended, applicable, untried on the
lineage), failures as failed proposals, then the knob search with the strategy's hints first."""

from __future__ import annotations

from pathlib import Path

import pytest
from transform_fixtures import NAME, fixture_transforms  # noqa: F401 - pytest fixture

from kernelopt.errors import BadInput
from kernelopt.models.harness import Problem
from kernelopt.models.optimize import Attempt, OptimizeContext, Proposal, Version
from kernelopt.models.recommendation import Recommendation
from kernelopt.models.strategy import Strategy, StrategySet
from kernelopt.optimize.base import get_optimizer
from kernelopt.optimize.transforms.optimizer import StrategiesOptimizer

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "softmax" / "kernel.py"
PROBLEM = Problem(path=str(ROOT / "examples" / "softmax" / "problem.py"), name="softmax")


def strategy(sid: str, transform: str, params: dict | None = None, requires: list[str] | None = None,
             knobs: list[dict] | None = None) -> Strategy:
    return Strategy.model_validate({
        "id": sid, "title": f"apply {transform}", "backend": "triton", "categories": ["dram"],
        "transform": {"name": transform, "params": params or {}, "requires": requires or []},
        "knobs": knobs or [], "expect": "duration_ns falls"})


def strategies(*items: Strategy) -> StrategySet:
    return StrategySet(strategies={s.id: s for s in items})


def context(tmp_path: Path, *, history: list[Attempt] | None = None, recs: list[str] | None = None,
            failed: list[Proposal] | None = None, beam: list[Version] | None = None) -> OptimizeContext:
    v0 = tmp_path / "v0.py"
    if not v0.exists():
        v0.write_text(SOFTMAX.read_text())
    members = beam or [Version(id="v0", round=0, path=str(v0))]
    recommendations = {m.id: [Recommendation(strategy=s, score=1.0, reason="test") for s in recs or []]
                       for m in members}
    return OptimizeContext(problem=PROBLEM, round=1, beam=members, history=history or [],
                           recommendations=recommendations, failed_proposals=failed or [], proposals_per_member=3)


def test_a_transform_is_proposed_first_with_its_strategy_then_knobs(tmp_path: Path, fixture_transforms) -> None:
    opt = StrategiesOptimizer(strategies=strategies(strategy("mark-kernel", NAME, {"MARK": 2})))
    props = opt.propose(context(tmp_path))
    first = props[0]
    assert first.strategy == "mark-kernel" and first.parent == "v0" and first.optimizer == "strategies"
    assert first.extra["transform"] == {"name": NAME, "site": "softmax_kernel", "params": {"MARK": 2}}
    assert "_ko_marker = 2" in first.source and first.change == f"transform {NAME}@softmax_kernel (MARK=2)"
    assert first.knobs  # the new source's knob values, so the loop and the knob search key on them
    assert len(props) == 3 and all(p.extra.get("phase") != "transform" for p in props[1:])
    assert all(p.optimizer == "strategies" for p in props)


def test_not_tried_again_on_the_lineage(tmp_path: Path, fixture_transforms) -> None:
    opt = StrategiesOptimizer(strategies=strategies(strategy("mark-kernel", NAME)))
    (tmp_path / "v2.py").write_text(SOFTMAX.read_text().replace("offs = tl.arange", "offs = 0 + tl.arange"))
    history = [
        Attempt(version="v1", parent="v0", change="transform", strategy="mark-kernel", outcome="incorrect",
                transform=f"{NAME}@softmax_kernel"),
        Attempt(version="v2", parent="v0", change="x", outcome="faster"),
    ]
    v2 = Version(id="v2", round=1, path=str(tmp_path / "v2.py"), parent="v0")
    v0 = Version(id="v0", round=0, path=str(tmp_path / "v0.py"))
    # proposed from the member itself: not again
    props = opt.propose(context(tmp_path, history=history, beam=[v0]))
    assert props and not any(p.extra.get("phase") == "transform" for p in props)
    # it broke the answer on an ancestor: not on a descendant either
    props = opt.propose(context(tmp_path, history=history, beam=[v2]))
    assert props and not any(p.extra.get("phase") == "transform" for p in props)
    # only slower on the ancestor: a descendant whose structure another change made gets it
    # (transforms compose) - but not one that differs from the ancestor in knob values only
    from kernelopt.optimize.knobs.rewrite import set_knobs, structure_hash

    history[0].outcome = "slower"
    start = SOFTMAX.read_text()
    history.append(Attempt(version="v0", parent=None, change="starting kernel", outcome="same",
                           structure=structure_hash(start)))
    props = opt.propose(context(tmp_path, history=history, beam=[v2]))
    assert props[0].extra.get("phase") == "transform" and props[0].parent == "v2"
    (tmp_path / "v4.py").write_text(set_knobs(start, {"num_warps": 8}))
    history.append(Attempt(version="v4", parent="v0", change="num_warps 4 -> 8", outcome="faster"))
    v4 = Version(id="v4", round=1, path=str(tmp_path / "v4.py"), parent="v0")
    props = opt.propose(context(tmp_path, history=history, beam=[v4]))
    assert props and not any(p.extra.get("phase") == "transform" for p in props)
    # a kernel the transform made (v1 on v3's chain) never gets it again
    (tmp_path / "v3.py").write_text(SOFTMAX.read_text().replace("offs = tl.arange", "offs = 1 * tl.arange"))
    history.append(Attempt(version="v3", parent="v1", change="y", outcome="faster"))
    v3 = Version(id="v3", round=2, path=str(tmp_path / "v3.py"), parent="v1")
    props = opt.propose(context(tmp_path, history=history, beam=[v3]))
    assert props and not any(p.extra.get("phase") == "transform" for p in props)
    # another lineage (a version not descending from v0's tries) still gets it
    (tmp_path / "w.py").write_text(SOFTMAX.read_text())
    other = Version(id="v9", round=1, path=str(tmp_path / "w.py"), parent=None)
    props = opt.propose(context(tmp_path, history=history, beam=[other]))
    assert props[0].extra.get("phase") == "transform"


def test_failures_are_failed_proposals_and_not_retried(tmp_path: Path, fixture_transforms) -> None:
    opt = StrategiesOptimizer(strategies=strategies(strategy("break-it", "breaking"), strategy("explode", "exploding"),
                                                    strategy("unknown-one", "no_such_transform")))
    props = opt.propose(context(tmp_path))
    failed = {p.strategy: p for p in props if p.failed}
    assert set(failed) == {"break-it", "unknown-one", "explode"}
    assert "does not parse" in failed["break-it"].failed and failed["break-it"].source == ""
    assert failed["explode"].failed == "transform exploding: sites() raised RuntimeError: boom in sites"
    assert "unknown transform" in failed["unknown-one"].failed
    assert all(not p.failed for p in props if p.source)
    again = opt.propose(context(tmp_path, failed=list(failed.values())))
    assert not any(p.failed for p in again)


def test_recommended_order_and_fallback_requires(tmp_path: Path, fixture_transforms) -> None:
    a = strategy("mark-a", NAME, {"MARK": 1})
    b = strategy("mark-b", NAME, {"MARK": 3})
    needs_dot = strategy("mark-dot", NAME, requires=["dot"])
    opt = StrategiesOptimizer(strategies=strategies(a, b, needs_dot))
    props = opt.propose(context(tmp_path, recs=["mark-b", "mark-a"]))
    assert [p.strategy for p in props if p.extra.get("phase") == "transform"] == ["mark-b", "mark-a"]
    # no recommendation carries a transform: every strategy whose requires holds (not mark-dot)
    props = opt.propose(context(tmp_path, recs=["tune-num-warps"]))
    assert [p.strategy for p in props if p.extra.get("phase") == "transform"] == ["mark-a", "mark-b"]
    # the only recommended one does not apply here (requires dot): the others are tried instead
    props = opt.propose(context(tmp_path, recs=["mark-dot"]))
    assert [p.strategy for p in props if p.extra.get("phase") == "transform"] == ["mark-a", "mark-b"]


def test_knob_hints_of_the_strategy_that_made_a_member_come_first(tmp_path: Path, fixture_transforms) -> None:
    made = strategy("mark-kernel", NAME, knobs=[{"param": "num_warps", "values": [2]}])
    opt = StrategiesOptimizer(strategies=strategies(made))
    first = opt.propose(context(tmp_path))[0]
    (tmp_path / "v1.py").write_text(first.source)
    v1 = Version(id="v1", round=1, path=str(tmp_path / "v1.py"), parent="v0", proposal=first)
    history = [Attempt(version="v1", parent="v0", change=first.change, strategy="mark-kernel", outcome="faster",
                       transform=f"{NAME}@softmax_kernel")]
    props = opt.propose(context(tmp_path, history=history, beam=[v1]))
    assert props[0].strategy == "mark-kernel" and props[0].knobs["num_warps"] == 2
    assert props[0].extra.get("phase") == "hint"


def test_registered_and_bad_options_are_bad_input() -> None:
    assert get_optimizer("strategies").name == "strategies"
    with pytest.raises(BadInput, match="unknown option"):
        get_optimizer("strategies", colour="red")


def test_a_rewrite_the_run_already_holds_takes_no_slot(tmp_path: Path, fixture_transforms) -> None:
    from kernelopt.problem import normalized_source_hash

    opt = StrategiesOptimizer(strategies=strategies(strategy("mark-a", NAME, {"MARK": 1}),
                                                    strategy("mark-b", NAME, {"MARK": 3})))
    first = opt.propose(context(tmp_path))
    held = next(p for p in first if p.strategy == "mark-a")
    ctx = context(tmp_path)
    ctx.tried_sources = [normalized_source_hash(held.source)]
    again = [p.strategy for p in opt.propose(ctx) if p.extra.get("phase") == "transform"]
    assert again == ["mark-b"]


def test_at_the_roofline_but_slower_than_the_library_the_transforms_go_on(tmp_path: Path, fixture_transforms) -> None:
    """At 91 % of its DRAM floor bias_silu_residual was 0.99x of torch.compile on an H100 (session 13):
    the roofline stop waits until the best member is no slower than the fastest baseline."""
    v0 = tmp_path / "v0.py"
    v0.write_text(SOFTMAX.read_text())
    from kernelopt.models.harness import Candidate, Evaluation, TimingStats
    timing = TimingStats(median_ms=1.0, mean_ms=1.0, min_ms=1.0, max_ms=1.0, iqr_ms=0.0, cv=0.0, count=10,
                         warmup_count=1, l2_flush_bytes=0)
    cand = Candidate(path=str(v0), name="v0", backend="triton", entry="ModelNew", sha256="0")
    member = Version(id="v0", round=0, path=str(v0), evaluation=Evaluation(problem=PROBLEM, candidate=cand, timing=timing))
    opt = StrategiesOptimizer(strategies=strategies(strategy("mark-kernel", NAME, {"MARK": 2})))
    at_floor = context(tmp_path, beam=[member], recs=["mark-kernel"])
    at_floor.roofline_floor_ms = 0.91
    assert opt.propose(at_floor) == []  # no baseline measured: done at 91 % of the floor
    at_floor.reference_ms = 0.99  # torch.compile is faster
    assert opt.propose(at_floor)[0].strategy == "mark-kernel"
    at_floor.reference_ms = 1.0  # as fast as the library: done
    assert opt.propose(at_floor) == []
