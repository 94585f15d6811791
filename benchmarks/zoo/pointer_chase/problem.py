"""Follow CHAINS independent chains HOPS steps through a permutation table: idx = table[idx]."""

import torch
import torch.nn as nn

TABLE = 4194304  # 4 Mi int32 = 16 MiB: fits in L2, far larger than L1
CHAINS = 16384
HOPS = 256


class Model(nn.Module):
    def forward(self, table: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        idx = start
        for _ in range(HOPS):
            idx = table[idx.long()]
        return idx


def get_inputs() -> list[torch.Tensor]:
    table = torch.randperm(TABLE, dtype=torch.int64).to(torch.int32)
    start = torch.randint(0, TABLE, (CHAINS,), dtype=torch.int32)
    return [table, start]


def get_init_inputs() -> list:
    return []
