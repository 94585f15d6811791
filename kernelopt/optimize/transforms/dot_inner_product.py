"""dot_inner_product: `tl.dot` for inner products written as broadcast-multiply-reduce.

    acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)      # a: (M, K), b: (K, N)
    acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)      # x: (M, K), w: (N, K)

compute a matrix product on the CUDA cores, through a 3-D (M, K, N) temporary the size of
all three tiles. Each becomes one `tl.dot` (tensor cores, no temporary), with `tl.trans`
where an operand is stored K-major the other way round:

    acc += tl.dot(a, b, input_precision="ieee")
    acc += tl.dot(x, tl.trans(w), input_precision="ieee")

input_precision defaults to "ieee" so fp32 inputs keep fp32 products (Triton's default
for fp32 is TF32, which would change the result); it is a parameter ("tf32" trades
precision for speed). tl.dot needs every tile dimension >= 16: the knob domains of the
result say so, and verification judges a launch with smaller tiles.

It declines kernels with no such product; matrix-vector products (`tl.sum(w * x[None, :],
axis=1)`: a dimension of 1) and direct convolutions (a loop nest of scalar weight loads)
are named in the reason. Implicit GEMM for convolutions is dot_rank1_loop's: after
block_program_axis gives the accumulator an output-channel dimension, the input-channel loop
of rank-1 updates becomes tl.dot of BLOCK_K-wide tiles.
"""

from __future__ import annotations

import ast

from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    call_arg,
    kernel_sites,
    parse_for_apply,
    text,
    tl_calls,
)
from kernelopt.source import JitKernel, apply_edits

NAME = "dot_inner_product"
PRECISIONS = ["ieee", "tf32", "tf32x3"]


def _expand_dims(node: ast.AST) -> tuple[ast.AST, int] | None:
    """For `v[:, :, None]`-style 3-D broadcasts of a 2-D value: (v, the position of None)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 3):
        return None
    nones = []
    for i, e in enumerate(node.slice.elts):
        if isinstance(e, ast.Constant) and e.value is None:
            nones.append(i)
        elif not (isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None):
            return None
    return (node.value, nones[0]) if len(nones) == 1 else None


def _axis(call: ast.Call) -> int | None:
    arg = call_arg(call, 1, "axis")
    if isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.USub) and isinstance(arg.operand, ast.Constant):
        v = -arg.operand.value
    elif isinstance(arg, ast.Constant) and type(arg.value) is int:
        v = arg.value
    else:
        return None
    return v % 3 if -3 <= v < 3 else None


def _match(p: Parsed, call: ast.Call) -> tuple[str, bool, str, bool] | None:
    """(left operand, transpose it, right operand, transpose it) when `call` is tl.sum(A * B, axis=r)
    of two 3-D broadcasts that form a matrix product, else None."""
    if not call.args or any(kw.arg not in ("axis",) for kw in call.keywords):
        return None  # keep_dims, dtype: not a plain reduction
    prod = call.args[0]
    r = _axis(call)
    if r is None or not (isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult)):
        return None
    ops = [_expand_dims(prod.left), _expand_dims(prod.right)]
    if ops[0] is None or ops[1] is None:
        return None
    o0, o1 = [d for d in range(3) if d != r]
    by_missing = {missing: value for value, missing in ops}  # type: ignore[misc]
    if set(by_missing) != {o0, o1}:
        return None  # both miss the same dim, or one misses the reduced dim: not a matrix product
    left, right = by_missing[o1], by_missing[o0]  # left spans (o0, r), right spans (o1, r)
    # dot wants left as (o0, r) and right as (r, o1); each is stored in increasing dim order
    return text(p, left), r < o0, text(p, right), o1 < r


def _has_2d_broadcast_reduce(p: Parsed, k: JitKernel) -> bool:
    """`tl.sum(w * x[None, :], axis=1)`, or products of vectors accumulated in a loop then summed."""
    if tl_calls(k.fn, p.al, "sum") and any(
            isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.value, ast.BinOp)
            and isinstance(n.value.op, ast.Mult) and ast.dump(n.value.left) != ast.dump(n.value.right)
            for loop in ast.walk(k.fn) if isinstance(loop, ast.For)
            for n in ast.walk(loop)):
        return True
    for call in tl_calls(k.fn, p.al, "sum"):
        if call.args and isinstance(call.args[0], ast.BinOp) and isinstance(call.args[0].op, ast.Mult):
            subs = [n for n in ast.walk(call.args[0]) if isinstance(n, ast.Subscript)
                    and isinstance(n.slice, ast.Tuple) and len(n.slice.elts) == 2
                    and any(isinstance(e, ast.Constant) and e.value is None for e in n.slice.elts)]
            if subs:
                return True
    return False


def _conv_like(k: JitKernel) -> bool:
    """A loop nest (depth >= 2) accumulating elementwise products: a direct convolution's shape."""
    for outer in ast.walk(k.fn):
        if isinstance(outer, ast.For) and any(isinstance(n, ast.For) and n is not outer for n in ast.walk(outer)):
            for n in ast.walk(outer):
                if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.value, ast.BinOp) \
                        and isinstance(n.value.op, ast.Mult):
                    return True
    return False


def _sites_in(p: Parsed, k: JitKernel) -> list[tuple[ast.Call, tuple[str, bool, str, bool]]]:
    out = []
    for call in tl_calls(k.fn, p.al, "sum"):
        m = _match(p, call)
        if m is not None:
            out.append((call, m))
    return out


class DotInnerProduct:
    name = NAME
    backend = "triton"
    summary = "tl.dot for inner products written as tl.sum(a[:, :, None] * b[None, :, :], axis=1)"
    requires = ["triton", "reduction"]
    params = [TransformParam(name="input_precision", default="ieee", domain=list(PRECISIONS),
                             doc="tl.dot input precision for fp32 operands ('ieee' keeps fp32 products)")]

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            found = _sites_in(p, k)
            if found:
                lines = ", ".join(str(c.lineno) for c, _ in found)
                return (f"broadcast-multiply-reduce at line {lines} becomes tl.dot (tiles must be >= 16)",
                        {"input_precision": "ieee"})
            if _conv_like(k):
                return ("a direct convolution loop nest (products accumulated in nested loops): no inner product "
                        "here; block_program_axis then dot_rank1_loop make it implicit GEMM")
            if _has_2d_broadcast_reduce(p, k):
                return "a matrix-vector product (vector products reduced): tl.dot needs every dimension >= 16"
            return "no tl.sum(a[:, :, None] * b[None, :, :], axis=...) inner product in the kernel"

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        precision = params.get("input_precision", "ieee")
        if precision not in PRECISIONS:
            raise TransformError(f"input_precision={precision!r}: expected one of {PRECISIONS}")
        p, k = parse_for_apply(source, site)
        found = _sites_in(p, k)
        if not found:
            raise TransformError(f"{k.fn.name}: no broadcast-multiply-reduce inner product")
        tl = p.al.tl_prefix()
        edits = []
        for call, (left, tl_left, right, tl_right) in found:
            a = f"{tl}.trans({left})" if tl_left else left
            b = f"{tl}.trans({right})" if tl_right else right
            edits.append((p.src.start(call), p.src.end(call), f"{tl}.dot({a}, {b}, input_precision={precision!r})"))
        return apply_edits(source, edits, what=f"{NAME} edits")
