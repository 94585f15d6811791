"""Planted: a reduction with a barrier per step. One 32x32 matrix per CTA of 32 warps,
one element per thread, so every column sum crosses warps: partial sums go through
shared memory behind __syncthreads, 16 times per call. Measured on an H200 (ncu,
tests/fixtures/zoo/sinkhorn_barrier): the shared-memory traffic of those cross-warp
reductions is what limits it. Triton's scratch layout for this reduction makes each
shared request take 16.5 wavefronts (2.1e9 bank conflicts), L1/shared is 98% busy and
warps mostly wait on the short scoreboard (shared-memory results); barrier stalls come
second."""

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
    sinkhorn_kernel[(batch,)](x, y, ITERS, S=s, num_warps=32)
    return y
