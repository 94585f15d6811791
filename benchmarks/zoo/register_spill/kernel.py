"""Planted: the whole 8192-element row is held by ONE warp (num_warps=1), i.e. 256
fp32 values per thread plus temporaries. ptxas caps the kernel at 255 registers and
spills the rest to local memory, and 255 registers x 32 threads lets only 8 warps
reside per SM (12.5% occupancy). Measured (Triton 3.6, H200): 255 registers, Triton
n_spills 150 (600 bytes of local memory per thread), 2.6e6 local spilling requests."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols), num_warps=1)
    return y
