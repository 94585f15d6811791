"""First draft: bf16 matrix-vector product, one program per row, fp32 accumulation.

Expect slow: each of the M programs streams its 64 KiB row in BLOCK_K=128
chunks (256 bytes, one small load in flight per program) and reloads the
x chunk from cache every time; num_warps is left at its default.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(a_ptr, x_ptr, y_ptr, K, stride_am, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        mask = cols < K
        a = tl.load(a_ptr + row * stride_am + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc += a * x
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def kernel_function(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    A = A.contiguous()
    x = x.contiguous()
    m, k = A.shape
    y = torch.empty((m,), device=A.device, dtype=A.dtype)
    matvec_kernel[(m,)](A, x, y, k, A.stride(0), BLOCK_K=256, num_warps=2)
    return y
