"""autotune_table: literal launch parameters become an `@triton.autotune` table keyed on the shapes.

A kernel launched with literal tiles and launch meta-parameters (`BLOCK_M = 64` ...
`kernel[grid](..., BLOCK_M=BLOCK_M, num_warps=4)`) runs every size with the values its
author picked for one. For users who ship the kernel across sizes the rewrite moves
those values into `@triton.autotune(configs=[...], key=[shape arguments])`: the current
values first, then each value moved one step either way in its knob domain (a neighbour
table, not a product). Triton then picks per shape and caches the pick.

With `PRESET="dot"`, a kernel whose `tl.dot` accumulator is `tl.zeros((BM, BN))` of tuned tiles, in
a loop stepped by a tuned tile (BK), gets the current values plus the matmul tile configs Triton's
matmul tutorial autotunes over on CUDA, with Hopper's larger 64-deep tiles: (BM, BN, BK, num_warps,
num_stages) from (128, 256, 64, 8, 3) to (64, 64, 32, 4, 4). A knob search moves one value a step
at a time and needs many evaluations to get from 64x64x32 to 128x256x64 (on an H200 the suite's
bf16 matmul ended at 0.50x of torch.compile after 5); one table tries them in one evaluation. A
config the GPU cannot hold (shared memory) is dropped by the autotuner as out of resources.

Only values whose change keeps the kernel's meaning go into the table: tiles that size
the grid ('parallel') or step a loop ('loop') as the knob discovery classifies them,
and num_warps / num_stages. Any other constexpr (e.g. a block that must cover a whole
row) stays at the launch. The grid, when it reads a tuned tile, becomes
`lambda META: ...` reading META[...]. The configs' values are knobs of the result
(`config0.BLOCK_M`, ...).

It declines autotuned kernels, kernels launched from several places, tiles passed
positionally, tiles the host code reads beyond the launch and the grid (a buffer sized
by BLOCK would not follow the tuned value), and kernels without shape arguments.
"""

from __future__ import annotations

import ast
import re

from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    call_arg,
    grown_through_assignments,
    int_param,
    kernel_sites,
    literal_tuple,
    name_loads,
    parents,
    parse_for_apply,
    refuse_unknown,
    tl_calls,
)
from kernelopt.source import JitKernel, apply_edits, bindings, grid_names, indent_of, keywords_delete_spans

NAME = "autotune_table"
_POINTER_USES = ("load", "store", "make_block_ptr", "make_tensor_descriptor", "atomic_add", "atomic_max",
                 "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor")
# memory strides: `stride_am`, `x_stride`, `lda`, the short `sam`/`sbk` form (s, operand, axis);
# a bare `stride` is a convolution's step, a shape argument
_STRIDE = re.compile(r"stride_|_stride|^ld[a-z]$|^s[a-z][mnkhwcdb0-9]$")


# (BM, BN, BK, num_warps, num_stages): the CUDA configs of Triton's matmul tutorial
# (03-matrix-multiplication), with Hopper's 64-deep tiles for the larger ones.
DOT_PRESETS = (
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3), (128, 128, 32, 4, 4),
    (64, 256, 32, 4, 4), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (64, 64, 32, 4, 4),
)
PRESETS = ("neighbours", "dot")


class _Tuned:
    def __init__(self, param: str, value: object, domain: list, kw: ast.keyword | None, var: str | None) -> None:
        self.param, self.value, self.domain, self.kw, self.var = param, value, domain, kw, var


def dot_tiles(p: Parsed, k: JitKernel, tuned: list[_Tuned]) -> tuple[str, str, str] | str:
    """The tuned tiles (BM, BN, BK) of the kernel's tl.dot: the accumulator's `tl.zeros((BM, BN))`
    and the step of the loop the dot runs in; a reason when there is not exactly one such dot."""
    names = {t.param for t in tuned}
    dots = tl_calls(k.fn, p.al, "dot")
    if len(dots) != 1:
        return "no tl.dot" if not dots else f"{len(dots)} tl.dot calls (one accumulator tile is needed)"
    (dot,) = dots
    up = parents(k.fn)
    acc: str | None = None
    acc_arg = call_arg(dot, 2, "acc")
    if isinstance(acc_arg, ast.Name):
        acc = acc_arg.id
    else:
        node: ast.AST = dot
        while id(node) in up and not isinstance(node, (ast.AugAssign, ast.Assign)):
            node = up[id(node)]
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            acc = node.target.id
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            acc = node.targets[0].id
    if acc is None:
        return "the tl.dot's accumulator is not a named variable"
    shape: list[str] | None = None
    for z in tl_calls(k.fn, p.al, "zeros"):
        parent = up.get(id(z))
        if (isinstance(parent, ast.Assign) and any(isinstance(t, ast.Name) and t.id == acc for t in parent.targets)
                and z.args and isinstance(z.args[0], (ast.Tuple, ast.List))):
            shape = [e.id if isinstance(e, ast.Name) else "" for e in z.args[0].elts]
    if shape is None or len(shape) != 2 or not all(n in names for n in shape):
        return f"the accumulator {acc} is not tl.zeros((BM, BN)) of two tuned tiles"
    node = dot
    while id(node) in up and not isinstance(node, ast.For):
        node = up[id(node)]
    if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Call):
        return "the tl.dot is not in a loop over K"
    steps = sorted({n.id for a in node.iter.args for n in ast.walk(a) if isinstance(n, ast.Name) and n.id in names})
    if len(steps) != 1 or steps[0] in shape:
        return "the loop over K is not stepped by one tuned tile"
    return shape[0], shape[1], steps[0]


def _dot_configs(base: dict[str, object], tuned: list[_Tuned], tiles: tuple[str, str, str]) -> list[dict[str, object]]:
    """DOT_PRESETS on the kernel's own tile names; values outside a knob's domain leave a config out."""
    domains = {t.param: t.domain for t in tuned}
    out = []
    for bm, bn, bk, warps, stages in DOT_PRESETS:
        config = {**base, tiles[0]: bm, tiles[1]: bn, tiles[2]: bk}
        if "num_warps" in base:
            config["num_warps"] = warps
        if "num_stages" in base:
            config["num_stages"] = stages
        if all(not domains.get(n) or v in domains[n] for n, v in config.items()):
            out.append(config)
    return out


def _addends(node: ast.AST) -> list[ast.AST]:
    """The terms of a sum: `p + a * s + b` -> [p, a * s, b]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _addends(node.left) + _addends(node.right)
    return [node]


def _added_names(node: ast.AST) -> list[str]:
    """The bare names a sum adds (`p + a * s - pad + b` -> [p, b]): a pointer is never subtracted."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _added_names(node.left) + _added_names(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        return _added_names(node.left)
    return [node.id] if isinstance(node, ast.Name) else []


def shape_key(k: JitKernel, p: Parsed, pointers: set[str] | None = None) -> list[str]:
    """The kernel's runtime scalar parameters that are not pointers or strides: the autotune key.
    `pointers`: `pointer_names(k, p)`, where the caller has it already."""
    pointers = pointer_names(k, p) if pointers is None else pointers
    return [name for name in k.params if name not in k.constexprs and name not in pointers
            and not _STRIDE.search(name)]


def pointer_names(k: JitKernel, p: Parsed) -> set[str]:
    """Names the kernel uses as pointers (parameters and local pointer variables).

    A pointer is a bare term of an address (`x_ptr` in `x_ptr + row * n + cols`); a name
    inside a product there (`n`) is a size."""
    pointers: set[str] = set()
    whole: set[str] = set()  # names that are a whole address: pointer variables
    params = set(k.params)
    for attr in _POINTER_USES:
        for call in tl_calls(k.fn, p.al, attr):
            if call.args:
                # a subtracted name (`- padding`) is no pointer; the base may be a variable (`row_ptr =
                # x_ptr + ih * W`, then `tl.load(row_ptr + iw)`): the variables an address adds are followed
                added = set(_added_names(call.args[0]))
                pointers |= added
                whole |= added - params
    # through pointer variables: `a_ptrs = A + rm * K` then `tl.load(a_ptrs)` makes A a pointer too
    # (an offset like `iw` in `tl.load(x_ptr + ih * W + iw)` is not followed: `padding` is no pointer)
    pointers |= grown_through_assignments(k.fn, whole, lambda value: set(_added_names(value)))
    for node in ast.walk(k.fn):
        if isinstance(node, ast.Attribute) and node.attr == "dtype" and isinstance(node.value, ast.Name):
            pointers.add(node.value.id)
    return pointers


def _plan(p: Parsed, k: JitKernel, source: str) -> tuple[list[_Tuned], ast.Call, list[str]] | str:
    from kernelopt.optimize.knobs.discover import find_sites

    name = k.fn.name
    if k.autotune is not None:
        return "already autotuned"
    if not p.al.triton:
        return "the module does not `import triton` (the table is written as triton.autotune)"
    if any((p.al.tl_attr(n.func) or "").startswith("atomic_") for n in ast.walk(k.fn) if isinstance(n, ast.Call)):
        return "uses atomics: the autotuner's benchmark runs would accumulate into the output"
    loaded = {t.id for c in tl_calls(k.fn, p.al, "load") if c.args for t in _addends(c.args[0]) if isinstance(t, ast.Name)}
    stored = {t.id for c in tl_calls(k.fn, p.al, "store") if c.args for t in _addends(c.args[0]) if isinstance(t, ast.Name)}
    if loaded & stored & set(k.params):
        return f"writes {sorted(loaded & stored & set(k.params))[0]} in place: the benchmark runs would compound"
    calls = p.launches.get(name, [])
    if len(calls) != 1:
        return "no launch of the kernel in this file" if not calls else f"launched from {len(calls)} places"
    (call,) = calls
    key = shape_key(k, p)
    if not key:
        return "no shape arguments to key the table on"
    kws = {kw.arg: kw for kw in call.keywords if kw.arg}
    tuned: list[_Tuned] = []
    for site in find_sites(source):
        if site.kernel != name or site.kind not in ("constexpr", "launch"):
            continue
        param = site.names[0]
        if site.kind == "constexpr" and site.role not in ("parallel", "loop"):
            continue  # e.g. a block that must cover a row: not free to move
        if site.kind == "launch" and param not in ("num_warps", "num_stages"):
            continue
        kw = kws.get(param)
        if kw is None and site.insert_at is None:
            return f"{param} is passed positionally"
        var = kw.value.id if kw is not None and isinstance(kw.value, ast.Name) else None
        tuned.append(_Tuned(param, site.value, list(site.domain), kw, var))
    if not tuned:
        return "no literal launch parameter to tune"
    for meta in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        if meta in kws and not any(t.param == meta for t in tuned):
            return f"{meta} at the launch is computed or fixed (every triton.Config sets it)"
    return tuned, call, key


def _grid_edit(p: Parsed, call: ast.Call, tuned: list[_Tuned]) -> tuple[int, int, str] | None | str:
    """The edit that makes the grid read META for the tuned tiles; None when it reads none of them."""
    scopes = p.scopes_at(call)
    grid = call.func.slice  # type: ignore[attr-defined]
    vars_ = {t.var: t.param for t in tuned if t.var}
    names, _ = grid_names(grid, scopes)
    if not names & set(vars_):
        return None
    if isinstance(grid, ast.Lambda):
        meta, body = grid.args.args[0].arg if grid.args.args else "META", grid.body
        expr = body
    else:
        tup = literal_tuple(p, call)
        if tup is None:
            return "the grid reads a tuned tile but is not a tuple or lambda written in this file"
        meta, expr = "META", tup
    # Names of the expression that are tuned variables are replaced; any other name must not lead to one.
    edits: list[tuple[int, int, str]] = []
    for n in ast.walk(expr):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            if n.id in vars_:
                edits.append((p.src.start(n), p.src.end(n), f"{meta}[{vars_[n.id]!r}]"))
            elif n.id != meta:
                inner, _ = grid_names(n, scopes)
                if inner & set(vars_) - {n.id}:
                    return f"the grid reads a tuned tile through {n.id}"
    start, end = p.src.start(expr), p.src.end(expr)
    data = p.src.data
    out, pos = [], start
    for s, e, t in sorted(edits):
        out.append(data[pos:s].decode())
        out.append(t)
        pos = e
    out.append(data[pos:end].decode())
    body_text = "".join(out)
    if isinstance(grid, ast.Lambda):
        return start, end, body_text
    return p.src.start(grid), p.src.end(grid), f"lambda {meta}: {body_text}"


def _host_uses_ok(p: Parsed, call: ast.Call, tuned: list[_Tuned]) -> str | None:
    """A tuned tile's variable read anywhere but the launch and its grid would keep the old value."""
    scope = p.scopes_at(call)[0]
    grid = call.func.slice  # type: ignore[attr-defined]
    allowed: set[int] = {id(t.kw.value) for t in tuned if t.kw is not None}
    grid_exprs = [grid]
    if isinstance(grid, ast.Name):
        tup = literal_tuple(p, call)
        if tup is not None:
            grid_exprs.append(tup)
    allowed |= {id(n) for g in grid_exprs for n in ast.walk(g)}
    for t in tuned:
        if t.var is None:
            continue
        for use in name_loads(scope, t.var):
            if id(use) not in allowed:
                return f"the host code reads {t.var} beyond the launch (line {use.lineno}): it would not follow the table"
        binds = bindings(scope, t.var)
        if len(binds) != 1:
            return f"{t.var} is bound more than once"
    return None


def _neighbours(t: _Tuned, radius: int) -> list[object]:
    dom = [d for d in t.domain if d is not None]
    if t.value not in dom:
        return []
    i = dom.index(t.value)
    return [dom[j] for j in range(max(0, i - radius), min(len(dom), i + radius + 1)) if j != i]


class AutotuneTable:
    name = NAME
    backend = "triton"
    summary = "literal tiles / num_warps / num_stages at the launch become an @triton.autotune table keyed on shapes"
    requires = ["triton", "!autotuned"]
    params = [TransformParam(name="RADIUS", default=1, domain=[0, 1, 2],
                             doc="steps each way in a value's knob domain per config (0: the current values only)"),
              TransformParam(name="PRESET", default="neighbours", domain=list(PRESETS),
                             doc="neighbours: each value a step either way; dot: Triton's matmul tile configs "
                                 "for a tl.dot kernel's (BM, BN, BK), with RADIUS ignored")]

    def _check(self, p: Parsed, k: JitKernel, source: str) -> tuple[list[_Tuned], ast.Call, list[str], object] | str:
        plan = _plan(p, k, source)
        if isinstance(plan, str):
            return plan
        tuned, call, key = plan
        why = _host_uses_ok(p, call, tuned)
        if why is not None:
            return why
        grid = _grid_edit(p, call, tuned)
        if isinstance(grid, str):
            return grid
        return tuned, call, key, grid

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            got = self._check(p, k, source)
            if isinstance(got, str):
                return got
            tuned, _, key, _ = got
            tiles = dot_tiles(p, k, tuned)
            dot = "" if isinstance(tiles, str) else f"; PRESET='dot': matmul tile configs for {', '.join(tiles)}"
            return f"tunes {', '.join(t.param for t in tuned)} keyed on {', '.join(key)}{dot}", {"RADIUS": 1}

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        refuse_unknown(NAME, params, {"RADIUS", "PRESET"})
        radius = int_param(NAME, params, "RADIUS", 1, minimum=0)
        preset = params.get("PRESET", "neighbours")
        if preset not in PRESETS:
            raise TransformError(f"{NAME}: PRESET={preset!r}: expected one of {', '.join(PRESETS)}")
        p, k = parse_for_apply(source, site)
        got = self._check(p, k, source)
        if isinstance(got, str):
            raise TransformError(f"{k.fn.name}: {got}")
        tuned, call, key, grid_edit = got
        base = {t.param: t.value for t in tuned}
        configs = [dict(base)]
        if preset == "dot":
            tiles = dot_tiles(p, k, tuned)
            if isinstance(tiles, str):
                raise TransformError(f"{k.fn.name}: PRESET='dot': {tiles}")
            configs += _dot_configs(base, tuned, tiles)
        else:
            for t in tuned:
                for v in _neighbours(t, radius):
                    configs.append({**base, t.param: v})
        seen, unique = set(), []
        for c in configs:
            sig = tuple(sorted(c.items()))
            if sig not in seen:
                seen.add(sig)
                unique.append(c)
        triton = sorted(p.al.triton)[0]
        indent = indent_of(p.src, k.fn)
        lines = [f"{indent}@{triton}.autotune(", f"{indent}    configs=["]
        for c in unique:
            meta = ", ".join(f"{name!r}: {v!r}" for name, v in c.items() if name not in ("num_warps", "num_stages"))
            launch = "".join(f", {name}={c[name]!r}" for name in ("num_warps", "num_stages") if name in c)
            lines.append(f"{indent}        {triton}.Config({{{meta}}}{launch}),")
        lines += [f"{indent}    ],", f"{indent}    key={key!r},", f"{indent})"]
        first = min(k.fn.decorator_list, key=lambda d: d.lineno)
        at = p.src.line_starts[first.lineno - 1]
        edits = [(at, at, "\n".join(lines) + "\n")]
        # the tuned kwargs leave the launch (adjacent ones as one run: one separator each run)
        spans = keywords_delete_spans(p.src, call, [t.kw for t in tuned if t.kw is not None])
        edits += [(s, e, "") for s, e in spans]
        if grid_edit is not None:
            edits.append(grid_edit)  # type: ignore[arg-type]
        return apply_edits(source, edits, what=f"{NAME} edits")
