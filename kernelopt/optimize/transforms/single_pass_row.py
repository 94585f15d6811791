"""single_pass_row: a row kernel that reads its row in several block loops reads it once.

The shape it rewrites (softmax's max / sum / write passes, a norm's statistics pass then
its write pass, cross-entropy's max and sum passes):

    for off in range(0, n, BLOCK):      # pass 1
        ... tl.load(x + base + off + tl.arange(0, BLOCK), mask=...) ...
    for off in range(0, n, BLOCK):      # pass 2: the same addresses again
        ...

When BLOCK >= n each loop runs exactly once with off = 0, so the loops unroll to straight
code with `off = 0` - the same computation, step for step. A load in a later pass whose
address and mask are provably the same values as an earlier pass's load (value numbering
over the straight code, no store or atomic between them) then reuses that load's registers
instead of reading memory again (`tl.where(mask, row, other)` when only `other` differs).
Every launch sets BLOCK = triton.next_power_of_2(n) from the runtime row length, so the
row always fits its tile: the rewrite is exact for every n >= 1.

It declines, with the reason, where that proof does not hold: loops over different extents
or steps, a start other than 0, break/continue/return in a pass, a loop variable assigned
in its body, block loops nested in other control flow, a row length that is not a kernel
argument, a BLOCK the autotuner or the grid depends on, and passes that load different
addresses (nothing would be read once).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    applies,
    decline,
    enclosing_stmt,
    fresh,
    launch_args,
    parse_for_apply,
    parse_for_sites,
    reindent_edits,
    triton_module,
    used_names,
)
from kernelopt.source import (
    Edit,
    JitKernel,
    TritonAliases,
    apply_edits,
    block_loop,
    grid_names,
    indent_of,
    segment,
)

NAME = "single_pass_row"
_BARRIERS = {"store", "debug_barrier"}  # and every atomic_*: memory may change after them
_UNSAFE_LOAD_KW = {"volatile", "boundary_check", "padding_option"}
_PURE_BUILTINS = {"float", "int", "min", "max", "abs", "bool"}


@dataclass
class _Plan:
    kernel: str
    loops: list[ast.For]
    step: str  # the constexpr BLOCK parameter
    extent: str  # the kernel parameter the loops run to (the row length)
    reuse: dict[int, tuple[ast.Call, ast.Call]] = field(default_factory=dict)  # id(later load) -> (later, provider)
    launches: list[tuple[ast.Call, ast.AST, ast.AST]] = field(default_factory=list)  # (launch, BLOCK, n)


def _load_parts(call: ast.Call) -> tuple[ast.AST | None, ast.AST | None, ast.AST | None]:
    """(pointer, mask, other) of a tl.load call."""
    ptr = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "pointer"), None)
    mask = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mask"), None)
    other = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "other"), None)
    return ptr, mask, other


class _Numbering:
    """Value numbering over the kernel body with its block loops unrolled to one iteration.

    Two expressions get the same key only when they compute the same value: names map to
    the key of the expression last assigned to them at the top level, and anything assigned
    inside other control flow, by augmented assignment or by unpacking gets a fresh key."""

    def __init__(self, al: TritonAliases, k: JitKernel, loops: list[ast.For]) -> None:
        self.al = al
        self.env: dict[str, str] = {p: f"arg:{p}" for p in k.params}
        self.loops = {id(lp) for lp in loops}
        self.fresh = 0
        self.available: dict[tuple[str, str], ast.Call] = {}
        self.provider_key: dict[int, str] = {}
        self.reuse: dict[int, tuple[ast.Call, ast.Call]] = {}

    def new(self) -> str:
        self.fresh += 1
        return f"v{self.fresh}"

    def key(self, node: ast.AST | None, eligible: bool) -> str:
        if node is None:
            return "none"
        if isinstance(node, ast.Name):
            return self.env.get(node.id, f"g:{node.id}")
        if isinstance(node, ast.Constant):
            return f"c:{node.value!r}"
        if isinstance(node, ast.Call) and self.al.tl_attr(node.func) == "load":
            return self._load(node, eligible)
        if isinstance(node, (ast.IfExp, ast.BoolOp, ast.Lambda, ast.NamedExpr)):
            eligible = False  # lazily evaluated: a load in there may not run
        if isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Attribute)  # tl.*, triton.*, x.to(...): pure
                or (isinstance(node.func, ast.Name) and node.func.id in _PURE_BUILTINS)):
            for child in ast.iter_child_nodes(node):
                self.key(child, False)
            return self.new()  # a call we do not know (a helper function): a value of its own
        parts = [type(node).__name__]
        for fname, value in ast.iter_fields(node):
            if fname in ("ctx", "type_comment"):
                continue
            if isinstance(value, list):
                parts.append(f"{fname}=[" + ",".join(
                    self.key(v, eligible) if isinstance(v, ast.AST) else repr(v) for v in value) + "]")
            elif isinstance(value, ast.AST):
                parts.append(f"{fname}=" + self.key(value, eligible))
            else:
                parts.append(f"{fname}={value!r}")
        return "(" + " ".join(parts) + ")"

    def _load(self, call: ast.Call, eligible: bool) -> str:
        ptr, mask, other = _load_parts(call)
        kws = {k.arg for k in call.keywords}
        kp, km = self.key(ptr, eligible), self.key(mask, eligible)
        self.key(other, eligible)
        if kws & _UNSAFE_LOAD_KW or ptr is None:
            return self.new()
        k = (kp, km)
        if k in self.available:
            provider = self.available[k]
            self.reuse[id(call)] = (call, provider)
            return self.provider_key[id(provider)]
        token = self.new()
        if eligible:
            self.available[k] = call
            self.provider_key[id(call)] = token
        return token

    def statement(self, stmt: ast.stmt, top: bool) -> None:
        """Number one statement; `top` when it runs unconditionally, once (kernel or pass body)."""
        if isinstance(stmt, ast.For) and id(stmt) in self.loops:
            self.env[stmt.target.id] = "c:0"  # type: ignore[union-attr]
            for s in stmt.body:
                self.statement(s, True)
            return
        barrier = any(isinstance(n, ast.Call) and ((self.al.tl_attr(n.func) or "") in _BARRIERS
                                                   or (self.al.tl_attr(n.func) or "").startswith("atomic_")
                                                   or (isinstance(n.func, ast.Name) and n.func.id not in _PURE_BUILTINS
                                                       and n.func.id != "range"))
                      for n in ast.walk(stmt))
        if barrier and not isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
            self.available.clear()  # a store inside control flow: no load in there may reuse one before it
        if top and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = self.key(stmt.value, True)
            self.env[stmt.targets[0].id] = value
        else:
            for node in ast.iter_child_nodes(stmt):
                if isinstance(node, ast.expr):
                    self.key(node, top and not isinstance(stmt, (ast.If, ast.While, ast.For)))
            for sub in ast.walk(stmt):
                if sub is stmt:
                    continue
                if isinstance(sub, ast.stmt):  # nested control flow: number its loads (reuse only)
                    for node in ast.iter_child_nodes(sub):
                        if isinstance(node, ast.expr):
                            self.key(node, False)
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    self.env[sub.id] = self.new()
        if barrier:  # memory may have changed (a store, an atomic, a helper that may store)
            self.available.clear()


class SinglePassRow:
    name = NAME
    backend = "triton"
    summary = "unroll a row kernel's block loops over the row into one tile (BLOCK = next_power_of_2(n)) and load the row once"
    requires = ["triton", "multi_pass"]
    params: list[TransformParam] = []

    # --- analysis ---------------------------------------------------------------------------

    def _plan(self, p: Parsed, k: JitKernel) -> _Plan | str:
        src, al, fn = p.src, p.al, k.fn
        every = [n for n in ast.walk(fn) if block_loop(n, al, k) is not None]
        top = [s for s in fn.body if block_loop(s, al, k) is not None]
        if not every:
            return ("no block loop over a row (range(0, n, BLOCK) or range(cdiv(n, BLOCK))): "
                    "it already reads its data once")
        if len(every) != len(top):
            return "a block loop is nested in other control flow or in another loop; cannot unroll it safely"
        if len(top) < 2:
            return "one block loop: it reads its row once already"
        step, stop, _ = block_loop(top[0], al, k)  # type: ignore[misc]
        for lp in top:
            it = lp.iter  # type: ignore[attr-defined]
            lp_step, lp_stop, start = block_loop(lp, al, k)  # type: ignore[misc]
            if not (isinstance(start, ast.Constant) and start.value == 0):
                return f"the loop at line {lp.lineno} does not start at 0"
            if lp_step != step:
                return f"the loops step by different block sizes ({step}, {lp_step})"
            if ast.dump(lp_stop) != ast.dump(stop):
                return f"the loops run over different extents ({segment(src, stop)}, {segment(src, lp_stop)})"
            if it.keywords:
                return f"the loop at line {lp.lineno} passes loop options ({', '.join(kw.arg or '**' for kw in it.keywords)})"
            if not isinstance(lp.target, ast.Name):
                return f"the loop at line {lp.lineno} unpacks its variable"
            if lp.orelse:
                return f"the loop at line {lp.lineno} has an else clause"
            if lp.body[0].lineno == lp.lineno:
                return f"the loop at line {lp.lineno} has its body on the header line"
            for n in ast.walk(lp):
                if isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom)):
                    return f"the loop at line {lp.lineno} has {type(n).__name__.lower()}"
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == lp.target.id and n is not lp.target:
                    return f"the loop at line {lp.lineno} assigns its variable {lp.target.id!r} in its body"
        if not (isinstance(stop, ast.Name) and stop.id in k.params and stop.id not in k.constexprs):
            return f"the row length {segment(src, stop)!r} is not a kernel argument the launch passes"
        if any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in (stop.id, step)
               for n in ast.walk(fn)):
            return f"the kernel reassigns {stop.id!r} or {step!r}"
        if "make_block_ptr" in {al.tl_attr(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}:
            return "block pointers (tl.make_block_ptr): their loads are not compared"
        if k.autotune is not None:
            return f"{step} is chosen by @triton.autotune; the transform sets it from the row length"
        plan = _Plan(kernel=fn.name, loops=top, step=step, extent=stop.id)
        num = _Numbering(al, k, top)
        for stmt in fn.body:
            num.statement(stmt, True)
        loop_ids = {id(n) for lp in top for n in ast.walk(lp)}
        plan.reuse = {i: pair for i, pair in num.reuse.items() if i in loop_ids}
        if not plan.reuse:
            return "the passes load different addresses (or a store lies between them): nothing to read once"
        launches = p.launches.get(fn.name, [])
        if not launches:
            return f"no launch of {fn.name} in this file to set {step} from the row length"
        for call in launches:
            passed = launch_args(k, call)
            if passed is None:
                return f"a launch at line {call.lineno} passes *args or **kwargs"
            n_expr, b_expr = passed.get(stop.id), passed.get(step)
            if n_expr is None:
                return f"a launch at line {call.lineno} does not pass {stop.id}"
            if b_expr is None:
                return f"a launch at line {call.lineno} does not pass {step}"
            names, meta = grid_names(call.func.slice, p.scopes_at(call))  # type: ignore[attr-defined]
            if step in meta or (isinstance(b_expr, ast.Name) and b_expr.id in names):
                return f"the grid at line {call.lineno} depends on {step}"
            plan.launches.append((call, b_expr, n_expr))
        return plan

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        p = parse_for_sites(NAME, source, path)
        if isinstance(p, list):
            return p
        out = []
        for name, k in p.kernels.items():
            plan = self._plan(p, k)
            if isinstance(plan, str):
                out.append(decline(NAME, name, plan, k.fn.lineno))
                continue
            out.append(applies(NAME, k, f"{len(plan.loops)} passes over the row become one tile of {plan.step} = "
                                        f"next_power_of_2({plan.extent}); {len(plan.reuse)} repeated load(s) read "
                                        f"from registers", {}))
        return out

    # --- rewrite ----------------------------------------------------------------------------

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        if params:
            raise TransformError(f"{NAME} takes no parameters (got {', '.join(sorted(params))})")
        p, k = parse_for_apply(source, site)
        plan = self._plan(p, k)
        if isinstance(plan, str):
            raise TransformError(plan)
        src = p.src
        tl = p.al.tl_prefix()
        taken = used_names(src.tree)
        edits: list[Edit] = []
        replaced: list[tuple[int, int]] = []  # spans of loads replaced by a name (their lines keep their bytes)
        providers: dict[int, str] = {}
        hoists: dict[int, list[str]] = {}  # id(statement) -> lines inserted before it
        stmt_of: dict[int, ast.stmt] = {}
        loop_of_stmt: dict[int, ast.For] = {}
        for lp in plan.loops:
            for s in lp.body:
                loop_of_stmt[id(s)] = lp
        for later, provider in sorted(plan.reuse.values(), key=lambda t: src.start(t[0])):
            if id(provider) not in providers:
                var = fresh(taken, "row")
                providers[id(provider)] = var
                stmt = enclosing_stmt(p, provider)
                assert stmt is not None
                stmt_of[id(stmt)] = stmt
                hoists.setdefault(id(stmt), []).append(f"{var} = {segment(src, provider)}")
                edits.append((src.start(provider), src.end(provider), var))
                replaced.append((src.start(provider), src.end(provider)))
            var = providers[id(provider)]
            _, mask_p, other_p = _load_parts(provider)
            _, mask_l, other_l = _load_parts(later)
            same_other = (other_p is None and other_l is None) or (
                other_p is not None and other_l is not None and ast.dump(other_p) == ast.dump(other_l))
            text = var if mask_l is None or same_other else (
                f"{tl}.where({segment(src, mask_l)}, {var}, {segment(src, other_l) if other_l is not None else '0'})")
            edits.append((src.start(later), src.end(later), text))
            replaced.append((src.start(later), src.end(later)))
        for sid, lines in hoists.items():
            stmt = stmt_of[sid]
            lp = loop_of_stmt.get(sid)
            indent = indent_of(src, lp) if lp is not None else indent_of(src, stmt)
            at = src.line_starts[stmt.lineno - 1]
            edits.append((at, at, "".join(f"{indent}{line}\n" for line in lines)))
        for lp in plan.loops:
            outer, inner = indent_of(src, lp), indent_of(src, lp.body[0])
            if not inner.startswith(outer) or len(inner) <= len(outer):
                raise TransformError(f"the loop at line {lp.lineno} is indented in a way this rewrite does not follow")
            body_start = src.line_starts[lp.body[0].lineno - 1]
            edits.append((src.start(lp), body_start, f"{lp.target.id} = 0  # one tile covers the row\n"))  # type: ignore[union-attr]
            edits += reindent_edits(src, lp.body[0].lineno, lp.end_lineno or lp.lineno, keep=outer,
                                    remove=inner[len(outer):], skip=replaced)
        triton, header = triton_module(p)
        for call, b_expr, n_expr in plan.launches:
            edits.append((src.start(b_expr), src.end(b_expr), f"{triton}.next_power_of_2({segment(src, n_expr)})"))
        try:
            return apply_edits(source, header + edits, what=f"{NAME} on {site}")
        except BadInput as exc:  # overlapping rewrites (a load inside a load): not this site
            raise TransformError(str(exc)) from None
