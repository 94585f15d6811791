"""persistent_grid: a few programs per SM loop over the original tiles (1-D, 2-D grids)."""

from __future__ import annotations

import pytest

from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import (ADVANCING_KERNELS, FIX, SUITE, fails, knob_names, knob_value, read, verify_all,
                                   without_restores)

T = get_transform("persistent_grid")


def test_one_d_per_row_kernel_function(tmp_path):
    source = read(FIX / "scale_add_per_row.py")
    (r,) = T.sites(source)
    assert r.applies and r.params == {"PROGRAMS_PER_SM": 2}
    out = T.apply(source, r.site, PROGRAMS_PER_SM=1)
    assert "for tile in tl.range(tl.program_id(0), grid_0, tl.num_programs(0)):" in out
    assert "row_id = tile" in out and "tl.program_id(axis=0)" not in out
    assert knob_value(out, "PROGRAMS_PER_SM") == 1
    # without CUDA: 2 SMs x 1 program -> 2 programs for 4..9 rows: every program loops
    shapes = [{"N_ROWS": "5", "HIDDEN": "50"}, {"N_ROWS": "9", "HIDDEN": "7"}, {"N_ROWS": "1", "HIDDEN": "3"}]
    verify_all(tmp_path, FIX / "problem_scale_add.py", shapes, [out, T.apply(source, r.site, PROGRAMS_PER_SM=3)])


def test_two_d_grid_model_new(tmp_path):
    source = read(FIX / "bias_relu_2d_grid.py")
    out = T.apply(source, "bias_relu_rows", PROGRAMS_PER_SM=1)
    assert "r = (tile % grid_0)" in out and "(tile // grid_0) * COL_BLOCK" in out
    shapes = [{"ROWS": "5", "COLS": "130"}, {"ROWS": "2", "COLS": "3"}]
    verify_all(tmp_path, FIX / "problem_bias_relu.py", shapes, [out])


def test_a_wrong_tile_walk_is_caught(tmp_path):
    out = T.apply(read(FIX / "scale_add_per_row.py"), "fused_scale_add", PROGRAMS_PER_SM=1)
    broken = out.replace("tl.num_programs(0)):", "tl.num_programs(0) + 1):")
    assert broken != out and fails(tmp_path, FIX / "problem_scale_add.py", {"N_ROWS": "9", "HIDDEN": "7"}, broken)


def test_suite_gelu_and_grouped_matmul(tmp_path):
    gelu = T.apply(read(SUITE / "gelu" / "kernel.py"), "gelu_kernel", PROGRAMS_PER_SM=1)
    assert {"BLOCK", "PROGRAMS_PER_SM"} <= knob_names(gelu)
    verify_all(tmp_path, SUITE / "gelu" / "problem.py", [{"ROWS": "3", "COLS": "300"}, {"ROWS": "1", "COLS": "5"}], [gelu])
    # composes with grouped_program_order: the tile loop feeds the grouped mapping its 2-D coordinates
    grouped = get_transform("grouped_program_order").apply(read(SUITE / "matmul_fp32" / "kernel.py"), "matmul_kernel",
                                                          GROUP_M=2)
    both = T.apply(grouped, "matmul_kernel", PROGRAMS_PER_SM=1)
    verify_all(tmp_path, SUITE / "matmul_fp32" / "problem.py", [{"M": "70", "N": "36", "K": "20"}], [both])


def test_meta_lambda_grid_model_new(tmp_path):
    source = read(FIX / "leaky_relu_meta.py")
    out = T.apply(source, "leaky", PROGRAMS_PER_SM=1)
    # the META grid is called once with what the launch passes; its literal is one knob for both
    assert "grid_sizes = (lambda meta: (triton.cdiv(count, meta[\"CHUNK\"]),))({'CHUNK': CHUNK_2})" in out
    assert "CHUNK=CHUNK_2" in out and knob_value(out, "CHUNK") == 64
    verify_all(tmp_path, FIX / "problem_leaky_relu.py", [{"N": "300"}, {"N": "1"}, {"N": "1000"}], [out])


def test_declines_an_unknown_grid_and_a_nested_return():
    computed = read(FIX / "scale_add_per_row.py").replace("grid = (n_rows,)", "grid = tuple([n_rows])")
    (r,) = T.sites(computed)
    assert not r.applies and "its size is not known" in r.reason
    with pytest.raises(TransformError):
        T.apply(computed, "fused_scale_add")
    nested = read(FIX / "scale_add_per_row.py").replace(
        "    start = row_id * hidden\n", "    if hidden > 0:\n        if row_id >= 1000000:\n            return\n    start = row_id * hidden\n")
    (r,) = T.sites(nested)
    assert not r.applies and "returns early" in r.reason


def test_a_bounds_guard_becomes_a_branch(tmp_path):
    # a padded grid and `if row >= n_rows: return`: the guard must keep skipping only its tile
    source = read(FIX / "scale_add_per_row.py").replace(
        "o_ptr, hidden, BLOCK_H", "o_ptr, hidden, n_rows, BLOCK_H").replace(
        "    start = row_id * hidden\n", "    if row_id >= n_rows:\n        return\n    start = row_id * hidden\n").replace(
        "grid = (n_rows,)", "grid = (n_rows + 3,)").replace("o, hidden, BLOCK_H", "o, hidden, n_rows, BLOCK_H")
    assert source.count("n_rows") == 5  # signature, guard, shape, grid, launch
    out = T.apply(source, "fused_scale_add", PROGRAMS_PER_SM=1)
    assert "        if not (row_id >= n_rows):\n            start = row_id * hidden" in out
    verify_all(tmp_path, FIX / "problem_scale_add.py", [{"N_ROWS": "5", "HIDDEN": "9"}, {"N_ROWS": "2", "HIDDEN": "3"}],
               [source, out])


def test_declines_twice():
    once = T.apply(read(SUITE / "gelu" / "kernel.py"), "gelu_kernel")
    (r,) = T.sites(once)
    assert not r.applies and "persistent already" in r.reason


# found on Liger-Kernel's swiglu: in the tile loop the next tile started from the last tile's pointer
@pytest.mark.parametrize("fixture, kernel, problem, shapes, advanced", ADVANCING_KERNELS)
def test_restores_the_pointer_arguments_a_tile_advances(tmp_path, fixture, kernel, problem, shapes, advanced):
    source = read(fixture)
    out = T.apply(source, kernel)
    for name in advanced:  # copied before the loop, restored as its first statements
        assert f"    {name}_0 = {name}\n" in out and f"        {name} = {name}_0\n" in out
    loop = out.index("for tile in tl.range(")
    assert out.index(f"{advanced[0]}_0 = {advanced[0]}") < loop < out.index(f"{advanced[0]} = {advanced[0]}_0")
    # without CUDA: 2 SMs x 2 programs -> 4 programs: 5 and 9 rows make programs loop
    verify_all(tmp_path, problem, shapes, [source, out])
    assert fails(tmp_path, problem, shapes[2], without_restores(out))  # program 1 runs tiles 1 and 5


def test_declines_a_kernel_that_deletes_a_parameter():
    source = read(FIX / "scale_add_rows_advance.py").replace("    cols = tl.arange", "    del w_ptr\n    cols = tl.arange")
    r = {x.kernel: x for x in T.sites(source)}["scale_add_advance"]
    assert not r.applies and "deletes its parameter w_ptr (line 16)" in r.reason


def test_a_program_id_used_as_a_tensor_stays_a_tensor(tmp_path):
    # found on Liger-Kernel's softmax (`row_id = tl.program_id(0).to(tl.int64)`): the tile loop's variable
    # replaced the call, and on the interpreter it is a Python int, which has no .to()
    source = (FIX / "scale_add_int64_row.py").read_text()
    out = get_transform("persistent_grid").apply(source, "scale_add_wide_row")
    assert "tl.cast(tile, tl.int32).to(tl.int64)" in out
    shapes = [{"N_ROWS": "5", "HIDDEN": "33"}, {"N_ROWS": "9", "HIDDEN": "7"}]
    verify_all(tmp_path, FIX / "problem_scale_add.py", shapes, [source, out])
