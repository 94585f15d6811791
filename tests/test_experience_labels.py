import pytest

from kernelopt.errors import BadInput
from kernelopt.experience.labels import (
    chip_family,
    derive_outcome,
    normalize_bottleneck,
    parse_optimization,
    strategy_id,
)
from kernelopt.models import CATEGORIES


@pytest.mark.parametrize(
    "label,expected",
    [
        ("memory_bound", "dram"), ("memory", "dram"), ("memory-bound", "dram"), ("Memory Bound", "dram"),
        ("compute_bound", "compute"), ("latency_bound", "latency"), ("occupancy_bound", "occupancy"),
        ("underutilized", "latency"), ("L1", "onchip_memory"), ("shared", "onchip_memory"),
        ("l2", "onchip_memory"), ("launch_bound", "launch"),
    ],
)
def test_aliases_map_to_categories(label: str, expected: str) -> None:
    assert normalize_bottleneck(label) == expected


def test_every_category_maps_to_itself_and_empty_is_none() -> None:
    assert [normalize_bottleneck(c) for c in CATEGORIES] == list(CATEGORIES)
    assert normalize_bottleneck(None) is None and normalize_bottleneck("  ") is None


def test_unknown_bottleneck_lists_the_allowed_ones() -> None:
    with pytest.raises(BadInput) as info:
        normalize_bottleneck("slow")
    assert "'slow'" in str(info.value)
    for c in CATEGORIES:
        assert c in str(info.value)


@pytest.mark.parametrize(
    "speedup,correct,expected",
    [(1.05, True, "success"), (1.049, True, "neutral"), (0.971, None, "neutral"), (0.97, True, "failure"),
     (3.0, False, "incorrect"), (None, True, None), (None, False, "incorrect")],
)
def test_outcome_thresholds(speedup: float | None, correct: bool | None, expected: str | None) -> None:
    assert derive_outcome(speedup, correct) == expected


def test_optimization_name_with_params() -> None:
    assert parse_optimization("vectorize_loads{width=4, BLOCK=128, mode=fast}") == (
        ["vectorize-loads"], {"width": 4, "BLOCK": 128, "mode": "fast"})
    assert parse_optimization("fuse-epilogue+tune_num_warps{num_warps=8}") == (
        ["fuse-epilogue", "tune-num-warps"], {"num_warps": 8})
    assert parse_optimization("") == ([], {})
    assert strategy_id("Tune Num_Warps") == "tune-num-warps"


def test_chip_family() -> None:
    assert chip_family("sm_90") == chip_family("sm_90a") == chip_family("SM90") == chip_family("9.0") == "sm_9"
    assert chip_family("NVIDIA H100 80GB HBM3") == "sm_9"
    assert chip_family("sm_80") == "sm_8" != chip_family("sm_90")
    assert chip_family(None) is None
