"""flat_elementwise: per-row or 2-D-grid elementwise kernels become one flat index space."""

from __future__ import annotations

import pytest

from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import FIX, SUITE, fails, knob_names, knob_value, read, report, verify_all

T = get_transform("flat_elementwise")


def test_two_d_grid_model_new(tmp_path):
    source = read(FIX / "bias_relu_2d_grid.py")
    r = report("flat_elementwise", source)["bias_relu_rows"]
    assert r.applies and r.site == "bias_relu_rows" and "2-D grid" in r.reason
    out = T.apply(source, "bias_relu_rows", BLOCK=32)
    assert "tl.program_id(1)" not in out and "COL_BLOCK=32" in out
    assert knob_value(out, "COL_BLOCK") == 32
    shapes = [{"ROWS": "5", "COLS": "37"}, {"ROWS": "3", "COLS": "64"}, {"ROWS": "7", "COLS": "5"}]
    verify_all(tmp_path, FIX / "problem_bias_relu.py", shapes, [out, T.apply(source, "bias_relu_rows", BLOCK=128)])


def test_per_row_kernel_function(tmp_path):
    source = read(FIX / "scale_add_per_row.py")
    (r,) = T.sites(source)
    assert r.applies, r.reason
    out = T.apply(source, r.site, BLOCK=64)
    # the block was next_power_of_2(hidden), not a knob; now it is one, and tied to the grid through META
    assert "BLOCK_H" not in knob_names(source) and knob_value(out, "BLOCK_H") == 64
    shapes = [{"N_ROWS": "4", "HIDDEN": "50"}, {"N_ROWS": "9", "HIDDEN": "7"}, {"N_ROWS": "1", "HIDDEN": "130"}]
    verify_all(tmp_path, FIX / "problem_scale_add.py", shapes, [out, T.apply(source, r.site, BLOCK=16)])


def test_a_wrong_tail_is_caught(tmp_path):
    out = T.apply(read(FIX / "scale_add_per_row.py"), "fused_scale_add", BLOCK=64)
    broken = out.replace("ok = offs < numel", "ok = offs < numel - 1")
    assert broken != out and fails(tmp_path, FIX / "problem_scale_add.py", {"N_ROWS": "3", "HIDDEN": "10"}, broken)


def test_suite_bias_silu_residual(tmp_path):
    source = read(SUITE / "bias_silu_residual" / "kernel.py")
    (r,) = T.sites(source)
    assert r.applies, r.reason
    out = T.apply(source, r.site, BLOCK=128)
    verify_all(tmp_path, SUITE / "bias_silu_residual" / "problem.py",
               [{"ROWS": "3", "COLS": "200"}, {"ROWS": "5", "COLS": "33"}], [out])


@pytest.mark.parametrize("draft, why", [("gelu", "already a flat"), ("softmax", "not elementwise"),
                                        ("max_dim1", "not elementwise"), ("layernorm", "not elementwise"),
                                        ("mse_loss", "not elementwise"), ("matmul_fp32", "not elementwise")])
def test_declines_suite_kernels(draft, why):
    source = read(SUITE / draft / "kernel.py")
    reports = T.sites(source)
    assert reports and all(not r.applies and r.site is None for r in reports)
    assert any(why in r.reason for r in reports), [r.reason for r in reports]
    with pytest.raises(TransformError):
        T.apply(source, reports[0].kernel)


def test_declines_rows_with_a_foreign_stride():
    # rows addressed by a stride argument, not the row length: flattening would gather (and not pay)
    source = read(FIX / "scale_add_per_row.py").replace(
        "def fused_scale_add(x_ptr, w_ptr, y_ptr, o_ptr, hidden,", "def fused_scale_add(x_ptr, w_ptr, y_ptr, o_ptr, hidden, stride,"
    ).replace("start = row_id * hidden", "start = row_id * stride").replace("o, hidden,", "o, hidden, x.stride(0),")
    (r,) = T.sites(source)
    assert not r.applies and "row_id is used other than as row_id * hidden" in r.reason


def test_declines_an_unmasked_access():
    source = read(FIX / "scale_add_per_row.py").replace("w = tl.load(w_ptr + idx, mask=ok)", "w = tl.load(w_ptr + idx)")
    (r,) = T.sites(source)
    assert not r.applies and "not masked" in r.reason


def test_pointers_advanced_to_the_row(tmp_path):
    # `x_ptr += r * n_cols`: the row offset lives in the pointers; flat, each lane carries its own
    source = read(FIX / "bias_relu_row_pointers.py")
    (r,) = T.sites(source)
    assert r.applies, r.reason
    out = T.apply(source, "row_bias_relu", BLOCK=32)
    assert "x_ptr += r * n_cols" in out and "m = offs_2 < numel" in out
    verify_all(tmp_path, FIX / "problem_bias_relu.py", [{"ROWS": "5", "COLS": "37"}, {"ROWS": "4", "COLS": "8"}], [out])
