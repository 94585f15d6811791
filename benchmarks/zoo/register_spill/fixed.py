"""Fix: 1024 elements per 4-warp CTA, 8 values per thread: about 30 registers, no
spills, full occupancy; the loop runs in registers and the kernel streams x once."""

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
    quad_map_kernel[(triton.cdiv(n, 1024),)](x, y, n, ITERS, A, B, BLOCK=1024, num_warps=4)
    return y
