"""Device table lookup, the measured-ceilings cache and the roofline arithmetic."""

import json
from pathlib import Path

import pytest

from kernelopt.models.metrics import Metrics
from kernelopt.devices import (
    Ceilings, cache_path, cached_ceilings, compute_peak, dram_peak, known_devices, lookup_device, store_ceilings,
)
from kernelopt.profile.devices import attach_roofline, roofline

FX = Path(__file__).parent / "fixtures" / "profile"


@pytest.fixture(autouse=True)
def cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


@pytest.mark.parametrize(
    "name, row",
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA H200", "NVIDIA H200 SXM"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 SXM4 40GB"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"),
        ("NVIDIA L40S", "NVIDIA L40S"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ],
)
def test_lookup(name: str, row: str):
    spec = lookup_device(name)
    assert spec is not None and spec.name == row


def test_unknown_device_and_sources():
    assert lookup_device("Tesla K80") is None and lookup_device(None) is None
    assert all(d.source and d.dram_bytes_per_s and d.flops.get("fp32") for d in known_devices())


def _metrics(device: str, **values: float) -> Metrics:
    return Metrics(source="json", device=device, combined=dict(values))


def test_roofline_from_datasheet():
    m = _metrics("NVIDIA H200", duration_ns=1e6, dram_bytes=2.4e9, flop_count_fp32=6.7e9, flop_count_fp64=1.0)
    r = roofline(m)
    assert not r.measured and r.precision == "fp32"
    assert r.achieved_bytes_per_s == pytest.approx(2.4e12) and r.dram_fraction == pytest.approx(0.5)
    assert r.achieved_flops_per_s == pytest.approx(6.7e12) and r.compute_fraction == pytest.approx(0.1)


def test_measured_ceilings_win_and_are_said():
    store_ceilings(Ceilings(device="NVIDIA H200", driver="580.1", dram_bytes_per_s=4.0e12, flops={"fp32": 50e12},
                    measured_at="2026-11-22T00:00:00+00:00"))
    assert json.loads(cache_path().read_text())["NVIDIA H200|580.1"]["dram_bytes_per_s"] == 4.0e12
    assert cached_ceilings("NVIDIA H200").dram_bytes_per_s == 4.0e12
    assert cached_ceilings("NVIDIA H200", "999") is None
    m = attach_roofline(_metrics("NVIDIA H200", duration_ns=1e6, dram_bytes=2.0e9, flop_count_fp32=5e9))
    assert m.roofline.measured and m.combined["dram_roofline_fraction"] == pytest.approx(0.5)
    assert m.combined["compute_roofline_fraction"] == pytest.approx(0.1)
    assert any("measured ceilings" in n for n in m.notes)


def test_one_choice_of_peaks_and_its_fallbacks():
    """Measured where cached, else the datasheet, per figure; `highest` (a floor on time) takes the larger."""
    assert dram_peak("NVIDIA H200") == (4.8e12, "datasheet DRAM (NVIDIA H200 SXM)")
    assert dram_peak("Tesla K80") == (None, None) and compute_peak("NVIDIA H200", None) == (None, None)
    store_ceilings(Ceilings(device="NVIDIA H200", driver="580.1", dram_bytes_per_s=4.0e12, flops={"fp32": 50e12},
                    measured_at="2026-11-22T00:00:00+00:00"))
    assert dram_peak("NVIDIA H200") == (4.0e12, "measured DRAM")
    assert dram_peak("NVIDIA H200", highest=True) == (4.8e12, "datasheet DRAM (NVIDIA H200 SXM)")
    assert compute_peak("NVIDIA H200", "fp32") == (50e12, "measured fp32")
    # A precision the measurement did not cover falls back to the datasheet.
    assert compute_peak("NVIDIA H200", "fp64") == (34e12, "datasheet fp64 (NVIDIA H200 SXM)")


def test_corrupt_cache_is_ignored():
    cache_path().parent.mkdir(parents=True, exist_ok=True)
    cache_path().write_text("{broken")
    assert cached_ceilings("NVIDIA H200") is None


def test_no_roofline_without_device_or_duration():
    assert roofline(_metrics("Tesla K80", duration_ns=1.0, dram_bytes=1.0)) is None
    assert roofline(_metrics("NVIDIA H200", dram_bytes=1.0)) is None


def test_live_fixture_roofline_is_consistent():
    """The GPU-written metrics.json: fraction = dram_bytes / duration / datasheet bandwidth."""
    m = Metrics.model_validate_json((FX / "softmax" / "metrics.json").read_text())
    v = m.combined
    assert m.roofline.dram_fraction == pytest.approx(v["dram_bytes"] / (v["duration_ns"] * 1e-9) / 4.8e12)
    assert 0 < m.roofline.dram_fraction < 1 and 0 < m.roofline.compute_fraction < 1


@pytest.mark.parametrize("example", ["softmax", "matvec", "rmsnorm"])
def test_roofline_agrees_with_ncu_own_utilisation(example: str):
    """Independent checks on real H200 reports: bytes/duration over the datasheet bandwidth is
    ncu's DRAM throughput, and FLOPs/duration over the clock-scaled FP32 peak never exceeds
    the FMA pipe's utilisation (an FP32 FMA pipe at 100% is the FP32 peak)."""
    from kernelopt.profile import import_metrics

    m = import_metrics(FX / example / "profile.ncu-rep")
    v, r = m.values(), m.roofline
    assert r.dram_fraction == pytest.approx(v["dram_throughput_pct"] / 100, rel=0.03)
    assert r.sm_clock_scale == pytest.approx(v["sm_frequency_hz"] / (v["sm_max_frequency_khz"] * 1e3))
    assert 0.5 < r.sm_clock_scale < 1
    assert r.compute_fraction <= v["pipe_fma_pct"] / 100 + 0.01


def test_clock_scaled_peak_is_exact_for_an_fma_bound_kernel(tmp_path):
    """An FMA-only kernel at 90% FMA pipe utilisation reads 0.90 of the clock-scaled peak."""
    import json

    from kernelopt.profile import import_metrics

    dump = {"device": "NVIDIA H200", "metrics": {"fma": {
        "gpu__time_duration.sum": {"value": 1.0, "unit": "ms"},
        "gpc__cycles_elapsed.avg.per_second": {"value": 1.5, "unit": "Ghz"},
        "device__attribute_clock_rate": 2000000,
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 0,
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 0,
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 0.9 * 67e12 * 0.75 * 1e-3 / 2}}}
    p = tmp_path / "d.json"
    p.write_text(json.dumps(dump))
    m = import_metrics(p)
    assert m.roofline.sm_clock_scale == pytest.approx(0.75)
    assert m.roofline.compute_fraction == pytest.approx(0.9)


def test_tensor_roofline_from_a_real_h100_matmul_profile():
    """The zoo's fp16 4096^3 tl.dot, profiled on an H100: ncu's tensor-pipe utilisation is the
    tensor roofline fraction, and it agrees with the matmul's analytic FLOP rate over the
    datasheet fp16 tensor peak at the profiled clock to within 0.1."""
    from kernelopt.profile import import_metrics

    m = import_metrics(FX.parent / "zoo_h100" / "tensor_matmul" / "raw.csv")
    roof = m.roofline
    assert roof is not None and roof.tensor_fraction == pytest.approx(m.values()["pipe_tensor_pct"] / 100)
    assert m.combined["tensor_roofline_fraction"] == roof.tensor_fraction
    values = m.values()
    analytic = 2 * 4096**3 / (values["duration_ns"] * 1e-9)
    peak = lookup_device(m.device).flops["fp16_tensor"] * values["sm_frequency_hz"] / (values["sm_max_frequency_khz"] * 1e3)
    assert 0.5 < roof.tensor_fraction < 1.0 and abs(analytic / peak - roof.tensor_fraction) < 0.1
    # A kernel without tensor work gets no tensor fraction.
    fma = import_metrics(FX.parent / "zoo_h100" / "fma_loop" / "raw.csv")
    assert fma.roofline.tensor_fraction is None and "tensor_roofline_fraction" not in fma.combined
