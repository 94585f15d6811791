"""Planted: three tiny launches (scale, shift, relu) for 4096 elements.

Each launch does ~16 KiB of traffic on 4 CTAs: the GPU is idle for almost all of
each kernel's duration, which is dominated by launch and ramp-up latency.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


@triton.jit
def shift_kernel(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + shift, mask=mask)


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def kernel_function(x: torch.Tensor, SCALE: float, SHIFT: float) -> torch.Tensor:
    n = x.numel()
    a = torch.empty_like(x)
    b = torch.empty_like(x)
    y = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    scale_kernel[grid](x, a, n, SCALE, BLOCK=1024, num_warps=4)
    shift_kernel[grid](a, b, n, SHIFT, BLOCK=1024, num_warps=4)
    relu_kernel[grid](b, y, n, BLOCK=1024, num_warps=4)
    return y
