"""The K largest values of every row, in descending order (torch.topk values)."""

import torch
import torch.nn as nn

ROWS = 16384
COLS = 1024
K = 32


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.topk(x, K, dim=-1).values


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list:
    return []
