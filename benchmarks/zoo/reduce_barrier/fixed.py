"""Fix (CUDA): the same 1024-thread CTAs and rows, reduced with warp shuffles. Each warp
reduces its 32 values with __shfl_xor_sync (no shared memory, no barrier), lane 0 writes
the warp's result to shared memory, one __syncthreads, and every warp then reduces the 32
partials itself with shuffles: one barrier per reduction, two per row instead of 22."""

import torch
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

#define THREADS 1024
#define WARPS (THREADS / 32)
#define ROWS_PER_CTA 16

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__global__ void __launch_bounds__(THREADS, 2)
logsumexp_shuffle_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
    __shared__ float warp_maxes[WARPS];
    __shared__ float warp_sums[WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
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
        next = (row + 1 < last && tid < cols) ? x[(size_t)(row + 1) * cols + tid] : -INFINITY;

        // Row maximum: shuffles within each warp, one barrier, then every warp reduces the 32 partials.
        float wm = warp_max(m);
        if (lane == 0) warp_maxes[warp] = wm;
        __syncthreads();
        const float row_max = warp_max(warp_maxes[lane]);

        // Sum of exp(x - max): the same, and warp 0 finishes the row.
        float ws = warp_sum(s == 0.f ? 0.f : s * expf(m - row_max));
        if (lane == 0) warp_sums[warp] = ws;
        __syncthreads();
        if (warp == 0) {
            const float total = warp_sum(warp_sums[lane]);
            if (lane == 0) out[row] = row_max + logf(total);
        }
        // No third barrier: warp_maxes is rewritten only after every warp has passed this row's
        // second barrier (so has read it), warp_sums only after the next row's first barrier
        // (so warp 0 has read it).
    }
}

torch::Tensor logsumexp_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.dim() == 2 && x.is_contiguous(), "expected a contiguous 2-D fp32 CUDA tensor");
    const int rows = x.size(0), cols = x.size(1);
    TORCH_CHECK(cols > 0, "logsumexp over zero columns");
    auto out = torch::empty({rows}, x.options());
    const int grid = (rows + ROWS_PER_CTA - 1) / ROWS_PER_CTA;
    if (grid > 0)
        logsumexp_shuffle_kernel<<<grid, THREADS>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

cpp_source = "torch::Tensor logsumexp_rows(torch::Tensor x);"

_ext = load_inline(name="kernelopt_zoo_logsumexp_shuffle", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["logsumexp_rows"])


def kernel_function(x: torch.Tensor) -> torch.Tensor:
    return _ext.logsumexp_rows(x.contiguous())
