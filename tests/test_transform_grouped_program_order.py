"""grouped_program_order: 2-D tiled kernels visit their tiles in bands of GROUP_M rows."""

from __future__ import annotations

import pytest

from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import FIX, SUITE, fails, knob_names, knob_value, read, report, verify_all

T = get_transform("grouped_program_order")
MATMUL = FIX / "problem_matmul.py"
# ragged: partial tiles on every side; more tile rows than a band so bands end short
SHAPES = [{"M": "70", "N": "36", "K": "40"}, {"M": "33", "N": "50", "K": "17"}, {"M": "16", "N": "16", "K": "16"}]


def test_two_d_meta_grid_model_new(tmp_path):
    source = read(FIX / "matmul_meta_grid.py")
    r = report("grouped_program_order", source)["gemm_tile"]
    assert r.applies and r.site == "gemm_tile" and r.params == {"GROUP_M": 8}
    out = T.apply(source, "gemm_tile", GROUP_M=2)
    assert "GROUP_M: tl.constexpr" in out and "GROUP_M=2" in out
    assert "tl.num_programs(1)" in out  # the grid stays 2-D: no change to the META lambda
    assert "GROUP_M" in knob_names(out) and knob_value(out, "GROUP_M") == 2
    verify_all(tmp_path, MATMUL, SHAPES, [out, T.apply(source, "gemm_tile", GROUP_M=3)])


def test_one_d_split_pid_kernel_function(tmp_path):
    source = read(FIX / "matmul_split_pid.py")
    r = report("grouped_program_order", source)["mm_flat"]
    assert r.applies, r.reason
    out = T.apply(source, "mm_flat", GROUP_M=2)
    assert "tm = pid // tiles_n" not in out and "tl.where(" in out
    assert knob_value(out, "GROUP_M") == 2
    # the rewrite only adds lines: everything outside the two coordinate lines is kept byte for byte
    kept = [line for line in source.splitlines() if "tm = pid" not in line and "tn = pid" not in line]
    assert all(line in out.splitlines() or "BK: tl.constexpr" in line or "BK=16" in line for line in kept)
    verify_all(tmp_path, MATMUL, SHAPES, [out, T.apply(source, "mm_flat", GROUP_M=4)])


def test_a_wrong_order_is_caught(tmp_path):
    # the verification these tests lean on sees a mapping that misses tiles
    out = T.apply(read(FIX / "matmul_split_pid.py"), "mm_flat", GROUP_M=2)
    broken = out.replace("% in_group) // group_m", "% in_group) // group_m // 2")
    assert broken != out and fails(tmp_path, MATMUL, SHAPES[0], broken)


def test_suite_matmul_fp32(tmp_path):
    source = read(SUITE / "matmul_fp32" / "kernel.py")
    out = T.apply(source, "matmul_kernel", GROUP_M=2)
    verify_all(tmp_path, SUITE / "matmul_fp32" / "problem.py", [{"M": "70", "N": "36", "K": "50"}], [out])


@pytest.mark.parametrize("draft", ["matmul_bf16", "linear_bias_gelu"])
def test_suite_gemms_apply(draft):
    source = read(SUITE / draft / "kernel.py")
    (r,) = T.sites(source)
    assert r.applies, r.reason
    assert "GROUP_M" in knob_names(T.apply(source, r.site))


@pytest.mark.parametrize("draft", ["gelu", "avgpool2d", "max_dim1", "conv3d", "bias_silu_residual", "maxpool2d"])
def test_declines_non_tiled_kernels(draft):
    source = read(SUITE / draft / "kernel.py")
    (r,) = T.sites(source)
    assert not r.applies and r.site is None and r.reason and "\n" not in r.reason
    with pytest.raises(TransformError):
        T.apply(source, r.kernel)


def test_declines_when_the_id_means_more_than_a_tile():
    source = read(FIX / "matmul_split_pid.py").replace(
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)\n",
        "    acc = tl.zeros((BM, BN), dtype=tl.float32) + pid\n")
    (r,) = T.sites(source)
    assert not r.applies and "pid is used beyond" in r.reason


def test_unparsable_source_is_one_declining_report():
    (r,) = T.sites("def broken(:\n")
    assert not r.applies and "does not parse" in r.reason


def test_tutorial_style_autotuned_matmul(tmp_path):
    # autotuned with a META grid: GROUP_M goes to the launch, the autotuner's configs are untouched
    source = read(FIX / "matmul_tutorial_autotuned.py")
    out = T.apply(source, "matmul_kernel", GROUP_M=2)
    assert "GROUP_M=2)" in out and out.count("triton.Config(") == 1
    verify_all(tmp_path, MATMUL, [{"M": "70", "N": "36", "K": "40"}, {"M": "17", "N": "50", "K": "16"}], [out])
