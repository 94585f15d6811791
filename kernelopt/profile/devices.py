"""The roofline distance of a profiled kernel, against the device ceilings of `kernelopt.devices`."""

from __future__ import annotations

from kernelopt.devices import cached_ceilings, choose_compute_peak, choose_dram_peak, lookup_device
from kernelopt.models.metrics import Metrics, Roofline

# catalog FLOP-count key -> the ceiling it is compared against. FP16 non-tensor FLOPs
# are reported but not placed on the roofline: datasheets publish no such peak.
FLOP_KEYS = {"flop_count_fp32": "fp32", "flop_count_fp64": "fp64"}


def roofline(metrics: Metrics, device: str | None = None) -> Roofline | None:
    """Achieved DRAM bytes/s and FLOP/s of the profiled kernels as fractions of the ceilings.

    Uses the combined view (all kernels: total bytes and FLOPs over total duration).
    Measured ceilings are used when cached for this device, else the datasheet row.
    """
    device = device or metrics.device
    values = metrics.values()
    duration_ns = values.get("duration_ns")
    if not device or not duration_ns:
        return None
    measured = cached_ceilings(device)
    spec = lookup_device(device)
    if measured is None and spec is None:
        return None
    seconds = duration_ns * 1e-9
    peak_bw, _ = choose_dram_peak(measured, spec, highest=False)  # the ceilings read once, above
    out = Roofline(device=device, measured=measured is not None, peak_dram_bytes_per_s=peak_bw)
    if "dram_bytes" in values or "dram_bytes_per_second" in values:
        # dram_bytes_per_second's combined view is duration-weighted: total bytes / total time
        out.achieved_bytes_per_s = (
            values["dram_bytes"] / seconds if "dram_bytes" in values else values["dram_bytes_per_second"]
        )
        if peak_bw:
            out.dram_fraction = out.achieved_bytes_per_s / peak_bw
    counts = {FLOP_KEYS[k]: v for k, v in values.items() if k in FLOP_KEYS and v}
    if counts:
        precision = max(counts, key=lambda p: counts[p])
        out.precision = precision
        out.achieved_flops_per_s = counts[precision] / seconds
        peak, _ = choose_compute_peak(measured, spec, precision)
        if peak and not (measured is not None and measured.flops.get(precision)):
            # Datasheet peaks hold at the maximum clock; ncu profiles at base clock by default.
            clock, max_khz = values.get("sm_frequency_hz"), values.get("sm_max_frequency_khz")
            if clock and max_khz and clock < max_khz * 1e3:
                out.sm_clock_scale = clock / (max_khz * 1e3)
                peak *= out.sm_clock_scale
        out.peak_flops_per_s = peak
        if peak:
            out.compute_fraction = out.achieved_flops_per_s / peak
    # Tensor-core FLOPs are not counted: on Hopper ncu's ops-path counters are reported to
    # miss wgmma, which Triton emits for tl.dot. The tensor pipe's own utilisation (of its
    # peak, at the profiled clock) is ncu's measure of how close the kernel runs to it.
    if values.get("pipe_tensor_pct"):
        out.tensor_fraction = values["pipe_tensor_pct"] / 100.0
    return out


_ROOFLINE_NOTE = "roofline fractions are relative to"


def attach_roofline(metrics: Metrics) -> Metrics:
    """Set `metrics.roofline` and the catalog keys dram_/compute_/tensor_roofline_fraction."""
    roof = roofline(metrics)
    if roof is None:
        return metrics
    metrics.roofline = roof
    which = "measured ceilings (kernelopt env --measure)" if roof.measured else "datasheet peaks"
    note = f"{_ROOFLINE_NOTE} {which} of {roof.device}"
    if roof.sm_clock_scale:
        note += f"; the FLOP peak is scaled by {roof.sm_clock_scale:.3f} to the SM clock ncu profiled at"
    # A re-imported metrics.json already carries the note of its first attach: replace it, not repeat it.
    metrics.notes[:] = [n for n in metrics.notes if not n.startswith(_ROOFLINE_NOTE)] + [note]
    for key, value in (("dram_roofline_fraction", roof.dram_fraction), ("compute_roofline_fraction", roof.compute_fraction),
                       ("tensor_roofline_fraction", roof.tensor_fraction)):
        if value is not None and metrics.combined is not None:
            metrics.combined[key] = value
    return metrics
