"""cuda_block_template: a literal block size becomes one #define that the grid follows.

CUDA cannot run here: the rewrite is checked structurally and compiled with nvcc (sm_90);
tests/gpu/test_cuda_transforms.py runs the results on a GPU."""

from __future__ import annotations

import pytest

from kernelopt.optimize.knobs import discover_knobs
from kernelopt.optimize.knobs.rewrite import set_knobs
from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import FIX, cuda_source_of, nvcc_compile, read

T = get_transform("cuda_block_template")


def test_kernel_function_literal_block(tmp_path):
    source = read(FIX / "cuda_axpy_scalar.py")
    (r,) = T.sites(source)
    assert r.applies and r.site == "axpy_kernel" and r.params == {"BLOCK_SIZE": 256}
    out = T.apply(source, "axpy_kernel")
    cu = cuda_source_of(out)
    assert "#include <torch/extension.h>\n#define BLOCK_SIZE 256\n" in cu
    assert "axpy_kernel<<<(n + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>" in cu
    # one knob now, in the threads-per-block domain; moving it keeps the grid covering n
    knob = next(k for k in discover_knobs(out) if k.name == "BLOCK_SIZE")
    assert knob.value == 256 and knob.kind == "define" and knob.domain == [32, 64, 128, 256, 512, 1024]
    assert "axpy_kernel.block" not in {k.name for k in discover_knobs(out)}
    moved = set_knobs(out, {"BLOCK_SIZE": 64})
    assert "#define BLOCK_SIZE 64" in moved
    nvcc_compile(tmp_path, moved)


def test_model_new_launch_bounds_and_minus_one_form(tmp_path):
    source = read(FIX / "cuda_relu_bounds.py")
    out = T.apply(source, "scaled_relu", BLOCK_SIZE=512)
    cu = cuda_source_of(out)
    assert "__launch_bounds__(BLOCK_SIZE)" in cu and "#define BLOCK_SIZE 512" in cu
    assert "<<<(size + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE, 0>>>" in cu
    # every byte outside the edits is kept
    assert out.replace("#define BLOCK_SIZE 512\n", "").replace("BLOCK_SIZE", "128") == source
    nvcc_compile(tmp_path, out)


def test_declines_a_block_the_kernel_hard_codes():
    reports = {r.kernel: r for r in T.sites(read(FIX / "cuda_block_sum.py"))}
    assert not reports["block_sum"].applies and "writes 256 itself" in reports["block_sum"].reason
    assert reports["add_bias"].applies  # the other kernel of the same string is fine
    with pytest.raises(TransformError, match="writes 256"):
        T.apply(read(FIX / "cuda_block_sum.py"), "block_sum")


def test_declines_named_blocks_and_triton():
    (r,) = [x for x in T.sites(read(FIX.parent / "knobs" / "cuda_launch.py")) if x.kernel == "scale_kernel"]
    assert not r.applies and "already named" in r.reason
    (r,) = T.sites(read(FIX / "matmul_split_pid.py"))
    assert not r.applies and "no CUDA source" in r.reason
