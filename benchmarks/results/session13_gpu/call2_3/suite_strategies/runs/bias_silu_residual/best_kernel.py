"""First draft: silu(x + bias) + residual fused in one kernel, one program per row.

Expect slow: the whole row (BLOCK = next power of two of COLS, 16384 at full
size) goes to one default 4-warp program, 128 elements per thread of each of
three tensors. An offline sm_90 compile (Triton 3.9) of that block uses 255
registers per thread without spilling: two programs per SM, low occupancy, and
each thread's loads issued in one burst per row.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def bias_silu_residual_kernel(x_ptr, b_ptr, r_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    base = row * n_cols
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    r = tl.load(r_ptr + base + cols, mask=mask, other=0.0)
    h = x + b
    y = h * tl.sigmoid(h) + r
    tl.store(y_ptr + base + cols, y, mask=mask)


def kernel_function(x: torch.Tensor, residual: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    residual = residual.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    bias_silu_residual_kernel[(rows,)](x, bias, residual, y, cols, BLOCK=triton.next_power_of_2(cols), num_stages=1, num_warps=16)
    return y
