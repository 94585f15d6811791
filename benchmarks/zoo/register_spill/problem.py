"""Row-wise softmax of a ROWS x COLS fp32 matrix with long rows."""

import torch
import torch.nn as nn

ROWS = 8192
COLS = 8192  # 256 MiB in, 256 MiB out


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(ROWS, COLS)]


def get_init_inputs() -> list:
    return []
