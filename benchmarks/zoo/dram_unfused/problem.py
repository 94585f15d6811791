"""y = relu(x * SCALE + SHIFT) over a large fp32 vector: pure streaming, DRAM bound."""

import torch
import torch.nn as nn

N = 67108864  # 64 Mi fp32 = 256 MiB in + 256 MiB out: far larger than L2
SCALE = 2.0
SHIFT = 1.0


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * SCALE + SHIFT)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(N)]


def get_init_inputs() -> list:
    return []
