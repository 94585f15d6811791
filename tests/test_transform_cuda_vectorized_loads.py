"""cuda_vectorized_loads: float4 accesses for contiguous elementwise CUDA kernels, scalar tail.

CUDA cannot run here: the rewrite is checked structurally and compiled with nvcc (sm_90);
tests/gpu/test_cuda_transforms.py runs the results on a GPU at ragged sizes."""

from __future__ import annotations

import pytest

from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import FIX, cuda_source_of, nvcc_compile, read

T = get_transform("cuda_vectorized_loads")


def test_kernel_function_single_statement(tmp_path):
    source = read(FIX / "cuda_axpy_scalar.py")
    (r,) = T.sites(source)
    assert r.applies and "reads x, y, writes out" in r.reason
    cu = cuda_source_of(T.apply(source, "axpy_kernel"))
    assert "float4 ko_x_v = reinterpret_cast<const float4*>(x)[ko_base / 4];" in cu
    assert "{ ko_out_v.w = alpha * ko_x_v.w + ko_y_v.w; }" in cu
    assert "reinterpret_cast<float4*>(out)[ko_base / 4] = ko_out_v;" in cu
    assert "if (i < (n)) { out[i] = alpha * x[i] + y[i]; }" in cu  # the scalar tail is the original body
    assert "axpy_kernel<<<(((n + 255) / 256) + 3) / 4, 256>>>" in cu  # a quarter of the blocks
    nvcc_compile(tmp_path, T.apply(source, "axpy_kernel"))


def test_model_new_early_return_and_locals(tmp_path):
    source = read(FIX / "cuda_relu_bounds.py")
    out = T.apply(source, "scaled_relu")
    cu = cuda_source_of(out)
    assert cu.count("float v = ko_src_v.") == 4  # each lane in its own block: its locals do not clash
    assert "const long long ko_base = (threadIdx.x + (long long)blockIdx.x * blockDim.x) * 4;" in cu
    nvcc_compile(tmp_path, out)


def test_composes_with_block_template(tmp_path):
    block = get_transform("cuda_block_template").apply(read(FIX / "cuda_axpy_scalar.py"), "axpy_kernel", BLOCK_SIZE=128)
    both = T.apply(block, "axpy_kernel")
    assert "<<<(((n + BLOCK_SIZE - 1) / BLOCK_SIZE) + 3) / 4, BLOCK_SIZE>>>" in cuda_source_of(both)
    nvcc_compile(tmp_path, both)


def test_declines_shared_memory_and_gathers():
    reports = {r.kernel: r for r in T.sites(read(FIX / "cuda_block_sum.py"))}
    assert not reports["block_sum"].applies and "one element per thread" in reports["block_sum"].reason
    assert not reports["add_bias"].applies and "b[i % cols]" in reports["add_bias"].reason
    with pytest.raises(TransformError):
        T.apply(read(FIX / "cuda_block_sum.py"), "add_bias")


def test_declines_a_body_that_uses_the_index():
    source = read(FIX / "cuda_axpy_scalar.py").replace("out[i] = alpha * x[i] + y[i];", "out[i] = alpha * x[i] + i;")
    (r,) = T.sites(source)
    assert not r.applies and "uses i beyond" in r.reason


def test_half_precision_takes_eight_per_access(tmp_path):
    source = read(FIX / "cuda_half_add.py")
    (r,) = T.sites(source)
    assert r.applies and "one 16-byte access per 8 elements" in r.reason
    out = T.apply(source, "half_axpy2")
    cu = cuda_source_of(out)
    assert "alignas(16) __half ko_y_v[8];" in cu and "*reinterpret_cast<uint4*>(ko_y_v) = " in cu
    assert "__half twice = __hadd(ko_y_v[7], ko_y_v[7]);" in cu  # each lane's locals in their own block
    assert "reinterpret_cast<uint4*>(out)[ko_base / 8] = *reinterpret_cast<const uint4*>(ko_out_v);" in cu
    assert "half_axpy2<<<(((n + 255) / 256) + 7) / 8, 256>>>" in cu
    nvcc_compile(tmp_path, out)


def test_declines_mixed_element_types():
    source = read(FIX / "cuda_half_add.py").replace("const __half* __restrict__ x", "const float* __restrict__ x")
    (r,) = T.sites(source)
    assert not r.applies and "mixes" in r.reason
