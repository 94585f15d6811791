"""Matrix-vector product y = A @ x in bf16 (KernelBench format)."""

import torch
import torch.nn as nn

M = 65536
K = 32768  # A is 4 GiB of bf16: streaming it is the whole cost
SMALL = {"M": 5, "K": 300}
BYTES = M * K * 2 + K * 2 + M * 2  # read A and x, write y
FLOPS = 2 * M * K
PRECISION = "fp32"  # a matrix-vector product has no reuse for tensor cores; DRAM bound
# The output is bf16 (2^-8 relative steps) of a 32768-term fp32 sum: a different summation order
# rounds to a neighbouring bf16 value, and the draft itself failed 1e-2 on one element in 65536 at a
# fresh seed (H200, session 11: off by 4 at |y| < 400, two steps). Two steps are allowed.
atol = 2e-2
rtol = 2e-2


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
