import json
from pathlib import Path

from conftest import load_script

from kernelopt.experience.importers import read_records

ROOT = Path(__file__).resolve().parent.parent


def load_module():
    return load_script(ROOT / "benchmarks/experience/seed_from_zoo.py")


def test_converts_timings_with_labels_and_skips_what_is_missing(tmp_path: Path) -> None:
    mod = load_module()
    # Input in the shape benchmarks/zoo_timings.py writes; the numbers are test inputs, not measurements.
    doc = {
        "provenance": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "test", "date": "2026-01-01T00:00:00+00:00"},
        "kernels": [
            {"name": "strided_rowsum", "kernel_median_ms": 3.0, "fixed_median_ms": 1.5},
            {"name": "dram_unfused", "kernel_median_ms": 1.0, "fixed_median_ms": 1.02},
            {"name": "fma_loop", "kernel_median_ms": 1.0, "fixed_median_ms": 0.5},
            {"name": "tiny_launch", "kernel_median_ms": 1.0, "fixed_error": "crashed"},
        ],
    }
    src = tmp_path / "zoo.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "zoo_measured.jsonl"
    import sys

    argv, sys.argv = sys.argv, ["seed_from_zoo.py", str(src), "-o", str(out)]
    try:
        assert mod.main() == 0
    finally:
        sys.argv = argv
    by_name = {r.kernel: r for r in read_records(out)}
    assert "tiny_launch" not in by_name  # its fix has no timing
    strided, unfused = by_name["strided_rowsum"], by_name["dram_unfused"]
    assert (strided.kernel, strided.bottleneck, strided.stall) == ("strided_rowsum", "onchip_memory", "uncoalesced_access")
    assert strided.strategies == ["coalesced-access"] and strided.speedup == 2.0 and strided.outcome == "success"
    assert strided.time_before_ms == 3.0 and "NVIDIA H100" in (strided.notes or "")
    assert unfused.outcome == "neutral"  # 1.0 / 1.02 is inside the noise band
    assert unfused.bottleneck == "dram" and unfused.strategies == ["fuse-elementwise-passes"]


def test_every_mapped_strategy_exists_in_the_packs() -> None:
    from kernelopt.strategies import list_strategies

    known = {s.id for s in list_strategies()[0]}
    mod = load_module()
    for name, ids in mod.ZOO_FIX_STRATEGIES.items():
        assert (ROOT / "benchmarks/zoo" / name / "label.yaml").is_file(), name
        assert set(ids) <= known, (name, ids)
