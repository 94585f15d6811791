"""Transpose a ROWS x COLS fp32 matrix."""

import torch
import torch.nn as nn

ROWS = 8192
COLS = 8192  # 256 MiB


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list:
    return []
