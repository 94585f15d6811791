"""Matrix-vector product y = A @ x with A of M x K (KernelBench format)."""

import torch
import torch.nn as nn

M = 8192
K = 8192
# fp32 sums of K = 8192 products taken in another order differ by ~1e-4 near zero.
atol = 1e-3
rtol = 1e-3


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
