"""Planted: a reduction with a barrier per step. One row of 1024 values per CTA of 32
warps (one value per thread); each of the K steps takes the row maximum and the first
index holding it, two reductions that cross all 32 warps (warp shuffles, then shared
memory behind barriers), with a few instructions of work in between. Measured on an
H200 (tests/fixtures/zoo/topk_barrier): the shuffles, shared-memory exchanges and
barrier arrivals of those reductions saturate L1TEX through the LSU (L1 85%, LSU pipe
80%); warps wait mostly on their results (short scoreboard), then at barriers."""

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
    topk_kernel[(rows,)](x, out, cols, K, BLOCK=triton.next_power_of_2(cols), num_warps=32)
    return out
