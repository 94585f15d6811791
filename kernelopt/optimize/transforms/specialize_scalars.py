"""specialize_scalars: runtime integer arguments that shape the index math become `tl.constexpr`.

A pooling or convolution kernel written with its window as runtime arguments
(`for kh in range(0, ksize)`, `ih = oh * stride - padding + kh * dilation`) and its flat
index split by runtime sizes (`ow = offs % W_out`, `oh = (offs // W_out) % H_out`) runs
an integer division of ~20 instructions per `//` and `%` and a loop whose trip count the
compiler does not know. Triton already specializes an integer argument equal to 1 and
notes divisibility by 16, but not the values themselves. Made `tl.constexpr`, a divisor
becomes a multiply and shift (a shift for a power of two), a small window loop is
unrolled, and the stride and padding fold into the addresses.

Chosen arguments, each a runtime scalar (not a pointer, not a memory stride, never
assigned in the kernel, not in `do_not_specialize`):
- a bound of a loop that is not a loop over a row in blocks (`range(ksize)`,
  `range(0, ksize)`; not `range(0, n, BLOCK)` or `range(cdiv(n, BLOCK))`: its trip count is
  large and every row length would compile anew for nothing);
- a divisor: the right side of `//` or `%`;
- a term combined with the index of such a loop (`kh * dilation`, `oh * stride - padding + kh`) into
  a value that feeds an address or a mask (not a loaded value: `acc += tl.load(...) * scale` keeps
  a float `scale` runtime); a name like a memory stride (`stride_h`, `H_stride`) counts there only
  as a convolution's step: where the coordinate it makes is bounds-checked (`ih >= 0`).

The cost is a compile per distinct value: right for shapes fixed per deployment, wrong for
sizes that change call by call. The launch is unchanged: Triton takes constexpr
arguments positionally or by keyword alike. No new knobs.
"""

from __future__ import annotations

import ast

from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.autotune_table import _STRIDE, pointer_names, shape_key
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    constexpr_annotation,
    grown_through_assignments,
    kernel_sites,
    names_read,
    names_stored,
    parse_for_apply,
    rebound_params,
    refuse_unknown,
    tl_calls,
)
from kernelopt.source import JitKernel, apply_edits, block_loop

NAME = "specialize_scalars"


def _is_range(call: ast.AST, p: Parsed) -> bool:
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "range") or p.al.tl_attr(f) in ("range", "static_range")


def _not_specialized(k: JitKernel, p: Parsed) -> set[str]:
    """Names in the kernel's `@triton.jit(do_not_specialize=[...])`."""
    out: set[str] = set()
    for dec in k.fn.decorator_list:
        if isinstance(dec, ast.Call) and p.al.is_triton_attr(dec.func, "jit"):
            for kw in dec.keywords:
                if kw.arg == "do_not_specialize" and isinstance(kw.value, (ast.List, ast.Tuple)):
                    for e in kw.value.elts:  # names, or positions in the signature
                        if isinstance(e, ast.Constant) and isinstance(e.value, str):
                            out.add(e.value)
                        elif isinstance(e, ast.Constant) and isinstance(e.value, int) and 0 <= e.value < len(k.params):
                            out.add(k.params[e.value])
    return out


def _index_names(p: Parsed, k: JitKernel) -> set[str]:
    """Names that feed an address or a mask of a load or store, through the assignments that compute
    them: `ih` in `ih = oh * stride - padding + kh` then `tl.load(x + ih * W, mask=ih < H)`. A value
    (`acc += tl.load(...) * scale`, `d = (t - c) * inv_sigma` then `tl.exp(d)`) is not an index: a
    float argument there is no size to specialize."""
    index: set[str] = set()
    for attr in ("load", "store"):
        for call in tl_calls(k.fn, p.al, attr):
            args = [a for i, a in enumerate(call.args) if not (attr == "store" and i == 1) and i < 3]
            args += [kw.value for kw in call.keywords if kw.arg in ("mask", "pointer")]
            for a in args:
                index |= names_read(a)
    return grown_through_assignments(k.fn, index, names_read)


def chosen(p: Parsed, k: JitKernel) -> dict[str, str] | str:
    """{argument: why} for the arguments to specialize, or why none is."""
    # never: assigned in the kernel (no compile-time value), or pinned by the author
    kept = {name for name, _ in rebound_params(k)} | _not_specialized(k, p)
    pointers = pointer_names(k, p)
    scalars = set(shape_key(k, p, pointers)) - kept
    if not scalars:
        return "no runtime integer argument that is neither a pointer, a memory stride nor assigned in the kernel"
    why: dict[str, str] = {}
    window_vars: set[str] = set()
    for node in ast.walk(k.fn):
        if isinstance(node, ast.For) and _is_range(node.iter, p) and block_loop(node, p.al, k) is None:
            bounds = {n for a in node.iter.args for n in names_read(a)} & scalars  # type: ignore[attr-defined]
            if len(node.iter.args) == 3 and bounds:  # type: ignore[attr-defined]
                step = node.iter.args[2]  # type: ignore[attr-defined]
                if not (isinstance(step, ast.Constant) and step.value == 1):
                    continue  # a runtime step: a strided walk, not a small window
            if bounds and isinstance(node.target, ast.Name):
                window_vars.add(node.target.id)
            for name in sorted(bounds):
                why.setdefault(name, f"bounds the loop at line {node.lineno}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            for name in sorted(names_read(node.right) & scalars):
                why.setdefault(name, f"divides an index at line {node.lineno}")
    if window_vars:
        index = _index_names(p, k)
        # a parameter named like a memory stride (`stride_h`, `H_stride`) is a convolution's step where it
        # makes a coordinate the kernel bounds-checks (`ih = oh * stride_h - pad + kh`, then `ih >= 0`),
        # not an address offset (`kh * w_stride_h`)
        compared = {n for c in ast.walk(k.fn) if isinstance(c, ast.Compare) for n in names_read(c)}
        steps = {name for name in k.params if _STRIDE.search(name)} - k.constexprs - pointers - kept
        for node in ast.walk(k.fn):
            if isinstance(node, (ast.Assign, ast.AugAssign)) and isinstance(node.value, ast.BinOp):
                read = names_read(node.value)
                if read & window_vars and names_stored(node) & index:
                    for name in sorted(read & scalars):
                        why.setdefault(name, f"combines with a window index at line {node.lineno}")
                    if names_stored(node) & compared:
                        for name in sorted(read & steps):
                            why.setdefault(name, f"a convolution step: combines with a window index into a "
                                                 f"bounds-checked coordinate at line {node.lineno}")
    if not why:
        return ("no runtime integer argument bounds a small loop, divides an index or combines with a loop "
                "index: nothing to specialize")
    return why


class SpecializeScalars:
    name = NAME
    backend = "triton"
    summary = "runtime integer arguments that bound window loops or divide indices become tl.constexpr"
    requires = ["triton"]
    params: list[TransformParam] = []

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            got = chosen(p, k)
            if isinstance(got, str):
                return got
            return "specializes " + ", ".join(f"{name} ({reason})" for name, reason in got.items()), {}

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        refuse_unknown(NAME, params, set())
        p, k = parse_for_apply(source, site)
        got = chosen(p, k)
        if isinstance(got, str):
            raise TransformError(f"{k.fn.name}: {got}")
        annotation = constexpr_annotation(p)
        edits = []
        for arg in k.fn.args.posonlyargs + k.fn.args.args:
            if arg.arg in got:
                edits.append((p.src.start(arg), p.src.end(arg), f"{arg.arg}: {annotation}"))
        return apply_edits(source, edits, what=f"{NAME} edits")
