"""Fix: many small CTAs (256 elements, 2 warps each): 140 x 32 = 4480 CTAs spread evenly
over the SMs, so no SM ends up with much more work than the others."""

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
    x = x.contiguous()
    n = x.numel()
    y = torch.empty_like(x)
    iterate_kernel[(triton.cdiv(n, 256),)](x, y, n, ITERS, A, B, BLOCK=256, num_warps=2)
    return y
