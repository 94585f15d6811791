"""Planted: Horner evaluation in float64 for float32 data. Every term is a DFMA per
element (8 elements per thread share one coefficient load); the FP64 pipe, with half
the FP32 throughput on an H100 (and far less on other GPUs), limits the kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def series_kernel(x_ptr, coef_ptr, y_ptr, n, deg, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float64)
    y = tl.zeros([BLOCK], dtype=tl.float64)
    for i in range(deg):
        y = y * x + tl.load(coef_ptr + (deg - 1 - i)).to(tl.float64)
    tl.store(y_ptr + offs, y.to(tl.float32), mask=mask)


def kernel_function(x: torch.Tensor, coef: torch.Tensor, DEG: int) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    series_kernel[(triton.cdiv(n, 1024),)](x, coef, y, n, DEG, BLOCK=1024, num_warps=4)
    return y
