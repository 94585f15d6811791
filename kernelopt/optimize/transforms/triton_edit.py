"""What the Triton transforms share: finding a kernel's launches, its program ids, fresh names,
and the edits that add a parameter to a kernel and its launches.

Everything reads the candidate through `kernelopt.source` and rewrites it with
`kernelopt.source.apply_edits` (byte spans): a transform changes only the bytes it means to.
A transform reports one site per `@triton.jit` kernel; the site id is the kernel's name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.source import (
    Edit,
    JitKernel,
    SourceFile,
    TritonAliases,
    bindings,
    last_arg_end,
    parse_triton,
    scopes_of,
    segment,
)


@dataclass
class Parsed:
    """A candidate read once: its bytes, aliases, kernels, launches (kernel name -> calls), scopes."""

    src: SourceFile
    al: TritonAliases
    kernels: dict[str, JitKernel]
    launches: dict[str, list[ast.Call]] = field(default_factory=dict)
    scopes: dict[int, list[ast.AST]] = field(default_factory=dict)

    def scopes_at(self, node: ast.AST) -> list[ast.AST]:
        return self.scopes.get(id(node), [self.src.tree])


def parse(source: str, path: str = "<candidate>") -> Parsed:
    """Parse once; BadInput when the source does not parse."""
    src, al, kernels = parse_triton(source, path)
    launches: dict[str, list[ast.Call]] = {name: [] for name in kernels}
    for node in ast.walk(src.tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in kernels):
            launches[node.func.value.id].append(node)
    for calls in launches.values():
        calls.sort(key=src.start)
    return Parsed(src, al, kernels, launches, scopes_of(src.tree))


def parse_for_sites(transform: str, source: str, path: str) -> Parsed | list[SiteReport]:
    """`parse`, or the one report that declines a file it cannot read or that has no Triton kernel."""
    try:
        p = parse(source, path)
    except BadInput as exc:
        return [decline(transform, None, f"the source does not parse: {exc}")]
    if not p.kernels:
        return [decline(transform, None, "no @triton.jit kernel in the file")]
    return p


def parse_for_apply(source: str, site: str, path: str = "<candidate>") -> tuple[Parsed, JitKernel]:
    """The parsed source and the kernel named by `site` ('kernel' or 'kernel@anything'); TransformError if absent."""
    try:
        p = parse(source, path)
    except BadInput as exc:
        raise TransformError(f"the source does not parse: {exc}") from None
    name = site.split("@")[0]
    if name not in p.kernels:
        known = ", ".join(sorted(p.kernels)) or "none"
        raise TransformError(f"no @triton.jit kernel {name!r} in the source (kernels: {known})")
    return p, p.kernels[name]


def kernel_sites(transform: str, source: str, path: str,
                 site: Callable[[Parsed, JitKernel], str | tuple[str, dict[str, ParamValue]]]) -> list[SiteReport]:
    """`sites()` of a transform with one site per kernel: `site(p, k)` is why it declines the
    kernel (a str) or how it applies (reason, params)."""
    p = parse_for_sites(transform, source, path)
    if isinstance(p, list):
        return p
    out = []
    for k in p.kernels.values():
        got = site(p, k)
        out.append(decline(transform, k.fn.name, got, k.fn.lineno) if isinstance(got, str)
                   else applies(transform, k, *got))
    return out


def int_param(transform: str, params: dict[str, ParamValue], name: str, default: int, *, minimum: int = 1) -> int:
    """An integer parameter as `apply` takes it, checked there too: a library caller's `apply`
    does not go through `base.resolve_params`."""
    value = params.get(name, default)
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        kind = {0: "non-negative", 1: "positive"}.get(minimum, f">= {minimum}")
        raise TransformError(f"{transform}: {name}={value!r} is not a {kind} integer")
    return value


def refuse_unknown(transform: str, params: dict[str, ParamValue], known: set[str]) -> None:
    """TransformError for a parameter `apply` does not take (a library caller's `apply` does not
    go through `base.resolve_params`)."""
    unknown = set(params) - known
    if unknown:
        raise TransformError(f"{transform}: unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(sorted(known))})")


def decline(transform: str, kernel: str | None, reason: str, line: int | None = None) -> SiteReport:
    return SiteReport(transform=transform, site=None, applies=False, reason=reason, kernel=kernel, line=line)


def applies(transform: str, k: JitKernel, reason: str, params: dict[str, ParamValue]) -> SiteReport:
    return SiteReport(transform=transform, site=k.fn.name, applies=True, reason=reason, params=params,
                      kernel=k.fn.name, line=k.fn.lineno)


# --- reading a kernel ----------------------------------------------------------------------------


def call_arg(call: ast.Call, pos: int, name: str) -> ast.AST | None:
    """The argument a call passes at position `pos` or as keyword `name`; None when it passes neither."""
    if len(call.args) > pos:
        return call.args[pos]
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def axis_of(call: ast.Call) -> int | None:
    """The constant axis of `tl.program_id(axis)` / `tl.num_programs(axis)`; None when computed."""
    arg = call_arg(call, 0, "axis")
    if isinstance(arg, ast.Constant) and type(arg.value) is int:
        return arg.value
    return None


def tl_calls(node: ast.AST, al: TritonAliases, attr: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and al.tl_attr(n.func) == attr]


def program_ids(k: JitKernel, al: TritonAliases) -> dict[int | None, list[ast.Call]]:
    """axis -> the `tl.program_id(axis)` calls in the kernel (None: an axis that is not a constant)."""
    out: dict[int | None, list[ast.Call]] = {}
    for call in tl_calls(k.fn, al, "program_id"):
        out.setdefault(axis_of(call), []).append(call)
    return out


def pid_names(fn: ast.FunctionDef, calls: list[ast.Call]) -> set[str]:
    """Names bound directly to one of `calls` (a `tl.program_id(axis)`) in the kernel."""
    ids = {id(c) for c in calls}
    return {t.id for s in ast.walk(fn) if isinstance(s, ast.Assign) and id(s.value) in ids
            for t in s.targets if isinstance(t, ast.Name)}


def flat_tile_index(k: JitKernel, calls: list[ast.Call]) -> bool:
    """A program id (one of `calls`, or a name bound to one) multiplied by a constexpr: the
    index of a BLOCK-sized tile of a flat range (a larger BLOCK is that kernel's knob)."""
    names = pid_names(k.fn, calls)
    ids = {id(c) for c in calls}

    def is_pid(n: ast.AST) -> bool:
        return id(n) in ids or (isinstance(n, ast.Name) and n.id in names)

    for n in ast.walk(k.fn):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
            for a, b in ((n.left, n.right), (n.right, n.left)):
                if is_pid(a) and isinstance(b, ast.Name) and b.id in k.constexprs:
                    return True
    return False


def body_of(fn: ast.FunctionDef) -> list[ast.stmt]:
    """The kernel body without its docstring."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def is_program_id(node: ast.AST | None, al: TritonAliases, axis: int) -> bool:
    return isinstance(node, ast.Call) and al.tl_attr(node.func) == "program_id" and axis_of(node) == axis


def single_binding(fn: ast.FunctionDef, name: str) -> ast.Assign | None:
    """The one top-level `name = value` statement of the kernel body, when that is its only binding."""
    binds = bindings(fn, name)
    if len(binds) != 1 or not isinstance(binds[0][0], ast.Assign):
        return None
    stmt = binds[0][0]
    if stmt not in fn.body or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
        return None
    return stmt


def name_loads(node: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_stored(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def grown_through_assignments(fn: ast.AST, seed: set[str], read: Callable[[ast.AST], set[str]]) -> set[str]:
    """`seed` and every name an assignment to one of them reads (`read(value)`), to a fixed point:
    the names an address or a mask is computed from, say, through the variables that hold it."""
    assigns = [(names_stored(t), n.value) for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
    grown = set(seed)
    changed = True
    while changed:
        changed = False
        for targets, value in assigns:
            if targets & grown:
                new = read(value) - grown
                if new:
                    grown |= new
                    changed = True
    return grown


def rebound_params(k: JitKernel) -> list[tuple[str, int]]:
    """The kernel parameters the body assigns to (`ptr += row * stride`, `n = tl.cast(n, ...)`), each
    with the line of its first assignment, in that order. A body that a rewrite runs more than once
    per program (a loop over rows or tiles) would start every pass after the first from the value
    the last pass left, not from the argument: `param_copies` restores them."""
    params = set(k.params)
    first: dict[str, tuple[int, int]] = {}
    for n in ast.walk(k.fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)) and n.id in params:
            first[n.id] = min(first.get(n.id, (n.lineno, n.col_offset)), (n.lineno, n.col_offset))
    return [(name, at[0]) for name, at in sorted(first.items(), key=lambda kv: kv[1])]


def rebinds_param_reason(k: JitKernel, loop: str) -> str | None:
    """One line for a transform that cannot restore a parameter the body assigns to (`rebound_params`)
    at the top of its loop over `loop`: a constexpr (its copy would not stay a compile-time value)
    or one the body deletes; None when every rebound parameter can be restored (or there is none)."""
    for name, line in rebound_params(k):
        if name in k.constexprs:
            return (f"assigns to its constexpr parameter {name} (line {line}): a loop over {loop} cannot restore "
                    f"a compile-time value at each {loop[:-1]}")
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Del) for n in ast.walk(k.fn)):
            return f"deletes its parameter {name} (line {line}): a loop over {loop} could not restore it"
    return None


def param_copies(k: JitKernel, taken: set[str], indent: str, inner: str) -> tuple[str, str]:
    """For a body about to run once per row / tile in a loop: (lines before the loop copying each
    parameter the body assigns to, `x_ptr_0 = x_ptr`; the loop body's first lines restoring it,
    `x_ptr = x_ptr_0`), indented by `indent` and `inner`, so every pass starts from the arguments.
    The copies take names `taken` does not hold (added to it). Empty strings when nothing is rebound."""
    before, restore = "", ""
    for name, _ in rebound_params(k):
        copy = fresh(taken, f"{name}_0")
        before += f"{indent}{copy} = {name}\n"
        restore += f"{inner}{name} = {copy}\n"
    if before:
        before = f"{indent}# the body assigns to these arguments: each pass of the loop restores them\n{before}"
    return before, restore


def used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(node) if isinstance(a, ast.arg)}


def fresh(taken: set[str], base: str) -> str:
    """`base`, or `base_2`, `base_3`... whichever the module does not use yet (added to `taken`)."""
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def alone_on_lines(src: SourceFile, stmt: ast.stmt, body: list[ast.stmt]) -> bool:
    """No other statement of `body` shares a line with `stmt` (no `a = 1; b = 2`)."""
    lo, hi = stmt.lineno, stmt.end_lineno or stmt.lineno
    return not any(o is not stmt and (o.lineno <= hi and (o.end_lineno or o.lineno) >= lo) for o in body)


def line_span(src: SourceFile, stmt: ast.stmt) -> tuple[int, int]:
    """Bytes of the whole lines a statement occupies, newline included."""
    start = src.line_starts[stmt.lineno - 1]
    end_line = stmt.end_lineno or stmt.lineno
    end = src.line_starts[end_line] if end_line < len(src.line_starts) else len(src.data)
    return start, end


def enclosing_stmt(p: Parsed, node: ast.AST) -> ast.stmt | None:
    """The innermost statement that contains `node`."""
    best: ast.stmt | None = None
    for stmt in ast.walk(p.src.tree):
        if isinstance(stmt, ast.stmt) and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.Module)):
            if p.src.start(stmt) <= p.src.start(node) and p.src.end(node) <= p.src.end(stmt):
                if best is None or p.src.start(stmt) >= p.src.start(best):
                    best = stmt
    return best


def literal_tuple(p: Parsed, call: ast.Call) -> ast.Tuple | ast.List | None:
    """The launch's grid as a tuple/list literal (written at the launch or bound once to a local
    name; see grid_of), None for a lambda grid or anything else."""
    tup, lam, _ = grid_of(p, call)
    return tup if lam is None else None


def launch_args(k: JitKernel, call: ast.Call) -> dict[str, ast.AST] | None:
    """Kernel parameter -> the expression the launch passes; None when it passes *args/**kwargs."""
    out: dict[str, ast.AST] = {}
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or i >= len(k.params):
            return None
        out[k.params[i]] = arg
    for kw in call.keywords:
        if kw.arg is None:
            return None
        out[kw.arg] = kw.value
    return out


# --- edits ---------------------------------------------------------------------------------------


def add_params(p: Parsed, k: JitKernel, decls: list[str]) -> Edit:
    """Append parameters (e.g. 'GROUP_M: tl.constexpr') to the kernel's signature."""
    a = k.fn.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        raise TransformError(f"{k.fn.name} takes *args/**kwargs or keyword-only parameters")
    last: list[ast.AST] = [*a.posonlyargs, *a.args, *a.defaults]
    if not last:
        raise TransformError(f"{k.fn.name} has no parameters")
    end = max(p.src.end(n) for n in last)
    if a.defaults:  # after a parameter with a default, new ones need one too; every launch passes them
        raise TransformError(f"{k.fn.name} has parameters with default values")
    return end, end, "".join(f", {d}" for d in decls)


def add_launch_kwargs(p: Parsed, call: ast.Call, kwargs: list[tuple[str, str]]) -> Edit:
    end = last_arg_end(p.src, call)
    return end, end, "".join(f", {name}={value}" for name, value in kwargs)


def tl_name(p: Parsed) -> str:
    return p.al.tl_prefix()


def constexpr_annotation(p: Parsed) -> str:
    return f"{tl_name(p)}.constexpr"


def text(p: Parsed, node: ast.AST) -> str:
    return segment(p.src, node)


# --- statement-level rewrites (loops unrolled or wrapped, values hoisted) ------------------------


def parents(tree: ast.AST) -> dict[int, ast.AST]:
    """id(node) -> its parent node."""
    out: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def grid_of(p: Parsed, call: ast.Call) -> tuple[ast.Tuple | ast.List | None, ast.Lambda | None, str]:
    """The tuple a launch's grid evaluates to as written: `k[(a, b)]`, `k[grid]` with `grid`
    bound once to a tuple or to `lambda meta: (a, b)`, or `k[lambda meta: (a, b)]`.
    (tuple, the lambda around it or None, '') or (None, None, why not)."""
    expr: ast.AST = call.func.slice  # type: ignore[attr-defined]
    if isinstance(expr, ast.Name):
        for scope in p.scopes_at(call):
            binds = bindings(scope, expr.id)
            if binds:
                if len(binds) != 1 or binds[0][1] is None:
                    return None, None, f"the grid {expr.id!r} is bound more than once or not to an expression"
                expr = binds[0][1]  # type: ignore[assignment]
                break
        else:
            return None, None, f"the grid {expr.id!r} is not bound where the launch is"
        if sum(1 for n in ast.walk(p.src.tree) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name)
               and n.slice.id == call.func.slice.id) > 1:  # type: ignore[attr-defined]
            return None, None, f"the grid {call.func.slice.id!r} is shared by several launches"  # type: ignore[attr-defined]
    lam = None
    if isinstance(expr, ast.Lambda):
        lam, expr = expr, expr.body
    if isinstance(expr, (ast.Tuple, ast.List)) and expr.elts and not any(isinstance(e, ast.Starred) for e in expr.elts):
        return expr, lam, ""
    return None, None, "the grid is not a tuple written in the source"


@dataclass
class GridAxis:
    """One axis of a launch's grid, ready to be rewritten: `node` is the extent as written in
    the grid tuple, `text` the extent as an expression valid at the launch (the node's own
    source, or `g[i]` when the tuple is bound to a grid variable: `written` False), `meta` the
    name a new extent reads the launch's meta-parameters through; `edit(new)` is the edit
    that makes the extent `new` (turning a tuple grid into `lambda META: (...)`)."""

    node: ast.AST
    text: str
    meta: str
    written: bool
    edit: Callable[[str], Edit]


def grid_axis(p: Parsed, call: ast.Call, index: int) -> GridAxis | str:
    """Axis `index` of the launch's grid (see `grid_of` for the forms read), or why it cannot be
    rewritten: a grid that is not a tuple in the source, has no such axis, or whose extent there
    already depends on the launch's META."""
    tup, lam, why = grid_of(p, call)
    if tup is None:
        return why
    if index >= len(tup.elts):
        return f"the grid has no axis {index}"
    elem = tup.elts[index]
    slice_: ast.AST = call.func.slice  # type: ignore[attr-defined]
    src = p.src
    if lam is not None:
        if not lam.args.args:
            return "the grid lambda takes no META argument"
        if {a.arg for a in lam.args.args} & {n.id for n in ast.walk(elem) if isinstance(n, ast.Name)}:
            return f"the grid's extent on axis {index} depends on the launch's META"
        return GridAxis(elem, text(p, elem), lam.args.args[0].arg, True,
                        lambda new: (src.start(elem), src.end(elem), new))
    if isinstance(slice_, (ast.Tuple, ast.List)):
        elts = [text(p, e) for e in tup.elts]

        def literal(new: str) -> Edit:
            parts = [*elts[:index], new, *elts[index + 1:]]
            return src.start(slice_), src.end(slice_), f"lambda META: ({', '.join(parts)}{',' if len(parts) == 1 else ''})"

        return GridAxis(elem, elts[index], "META", True, literal)
    g = text(p, slice_)  # a name bound to a tuple: read it at the launch

    def named(new: str) -> Edit:
        parts = ([f"*{g}[:{index}]"] if index else []) + [new, f"*{g}[{index + 1}:]"]
        return src.start(slice_), src.end(slice_), f"lambda META: ({', '.join(parts)})"

    return GridAxis(elem, f"{g}[{index}]", "META", False, named)


def reindent_edits(src: SourceFile, first_line: int, last_line: int, *, keep: str = "", remove: str = "",
                   add: str = "", skip: list[tuple[int, int]] | None = None) -> list[Edit]:
    """Edits re-indenting lines first_line..last_line (1-based): a line that starts with
    `keep + remove` loses the `remove` bytes (dedent), and `add` goes before every non-blank
    line (indent). Lines whose start lies strictly inside a `skip` span (an expression being
    replaced) are left alone, as are blank lines."""
    out: list[Edit] = []
    for ln in range(first_line, last_line + 1):
        start = src.line_starts[ln - 1]
        if any(s < start < e for s, e in skip or ()):
            continue
        end = src.line_starts[ln] if ln < len(src.line_starts) else len(src.data)
        line = src.data[start:end]
        if not line.strip():
            continue
        if remove and line.startswith((keep + remove).encode()):
            out.append((start + len(keep), start + len(keep) + len(remove), ""))
        if add:
            out.append((start, start, add))
    return out


def import_edit(src: SourceFile, line: str) -> Edit:
    """An edit adding `line` (an import) before the file's first import (after `from __future__`)."""
    for stmt in src.tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) and not (
                isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"):
            at = src.line_starts[stmt.lineno - 1]
            return at, at, line + "\n"
    return 0, 0, line + "\n"


def triton_module(p: Parsed) -> tuple[str, list[Edit]]:
    """The name `triton` is bound to in the module, and the edit importing it when it is not."""
    if p.al.triton:
        return sorted(p.al.triton)[0], []
    return "triton", [import_edit(p.src, "import triton")]

