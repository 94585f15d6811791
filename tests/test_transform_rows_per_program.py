"""rows_per_program: a one-program-per-row kernel runs ROWS_PER_PROGRAM rows per program.

Applied to suite drafts of several shapes (a three-pass softmax, a whole-row log-softmax
with kernel_function, a 2-D-grid max over dim 1, a row scan, a pooling kernel whose axis 0 is
an output row of a plane, a 2-D-grid elementwise epilogue) and to independently written
kernels (a kernel_function row sum with a lambda grid and an inline int64 program id; a
kernel_function log-softmax with `program_id(axis=0)` and `from triton import language as tl`;
a ModelNew layer norm launched through a grid variable), each verified on the interpreter with
row counts that leave the last program a tail (1, 3, 5 rows for 4 rows per program).
"""

import pytest

from kernelopt.optimize.transforms import TransformError, get_transform
from transform_checks import ADVANCING_KERNELS, FIX, SUITE, fails, knob_names, knob_value, verify_all, without_restores

T = get_transform("rows_per_program")


def rewrite(path, **params) -> str:
    source = path.read_text()
    ok = [r.site for r in T.sites(source) if r.applies]
    assert len(ok) >= 1, [(r.kernel, r.reason) for r in T.sites(source)]
    return T.apply(source, ok[0], **params)


CASES = [
    (SUITE / "softmax" / "kernel.py", SUITE / "softmax" / "problem.py", [{"ROWS": "1", "COLS": "5"}, {"ROWS": "5", "COLS": "1100"}]),
    (SUITE / "log_softmax" / "kernel.py", SUITE / "log_softmax" / "problem.py", [{"ROWS": "3", "COLS": "33"}]),
    (SUITE / "max_dim1" / "kernel.py", SUITE / "max_dim1" / "problem.py", [{"BATCH": "3", "DIM1": "4", "DIM2": "40"}]),
    (SUITE / "cumsum" / "kernel.py", SUITE / "cumsum" / "problem.py", [{"ROWS": "5", "COLS": "300"}]),
    (SUITE / "avgpool2d" / "kernel.py", SUITE / "avgpool2d" / "problem.py",
     [{"BATCH": "2", "CHANNELS": "3", "HEIGHT": "7", "WIDTH": "10"}]),
    (SUITE / "bias_silu_residual" / "kernel.py", SUITE / "bias_silu_residual" / "problem.py",
     [{"ROWS": "3", "COLS": "200"}]),
    (FIX / "rowsum_lambda_grid.py", SUITE / "row_sum" / "problem.py", [{"ROWS": "1", "COLS": "7"}, {"ROWS": "5", "COLS": "70"}]),
    (FIX / "logsoftmax_rowptr.py", SUITE / "log_softmax" / "problem.py", [{"ROWS": "3", "COLS": "37"}]),
    (FIX / "layernorm_three_pass.py", SUITE / "layernorm" / "problem.py", [{"ROWS": "5", "DIM": "45"}]),
]


@pytest.mark.slow
@pytest.mark.parametrize("path,problem,shapes", CASES, ids=lambda c: getattr(c, "stem", None) and c.parent.name)
def test_rows_per_program_verifies_with_tail_rows(path, problem, shapes, tmp_path):
    out4 = rewrite(path)
    assert "ROWS_PER_PROGRAM" in knob_names(out4) and knob_value(out4, "ROWS_PER_PROGRAM") == 4
    out2 = rewrite(path, ROWS_PER_PROGRAM=2)
    assert knob_value(out2, "ROWS_PER_PROGRAM") == 2
    assert any(not r.applies and "already takes ROWS_PER_PROGRAM" in r.reason for r in T.sites(out4))
    verify_all(tmp_path, problem, shapes, [out4, out2])


def test_the_grid_reads_the_knob_so_changing_it_stays_correct():
    from kernelopt.optimize.knobs.rewrite import set_knobs

    out = rewrite(SUITE / "rmsnorm" / "kernel.py")
    assert "META['ROWS_PER_PROGRAM']" in out
    changed = set_knobs(out, {"ROWS_PER_PROGRAM": 8})
    assert "ROWS_PER_PROGRAM=8" in changed and "META['ROWS_PER_PROGRAM']" in changed


def test_declines_what_is_not_one_program_per_row():
    reasons = {}
    for path in (SUITE / "mse_loss" / "kernel.py", FIX / "grid_stride_rows.py", SUITE / "cross_entropy" / "kernel.py"):
        for r in T.sites(path.read_text()):
            reasons[(path.parent.name if path.parent.name != "transforms" else path.stem, r.kernel)] = r
    assert "flat range" in reasons[("mse_loss", "mse_kernel")].reason
    assert "num_programs" in reasons[("grid_stride_rows", "persistent_rowsum")].reason
    assert "program_id(0)" in reasons[("cross_entropy", "mean_kernel")].reason
    assert reasons[("cross_entropy", "row_loss_kernel")].applies
    early = (SUITE / "row_sum" / "kernel.py").read_text().replace(
        "        acc += tl.load(", "        if start > n_cols:\n            return\n        acc += tl.load(")
    (r,) = T.sites(early)
    assert not r.applies and "returns early" in r.reason
    with pytest.raises(TransformError, match="returns early"):
        T.apply(early, "row_sum_kernel")
    with pytest.raises(TransformError, match="not a positive integer"):
        T.apply((SUITE / "row_sum" / "kernel.py").read_text(), "row_sum_kernel", ROWS_PER_PROGRAM=0)


GUARDED = (SUITE / "log_softmax" / "kernel.py").read_text().replace(
    "    row = tl.program_id(0)\n",
    "    row = tl.program_id(0)\n    if row >= n_rows:\n        return\n    if tl.program_id(0) < 0: return\n").replace(
    "n_cols, BLOCK: tl.constexpr)", "n_cols, n_rows, BLOCK: tl.constexpr)").replace(
    "(x, y, cols, BLOCK=", "(x, y, cols, rows, BLOCK=")


@pytest.mark.slow
def test_guard_returns_become_conditions_on_the_row(tmp_path):
    # `if row >= n_rows: return` is common; inside the row loop it must end that row only
    assert "return\n" in GUARDED and "n_rows, BLOCK" in GUARDED
    out = T.apply(GUARDED, "log_softmax_kernel", ROWS_PER_PROGRAM=4)
    import ast

    fn = next(n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.FunctionDef) and n.name == "log_softmax_kernel")
    assert not any(isinstance(n, ast.Return) for n in ast.walk(fn))
    assert "if not (row >= n_rows):" in out and "if not (row_id < 0):" in out
    verify_all(tmp_path, SUITE / "log_softmax" / "problem.py", [{"ROWS": "5", "COLS": "33"}], [GUARDED, out])


# found on Liger-Kernel's and unsloth's row kernels: wrapped in a loop over rows, the second row started from the
# first row's pointer (wrong rows, out of bounds)
@pytest.mark.parametrize("fixture, kernel, problem, shapes, advanced", ADVANCING_KERNELS)
def test_restores_the_pointer_arguments_a_row_advances(tmp_path, fixture, kernel, problem, shapes, advanced):
    source = fixture.read_text()
    out = T.apply(source, kernel)
    for name in advanced:  # copied before the loop, restored as its first statements
        assert f"    {name}_0 = {name}\n" in out and f"        {name} = {name}_0\n" in out
    assert out.index(f"{advanced[0]}_0 = {advanced[0]}") < out.index("for rr in range(0, ROWS_PER_PROGRAM)")
    verify_all(tmp_path, problem, shapes, [source, out])
    assert fails(tmp_path, problem, shapes[0], without_restores(out))


def test_declines_a_kernel_that_assigns_to_a_constexpr_parameter():
    source = (FIX / "scale_add_rows_advance.py").read_text().replace(
        "    cols = tl.arange(0, BLOCK)", "    BLOCK = BLOCK * 1\n    cols = tl.arange(0, BLOCK)")
    r = {x.kernel: x for x in T.sites(source)}["scale_add_advance"]
    assert not r.applies
    assert "assigns to its constexpr parameter BLOCK (line 16)" in r.reason and "\n" not in r.reason
