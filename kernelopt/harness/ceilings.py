"""Measuring a device's ceilings (`kernelopt env --measure`): achievable DRAM bandwidth and
matmul rates, timed by the one timing function and cached through `kernelopt.devices`."""

from __future__ import annotations

from typing import Any

from kernelopt.devices import Ceilings, cache_path, cached_ceilings, lookup_device, store_ceilings

COPY_BYTES = 1 << 30  # large enough to defeat any L2 (60 MiB on H200)
MATMUL_N = 8192


def measure_ceilings(*, refresh: bool = False) -> Ceilings:
    """Measure achievable DRAM bandwidth and matmul rates on the current GPU, once; cache them.

    Bandwidth: a 1 GiB device-to-device copy, counted as bytes read + written.
    FP32: an 8192^3 matmul with TF32 off (the FP32 pipe); BF16: the same in bf16
    (tensor cores). Timed with `kernelopt.harness.timing.time_callable` (median).
    """
    import datetime

    import torch

    from kernelopt.harness.envinfo import collect_env
    from kernelopt.harness.timing import require_cuda, time_callable

    require_cuda("measuring device ceilings")
    env = collect_env(tools=False)
    device = torch.cuda.get_device_name()
    if not refresh:
        hit = cached_ceilings(device, env.driver)
        if hit is not None:
            return hit
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = time_callable(lambda: dst.copy_(src), flush_l2=False)
    del src, dst
    flops: dict[str, float] = {}
    method: dict[str, Any] = {"copy_bytes": COPY_BYTES, "copy_ms": copy.median_ms, "matmul_n": MATMUL_N}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for precision, dtype, tf32 in (("fp32", torch.float32, False), ("bf16_tensor", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=dtype)
            b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=dtype)
            stats = time_callable(lambda: a @ b, flush_l2=False)
            flops[precision] = 2.0 * MATMUL_N**3 / (stats.median_ms * 1e-3)
            method[f"matmul_{precision}_ms"] = stats.median_ms
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    result = Ceilings(
        device=device,
        driver=env.driver,
        dram_bytes_per_s=2.0 * COPY_BYTES / (copy.median_ms * 1e-3),
        flops=flops,
        method=method,
        measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
    store_ceilings(result)
    return result


def describe_ceilings(measured: dict[str, Any]) -> str:
    """Human lines for `kernelopt env --measure`."""
    c = Ceilings.model_validate(measured)
    lines = [f"measured  DRAM {c.dram_bytes_per_s / 1e12:.2f} TB/s (1 GiB copy, read + write)"]
    lines += [f"measured  {p} matmul {v / 1e12:.1f} TFLOP/s ({MATMUL_N}^3)" for p, v in c.flops.items()]
    spec = lookup_device(c.device)
    if spec and spec.dram_bytes_per_s:
        lines.append(f"datasheet DRAM {spec.dram_bytes_per_s / 1e12:.2f} TB/s ({spec.name})")
    lines.append(f"cached    {cache_path()} ({c.measured_at})")
    return "\n".join(lines)
