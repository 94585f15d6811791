"""single_pass_row: several block loops over a row become one tile, the row loaded once.

Applied to the suite drafts (softmax, rmsnorm, cross_entropy) and to three independently written
kernels (a kernel_function log-softmax with a row pointer, scalar running statistics, tl.range
and a positional tile; a ModelNew softmax whose loops count blocks, range(tl.cdiv(n, B)) and
range(0, (n + B - 1) // B); a ModelNew layer norm in three passes with a grid variable), each result
verified on the interpreter at ragged shapes (n < the old BLOCK, n not a multiple of it, 1 row).
"""

import ast

import pytest

from kernelopt.optimize.knobs.discover import discover_knobs
from kernelopt.optimize.transforms import get_transform
from kernelopt.source import kernel_features, parse_triton
from transform_checks import FIX, SUITE, verify_all

T = get_transform("single_pass_row")


def rewrite(path, site=None) -> str:
    """The transform applied at `site` (or its only applying site) of the file at `path`."""
    source = path.read_text()
    ok = [r.site for r in T.sites(source) if r.applies and "@" not in r.site]
    assert (site in ok) if site else len(ok) == 1, ok
    return T.apply(source, site or ok[0])


def one_tile(source: str):
    """The reports of the one-tile form (one per kernel; the @online variant left out)."""
    return [r for r in T.sites(source) if not (r.site or "").endswith("@online")]


def feats(source: str, kernel: str) -> set[str]:
    _, al, kernels = parse_triton(source)
    return kernel_features(kernels[kernel], al)


def loads(source: str, kernel: str) -> int:
    src, al, kernels = parse_triton(source)
    return sum(1 for n in ast.walk(kernels[kernel].fn) if isinstance(n, ast.Call) and al.tl_attr(n.func) == "load")


CASES = [
    # (candidate, kernel, problem, shapes)
    (SUITE / "softmax" / "kernel.py", "softmax_kernel", SUITE / "softmax" / "problem.py",
     [{"ROWS": "1", "COLS": "5"}, {"ROWS": "3", "COLS": "1100"}]),
    (SUITE / "rmsnorm" / "kernel.py", "rmsnorm_kernel", SUITE / "rmsnorm" / "problem.py",
     [{"ROWS": "1", "DIM": "7"}, {"ROWS": "3", "DIM": "600"}]),
    (SUITE / "cross_entropy" / "kernel.py", "row_loss_kernel", SUITE / "cross_entropy" / "problem.py",
     [{"BATCH": "1", "CLASSES": "3"}, {"BATCH": "5", "CLASSES": "1100"}]),
    (FIX / "logsoftmax_rowptr.py", "_lsm_fwd", SUITE / "log_softmax" / "problem.py",
     [{"ROWS": "1", "COLS": "5"}, {"ROWS": "3", "COLS": "37"}]),
    (FIX / "softmax_block_count.py", "softmax_fwd_blocks", SUITE / "softmax" / "problem.py",
     [{"ROWS": "1", "COLS": "5"}, {"ROWS": "3", "COLS": "130"}]),
    (FIX / "layernorm_three_pass.py", "ln_three_pass", SUITE / "layernorm" / "problem.py",
     [{"ROWS": "1", "DIM": "3"}, {"ROWS": "4", "DIM": "45"}]),
]


@pytest.mark.slow
@pytest.mark.parametrize("path,kernel,problem,shapes", CASES, ids=lambda c: getattr(c, "stem", None) and c.parent.name)
def test_rewrites_to_one_pass_and_verifies(path, kernel, problem, shapes, tmp_path):
    before = path.read_text()
    assert "multi_pass" in feats(before, kernel)
    out = rewrite(path, kernel)
    # one tile: no block loop left, the row read once (fewer loads), BLOCK from the row length
    assert "multi_pass" not in feats(out, kernel) and "row_loop" not in feats(out, kernel)
    assert loads(out, kernel) < loads(before, kernel)
    assert "next_power_of_2(" in out
    # the new kernel's own survey: nothing left to do, said so
    (again,) = [r for r in one_tile(out) if r.kernel == kernel]
    assert not again.applies and "already reads" in again.reason
    verify_all(tmp_path, problem, shapes, [out])


def test_block_is_no_longer_a_knob_so_the_search_cannot_break_the_tile():
    out = rewrite(SUITE / "softmax" / "kernel.py")
    names = {k.name for k in discover_knobs(out)}
    assert "BLOCK" in {k.name for k in discover_knobs((SUITE / "softmax" / "kernel.py").read_text())}
    assert "BLOCK" not in names and "num_warps" in names


def test_other_differs_becomes_a_where_on_the_loaded_row():
    out = rewrite(FIX / "logsoftmax_rowptr.py")
    assert "tl.where(inb, row, 0.0)" in out  # pass 3 loaded with other=0.0, pass 1 with -inf


def test_declines_passes_over_different_tensors():
    (r,) = one_tile((FIX / "two_inputs_two_passes.py").read_text())
    assert not r.applies and "different addresses" in r.reason


def test_declines_each_unprovable_shape_with_its_reason():
    base = (SUITE / "softmax" / "kernel.py").read_text()
    second = "    for start in range(0, n_cols, BLOCK):\n        cols = start + tl.arange(0, BLOCK)\n        x = tl.load"
    cases = {
        "different extents": base.replace(second, second.replace("range(0, n_cols", "range(0, n_cols - 1"), 1),
        "does not start at 0": base.replace(second, second.replace("range(0,", "range(1,"), 1),
        "assigns its variable": base.replace("        s += tl.exp(x - row_max)",
                                             "        s += tl.exp(x - row_max)\n        start = 0", 1),
        "no launch": base.replace("softmax_kernel[(rows,)](x, y, cols, BLOCK=1024)", "pass"),
        "autotune": base.replace("@triton.jit", "@triton.autotune(configs=[triton.Config({'BLOCK': 256})], key=[])\n"
                                 "@triton.jit"),
    }
    for why, text in cases.items():
        assert text != base, why
        (r,) = one_tile(text)
        assert not r.applies and why in r.reason, (why, r.reason)
    (r,) = one_tile((SUITE / "log_softmax" / "kernel.py").read_text())
    assert not r.applies and "already reads" in r.reason
    reports = {r.kernel: r for r in one_tile((SUITE / "cross_entropy" / "kernel.py").read_text())}
    assert reports["row_loss_kernel"].applies and not reports["mean_kernel"].applies


def test_a_store_between_passes_stops_reuse():
    # in place: pass 2 writes x, so pass 3 must read x from memory again, not reuse pass 1's registers
    text = '''
import triton
import triton.language as tl


@triton.jit
def inplace(x_ptr, n, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    m = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    for s in range(0, n, BLOCK):
        c = s + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(x_ptr + r * n + c, mask=c < n, other=-float("inf")))
    mx = tl.max(m, axis=0)
    for s in range(0, n, BLOCK):
        c = s + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + r * n + c, mask=c < n, other=0.0)
        tl.store(x_ptr + r * n + c, v - mx, mask=c < n)
    for s in range(0, n, BLOCK):
        c = s + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + r * n + c, mask=c < n, other=0.0)
        tl.store(x_ptr + r * n + c, tl.exp(v), mask=c < n)


def kernel_function(x):
    inplace[(x.shape[0],)](x, x.shape[1], BLOCK=128)
    return x
'''
    (r,) = one_tile(text)
    assert r.applies and "1 repeated load" in r.reason
    out = T.apply(text, "inplace")
    assert loads(out, "inplace") == 2  # pass 1's load (pass 2 reuses it) and pass 3's own


def test_apply_refuses_a_declined_site_and_unknown_parameters():
    from kernelopt.optimize.transforms import TransformError

    text = (SUITE / "cross_entropy" / "kernel.py").read_text()
    with pytest.raises(TransformError, match="one block loop"):
        T.apply(text, "mean_kernel")
    with pytest.raises(TransformError, match="no parameters"):
        T.apply(text, "row_loss_kernel", BLOCK=4)


# --- the online variant (KERNEL@online): max pass + exp-sum pass fused (softmax family), or mean
# pass + squared-deviation pass fused by Welford (norms); for rows longer than a tile ------------

ONLINE_CASES = [
    # vector running max/sum (per lane), the suite drafts; BLOCK=1024 so 1100 columns is two chunks
    (SUITE / "softmax" / "kernel.py", "softmax_kernel", SUITE / "softmax" / "problem.py",
     [{"ROWS": "1", "COLS": "5"}, {"ROWS": "3", "COLS": "2100"}]),
    (SUITE / "cross_entropy" / "kernel.py", "row_loss_kernel", SUITE / "cross_entropy" / "problem.py",
     [{"BATCH": "4", "CLASSES": "1100"}]),
    # scalar running max/sum (tl.max / tl.sum per chunk), independently written
    (FIX / "logsoftmax_rowptr.py", "_lsm_fwd", SUITE / "log_softmax" / "problem.py",
     [{"ROWS": "1", "COLS": "5"}, {"ROWS": "3", "COLS": "37"}]),
    (FIX / "softmax_block_count.py", "softmax_fwd_blocks", SUITE / "softmax" / "problem.py",
     [{"ROWS": "2", "COLS": "130"}]),
    # norms: the mean pass and the squared-deviation pass fused (Welford per lane)
    (FIX / "layernorm_three_pass.py", "ln_three_pass", SUITE / "layernorm" / "problem.py",
     [{"ROWS": "1", "DIM": "5"}, {"ROWS": "3", "DIM": "150"}]),
    (FIX / "layernorm_tutorial_style.py", "_layer_norm_fwd", SUITE / "layernorm" / "problem.py",
     [{"ROWS": "2", "DIM": "150"}]),
]


@pytest.mark.slow
@pytest.mark.parametrize("path,kernel,problem,shapes", ONLINE_CASES,
                         ids=lambda c: getattr(c, "stem", None) and c.parent.name)
def test_online_variant_fuses_max_and_sum_and_verifies(path, kernel, problem, shapes, tmp_path):
    before = path.read_text()
    sites = {r.site: r for r in T.sites(before)}
    assert sites[f"{kernel}@online"].applies
    out = T.apply(before, f"{kernel}@online")
    # one loop fewer, one load of the row fewer; the block size is still the kernel's own knob
    assert len(feats(out, kernel) & {"multi_pass"}) <= 1
    assert loads(out, kernel) == loads(before, kernel) - 1
    assert "_new = " in out or "w_m2" in out
    verify_all(tmp_path, problem, shapes, [out])


def test_online_keeps_the_block_a_knob():
    from kernelopt.optimize.knobs.discover import discover_knobs

    out = T.apply((SUITE / "cross_entropy" / "kernel.py").read_text(), "row_loss_kernel@online")
    assert "row_loss_kernel.BLOCK" in {k.name for k in discover_knobs(out)} or "BLOCK" in {
        k.name for k in discover_knobs(out)}


def test_online_declines_what_is_not_max_then_exp_sum():
    from kernelopt.optimize.transforms import TransformError

    rms = (SUITE / "rmsnorm" / "kernel.py").read_text()  # its second pass writes: nothing to fuse
    assert "rmsnorm_kernel@online" not in {r.site for r in T.sites(rms)}
    with pytest.raises(TransformError, match="online form: .*stores"):
        T.apply(rms, "rmsnorm_kernel@online")
    ln = (FIX / "layernorm_three_pass.py").read_text()
    unmasked = ln.replace("dv = tl.where(valid, v - mu, 0.0)", "dv = v - mu")
    assert "ln_three_pass@online" not in {r.site for r in T.sites(unmasked)}
    with pytest.raises(TransformError, match="not a running max .*and as a norm: .*not tl.where"):
        T.apply(unmasked, "ln_three_pass@online")
    other_row = ln.replace("v = tl.load(inp + offset + cols, mask=valid, other=0.0)\n        dv",
                           "v = tl.load(inp + offset + cols + 1, mask=valid, other=0.0)\n        dv", 1)
    assert other_row != ln
    with pytest.raises(TransformError, match="another value"):
        T.apply(other_row, "ln_three_pass@online")
    base = (SUITE / "softmax" / "kernel.py").read_text()
    other = base.replace("        s += tl.exp(x - row_max)", "        s += tl.exp(2.0 * x - row_max)")
    with pytest.raises(TransformError, match="exponentiates another value"):
        T.apply(other, "softmax_kernel@online")
    shifted = base.replace("        s += tl.exp(x - row_max)", "        s += tl.exp(x - row_max)\n        s += 1.0")
    with pytest.raises(TransformError, match="not one running sum"):
        T.apply(shifted, "softmax_kernel@online")
    not_inf = base.replace('m = tl.full((BLOCK,), -float("inf")', "m = tl.full((BLOCK,), 0.0")
    with pytest.raises(TransformError, match="does not start at -inf"):
        T.apply(not_inf, "softmax_kernel@online")
