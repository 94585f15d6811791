"""First draft: softmax, one program per row, three passes over the row in BLOCK chunks.

Expect slow: the row is read three times (max, sum of exponentials, normalize)
where one read suffices; at 64 KiB a row the re-reads hit L2 at best. BLOCK=1024
and the default num_warps were not chosen for anything.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_cols
    m = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    start = 0  # one tile covers the row
    cols = start + tl.arange(0, BLOCK)
    row_2 = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf"))
    m = tl.maximum(m, row_2)
    row_max = tl.max(m, axis=0)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    start = 0  # one tile covers the row
    cols = start + tl.arange(0, BLOCK)
    x = row_2
    s += tl.exp(x - row_max)
    denom = tl.sum(s, axis=0)
    start = 0  # one tile covers the row
    cols = start + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = row_2
    tl.store(y_ptr + base + cols, tl.exp(x - row_max) / denom, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        assert dim in (-1, 1), "this kernel reduces over the last dimension of a matrix"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols), num_warps=8)
        return y
