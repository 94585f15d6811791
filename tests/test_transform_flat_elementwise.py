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


def test_a_row_stride_argument_equal_to_the_row_length(tmp_path):
    # the launch passes x.stride(0) (the wrapper made x contiguous, so it is the row length)
    source = read(FIX / "scale_add_per_row.py").replace(
        "def fused_scale_add(x_ptr, w_ptr, y_ptr, o_ptr, hidden,", "def fused_scale_add(x_ptr, w_ptr, y_ptr, o_ptr, hidden, stride,"
    ).replace("start = row_id * hidden", "start = row_id * stride").replace("o, hidden,", "o, hidden, x.stride(0),")
    (r,) = T.sites(source)
    assert r.applies, r.reason
    out = T.apply(source, r.site, BLOCK=32)
    assert "row_id = offs // hidden" in out and "start = row_id * stride" in out
    verify_all(tmp_path, FIX / "problem_scale_add.py", [{"N_ROWS": "3", "HIDDEN": "45"}, {"N_ROWS": "5", "HIDDEN": "16"}],
               [out])


LEAKY = FIX / "leaky_rows_strided.py"
TRANSPOSED = FIX / "add_transposed_2d.py"


def _run(tmp_path, source: str, name: str, *args):
    """Calls the candidate's entry point in this process (interpreter) on inputs as given: the
    harness hands a candidate contiguous copies, so views made here reach the kernel only this way."""
    from conftest import load_script

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    module = load_script(path, name)
    entry = module.ModelNew().forward if hasattr(module, "ModelNew") else module.kernel_function
    return entry(*args)


def test_rows_addressed_by_row_strides_tutorial_style(tmp_path):
    # row start pointers from stride arguments that are not the row length (a sliced input, an
    # output inside a wider buffer): each lane keeps its own row, so the strides still address it
    source = read(LEAKY)
    (r,) = T.sites(source)
    assert r.applies and r.site == "_leaky_rows", r.reason
    out, big = T.apply(source, r.site, BLOCK=32), T.apply(source, r.site, BLOCK=256)
    assert "row_idx = offs // n_cols" in out and "row_start_ptr = in_ptr + row_idx * in_row_stride" in out
    assert knob_value(out, "BLOCK_SIZE") == 32
    shapes = [{"ROWS": "6", "COLS": "29"}, {"ROWS": "1", "COLS": "1"}, {"ROWS": "9", "COLS": "64"},
              {"ROWS": "3", "COLS": "130"}]
    verify_all(tmp_path, FIX / "problem_leaky_slice.py", shapes, [out, big])
    # inputs that are views already: every other row of a wider tensor (row stride 2 * (cols + 3))
    import torch

    x = torch.randn(14, 40)[::2]
    slope = torch.tensor([0.2])
    v = x[:, 3:]
    want = torch.where(v > 0, v, v * slope)
    for i, candidate in enumerate([source, out, big]):
        got = _run(tmp_path, candidate, f"leaky_{i}", x, slope)
        torch.testing.assert_close(got, want)


def test_a_transposed_view_on_a_two_d_grid(tmp_path):
    source = read(TRANSPOSED)
    (r,) = T.sites(source)
    assert r.applies and "2-D grid" in r.reason, r.reason
    out = T.apply(source, r.site, BLOCK=64)
    assert "pid_m = offs // N" in out and "offs_n * stride_an" in out
    shapes = [{"ROWS": "5", "COLS": "37"}, {"ROWS": "8", "COLS": "3"}, {"ROWS": "2", "COLS": "100"}]
    verify_all(tmp_path, FIX / "problem_add_transposed.py", shapes, [out, T.apply(source, r.site, BLOCK=16)])
    # a given as a transposed view (so its transpose is contiguous), b as a column slice
    import torch

    a = torch.randn(7, 45).t()
    b = torch.randn(7, 50)[:, 2:47]
    for i, candidate in enumerate([source, out]):
        torch.testing.assert_close(_run(tmp_path, candidate, f"add_{i}", a, b), a.t() + b)


def test_a_rewrite_that_assumes_contiguous_rows_is_caught(tmp_path):
    # the mistake a flat rewrite could make with strided rows: the tests must see it
    out = T.apply(read(LEAKY), "_leaky_rows", BLOCK=32)
    broken = out.replace("row_idx * in_row_stride", "row_idx * n_cols")
    assert broken != out and fails(tmp_path, FIX / "problem_leaky_slice.py", {"ROWS": "4", "COLS": "20"}, broken)


HELPER_SUM = """
@triton.jit
def _centre(v):
    return v - tl.sum(v, axis=0) / v.shape[0]
"""


@pytest.mark.parametrize("old, new, why", [
    # each of these the transform once applied (rows n_cols apart): a wrong kernel, and with a hint
    # one that only the compiled kernel gets wrong (the interpreter ignores hints)
    ("tl.maximum(v, 0.0)", "tl.maximum(v, 0.0) + tl.num_programs(0)", "reads the grid: tl.num_programs"),
    ("tl.load(x_ptr + offs,", "tl.load(x_ptr + tl.max_contiguous(offs, BLOCK),", "compiler hint tl.max_contiguous"),
    ("x_ptr += r * n_cols\n", "x_ptr += tl.multiple_of(r * n_cols, 16)\n", "compiler hint tl.multiple_of"),
    ("tl.maximum(v, 0.0)", "_centre(v)", "not elementwise: calls tl.sum (line 9 in _centre)"),
    ("tl.maximum(v, 0.0)", "imported_helper(v)", "calls imported_helper"),
    # x_ptr was moved to the row (`x_ptr += r * n_cols`): an unmasked load through it is per row
    ("tl.load(b_ptr + offs, mask=m, other=0.0)", "tl.load(x_ptr)", "a tl.load at line 19 is not masked by offs < n_cols"),
])
def test_declines_what_a_lane_of_the_flat_grid_cannot_keep(old, new, why):
    source = read(FIX / "bias_relu_row_pointers.py")
    assert old in source
    source = source.replace(old, new).replace("\n\n@triton.jit\ndef row_bias_relu", HELPER_SUM + "\n\n@triton.jit\ndef row_bias_relu")
    r = report("flat_elementwise", source)["row_bias_relu"]
    assert not r.applies and why in r.reason, r.reason
    with pytest.raises(TransformError, match="row_bias_relu"):
        T.apply(source, "row_bias_relu")


def test_declines_an_unmasked_row_dependent_load_but_not_a_scalar_one():
    # the leaky fixture loads its slope unmasked (one address for all lanes: fine); a per-row load is not
    source = read(LEAKY).replace("slope = tl.load(slope_ptr)", "slope = tl.load(slope_ptr + row_idx)")
    (r,) = T.sites(source)
    assert not r.applies and "a tl.load at line 19 is not masked by col_offsets < n_cols" in r.reason, r.reason


def test_declines_a_column_block_id_used_beyond_the_columns():
    source = read(TRANSPOSED).replace("tl.store(C + pid_m * stride_cm + offs_n, a + b",
                                      "tl.store(C + pid_m * stride_cm + offs_n, a + b + pid_n")
    (r,) = T.sites(source)
    assert not r.applies and "uses the column-block program id pid_n beyond offs_n" in r.reason, r.reason


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
