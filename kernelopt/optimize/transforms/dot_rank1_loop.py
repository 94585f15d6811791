"""dot_rank1_loop: a loop of rank-1 updates becomes a loop of `tl.dot` over BLOCK_K-wide tiles.

A scalar loop that accumulates outer products of two vector loads,

    for k in range(K0, K1):
        a = tl.load(A + f(k), mask=ma)          # (M, 1) or (M,) used as a[:, None]
        b = tl.load(B + g(k), mask=mb)          # (N,) or (1, N)
        acc += a[:, None] * b[None, :]           # or `a * b` of shapes (M, 1) and (N,)

runs on the CUDA cores one FMA per product. When f and g are affine in k (the address moves
by a stride df, dg that does not depend on k per step), the loop can step by BLOCK_K, load an
(M, BLOCK_K) tile of a and a (BLOCK_K, N) tile of b, and accumulate one `tl.dot` of them
(tensor cores):

    for k in range(K0, K1, BLOCK_K):
        k_blk = k + tl.arange(0, BLOCK_K)
        a = tl.load(A + f(k) + k_blk_off[None, :] * df, mask=tl.where(ma, k_blk[None, :] < K1, False), other=0.0)
        b = tl.load(B + g(k) + k_blk_off[:, None] * dg, mask=tl.where(mb, k_blk[:, None] < K1, False), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")

The K loop may hold other loops around the update (a convolution's tap loops inside the
input-channel loop: implicit GEMM with K blocked over input channels per tap); the loop
chosen is the outermost enclosing loop for which the rewrite is exact. Masks that do not
depend on k (a convolution's padding, the M/N tails) are kept element-wise in the tiles; the
K tail is masked with zeros on both operands. Each product a[m, k] * b[k, n] is summed
once, as before, in a different order (tl.dot's).

input_precision defaults to "ieee" so fp32 inputs keep fp32 products (as dot_inner_product);
"tf32" trades precision for speed. tl.dot needs M, N, K >= 16: BLOCK_K's domain starts at
16, a tile size of the accumulator written as a literal below 16 declines, and a constexpr
tile size the launch passes as a literal below 16 is raised to 16 (after the rewrite the
kernel calls tl.dot, so the knob discovery gives its tile knobs domains >= 16).

It declines, with a reason, a kernel where the update is not a rank-1 outer product of two
loads, a load address is not affine in k (or its stride along k is not a scalar), a mask
depends on k, `other=` is not zero, the loop carries state besides the accumulator (a
pointer advanced per iteration), stores, branches, or leaves a value it computes read after it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.triton_edit import (
    Parsed,
    add_params,
    call_arg,
    constexpr_annotation,
    fresh,
    kernel_sites,
    launch_args,
    names_read,
    names_stored,
    parse_for_apply,
    refuse_unknown,
    text,
    used_names,
)
from kernelopt.source import Edit, JitKernel, apply_edits, indent_of, resolve_literal

NAME = "dot_rank1_loop"
PARAM = "BLOCK_K"
DOMAIN: list[ParamValue] = [16, 32, 64]
DEFAULT = 16
PRECISIONS = ["ieee", "tf32", "tf32x3"]
DOT_MIN = 16

# shape tags: S scalar, V 1-D, C (X, 1), R (1, X), F a full 2-D tile, U unknown
_ELEMENTWISE = frozenset({
    "where", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "maximum", "minimum", "fma", "cdiv",
    "load", "multiple_of", "max_contiguous", "cast", "sigmoid", "erf", "floor", "ceil", "fdiv",
})
_SIDE_EFFECTS = frozenset({"store", "debug_barrier", "device_print", "device_assert", "static_print",
                           "static_assert"})


def _paren(t: str) -> str:
    return t if t.isidentifier() or t.isdigit() else f"({t})"


class _Decline(Exception):
    """The one-line reason this kernel's loop cannot be rewritten."""


def _combine(*tags: str) -> str:
    ts = {t for t in tags if t != "S"}
    if not ts:
        return "S"
    if "U" in ts:
        return "U"
    if "F" in ts:
        return "F"
    if ts == {"V"}:
        return "V"
    if ts <= {"V", "R"}:
        return "R"
    if ts == {"C"}:
        return "C"
    return "F"  # C with V or R


class _Shapes:
    """A coarse shape tag for every name of a kernel (the union over its bindings)."""

    def __init__(self, p: Parsed, k: JitKernel) -> None:
        self.p = p
        self.tags: dict[str, str] = {}
        binds: list[tuple[ast.AST, ast.AST]] = []
        for n in ast.walk(k.fn):
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    binds.append((t, n.value))
            elif isinstance(n, ast.For):
                binds.append((n.target, ast.Constant(0)))
        for _ in range(8):
            changed = False
            for t, v in binds:
                tag = self.of(v)
                for name in names_stored(t):
                    new = _combine(self.tags.get(name, "S"), tag) if name in self.tags else tag
                    if isinstance(t, (ast.Tuple, ast.List)):
                        new = "U"
                    if self.tags.get(name) != new:
                        self.tags[name] = new
                        changed = True
            if not changed:
                break

    def of(self, node: ast.AST) -> str:
        al = self.p.al
        if isinstance(node, ast.Constant):
            return "S"
        if isinstance(node, ast.Name):
            return self.tags.get(node.id, "S")
        if isinstance(node, (ast.BinOp,)):
            return _combine(self.of(node.left), self.of(node.right))
        if isinstance(node, ast.UnaryOp):
            return self.of(node.operand)
        if isinstance(node, ast.BoolOp):
            return _combine(*(self.of(v) for v in node.values))
        if isinstance(node, ast.Compare):
            return _combine(self.of(node.left), *(self.of(c) for c in node.comparators))
        if isinstance(node, ast.IfExp):
            return _combine(self.of(node.test), self.of(node.body), self.of(node.orelse))
        if isinstance(node, ast.Subscript):
            inner = self.of(node.value)
            s = node.slice
            if inner == "V" and isinstance(s, ast.Tuple) and len(s.elts) == 2:
                kinds = ["N" if isinstance(e, ast.Constant) and e.value is None else
                         ":" if isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None
                         else "?" for e in s.elts]
                if kinds == [":", "N"]:
                    return "C"
                if kinds == ["N", ":"]:
                    return "R"
            return "U"
        if isinstance(node, ast.Attribute):
            return "S" if node.attr in ("dtype", "element_ty") else self.of(node.value)
        if isinstance(node, ast.Call):
            name = al.tl_attr(node.func)
            if name in ("program_id", "num_programs", "cdiv") and all(self.of(a) == "S" for a in node.args):
                return "S"
            if name == "arange":
                return "V"
            if name in ("zeros", "full"):
                shape = call_arg(node, 0, "shape")
                if isinstance(shape, (ast.Tuple, ast.List)):
                    return {1: "V", 2: "F"}.get(len(shape.elts), "U")
                return "U"
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and al.tl_attr(node.func) is None:
                return self.of(node.func.value)
            if name in _ELEMENTWISE:
                return _combine(*(self.of(a) for a in [*node.args, *(kw.value for kw in node.keywords)]))
            if isinstance(node.func, ast.Name) and node.func.id in ("min", "max") or name is None and isinstance(
                    node.func, ast.Name) and node.func.id == "int":
                return _combine(*(self.of(a) for a in node.args))
            return "U"
        return "U"


@dataclass
class _Operand:
    load: ast.Call  # the tl.load call
    side: str  # 'M' (rows of acc) or 'N' (columns)
    expand: bool  # the load is 1-D and the product expands it ([:, None] for M, [None, :] for N)
    node: ast.AST  # the operand in the product, without its [:, None] / [None, :]
    ptr: ast.AST
    mask: ast.AST | None
    stride: str  # d(address)/dk, a scalar expression


@dataclass
class _Plan:
    loop: ast.For
    var: str
    end: ast.AST
    acc: str
    product: ast.BinOp
    ops: tuple[_Operand, _Operand]  # (M side, N side)
    dims: tuple[ast.AST, ast.AST]  # acc's tl.zeros shape
    shapes: _Shapes


def _loads(p: Parsed, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and p.al.tl_attr(node.func) == "load"


def _strip_expand(node: ast.AST) -> tuple[ast.AST, str | None]:
    """`v[:, None]` -> (v, 'C'), `v[None, :]` -> (v, 'R'), else (node, None)."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2:
        a, b = node.slice.elts
        full = lambda e: isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None  # noqa: E731
        none = lambda e: isinstance(e, ast.Constant) and e.value is None  # noqa: E731
        if full(a) and none(b):
            return node.value, "C"
        if none(a) and full(b):
            return node.value, "R"
    return node, None


class _Loop:
    """What one candidate K loop binds and reads."""

    def __init__(self, p: Parsed, fn: ast.FunctionDef, loop: ast.For) -> None:
        self.p, self.fn, self.loop = p, fn, loop
        self.var = loop.target.id  # type: ignore[attr-defined]
        self.binds: dict[str, list[ast.AST]] = {}
        self.stmts: dict[str, list[ast.stmt]] = {}
        for n in ast.walk(loop):
            if n is loop:
                continue
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    for name in names_stored(t):
                        self.binds.setdefault(name, []).append(n.value if n.value is not None else n)
                        self.stmts.setdefault(name, []).append(n)
            elif isinstance(n, ast.For):
                for name in names_stored(n.target):
                    self.binds.setdefault(name, []).append(n)
        # names bound in the loop whose value depends on the loop variable
        self.dep = {self.var}
        changed = True
        while changed:
            changed = False
            for name, values in self.binds.items():
                if name not in self.dep and any(names_read(v) & self.dep for v in values if not isinstance(v, ast.For)):
                    self.dep.add(name)
                    changed = True

    def depends(self, node: ast.AST | None) -> bool:
        return node is not None and bool(names_read(node) & self.dep)

    def value_of(self, name: str) -> ast.AST | None:
        values = self.binds.get(name, [])
        if len(values) == 1 and isinstance(self.stmts[name][0], ast.Assign) and len(self.stmts[name][0].targets) == 1 \
                and isinstance(self.stmts[name][0].targets[0], ast.Name):
            return values[0]
        return None

    def stride(self, node: ast.AST, shapes: _Shapes) -> str | None:
        """d(node)/d(var) as source text (None: it does not depend on var); _Decline when not affine."""
        p = self.p
        if not self.depends(node):
            return None
        if isinstance(node, ast.Name):
            if node.id == self.var:
                return "1"
            value = self.value_of(node.id)
            if value is None:
                raise _Decline(f"{node.id} depends on {self.var} and is bound more than once in the loop")
            return self.stride(value, shapes)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            d = self.stride(node.operand, shapes)
            return d if isinstance(node.op, ast.UAdd) or d is None else f"-{_paren(d)}"
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            dl, dr = self.stride(node.left, shapes), self.stride(node.right, shapes)
            if dr is None:
                return dl
            if isinstance(node.op, ast.Sub):
                dr = f"-{_paren(dr)}"
            return dr if dl is None else f"{_paren(dl)} + {_paren(dr)}"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            dl, dr = self.stride(node.left, shapes), self.stride(node.right, shapes)
            if dl is not None and dr is not None:
                raise _Decline(f"`{text(p, node)}` multiplies two values that depend on {self.var}: not affine")
            d, other = (dl, node.right) if dl is not None else (dr, node.left)
            if names_read(other) & set(self.binds):
                raise _Decline(f"the stride along {self.var} in `{text(p, node)}` is computed inside the loop")
            if shapes.of(other) != "S":
                raise _Decline(f"the stride along {self.var} in `{text(p, node)}` is not a scalar")
            return text(p, other) if d == "1" else f"{_paren(d)} * {_paren(text(p, other))}"
        raise _Decline(f"`{text(p, node)}` is not affine in {self.var} (only + - and products with a scalar are)")


def _range_bounds(p: Parsed, loop: ast.For) -> tuple[ast.AST | None, ast.AST] | None:
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords):
        return None
    args = it.args
    if len(args) == 1:
        return None, args[0]
    if len(args) == 2:
        return args[0], args[1]
    if len(args) == 3 and isinstance(args[2], ast.Constant) and args[2].value == 1:
        return args[0], args[1]
    return None


def _acc_dims(p: Parsed, fn: ast.FunctionDef, acc: str, loop: ast.For) -> tuple[ast.AST, ast.AST]:
    starts = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and any(acc in names_stored(t) for t in n.targets)
              and not (loop.lineno <= n.lineno <= (loop.end_lineno or loop.lineno))]
    if len(starts) != 1 or not (isinstance(starts[0].value, ast.Call)
                                and p.al.tl_attr(starts[0].value.func) in ("zeros", "full")):
        raise _Decline(f"{acc} does not start as one tl.zeros/tl.full before the loop")
    call = starts[0].value
    shape = call_arg(call, 0, "shape")
    if not (isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) == 2):
        raise _Decline(f"{acc} is not a 2-D tile written as tl.zeros((M, N), ...) (a 1-D accumulator is no outer "
                       "product: block_program_axis can give it a dimension)")
    for d in shape.elts:
        if isinstance(d, ast.Constant) and isinstance(d.value, int) and d.value < DOT_MIN:
            raise _Decline(f"{acc}'s tile has a dimension of {d.value}: tl.dot needs M, N >= {DOT_MIN}")
    return shape.elts[0], shape.elts[1]


def _plan(p: Parsed, k: JitKernel, loop: ast.For, update: ast.stmt, shapes: _Shapes) -> _Plan:
    """The rewrite of `loop` as the K loop of `update` (an accumulation inside it), or _Decline."""
    fn = k.fn
    if not isinstance(loop.target, ast.Name):
        raise _Decline("the loop variable is not a single name")
    bounds = _range_bounds(p, loop)
    if bounds is None:
        raise _Decline(f"the loop over `{text(p, loop.iter)}` is not range(start, end) with step 1")
    if loop.orelse:
        raise _Decline("the loop has an else clause")
    L = _Loop(p, fn, loop)
    var = L.var
    _, end = bounds
    if names_read(end) & set(L.binds):
        raise _Decline(f"the loop's end `{text(p, end)}` is rebound inside it")
    # the update: acc += P or acc = acc + P
    if isinstance(update, ast.AugAssign):
        acc, value = update.target.id, update.value  # type: ignore[attr-defined]
    else:
        acc = update.targets[0].id  # type: ignore[attr-defined]
        value = update.value.right if isinstance(update.value, ast.BinOp) and isinstance(
            update.value.left, ast.Name) and update.value.left.id == acc else update.value.left  # type: ignore[attr-defined]
    if isinstance(value, ast.Name) and L.value_of(value.id) is not None:
        value = L.value_of(value.id)
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult)):
        raise _Decline(f"the update of {acc} at line {update.lineno} is not a product of two loads")
    # side effects, control flow, carried state
    for n in ast.walk(loop):
        if isinstance(n, (ast.If, ast.While, ast.Break, ast.Continue, ast.Return, ast.IfExp)):
            raise _Decline(f"the loop branches (`{type(n).__name__.lower()}` at line {n.lineno})")
        if isinstance(n, ast.Call):
            name = p.al.tl_attr(n.func)
            if name in _SIDE_EFFECTS or (name or "").startswith("atomic"):
                raise _Decline(f"the loop has side effects (tl.{name} at line {n.lineno})")
        if isinstance(n, ast.AugAssign) and n is not update:
            raise _Decline(f"the loop carries state besides {acc}: `{text(p, n)}` at line {n.lineno}")
        if isinstance(n, ast.For) and n is not loop and L.depends(n.iter):
            raise _Decline(f"the inner loop over `{text(p, n.iter)}` depends on {var}")
    outside = {name for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For))
               and not (loop.lineno <= n.lineno <= (loop.end_lineno or loop.lineno))
               for name in names_stored(n.targets[0] if isinstance(n, ast.Assign) and len(n.targets) == 1
                                        else n.target if not isinstance(n, ast.Assign) else ast.Tuple(n.targets))}
    after = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
             and n.lineno > (loop.end_lineno or loop.lineno)}
    for name in sorted(set(L.binds) - {acc}):
        if name in outside and name != var:
            raise _Decline(f"the loop carries state besides {acc}: {name} is bound before it and rebound inside")
        if name in after:
            raise _Decline(f"{name}, computed in the loop, is read after it")
    if any(isinstance(n, ast.Name) and n.id == acc and isinstance(n.ctx, ast.Load) for n in ast.walk(loop)
           if not (update.lineno <= getattr(n, "lineno", 0) <= (update.end_lineno or update.lineno))):
        raise _Decline(f"{acc} is read inside the loop besides its update")
    dims = _acc_dims(p, fn, acc, loop)
    if shapes.tags.get(acc) != "F":
        raise _Decline(f"{acc} is not a 2-D tile")
    # the two operands
    ops: dict[str, _Operand] = {}
    loaded_names: list[str] = []
    for side_node in (value.left, value.right):
        inner, exp = _strip_expand(side_node)
        load = inner
        if isinstance(inner, ast.Name):
            v = L.value_of(inner.id)
            if v is None:
                raise _Decline(f"`{text(p, side_node)}` is not loaded once in the loop")
            loaded_names.append(inner.id)
            load = v
        if not _loads(p, load):
            raise _Decline(f"`{text(p, side_node)}` in the update of {acc} is not a tl.load")
        assert isinstance(load, ast.Call)
        ptr, mask, other = call_arg(load, 0, "pointer"), call_arg(load, 1, "mask"), call_arg(load, 2, "other")
        if ptr is None or any(kw.arg not in ("pointer", "mask", "other") for kw in load.keywords) or len(load.args) > 3:
            raise _Decline(f"tl.load at line {load.lineno} takes arguments this rewrite does not read")
        if other is not None and not (isinstance(other, ast.Constant) and other.value in (0, 0.0)
                                      and not isinstance(other.value, bool)):
            raise _Decline(f"tl.load at line {load.lineno} fills masked lanes with {text(p, other)}, not 0")
        if L.depends(mask):
            raise _Decline(f"the mask of tl.load at line {load.lineno} depends on {var}")
        tag = shapes.of(load)
        if exp == "C" and tag == "V":
            side, expand = "M", True
        elif exp == "R" and tag == "V" or exp is None and tag in ("V", "R"):
            side, expand = "N", False
        elif exp is None and tag == "C":
            side, expand = "M", False
        else:
            raise _Decline(f"`{text(p, side_node)}` is not a column (M, 1) or a row (N,) of the outer product")
        if side in ops:
            raise _Decline(f"the update of {acc} at line {update.lineno} is not an outer product (both operands are "
                           f"{'columns' if side == 'M' else 'rows'})")
        d = L.stride(ptr, shapes)
        if d is None:
            raise _Decline(f"the address of tl.load at line {load.lineno} does not depend on {var}")
        ops[side] = _Operand(load, side, expand, inner, ptr, mask, d)
    for name in loaded_names:
        uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        if len(uses) != 1:
            raise _Decline(f"{name} is read besides the outer product")
    # the loop variable (and what depends on it) only feeds the two addresses
    allowed: list[ast.AST] = [ops["M"].ptr, ops["N"].ptr]
    for name in L.dep - {var}:
        allowed += L.binds[name]
    inside: set[int] = set()
    for a in allowed:
        inside |= {id(n) for n in ast.walk(a)}
    for n in ast.walk(loop):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in L.dep and id(n) not in inside:
            raise _Decline(f"{n.id} (depends on {var}) is used at line {n.lineno} besides the two load addresses")
    return _Plan(loop, var, end, acc, value, (ops["M"], ops["N"]), dims, shapes)


def _updates(p: Parsed, loop: ast.For) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for n in ast.walk(loop):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name):
            out.append(n)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and isinstance(
                n.value, ast.BinOp) and isinstance(n.value.op, ast.Add) and any(
                isinstance(s, ast.Name) and s.id == n.targets[0].id for s in (n.value.left, n.value.right)):
            out.append(n)
    return out


def _target(update: ast.stmt) -> str:
    return (update.target if isinstance(update, ast.AugAssign) else update.targets[0]).id  # type: ignore[attr-defined]


def _find(p: Parsed, k: JitKernel) -> _Plan:
    if PARAM in k.params:
        raise _Decline(f"already takes {PARAM}")
    shapes = _Shapes(p, k)
    reasons: dict[str, list[str]] = {}  # reason -> the loops it declines
    for loop in [n for n in ast.walk(k.fn) if isinstance(n, ast.For)]:
        ups = _updates(p, loop)
        tiles = [u for u in ups if shapes.tags.get(_target(u)) == "F"]  # 2-D accumulators first
        for u in tiles or ups:
            try:
                return _plan(p, k, loop, u, shapes)
            except _Decline as exc:
                where = f"{text(p, loop.target)} (line {loop.lineno})"
                if where not in reasons.setdefault(str(exc), []):
                    reasons[str(exc)].append(where)
    if not reasons:
        raise _Decline("no loop accumulates into a value (acc += ...)")
    raise _Decline("; ".join(f"loop{'s' if len(ws) > 1 else ''} over {', '.join(ws)}: {why}"
                             for why, ws in reasons.items()))


class DotRank1Loop:
    name = NAME
    backend = "triton"
    summary = ("a loop of rank-1 updates acc += a[:, None] * b[None, :] steps by BLOCK_K and accumulates "
               "tl.dot of (M, BLOCK_K) and (BLOCK_K, N) tiles (implicit GEMM for blocked convolutions)")
    requires = ["triton", "k_loop"]
    params = [TransformParam(name=PARAM, default=DEFAULT, domain=list(DOMAIN),
                             doc="K values per tl.dot (>= 16); a knob of the result"),
              TransformParam(name="input_precision", default="ieee", domain=list(PRECISIONS),
                             doc="tl.dot input precision for fp32 operands ('ieee' keeps fp32 products)")]

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            try:
                plan = _find(p, k)
                self._edits(p, k, plan, DEFAULT, "ieee")
            except (_Decline, TransformError) as exc:
                return str(exc)
            m, n = plan.ops
            return (f"the loop over {plan.var} (line {plan.loop.lineno}) accumulates {plan.acc} += outer product of "
                    f"the loads at lines {m.load.lineno} (M) and {n.load.lineno} (N): tl.dot of BLOCK_K-wide tiles",
                    {PARAM: DEFAULT, "input_precision": "ieee"})

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        refuse_unknown(NAME, params, {PARAM, "input_precision"})
        block = params.get(PARAM, DEFAULT)
        if not (isinstance(block, int) and not isinstance(block, bool) and block >= DOT_MIN):
            raise TransformError(f"{NAME}: {PARAM}={block!r}: tl.dot needs an integer >= {DOT_MIN}")
        precision = params.get("input_precision", "ieee")
        if precision not in PRECISIONS:
            raise TransformError(f"{NAME}: input_precision={precision!r}: expected one of {PRECISIONS}")
        p, k = parse_for_apply(source, site)
        try:
            plan = _find(p, k)
            edits = self._edits(p, k, plan, int(block), str(precision))
        except _Decline as exc:
            raise TransformError(str(exc)) from None
        try:
            return apply_edits(source, edits, what=f"{NAME} on {k.fn.name}")
        except BadInput as exc:
            raise TransformError(str(exc)) from None

    def _edits(self, p: Parsed, k: JitKernel, plan: _Plan, block: int, precision: str) -> list[Edit]:
        src, tl = p.src, p.al.tl_prefix()
        if PARAM in k.params:
            raise _Decline(f"already takes {PARAM}")
        loop = plan.loop
        body = loop.body
        if body[0].lineno == loop.lineno:
            raise _Decline("the loop body shares a line with its `for`")
        taken = used_names(src.tree)
        kb = fresh(taken, f"{plan.var}_blk")
        edits: list[Edit] = []
        # the loop steps by BLOCK_K
        it = loop.iter
        assert isinstance(it, ast.Call)
        bounds = _range_bounds(p, loop)
        assert bounds is not None
        start, end = bounds
        if len(it.args) == 3:
            edits.append((src.start(it.args[2]), src.end(it.args[2]), PARAM))
        elif start is None:
            edits.append((src.start(it.args[0]), src.end(it.args[0]), f"0, {text(p, end)}, {PARAM}"))
        else:
            edits.append((src.end(it.args[1]), src.end(it.args[1]), f", {PARAM}"))
        first = body[0]
        indent = indent_of(src, first)
        pos = src.line_starts[first.lineno - 1]
        edits.append((pos, pos, f"{indent}{kb} = {plan.var} + {tl}.arange(0, {PARAM})\n"))
        endt = text(p, end)
        endt = endt if endt.isidentifier() else f"({endt})"
        tiles: list[str] = []
        for op in plan.ops:
            ptr = text(p, op.ptr)
            if op.side == "M":
                kvec = f"{kb}[None, :]"
                base = f"({ptr})[:, None]" if op.expand else f"({ptr})"
                mask = None if op.mask is None else (
                    f"({text(p, op.mask)})[:, None]" if op.expand and plan.shapes.of(op.mask) == "V"
                    else text(p, op.mask))
            else:
                kvec = f"{kb}[:, None]"
                base = f"({ptr})"
                mask = None if op.mask is None else text(p, op.mask)
            kmask = f"{kvec} < {endt}"
            full_mask = kmask if mask is None else f"{tl}.where({mask}, {kmask}, False)"
            step = "" if op.stride == "1" else f" * {_paren(op.stride)}"
            tile = f"{tl}.load({base} + ({kvec} - {plan.var}){step}, mask={full_mask}, other=0.0)"
            if isinstance(op.node, ast.Name):
                edits.append((src.start(op.load), src.end(op.load), tile))
                tiles.append(op.node.id)
            else:
                tiles.append(tile)  # loaded inside the product: the product's edit holds it
        edits.append((src.start(plan.product), src.end(plan.product),
                      f"{tl}.dot({tiles[0]}, {tiles[1]}, input_precision={precision!r})"))
        edits.append(add_params(p, k, [f"{PARAM}: {constexpr_annotation(p)}"]))
        edits += self._launches(p, k, plan, block)
        return edits

    def _launches(self, p: Parsed, k: JitKernel, plan: _Plan, block: int) -> list[Edit]:
        from kernelopt.optimize.transforms.triton_edit import add_launch_kwargs

        launches = p.launches.get(k.fn.name, [])
        if not launches:
            raise _Decline(f"no launch of {k.fn.name} in this file to pass {PARAM} to")
        edits: list[Edit] = []
        dims = {d.id for d in plan.dims if isinstance(d, ast.Name) and d.id in k.constexprs}
        for call in launches:
            args = launch_args(k, call)
            if args is None:
                raise _Decline(f"the launch at line {call.lineno} passes *args or **kwargs")
            for name in sorted(dims):
                given = args.get(name)
                if isinstance(given, ast.Constant) and isinstance(given.value, int) and given.value < DOT_MIN:
                    edits.append((p.src.start(given), p.src.end(given), str(DOT_MIN)))
                elif isinstance(given, ast.Name):
                    lit = resolve_literal(given.id, p.scopes_at(given))
                    if lit is not None and isinstance(lit.value, int) and lit.value < DOT_MIN:
                        raise _Decline(f"{name} is {lit.value} at the launch (line {call.lineno}): tl.dot needs "
                                       f">= {DOT_MIN}")
            edits.append(add_launch_kwargs(p, call, [(PARAM, str(block))]))
        return edits


