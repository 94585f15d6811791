"""Correct Triton matrix-vector product: each program computes BLOCK_M rows,
looping over K in BLOCK_K chunks with fp32 accumulation."""

import torch
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(a_ptr, x_ptr, y_ptr, M, K, stride_am, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < M
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=4):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_mask = cols < K
        a = tl.load(a_ptr + rows[:, None] * stride_am + cols[None, :],
                    mask=row_mask[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        acc += tl.sum(a * x[None, :], axis=1)
    tl.store(y_ptr + rows, acc.to(y_ptr.dtype.element_ty), mask=row_mask)


def kernel_function(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    A = A.contiguous()
    x = x.contiguous()
    M, K = A.shape
    y = torch.empty((M, 1), device=A.device, dtype=A.dtype)
    BLOCK_M, BLOCK_K = 32, 128
    matvec_kernel[(triton.cdiv(M, BLOCK_M),)](A, x, y, M, K, A.stride(0), BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K)
    return y
