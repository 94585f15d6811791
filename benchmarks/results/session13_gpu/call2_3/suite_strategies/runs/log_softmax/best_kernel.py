"""First draft: log-softmax, one program per row, the whole row in one block.

Expect slow: an 8192-wide row in a default 4-warp program is 64 fp32 values
per thread, and each program runs load -> max -> sum -> store in sequence, two
block-wide reductions between the load and the store; num_warps was never
considered (an offline sm_90 compile uses 80 registers per thread, no spills).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)
    log_denom = tl.log(tl.sum(tl.exp(shifted), axis=0))
    tl.store(y_ptr + row * n_cols + cols, shifted - log_denom, mask=mask)


def kernel_function(x: torch.Tensor, dim: int) -> torch.Tensor:
    assert dim in (-1, 1), "this kernel reduces over the last dimension of a matrix"
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    log_softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols), num_stages=2, num_warps=16)
    return y
