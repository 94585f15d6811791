"""RMSNorm over the last dimension with a learned scale (KernelBench format)."""

import torch
import torch.nn as nn

ROWS = 4096
DIM = 4096
EPS = 1e-6


class Model(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        # Random, not ones: a kernel that ignores the weight must fail.
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x.float() * rms).to(x.dtype) * self.weight


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM, EPS]
