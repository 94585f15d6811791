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

A second site variant, `KERNEL@online`, is for rows longer than a tile: when the first pass is
a running max (`m = tl.maximum(m, x)`, per lane or `tl.max` per chunk, starting at -inf) and
the next pass is a running sum of `tl.exp(x' - M)` over the same values (x' proved equal to x
by the same value numbering; M = `tl.max(m, axis=0)` or m itself), the two sweeps fuse into
one with a rescaled sum (`s = s * exp(m - m_new) + exp(x - m_new)`, guarded where m_new is
-inf; per-lane sums rescaled to the row max after the loop) - the online normaliser of
softmax, log-softmax and cross-entropy. For norms the same variant fuses a mean pass
(`acc += x`, x a load masked with other=0; `mean = tl.sum(acc, axis=0) / n`) and the next
pass summing `d * d` with `d = tl.where(mask, x' - mean, 0)` (same mask, same values): the
first pass keeps a per-lane count, mean and M2 (Welford), and the squared deviations from
the row mean come out of them (Chan's merge) where the second pass was. One read of the row
fewer; BLOCK stays a knob.

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
    names_read,
    names_stored,
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
ONLINE = "@online"  # the site variant fusing max + exp-sum passes, or mean + variance passes (rows longer than a tile)
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
    numbering: "_Numbering | None" = None


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
        self.keys: dict[int, str] = {}  # id(expression) -> its key, as numbered where it stands

    def new(self) -> str:
        self.fresh += 1
        return f"v{self.fresh}"

    def key(self, node: ast.AST | None, eligible: bool) -> str:
        out = self._key(node, eligible)
        if node is not None:
            self.keys[id(node)] = out
        return out

    def _key(self, node: ast.AST | None, eligible: bool) -> str:
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

    def _analyse(self, p: Parsed, k: JitKernel) -> _Plan | str:
        """The passes and the loads they share, or why the kernel is not rewritten."""
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
        plan = _Plan(kernel=fn.name, loops=top, step=step, extent=stop.id)
        num = plan.numbering = _Numbering(al, k, top)
        for stmt in fn.body:
            num.statement(stmt, True)
        loop_ids = {id(n) for lp in top for n in ast.walk(lp)}
        plan.reuse = {i: pair for i, pair in num.reuse.items() if i in loop_ids}
        if not plan.reuse:
            return "the passes load different addresses (or a store lies between them): nothing to read once"
        return plan

    def _launch_plan(self, p: Parsed, k: JitKernel) -> _Plan | str:
        """`_analyse` plus what the one-tile form needs at the launches."""
        plan = self._analyse(p, k)
        if isinstance(plan, str):
            return plan
        fn, step, stop = k.fn, plan.step, ast.Name(plan.extent)
        if k.autotune is not None:
            return f"{step} is chosen by @triton.autotune; the transform sets it from the row length"
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
            plan = self._launch_plan(p, k)
            if isinstance(plan, str):
                out.append(decline(NAME, name, plan, k.fn.lineno))
                continue
            out.append(applies(NAME, k, f"{len(plan.loops)} passes over the row become one tile of {plan.step} = "
                                        f"next_power_of_2({plan.extent}); {len(plan.reuse)} repeated load(s) read "
                                        f"from registers", {}))
        for name, k in p.kernels.items():  # the online variant, for rows that do not fit one tile
            plan = self._analyse(p, k)
            on = _online(p, k, plan) if isinstance(plan, _Plan) else None
            wf = _welford(p, k, plan) if isinstance(plan, _Plan) else None
            if isinstance(on, _Online):
                out.append(SiteReport(
                    transform=NAME, site=f"{name}{ONLINE}", applies=True, kernel=name, line=on.a.lineno,
                    reason=f"online: the max pass (line {on.a.lineno}) and the exp-sum pass (line {on.b.lineno}) "
                           f"fuse into one sweep with a rescaled running sum; {plan.step} stays a knob"))
            elif isinstance(wf, _Welford):
                out.append(SiteReport(
                    transform=NAME, site=f"{name}{ONLINE}", applies=True, kernel=name, line=wf.a.lineno,
                    reason=f"online: the mean pass (line {wf.a.lineno}) and the variance pass (line {wf.b.lineno}) "
                           f"fuse into one sweep (Welford per lane); {plan.step} stays a knob"))
        return out

    # --- rewrite ----------------------------------------------------------------------------

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        if params:
            raise TransformError(f"{NAME} takes no parameters (got {', '.join(sorted(params))})")
        p, k = parse_for_apply(source, site)
        if site.endswith(ONLINE):
            plan_o = self._analyse(p, k)
            if isinstance(plan_o, str):
                raise TransformError(plan_o)
            on = _online(p, k, plan_o)
            wf = _welford(p, k, plan_o) if isinstance(on, str) else None
            if isinstance(on, str) and isinstance(wf, str):
                raise TransformError(f"online form: {on} (and as a norm: {wf})")
            edits = _apply_online(p, on, p.al.tl_prefix()) if isinstance(on, _Online) else \
                _apply_welford(p, wf, p.al.tl_prefix())  # type: ignore[arg-type]
            try:
                return apply_edits(source, edits, what=f"{NAME} on {site}")
            except BadInput as exc:
                raise TransformError(str(exc)) from None
        if "@" in site:
            raise TransformError(f"{NAME}: unknown site variant {site!r} (KERNEL or KERNEL{ONLINE})")
        plan = self._launch_plan(p, k)
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


# --- the online form: a max pass and an exp-sum pass fused into one sweep -------------------------


@dataclass
class _Online:
    a: ast.For  # the max pass
    b: ast.For  # the exp-sum pass, folded into `a`
    update: ast.Assign  # m = tl.maximum(m, E) in `a`
    m: str
    x: ast.AST  # the value maxed over (E, or the argument of tl.max(E, axis=0))
    scalar: bool  # running scalars (tl.max / tl.sum per chunk) rather than per-lane vectors
    s: str
    big_m: str | None  # vector form: `M = tl.max(m, axis=0)` between the passes (the rescale goes after it)
    big_m_stmt: ast.stmt | None
    s_init: ast.Assign
    move_init: bool  # the sum's init sits between the passes: it moves before the fused sweep


def _neg_inf(node: ast.AST | None, al: TritonAliases) -> bool:
    """-inf written as -float('inf'), float('-inf'), -math.inf, or tl.full(shape, <that>, ...)."""
    if isinstance(node, ast.Call) and al.tl_attr(node.func) == "full":
        value = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "value"), None)
        return _neg_inf(value, al)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = node.operand
        return (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "float"
                and len(v.args) == 1 and isinstance(v.args[0], ast.Constant) and str(v.args[0].value).lower() == "inf"
                ) or (isinstance(v, ast.Attribute) and v.attr == "inf")
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).lower() == "-inf")


def _zero(node: ast.AST | None, al: TritonAliases) -> bool:
    if isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool):
        return True
    return isinstance(node, ast.Call) and al.tl_attr(node.func) == "zeros"


def _axis0(call: ast.Call) -> bool:
    """tl.max/tl.sum(x, axis=0) or (x, 0)."""
    axis = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "axis"), None)
    return isinstance(axis, ast.Constant) and axis.value == 0 and len(call.args) >= 1


def _live_in(stmts: list[ast.stmt]) -> set[str]:
    """Names the statements read before they assign them (straight line; loop bodies once)."""
    live: set[str] = set()
    killed: set[str] = set()
    for st in stmts:
        if isinstance(st, ast.For):
            live |= (names_read(st.iter) - killed)
            live |= (_live_in(st.body) - killed - {st.target.id if isinstance(st.target, ast.Name) else ""})
            continue
        if isinstance(st, ast.AugAssign):
            live |= ({st.target.id} - killed) if isinstance(st.target, ast.Name) else set()
        live |= (names_read(st) - killed)
        if isinstance(st, ast.Assign):
            killed |= names_stored(st)
    return live


def _first_two_passes(p: Parsed, k: JitKernel, plan: _Plan,
                      fused: str) -> tuple[ast.For, ast.For, int, int, list[ast.stmt]] | str:
    """The plan's first two passes (and their body indices and the statements between them) when
    nothing but straight-line code lies between them and neither stores; else why not."""
    al, fn = p.al, k.fn
    a, b = plan.loops[0], plan.loops[1]
    ia, ib = fn.body.index(a), fn.body.index(b)
    between = fn.body[ia + 1:ib]
    if any(isinstance(s, (ast.For, ast.While, ast.If)) for s in between):
        return "control flow between the first two passes"
    for lp in (a, b):
        if any(isinstance(n, ast.Call) and ((al.tl_attr(n.func) or "") == "store"
                                            or (al.tl_attr(n.func) or "").startswith("atomic_"))
               for n in ast.walk(lp)):
            return f"the pass at line {lp.lineno} stores: only {fused} are fused"
    return a, b, ia, ib, between


def _online(p: Parsed, k: JitKernel, plan: _Plan) -> _Online | str:
    """The first max pass followed by an exp-sum pass over the same values, or why not."""
    al, fn = p.al, k.fn
    num = plan.numbering
    assert num is not None
    passes = _first_two_passes(p, k, plan, "a max pass and a sum pass")
    if isinstance(passes, str):
        return passes
    a, b, ia, ib, between = passes
    updates = [s for s in a.body if isinstance(s, ast.Assign) and len(s.targets) == 1
               and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call)
               and al.tl_attr(s.value.func) == "maximum" and len(s.value.args) == 2]
    upd = None
    for s in updates:
        m = s.targets[0].id  # type: ignore[attr-defined]
        args = s.value.args  # type: ignore[attr-defined]
        others = [x for x in args if not (isinstance(x, ast.Name) and x.id == m)]
        if len(others) == 1:
            upd, e = s, others[0]
            break
    if upd is None:
        return "the first pass is not a running max (m = tl.maximum(m, x))"
    m = upd.targets[0].id  # type: ignore[attr-defined]
    scalar = isinstance(e, ast.Call) and al.tl_attr(e.func) == "max" and _axis0(e)
    x = e.args[0] if scalar else e  # type: ignore[attr-defined]
    if names_read(x) & {m}:
        return "the running max feeds the value it maxes over"
    inits = [s for s in fn.body[:ia] if m in names_stored(s)]
    if len(inits) != 1 or not isinstance(inits[0], ast.Assign) or not _neg_inf(inits[0].value, al):
        return f"the running max {m!r} does not start at -inf"
    if sum(1 for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == m) != 2:
        return f"{m!r} is assigned outside its init and its update"
    # the sum pass: s += exp(y - M) (vector) or s += tl.sum(exp(y - M), axis=0) (scalar)
    sums = [s for s in b.body if (isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add))
            or (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and isinstance(s.value, ast.BinOp) and isinstance(s.value.op, ast.Add)
                and any(isinstance(o, ast.Name) and o.id == s.targets[0].id for o in (s.value.left, s.value.right)))]
    if len(sums) != 1:
        return "the second pass is not one running sum"
    su = sums[0]
    if isinstance(su, ast.AugAssign):
        if not isinstance(su.target, ast.Name):
            return "the second pass's sum is not a name"
        s_name, term = su.target.id, su.value
    else:
        s_name = su.targets[0].id if isinstance(su.targets[0], ast.Name) else ""  # type: ignore[union-attr]
        v = su.value
        if isinstance(v.left, ast.Name) and v.left.id == s_name:  # type: ignore[union-attr]
            term = v.right  # type: ignore[union-attr]
        elif isinstance(v.right, ast.Name) and v.right.id == s_name:  # type: ignore[union-attr]
            term = v.left  # type: ignore[union-attr]
        else:
            return "the second pass's sum is not s = s + e"
    if scalar:
        if not (isinstance(term, ast.Call) and al.tl_attr(term.func) == "sum" and _axis0(term)):
            return "running scalar max but the second pass does not sum its chunk (tl.sum(..., axis=0))"
        term = term.args[0]
    if not (isinstance(term, ast.Call) and al.tl_attr(term.func) == "exp" and len(term.args) == 1
            and isinstance(term.args[0], ast.BinOp) and isinstance(term.args[0].op, ast.Sub)
            and isinstance(term.args[0].right, ast.Name)):
        return "the second pass does not sum tl.exp(x - max)"
    y, big = term.args[0].left, term.args[0].right.id
    big_m, big_stmt = None, None
    if scalar:
        if big != m:
            return f"the second pass subtracts {big!r}, not the running max {m!r}"
    else:
        defs = [s for s in between if big in names_stored(s)]
        if not (len(defs) == 1 and isinstance(defs[0], ast.Assign) and isinstance(defs[0].value, ast.Call)
                and al.tl_attr(defs[0].value.func) == "max" and _axis0(defs[0].value)
                and isinstance(defs[0].value.args[0], ast.Name) and defs[0].value.args[0].id == m):
            return f"the second pass subtracts {big!r}, which is not tl.max({m}, axis=0) of the first pass"
        big_m, big_stmt = big, defs[0]
    if num.keys.get(id(x)) is None or num.keys.get(id(x)) != num.keys.get(id(y)):
        return "the second pass exponentiates another value than the first pass maxes"
    # the sum pass must not depend on anything computed between the passes but M, nor leave values behind
    if sum(1 for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == s_name) != 2:
        return f"{s_name!r} is assigned outside its init and its update"
    s_inits = [s for s in fn.body[:ib] if s_name in names_stored(s)]
    if len(s_inits) != 1 or not isinstance(s_inits[0], ast.Assign) or not _zero(s_inits[0].value, al):
        return f"the running sum {s_name!r} does not start at zero"
    between_defs = set().union(*(names_stored(s) for s in between)) if between else set()
    b_live = _live_in(b.body) - {s_name, big, b.target.id}  # type: ignore[union-attr]
    if b_live & (between_defs | set().union(*(names_stored(s) for s in a.body))):
        return "the second pass reads values the first pass or the code between them computes"
    b_local = set().union(*(names_stored(s) for s in b.body)) - {s_name}
    if _live_in(fn.body[ib + 1:]) & b_local:
        return "values of the second pass's last iteration are used after it"
    if names_read(s_inits[0].value) & (between_defs | {m, big}):
        return "the sum's initial value depends on the first pass"
    return _Online(a=a, b=b, update=upd, m=m, x=x, scalar=scalar, s=s_name, big_m=big_m, big_m_stmt=big_stmt,
                   s_init=s_inits[0], move_init=s_inits[0] in between)


def _apply_online(p: Parsed, on: _Online, tl: str) -> list[Edit]:
    from kernelopt.optimize.transforms.triton_edit import line_span

    src = p.src
    taken = used_names(src.tree)
    mn = fresh(taken, f"{on.m}_new")
    ind = indent_of(src, on.update)
    x = segment(src, on.x)
    update = segment(src, on.update.value)
    hoist = ""
    if not isinstance(on.x, ast.Name):  # name the value once: the max and the sum both read it
        xv = fresh(taken, "chunk")
        hoist = f"{xv} = {x}\n{ind}"
        data = src.data
        update = (data[src.start(on.update.value):src.start(on.x)] + xv.encode()
                  + data[src.end(on.x):src.end(on.update.value)]).decode("utf-8")
        x = xv
    inf = 'float("inf")'
    if on.scalar:
        add = f"{tl}.sum({tl}.exp({x} - {mn}), axis=0)"
    else:
        add = f"{tl}.where({mn} == -{inf}, 0.0, {tl}.exp({x} - {mn}))"
    rescale = f"{tl}.where({mn} == -{inf}, 1.0, {tl}.exp({on.m} - {mn}))"
    lines = (f"{hoist}{mn} = {update}  # online: max and rescaled sum in one sweep\n"
             f"{ind}{on.s} = {on.s} * {rescale} + {add}\n"
             f"{ind}{on.m} = {mn}")
    edits: list[Edit] = [(src.start(on.update), src.end(on.update), lines)]
    start, end = line_span(src, on.b)
    edits.append((start, end, ""))  # the sum pass is folded into the max pass
    if on.move_init:
        s0, e0 = line_span(src, on.s_init)
        edits.append((s0, e0, ""))
        at = src.line_starts[on.a.lineno - 1]
        edits.append((at, at, f"{indent_of(src, on.a)}{segment(src, on.s_init)}\n"))
    if on.big_m_stmt is not None:  # per-lane sums are relative to per-lane maxima: bring them to M
        end_m = line_span(src, on.big_m_stmt)[1]
        edits.append((end_m, end_m, f"{indent_of(src, on.big_m_stmt)}{on.s} = {on.s} * {tl}.exp({on.m} - {on.big_m})\n"))
    return edits


# --- the online form for norms: a mean pass and a squared-deviation pass fused (Welford) ----------


@dataclass
class _Welford:
    a: ast.For  # acc += x (the mean pass)
    b: ast.For  # sq += d * d with d = where(mask, x - mean, 0) (the variance pass), folded into `a`
    acc_update: ast.stmt
    acc: str
    x: ast.AST
    mask: ast.AST
    mean: str
    sq: str


def _sum_term(stmt: ast.stmt) -> tuple[str, ast.AST] | None:
    """(name, e) for `name += e` or `name = name + e`."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add)):
        name = stmt.targets[0].id
        if isinstance(stmt.value.left, ast.Name) and stmt.value.left.id == name:
            return name, stmt.value.right
        if isinstance(stmt.value.right, ast.Name) and stmt.value.right.id == name:
            return name, stmt.value.left
    return None


def _welford(p: Parsed, k: JitKernel, plan: _Plan) -> _Welford | str:
    """The first pass summing the row and the next summing squared deviations from its mean, or why not."""
    al, fn = p.al, k.fn
    num = plan.numbering
    assert num is not None
    passes = _first_two_passes(p, k, plan, "a mean pass and a variance pass")
    if isinstance(passes, str):
        return passes
    a, b, ia, ib, between = passes
    sums_a = [(s, t) for s in a.body if (t := _sum_term(s)) is not None]
    if len(sums_a) != 1:
        return "the first pass is not one running sum"
    acc_stmt, (acc, x) = sums_a[0]
    local_a = {stmt.targets[0].id: stmt.value for stmt in a.body if isinstance(stmt, ast.Assign)
               and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)}
    load = x
    while True:  # the summed value is a load (through a name and casts): its mask says which lanes count
        if isinstance(load, ast.Name) and load.id in local_a:
            load = local_a[load.id]
        elif isinstance(load, ast.Call) and isinstance(load.func, ast.Attribute) and load.func.attr == "to" \
                and al.tl_attr(load.func) is None:
            load = load.func.value
        else:
            break
    if not (isinstance(load, ast.Call) and al.tl_attr(load.func) == "load"):
        return "the first pass does not sum loaded values"
    _, mask, other = _load_parts(load)
    if mask is None or not (isinstance(other, ast.Constant) and other.value == 0):
        return "the first pass's load is not masked with other=0"
    inits = [s for s in fn.body[:ia] if acc in names_stored(s)]
    if len(inits) != 1 or not isinstance(inits[0], ast.Assign) or not (
            isinstance(inits[0].value, ast.Call) and al.tl_attr(inits[0].value.func) == "zeros"):
        return f"the running sum {acc!r} is not a tl.zeros vector"
    means = [s for s in between if isinstance(s, ast.Assign) and len(s.targets) == 1
             and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.BinOp)
             and isinstance(s.value.op, ast.Div) and isinstance(s.value.left, ast.Call)
             and al.tl_attr(s.value.left.func) == "sum" and _axis0(s.value.left)
             and isinstance(s.value.left.args[0], ast.Name) and s.value.left.args[0].id == acc
             and isinstance(s.value.right, ast.Name) and s.value.right.id == plan.extent]
    if len(means) != 1:
        return f"no `mean = tl.sum({acc}, axis=0) / {plan.extent}` between the passes"
    mean = means[0].targets[0].id  # type: ignore[attr-defined]
    sums_b = [(s, t) for s in b.body if (t := _sum_term(s)) is not None]
    if len(sums_b) != 1:
        return "the second pass is not one running sum"
    sq_stmt, (sq, term) = sums_b[0]
    local_b = {stmt.targets[0].id: stmt.value for stmt in b.body if isinstance(stmt, ast.Assign)
               and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)}
    if not (isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult)
            and ast.dump(term.left) == ast.dump(term.right)):
        return "the second pass does not sum a square (d * d)"
    d = term.left
    if isinstance(d, ast.Name) and d.id in local_b:
        d = local_b[d.id]
    if not (isinstance(d, ast.Call) and al.tl_attr(d.func) == "where" and len(d.args) == 3
            and isinstance(d.args[2], ast.Constant) and d.args[2].value == 0
            and isinstance(d.args[1], ast.BinOp) and isinstance(d.args[1].op, ast.Sub)
            and isinstance(d.args[1].right, ast.Name) and d.args[1].right.id == mean):
        return f"the squared value is not tl.where(mask, x - {mean}, 0.0)"
    if num.keys.get(id(d.args[0])) != num.keys.get(id(mask)):
        return "the second pass masks other lanes than the first pass loads"
    if num.keys.get(id(d.args[1].left)) is None or num.keys.get(id(d.args[1].left)) != num.keys.get(id(x)):
        return "the second pass squares deviations of another value than the first pass sums"
    sq_inits = [s for s in fn.body[:ib] if sq in names_stored(s)]
    if len(sq_inits) != 1 or not isinstance(sq_inits[0], ast.Assign) or not (
            isinstance(sq_inits[0].value, ast.Call) and al.tl_attr(sq_inits[0].value.func) == "zeros"):
        return f"the running sum {sq!r} is not a tl.zeros vector"
    for name in (acc, sq):
        if sum(1 for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name) != 2:
            return f"{name!r} is assigned outside its init and its update"
    b_local = set().union(*(names_stored(s) for s in b.body)) - {sq}
    if _live_in(fn.body[ib + 1:]) & b_local:
        return "values of the second pass's last iteration are used after it"
    return _Welford(a=a, b=b, acc_update=acc_stmt, acc=acc, x=x, mask=mask, mean=mean, sq=sq)


def _apply_welford(p: Parsed, w: _Welford, tl: str) -> list[Edit]:
    """Per lane: count, running mean and M2 (Welford) in the first pass; after the mean, the
    squared deviations from it are M2 + count * (lane mean - mean)^2 (Chan's merge), summed
    by the kernel's own code as before."""
    from kernelopt.optimize.transforms.triton_edit import line_span

    src = p.src
    taken = used_names(src.tree)
    cnt, wm, m2 = fresh(taken, "w_count"), fresh(taken, "w_mean"), fresh(taken, "w_m2")
    xv, delta, valid = fresh(taken, "w_x"), fresh(taken, "w_delta"), fresh(taken, "w_valid")
    ind_a, ind = indent_of(src, w.a), indent_of(src, w.acc_update)
    x = segment(src, w.x)
    at_a = src.line_starts[w.a.lineno - 1]
    end_upd = line_span(src, w.acc_update)[1]
    start_b, end_b = line_span(src, w.b)
    hoist: list[Edit] = []
    if not isinstance(w.x, ast.Name):  # name the summed value once: the sum and Welford both read it
        name = fresh(taken, "chunk")
        at_u = src.line_starts[w.acc_update.lineno - 1]
        hoist = [(at_u, at_u, f"{ind}{name} = {x}\n"), (src.start(w.x), src.end(w.x), name)]
        x = name
    return hoist + [
        (at_a, at_a, f"{ind_a}{cnt} = {tl}.zeros({w.acc}.shape, dtype={tl}.float32)  # Welford per lane: count, mean, M2\n"
                     f"{ind_a}{wm} = {tl}.zeros({w.acc}.shape, dtype={tl}.float32)\n"
                     f"{ind_a}{m2} = {tl}.zeros({w.acc}.shape, dtype={tl}.float32)\n"),
        (end_upd, end_upd, f"{ind}{valid} = ({segment(src, w.mask)}).to({tl}.float32)\n"
                           f"{ind}{xv} = ({x}).to({tl}.float32)\n"
                           f"{ind}{cnt} += {valid}\n"
                           f"{ind}{delta} = {xv} - {wm}\n"
                           f"{ind}{wm} += {valid} * {delta} / {tl}.maximum({cnt}, 1.0)\n"
                           f"{ind}{m2} += {valid} * {delta} * ({xv} - {wm})\n"),
        (start_b, end_b, f"{indent_of(src, w.b)}{w.sq} = {m2} + {cnt} * ({wm} - {w.mean}) * ({wm} - {w.mean})"
                         f"  # the variance pass, from the first pass's Welford state\n"),
    ]
