"""Fix: one warp per matrix (32 values per thread). Both reductions stay inside the
warp (in-thread adds and shuffles): no shared memory, no bank conflicts, no barriers."""

import torch
import triton
import triton.language as tl


@triton.jit
def sinkhorn_kernel(x_ptr, y_ptr, iters, S: tl.constexpr):
    base = tl.program_id(0) * S * S
    r = tl.arange(0, S)
    offs = base + r[:, None] * S + r[None, :]
    x = tl.load(x_ptr + offs)
    for _ in range(iters):
        x = x / tl.sum(x, axis=1)[:, None]
        x = x / tl.sum(x, axis=0)[None, :]
    tl.store(y_ptr + offs, x)


def kernel_function(x: torch.Tensor, ITERS: int) -> torch.Tensor:
    x = x.contiguous()
    batch, s, _ = x.shape
    y = torch.empty_like(x)
    sinkhorn_kernel[(batch,)](x, y, ITERS, S=s, num_warps=1)
    return y
