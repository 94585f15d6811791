"""Iterate the affine map x <- x * A + B, ITERS times, on every element."""

import torch
import torch.nn as nn

N = 16777216  # 16 Mi fp32
ITERS = 4096
A = 0.999
B = 0.001


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(ITERS):
            x = x * A + B
        return x


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N)]


def get_init_inputs() -> list:
    return []

ATOL = 1e-4
RTOL = 1e-4
