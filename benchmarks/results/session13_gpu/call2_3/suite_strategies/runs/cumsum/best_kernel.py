"""First draft: cumsum, one program per row, a serial chain of BLOCK-wide scans.

Expect slow: each 256-wide chunk is scanned, then the carry is added and the next
chunk waits for it; a program keeps one small load in flight and the chunk loop
is a dependent chain of ROWS-parallel work only.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_cols
    carry = 0.0
    for start in tl.range(0, n_cols, BLOCK, num_stages=2):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
        scanned = tl.cumsum(x, axis=0) + carry
        tl.store(y_ptr + base + cols, scanned, mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        assert dim in (-1, 1), "this kernel scans along the last dimension of a matrix"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        cumsum_kernel[(rows,)](x, y, cols, BLOCK=1024)
        return y
