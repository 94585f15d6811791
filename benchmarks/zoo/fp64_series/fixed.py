"""Fix: evaluate in float32, the precision of the data (the error stays well inside
the tolerance): the FP32 FMA pipe has twice the FP64 rate on an H100."""

import torch
import triton
import triton.language as tl


@triton.jit
def series_kernel(x_ptr, coef_ptr, y_ptr, n, deg, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(deg):
        y = y * x + tl.load(coef_ptr + (deg - 1 - i))
    tl.store(y_ptr + offs, y, mask=mask)


def kernel_function(x: torch.Tensor, coef: torch.Tensor, DEG: int) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    series_kernel[(triton.cdiv(n, 1024),)](x, coef, y, n, DEG, BLOCK=1024, num_warps=4)
    return y
