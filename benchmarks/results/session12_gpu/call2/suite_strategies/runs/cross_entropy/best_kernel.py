"""First draft: cross-entropy, one program per row, then a one-program mean.

Expect slow: each row is read twice (a max pass, then a sum-of-exponentials pass)
in BLOCK=1024 chunks; the final mean runs in a single program (grid of 1) that
walks all BATCH per-row losses serially while the other 131 SMs idle.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_cols
    m = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        chunk = tl.load(logits_ptr + base + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, chunk)  # online: max and rescaled sum in one sweep
        s = s * tl.where(m_new == -float("inf"), 1.0, tl.exp(m - m_new)) + tl.where(m_new == -float("inf"), 0.0, tl.exp(chunk - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    s = s * tl.exp(m - row_max)
    target = tl.load(targets_ptr + row)
    target_logit = tl.load(logits_ptr + base + target)
    # -log softmax(x)[target] = log(sum exp(x - max)) + max - x[target]
    tl.store(loss_ptr + row, tl.log(tl.sum(s, axis=0)) + row_max - target_logit)


@triton.jit
def mean_kernel(loss_ptr, out_ptr, n, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    split_id = tl.program_id(1)  # this program sums chunk split_id of SPLIT
    split_len = tl.cdiv(tl.cdiv(n, BLOCK), SPLIT) * BLOCK
    for start in range(split_id * split_len, tl.minimum(split_id * split_len + split_len, n), BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(acc, axis=0) / n)


def kernel_function(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    predictions = predictions.contiguous()
    targets = targets.contiguous()
    batch, classes = predictions.shape
    losses = torch.empty((batch,), device=predictions.device, dtype=torch.float32)
    out = torch.empty((), device=predictions.device, dtype=predictions.dtype)
    row_loss_kernel[(batch,)](predictions, targets, losses, classes, BLOCK=512)
    out_acc = torch.zeros(out.shape, device=out.device, dtype=torch.float32)  # partial sums meet here
    mean_kernel[lambda META: (1, META['SPLIT'])](losses, out_acc, batch, BLOCK=256, SPLIT=8)
    out.copy_(out_acc)
    return out
