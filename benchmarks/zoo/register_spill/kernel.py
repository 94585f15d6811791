"""Planted: register spills. Each CTA is ONE warp over 16384 elements, so every thread
carries 512 fp32 values through the ITERS loop. That cannot fit in 255 registers: on
sm_90 ptxas keeps 64 registers and puts ~4.8 KB per thread in local memory, and every
iteration loads and stores those values again, so spill traffic (through L1, L2 and
DRAM) dominates the kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def quad_map_kernel(x_ptr, y_ptr, n, iters, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    for _ in range(iters):
        x = x * x * a + b
    tl.store(y_ptr + offs, x, mask=mask)


def kernel_function(x: torch.Tensor, ITERS: int, A: float, B: float) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    quad_map_kernel[(triton.cdiv(n, 16384),)](x, y, n, ITERS, A, B, BLOCK=16384, num_warps=1)
    return y
