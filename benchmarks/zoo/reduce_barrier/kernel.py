"""Planted (CUDA): barrier stalls. A 1024-thread CTA (32 warps) computes the logsumexp of
ROWS_PER_CTA rows of 1024 values, one value per thread, with two classic shared-memory
tree reductions per row (the maximum, then the sum of exp(x - max)):

    for (s = 512; s > 0; s >>= 1) { if (tid < s) sdata[tid] = op(sdata[tid], sdata[tid + s]); __syncthreads(); }

That is 22 __syncthreads per row. In each step only `s` threads work (16 warps in the
first step, 8, 4, 2, then one warp, then part of one in the last five) while every other
warp of the CTA waits at the barrier, so warps spend most of their cycles stalled on
barriers. The shared-memory traffic (conflict-free, consecutive words) and the per-thread
math are small, the next row's value is loaded before the current row is reduced (its
DRAM latency hides behind the barriers), and 4 KiB of input per 22 barriers is meant to
keep DRAM well below its roofline: at ~60 cycles per barrier step a row takes ~1500
cycles, two rows per SM in flight, about 1.2 TB/s on an H100 (estimate, before profiling).
ROWS / ROWS_PER_CTA = 4096 CTAs, two resident per SM (26 registers, 8 KiB shared each):
full occupancy and about 15 waves on 132 SMs."""

import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

#define THREADS 1024
#define ROWS_PER_CTA 16

__global__ void __launch_bounds__(THREADS, 2)
logsumexp_tree_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float smax[THREADS];
    __shared__ float ssum[THREADS];
    const int tid = threadIdx.x;
    const int first = blockIdx.x * ROWS_PER_CTA;
    const int last = min(first + ROWS_PER_CTA, rows);
    float next = (first < last && tid < cols) ? x[(size_t)first * cols + tid] : -INFINITY;
    for (int row = first; row < last; ++row) {
        // Per-thread running max and sum of exp over its columns tid, tid + 1024, ... (one at COLS = 1024).
        float m = next, s = next == -INFINITY ? 0.f : 1.f;
        for (int c = tid + THREADS; c < cols; c += THREADS) {
            const float v = x[(size_t)row * cols + c];
            if (v > m) { s = s * expf(m - v) + 1.f; m = v; }
            else if (v != -INFINITY) s += expf(v - m);
        }
        // Load the next row's first value now: its latency overlaps this row's reductions.
        next = (row + 1 < last && tid < cols) ? x[(size_t)(row + 1) * cols + tid] : -INFINITY;

        smax[tid] = m;
        __syncthreads();
        for (int stride = THREADS / 2; stride > 0; stride >>= 1) {
            if (tid < stride) smax[tid] = fmaxf(smax[tid], smax[tid + stride]);
            __syncthreads();
        }
        const float row_max = smax[0];

        ssum[tid] = s == 0.f ? 0.f : s * expf(m - row_max);
        __syncthreads();
        for (int stride = THREADS / 2; stride > 0; stride >>= 1) {
            if (tid < stride) ssum[tid] += ssum[tid + stride];
            __syncthreads();
        }
        if (tid == 0) out[row] = row_max + logf(ssum[0]);
        // No barrier needed here: smax[0] was read before the ssum barriers, ssum[0] is read
        // by thread 0 before it reaches the next row's first barrier.
    }
}

torch::Tensor logsumexp_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.dim() == 2 && x.is_contiguous(), "expected a contiguous 2-D fp32 CUDA tensor");
    const int rows = x.size(0), cols = x.size(1);
    TORCH_CHECK(cols > 0, "logsumexp over zero columns");
    auto out = torch::empty({rows}, x.options());
    const int grid = (rows + ROWS_PER_CTA - 1) / ROWS_PER_CTA;
    if (grid > 0)
        logsumexp_tree_kernel<<<grid, THREADS>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

cpp_source = "torch::Tensor logsumexp_rows(torch::Tensor x);"

_ext = load_inline(name="kernelopt_zoo_logsumexp_tree", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["logsumexp_rows"])


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    return _ext.logsumexp_rows(x.contiguous())
