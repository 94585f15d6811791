"""First draft: row sums, one program per row looping over the columns.

Expect slow: each iteration loads only BLOCK=64 floats (half a float per thread
with the default 4 warps), so a program keeps one tiny load in flight and waits
for it before the next; bandwidth is bound by latency, not by DRAM.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        assert dim in (-1, 1), "this kernel reduces over the last dimension of a matrix"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty((rows,), device=x.device, dtype=x.dtype)
        row_sum_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=256)
        return y
