"""grouped_program_order: visit a 2-D tiled kernel's output tiles in GROUP_M-row bands (L2 reuse).

A matmul-style kernel that takes its tile coordinates straight from the launch order
(`pid_m = tl.program_id(0); pid_n = tl.program_id(1)`, or a 1-D id split as
`pid // num_pid_n`, `pid % num_pid_n`) walks a whole row (or column) of tiles before
coming back: the operand tiles it reuses have left the L2 cache by then. The rewrite
numbers the programs in launch order and maps that number to a tile so that consecutive
programs stay within a band of GROUP_M tile rows (the grouped ordering of Triton's matmul
tutorial). The mapping is a bijection on the tiles the launch covers, so every tile is
still computed exactly once.

A 2-D launch keeps its grid: the hardware starts a 2-D grid's programs in
`program_id(0) + program_id(1) * num_programs(0)` order, the same order a 1-D grid of
their product starts in, so the launch needs no change (a `lambda META:` grid, an
autotuned kernel and several launch sites all keep working). GROUP_M is a new constexpr
passed at every launch: a knob.
"""

from __future__ import annotations

import ast

from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    add_launch_kwargs,
    add_params,
    alone_on_lines,
    constexpr_annotation,
    fresh,
    int_param,
    is_program_id,
    kernel_sites,
    line_span,
    name_loads,
    parse_for_apply,
    program_ids,
    single_binding,
    text,
    used_names,
)
from kernelopt.source import JitKernel, apply_edits, indent_of

NAME = "grouped_program_order"


class _Plan:
    """Where the tile coordinates come from, and what replaces them."""

    def __init__(self, kind: str, m_stmt: ast.Assign, n_stmt: ast.Assign, pid: str = "", count: str = "") -> None:
        self.kind = kind  # '2d': m, n from program_id(0), program_id(1); 'split': from pid // D, pid % D
        self.m_stmt, self.n_stmt = m_stmt, n_stmt  # in 'split', m is the `//` (slow) coordinate
        self.pid, self.count = pid, count  # 'split': the 1-D id's text and D's text


def _target(stmt: ast.Assign) -> str:
    return stmt.targets[0].id  # type: ignore[attr-defined]


def _plan(p: Parsed, k: JitKernel) -> _Plan | str:
    """The plan, or why the kernel is not a 2-D tiled kernel this rewrite can reorder."""
    fn, al = k.fn, p.al
    grouped = [name for name in k.params if "GROUP" in name.upper()]
    if grouped:
        return f"already takes {grouped[0]} (grouped already)"
    pids = program_ids(k, al)
    if None in pids or any(axis not in (0, 1) for axis in pids):
        return "reads a program id other than axis 0 and 1 (a 3-D or computed-axis grid)"
    if 1 in pids:
        if len(pids[0]) != 1 or len(pids[1]) != 1:
            return "reads program_id(0) or program_id(1) more than once"
        stmts = []
        for axis in (0, 1):
            stmt = next((s for s in fn.body if isinstance(s, ast.Assign) and s.value is pids[axis][0]), None)
            if stmt is None or single_binding(fn, _target(stmt) if isinstance(stmt.targets[0], ast.Name) else "") is not stmt:
                return f"program_id({axis}) is not bound once to a name at the top of the kernel"
            stmts.append(stmt)
        return _Plan("2d", stmts[0], stmts[1])
    # A 1-D id split into two coordinates: m = pid // D, n = pid % D (either order of statements).
    if 0 not in pids:
        return "reads no program id"
    def splits_pid(e: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            bound = single_binding(fn, e.id)
            return bound is not None and is_program_id(bound.value, al, 0)
        return is_program_id(e, al, 0)

    divs: dict[str, list[ast.Assign]] = {"FloorDiv": [], "Mod": []}
    for stmt in fn.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, (ast.FloorDiv, ast.Mod))
                and splits_pid(stmt.value.left)):
            divs[type(stmt.value.op).__name__].append(stmt)
    pairs = [(a, b) for a in divs["FloorDiv"] for b in divs["Mod"]
             if ast.dump(a.value.left) == ast.dump(b.value.left)  # type: ignore[attr-defined]
             and ast.dump(a.value.right) == ast.dump(b.value.right)]  # type: ignore[attr-defined]
    if len(pairs) != 1:
        return ("not a tiled grid: no 2-D program id and no 1-D program id split as pid // n, pid % n"
                if not pairs else "the program id is split more than once")
    m_stmt, n_stmt = pairs[0]
    m_val = m_stmt.value
    assert isinstance(m_val, ast.BinOp)
    pid_expr = m_val.left
    if isinstance(pid_expr, ast.Name):
        uses = name_loads(fn, pid_expr.id)
        if len(uses) != 2:
            return f"{pid_expr.id} is used beyond the two coordinates: the program id means more than a tile"
        if len(pids[0]) != 1:
            return "reads program_id(0) more than once"
    elif len(pids[0]) != 2:
        return "reads program_id(0) beyond the two coordinates"
    for stmt in (m_stmt, n_stmt):
        if single_binding(fn, _target(stmt)) is not stmt:
            return f"{_target(stmt)} is bound more than once"
    divisor_names = {n.id for n in ast.walk(m_val.right) if isinstance(n, ast.Name)}
    if divisor_names & {_target(m_stmt), _target(n_stmt)}:
        return "the divisor reads a tile coordinate"
    return _Plan("split", m_stmt, n_stmt, text(p, pid_expr), text(p, m_val.right))


def _check_edit(p: Parsed, k: JitKernel, plan: _Plan) -> str | None:
    body = k.fn.body
    first, last = sorted((plan.m_stmt, plan.n_stmt), key=lambda s: body.index(s))
    for stmt in (first, last):
        if not alone_on_lines(p.src, stmt, body):
            return f"line {stmt.lineno} holds more than one statement"
    between = body[body.index(first) + 1: body.index(last)]
    moved = _target(first)
    if any(name_loads(s, moved) for s in between):
        return f"{moved} is used before {_target(last)} is defined"
    if not p.launches.get(k.fn.name):
        return "no launch of the kernel in this file (GROUP_M must be passed at the launch)"
    a = k.fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
        return "takes *args, **kwargs, keyword-only or defaulted parameters"
    return None


class GroupedProgramOrder:
    name = NAME
    backend = "triton"
    summary = "visit a 2-D tiled kernel's tiles in bands of GROUP_M rows (grouped program order, L2 reuse)"
    requires = ["triton"]
    params = [TransformParam(name="GROUP_M", default=8, domain=[1, 2, 4, 8, 16, 32, 64],
                             doc="tile rows per band; a knob of the result")]

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            plan = _plan(p, k)
            why = plan if isinstance(plan, str) else _check_edit(p, k, plan)
            if why is not None:
                return why
            assert isinstance(plan, _Plan)
            what = ("2-D grid" if plan.kind == "2d" else f"1-D id split by {plan.count}")
            return (f"{what}: tiles {_target(plan.m_stmt)}, {_target(plan.n_stmt)} visited in bands of GROUP_M rows",
                    {"GROUP_M": 8})

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        group = int_param(NAME, params, "GROUP_M", 8)
        p, k = parse_for_apply(source, site)
        plan = _plan(p, k)
        why = plan if isinstance(plan, str) else _check_edit(p, k, plan)
        if why is not None:
            raise TransformError(f"{k.fn.name}: {why}")
        assert isinstance(plan, _Plan)
        tl = p.al.tl_prefix()
        taken = used_names(p.src.tree)
        v = {b: fresh(taken, b) for b in ("pid", "num_m", "num_n", "in_group", "first_m", "group_m")}
        m, n = _target(plan.m_stmt), _target(plan.n_stmt)
        lines = []
        if plan.kind == "2d":
            lines += [f"{v['num_m']} = {tl}.num_programs(0)",
                      f"{v['num_n']} = {tl}.num_programs(1)",
                      "# the launch order of the 2-D grid: axis 0 fastest",
                      f"{v['pid']} = {tl}.program_id(0) + {tl}.program_id(1) * {v['num_m']}"]
        else:
            lines += [f"{v['pid']} = {plan.pid}",
                      f"{v['num_n']} = {plan.count}",
                      f"{v['num_m']} = {tl}.num_programs(0) // {v['num_n']}"]
        lines += ["# grouped order: GROUP_M rows of tiles per band, down the band first",
                  f"{v['in_group']} = GROUP_M * {v['num_n']}",
                  f"{v['first_m']} = ({v['pid']} // {v['in_group']}) * GROUP_M"]
        if plan.kind == "2d":
            lines += [f"{v['group_m']} = min({v['num_m']} - {v['first_m']}, GROUP_M)",
                      f"{m} = {v['first_m']} + ({v['pid']} % {v['in_group']}) % {v['group_m']}",
                      f"{n} = ({v['pid']} % {v['in_group']}) // {v['group_m']}"]
        else:
            # Programs past the last full row of tiles (a grid that is not a multiple of the
            # divisor) keep the plain split, so the tiles covered are exactly the original ones.
            full = fresh(taken, "full")
            lines += [f"{v['group_m']} = max(min({v['num_m']} - {v['first_m']}, GROUP_M), 1)",
                      f"{full} = {v['pid']} < {v['num_m']} * {v['num_n']}",
                      f"{m} = {tl}.where({full}, {v['first_m']} + ({v['pid']} % {v['in_group']}) % {v['group_m']}, "
                      f"{v['pid']} // {v['num_n']})",
                      f"{n} = {tl}.where({full}, ({v['pid']} % {v['in_group']}) // {v['group_m']}, "
                      f"{v['pid']} % {v['num_n']})"]
        body = k.fn.body
        first, last = sorted((plan.m_stmt, plan.n_stmt), key=lambda s: body.index(s))
        indent = indent_of(p.src, last)
        s0, e0 = line_span(p.src, first)
        s1, e1 = line_span(p.src, last)
        edits = [(s0, e0, ""), (s1, e1, "".join(f"{indent}{line}\n" for line in lines)),
                 add_params(p, k, [f"GROUP_M: {constexpr_annotation(p)}"])]
        edits += [add_launch_kwargs(p, call, [("GROUP_M", str(group))]) for call in p.launches[k.fn.name]]
        return apply_edits(source, edits, what=f"{NAME} edits")
