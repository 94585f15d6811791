"""BottleneckClassifier on real ncu fixtures (H200) and on constructed metric values.

The constructed dicts are unit tests of individual rules, not GPU data: each starts
from an idle baseline and sets only what the scenario needs.
"""

from pathlib import Path

import pytest

from kernelopt.diagnose import diagnose, load_metrics
from kernelopt.diagnose.classifier import BottleneckClassifier, confidence, render, select_kernel
from kernelopt.models import CATEGORIES, Evidence

FIX = Path(__file__).parent / "fixtures"
PROBE = FIX / "profile" / "probe_h200_torch" / "raw.csv"  # provenance.json beside it
EXAMPLES = ["softmax", "rmsnorm", "matvec"]  # Triton examples profiled on an H200 (profile fixtures)


@pytest.fixture(scope="module")
def clf():
    return BottleneckClassifier("kernelopt")


def idle(**over: float) -> dict[str, float]:
    """A kernel doing nothing in particular: no unit busy, many waves, full occupancy, balanced stalls."""
    base = {
        "duration_ns": 500_000, "sm_throughput_pct": 20, "memory_throughput_pct": 20, "dram_throughput_pct": 20,
        "l1tex_throughput_pct": 20, "l2_throughput_pct": 20, "issue_slots_busy_pct": 20,
        "pipe_fma_pct": 10, "pipe_alu_pct": 10, "pipe_fp64_pct": 0, "pipe_tensor_pct": 0, "pipe_xu_pct": 0,
        "pipe_lsu_pct": 5, "achieved_occupancy_pct": 90, "theoretical_occupancy_pct": 100,
        "occupancy_limit_registers": 8, "occupancy_limit_shared_mem": 16, "occupancy_limit_warps": 8,
        "occupancy_limit_blocks": 32, "grid_size": 100_000, "block_size": 256, "sm_count": 132, "waves_per_sm": 94.7,
        "registers_per_thread": 32, "global_load_sectors_per_request": 4, "global_store_sectors_per_request": 4,
        "shared_wavefronts_per_request": 1, "local_spill_requests": 0, "static_spill_bytes": 0,
        "warp_cycles_per_issued_instruction": 20, "stall_long_scoreboard": 3, "stall_short_scoreboard": 3,
        "stall_mio_throttle": 3, "stall_lg_throttle": 1, "stall_barrier": 1, "stall_membar": 0,
        "stall_branch_resolving": 1, "stall_wait": 3, "stall_math_pipe_throttle": 1, "stall_tex_throttle": 0,
        "stall_dispatch_stall": 0, "stall_drain": 0, "stall_no_instruction": 1, "stall_sleeping": 0,
        "stall_imc_miss": 0, "stall_selected": 1, "stall_not_selected": 1,
    }
    base.update(over)
    return base


SCENARIOS = {
    "tiny launch": (idle(duration_ns=3000, grid_size=4, waves_per_sm=0.01), "launch", "launch_overhead"),
    "grid smaller than SMs": (idle(grid_size=8, waves_per_sm=0.06, dram_throughput_pct=25, memory_throughput_pct=25),
                              "launch", "grid_too_small"),
    "tail wave": (idle(grid_size=160, waves_per_sm=1.21), "launch", "tail_effect"),
    "register spills": (idle(static_spill_bytes=432, local_spill_requests=2e6, registers_per_thread=255,
                             theoretical_occupancy_pct=12.5, achieved_occupancy_pct=12), "occupancy", "register_spill"),
    "dram roofline": (idle(dram_throughput_pct=90, memory_throughput_pct=90, l2_throughput_pct=92), "dram", "dram_bandwidth"),
    "tensor cores": (idle(sm_throughput_pct=75, pipe_tensor_pct=70, issue_slots_busy_pct=30), "compute", "tensor"),
    "fp64": (idle(sm_throughput_pct=85, pipe_fp64_pct=85, issue_slots_busy_pct=45), "compute", "fp64"),
    "fma": (idle(sm_throughput_pct=88, pipe_fma_pct=88, issue_slots_busy_pct=90), "compute", "fma"),
    "issue bound": (idle(sm_throughput_pct=75, issue_slots_busy_pct=75, pipe_fma_pct=30, pipe_alu_pct=35),
                    "compute", "issue_slots"),
    "uncoalesced": (idle(global_load_sectors_per_request=31, l1tex_throughput_pct=70, memory_throughput_pct=70,
                         dram_throughput_pct=15), "onchip_memory", "uncoalesced_access"),
    "bank conflicts": (idle(shared_wavefronts_per_request=16, l1tex_throughput_pct=75, memory_throughput_pct=75,
                            shared_bank_conflicts_ld=5e6), "onchip_memory", "bank_conflicts"),
    "l2 bound": (idle(l2_throughput_pct=80, memory_throughput_pct=80, dram_throughput_pct=20), "onchip_memory", "l2_bandwidth"),
    "occupancy registers": (idle(theoretical_occupancy_pct=25, achieved_occupancy_pct=24, occupancy_limit_registers=2,
                                 registers_per_thread=128), "occupancy", "register_limited"),
    "occupancy shared memory": (idle(theoretical_occupancy_pct=12.5, achieved_occupancy_pct=12, occupancy_limit_shared_mem=1),
                                "occupancy", "shared_memory_limited"),
    "occupancy block size": (idle(theoretical_occupancy_pct=50, achieved_occupancy_pct=45, block_size=32,
                                  occupancy_limit_registers=40, occupancy_limit_shared_mem=40,
                                  occupancy_limit_warps=64), "occupancy", "block_size"),
    "long scoreboard": (idle(stall_long_scoreboard=60, warp_cycles_per_issued_instruction=80), "latency", "long_scoreboard"),
    "barrier": (idle(stall_barrier=30, warp_cycles_per_issued_instruction=45), "latency", "barrier"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_rule_names_its_planted_bottleneck(clf, name):
    values, category, subcause = SCENARIOS[name]
    d = clf.classify(values)
    assert d.primary is not None, name
    assert (d.primary.category, d.primary.subcause) == (category, subcause), render(d)
    assert d.primary.evidence and all(e.value is not None for e in d.primary.evidence)
    assert 0.5 <= d.primary.confidence <= 1.0


def test_idle_kernel_is_not_called_a_roofline_or_launch_problem(clf):
    d = clf.classify(idle())
    assert all(b.category not in ("dram", "compute", "launch") for b in d.bottlenecks)


def test_onchip_vs_dram_uses_dram_throughput_not_memory_throughput(clf):
    # Same compute-memory throughput; only the DRAM share differs.
    l1 = clf.classify(idle(memory_throughput_pct=85, l1tex_throughput_pct=85, dram_throughput_pct=20))
    dram = clf.classify(idle(memory_throughput_pct=85, l1tex_throughput_pct=40, dram_throughput_pct=85))
    assert l1.primary.category == "onchip_memory"
    assert dram.primary.category == "dram"


def test_headroom_and_near_roofline(clf):
    near = clf.classify(idle(dram_throughput_pct=90, memory_throughput_pct=90))
    assert near.primary.near_roofline and near.primary.headroom_pct == pytest.approx(10)
    assert near.headroom["dram"] == pytest.approx(10) and near.headroom["sm"] == pytest.approx(80)
    assert any("near its roofline" in n for n in near.notes)
    far = clf.classify(idle(dram_throughput_pct=65, memory_throughput_pct=65))
    assert far.primary.category == "dram" and not far.primary.near_roofline
    assert far.primary.headroom_pct == pytest.approx(35)


def test_confidence_grows_with_margin(clf):
    weak = clf.classify(idle(dram_throughput_pct=61, memory_throughput_pct=61)).primary
    strong = clf.classify(idle(dram_throughput_pct=95, memory_throughput_pct=95)).primary
    assert weak.category == strong.category == "dram"
    assert weak.confidence < strong.confidence
    # The documented formula: min strength over comparisons, 30% past the threshold is full strength.
    ev = [Evidence(key="x", value=78, threshold=60, op=">=")]
    assert confidence(ev, 0, 1, True) == pytest.approx(1.0)
    ev = [Evidence(key="x", value=69, threshold=60, op=">=")]
    assert confidence(ev, 0, 1, True) == pytest.approx(0.5 + 0.5 * (9 / 60 / 0.3))
    assert confidence(ev, 1, 2, True) == pytest.approx(0.75 * confidence(ev, 0, 2, True), abs=1e-3)
    assert confidence(ev, 0, 1, False) == pytest.approx(0.5 * confidence(ev, 0, 1, True), abs=1e-3)


def test_missing_metrics_never_crash_and_are_named(clf):
    empty = clf.classify({})
    assert empty.primary is None and empty.notes
    sparse = clf.classify({"dram_throughput_pct": 88, "memory_throughput_pct": 88, "sm_throughput_pct": 10})
    assert sparse.primary.category == "dram"
    assert "dram_bytes" in sparse.primary.missing_metrics  # cited evidence that is absent
    full = clf.classify(idle(dram_throughput_pct=88, memory_throughput_pct=88, sm_throughput_pct=10, dram_bytes=1e9,
                             l2_hit_rate_pct=30, dram_roofline_fraction=0.88))
    assert sparse.primary.confidence < full.primary.confidence
    assert "l1-bound" in sparse.undetermined  # needs l1tex_throughput_pct
    assert "l1tex_throughput_pct" in sparse.missing_metrics


def test_partial_inputs_of_derived_values_lower_confidence_and_are_named(clf):
    # One stall reason known: it is the largest of those present, but the others are unknown.
    sparse = clf.classify({"sm_throughput_pct": 10, "memory_throughput_pct": 12, "stall_barrier": 30,
                           "warp_cycles_per_issued_instruction": 40})
    assert (sparse.primary.category, sparse.primary.subcause) == ("latency", "barrier")
    assert "stall_long_scoreboard" in sparse.primary.missing_metrics
    full = clf.classify(idle(sm_throughput_pct=10, memory_throughput_pct=12, stall_barrier=30,
                             warp_cycles_per_issued_instruction=40))
    assert full.primary.subcause == "barrier"
    assert sparse.primary.confidence < full.primary.confidence


def test_undecided_rules_are_a_fallback_when_nothing_is_decided(clf):
    # Throughputs only, no stall reasons: latency cannot be decided, but it is not ruled out either.
    d = clf.classify({"sm_throughput_pct": 10, "memory_throughput_pct": 12, "dram_throughput_pct": 12,
                      "warp_cycles_per_issued_instruction": 40, "stall_long_scoreboard": 30})
    decided = [b for b in d.bottlenecks if "undecided" not in b.message]
    assert decided  # long scoreboard is the only (hence largest) stall present
    nothing = clf.classify({"grid_size": 10, "sm_count": 132})
    assert nothing.primary is not None and "undecided" in nothing.primary.message
    assert nothing.primary.confidence <= 0.5 and nothing.primary.missing_metrics


def test_real_h200_probe_per_kernel(clf):
    metrics = load_metrics(PROBE)
    add = clf.classify(select_kernel(metrics, "vectorized_elementwise_kernel"))
    assert add.primary.category == "dram" and add.primary.near_roofline  # 82% DRAM
    ev = {e.key: e for e in add.primary.evidence}
    assert ev["dram_throughput_pct"].value == pytest.approx(82.16, abs=0.01)
    softmax = clf.classify(select_kernel(metrics, "SoftMax"))
    assert softmax.primary.category == "compute"  # SM 72% busy, memory 34%, no pipe above 32%
    assert softmax.primary.subcause == "issue_slots"


@pytest.mark.parametrize("name", EXAMPLES)
def test_real_h200_examples_are_dram_bound_with_agreeing_ncu_rule(clf, name):
    d = clf.classify(load_metrics(FIX / "profile" / name / "metrics.json"))
    assert d.primary.category == "dram"
    assert any(r.rule == "SOLBottleneck" for r in d.primary.ncu_rules)
    assert d.ncu_rules and all(r.type in ("OPT", "WRN", "ERR") for r in d.ncu_rules)
    assert d.kernel and d.rules_pack == "kernelopt"


def test_published_packs_map_labels_onto_categories():
    values = idle(sm_throughput_pct=20, memory_throughput_pct=30)
    roof = BottleneckClassifier("roofline").classify(values)
    assert (roof.primary.label, roof.primary.category) == ("underutilized", "latency")
    sol = BottleneckClassifier("sol4").classify(values)
    assert (sol.primary.label, sol.primary.category) == ("latency", "latency")
    mem = BottleneckClassifier("roofline").classify(idle(memory_throughput_pct=70, sm_throughput_pct=70))
    assert (mem.primary.label, mem.primary.category) == ("memory", "dram")  # ties go to memory
    occ = BottleneckClassifier("sol4").classify(idle(sm_throughput_pct=50, memory_throughput_pct=50,
                                                      achieved_occupancy_pct=20, theoretical_occupancy_pct=100))
    assert occ.primary.label == "occupancy"
    # Between 40% and 60% with nothing far apart, the four-way rule says nothing.
    assert BottleneckClassifier("sol4").classify(idle(sm_throughput_pct=50, memory_throughput_pct=50)).primary is None


def test_every_category_is_reachable_in_the_kernelopt_pack(clf):
    reachable = {r.category for r in clf.pack.rules}
    assert reachable == set(CATEGORIES)


def test_diagnose_library_call_from_file_and_render():
    d = diagnose(metrics_path=FIX / "profile" / "softmax" / "metrics.json", rules="roofline")
    text = render(d)
    assert "PRIMARY: dram" in text and "[memory]" in text and "headroom" in text


ZOO_FIX = FIX / "zoo"  # H200 profiles of benchmarks/zoo (provenance.json in each folder)


def test_ncu_advice_repeated_by_several_launches_is_listed_once(clf):
    d = clf.classify(load_metrics(ZOO_FIX / "tiny_launch" / "metrics.json"))  # three tiny kernels
    assert len(d.primary.ncu_rules) == len({(r.rule, r.message) for r in d.primary.ncu_rules}) > 0
    assert len(d.ncu_rules) == len({(r.rule, r.message) for r in d.ncu_rules})


def test_saturated_onchip_unit_is_not_called_a_roofline_to_accept(clf):
    strided = clf.classify(load_metrics(ZOO_FIX / "strided_rowsum" / "metrics.json"))
    assert strided.primary.category == "onchip_memory" and strided.primary.near_roofline  # L1 99% busy
    assert not any("little is left" in n for n in strided.notes)
    assert any("remove that traffic" in n for n in strided.notes)
    dram = clf.classify(load_metrics(ZOO_FIX / "dram_unfused" / "metrics.json"))  # DRAM 82% busy
    assert dram.primary.category == "dram" and any("little is left" in n for n in dram.notes)
