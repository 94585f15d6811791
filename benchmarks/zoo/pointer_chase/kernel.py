"""Planted: a serial dependency chain. Each CTA follows ONE chain; every hop's address
is the previous hop's loaded value, so each load waits for the last one (an L2 round
trip) and an SM has only as many loads in flight as resident CTAs. Memory units idle
while warps stall on the long scoreboard."""

import torch
import triton
import triton.language as tl


@triton.jit
def chase_kernel(table_ptr, start_ptr, out_ptr, hops):
    chain = tl.program_id(0)
    idx = tl.load(start_ptr + chain)
    for _ in range(hops):
        idx = tl.load(table_ptr + idx)
    tl.store(out_ptr + chain, idx)


def kernel_function(table: torch.Tensor, start: torch.Tensor, HOPS: int) -> torch.Tensor:
    out = torch.empty_like(start)
    chase_kernel[(start.numel(),)](table, start, out, HOPS, num_warps=4)
    return out
