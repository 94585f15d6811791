"""Iterate x <- x * A + B, ITERS times, on a ROWS x COLS matrix (compute-heavy per element)."""

import torch
import torch.nn as nn

ROWS = 140  # a few more rows than the 132 SMs of an H100 SXM
COLS = 8192
ITERS = 4096
A = 0.999
B = 0.001


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(ITERS):
            x = x * A + B
        return x


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list:
    return []

ATOL = 1e-4
RTOL = 1e-4
