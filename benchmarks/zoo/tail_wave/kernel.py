"""Planted: a tail effect. One 1024-thread CTA per row, 140 rows, on a 132-SM GPU. Each
CTA is compute bound (ITERS FMAs per element), so an SM that gets a second CTA (8 of
them, whether the CTAs run as a second wave or share the SM) needs twice as long while
the other 124 SMs sit idle: the grid shape, not the math, sets the run time."""

import torch
import triton
import triton.language as tl


@triton.jit
def iterate_rows_kernel(x_ptr, y_ptr, cols, iters, a, b, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=mask)
        for _ in range(iters):
            x = x * a + b
        tl.store(y_ptr + row * cols + offs, x, mask=mask)


def kernel_function(x: torch.Tensor, ITERS: int, A: float, B: float) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    iterate_rows_kernel[(rows,)](x, y, cols, ITERS, A, B, BLOCK=8192, num_warps=32)
    return y
