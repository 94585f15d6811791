"""First draft: RMSNorm, one program per row, two loops over the row in BLOCK chunks.

Expect slow: the row is read twice (once for the sum of squares, once to
normalize), relying on L2 for the second pass; BLOCK=512 with the default warps
keeps little in flight per program.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    start = 0  # one tile covers the row
    cols = start + tl.arange(0, BLOCK)
    row_2 = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=0.0)
    x = row_2
    acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    start = 0  # one tile covers the row
    cols = start + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = row_2
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + base + cols, x * rstd * w, mask=mask)


def kernel_function(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    rmsnorm_kernel[(rows,)](x, weight, y, cols, eps, BLOCK=triton.next_power_of_2(cols))
    return y
