"""C = A @ B in fp16 with fp32 accumulation, square and large."""

import torch
import torch.nn as nn

M = 4096
N = 4096
K = 4096


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs() -> list:
    return []

ATOL = 1e-1
RTOL = 1e-2
