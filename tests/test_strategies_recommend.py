"""The packs' half of kernelopt.recommend (pack_scores): which strategies, in what order, and why."""

from __future__ import annotations

import pytest

from kernelopt.models import Bottleneck, Diagnosis, KernelMetrics, Metrics, MetricValue
from kernelopt.recommend import RULE_BOOST, WHEN_UNKNOWN, pack_scores
from kernelopt.strategies import load_strategies


@pytest.fixture(scope="module")
def packs():
    return load_strategies(env=False, entry_points=False)


def bottleneck(category: str, confidence: float = 0.8, subcause: str | None = None, strategies=()) -> Bottleneck:
    return Bottleneck(category=category, subcause=subcause, confidence=confidence, message="test",
                      rule_id=f"test-{category}", strategies=list(strategies))


def diagnosis(*bs: Bottleneck) -> Diagnosis:
    return Diagnosis(primary=bs[0] if bs else None, bottlenecks=list(bs), rules_pack="test")


def ids(recs) -> list[str]:
    return [r.strategy for r in recs]


def suite_context(tmp_path, name: str, recs, proposals: int):
    """Round 1 of the suite draft `name` (copied to v0.py) with `recs` recommended for v0."""
    from pathlib import Path

    from kernelopt.models.harness import Problem
    from kernelopt.models.optimize import OptimizeContext, Version

    suite = Path(__file__).resolve().parents[1] / "benchmarks" / "suite" / name
    v0 = tmp_path / "v0.py"
    v0.write_text((suite / "kernel.py").read_text())
    return OptimizeContext(problem=Problem(path=str(suite / "problem.py"), name=name), round=1,
                           beam=[Version(id="v0", round=0, path=str(v0))], recommendations={"v0": recs},
                           proposals_per_member=proposals)


def test_only_matching_category_and_backend(packs):
    recs = pack_scores(diagnosis(bottleneck("onchip_memory")), "cuda", {}, strategies=packs)
    assert recs
    for r in recs:
        s = packs.strategies[r.strategy]
        assert s.backend in ("cuda", "any") and "onchip_memory" in s.categories and not s.anti_pattern
        assert r.category == "onchip_memory" and r.source == "pack" and r.reason
    assert "cuda-shared-memory-padding" in ids(recs)


def test_when_false_excludes_true_includes(packs):
    d = diagnosis(bottleneck("launch"))
    small_grid = pack_scores(d, "triton", {"waves_per_sm": 0.5}, strategies=packs)
    big_grid = pack_scores(d, "triton", {"waves_per_sm": 12.0}, strategies=packs)
    assert "split-k" in ids(small_grid) and "smaller-tiles-more-programs" in ids(small_grid)
    assert "split-k" not in ids(big_grid) and "smaller-tiles-more-programs" not in ids(big_grid)
    assert "more-rows-per-program" in ids(big_grid) and "more-rows-per-program" not in ids(small_grid)
    reason = next(r.reason for r in small_grid if r.strategy == "split-k")
    assert "waves_per_sm=0.5 < 1" in reason


def test_avoid_when_true_excludes(packs):
    d = diagnosis(bottleneck("dram", subcause="redundant_reads"))
    fine = pack_scores(d, "triton", {"static_spill_bytes": 0}, strategies=packs)
    spilling = pack_scores(d, "triton", {"static_spill_bytes": 64}, strategies=packs)
    assert "single-pass-row" in ids(fine) and "single-pass-row" not in ids(spilling)


def test_without_metrics_conditions_are_unknown_not_exclusions(packs):
    d = diagnosis(bottleneck("launch"))
    recs = pack_scores(d, "triton", None, strategies=packs)
    by_id = {r.strategy: r for r in recs}
    # both sides of waves_per_sm are kept when it cannot be checked
    assert {"split-k", "more-rows-per-program", "fuse-elementwise-passes"} <= set(by_id)
    assert "not checked, no metrics (waves_per_sm)" in by_id["split-k"].reason
    assert by_id["split-k"].parts["when"] == WHEN_UNKNOWN
    assert by_id["split-k"].score < by_id["fuse-elementwise-passes"].score
    missing_key = pack_scores(d, "triton", {"dram_throughput_pct": 50.0}, strategies=packs)
    assert "not checked, missing waves_per_sm" in {r.strategy: r for r in missing_key}["split-k"].reason


def test_rank_confidence_and_rule_boost_order(packs):
    first = bottleneck("compute", confidence=0.9, strategies=["exp2-fast-math"])
    second = bottleneck("launch", confidence=0.9)
    recs = pack_scores(diagnosis(first, second), "triton", None, strategies=packs)
    assert recs[0].strategy == "exp2-fast-math" and "named by rule test-compute" in recs[0].reason
    assert recs[0].parts["rule"] == RULE_BOOST
    compute = [r for r in recs if r.category == "compute"]
    launch = [r for r in recs if r.category == "launch"]
    # a strategy of the second bottleneck never outranks the same-quality one of the first
    assert max(r.score for r in launch) < min(r.score for r in compute if r.parts.get("when") is None)
    assert recs == sorted(recs, key=lambda r: -r.score)
    # lower confidence, lower scores
    low = pack_scores(diagnosis(bottleneck("compute", confidence=0.3)), "triton", None, strategies=packs)
    high = pack_scores(diagnosis(bottleneck("compute", confidence=0.9)), "triton", None, strategies=packs)
    assert {r.strategy: r.score for r in low}["even-k-no-masks"] < {r.strategy: r.score for r in high}["even-k-no-masks"]


def test_rule_named_strategy_outside_category_is_included(packs):
    b = bottleneck("latency", strategies=["grouped-tile-order"])
    recs = pack_scores(diagnosis(b), "triton", {"l2_hit_rate_pct": 40.0}, strategies=packs)
    assert "grouped-tile-order" in ids(recs)


def test_subcause_match_ranks_higher(packs):
    b = bottleneck("onchip_memory", subcause="bank_conflicts")
    recs = pack_scores(diagnosis(b), "cuda", None, strategies=packs)
    top = ids(recs)[:2]
    assert set(top) == {"cuda-shared-memory-padding", "cuda-swizzled-shared-layout"}


def test_primary_only_diagnosis_and_empty(packs):
    d = Diagnosis(primary=bottleneck("occupancy"), bottlenecks=[], rules_pack="experience")
    assert pack_scores(d, "cuda", None, strategies=packs)
    assert pack_scores(Diagnosis(primary=None, rules_pack="x"), "cuda", None, strategies=packs) == []


def test_anti_patterns_are_separate_and_conditional(packs):
    d = diagnosis(bottleneck("dram"))
    warn = pack_scores(d, "triton", {"dram_throughput_pct": 90.0}, strategies=packs, anti_patterns=True)
    assert "anti-more-warps-on-bandwidth-bound" in ids(warn)
    assert all(packs.strategies[i].anti_pattern for i in ids(warn))
    calm = pack_scores(d, "triton", {"dram_throughput_pct": 30.0, "dram_roofline_fraction": 0.3},
                                strategies=packs, anti_patterns=True)
    assert "anti-more-warps-on-bandwidth-bound" not in ids(calm)


def test_accepts_metrics_model(packs):
    m = Metrics(source="json", kernels=[KernelMetrics(name="k", dominant=True, metrics={
        "waves_per_sm": MetricValue(key="waves_per_sm", name="launch__waves_per_multiprocessor", value=0.25)})])
    recs = pack_scores(diagnosis(bottleneck("launch")), "cuda", m, strategies=packs)
    assert "cuda-split-k" in ids(recs)
    assert "waves_per_sm=0.25 < 1" in {r.strategy: r for r in recs}["cuda-split-k"].reason


def test_torch_backend_gets_no_backend_specific_strategies(packs):
    assert pack_scores(diagnosis(bottleneck("dram")), "torch", None, strategies=packs) == []


@pytest.mark.parametrize("category,subcause", [("occupancy", "register_limited"), ("dram", "dram_bandwidth")])
def test_a_row_launched_elementwise_kernel_gets_the_flat_grid_transform(packs, tmp_path, category, subcause):
    """bias_silu_residual's draft (one program per 16384-column row) was diagnosed register-limited on
    an H200 and DRAM-bound on an H100 (session 13). flat_elementwise, the form torch.compile's
    pointwise kernels take, was reachable only through bigger-programs-for-tiny-blocks, whose `when`
    (blocks, not registers, bind occupancy) excluded it in both: three rounds, never proposed."""
    from kernelopt.optimize.transforms.optimizer import StrategiesOptimizer

    recs = pack_scores(diagnosis(bottleneck(category, subcause=subcause)), "triton", {}, strategies=packs)
    assert "flat-elementwise-grid" in ids(recs)
    ctx = suite_context(tmp_path, "bias_silu_residual", recs, 4)
    made = [p for p in StrategiesOptimizer(strategies=packs).propose(ctx) if p.extra.get("phase") == "transform"]
    assert ("flat-elementwise-grid", "flat_elementwise") in [(p.strategy, p.extra["transform"]["name"]) for p in made]


def test_under_register_pressure_the_first_knob_move_spreads_the_tile_over_four_times_the_warps(packs, tmp_path):
    """benchmarks/results/knob_outcomes_num_warps.md: under a register-limited diagnosis num_warps 4 -> 16
    won 12 of 12 times, 4 -> 8 none of 11 and 4 -> 2 none of 8; the search used to try 2 first."""
    from kernelopt.models.recommendation import Recommendation
    from kernelopt.optimize.knobs.search import KnobSearchOptimizer

    recs = [Recommendation(strategy="reduce-register-pressure", score=0.3, reason="register_limited")]
    ctx = suite_context(tmp_path, "bias_silu_residual", recs, 3)
    first = KnobSearchOptimizer(strategies=packs).propose(ctx)[0]
    assert first.strategy == "reduce-register-pressure" and first.knobs["num_warps"] == 16


def test_under_an_alu_diagnosis_the_first_knob_move_is_fewer_warps(packs, tmp_path):
    """benchmarks/results/knob_outcomes_num_warps.md: under `alu` num_warps 4 -> 2 won 26 of 43 moves and
    4 -> 8 won 1 of 37; without a hint the knob search tries upwards first."""
    from kernelopt.optimize.knobs.search import KnobSearchOptimizer

    recs = pack_scores(diagnosis(bottleneck("compute", subcause="alu")), "triton", {}, strategies=packs)
    assert "specialize-index-scalars" in ids(recs)
    ctx = suite_context(tmp_path, "avgpool2d", recs, 4)
    moves = [p.knobs.get("num_warps") for p in KnobSearchOptimizer(strategies=packs).propose(ctx)]
    assert 2 in moves and (8 not in moves or moves.index(2) < moves.index(8))
