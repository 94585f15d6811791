"""persistent_grid: launch a few programs per SM and loop each over the original tiles.

A kernel launched with one program per tile pays a launch slot and a prologue per tile,
and its last partial wave leaves SMs idle. The rewrite launches
`min(num_tiles, NUM_SMS * PROGRAMS_PER_SM)` programs and wraps the kernel's body in

    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):

where every `tl.program_id(axis)` of the body becomes that axis's coordinate of `tile`
(axis 0 fastest, the order the hardware starts a grid in) and every
`tl.num_programs(axis)` the original grid's size along it, passed as new arguments. Each
tile is still computed exactly once, by the same code. The SM count is read at the launch
from `torch.cuda.get_device_properties` when CUDA is available, else a small constant (so
the interpreter runs the loop). PROGRAMS_PER_SM is a constexpr passed at the launch: a knob.

A parameter the body assigns to (`x_ptr += pid * stride`) is copied before the loop
(`x_ptr_0 = x_ptr`) and restored as the loop's first statement, so every tile starts from the
argument, not from the last tile's pointer.

A `lambda META:` grid is called once at the launch with the values the launch passes for
the META keys it reads, which gives the tile counts. One top-level bounds guard
`if COND: return` becomes `if not (COND):` around the statements after it. It declines
kernels with any other `return` (it would end the loop, not the tile), kernels that assign to a
constexpr parameter or delete a parameter (the loop cannot restore those at each tile), multi-line
strings in the body (re-indenting would change them), grids it cannot evaluate at the launch (computed elsewhere, or META from an
autotuner's pick) and kernels that already loop over program ids.
"""

from __future__ import annotations

import ast

from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    add_params,
    axis_of,
    body_of,
    constexpr_annotation,
    enclosing_stmt,
    fresh,
    grid_of,
    int_param,
    kernel_sites,
    launch_args,
    param_copies,
    parents,
    parse_for_apply,
    program_ids,
    rebinds_param_reason,
    reindent_edits,
    text,
    tl_calls,
    used_names,
)
from kernelopt.source import JitKernel, apply_edits, indent_of

NAME = "persistent_grid"
# SMs assumed without CUDA (the interpreter): small, so tiny test shapes still loop.
CPU_SMS = 2


def torch_alias(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch":
                    return a.asname or "torch"
    return None


_MetaGrid = tuple[str, list[tuple[str, ast.AST]], list[ast.AST]]  # the grid callable, META key -> launch arg, literals


def _guard(k: JitKernel) -> ast.If | None:
    """The one top-level `if COND: return` of the body (a bounds guard), when there is exactly one:
    inside the tile loop it becomes `if not (COND):` around the statements after it."""
    guards = [s for s in body_of(k.fn) if isinstance(s, ast.If) and not s.orelse and len(s.body) == 1
              and isinstance(s.body[0], ast.Return) and s.body[0].value is None]
    return guards[0] if len(guards) == 1 else None


def _check(p: Parsed, k: JitKernel) -> tuple[int, list[tuple[ast.Call, list[str] | None, _MetaGrid | None]], str] | str:
    """(axes the kernel reads, per launch its call and grid sizes, torch alias), or why not."""
    fn, al = k.fn, p.al
    if "PROGRAMS_PER_SM" in k.params:
        return "already takes PROGRAMS_PER_SM (persistent already)"
    pids = program_ids(k, al)
    nums = tl_calls(fn, al, "num_programs")
    if not pids:
        return "reads no program id"
    if None in pids or any(axis_of(c) is None for c in nums):
        return "reads a program id along a computed axis"
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node is not getattr(_guard(k), "body", [None])[0]:
            return f"returns early (line {node.lineno}): inside a tile loop that would skip the remaining tiles"
        if isinstance(node, (ast.For, ast.While)) and any(
                isinstance(n, ast.Call) and al.tl_attr(n.func) in ("program_id", "num_programs")
                for n in ast.walk(node.iter if isinstance(node, ast.For) else node.test)):
            return f"already loops over program ids (line {node.lineno})"
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.lineno != node.end_lineno and node not in [getattr(s, "value", None) for s in fn.body[:1]]):
            return f"a multi-line string at line {node.lineno} (re-indenting would change it)"
        if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
            return "defines a nested function"
    rebound = rebinds_param_reason(k, "tiles")
    if rebound is not None:
        return rebound
    body = body_of(k.fn)
    if not body:
        return "has no body to loop over"
    axes = 1 + max([a for a in pids if a is not None] + [axis_of(c) or 0 for c in nums])
    torch = torch_alias(p.src.tree)
    if torch is None:
        return "the module does not import torch (the SM count is read through torch.cuda)"
    calls = p.launches.get(fn.name, [])
    if not calls:
        return "no launch of the kernel in this file"
    launches = []
    for call in calls:
        grid, lam, why = grid_of(p, call)
        if grid is None:
            return f"the grid at line {call.lineno}: {why} (its size is not known)"
        if len(grid.elts) < axes or any(not (isinstance(e, ast.Constant) and e.value == 1) for e in grid.elts[axes:]):
            return f"the grid at line {call.lineno} does not match the {axes} program-id axes the kernel reads"
        if enclosing_stmt(p, call) is None:
            return f"the launch at line {call.lineno} is not inside a statement"
        if lam is None:
            launches.append((call, [text(p, e) for e in grid.elts[:axes]], None))
            continue
        # A META grid: evaluated at the launch with the values the launch passes for its META keys.
        if k.autotune is not None:
            return "autotuned with a META grid: the tile count depends on the tuner's pick"
        if len(lam.args.args) != 1:
            return f"the grid lambda at line {call.lineno} does not take one META argument"
        meta = lam.args.args[0].arg
        keys = []
        for n in ast.walk(lam.body):
            if isinstance(n, ast.Name) and n.id == meta:
                parent = next((q for q in ast.walk(lam.body) if isinstance(q, ast.Subscript) and q.value is n), None)
                if parent is None or not (isinstance(parent.slice, ast.Constant) and isinstance(parent.slice.value, str)):
                    return f"the grid lambda at line {call.lineno} reads {meta} other than as {meta}['NAME']"
                keys.append(parent.slice.value)
        args = launch_args(k, call)
        if args is None or any(key not in args for key in keys):
            return f"the grid at line {call.lineno} reads a META value the launch does not pass by name"
        literals = [args[key] for key in dict.fromkeys(keys) if isinstance(args[key], ast.Constant)]
        launches.append((call, None, (text(p, call.func.slice), [(key, args[key]) for key in dict.fromkeys(keys)],  # type: ignore[attr-defined]
                                      literals)))
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
        return "takes *args, **kwargs, keyword-only or defaulted parameters"
    return axes, launches, torch


class PersistentGrid:
    name = NAME
    backend = "triton"
    summary = "launch min(tiles, SMs * PROGRAMS_PER_SM) programs, each looping over the original tiles"
    requires = ["triton"]
    params = [TransformParam(name="PROGRAMS_PER_SM", default=2, domain=[1, 2, 3, 4, 8],
                             doc="programs launched per SM; a knob of the result")]

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            got = _check(p, k)
            if isinstance(got, str):
                return got
            return f"{got[0]}-D grid of tiles: programs per SM loop over them", {"PROGRAMS_PER_SM": 2}

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        pps = int_param(NAME, params, "PROGRAMS_PER_SM", 2)
        p, k = parse_for_apply(source, site)
        got = _check(p, k)
        if isinstance(got, str):
            raise TransformError(f"{k.fn.name}: {got}")
        axes, launches, torch = got
        tl, src, fn = p.al.tl_prefix(), p.src, k.fn
        taken = used_names(src.tree)
        tile = fresh(taken, "tile")
        sizes = [fresh(taken, f"grid_{a}") for a in range(axes)]  # kernel parameters: the original grid
        total = " * ".join(sizes)
        coord = {0: f"({tile} % {sizes[0]})" if axes > 1 else tile}
        if axes > 1:
            coord[1] = f"({tile} // {sizes[0]} % {sizes[1]})" if axes > 2 else f"({tile} // {sizes[0]})"
        if axes > 2:
            coord[2] = f"({tile} // ({sizes[0]} * {sizes[1]}))"
        edits = []
        up = parents(fn)
        for call in tl_calls(fn, p.al, "program_id"):
            new = coord[axis_of(call)]  # type: ignore[index]
            if isinstance(up.get(id(call)), ast.Attribute):
                # `tl.program_id(0).to(tl.int64)`: the interpreter's loop variable is a Python int, which has
                # no tensor methods; the cast keeps program_id's int32 tensor (a no-op when compiled)
                new = f"{tl}.cast({new}, {tl}.int32)"
            edits.append((src.start(call), src.end(call), new))
        for call in tl_calls(fn, p.al, "num_programs"):
            edits.append((src.start(call), src.end(call), sizes[axis_of(call)]))  # type: ignore[index]
        body = body_of(k.fn)
        indent = indent_of(src, body[0])
        unit = indent[len(indent_of(src, fn)):] or "    "
        first_line, last_line = body[0].lineno, max(s.end_lineno or s.lineno for s in body)
        # the loop header goes before the first body line's own indentation (edits at one offset keep their order)
        copies, restore = param_copies(k, taken, indent, indent + unit)
        loop = (f"{copies}{indent}# persistent: each program walks the tiles, PROGRAMS_PER_SM programs per SM\n"
                f"{indent}for {tile} in {tl}.range({tl}.program_id(0), {total}, {tl}.num_programs(0)):\n{restore}")
        edits.append((src.line_starts[first_line - 1], src.line_starts[first_line - 1], loop))
        guard = _guard(k)
        skip: list[tuple[int, int]] = []
        if guard is not None:
            after = body[body.index(guard) + 1:]
            # `if COND:\n return` -> `if not (COND):` (the test's own bytes stay: program ids in it are rewritten too)
            ts, te, ge = src.start(guard.test), src.end(guard.test), src.end(guard)
            skip.append((te, ge))
            edits.append((src.start(guard), ts, "if not ("))
            if after:  # the statements after the guard move into it
                edits.append((te, ge, "):"))
                edits += reindent_edits(src, after[0].lineno, last_line, add=unit)
            else:  # nothing after it: a no-op
                edits.append((te, ge, "): pass"))
        edits += reindent_edits(src, first_line, last_line, add=unit, skip=skip)
        edits.append(add_params(p, k, [*sizes, f"PROGRAMS_PER_SM: {constexpr_annotation(p)}"]))
        for call, given, meta_grid in launches:
            stmt = enclosing_stmt(p, call)
            assert stmt is not None
            names = used_names(src.tree) | taken
            tiles, sms = fresh(names, "num_tiles"), fresh(names, "num_sms")
            taken |= {tiles, sms}
            pad = indent_of(src, stmt)
            pre = ""
            if meta_grid is not None:  # the META grid, called once with what the launch passes
                callable_, keyed, literals = meta_grid
                # a literal META value is bound to one name that the launch and the grid both read,
                # so the knob it is stays one value
                bound: dict[int, str] = {}
                for key, arg in keyed:
                    if arg in literals and id(arg) not in bound:
                        var = fresh(taken | names, key)
                        taken.add(var)
                        bound[id(arg)] = var
                        pre += f"{var} = {text(p, arg)}\n{pad}"
                        edits.append((src.start(arg), src.end(arg), var))
                values = ", ".join(f"{key!r}: {bound.get(id(arg)) or text(p, arg)}" for key, arg in keyed)
                sizes_var = fresh(taken, "grid_sizes")
                pre += f"{sizes_var} = ({callable_})({{{values}}})\n{pad}"
                grid = [f"{sizes_var}[{a}]" for a in range(axes)]
            else:
                assert given is not None
                grid = given
            tiles_expr = " * ".join(f"({g})" for g in grid)
            edits.append((src.start(stmt), src.start(stmt),
                          f"{pre}{tiles} = {tiles_expr}\n{pad}{sms} = ({torch}.cuda.get_device_properties("
                          f"{torch}.cuda.current_device()).multi_processor_count if {torch}.cuda.is_available() "
                          f"else {CPU_SMS})\n{pad}"))
            slice_ = call.func.slice  # type: ignore[attr-defined]
            edits.append((src.start(slice_), src.end(slice_),
                          f"lambda META: (min({tiles}, {sms} * META['PROGRAMS_PER_SM']),)"))
            end = max(src.end(n) for n in [*call.args, *call.keywords])
            kwargs = [f"{size}={g}" for size, g in zip(sizes, grid)] + [f"PROGRAMS_PER_SM={pps}"]
            edits.append((end, end, "".join(f", {kw}" for kw in kwargs)))
        return apply_edits(source, edits, what=f"{NAME} edits")
