"""First draft: cross-entropy, one program per row, then a one-program mean.

Expect slow: each row is read twice (a max pass, then a sum-of-exponentials pass)
in BLOCK=1024 chunks; the final mean runs in a single program (grid of 1) that
walks all BATCH per-row losses serially while the other 131 SMs idle.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def row_loss_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, BLOCK: tl.constexpr, n_rows, ROWS_PER_PROGRAM: tl.constexpr):
    for rr in range(0, ROWS_PER_PROGRAM):  # ROWS_PER_PROGRAM consecutive rows per program
        row_id = tl.program_id(0) * ROWS_PER_PROGRAM + rr
        if row_id < n_rows:
            row = row_id
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
def mean_kernel(loss_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(loss_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


def kernel_function(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    predictions = predictions.contiguous()
    targets = targets.contiguous()
    batch, classes = predictions.shape
    losses = torch.empty((batch,), device=predictions.device, dtype=torch.float32)
    out = torch.empty((), device=predictions.device, dtype=predictions.dtype)
    row_loss_kernel[lambda META: (triton.cdiv(batch, META['ROWS_PER_PROGRAM']),)](predictions, targets, losses, classes, BLOCK=1024, n_rows=batch, ROWS_PER_PROGRAM=2)
    mean_kernel[(1,)](losses, out, batch, BLOCK=256)
    return out
