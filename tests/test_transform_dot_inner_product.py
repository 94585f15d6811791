"""dot_inner_product: tl.sum over a 3-D broadcast product becomes tl.dot (with tl.trans as needed)."""

from __future__ import annotations

import pytest

from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.source import features
from tests.transform_checks import FIX, SUITE, fails, read, report, verify_all

T = get_transform("dot_inner_product")
MATMUL = FIX / "problem_matmul.py"
LINEAR = FIX / "problem_linear.py"


def test_a_times_b_model_new(tmp_path):
    source = read(FIX / "matmul_broadcast_reduce.py")
    r = report("dot_inner_product", source)["outer_sum_mm"]
    assert r.applies and r.params == {"input_precision": "ieee"}
    out = T.apply(source, "outer_sum_mm")
    assert "acc += tl.dot(a, b, input_precision='ieee')" in out and "dot" in features(out)
    # the same product with A read transposed (K, M) and reduced over axis 0: tl.trans on the left
    at = source.replace("a = tl.load(a_ptr + om[:, None] * K + ok[None, :], mask=(om[:, None] < M) & (ok[None, :] < K)",
                        "a = tl.load(a_ptr + ok[:, None] + om[None, :] * K, mask=(ok[:, None] < K) & (om[None, :] < M)"
                        ).replace("tl.sum(b[None, :, :] * a[:, :, None], axis=1)", "tl.sum(a[:, :, None] * b[:, None, :], axis=0)")
    assert at != source
    out_t = T.apply(at, "outer_sum_mm")
    assert "tl.dot(tl.trans(a), b, input_precision='ieee')" in out_t
    shapes = [{"M": "40", "N": "36", "K": "24"}, {"M": "17", "N": "16", "K": "33"}]
    verify_all(tmp_path, MATMUL, shapes, [out, out_t])


def test_x_times_w_transposed_kernel_function(tmp_path):
    source = read(FIX / "linear_rowwise_reduce.py")
    (r,) = T.sites(source)
    assert r.applies and r.site == "xwt"
    out = T.apply(source, "xwt")
    assert "total = total + tl.dot(xt, tl.trans(wt), input_precision='ieee')" in out
    shapes = [{"ROWS": "20", "IN_F": "24", "OUT_F": "18"}, {"ROWS": "33", "IN_F": "16", "OUT_F": "5"}]
    verify_all(tmp_path, LINEAR, shapes, [out])


def test_a_wrong_transpose_is_caught(tmp_path):
    out = T.apply(read(FIX / "linear_rowwise_reduce.py"), "xwt")
    broken = out.replace("tl.dot(xt, tl.trans(wt)", "tl.dot(tl.trans(xt), tl.trans(wt)")
    assert broken != out and fails(tmp_path, LINEAR, {"ROWS": "16", "IN_F": "16", "OUT_F": "16"}, broken)


@pytest.mark.parametrize("draft, why", [("matvec_bf16", "matrix-vector"), ("conv3d", "direct convolution"),
                                        ("depthwise_conv2d", "direct convolution"), ("matmul_fp32", "no tl.sum"),
                                        ("softmax", "no tl.sum")])
def test_declines(draft, why):
    source = read(SUITE / draft / "kernel.py")
    reports = T.sites(source)
    assert all(not r.applies for r in reports) and any(why in r.reason for r in reports), [r.reason for r in reports]
    with pytest.raises(TransformError):
        T.apply(source, reports[0].kernel)


def test_bad_precision_is_refused():
    with pytest.raises(TransformError, match="input_precision"):
        T.apply(read(FIX / "linear_rowwise_reduce.py"), "xwt", input_precision="fp64")
