"""First draft: average pooling, one program per (plane, output row, BLOCK_W columns).

Expect slow: BLOCK_W=64 columns is a short 256-byte row segment per load with
a default 4-warp program; every input element is loaded nine times (once per
window that covers it) and only the cache stands between those and DRAM.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avgpool2d_kernel(x_ptr, y_ptr, H, W, H_out: tl.constexpr, W_out, ksize: tl.constexpr, stride: tl.constexpr, padding: tl.constexpr, BLOCK_W: tl.constexpr):
    row = tl.program_id(0)  # (n * C + c) * H_out + oh
    oh = row % H_out
    plane = row // H_out
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = ow < W_out
    acc = tl.zeros((BLOCK_W,), dtype=tl.float32)
    for kh in range(0, ksize):
        ih = oh * stride - padding + kh
        for kw in range(0, ksize):
            iw = ow * stride - padding + kw
            # tl.where, not `&`: the Triton interpreter rejects a block mask and-ed with a
            # scalar condition (ih is one value per program).
            ok = tl.where((ih >= 0) & (ih < H), mask & (iw >= 0) & (iw < W), False)
            acc += tl.load(x_ptr + plane * H * W + ih * W + iw, mask=ok, other=0.0)
    # count_include_pad=True (PyTorch's default): the divisor is the full window.
    tl.store(y_ptr + row * W_out + ow, acc / (ksize * ksize), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        k, s, p = self.kernel_size, self.stride, self.padding
        h_out = (h + 2 * p - k) // s + 1
        w_out = (w + 2 * p - k) // s + 1
        y = torch.empty((n, c, h_out, w_out), device=x.device, dtype=x.dtype)
        BLOCK_W = 256
        avgpool2d_kernel[(n * c * h_out, triton.cdiv(w_out, BLOCK_W))](x, y, h, w, h_out, w_out, k, s, p,
                                                                     BLOCK_W=BLOCK_W)
        return y
