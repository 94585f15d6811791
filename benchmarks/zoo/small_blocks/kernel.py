"""Planted: 32-thread CTAs (num_warps=1, BLOCK=32), one element per thread.

An SM holds at most 32 CTAs, so with one-warp CTAs at most 32 of its 64 warp slots
can ever be filled (theoretical occupancy 50%, limited by blocks per SM), and each
resident thread has a single 4-byte load in flight: far too few bytes in flight to
cover DRAM latency."""

import torch
import triton
import triton.language as tl


@triton.jit
def affine_kernel(x_ptr, y_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale + shift, mask=mask)


def kernel_function(x: torch.Tensor, SCALE: float, SHIFT: float) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    affine_kernel[(triton.cdiv(n, 32),)](x, y, n, SCALE, SHIFT, BLOCK=32, num_warps=1)
    return y
