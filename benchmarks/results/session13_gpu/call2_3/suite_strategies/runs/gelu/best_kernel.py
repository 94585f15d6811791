"""First draft: exact GELU, one flat 1-D pass over the elements.

Expect slow: BLOCK=128 gives one element per thread and 4 Mi programs, so each
thread keeps a single 4-byte load in flight; far too little memory-level
parallelism to saturate DRAM. num_warps is left at its default.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    # 0.7071... = 1/sqrt(2): exact GELU is x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=mask)


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    BLOCK = 512
    gelu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=2)
    return y
