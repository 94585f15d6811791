"""Fix (CUDA): pad the tile to 32x33 floats. Consecutive rows then start one bank apart,
so a column read touches 32 different banks (1 wavefront per request)."""

import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

#define TILE 32
#define ROWS_PER_PASS 8
#define PAD 1

__global__ void transpose_kernel(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + PAD];
    int x = blockIdx.x * TILE + threadIdx.x;  // column of in
    int y = blockIdx.y * TILE + threadIdx.y;  // row of in
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;  // column of out = row of in
    y = blockIdx.x * TILE + threadIdx.y;  // row of out = column of in
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        if (x < rows && y + j < cols) out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

torch::Tensor transpose(torch::Tensor x) {
    int rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({cols, rows}, x.options());
    dim3 block(TILE, ROWS_PER_PASS);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_kernel<<<grid, block>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

cpp_source = "torch::Tensor transpose(torch::Tensor x);"

_ext = load_inline(name="kernelopt_zoo_transpose_padded", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["transpose"])


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    return _ext.transpose(x.contiguous())
