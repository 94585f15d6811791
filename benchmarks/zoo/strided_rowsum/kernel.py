"""Planted: uncoalesced loads. Each thread owns one row and walks along it, so the
32 lanes of a warp read 32 different rows (addresses N*4 bytes apart) on every
load: 32 sectors per request, each used for 4 bytes. The lines are reused on the
next 7 column steps, so traffic stays in L1/L2 rather than DRAM: the kernel is
bound by L1/L2 transactions, not by DRAM bandwidth."""

import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_strided_kernel(x_ptr, y_ptr, m, N: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = rows < m
    acc = tl.zeros([BLOCK_M], dtype=tl.float32)
    for j in range(0, N):
        acc += tl.load(x_ptr + rows * N + j, mask=mask, other=0.0)
    tl.store(y_ptr + rows, acc, mask=mask)


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, device=x.device, dtype=torch.float32)
    rowsum_strided_kernel[(triton.cdiv(m, 128),)](x, y, m, N=n, BLOCK_M=128, num_warps=4)
    return y
