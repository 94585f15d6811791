"""Fix: do less arithmetic. ITERS steps of x <- A x + B have the closed form
x_K = A**K * x_0 + c with c = B (1 - A**K) / (1 - A) (c = K B when A == 1):
one FMA per element, after which the kernel is a memory-bound stream."""

import torch
import triton
import triton.language as tl


@triton.jit
def closed_form_kernel(x_ptr, y_ptr, n, a_k, c, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a_k + c, mask=mask)


def kernel_function(x: torch.Tensor, ITERS: int, A: float, B: float) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    a_k = A**ITERS
    c = ITERS * B if A == 1.0 else B * (1.0 - a_k) / (1.0 - A)
    closed_form_kernel[(triton.cdiv(n, 4096),)](x, y, n, a_k, c, BLOCK=4096, num_warps=8)
    return y
