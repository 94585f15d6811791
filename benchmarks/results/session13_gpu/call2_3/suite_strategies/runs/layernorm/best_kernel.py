"""First draft: LayerNorm, one program per row with the whole row in one block.

Expect slow: BLOCK = next power of two of DIM (8192) held by a default 4-warp
program is 64 fp32 values per thread for x alone, plus the centred copy. An
offline sm_90 compile (Triton 3.9) uses 206 registers per thread (no spills):
two programs per SM, so little memory traffic in flight per SM.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, xc * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        layernorm_kernel[(rows,)](x, self.weight, self.bias, y, cols, self.eps, BLOCK=triton.next_power_of_2(cols), num_stages=1)
        return y
