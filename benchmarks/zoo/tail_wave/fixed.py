"""Fix: many small CTAs instead of one big CTA per row. Each row is split into chunks
handled by 256-thread CTAs (grid rows x splits = many waves), so the last partial wave
is a small fraction of the run; partial sums are combined with atomic adds."""

import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_split_kernel(x_ptr, y_ptr, cols, chunk, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    start0 = tl.program_id(1) * chunk
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, chunk, BLOCK):
        offs = start0 + start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * cols + offs, mask=(offs < cols) & (start + tl.arange(0, BLOCK) < chunk), other=0.0)
    tl.atomic_add(y_ptr + row, tl.sum(acc, axis=0))


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    rows, cols = x.shape
    block = 4096
    chunk = 16 * block  # 64 Ki elements per CTA
    split = triton.cdiv(cols, chunk)
    y = torch.zeros(rows, device=x.device, dtype=torch.float32)
    rowsum_split_kernel[(rows, split)](x, y, cols, chunk, BLOCK=block, num_warps=8)
    return y
