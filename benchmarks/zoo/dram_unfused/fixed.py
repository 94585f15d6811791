"""Fix: one fused pass, half the DRAM bytes (read x once, write y once)."""

import torch
import triton
import triton.language as tl


@triton.jit
def affine_relu_kernel(x_ptr, y_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x * scale + shift, 0.0), mask=mask)


def kernel_function(x: torch.Tensor, SCALE: float, SHIFT: float) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    affine_relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, SCALE, SHIFT, BLOCK=4096, num_warps=8)
    return y
