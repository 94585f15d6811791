"""dot_rank1_loop: a scalar loop of rank-1 updates becomes a loop of tl.dot over BLOCK_K-wide tiles.

Applied to the suite's conv3d draft after block_program_axis (ModelNew, `acc += x * w` of a
(BLOCK_PID, 1) weight column and a (BLOCK_W,) input row, the input-channel loop outside the tap
loops, padding masks per tap), to an independently written GEMM (kernel_function, a 2-D grid,
`acc += a_col[:, None] * b_row[None, :]` through pointer names) and to a conv2d already blocked over
output channels (ModelNew, tap loops outside the channel loop, a 3-D grid), each verified on the
interpreter at ragged shapes (K not a multiple of BLOCK_K, M and N not multiples of their tiles).
It declines kernels where the update is not an outer product of two loads, an address is not
affine in the loop variable, a mask depends on it, or the loop carries other state.
"""

from functools import partial

import pytest

from kernelopt.optimize.transforms import TransformError, get_transform
from transform_checks import FIX, SUITE, declined, fails, knob_names, knob_value, verify_all

T = get_transform("dot_rank1_loop")
_reason = partial(declined, T)  # the reason T gives for declining a kernel; apply refuses it
BPA = get_transform("block_program_axis")
CONV3D = SUITE / "conv3d" / "kernel.py"
GEMM = FIX / "matmul_outer_product_loop.py"
CONV2D = FIX / "conv2d_oc_blocked.py"
ROWFMA = FIX / "matmul_row_fma.py"


def conv3d_blocked(block_pid: int = 32) -> str:
    return BPA.apply(CONV3D.read_text(), "conv3d_kernel@pid0", BLOCK_PID=block_pid)


def _site(source: str, kernel: str):
    (r,) = [r for r in T.sites(source) if r.kernel == kernel]
    return r


def test_sites_name_the_k_loop_and_the_two_loads():
    r = _site(conv3d_blocked(), "conv3d_kernel")
    assert r.applies and r.site == "conv3d_kernel"
    assert "the loop over ci (line 31)" in r.reason and r.params == {"BLOCK_K": 16, "input_precision": "ieee"}
    assert "the loop over kk" in _site(GEMM.read_text(), "outer_product_mm").reason
    assert "the loop over c " in _site(CONV2D.read_text(), "conv2d_oc_block").reason


def test_conv3d_after_block_program_axis_becomes_implicit_gemm():
    out = T.apply(conv3d_blocked(), "conv3d_kernel", BLOCK_K=32)
    # the input-channel loop steps by BLOCK_K, the tap loops stay inside it
    assert "    for ci in range(0, C_in, BLOCK_K):\n        ci_blk = ci + tl.arange(0, BLOCK_K)\n        for kd in" in out
    # the input tile (BLOCK_K, BLOCK_W) keeps the tap's padding mask element-wise; the weight tile (BLOCK_PID, BLOCK_K)
    assert "+ (ci_blk[:, None] - ci) * ((D * H) * W), mask=tl.where(ok, ci_blk[:, None] < C_in, False), other=0.0)" in out
    assert "+ (ci_blk[None, :] - ci) * ((ksize * ksize) * ksize), mask=tl.where(pid0_ok, ci_blk[None, :] < C_in, False)" in out
    assert "acc += tl.dot(w, x, input_precision='ieee')" in out
    assert "BLOCK_PID=32, BLOCK_K=32)" in out
    assert {"BLOCK_K", "BLOCK_PID"} <= knob_names(out) and knob_value(out, "BLOCK_K") == 32
    # under tl.dot the tile knobs' domains start at 16
    from kernelopt.optimize.knobs import discover_knobs
    doms = {k.name: k.domain for k in discover_knobs(out)}
    assert min(doms["BLOCK_K"]) == 16 and min(doms["BLOCK_PID"]) == 16
    # block_program_axis's default BLOCK_PID=4 is raised to 16 at the launch (tl.dot needs M >= 16)
    small = T.apply(conv3d_blocked(4), "conv3d_kernel")
    assert "BLOCK_PID=16, BLOCK_K=16)" in small and "BLOCK_PID=4" not in small
    assert "already takes BLOCK_K" in _reason(out, "conv3d_kernel")
    tf32 = T.apply(conv3d_blocked(), "conv3d_kernel", input_precision="tf32")
    assert "tl.dot(w, x, input_precision='tf32')" in tf32


def test_gemm_and_conv2d_rewrites():
    out = T.apply(GEMM.read_text(), "outer_product_mm")
    assert "for kk in range(0, K, BLOCK_K):" in out
    assert "a_col = tl.load((a_ptrs)[:, None] + (kk_blk[None, :] - kk) * sak, mask=tl.where((rm < M)[:, None], " \
           "kk_blk[None, :] < K, False), other=0.0)" in out
    assert "b_row = tl.load((b_ptrs) + (kk_blk[:, None] - kk) * sbk, mask=tl.where(rn < N, kk_blk[:, None] < K, " \
           "False), other=0.0)" in out
    assert "acc += tl.dot(a_col, b_row, input_precision='ieee')" in out
    out2 = T.apply(CONV2D.read_text(), "conv2d_oc_block")
    assert "for c in range(0, Cin, BLOCK_K):" in out2
    assert "(x_ptr + x_off) + (c_blk[:, None] - c) * (H * W)" in out2  # through the name x_off
    assert "acc += tl.dot(wv, xv, input_precision='ieee')" in out2
    # a unit stride along k (a row of A read k by k) adds the offsets alone
    out3 = T.apply(BPA.apply(ROWFMA.read_text(), "row_fma_matmul@pid0", BLOCK_PID=16), "row_fma_matmul")
    assert "a = tl.load((a_ptr + row * stride_am + k) + (k_blk[None, :] - k), mask=tl.where(pid0_ok, k_blk[None, :] < K" in out3


@pytest.mark.slow
@pytest.mark.parametrize("source,site,problem,shapes", [
    (lambda: conv3d_blocked(16), "conv3d_kernel", SUITE / "conv3d" / "problem.py",
     [{"BATCH": "1", "IN_CHANNELS": "3", "OUT_CHANNELS": "5", "DEPTH": "2", "HEIGHT": "3", "WIDTH": "5"},
      {"BATCH": "2", "IN_CHANNELS": "17", "OUT_CHANNELS": "18", "DEPTH": "2", "HEIGHT": "2", "WIDTH": "3",
       "STRIDE": "2", "PADDING": "1"}]),
    (lambda: GEMM.read_text(), "outer_product_mm", FIX / "problem_matmul.py",
     [{"M": "40", "N": "36", "K": "24"}, {"M": "5", "N": "33", "K": "7"}, {"M": "17", "N": "16", "K": "33"}]),
    (lambda: CONV2D.read_text(), "conv2d_oc_block", FIX / "problem_conv2d.py",
     [{"OUT_CHANNELS": "5"}, {"IN_CHANNELS": "18", "OUT_CHANNELS": "17", "HEIGHT": "5", "WIDTH": "4"},
      {"OUT_CHANNELS": "3", "STRIDE": "2", "PADDING": "0", "HEIGHT": "9", "WIDTH": "8"}]),
    (lambda: BPA.apply(ROWFMA.read_text(), "row_fma_matmul@pid0", BLOCK_PID=16), "row_fma_matmul",
     FIX / "problem_matmul.py", [{"M": "17", "N": "20", "K": "7"}, {"M": "5", "N": "16", "K": "40"}]),
], ids=["conv3d-after-block-program-axis", "gemm-kernel_function", "conv2d-oc-blocked-ModelNew",
        "row-fma-after-block-program-axis"])
def test_verifies_with_ragged_tails(source, site, problem, shapes, tmp_path):
    src = source()
    out16 = T.apply(src, site)
    out32 = T.apply(src, site, BLOCK_K=32)
    verify_all(tmp_path, problem, shapes, [out16, out32])


@pytest.mark.slow
def test_a_wrong_k_offset_fails_verification(tmp_path):
    # the check above can see a broken rewrite: an A tile that repeats its first column along k
    out = T.apply(GEMM.read_text(), "outer_product_mm")
    broken = out.replace("(kk_blk[None, :] - kk) * sak", "(kk_blk[None, :] - kk) * 0")
    assert broken != out
    assert fails(tmp_path, FIX / "problem_matmul.py", {"M": "5", "N": "33", "K": "7"}, broken)


def test_declines_kernels_it_must_not_touch():
    gemm = GEMM.read_text()
    # a loop that carries a pointer (advanced per input channel), after block_program_axis
    walk = BPA.apply((FIX / "conv2d_pointer_walk.py").read_text(), "conv2d_direct@pid0", BLOCK_PID=16)
    assert "carries state besides total: `x_base += H * W`" in _reason(walk, "conv2d_direct")
    # the conv3d draft itself: a scalar weight per program, no outer product
    assert "loops over ci (line 27), kd (line 28), kh (line 30), kw (line 32): acc is not a 2-D tile" in _reason(
        CONV3D.read_text(), "conv3d_kernel")
    assert "not affine in kk" in _reason(gemm.replace("kk * sak", "(kk % 4) * sak"), "outer_product_mm")
    assert "multiplies two values that depend on kk" in _reason(gemm.replace("kk * sak", "kk * kk"), "outer_product_mm")
    assert "the mask of tl.load at line 18 depends on kk" in _reason(
        gemm.replace("mask=rm < M,", "mask=(rm < M) & (kk < K),"), "outer_product_mm")
    assert "fills masked lanes with 1.0" in _reason(gemm.replace("mask=rm < M, other=0.0", "mask=rm < M, other=1.0"),
                                                    "outer_product_mm")
    assert "is not a product of two loads" in _reason(
        gemm.replace("acc += a_col[:, None] * b_row[None, :]", "acc += a_col[:, None] + b_row[None, :]"),
        "outer_product_mm")
    assert "is not an outer product (both operands are columns)" in _reason(
        gemm.replace("b_row[None, :]", "b_row[:, None]"), "outer_product_mm")
    assert "the loop has side effects (tl.store" in _reason(
        gemm.replace("        acc += a_col", "        tl.store(C, 0.0)\n        acc += a_col"), "outer_product_mm")
    assert "`a_col[:, None]` is not loaded once in the loop" in _reason(
        gemm.replace("        acc += a_col", "        a_col = a_col * 2.0\n        acc += a_col"), "outer_product_mm")
    assert "a_col is read besides the outer product" in _reason(
        gemm.replace("        acc += a_col", "        acc2 = a_col * 2.0\n        acc += a_col"), "outer_product_mm")
    assert "a_ptrs, computed in the loop, is read after it" in _reason(
        gemm.replace("    c_ptrs = C +", "    c_ptrs = a_ptrs + C +"), "outer_product_mm")
    assert "tl.dot needs M, N >= 16" in _reason(gemm.replace("tl.zeros((TM, TN)", "tl.zeros((8, TN)"), "outer_product_mm")
    assert "TM is 8 at the launch" in _reason(
        gemm.replace("TM=16, TN=32)", "TM=tm, TN=32)").replace("    m, k = a.shape\n", "    m, k = a.shape\n    tm = 8\n"),
        "outer_product_mm")
    # a kernel already on tl.dot, and a softmax: no rank-1 loop
    assert "kk" not in _reason((SUITE / "softmax" / "kernel.py").read_text(), "softmax_kernel")


def test_bad_parameters_are_refused():
    source = GEMM.read_text()
    with pytest.raises(TransformError, match="unknown parameter"):
        T.apply(source, "outer_product_mm", BLOCK=16)
    with pytest.raises(TransformError, match="tl.dot needs an integer >= 16"):
        T.apply(source, "outer_product_mm", BLOCK_K=8)
    with pytest.raises(TransformError, match="input_precision"):
        T.apply(source, "outer_product_mm", input_precision="fp8")
    with pytest.raises(TransformError, match="no @triton.jit kernel 'nope'"):
        T.apply(source, "nope")


def test_proposed_on_the_block_program_axis_lineage_of_conv3d(tmp_path):
    # the FMA-pipe rule names dot-rank1-loop beside tensor-cores-tl-dot; on the conv3d lineage after
    # block-program-axis (v1 = v0 blocked with BLOCK_PID=32) its recommendations make the strategies
    # optimizer propose dot_rank1_loop, carrying the strategy id and BLOCK_K as a knob
    import yaml

    from kernelopt.models.harness import Problem
    from kernelopt.models.optimize import Attempt, OptimizeContext, Version
    from kernelopt.models.recommendation import Recommendation
    from kernelopt.optimize.transforms.optimizer import StrategiesOptimizer
    from kernelopt.strategies import load_strategies
    from transform_checks import ROOT

    rules = yaml.safe_load((ROOT / "knowledge" / "rules" / "kernelopt.yaml").read_text())
    fma = next(r for r in rules["rules"] if r["id"] == "fma-pipe")
    assert "dot-rank1-loop" in fma["strategies"]
    v0, v1 = tmp_path / "v0.py", tmp_path / "v1.py"
    v0.write_text(CONV3D.read_text())
    v1.write_text(conv3d_blocked(32))
    member = Version(id="v1", round=1, path=str(v1), parent="v0")
    history = [Attempt(version="v1", parent="v0", change="block_program_axis", strategy="block-program-axis",
                       outcome="faster", transform="block_program_axis@conv3d_kernel@pid0")]
    ctx = OptimizeContext(problem=Problem(path=str(SUITE / "conv3d" / "problem.py"), name="conv3d"), round=2,
                          beam=[member], history=history, failed_proposals=[], proposals_per_member=3,
                          recommendations={"v1": [Recommendation(strategy=s, score=1.0, reason="fma-pipe")
                                                  for s in fma["strategies"]]})
    made = [p for p in StrategiesOptimizer(strategies=load_strategies()).propose(ctx)
            if p.extra.get("phase") == "transform"]
    assert [(p.strategy, p.extra["transform"]["name"], p.extra["transform"]["site"]) for p in made] == [
        ("dot-rank1-loop", "dot_rank1_loop", "conv3d_kernel")]
    assert made[0].knobs.get("BLOCK_K") == 16 and "tl.dot(w, x" in made[0].source


def test_the_shipped_hints_widen_the_dot_tile_of_a_blocked_convolution_first(tmp_path):
    # after dot_rank1_loop the knob search starts from the pack's hints: BLOCK_K 32, the M tile
    # (BLOCK_PID) 64 and 8 warps come before any other move, and also together. In the session 12
    # suite run (H200) the search ended at BLOCK_PID 16 after 10 evaluations; a 64 x 128 x 32 tile ran
    # 27.0 ms where 32 x 128 x 16 ran 33.2 ms (session 9, H200).
    from kernelopt.models.harness import Problem
    from kernelopt.models.optimize import Attempt, OptimizeContext, Version
    from kernelopt.optimize.transforms.optimizer import StrategiesOptimizer
    from kernelopt.strategies import load_strategies

    opt = StrategiesOptimizer(strategies=load_strategies())
    dotted = T.apply(conv3d_blocked(16), "conv3d_kernel")
    v2 = tmp_path / "v2.py"
    v2.write_text(dotted)
    member = Version(id="v2", round=2, path=str(v2), parent="v1")
    history = [Attempt(version="v2", parent="v1", change="dot_rank1_loop", strategy="dot-rank1-loop",
                       outcome="faster", transform="dot_rank1_loop@conv3d_kernel")]
    ctx = OptimizeContext(problem=Problem(path=str(SUITE / "conv3d" / "problem.py"), name="conv3d"), round=3,
                          beam=[member], history=history, failed_proposals=[], proposals_per_member=6)
    knob_moves = [p for p in opt.propose(ctx) if p.extra.get("phase") == "hint"]
    firsts = [p.knobs for p in knob_moves[:5]]
    assert {"BLOCK_K": 32}.items() <= firsts[0].items()
    assert any(k.get("BLOCK_PID") == 64 and k.get("BLOCK_K") == 16 for k in firsts)
    assert any(k.get("num_warps") == 8 for k in firsts)
    together = [k for k in (p.knobs for p in knob_moves)
                if k.get("BLOCK_PID") == 64 and k.get("BLOCK_K") == 32 and k.get("num_warps") == 8]
    assert together, [p.change for p in knob_moves]
