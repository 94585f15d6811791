"""block_program_axis: one program handles BLOCK_PID consecutive values of a program-id index.

Applied to the suite's conv3d draft (ModelNew, a 3-D grid bound to a variable, `co = pid % C_out`
split from the program id, scalar weight loads), to an independently written direct conv2d
(kernel_function, a 2-D grid written at the launch, pointers advanced per input channel,
tl.static_range taps), to a row-per-program matrix product written as scalar-loop FMAs
(ModelNew, a lambda grid, the row index used whole) and to the suite's matrix-vector product and
RMSNorm drafts and a tutorial-style layer norm fixture (reductions of the blocked value; a
shared weight row), each verified on the interpreter at shapes
where the output channels / rows are not a multiple of the block (the last program's tail is
masked). It declines kernels where no load is shared (softmax, a depthwise convolution), where the
axis is a flat tile index, and where the index decides control flow, is scanned, reduced in a
kernel with 2-D tensors, or is stored to an address that does not depend on it.
"""

import ast
from functools import partial

import pytest

from kernelopt.optimize.knobs.rewrite import set_knobs
from kernelopt.optimize.transforms import TransformError, get_transform
from transform_checks import FIX, SUITE, declined, fails, knob_names, knob_value, verify_all

T = get_transform("block_program_axis")
_reason = partial(declined, T)  # the reason T gives for declining a kernel; apply refuses it
CONV3D = SUITE / "conv3d" / "kernel.py"
CONV2D = FIX / "conv2d_pointer_walk.py"
ROWFMA = FIX / "matmul_row_fma.py"
LOOP_NEST = "            id_ = od * stride - padding + kd\n"


def sites(path_or_source) -> dict[str, object]:
    source = path_or_source if isinstance(path_or_source, str) else path_or_source.read_text()
    return {r.site or r.kernel: r for r in T.sites(source)}


def test_sites_name_the_axis_and_the_blocked_index():
    got = sites(CONV3D)
    assert set(got) == {"conv3d_kernel@pid0", "conv3d_kernel@pid1"}
    assert "co = program_id(0) % C_out" in got["conv3d_kernel@pid0"].reason
    assert "oh = program_id(1) % H_out" in got["conv3d_kernel@pid1"].reason
    assert got["conv3d_kernel@pid0"].params == {"BLOCK_PID": 4}
    assert set(sites(CONV2D)) == {"conv2d_direct@pid0"}  # axis 1 is a flat pixel tile
    assert "row = program_id(0)" in sites(ROWFMA)["row_fma_matmul@pid0"].reason
    out = T.apply((SUITE / "matvec_bf16" / "kernel.py").read_text(), "matvec_kernel@pid0")
    assert "tl.store(y_ptr + row, tl.sum(acc, axis=1, keep_dims=True).to(y_ptr.dtype.element_ty), mask=pid0_ok)" in out


def test_the_rewrite_shares_the_loads_that_do_not_depend_on_the_index():
    out = T.apply(CONV3D.read_text(), "conv3d_kernel@pid0")
    # the weight (per output channel) is a masked vector load; the input neighbourhood is loaded once
    assert "* ksize + kw, mask=pid0_ok)" in out
    assert "x = tl.load(x_ptr + (((n * C_in + ci) * D + id_) * H + ih) * W + iw, mask=ok, other=0.0)" in out
    assert "n = (pid0_block // pid0_nblocks)" in out and "co = pid0_lanes" in out
    assert "acc = tl.zeros((BLOCK_PID, BLOCK_W), dtype=tl.float32)" in out
    assert "mask=tl.where(pid0_ok, mask, False)" in out
    # the grid variable's axis 0 (n * c_out) becomes n * cdiv(c_out, BLOCK_PID), read from META
    assert "grid[0] // (c_out) * triton.cdiv(c_out, META['BLOCK_PID'])" in out
    assert "BLOCK_PID" in knob_names(out) and knob_value(out, "BLOCK_PID") == 4
    changed = set_knobs(out, {"BLOCK_PID": 16})
    assert "BLOCK_PID=16" in changed and "META['BLOCK_PID']" in changed
    # a grid written at the launch: the factor that is the output-channel count is divided
    out2 = T.apply(CONV2D.read_text(), "conv2d_direct@pid0", BLOCK_PID=8)
    assert "lambda META: (n * triton.cdiv(cout, META['BLOCK_PID']), triton.cdiv(oh * ow, 32))" in out2
    assert knob_value(out2, "BLOCK_PID") == 8
    # the row used whole: cdiv of the lambda grid's extent, the old extent passed for the mask
    out3 = T.apply(ROWFMA.read_text(), "row_fma_matmul")
    assert "triton.cdiv(m, meta['BLOCK_PID'])" in out3 and "pid0_count=m" in out3
    assert "pid0_ok = pid0_lanes < pid0_count" in out3
    for o in (out, out2, out3):
        (r,) = [r for r in T.sites(o) if r.kernel and not r.applies]
        assert "already takes BLOCK_PID" in r.reason


@pytest.mark.slow
@pytest.mark.parametrize("path,site,problem,shapes", [
    (CONV3D, "conv3d_kernel@pid0", SUITE / "conv3d" / "problem.py",
     [{"BATCH": "2", "IN_CHANNELS": "2", "OUT_CHANNELS": "5", "DEPTH": "2", "HEIGHT": "3", "WIDTH": "5"}]),
    (CONV3D, "conv3d_kernel@pid1", SUITE / "conv3d" / "problem.py",
     [{"BATCH": "1", "IN_CHANNELS": "2", "OUT_CHANNELS": "2", "DEPTH": "2", "HEIGHT": "5", "WIDTH": "4"}]),
    (CONV2D, "conv2d_direct@pid0", FIX / "problem_conv2d.py",
     [{"OUT_CHANNELS": "5"}, {"BATCH": "1", "OUT_CHANNELS": "8", "IN_CHANNELS": "1"},
      {"OUT_CHANNELS": "3", "STRIDE": "2", "PADDING": "0", "HEIGHT": "9", "WIDTH": "8"}]),
    (ROWFMA, "row_fma_matmul@pid0", FIX / "problem_matmul.py",
     [{"M": "5", "N": "20", "K": "7"}, {"M": "8", "N": "16", "K": "3"}, {"M": "1", "N": "33", "K": "2"}]),
    # a reduction of the blocked value (tl.sum(acc, axis=0) per row): axis 1 of the block, kept
    (SUITE / "matvec_bf16" / "kernel.py", "matvec_kernel@pid0", SUITE / "matvec_bf16" / "problem.py",
     [{"M": "5", "K": "300"}, {"M": "1", "K": "7"}]),
    (SUITE / "rmsnorm" / "kernel.py", "rmsnorm_kernel@pid0", SUITE / "rmsnorm" / "problem.py",
     [{"ROWS": "5", "DIM": "45"}, {"ROWS": "3", "DIM": "600"}]),
    (FIX / "layernorm_tutorial_style.py", "_layer_norm_fwd@pid0", SUITE / "layernorm" / "problem.py",
     [{"ROWS": "5", "DIM": "45"}]),
], ids=["conv3d-co", "conv3d-oh", "conv2d-kernel_function", "matmul-row-fma", "matvec-reduction", "rmsnorm-shared-weight",
        "layernorm-tutorial"])
def test_verifies_with_ragged_tails(path, site, problem, shapes, tmp_path):
    source = path.read_text()
    out4 = T.apply(source, site)
    out2 = T.apply(source, site, BLOCK_PID=2)
    assert knob_value(out4, "BLOCK_PID") == 4 and knob_value(out2, "BLOCK_PID") == 2
    verify_all(tmp_path, problem, shapes, [out4, out2])


@pytest.mark.slow
def test_a_wrong_block_start_fails_verification(tmp_path):
    # the check above can see a broken rewrite: every program starting at index 0 computes wrong channels
    out = T.apply(CONV2D.read_text(), "conv2d_direct@pid0")
    broken = out.replace("(pid0_block % pid0_nblocks) * BLOCK_PID", "0 * BLOCK_PID")
    assert broken != out
    assert fails(tmp_path, FIX / "problem_conv2d.py", {"OUT_CHANNELS": "5"}, broken)


def test_declines_kernels_it_must_not_touch():
    assert "no load in a loop is shared" in _reason((SUITE / "softmax" / "kernel.py").read_text(), "softmax_kernel")
    dw = _reason((SUITE / "depthwise_conv2d" / "kernel.py").read_text(), "depthwise_conv2d_kernel")
    assert "axis 0: no load in a loop is shared" in dw and "axis 1: program_id(1) indexes BLOCK-sized tiles" in dw
    assert "flat range" in _reason((SUITE / "matmul_fp32" / "kernel.py").read_text(), "matmul_kernel")
    rowfma = ROWFMA.read_text()
    guarded = rowfma.replace("    for k in range(0, K):\n", "    if row >= M:\n        return\n    for k in range(0, K):\n")
    assert "`row >= M` decides control flow" in _reason(guarded, "row_fma_matmul")
    scanned = rowfma.replace("tl.store(c_ptr + row * stride_cm + cols, acc,", "tl.store(c_ptr + row * stride_cm + cols, "
                             "tl.cumsum(acc, axis=0),")
    assert "calls cumsum on a value that depends on row" in _reason(scanned, "row_fma_matmul")
    matvec = (SUITE / "matvec_bf16" / "kernel.py").read_text()
    two_d = matvec.replace("cols = start + tl.arange(0, BLOCK_K)", "cols = start + tl.arange(0, BLOCK_K)[None, :]")
    assert two_d != matvec
    assert "tl.sum at line 23 reduces (in a kernel with tensors of more than one dimension)" in _reason(
        two_d, "matvec_kernel")
    racing = rowfma.replace("tl.store(c_ptr + row * stride_cm + cols, acc", "tl.store(c_ptr + cols, acc")
    assert "writes an address that does not depend on row" in _reason(racing, "row_fma_matmul")
    looped = rowfma.replace("range(0, K)", "range(0, row + K)")
    assert "the loop over `range(0, row + K)` depends on row" in _reason(looped, "row_fma_matmul")
    shaped = rowfma.replace("acc = tl.zeros((BN,), dtype=tl.float32)", "acc = tl.zeros(ACC_SHAPE, dtype=tl.float32)")
    assert "tl.zeros at line 16 takes a shape not written as a tuple" in _reason(shaped, "row_fma_matmul")
    # a grid it cannot read: computed elsewhere and passed in
    hidden = rowfma.replace("row_fma_matmul[lambda meta: (m, triton.cdiv(n, meta[\"BN\"]))]", "row_fma_matmul[make_grid(m)]")
    assert "the grid is not a tuple written in the source" in _reason(hidden, "row_fma_matmul")


def test_accumulator_starts_are_widened_or_declined():
    scalar = ROWFMA.read_text().replace("acc = tl.zeros((BN,), dtype=tl.float32)", "acc = 0.0 + tl.zeros((BN,), dtype=tl.float32)")
    assert "acc starts as `0.0 + tl.zeros((BN,), dtype=tl.float32)`" in _reason(scalar, "row_fma_matmul")
    conv = CONV3D.read_text()
    assert LOOP_NEST in conv
    # a scalar start in a kernel whose tensors are 1-D: (BLOCK_PID, 1)
    as_number = conv.replace("acc = tl.zeros((BLOCK_W,), dtype=tl.float32)", "acc = 0.0")
    out = T.apply(as_number, "conv3d_kernel@pid0")
    assert "acc = tl.full((BLOCK_PID, 1), 0.0, tl.float32)" in out
    ast.parse(out)


def test_bad_sites_and_parameters_are_refused():
    source = CONV3D.read_text()
    with pytest.raises(TransformError, match="expected KERNEL@pid0"):
        T.apply(source, "conv3d_kernel@rows")
    with pytest.raises(TransformError, match="program_id.2. indexes BLOCK-sized tiles"):
        T.apply(source, "conv3d_kernel@pid2")
    with pytest.raises(TransformError, match="unknown parameter"):
        T.apply(source, "conv3d_kernel@pid0", BLOCK_PID0=4)
    with pytest.raises(TransformError, match="not a positive integer"):
        T.apply(source, "conv3d_kernel@pid0", BLOCK_PID=0)


def test_the_triton_pack_entry_makes_the_optimizer_propose_it(tmp_path):
    # the shipped pack's block-program-axis entry, recommended for the conv3d draft, becomes one
    # proposal per axis it can block, each carrying its strategy id and BLOCK_PID as a knob
    from kernelopt.models.harness import Problem
    from kernelopt.models.optimize import OptimizeContext, Version
    from kernelopt.models.recommendation import Recommendation
    from kernelopt.optimize.transforms.optimizer import StrategiesOptimizer
    from kernelopt.strategies import load_strategies

    v0 = tmp_path / "v0.py"
    v0.write_text(CONV3D.read_text())
    member = Version(id="v0", round=0, path=str(v0))
    ctx = OptimizeContext(problem=Problem(path=str(SUITE / "conv3d" / "problem.py"), name="conv3d"), round=1,
                          beam=[member], history=[], failed_proposals=[], proposals_per_member=3,
                          recommendations={"v0": [Recommendation(strategy="block-program-axis", score=1.0,
                                                                 reason="test")]})
    props = StrategiesOptimizer(strategies=load_strategies()).propose(ctx)
    made = [p for p in props if p.extra.get("phase") == "transform"]
    assert [p.extra["transform"]["site"] for p in made] == ["conv3d_kernel@pid0", "conv3d_kernel@pid1"]
    assert all(p.strategy == "block-program-axis" and p.knobs.get("BLOCK_PID") == 4 for p in made)
