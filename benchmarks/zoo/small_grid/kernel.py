"""Planted: one program per row. The grid has ROWS (= 8) CTAs on a 132-SM GPU, so
more than 90% of the SMs have nothing to do while 8 of them stream 16 MiB each."""

import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty(rows, device=x.device, dtype=torch.float32)
    rowsum_kernel[(rows,)](x, y, cols, BLOCK=4096, num_warps=8)
    return y
