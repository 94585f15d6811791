"""Fix: expose the independent work. Each CTA follows 128 chains at once (one per
thread), so each SM has thousands of independent loads in flight instead of a few;
each chain is still serial, but the latency of one hop overlaps with the others."""

import torch
import triton
import triton.language as tl


@triton.jit
def chase_kernel(table_ptr, start_ptr, out_ptr, chains, hops, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < chains
    idx = tl.load(start_ptr + offs, mask=mask, other=0)
    for _ in range(hops):
        idx = tl.load(table_ptr + idx, mask=mask, other=0)
    tl.store(out_ptr + offs, idx, mask=mask)


def kernel_function(table: torch.Tensor, start: torch.Tensor, HOPS: int) -> torch.Tensor:
    out = torch.empty_like(start)
    n = start.numel()
    chase_kernel[(triton.cdiv(n, 128),)](table, start, out, n, HOPS, BLOCK=128, num_warps=4)
    return out
