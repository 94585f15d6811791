"""rows_per_program: each program of a row kernel handles ROWS_PER_PROGRAM rows, not one.

A kernel launched one program per row (`row = tl.program_id(0)`, grid `(rows,)`) on short
rows runs many tiny programs: each one's fixed cost (start, index math, the reduction's
synchronisation) is paid per row, and each keeps little memory traffic in flight. The
rewrite wraps the kernel body in

    for r in range(0, ROWS_PER_PROGRAM):
        row_id = tl.program_id(0) * ROWS_PER_PROGRAM + r
        if row_id < n_rows:
            <the body, with program_id(0) replaced by row_id>

so program p runs exactly what programs p*R .. p*R+R-1 ran before, in order; the rows past
the end (the last program's tail) do nothing. Every launch divides the grid's first
dimension by ROWS_PER_PROGRAM (cdiv, read from META so the two always agree) and passes the
row count it had; ROWS_PER_PROGRAM is a literal launch argument: a knob.

A parameter the body assigns to (`x_ptr += row * stride`, the usual start of a library row kernel)
is copied before the loop (`x_ptr_0 = x_ptr`) and restored as the loop's first statement
(`x_ptr = x_ptr_0`), so every row starts from the argument, not from where the last row left it.

A top-level guard `if cond: return` (a row past the end) would end the whole program inside
the loop; it becomes `if not (cond):` around the rest of the body, so it ends that row only.

It declines kernels whose axis-0 program index is a flat tile index (`pid * BLOCK`: an
elementwise kernel; a larger BLOCK is that kernel's knob), kernels that assign to a constexpr
parameter or delete a parameter (a loop cannot restore those at each row), kernels that read
`tl.num_programs(0)` (a persistent or grid-stride loop), that `return` anywhere else (it
would skip the program's later rows), that take parameters with defaults, and launches whose grid is
not a tuple written in the source or whose row count depends on the launch's META.
"""

from __future__ import annotations

import ast

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    add_launch_kwargs,
    add_params,
    body_of,
    constexpr_annotation,
    flat_tile_index,
    fresh,
    grid_axis,
    int_param,
    kernel_sites,
    line_span,
    param_copies,
    parse_for_apply,
    program_ids,
    rebinds_param_reason,
    refuse_unknown,
    reindent_edits,
    tl_calls,
    triton_module,
    used_names,
)
from kernelopt.source import Edit, JitKernel, SourceFile, apply_edits, indent_of

NAME = "rows_per_program"
PARAM = "ROWS_PER_PROGRAM"


class _Launch:
    def __init__(self, call: ast.Call, rows: str, grid_edit: Edit) -> None:
        self.call, self.rows, self.grid_edit = call, rows, grid_edit


def _guards(fn: ast.FunctionDef) -> list[ast.If]:
    """Top-level `if cond: return` statements (no value, no else) of the kernel body."""
    return [s for s in fn.body if isinstance(s, ast.If) and not s.orelse and len(s.body) == 1
            and isinstance(s.body[0], ast.Return) and s.body[0].value is None]


def _with_replaced(src: SourceFile, node: ast.AST, spans: set[tuple[int, int]], text: str) -> str:
    """The source of `node` with each of `spans` inside it replaced by `text`."""
    start, end = src.start(node), src.end(node)
    out, pos = b"", start
    for s, e in sorted(sp for sp in spans if start <= sp[0] and sp[1] <= end):
        out += src.data[pos:s] + text.encode()
        pos = e
    return (out + src.data[pos:end]).decode("utf-8")


class RowsPerProgram:
    name = NAME
    backend = "triton"
    summary = "each program of a row kernel handles ROWS_PER_PROGRAM consecutive rows (grid / ROWS_PER_PROGRAM)"
    requires = ["triton"]
    params = [TransformParam(name=PARAM, default=4, domain=[1, 2, 4, 8, 16, 32],
                             doc="rows each program handles; a knob of the result")]

    def _plan(self, p: Parsed, k: JitKernel, rpp: str, triton: str) -> list[_Launch] | str:
        fn, al = k.fn, p.al
        if PARAM in k.params:
            return f"already takes {PARAM}"
        pids = program_ids(k, al)
        if None in pids:
            return "reads a program id whose axis is computed"
        if 0 not in pids:
            return "does not read tl.program_id(0): not one program per row"
        if tl_calls(fn, al, "num_programs"):
            return "reads tl.num_programs (a persistent or grid-stride loop): programs are not rows"
        if flat_tile_index(k, pids[0]):
            return "program_id(0) indexes BLOCK-sized tiles of a flat range (an elementwise kernel), not rows"
        guards = _guards(fn)
        if any(isinstance(n, (ast.Yield, ast.YieldFrom)) or (isinstance(n, ast.Return) and not any(
                n is g.body[0] for g in guards)) for n in ast.walk(fn)):
            return ("returns early other than by `if cond: return` at the top level: inside a loop over rows "
                    "that would skip the program's later rows")
        rebound = rebinds_param_reason(k, "rows")
        if rebound is not None:
            return rebound
        if fn.args.defaults or fn.args.kw_defaults or fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs:
            return "takes parameters with defaults, *args or keyword-only parameters"
        if fn not in p.src.tree.body:
            return "the kernel is not defined at module level"
        body = body_of(fn)
        if not body or body[0].lineno == fn.lineno or any(s.lineno == o.lineno for s, o in zip(body, body[1:])):
            return "the kernel body shares a line with its signature or puts two statements on one line"
        calls = p.launches.get(fn.name, [])
        if not calls:
            return f"no launch of {fn.name} in this file to divide the grid of"
        out = []
        for call in calls:
            ga = grid_axis(p, call, 0)
            if isinstance(ga, str):
                return f"the launch at line {call.lineno}: {ga}"
            edit = ga.edit(f"{triton}.cdiv({ga.text}, {ga.meta}[{rpp!r}])")
            out.append(_Launch(call, ga.text, edit))
        return out

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            plan = self._plan(p, k, PARAM, "triton")
            if isinstance(plan, str):
                return plan
            return (f"each program runs {PARAM} consecutive program_id(0) indices (rows, planes) instead of one; "
                    f"{len(plan)} launch(es) divide their grid", {PARAM: 4})

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        refuse_unknown(NAME, params, {PARAM})
        rows_per = int_param(NAME, params, PARAM, 4)
        p, k = parse_for_apply(source, site)
        triton, header = triton_module(p)
        plan = self._plan(p, k, PARAM, triton)
        if isinstance(plan, str):
            raise TransformError(plan)
        src, fn, tl = p.src, k.fn, p.al.tl_prefix()
        taken = used_names(src.tree)
        n_rows, r, pid = fresh(taken, "n_rows"), fresh(taken, "rr"), fresh(taken, "row_id")
        edits: list[Edit] = list(header)
        edits.append(add_params(p, k, [n_rows, f"{PARAM}: {constexpr_annotation(p)}"]))
        for call in program_ids(k, p.al)[0]:
            edits.append((src.start(call), src.end(call), pid))
        body = body_of(fn)
        inner = indent_of(src, body[0])
        unit = inner[len(indent_of(src, fn)):] or "    "
        at = src.line_starts[body[0].lineno - 1]
        copies, restore = param_copies(k, taken, inner, inner + unit)
        edits.append((at, at, f"{copies}{inner}for {r} in range(0, {PARAM}):  # {PARAM} consecutive rows per program\n"
                              f"{restore}{inner}{unit}{pid} = {tl}.program_id(0) * {PARAM} + {r}\n"
                              f"{inner}{unit}if {pid} < {n_rows}:\n"))
        guards = _guards(fn)
        guard_spans = [line_span(src, g) for g in guards]
        edits += reindent_edits(src, body[0].lineno, fn.end_lineno or fn.lineno, add=unit * 2, skip=guard_spans)
        pid_spans = {(src.start(c), src.end(c)) for c in program_ids(k, p.al)[0]}
        for g, (gs, ge) in zip(guards, guard_spans):
            # `if cond: return` ends this row only: the rest of the body runs under `if not cond:`
            test = _with_replaced(src, g.test, pid_spans, pid)
            edits = [e for e in edits if not (gs <= e[0] < ge and (e[0], e[1]) in pid_spans)]
            edits.append((gs, ge, f"{indent_of(src, g)}if not ({test}):  # was: return early\n"))
            if (g.end_lineno or g.lineno) < (fn.end_lineno or fn.lineno):
                edits += reindent_edits(src, (g.end_lineno or g.lineno) + 1, fn.end_lineno or fn.lineno, add=unit,
                                        skip=guard_spans)
        for launch in plan:
            edits.append(launch.grid_edit)
            edits.append(add_launch_kwargs(p, launch.call, [(n_rows, launch.rows), (PARAM, str(rows_per))]))
        try:
            return apply_edits(source, edits, what=f"{NAME} on {site}")
        except BadInput as exc:
            raise TransformError(str(exc)) from None
