"""Planted: two well-written streaming kernels (affine, then relu) through a temporary.

Each pass runs near the DRAM roofline; together they move twice the bytes the
operation needs (read x, write tmp, read tmp, write y).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * scale + shift, mask=mask)


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def kernel_function(x: torch.Tensor, SCALE: float, SHIFT: float) -> torch.Tensor:
    n = x.numel()
    tmp = torch.empty_like(x)
    y = torch.empty_like(x)
    grid = (triton.cdiv(n, 4096),)
    affine_kernel[grid](x, tmp, n, SCALE, SHIFT, BLOCK=4096, num_warps=8)
    relu_kernel[grid](tmp, y, n, BLOCK=4096, num_warps=8)
    return y
