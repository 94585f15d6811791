"""Fix: load [BLOCK_M, N] tiles with the contiguous dimension across the lanes
(coalesced: a warp reads consecutive bytes), then reduce along the row."""

import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_tile_kernel(x_ptr, y_ptr, m, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = (rows[:, None] < m) & (c[None, :] < N)
        tile = tl.load(x_ptr + rows[:, None] * N + c[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=1)
    tl.store(y_ptr + rows, acc, mask=rows < m)


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, device=x.device, dtype=torch.float32)
    block_n = min(256, triton.next_power_of_2(n))
    rowsum_tile_kernel[(triton.cdiv(m, 16),)](x, y, m, N=n, BLOCK_M=16, BLOCK_N=block_n, num_warps=4)
    return y
