"""split_reduction: a summed block loop splits across SPLIT programs on axis 1, combined by
atomic_add into a zeroed fp32 buffer that is copied into the output (its dtype kept).

Applied to suite drafts (row_sum, matvec_bf16, cross_entropy's one-program mean) and to two
independently written kernels (a kernel_function row sum with a lambda grid and an inline
program id, `total = total + ...`; a ModelNew bf16 matvec with BLOCK_M-row 2-D tiles, a masked
store, an explicit cast and a grid variable), verified on the interpreter at shapes where K is
not a multiple of the block, K < block, one row, and SPLIT larger than the number of blocks.
"""

import pytest

from kernelopt.optimize.transforms import TransformError, get_transform
from transform_checks import FIX, SUITE, knob_names, knob_value, verify_all

T = get_transform("split_reduction")


def rewrite(path, site=None, **params) -> str:
    source = path.read_text()
    ok = [r.site for r in T.sites(source) if r.applies]
    assert (site in ok) if site else len(ok) == 1, [(r.kernel, r.reason) for r in T.sites(source)]
    return T.apply(source, site or ok[0], **params)


CASES = [
    (SUITE / "row_sum" / "kernel.py", None, SUITE / "row_sum" / "problem.py",
     [{"ROWS": "1", "COLS": "5"}, {"ROWS": "3", "COLS": "300"}]),
    (SUITE / "matvec_bf16" / "kernel.py", None, SUITE / "matvec_bf16" / "problem.py", [{"M": "3", "K": "300"}]),
    (SUITE / "cross_entropy" / "kernel.py", "mean_kernel", SUITE / "cross_entropy" / "problem.py",
     [{"BATCH": "5", "CLASSES": "7"}, {"BATCH": "300", "CLASSES": "3"}]),
    (FIX / "rowsum_lambda_grid.py", None, SUITE / "row_sum" / "problem.py", [{"ROWS": "2", "COLS": "70"}]),
    (FIX / "matvec_row_tiles.py", None, SUITE / "matvec_bf16" / "problem.py", [{"M": "5", "K": "200"}]),
]


@pytest.mark.slow
@pytest.mark.parametrize("path,site,problem,shapes", CASES, ids=lambda c: getattr(c, "stem", None) and c.parent.name)
def test_split_sum_verifies(path, site, problem, shapes, tmp_path):
    out4 = rewrite(path, site)
    assert "atomic_add" in out4 and "program_id(1)" in out4 and ".copy_(" in out4
    assert "SPLIT" in knob_names(out4) and knob_value(out4, "SPLIT") == 4
    out8 = rewrite(path, site, SPLIT=8)  # more splits than blocks at the small shapes: empty chunks add zero
    assert any(not r.applies and "already takes SPLIT" in r.reason for r in T.sites(out4))
    verify_all(tmp_path, problem, shapes, [out4, out8])


def test_the_output_dtype_is_kept_and_partials_stay_fp32():
    out = rewrite(FIX / "matvec_row_tiles.py")
    assert "tl.atomic_add(Y + rows, dotted, mask=rmask)" in out  # the bf16 cast moved to copy_
    assert "dtype=torch.float32" in out and "y.copy_(y_acc)" in out


def test_declines_what_is_not_a_linear_sum():
    base = (SUITE / "row_sum" / "kernel.py").read_text()
    cases = {
        "max/min reduction": base.replace("acc += tl.load(", "acc = tl.maximum(acc, tl.load(").replace(
            "other=0.0)\n", "other=0.0))\n"),
        "not linear": base.replace("tl.sum(acc, axis=0))", "tl.sqrt(tl.sum(acc, axis=0)))"),
        "does not start at zero": base.replace("acc = tl.zeros((BLOCK,), dtype", "acc = tl.full((BLOCK,), 1.0, dtype"),
    }
    bias = base.replace("tl.sum(acc, axis=0))", "tl.sum(acc, axis=0) + 1.0)")
    cases["not linear#bias"] = bias
    for why, text in cases.items():
        assert text != base, why
        (r,) = T.sites(text)
        assert not r.applies and why.split("#")[0] in r.reason, (why, r.reason)
    reasons = {}
    for name in ("softmax", "cumsum", "mse_loss", "max_dim1"):
        for r in T.sites((SUITE / name / "kernel.py").read_text()):
            reasons[name] = r.reason
            assert not r.applies
    assert "more than one loop" in reasons["softmax"]
    assert "inside the loop" in reasons["cumsum"]
    assert "atomics" in reasons["mse_loss"]
    assert "axis 0" in reasons["max_dim1"]
    with pytest.raises(TransformError, match="not a positive integer"):
        T.apply(base, "row_sum_kernel", SPLIT=0)
