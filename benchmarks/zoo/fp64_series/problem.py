"""Truncated power series y = sum_{k<DEG} coef[k] x^k with coef[k] = 1 / (k + 1)
(= -log(1 - x) / x for |x| < 1), fp32 in and out."""

import torch
import torch.nn as nn

N = 16777216  # 16 Mi fp32
DEG = 256


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("coef", 1.0 / torch.arange(1, DEG + 1, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros_like(x)
        for k in range(DEG - 1, -1, -1):  # Horner
            y = y * x + self.coef[k]
        return y


def get_inputs() -> list[torch.Tensor]:
    return [torch.rand(N) * 1.8 - 0.9]


def get_init_inputs() -> list:
    return []

ATOL = 1e-4
RTOL = 1e-4
