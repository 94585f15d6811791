"""specialize_scalars: runtime integer arguments that shape the index math become tl.constexpr.

Applied to the suite's max pooling draft (ModelNew, a flat 1-D grid split by `%` and `//` of the
output sizes, a dilated window loop), its depthwise convolution draft (a 2-D grid) and an
independently written direct conv2d (kernel_function, upper-case names, pointers walked per input
channel), each verified on the interpreter at several shapes, window sizes and strides (every new
value compiles anew). It declines kernels whose loops walk a row in blocks (softmax), arguments the
kernel assigns to, and arguments the author marked `do_not_specialize`; a pointer reached through a
row-pointer variable and a float scale are not sizes (both seen in kernels written elsewhere, issue #21).
"""

from __future__ import annotations

import pytest

from kernelopt.optimize.transforms import TransformError, get_transform
from transform_checks import FIX, SUITE, read, report, verify_all

T = get_transform("specialize_scalars")


def constexprs(source: str, kernel: str) -> set[str]:
    import ast

    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == kernel)
    return {a.arg for a in fn.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}


def test_maxpool_flat_grid_divisors_and_window(tmp_path):
    source = read(SUITE / "maxpool2d" / "kernel.py")
    r = report("specialize_scalars", source)["maxpool2d_kernel"]
    assert r.applies and "W_out (divides an index" in r.reason and "ksize (bounds the loop" in r.reason
    out = T.apply(source, "maxpool2d_kernel")
    assert constexprs(out, "maxpool2d_kernel") == {"BLOCK", "ksize", "W_out", "H_out", "stride", "padding",
                                                     "dilation"}
    assert constexprs(source, "maxpool2d_kernel") == {"BLOCK"}
    assert out.split("class ModelNew")[1] == source.split("class ModelNew")[1]  # the launch is unchanged
    shapes = [{"BATCH": "2", "CHANNELS": "5", "HEIGHT": "9", "WIDTH": "12"},
              {"BATCH": "1", "CHANNELS": "3", "HEIGHT": "11", "WIDTH": "7", "KERNEL_SIZE": "2", "STRIDE": "1",
               "PADDING": "0"},
              {"BATCH": "1", "CHANNELS": "2", "HEIGHT": "13", "WIDTH": "10", "DILATION": "2"}]
    verify_all(tmp_path, SUITE / "maxpool2d" / "problem.py", shapes, [out])


def test_depthwise_two_d_grid(tmp_path):
    source = read(SUITE / "depthwise_conv2d" / "kernel.py")
    out = T.apply(source, "depthwise_conv2d_kernel")
    assert {"ksize", "C", "W_out", "stride", "padding"} <= constexprs(out, "depthwise_conv2d_kernel")
    shapes = [{"BATCH": "2", "CHANNELS": "3", "HEIGHT": "20", "WIDTH": "15"},
              {"BATCH": "1", "CHANNELS": "2", "HEIGHT": "9", "WIDTH": "13", "KERNEL_SIZE": "5", "STRIDE": "2",
               "PADDING": "2"}]
    verify_all(tmp_path, SUITE / "depthwise_conv2d" / "problem.py", shapes, [out])


def test_kernel_function_conv2d_other_names(tmp_path):
    source = read(FIX / "conv2d_pointer_walk.py")
    out = T.apply(source, "conv2d_direct")
    assert {"CIN", "COUT", "OW"} <= constexprs(out, "conv2d_direct")
    shapes = [{}, {"BATCH": "3", "IN_CHANNELS": "4", "OUT_CHANNELS": "7", "HEIGHT": "9", "WIDTH": "5"},
              {"KERNEL_SIZE": "5", "PADDING": "2", "HEIGHT": "8", "WIDTH": "11"}]
    verify_all(tmp_path, FIX / "problem_conv2d.py", shapes, [out])


def test_declines_row_loops_assigned_and_unspecialized_arguments():
    softmax = report("specialize_scalars", read(SUITE / "softmax" / "kernel.py"))
    assert all(not r.applies and "nothing to specialize" in r.reason for r in softmax.values())
    source = read(SUITE / "maxpool2d" / "kernel.py")
    # an argument the kernel assigns to cannot be a compile-time value; the author's do_not_specialize holds
    assigned = source.replace("    mask = offs < total\n", "    mask = offs < total\n    ksize = ksize + 0\n")
    assert "ksize" not in constexprs(T.apply(assigned, "maxpool2d_kernel"), "maxpool2d_kernel")
    pinned = source.replace("@triton.jit\n", '@triton.jit(do_not_specialize=["W_out", "H_out"])\n')
    assert not {"W_out", "H_out"} & constexprs(T.apply(pinned, "maxpool2d_kernel"), "maxpool2d_kernel")
    by_position = source.replace("@triton.jit\n", "@triton.jit(do_not_specialize=[5, 6])\n")  # H_out, W_out
    assert not {"W_out", "H_out"} & constexprs(T.apply(by_position, "maxpool2d_kernel"), "maxpool2d_kernel")
    nothing = pinned.replace("for kh in range(0, ksize)", "for kh in range(0, 3)").replace(
        "for kw in range(0, ksize)", "for kw in range(0, 3)")
    with pytest.raises(TransformError, match="nothing to specialize"):
        T.apply(nothing, "maxpool2d_kernel")
    with pytest.raises(TransformError, match="unknown parameter"):
        T.apply(source, "maxpool2d_kernel", UNROLL=1)


def test_row_pointer_variable_and_float_scale_stay_runtime(tmp_path):
    """A pointer reached through a row-pointer variable (`row_ptr = x_ptr + (...) * W`, then
    `tl.load(row_ptr + ...)`) once became `x_ptr: tl.constexpr` (the launch then fails: a tensor is
    no compile-time value), and a float that scales each tap (`acc += tl.load(...) * inv_area`) a
    float constexpr; neither is a size. The window, the divisors and the padding subtracted from
    an address are."""
    source = read(FIX / "avgpool_row_pointer.py")
    out = T.apply(source, "avgpool_rows")
    assert constexprs(out, "avgpool_rows") == {"BLOCK", "ksize", "W_out", "H_out", "stride", "padding", "H", "W"}
    shapes = [{"BATCH": "2", "CHANNELS": "3", "HEIGHT": "7", "WIDTH": "10"},
              {"BATCH": "1", "CHANNELS": "2", "HEIGHT": "9", "WIDTH": "5", "KERNEL_SIZE": "2", "STRIDE": "2",
               "PADDING": "0"}]
    verify_all(tmp_path, SUITE / "avgpool2d" / "problem.py", shapes, [out])


def test_convolution_step_named_like_a_memory_stride(tmp_path):
    """`stride_h` that makes a bounds-checked input coordinate is the convolution's step and is
    specialized; the tensors' memory strides (`input_h_stride`, `weight_h_stride`) are not."""
    source = read(FIX / "conv2d_flat_stride_names.py")
    r = report("specialize_scalars", source)["conv2d_flat"]
    assert r.applies and "stride_h (a convolution step" in r.reason
    out = T.apply(source, "conv2d_flat")
    got = constexprs(out, "conv2d_flat")
    assert {"stride_h", "stride_w", "padding_h", "padding_w", "kernel_height", "output_width"} <= got
    assert not {n for n in got if n.endswith("_stride")}  # memory strides stay runtime
    shapes = [{}, {"KERNEL_SIZE": "2", "STRIDE": "2", "PADDING": "0", "HEIGHT": "9", "WIDTH": "5"}]
    verify_all(tmp_path, FIX / "problem_conv2d.py", shapes, [out])
