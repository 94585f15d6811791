"""First draft: max over dim 1, one program per (batch, BLOCK_N columns), one row per step.

Expect slow: BLOCK_N=32 columns is a 128-byte load per iteration for a whole
4-warp program, and the DIM1 loop is serial in it (load, wait, compare); the
grid is BATCH * DIM2 / 32 programs of long dependent chains.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def max_dim1_kernel(x_ptr, y_ptr, dim1, dim2, stride_b, stride_1, BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < dim2
    acc = tl.full((BLOCK_N,), -float("inf"), dtype=tl.float32)
    for i in range(0, dim1):
        v = tl.load(x_ptr + b * stride_b + i * stride_1 + cols, mask=mask, other=-float("inf"))
        acc = tl.maximum(acc, v)
    tl.store(y_ptr + b * dim2 + cols, acc, mask=mask)


def kernel_function(x: torch.Tensor, dim: int) -> torch.Tensor:
    assert dim == 1, "this kernel reduces over dimension 1 of a 3-D tensor"
    x = x.contiguous()
    batch, dim1, dim2 = x.shape
    y = torch.empty((batch, dim2), device=x.device, dtype=x.dtype)
    BLOCK_N = 64
    max_dim1_kernel[(batch, triton.cdiv(dim2, BLOCK_N))](x, y, dim1, dim2, x.stride(0), x.stride(1), BLOCK_N=BLOCK_N, num_warps=2)
    return y
