"""Planted: a pure FMA loop. Each element is loaded once and then goes through
ITERS dependent fused multiply-adds in registers: ~8 FLOP per byte of DRAM traffic
per iteration x 4096 iterations, so the FP32 FMA pipe is the limit."""

import torch
import triton
import triton.language as tl


@triton.jit
def iterate_kernel(x_ptr, y_ptr, n, iters, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    for _ in range(iters):
        x = x * a + b
    tl.store(y_ptr + offs, x, mask=mask)


def kernel_function(x: torch.Tensor, ITERS: int, A: float, B: float) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    iterate_kernel[(triton.cdiv(n, 1024),)](x, y, n, ITERS, A, B, BLOCK=1024, num_warps=4)
    return y
