"""y = x * SCALE + SHIFT over a large fp32 vector."""

import torch
import torch.nn as nn

N = 67108864  # 256 MiB in, 256 MiB out
SCALE = 2.0
SHIFT = 1.0


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * SCALE + SHIFT


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N)]


def get_init_inputs() -> list:
    return []
