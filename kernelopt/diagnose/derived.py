"""Derived values: quantities rules need that no profiler reports directly.

They are computed from the catalog values (and, for kernel counts, from the
Metrics object) and added beside them, so a rule or a strategy's `when` can say
`stall_long_scoreboard == max_stall` or `wave_efficiency < 0.7`. A derived value
is present only when the values it is computed from are; `max_*` take the maximum
over whichever of their inputs are present.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelopt.models.metrics import Metrics

STALL_KEYS: tuple[str, ...] = (
    "stall_long_scoreboard", "stall_short_scoreboard", "stall_mio_throttle", "stall_lg_throttle",
    "stall_barrier", "stall_membar", "stall_branch_resolving", "stall_wait", "stall_math_pipe_throttle",
    "stall_tex_throttle", "stall_dispatch_stall", "stall_drain", "stall_no_instruction", "stall_sleeping",
    "stall_imc_miss",
)  # stall_selected / stall_not_selected are issue states, not reasons a warp waits
PIPE_KEYS: tuple[str, ...] = ("pipe_fma_pct", "pipe_alu_pct", "pipe_fp64_pct", "pipe_tensor_pct", "pipe_xu_pct", "pipe_lsu_pct")
OCCUPANCY_LIMIT_KEYS: tuple[str, ...] = (
    "occupancy_limit_registers", "occupancy_limit_shared_mem", "occupancy_limit_warps", "occupancy_limit_blocks",
)

# key -> meaning (documentation, and the names pack conditions may use besides catalog keys)
DERIVED: dict[str, str] = {
    "max_stall": "largest warp-stall reason, cycles per issued instruction (selected/not_selected excluded)",
    "dominant_stall_share": "max_stall / warp_cycles_per_issued_instruction (0..1)",
    **{f"{k}_share": f"{k} / warp_cycles_per_issued_instruction (0..1)" for k in STALL_KEYS},
    "max_pipe_pct": "utilisation of the busiest execution pipe, %",
    "max_throughput_pct": "max(sm_throughput_pct, memory_throughput_pct): the busiest unit, %",
    "onchip_throughput_pct": "max(l1tex_throughput_pct, l2_throughput_pct), %",
    "occupancy_ratio": "achieved_occupancy_pct / theoretical_occupancy_pct (0..1)",
    "min_occupancy_limit": "smallest of the occupancy_limit_* values: the binding limiter (blocks per SM)",
    "grid_per_sm": "grid_size / sm_count: CTAs per SM",
    "wave_efficiency": "waves_per_sm / ceil(waves_per_sm): share of the last wave's SM slots that hold work",
    "shared_bank_conflicts": "shared_bank_conflicts_ld + shared_bank_conflicts_st",
    "kernel_count": "number of kernels profiled for the candidate",
    "max_kernel_duration_ns": "duration of the longest kernel, ns",
    "mean_kernel_duration_ns": "mean kernel duration, ns",
}


# Derived values that combine several inputs and are computed from whichever are present:
# `derive` reads its inputs from here, so `incomplete_inputs` names exactly what it lacked.
PARTIAL_INPUTS: dict[str, tuple[str, ...]] = {
    "max_stall": STALL_KEYS,
    "dominant_stall_share": STALL_KEYS,
    "max_pipe_pct": PIPE_KEYS,
    "max_throughput_pct": ("sm_throughput_pct", "memory_throughput_pct"),
    "onchip_throughput_pct": ("l1tex_throughput_pct", "l2_throughput_pct"),
    "min_occupancy_limit": OCCUPANCY_LIMIT_KEYS,
    "shared_bank_conflicts": ("shared_bank_conflicts_ld", "shared_bank_conflicts_st"),
}


def incomplete_inputs(values: dict[str, float], names: frozenset[str] | set[str]) -> list[str]:
    """Inputs missing from the derived values among `names` that were computed from a partial set:
    a rule reading `max_stall` with half the stall reasons absent is less certain, and says why."""
    out: set[str] = set()
    for name in names:
        if name in PARTIAL_INPUTS and name in values:
            out.update(k for k in PARTIAL_INPUTS[name] if k not in values)
    return sorted(out)


def _present(values: dict[str, float], keys: tuple[str, ...]) -> list[float]:
    out = []
    for k in keys:
        v = values.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append(float(v))
    return out


def _num(values: dict[str, float], key: str) -> float | None:
    got = _present(values, (key,))
    return got[0] if got else None


def derive(values: dict[str, float], metrics: "Metrics | None" = None) -> dict[str, float]:
    """The derived values computable from `values` (and `metrics`), keyed as in DERIVED."""
    out: dict[str, float] = {}
    stalls = _present(values, STALL_KEYS)
    if stalls:
        out["max_stall"] = max(stalls)
    cpi = _num(values, "warp_cycles_per_issued_instruction")
    if cpi and cpi > 0:
        if stalls:
            out["dominant_stall_share"] = max(stalls) / cpi
        for k in STALL_KEYS:
            v = _num(values, k)
            if v is not None:
                out[f"{k}_share"] = v / cpi
    pipes = _present(values, PARTIAL_INPUTS["max_pipe_pct"])
    if pipes:
        out["max_pipe_pct"] = max(pipes)
    units = _present(values, PARTIAL_INPUTS["max_throughput_pct"])
    if units:
        out["max_throughput_pct"] = max(units)
    onchip = _present(values, PARTIAL_INPUTS["onchip_throughput_pct"])
    if onchip:
        out["onchip_throughput_pct"] = max(onchip)
    achieved, theoretical = _num(values, "achieved_occupancy_pct"), _num(values, "theoretical_occupancy_pct")
    if achieved is not None and theoretical:
        out["occupancy_ratio"] = achieved / theoretical
    limits = _present(values, PARTIAL_INPUTS["min_occupancy_limit"])
    if limits:
        out["min_occupancy_limit"] = min(limits)
    grid, sms = _num(values, "grid_size"), _num(values, "sm_count")
    if grid is not None and sms:
        out["grid_per_sm"] = grid / sms
    waves = _num(values, "waves_per_sm")
    if waves is not None and waves > 0:
        out["wave_efficiency"] = waves / math.ceil(waves)
    conflicts = _present(values, PARTIAL_INPUTS["shared_bank_conflicts"])
    if conflicts:
        out["shared_bank_conflicts"] = sum(conflicts)
    if metrics is not None and metrics.kernels:
        durations = [k.duration_ns for k in metrics.kernels if k.duration_ns is not None]
        out["kernel_count"] = float(len(metrics.kernels))
        if durations:
            out["max_kernel_duration_ns"] = max(durations)
            out["mean_kernel_duration_ns"] = sum(durations) / len(durations)
    return out
