"""flat_elementwise: one flat 1-D index space for an elementwise kernel launched per row.

A kernel that gives each program one row (`row = tl.program_id(0)`, `cols = tl.arange(0,
BLOCK)`, `mask = cols < n_cols`) or one (row, column block) of a 2-D grid sizes its block
by the row: short rows leave most lanes masked off, long rows put a whole row's worth of
registers in one program. The same work is one index space of `rows * n_cols` elements,
cut into BLOCK-sized programs where BLOCK is a free knob:

    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row = offs // n_cols
    cols = offs % n_cols

Only `row` and `cols` are redefined; every expression built from them keeps its meaning
lane by lane, so the rewrite holds for any addressing the kernel does, whatever the row
stride: `x_ptr + row * stride_row + cols * stride_col` is still each element's address
when `stride_row` is not `n_cols` (a sliced or transposed view) - each program then reads
its rows' segments instead of one contiguous run. The column mask becomes `offs < numel`,
the tail of the flat range: every lane below it has `row < rows` and `cols < n_cols`. With
`n_cols` and the strides multiples of 16 (Triton specialises such arguments) the compiler
still proves 16-element contiguity of the addresses, so loads stay vectorised.

What the per-lane argument needs, and so what it declines: no lane may see another
(loops, reductions, dots, scans, atomics, indexing or reshaping a block, branches, also
inside a @triton.jit helper the kernel calls, or a call it cannot read); nothing may read
the grid (another `program_id`, `tl.num_programs`) or state a layout to the compiler that
the flat index breaks (`tl.multiple_of`, `tl.max_contiguous`, `tl.max_constancy`,
`tl.assume`); and every load or store whose address depends on the row or the column is
masked by the column mask, so the flat tail stays inside the data.
"""

from __future__ import annotations

import ast

from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    add_params,
    alone_on_lines,
    axis_of,
    fresh,
    kernel_sites,
    launch_args,
    literal_tuple,
    name_loads,
    names_read,
    names_stored,
    parse_for_apply,
    program_ids,
    single_binding,
    text,
    used_names,
)
from kernelopt.source import JitKernel, apply_edits

NAME = "flat_elementwise"
_NOT_ELEMENTWISE = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum", "cumprod",
                    "associative_scan", "dot", "dot_scaled", "histogram", "sort", "gather", "split", "join",
                    "reshape", "view", "permute", "trans", "broadcast_to", "expand_dims", "interleave"}
# Facts told to the compiler about a block's layout: true of the per-row index, not of the flat one.
_HINTS = {"multiple_of", "max_contiguous", "max_constancy", "assume"}
# Python builtins a kernel may call on scalars and constexprs.
_BUILTINS = {"min", "max", "abs", "int", "float", "bool", "len", "print", "isinstance"}


class _Plan:
    def __init__(self) -> None:
        self.row_stmt: ast.Assign | None = None
        self.col_stmt: ast.Assign | None = None
        self.row_axis = 0
        self.col_axis: int | None = None  # the column-block axis of a 2-D grid; None: one program per row
        self.block = ""  # the constexpr block parameter
        self.n_cols = ""  # the runtime parameter the column mask compares against
        self.compares: list[ast.Compare] = []
        self.col_pid = ""  # the name the column-block program id is bound to, if any


def _pid_axis(fn: ast.FunctionDef, node: ast.AST, p: Parsed) -> int | None:
    """The axis when `node` is tl.program_id(axis) or a name bound once to it."""
    if isinstance(node, ast.Name):
        stmt = single_binding(fn, node.id)
        node = stmt.value if stmt is not None else node
    if isinstance(node, ast.Call) and p.al.tl_attr(node.func) == "program_id":
        return axis_of(node)
    return None


def _arange_block(node: ast.AST, p: Parsed, k: JitKernel) -> str | None:
    """BLOCK when `node` is tl.arange(0, BLOCK) with BLOCK a constexpr parameter."""
    if (isinstance(node, ast.Call) and p.al.tl_attr(node.func) == "arange" and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0
            and isinstance(node.args[1], ast.Name) and node.args[1].id in k.constexprs):
        return node.args[1].id
    return None


def _expand(fn: ast.FunctionDef, node: ast.AST, depth: int = 0) -> list[ast.AST]:
    """`node` and, through names bound once in the kernel, the expressions it is built from."""
    out = [node]
    if depth > 8:
        return out
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            stmt = single_binding(fn, n.id)
            if stmt is not None:
                out += _expand(fn, stmt.value, depth + 1)
    return out


def _mask_of(call: ast.Call, store: bool) -> ast.AST | None:
    kw = next((kw.value for kw in call.keywords if kw.arg == "mask"), None)
    if kw is not None:
        return kw
    pos = 2 if store else 1
    return call.args[pos] if len(call.args) > pos else None


def _lane_crossing(p: Parsed, fn: ast.FunctionDef, seen: set[str]) -> str | None:
    """Why a lane of `fn` may see another lane, the grid or a layout fact (None: it cannot).
    @triton.jit helpers it calls are read the same way; a call it cannot read is a reason."""
    al = p.al
    helper = bool(seen)
    seen = seen | {fn.name}
    where = f" in {fn.name}" if helper else ""
    for node in ast.walk(fn):
        if isinstance(node, (ast.For, ast.While, ast.If, ast.IfExp, ast.Return)) and not (
                helper and isinstance(node, ast.Return)):
            return f"not elementwise: a {type(node).__name__.lower()} at line {node.lineno}{where}"
        if isinstance(node, ast.Subscript):
            return f"not elementwise: indexes a block (line {node.lineno}{where})"
        if not isinstance(node, ast.Call):
            continue
        attr = al.tl_attr(node.func)
        if attr in _NOT_ELEMENTWISE or (attr or "").startswith("atomic_"):
            return f"not elementwise: calls tl.{attr} (line {node.lineno}{where})"
        if attr == "num_programs" or (helper and attr == "program_id"):
            return f"reads the grid: tl.{attr} at line {node.lineno}{where} means another thing on the flat grid"
        if attr in _HINTS:
            return (f"a compiler hint tl.{attr} at line {node.lineno}{where} states a layout of the per-row index "
                    "that the flat index does not have")
        if attr is None and isinstance(node.func, ast.Attribute) and node.func.attr in _NOT_ELEMENTWISE:
            return f"not elementwise: calls .{node.func.attr}() (line {node.lineno}{where})"
        if isinstance(node.func, ast.Name):
            name = node.func.id
            if name in p.kernels:
                if name not in seen:
                    why = _lane_crossing(p, p.kernels[name].fn, seen)
                    if why:
                        return why
            elif name not in _BUILTINS and name not in al.bare:
                return f"calls {name} (line {node.lineno}{where}), whose body is not a @triton.jit function of this file"
    return None


def _depends_on(fn: ast.FunctionDef, names: set[str]) -> set[str]:
    """`names` and every name assigned (anywhere in the straight kernel body) from one of them."""
    out = set(names)
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None \
                    and names_read(node.value) & out:
                new = names_stored(node) - out  # `x_ptr += row * n` too: its target is a store
                out |= new
                changed = changed or bool(new)
    return out


def _plan(p: Parsed, k: JitKernel) -> _Plan | str:
    fn, al = k.fn, p.al
    why = _lane_crossing(p, fn, set())
    if why:
        return why
    pids = program_ids(k, al)
    if not pids:
        return "reads no program id"
    if None in pids or len(pids) > 2:
        return "reads a computed program-id axis or a 3-D grid"
    plan = _Plan()
    aranges = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and al.tl_attr(n.func) == "arange"]
    if len(aranges) != 1:
        return "more than one index vector (tl.arange)" if aranges else "no index vector (tl.arange)"
    # The column vector: cols = tl.arange(0, BLOCK) [+ pid_b * BLOCK]
    for stmt in fn.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        v = stmt.value
        block = _arange_block(v, p, k)
        axis: int | None = None
        if block is None and isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
            for a, b in ((v.left, v.right), (v.right, v.left)):
                blk = _arange_block(a, p, k)
                if blk and isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mult):
                    for x, y in ((b.left, b.right), (b.right, b.left)):
                        ax = _pid_axis(fn, x, p)
                        if ax is not None and isinstance(y, ast.Name) and y.id == blk:
                            block, axis = blk, ax
                            plan.col_pid = x.id if isinstance(x, ast.Name) else ""
        if block is not None:
            plan.col_stmt, plan.block, plan.col_axis = stmt, block, axis
            break
    if plan.col_stmt is None:
        return "no column vector bound as cols = tl.arange(0, BLOCK) [+ program_id * BLOCK]"
    col = plan.col_stmt.targets[0].id  # type: ignore[attr-defined]
    if single_binding(fn, col) is not plan.col_stmt:
        return f"{col} is bound more than once"
    # The row: row = tl.program_id(a), on the other axis.
    rows = [s for s in fn.body if isinstance(s, ast.Assign) and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call)
            and al.tl_attr(s.value.func) == "program_id" and axis_of(s.value) != plan.col_axis]
    if not rows:
        if len(pids) == 1:
            return "already a flat 1-D index: no per-row program to flatten"
        return "no row index bound as row = tl.program_id(axis)"
    if len(rows) > 1:
        return "more than one row index"
    plan.row_stmt = rows[0]
    plan.row_axis = axis_of(rows[0].value) or 0  # type: ignore[arg-type]
    row = rows[0].targets[0].id  # type: ignore[attr-defined]
    if single_binding(fn, row) is not plan.row_stmt:
        return f"{row} is bound more than once"
    counted = len(pids.get(plan.row_axis, [])) + (len(pids.get(plan.col_axis, [])) if plan.col_axis is not None else 0)
    if counted != sum(len(v) for v in pids.values()) or len(pids.get(plan.row_axis, [])) != 1:
        return "reads a program id beyond the row and the column block"
    if plan.col_axis is not None and len(pids[plan.col_axis]) != 1:
        return "reads the column-block program id more than once"
    if plan.col_pid:
        inside = {id(n) for n in ast.walk(plan.col_stmt.value)}
        beyond = [n for n in name_loads(fn, plan.col_pid) if id(n) not in inside]
        if beyond:
            return (f"uses the column-block program id {plan.col_pid} beyond {col} (line {beyond[0].lineno}): "
                    "it has no flat counterpart")
    # The column mask: cols < n_cols, with n_cols a runtime parameter.
    for node in ast.walk(fn):
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == col
                and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt)
                and isinstance(node.comparators[0], ast.Name)):
            plan.compares.append(node)
    bounds = {c.comparators[0].id for c in plan.compares}  # type: ignore[attr-defined]
    if len(bounds) != 1:
        return f"no single column mask {col} < n_cols" if not bounds else f"{col} is compared with {sorted(bounds)}"
    plan.n_cols = bounds.pop()
    if plan.n_cols not in k.params or plan.n_cols in k.constexprs:
        return f"the column bound {plan.n_cols} is not a runtime parameter of the kernel"
    # Every access whose address depends on the row or the column is masked by the column
    # mask, so the flat tail stays inside the data. (Rows need not be n_cols apart: each lane
    # keeps its own row and column, so any row stride addresses the same element as before.)
    compare_ids = {id(c) for c in plan.compares}
    varying = _depends_on(fn, {row, col})
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and al.tl_attr(node.func) in ("load", "store"):
            store = al.tl_attr(node.func) == "store"
            if not store and node.args and not names_read(node.args[0]) & varying:
                continue  # one address for every lane (a scalar parameter): same on the flat grid
            mask = _mask_of(node, store)
            if mask is None or not any(id(n) in compare_ids for e in _expand(fn, mask) for n in ast.walk(e)):
                return f"a tl.{al.tl_attr(node.func)} at line {node.lineno} is not masked by {col} < {plan.n_cols}"
    for stmt in (plan.row_stmt, plan.col_stmt):
        if not alone_on_lines(p.src, stmt, fn.body):
            return f"line {stmt.lineno} holds more than one statement"
    return plan


def _launch_plan(p: Parsed, k: JitKernel, plan: _Plan) -> list[tuple[ast.Call, str, str, ast.AST]] | str:
    """Per launch: (call, rows expression, n_cols expression, BLOCK argument node)."""
    calls = p.launches.get(k.fn.name, [])
    if not calls:
        return "no launch of the kernel in this file"
    out = []
    for call in calls:
        grid = literal_tuple(p, call)
        if grid is None:
            return f"the grid at line {call.lineno} is not a tuple written in this file"
        axes = {plan.row_axis} | ({plan.col_axis} if plan.col_axis is not None else set())
        for i, e in enumerate(grid.elts):
            if i not in axes and not (isinstance(e, ast.Constant) and e.value == 1):
                return f"the grid at line {call.lineno} has more axes than the row and column block"
        if plan.row_axis >= len(grid.elts):
            return f"the grid at line {call.lineno} has no row axis"
        args = launch_args(k, call)
        if args is None or plan.n_cols not in args or plan.block not in args:
            return f"the launch at line {call.lineno} passes *args/**kwargs or omits {plan.n_cols} or {plan.block}"
        out.append((call, text(p, grid.elts[plan.row_axis]), text(p, args[plan.n_cols]), args[plan.block]))
    return out


class FlatElementwise:
    name = NAME
    backend = "triton"
    summary = "one flat, vectorised 1-D index space (BLOCK a knob) for an elementwise kernel launched per row"
    requires = ["triton"]
    params = [TransformParam(name="BLOCK", default=1024, domain=[128, 256, 512, 1024, 2048, 4096, 8192],
                             doc="elements per program; a knob of the result (the kernel's own block name)")]

    def _check(self, p: Parsed, k: JitKernel) -> tuple[_Plan, list[tuple[ast.Call, str, str, ast.AST]]] | str:
        plan = _plan(p, k)
        if isinstance(plan, str):
            return plan
        launches = _launch_plan(p, k, plan)
        if isinstance(launches, str):
            return launches
        a = k.fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
            return "takes *args, **kwargs, keyword-only or defaulted parameters"
        return plan, launches

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            got = self._check(p, k)
            if isinstance(got, str):
                return got
            plan, _ = got
            grid = "2-D grid of (row, column block)" if plan.col_axis is not None else "one program per row"
            return (f"{grid} over rows of {plan.n_cols}: one flat index, {plan.block} elements per program",
                    {"BLOCK": 1024})

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        block_value = params.get("BLOCK", 1024)
        if not (isinstance(block_value, int) and not isinstance(block_value, bool) and block_value > 0
                and block_value & (block_value - 1) == 0):
            raise TransformError(f"BLOCK={block_value!r}: expected a power of two")
        p, k = parse_for_apply(source, site)
        got = self._check(p, k)
        if isinstance(got, str):
            raise TransformError(f"{k.fn.name}: {got}")
        plan, launches = got
        assert plan.row_stmt is not None and plan.col_stmt is not None
        tl = p.al.tl_prefix()
        taken = used_names(p.src.tree)
        offs, numel = fresh(taken, "offs"), fresh(taken, "numel")
        row = plan.row_stmt.targets[0].id  # type: ignore[attr-defined]
        col = plan.col_stmt.targets[0].id  # type: ignore[attr-defined]
        nc, blk = plan.n_cols, plan.block
        first = min(plan.row_stmt, plan.col_stmt, key=lambda s: k.fn.body.index(s))
        edits = []
        defs = {id(plan.row_stmt): f"{row} = {offs} // {nc}", id(plan.col_stmt): f"{col} = {offs} % {nc}"}
        for stmt in (plan.row_stmt, plan.col_stmt):
            new = defs[id(stmt)]
            if stmt is first:
                indent = p.src.data[p.src.line_starts[stmt.lineno - 1]:p.src.start(stmt)].decode()
                new = (f"# one flat index over rows of {nc} elements\n{indent}"
                       f"{offs} = {tl}.program_id(0) * {blk} + {tl}.arange(0, {blk})\n{indent}{new}")
            edits.append((p.src.start(stmt), p.src.end(stmt), new))
        for cmp in plan.compares:
            edits.append((p.src.start(cmp), p.src.end(cmp), f"{offs} < {numel}"))
        edits.append(add_params(p, k, [numel]))
        for call, rows, ncols, block_arg in launches:
            total = f"({rows}) * ({ncols})"
            edits.append((p.src.start(call.func.slice), p.src.end(call.func.slice),  # type: ignore[attr-defined]
                          f"lambda META: (({total} + META[{blk!r}] - 1) // META[{blk!r}],)"))
            edits.append((p.src.start(block_arg), p.src.end(block_arg), str(block_value)))
            end = max(p.src.end(n) for n in [*call.args, *call.keywords])
            edits.append((end, end, f", {numel}={total}"))
        return apply_edits(source, edits, what=f"{NAME} edits")
