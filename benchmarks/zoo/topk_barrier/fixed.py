"""Fix: one warp per row (32 values per thread). The maximum and its index reduce in
registers and with warp shuffles: no shared memory, no barriers."""

import torch
import triton
import triton.language as tl


@triton.jit
def topk_kernel(x_ptr, out_ptr, n_cols, k, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=-float("inf"))
    for i in range(k):
        m = tl.max(x, axis=0)
        first = tl.min(tl.where(x == m, offs, BLOCK), axis=0)  # ties: take the lowest index once
        tl.store(out_ptr + row * k + i, m)
        x = tl.where(offs == first, -float("inf"), x)


def kernel_function(x: torch.Tensor, K: int) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty((rows, K), device=x.device, dtype=x.dtype)
    topk_kernel[(rows,)](x, out, cols, K, BLOCK=triton.next_power_of_2(cols), num_warps=1)
    return out
