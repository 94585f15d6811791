"""block_program_axis: one program handles BLOCK_PID consecutive values of a program-id index.

A kernel that derives a scalar index from `tl.program_id(a)` - an output channel
(`co = pid % C_out`), a row (`row = tl.program_id(0)`) - and whose loop loads some operands
whose address does not depend on that index (the input neighbourhood of a convolution, a row
of B in a matrix product) re-reads those operands once per index value. The rewrite gives
each program BLOCK_PID consecutive values of the index, as a vector with a leading
dimension (register blocking):

    co = pid % C_out                 ->  co = pid0_lanes   # (pid0 % cdiv(C_out, B)) * B + tl.arange(0, B)[:, None]
    n = pid // C_out                 ->  n = (pid0 // cdiv(C_out, B))
    w = tl.load(w_ptr + co * K + k)  ->  w = tl.load(w_ptr + co * K + k, mask=pid0_ok)      # (B, 1)
    x = tl.load(x_ptr + n * S + offs, mask=m)                                             # shared: (W,), loaded once
    acc = tl.zeros((W,), tl.float32) ->  acc = tl.zeros((BLOCK_PID, W), tl.float32)
    acc += x * w                     ->  (B, W): x broadcast over the B index values
    tl.store(y + ..., acc, mask=m)   ->  mask=tl.where(pid0_ok, m, False)

The index becomes a (B, 1, ..., 1) vector (one trailing 1 per dimension the kernel's tensors
can have), so every value that depends on it gains a leading dimension and broadcasts against
the kernel's own tensors exactly as before; values that do not depend on it (the shared
loads) are computed once per program. Where the program id is split as `pid // C` and
`pid % C` (C a kernel parameter, and the grid's extent on that axis a product with the
launch's C as a factor), the blocked index is `pid % C` and the factor becomes
`triton.cdiv(C, META['BLOCK_PID'])`; otherwise the blocked index is the program id itself,
the extent becomes `triton.cdiv(extent, META[...])` and the old extent is passed as a new
parameter for the mask. Program p then computes what programs p*B .. p*B+B-1 computed (the
values past the end are masked), each value in the same order as before.

Sites are `KERNEL@pid0`, `KERNEL@pid1`, `KERNEL@pid2` (one per program axis it can block;
`KERNEL` alone: the first). BLOCK_PID is a literal launch argument the grid reads from META:
a knob. One axis per kernel: a kernel that already takes BLOCK_PID is declined.

A reduction of a value that depends on the index (`tl.sum(acc, axis=0)`: a row-per-program
matrix-vector product) reduces axis 1 of the blocked value, keeping it (one result per index
value), in kernels whose tensors are 1-D; with more dimensions it declines.

It declines, with a reason, a kernel where the index decides control flow (if/while/for
bounds), is indexed, reshaped or passed to anything but elementwise math, is stored
to an address that does not depend on it, where no load in a loop is shared (nothing to
reuse: every load depends on the index, a softmax row kernel) or no load depends on it,
where the axis indexes BLOCK-sized tiles of a flat range (a larger BLOCK is that knob),
reads tl.num_programs, uses block pointers, or is launched with a grid it cannot rewrite.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    add_launch_kwargs,
    add_params,
    body_of,
    call_arg,
    constexpr_annotation,
    decline,
    flat_tile_index,
    fresh,
    grid_axis,
    int_param,
    launch_args,
    names_read,
    names_stored,
    parents,
    parse,
    parse_for_apply,
    parse_for_sites,
    pid_names,
    program_ids,
    refuse_unknown,
    single_binding,
    text,
    tl_calls,
    triton_module,
    used_names,
)
from kernelopt.source import Edit, JitKernel, apply_edits, indent_of, last_arg_end

NAME = "block_program_axis"
AXES = (0, 1, 2)
PARAM = "BLOCK_PID"
DOMAIN: list[ParamValue] = [1, 2, 4, 8, 16, 32]
DEFAULT = 4

# Functions that act elementwise on a value that depends on the blocked index (its leading
# dimension goes through unchanged). Anything else on such a value declines.
ELEMENTWISE = frozenset({
    "where", "exp", "exp2", "log", "log2", "log1p", "sqrt", "sqrt_rn", "rsqrt", "abs", "maximum", "minimum",
    "clamp", "fma", "sigmoid", "sin", "cos", "tanh", "erf", "floor", "ceil", "fdiv", "div_rn", "cdiv",
    "umulhi", "cast", "zeros_like", "full_like", "pow", "expm1", "to", "load", "store",
})
_SHAPED = frozenset({"zeros", "full", "reshape", "view", "broadcast_to"})
# Reductions of a 1-D value that depends on the index: over axis 0 of the original, axis 1
# (keep_dims) of the blocked value - one result per index value, shaped (BLOCK_PID, 1).
REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "xor_sum"})


class _Decline(Exception):
    """This kernel/axis cannot be blocked; the message is the one-line reason."""


@dataclass
class _Split:
    """How the axis' program id is read: split as `pid // C`, `pid % C` (C the kernel parameter
    `divisor`), or used whole (divisor None)."""

    divisor: str | None
    mods: list[ast.BinOp]
    divs: list[ast.BinOp]


def _callee(p: Parsed, func: ast.AST) -> str | None:
    """'exp' for tl.exp, tl.math.exp, triton.language.extra...exp; None for anything else."""
    name = p.al.tl_attr(func)
    if name is not None:
        return name
    node = func
    while isinstance(node, ast.Attribute):
        node = node.value
    if isinstance(node, ast.Name) and (node.id in p.al.tl or node.id in p.al.triton) and isinstance(func, ast.Attribute):
        return func.attr
    return None


def _rank(p: Parsed, k: JitKernel) -> int:
    """An upper bound on the rank of the kernel's tensors: the blocked index gets one trailing
    1 per dimension, so its leading dimension never lines up with one of the kernel's own."""
    rank, extra = 0, 0
    for n in ast.walk(k.fn):
        if isinstance(n, ast.Subscript):
            s = n.slice
            if isinstance(s, ast.Tuple):
                rank = max(rank, len(s.elts))
            elif isinstance(s, ast.Constant) and s.value is None:
                rank = max(rank, 2)
        elif isinstance(n, ast.Call):
            name = p.al.tl_attr(n.func)
            if name == "arange":
                rank = max(rank, 1)
            elif name == "dot":
                rank = max(rank, 2)
            elif name == "expand_dims":
                extra += 1
            elif name in ("make_block_ptr", "advance"):
                raise _Decline("uses block pointers (tl.make_block_ptr): their shapes are fixed at creation")
            elif name in _SHAPED:
                shape = call_arg(n, 0 if name in ("zeros", "full") else 1, "shape")
                if isinstance(shape, (ast.Tuple, ast.List)):
                    rank = max(rank, len(shape.elts))
                elif shape is not None:
                    raise _Decline(f"tl.{name} at line {n.lineno} takes a shape not written as a tuple: "
                                   "the rank of its tensors is unknown")
    return rank + extra


def _factors(node: ast.AST) -> list[ast.AST]:
    """The factors of a product `a * b * c` (the node itself when it is not a product)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _split(p: Parsed, k: JitKernel, calls: list[ast.Call], names: set[str]) -> _Split:
    """Whether the program id is read as `pid // C` and `pid % C` with one kernel parameter C."""
    ids = {id(c) for c in calls}

    def is_pid(n: ast.AST) -> bool:
        return id(n) in ids or (isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load))

    mods = [n for n in ast.walk(k.fn) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and is_pid(n.left)]
    divs = [n for n in ast.walk(k.fn) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv)
            and is_pid(n.left)]
    keys = {ast.dump(n.right) for n in mods}
    if len(keys) != 1 or any(ast.dump(d.right) not in keys for d in divs):
        return _Split(None, [], [])
    c = mods[0].right
    if not (isinstance(c, ast.Name) and c.id in k.params and c.id not in names_stored(k.fn)):
        return _Split(None, [], [])
    return _Split(c.id, mods, divs)


class BlockProgramAxis:
    name = NAME
    backend = "triton"
    summary = ("each program handles BLOCK_PID consecutive values of an index derived from tl.program_id(a): "
               "loads that do not depend on it are shared, the rest gain a leading dimension (grid / BLOCK)")
    requires = ["triton", "k_loop"]
    params = [TransformParam(name=PARAM, default=DEFAULT, domain=list(DOMAIN),
                             doc="consecutive values of the blocked program-id index each program handles; "
                                 "a knob of the result")]

    # --- public -----------------------------------------------------------------------------------

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        p = parse_for_sites(NAME, source, path)
        if isinstance(p, list):
            return p
        out: list[SiteReport] = []
        for k in p.kernels.values():
            reasons: list[str] = []
            found = False
            for axis in AXES:
                try:
                    _, why = self._rewrite(source, k.fn.name, axis, DEFAULT, path)
                except _Decline as exc:
                    if axis == 0 or "does not read tl.program_id" not in str(exc):
                        reasons.append(f"axis {axis}: {exc}")
                    continue
                found = True
                out.append(SiteReport(transform=NAME, site=f"{k.fn.name}@pid{axis}", applies=True, reason=why,
                                      params={PARAM: DEFAULT}, kernel=k.fn.name, line=k.fn.lineno))
            if not found:
                out.append(decline(NAME, k.fn.name, "; ".join(reasons), k.fn.lineno))
        return out

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        refuse_unknown(NAME, params, {PARAM})
        kernel, _, which = site.partition("@")
        if which:
            if which not in {f"pid{a}" for a in AXES}:
                raise TransformError(f"{NAME}: site {site!r}: expected KERNEL@pid0, @pid1 or @pid2")
            axes = [int(which[3:])]
        else:
            axes = list(AXES)
        block = int_param(NAME, params, PARAM, DEFAULT)
        reasons = []
        for axis in axes:
            try:
                return self._rewrite(source, kernel, axis, block)[0]
            except _Decline as exc:
                reasons.append(f"axis {axis}: {exc}" if len(axes) > 1 else str(exc))
        raise TransformError("; ".join(reasons))

    # --- the rewrite ------------------------------------------------------------------------------

    def _rewrite(self, source: str, kname: str, axis: int, block: int, path: str = "<candidate>") -> tuple[str, str]:
        """(the rewritten source, a one-line description), or _Decline."""
        try:
            p, k = parse_for_apply(source, kname, path)
        except TransformError as exc:
            raise _Decline(str(exc)) from None
        first, pid = self._restructure(p, k, axis, block)
        try:
            p1 = parse(first, path)
        except BadInput as exc:  # pragma: no cover - the edits above keep the source parsing
            raise _Decline(f"the rewrite does not parse: {exc}") from None
        return self._vectorize(p1, p1.kernels[kname], axis, pid, first)

    def _restructure(self, p: Parsed, k: JitKernel, axis: int, block: int) -> tuple[str, "_Names"]:
        """Stage 1: the program id becomes the vector of the BLOCK index values this program
        handles (and the split `pid // C` its scalar part); the grid and the launches follow."""
        fn, al, src = k.fn, p.al, p.src
        param = PARAM
        if param in k.params:
            raise _Decline(f"already takes {param}")
        pids = program_ids(k, al)
        if None in pids:
            raise _Decline("reads a program id whose axis is computed")
        if axis not in pids:
            raise _Decline(f"does not read tl.program_id({axis})")
        if tl_calls(fn, al, "num_programs"):
            raise _Decline("reads tl.num_programs (a persistent or grid-stride loop): programs are not index values")
        calls = pids[axis]
        if flat_tile_index(k, calls):
            raise _Decline(f"program_id({axis}) indexes BLOCK-sized tiles of a flat range: a larger BLOCK is that "
                           "kernel's own knob")
        if fn.args.defaults or fn.args.kw_defaults or fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
            raise _Decline("takes parameters with defaults, *args or keyword-only parameters")
        body = body_of(fn)
        if not body or body[0].lineno == fn.lineno:
            raise _Decline("the kernel body shares a line with its signature")
        names = pid_names(fn, calls)
        for name in sorted(names):
            if single_binding(fn, name) is None:
                raise _Decline(f"{name} (tl.program_id({axis})) is bound more than once or inside a block")
        rank = _rank(p, k)
        launches = p.launches.get(fn.name, [])
        if not launches:
            raise _Decline(f"no launch of {fn.name} in this file to divide the grid of")
        triton, header = triton_module(p)
        split = _split(p, k, calls, names)
        grids = []
        for call in launches:
            args = launch_args(k, call)
            if args is None:
                raise _Decline(f"the launch at line {call.lineno} passes *args or **kwargs")
            ga = grid_axis(p, call, axis)
            if isinstance(ga, str):
                raise _Decline(f"the launch at line {call.lineno}: {ga}")
            grids.append((call, args, ga))
        if split.divisor is not None:
            for call, args, ga in grids:
                given = args.get(split.divisor)
                if given is None or not any(ast.dump(f) == ast.dump(given) for f in _factors(ga.node)):
                    split = _Split(None, [], [])  # the grid is not (outer * C): block the whole program id
                    break
        taken = used_names(src.tree)
        nm = _Names(lanes=fresh(taken, f"pid{axis}_lanes"), ok=fresh(taken, f"pid{axis}_ok"),
                    block=fresh(taken, f"pid{axis}_block"), nblocks=fresh(taken, f"pid{axis}_nblocks"),
                    count=fresh(taken, f"pid{axis}_count"), param=param, split=split.divisor,
                    index=self._index_name(fn, split, names, axis), rank=rank)
        nm.first = body[0].lineno
        tl = al.tl_prefix()
        trail = "[:" + ", None" * rank + "]" if rank else ""
        ar = f"{tl}.arange(0, {param}){trail}"
        inner = indent_of(src, body[0])
        if split.divisor is not None:
            c = split.divisor
            prologue = [f"{nm.block} = {tl}.program_id({axis})",
                        f"{nm.nblocks} = {tl}.cdiv({c}, {param})",
                        f"{nm.lanes} = ({nm.block} % {nm.nblocks}) * {param} + {ar}  # {param} consecutive {nm.index}",
                        f"{nm.ok} = {nm.lanes} < {c}"]
        else:
            prologue = [f"{nm.lanes} = {tl}.program_id({axis}) * {param} + {ar}  # {param} consecutive {nm.index}",
                        f"{nm.ok} = {nm.lanes} < {nm.count}"]
        at = src.line_starts[body[0].lineno - 1]
        nm.shift, nm.header = len(prologue), len(header)  # an added `import triton` is one line
        edits: list[Edit] = list(header)
        edits.append((at, at, "".join(f"{inner}{line}\n" for line in prologue)))
        inside: list[tuple[int, int]] = []
        for n in split.mods:
            edits.append((src.start(n), src.end(n), nm.lanes))
            inside.append((src.start(n), src.end(n)))
        for n in split.divs:
            edits.append((src.start(n), src.end(n), f"({nm.block} // {nm.nblocks})"))
            inside.append((src.start(n), src.end(n)))
        whole = (f"({nm.block} // {nm.nblocks} * {split.divisor} + {nm.lanes})" if split.divisor is not None
                 else nm.lanes)
        for call in calls:
            if not any(s <= src.start(call) and src.end(call) <= e for s, e in inside):
                edits.append((src.start(call), src.end(call), whole))
        decls = ([] if split.divisor is not None else [nm.count]) + [f"{param}: {constexpr_annotation(p)}"]
        edits.append(add_params(p, k, decls))
        for call, args, ga in grids:
            if split.divisor is not None:
                given = text(p, args[split.divisor])
                new_c = f"{triton}.cdiv({given}, {ga.meta}[{param!r}])"
                if ga.written:
                    factor = next(f for f in _factors(ga.node) if ast.dump(f) == ast.dump(args[split.divisor]))
                    s0, s1, e0 = src.start(ga.node), src.start(factor), src.end(factor)
                    raw = src.data[s0:src.end(ga.node)]
                    extent = (raw[:s1 - s0] + new_c.encode() + raw[e0 - s0:]).decode("utf-8")
                else:  # read from a grid variable at the launch: its extent is (outer * C)
                    extent = f"{ga.text} // ({given}) * {new_c}"
                edits.append(ga.edit(extent))
                edits.append(add_launch_kwargs(p, call, [(param, str(block))]))
            else:
                edits.append(ga.edit(f"{triton}.cdiv({ga.text}, {ga.meta}[{param!r}])"))
                edits.append(add_launch_kwargs(p, call, [(nm.count, ga.text), (param, str(block))]))
        try:
            return apply_edits(src.text, edits, what=f"{NAME} on {fn.name}"), nm
        except BadInput as exc:
            raise _Decline(str(exc)) from None

    @staticmethod
    def _index_name(fn: ast.FunctionDef, split: _Split, names: set[str], axis: int) -> str:
        """What the blocked index is called in the kernel, for the reasons and comments."""
        targets = split.mods if split.divisor is not None else []
        for s in ast.walk(fn):
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and any(
                    s.value is m for m in targets):
                return s.targets[0].id
        if split.divisor is not None:
            return f"program_id({axis}) % {split.divisor}"
        return sorted(names)[0] if names else f"program_id({axis})"

    def _vectorize(self, p: Parsed, k: JitKernel, axis: int, nm: "_Names", source: str) -> tuple[str, str]:
        """Stage 2 (on stage 1's source): every value that depends on the index values has their
        leading dimension; check that each use of one keeps it, mask the loads and stores whose
        address depends on it, and widen the loop-carried values that start without it."""
        fn, al, src = k.fn, p.al, p.src
        what = f"{nm.index} (program_id({axis}))"
        dep = {nm.lanes}

        def depends(node: ast.AST | None) -> bool:
            return node is not None and bool(names_read(node) & dep)

        assigns = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
        changed = True
        while changed:
            changed = False
            for s in assigns:
                if s.value is None:
                    continue
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                pairs = [(t, s.value) for t in targets]
                if len(targets) == 1 and isinstance(targets[0], (ast.Tuple, ast.List)) and isinstance(
                        s.value, (ast.Tuple, ast.List)) and len(targets[0].elts) == len(s.value.elts):
                    pairs = list(zip(targets[0].elts, s.value.elts))  # `a, b = x, y`: element by element
                new = set().union(*(names_stored(t) for t, v in pairs if depends(v))) - dep
                if new:
                    dep |= new
                    changed = True
        up = parents(fn)
        loads_shared_in_loop, loads_dep, masks = 0, 0, []
        problems: list[str] = []  # why the rewrite would change what it computes (the first one is reported)
        edits_red: list[Edit] = []  # reductions of blocked values: over axis 1, keeping it
        for n in ast.walk(fn):
            if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)) and depends(n.test):
                problems.append(f"`{text(p, n.test)}` decides control flow and depends on {what}")
            if isinstance(n, ast.For) and depends(n.iter):
                problems.append(f"the loop over `{text(p, n.iter)}` depends on {what}")
            if isinstance(n, ast.For) and names_stored(n.target) & dep:
                problems.append(f"the loop variable `{text(p, n.target)}` is also bound to a value that depends on {what}")
            if isinstance(n, ast.Return) and depends(n.value):
                problems.append(f"returns a value that depends on {what}")
            if isinstance(n, ast.BoolOp) and depends(n) or (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)
                                                           and depends(n)):
                problems.append(f"`{text(p, n)}` applies and/or/not to a value that depends on {what}")
            if isinstance(n, ast.Compare) and len(n.ops) > 1 and depends(n):
                problems.append(f"`{text(p, n)}` chains comparisons of a value that depends on {what}")
            if isinstance(n, ast.Subscript) and (depends(n.value) or depends(n.slice)):
                problems.append(f"`{text(p, n)}` indexes or reshapes a value that depends on {what}")
            if isinstance(n, ast.Attribute) and depends(n.value) and n.attr not in ("to", "dtype"):
                problems.append(f"`{text(p, n)}` reads .{n.attr} of a value that depends on {what}")
            if not isinstance(n, ast.Call):
                continue
            args = [*n.args, *(kw.value for kw in n.keywords)]
            method = isinstance(n.func, ast.Attribute) and depends(n.func.value)
            name = _callee(p, n.func)
            if name in ("load", "store"):
                ptr = call_arg(n, 0, "pointer")
                if ptr is None:
                    problems.append(f"tl.{name} at line {nm.line(n)} names no pointer")
                elif depends(ptr):
                    masks.append((n, name))
                    loads_dep += name == "load"
                elif any(depends(a) for a in args):
                    problems.append(f"tl.{name} at line {nm.line(n)} {'writes' if name == 'store' else 'reads'} an address that "
                                    f"does not depend on {what} "
                                    f"with a {'value or mask' if name == 'store' else 'mask'} that does"
                                    + (": the blocked values would race on one address" if name == "store" else ""))
                elif name == "load" and any(isinstance(a, (ast.For, ast.While)) for a in _ancestors(up, n, fn)):
                    loads_shared_in_loop += 1
                continue
            if not (method or any(depends(a) for a in args)):
                continue
            if name in REDUCTIONS and not method:
                why = self._reduction(p, n, nm, edits_red)
                if why:
                    problems.append(f"tl.{name} at line {nm.line(n)} {why} of a value that depends on {what}")
                continue
            if method and not (isinstance(n.func, ast.Attribute) and n.func.attr == "to") or (
                    not method and name not in ELEMENTWISE):
                shown = name if name is not None else text(p, n.func)
                problems.append(f"calls {shown} on a value that depends on {what} (only elementwise math keeps "
                                "its leading dimension)")
        if loads_dep == 0:
            raise _Decline(f"no load's address depends on {what}: nothing is loaded per index value")
        if loads_shared_in_loop == 0:
            raise _Decline(f"no load in a loop is shared across values of {what} (every load's address depends on "
                           "it): blocking reuses nothing")
        if problems:
            raise _Decline(problems[0])
        edits = self._widen(p, k, dep, nm, nm.rank, what) + edits_red
        tl = al.tl_prefix()
        for call, name in masks:
            given = call_arg(call, 1 if name == "load" else 2, "mask")  # load(ptr, mask), store(ptr, value, mask)
            if given is None:
                edits.append((last_arg_end(src, call), last_arg_end(src, call), f", mask={nm.ok}"))
            else:  # tl.where, not `&`: the interpreter rejects a scalar mask and-ed with a block
                edits.append((src.start(given), src.end(given), f"{tl}.where({nm.ok}, {text(p, given)}, False)"))
        try:
            out = apply_edits(source, edits, what=f"{NAME} on {fn.name}")
        except BadInput as exc:
            raise _Decline(str(exc)) from None
        how = (f"{nm.index} = program_id({axis}) % {nm.split}" if nm.split is not None
               else f"{nm.index} = program_id({axis})")
        return out, (f"each program handles {nm.param} consecutive values of {how}: {loads_shared_in_loop} load(s) "
                     f"in loops shared, {loads_dep} load(s) per value; the grid's axis {axis} is divided")

    @staticmethod
    def _reduction(p: Parsed, call: ast.Call, nm: "_Names", edits: list[Edit]) -> str | None:
        """Edits making `tl.sum(v, axis=0)` of a blocked 1-D value `tl.sum(v, axis=1, keep_dims=True)`
        (one result per index value), or why it cannot be (None: done)."""
        if nm.rank != 1:
            return "reduces (in a kernel with tensors of more than one dimension)"
        if not call.args:
            return "takes no positional input"
        src = p.src
        axis = call_arg(call, 1, "axis")
        if len(call.args) > 2 or any(kw.arg not in ("axis", "keep_dims", "dtype", "tie_break_left")
                                     for kw in call.keywords):
            return "takes arguments this rewrite does not read"
        value = axis.value if isinstance(axis, ast.Constant) else (
            -axis.operand.value if isinstance(axis, ast.UnaryOp) and isinstance(axis.op, ast.USub)
            and isinstance(axis.operand, ast.Constant) else "?")
        if value not in (None, 0, -1):
            return "reduces over an axis other than the only one"
        end = last_arg_end(src, call)
        if axis is None:
            edits.append((end, end, ", axis=1"))
        else:
            edits.append((src.start(axis), src.end(axis), "1"))
        keep = next((kw for kw in call.keywords if kw.arg == "keep_dims"), None)
        if keep is None:
            edits.append((end, end, ", keep_dims=True"))
        else:
            edits.append((src.start(keep.value), src.end(keep.value), "True"))
        return None

    def _widen(self, p: Parsed, k: JitKernel, dep: set[str], nm: "_Names", rank: int, what: str) -> list[Edit]:
        """Edits giving the leading dimension to each binding, without it, of a name that has
        it elsewhere and is bound inside a loop or branch (a loop-carried accumulator's start)."""
        fn, src = k.fn, p.src
        tl = p.al.tl_prefix()
        up = parents(fn)
        edits: list[Edit] = []
        for name in sorted(dep - {nm.lanes, nm.ok}):
            binds = [s for s in ast.walk(fn) if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                     and name in set().union(*(names_stored(t) for t in (
                         s.targets if isinstance(s, ast.Assign) else [s.target])))]
            if not any(isinstance(a, (ast.For, ast.While, ast.If)) for s in binds for a in _ancestors(up, s, fn)):
                continue
            for s in binds:
                if isinstance(s, ast.AugAssign) or s.value is None or names_read(s.value) & dep:
                    continue
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                    raise _Decline(f"{name} is unpacked from a value without the index's dimension and depends on "
                                   f"{what} elsewhere")
                new = self._widened(p, s.value, nm.param, rank, tl)
                if new is None:
                    raise _Decline(f"{name} starts as `{text(p, s.value)}` and depends on {what} later: only "
                                   "tl.zeros/tl.full with a tuple shape or a number can be given the leading dimension")
                edits.append((src.start(s.value), src.end(s.value), new))
        return edits

    @staticmethod
    def _widened(p: Parsed, value: ast.AST, param: str, rank: int, tl: str) -> str | None:
        """`value` with the leading (param,) dimension: tl.zeros/tl.full of a tuple shape, or a number."""
        if isinstance(value, ast.Call) and p.al.tl_attr(value.func) in ("zeros", "full"):
            shape = call_arg(value, 0, "shape")
            if not isinstance(shape, (ast.Tuple, ast.List)) or len(shape.elts) > rank:
                return None
            dims = [param, *["1"] * (rank - len(shape.elts)), *(text(p, e) for e in shape.elts)]
            new_shape = f"({', '.join(dims)})"
            s0, s1 = p.src.start(value), p.src.end(value)
            raw = p.src.data[s0:s1]
            return (raw[:p.src.start(shape) - s0] + new_shape.encode() + raw[p.src.end(shape) - s0:]).decode("utf-8")
        number = value.operand if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) else value
        if isinstance(number, ast.Constant) and type(number.value) in (int, float):
            dtype = f"{tl}.float32" if type(number.value) is float else f"{tl}.int32"
            return f"{tl}.full(({', '.join([param, *['1'] * rank])}), {text(p, value)}, {dtype})"
        return None


@dataclass
class _Names:
    lanes: str
    ok: str
    block: str
    nblocks: str
    count: str
    param: str
    split: str | None
    index: str
    rank: int  # trailing 1s of the index vector: an upper bound on the rank of the kernel's tensors
    first: int = 0  # the original line of the kernel body's first statement
    shift: int = 0  # lines stage 1 inserted before it
    header: int = 0  # lines stage 1 inserted at the top of the file

    def line(self, node: ast.AST) -> int:
        """The original line of a stage-1 node (for the reasons)."""
        n: int = node.lineno - self.header  # type: ignore[attr-defined]
        return n - self.shift if n >= self.first + self.shift else n


def _ancestors(up: dict[int, ast.AST], node: ast.AST, stop: ast.AST) -> list[ast.AST]:
    out = []
    cur = up.get(id(node))
    while cur is not None and cur is not stop:
        out.append(cur)
        cur = up.get(id(cur))
    return out
