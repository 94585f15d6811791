"""First draft: MSE, each program squares a BLOCK of differences and atomically adds its share.

Expect slow: BLOCK=1024 makes half a million programs at full size, and every
one of them does an atomic add to the same single float, so the atomics
serialize at one L2 address; the loads themselves are one per thread.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def mse_kernel(p_ptr, t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    t = tl.load(t_ptr + offs, mask=mask, other=0.0)
    d = p - t
    tl.atomic_add(out_ptr, tl.sum(d * d, axis=0) / n)


def kernel_function(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    predictions = predictions.contiguous()
    targets = targets.contiguous()
    n = predictions.numel()
    # The accumulator must start at zero: the atomics add into it.
    out = torch.zeros((), device=predictions.device, dtype=torch.float32)
    BLOCK = 8192
    mse_kernel[(triton.cdiv(n, BLOCK),)](predictions, targets, out, n, BLOCK=BLOCK)
    return out
