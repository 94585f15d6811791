"""The metric catalog: one table, aliases, units, formulas, honest labels."""

from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.models.common import CATEGORIES  # noqa: F401 - vocabulary import must stay cheap
from kernelopt.profile.catalog import convert, evaluate, load_catalog, parse_value

# The keys every other stage may rely on (the shared vocabulary in the design brief).
SHARED_KEYS = """duration_ns elapsed_cycles sm_active_cycles sm_frequency_hz dram_frequency_hz sm_throughput_pct
memory_throughput_pct dram_throughput_pct l1tex_throughput_pct l2_throughput_pct dram_bytes_read dram_bytes_write
dram_bytes l2_hit_rate_pct l1tex_hit_rate_pct shared_bank_conflicts_ld shared_bank_conflicts_st
shared_wavefronts_per_request global_load_sectors_per_request global_store_sectors_per_request local_spill_requests
issue_slots_busy_pct ipc_issued_active pipe_fma_pct pipe_alu_pct pipe_fp64_pct pipe_tensor_pct pipe_xu_pct
pipe_lsu_pct achieved_occupancy_pct theoretical_occupancy_pct occupancy_limit_registers occupancy_limit_shared_mem
occupancy_limit_warps occupancy_limit_blocks grid_size block_size threads registers_per_thread
shared_mem_per_block_bytes waves_per_sm sm_count warp_cycles_per_issued_instruction stall_long_scoreboard
stall_short_scoreboard stall_mio_throttle stall_lg_throttle stall_barrier stall_membar stall_branch_resolving
stall_wait stall_math_pipe_throttle stall_tex_throttle stall_not_selected stall_selected stall_dispatch_stall
stall_drain stall_no_instruction stall_sleeping stall_imc_miss threads_per_instruction static_registers_per_thread
static_spill_bytes static_shared_mem_bytes num_warps num_stages dram_roofline_fraction
compute_roofline_fraction""".split()


def test_catalog_has_every_shared_key():
    catalog = load_catalog()
    assert not [k for k in SHARED_KEYS if k not in catalog.by_key]


def test_labels_are_honest():
    c = load_catalog().by_key
    # memory throughput is the max over units, not DRAM; DRAM has its own entry and name
    assert "DRAM" not in c["memory_throughput_pct"].label.split("(")[0]
    assert c["memory_throughput_pct"].names[0].startswith("gpu__compute_memory_throughput")
    assert c["dram_throughput_pct"].label == "DRAM throughput"
    stalls = [e for e in c.values() if e.group == "warp stalls"]
    assert len(stalls) >= 18 and all(e.unit == "cycles/inst" and "%" not in e.label for e in stalls)
    assert "0-32" in c["threads_per_instruction"].label and c["threads_per_instruction"].unit != "%"
    assert all(c[k].unit == "fraction" for k in ("dram_roofline_fraction", "compute_roofline_fraction",
                                                 "tensor_roofline_fraction"))


def test_aliases_resolve_to_one_key_and_the_first_name_wins():
    catalog = load_catalog()
    old = {"dram__throughput.avg.pct_of_peak_sustained_elapsed": (41.0, "%")}
    found, rest = catalog.resolve(old)
    assert found["dram_throughput_pct"].value == 41.0
    assert found["dram_throughput_pct"].name == "dram__throughput.avg.pct_of_peak_sustained_elapsed"
    assert rest == {}
    both = {**old, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": (40.0, "%")}
    found, rest = catalog.resolve(both)
    assert found["dram_throughput_pct"].value == 40.0
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in rest


def test_units_convert_to_the_catalog_unit():
    assert convert(45.952, "us", "ns") == 45952.0
    assert convert(1.024, "Kbyte/block", "byte/block") == 1024.0
    assert convert(3.2, "Ghz", "hz") == 3.2e9
    assert convert(3.951209, "Tbyte/s", "byte/s") == pytest.approx(3.951209e12)
    assert convert(7.0, "inst", "cycles/inst") == 7.0  # no scale: passes through
    found, _ = load_catalog().resolve({"gpu__time_duration.sum": (45.952, "us")})
    assert found["duration_ns"].value == 45952.0 and found["duration_ns"].unit == "ns"


def test_formula_uses_base_units_and_needs_all_inputs():
    catalog = load_catalog()
    found, _ = catalog.resolve({"dram__bytes_read.sum": (2.0, "Mbyte"), "dram__bytes_write.sum": (512.0, "Kbyte")})
    assert found["dram_bytes"].value == 2.512e6
    found, _ = catalog.resolve({"dram__bytes_read.sum": (2.0, "Mbyte")})
    assert "dram_bytes" not in found


def test_formula_evaluator_is_arithmetic_only():
    assert evaluate("(a + b) / (c - 1) * 2", {"a": 1, "b": 3, "c": 3}) == 4.0
    assert evaluate("a / b", {"a": 1, "b": 0}) is None
    with pytest.raises(ValueError):
        evaluate("__import__('os')", {})


def test_parse_value_handles_ncu_display_strings():
    assert parse_value("16,384") == 16384.0
    assert parse_value("no data") is None
    assert parse_value("PolicySpread") == "PolicySpread"


def test_malformed_catalog_names_file_and_line(tmp_path: Path):
    bad = tmp_path / "metrics.yaml"
    bad.write_text("metrics:\n  - key: x\n    label: X\n    unit: '%'\n    group: nowhere\n    aggregate: mean\n    meaning: m\n")
    with pytest.raises(BadInput, match=r"metrics.yaml:\d+: metrics.0.group"):
        load_catalog(str(bad))
