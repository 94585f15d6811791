"""Planted: a tail effect. One 1024-thread CTA per row, and at this size (16 fp32 values
per thread, > 32 registers) only one such CTA fits on an SM. 160 CTAs on 132 SMs run
as one full wave plus a tail wave of 28 CTAs, during which 104 SMs idle: the second
wave costs as much time as the first for a fifth of the work."""

import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    y = torch.empty(rows, device=x.device, dtype=torch.float32)
    rowsum_kernel[(rows,)](x, y, cols, BLOCK=16384, num_warps=32)
    return y
