"""split_reduction: split a sum over a long dimension across SPLIT programs (tall-skinny shapes).

A reduction with few outputs - a matrix-vector product with few rows, row sums of a few
rows, a loss reduced to a scalar by one program - runs as few programs as it has outputs,
each streaming its whole reduced dimension alone while most SMs idle. The rewrite adds a
program axis: program (i, s) sums chunk s of the K loop,

    chunk = cdiv(cdiv(K, BLOCK), SPLIT) * BLOCK           # whole blocks: the masks stay exact
    for off in range(s * chunk, minimum(s * chunk + chunk, K), BLOCK): ...

and the final `tl.store(out + i, f(sum))` becomes `tl.atomic_add(out + i, f(partial))` into a
zero-initialised fp32 buffer the launch allocates; after the launch the buffer is copied into
the real output (`copy_` casts to its dtype), so the result dtype is unchanged and fp16/bf16
outputs are summed in fp32. Sum over chunks = the original sum (up to float reassociation,
which verification's tolerance judges). SPLIT is a literal launch argument the grid reads
through META: a knob.

It rewrites only what it can prove is a sum: one block loop whose loop-carried values are all
accumulators (`acc += e` / `acc = acc + e`, initialised to zeros), no value of the last
iteration used after the loop, exactly one store after the loop whose value is linear in the
accumulators (tl.sum, casts, scaling by loop-independent values, sums of such), and launches
that pass the output as a local tensor variable. A max/min reduction, a value added after the
sum (a bias), a nonlinear epilogue (sqrt, log), stores inside the loop or a kernel that already
uses a second program axis are declined with the reason.
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
    constexpr_annotation,
    enclosing_stmt,
    fresh,
    grid_of,
    int_param,
    kernel_sites,
    launch_args,
    names_read,
    names_stored,
    parse_for_apply,
    program_ids,
    refuse_unknown,
    text,
    tl_calls,
    used_names,
)
from kernelopt.source import Edit, JitKernel, apply_edits, indent_of, stepped_block_loop

NAME = "split_reduction"
PARAM = "SPLIT"
_STORE_KW_OK = {"mask"}


def _is_zero(node: ast.AST | None, al) -> bool:  # noqa: ANN001 - TritonAliases
    if isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool):
        return True
    if isinstance(node, ast.Call) and al.tl_attr(node.func) == "zeros":
        return True
    if isinstance(node, ast.Call) and al.tl_attr(node.func) == "full":
        value = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "value"), None)
        return isinstance(value, ast.Constant) and value.value == 0
    return False


def _sum_update(stmt: ast.stmt, acc: str) -> ast.AST | None:
    """The added term when `stmt` is `acc += e` or `acc = acc + e` / `acc = e + acc`, else None."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == acc \
            and isinstance(stmt.op, ast.Add):
        return stmt.value
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and stmt.targets[0].id == acc and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, ast.Add):
        left, right = stmt.value.left, stmt.value.right
        if isinstance(left, ast.Name) and left.id == acc:
            return right
        if isinstance(right, ast.Name) and right.id == acc:
            return left
    return None


class _Linear:
    """Is an expression after the loop linear in the accumulators (so partial sums add up)?"""

    def __init__(self, al, accs: set[str], env: dict[str, ast.AST]) -> None:  # noqa: ANN001
        self.al, self.accs, self.env = al, accs, env

    def depends(self, node: ast.AST) -> bool:
        for name in names_read(node):
            if name in self.accs or (name in self.env and self.depends(self.env[name])):
                return True
        return False

    def linear(self, node: ast.AST) -> bool:
        """True when `node` is linear in the accumulators and depends on them."""
        if isinstance(node, ast.Name):
            if node.id in self.accs:
                return True
            return node.id in self.env and self.linear(self.env[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self.linear(node.operand)
        if isinstance(node, ast.BinOp):
            l_dep, r_dep = self.depends(node.left), self.depends(node.right)
            if isinstance(node.op, (ast.Add, ast.Sub)):
                return l_dep and r_dep and self.linear(node.left) and self.linear(node.right)
            if isinstance(node.op, ast.Mult):
                return (l_dep != r_dep) and self.linear(node.left if l_dep else node.right)
            if isinstance(node.op, ast.Div):
                return l_dep and not r_dep and self.linear(node.left)
            return False
        if isinstance(node, ast.Call):
            attr = self.al.tl_attr(node.func)
            if attr == "sum" and node.args and self.linear(node.args[0]) and not any(
                    self.depends(a) for a in node.args[1:]):
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("to",) and attr is None:
                return self.linear(node.func.value) and not any(self.depends(a) for a in node.args)
        return False


class _Plan:
    def __init__(self, loop: ast.For, store: ast.Call, out: str) -> None:
        self.loop, self.store, self.out = loop, store, out
        self.launches: list[tuple[ast.Call, ast.Name, ast.stmt, ast.Tuple | ast.List, ast.Lambda | None]] = []


def _torch_name(tree: ast.Module) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch":
                    return a.asname or "torch"
    return None


class SplitReduction:
    name = NAME
    backend = "triton"
    summary = "split a kernel's summed block loop across SPLIT programs (axis 1), combined by atomic_add into fp32"
    requires = ["triton", "row_loop", "reduction"]
    params = [TransformParam(name=PARAM, default=4, domain=[1, 2, 4, 8, 16, 32, 64],
                             doc="programs sharing one reduction; a knob of the result")]

    def _plan(self, p: Parsed, k: JitKernel) -> _Plan | str:
        fn, al = k.fn, p.al
        if PARAM in k.params:
            return f"already takes {PARAM}"
        pids = program_ids(k, al)
        if set(pids) - {0}:
            return "reads a program id other than axis 0: the split needs axis 1"
        if tl_calls(fn, al, "num_programs"):
            return "reads tl.num_programs (a persistent or grid-stride loop)"
        if any(n.func.attr.startswith("atomic_") for n in ast.walk(fn) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute) and al.tl_attr(n.func)):
            return "already combines with atomics"
        loops = [n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))]
        blocks = [s for s in fn.body if stepped_block_loop(s, al, k.constexprs)]
        if not blocks:
            return "no block loop over a reduced dimension (range(0, K, BLOCK)) at the top of the kernel"
        if len(loops) != 1 or len(blocks) != 1:
            return "more than one loop: not a single summed sweep"
        loop = blocks[0]
        it = loop.iter  # type: ignore[attr-defined]
        if not (isinstance(it.args[0], ast.Constant) and it.args[0].value == 0):
            return f"the loop at line {loop.lineno} does not start at 0"
        if it.keywords or loop.orelse or not isinstance(loop.target, ast.Name):
            return f"the loop at line {loop.lineno} has options, an else clause or unpacks its variable"
        if any(isinstance(n, (ast.Break, ast.Continue, ast.Return)) for n in ast.walk(fn)):
            return "has break, continue or return"
        if loop.target.id in names_stored(ast.Module(body=loop.body, type_ignores=[])):
            return f"assigns its loop variable {loop.target.id!r} in the loop"
        stop = it.args[1]
        if names_read(stop) & names_stored(fn):
            return f"the loop bound {text(p, stop)!r} is computed in the kernel"
        # what the loop carries: only sums into zero-initialised accumulators
        idx = fn.body.index(loop)
        before, after = fn.body[:idx], fn.body[idx + 1:]
        assigned_in = names_stored(ast.Module(body=loop.body, type_ignores=[])) - {loop.target.id}
        accs: set[str] = set()
        for name in sorted(assigned_in):
            writes = [s for s in ast.walk(ast.Module(body=loop.body, type_ignores=[]))
                      if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and name in names_stored(s)]
            terms = [_sum_update(s, name) for s in writes]
            carried = self._carried(loop.body, name)
            if not carried:
                if name in set().union(*(names_read(s) for s in after)):
                    return f"{name!r} is assigned in the loop and read after it (the last iteration's value)"
                continue
            if any(isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
                   and al.tl_attr(s.value.func) in ("maximum", "minimum") for s in writes):
                return f"{name!r} is a max/min reduction, not a sum (partials would need atomic_max/min)"
            if any(t is None or name in names_read(t) for t in terms) or any(
                    s not in loop.body for s in writes):
                return f"{name!r} is carried across iterations but is not a plain sum (acc += e)"
            inits = [s for s in before if isinstance(s, ast.Assign) and name in names_stored(s)]
            if len(inits) != 1 or len(inits[0].targets) != 1 or not _is_zero(inits[0].value, al):
                return f"the accumulator {name!r} does not start at zero"
            accs.add(name)
        if not accs:
            return "the loop carries no sum"
        if any(tl_calls(s, al, "store") for s in before) or tl_calls(loop, al, "store"):
            return "stores before or inside the loop: only one result store after the sweep can be combined"
        env: dict[str, ast.AST] = {}
        stores: list[ast.Call] = []
        for s in after:
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                    and not tl_calls(s, al, "store"):
                if s.targets[0].id in env or s.targets[0].id in accs:
                    return f"{s.targets[0].id!r} is reassigned after the loop"
                env[s.targets[0].id] = s.value
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and al.tl_attr(s.value.func) == "store":
                stores.append(s.value)
            else:
                return f"line {s.lineno} after the loop is not a plain assignment or a store"
        if len(stores) != 1:
            return f"{len(stores)} stores after the loop: the split combines exactly one"
        store = stores[0]
        if len(store.args) < 2 or len(store.args) > 3 or any(kw.arg not in _STORE_KW_OK for kw in store.keywords):
            return "the result store passes options atomic_add does not take"
        lin = _Linear(al, accs, env)
        if not lin.linear(store.args[1]):
            return ("the stored value is not linear in the sum (e.g. a bias added, sqrt or log after it): "
                    "partial sums would not add up")
        root = store.args[0]
        while isinstance(root, ast.BinOp) and isinstance(root.op, ast.Add):
            root = root.left
        if not (isinstance(root, ast.Name) and root.id in k.params):
            return "the result pointer is not a kernel argument plus an offset"
        out = root.id
        if any(al.tl_attr(c.func) == "load" and out in names_read(c) for c in ast.walk(fn) if isinstance(c, ast.Call)):
            return f"the kernel also reads its output {out!r}"
        plan = _Plan(loop, store, out)
        calls = p.launches.get(fn.name, [])
        if not calls:
            return f"no launch of {fn.name} in this file"
        if _torch_name(p.src.tree) is None:
            return "the file does not `import torch` (the launch allocates the fp32 buffer with it)"
        for call in calls:
            passed = launch_args(k, call)
            if passed is None or out not in passed:
                return f"the launch at line {call.lineno} does not pass {out} where it can be read"
            arg = passed[out]
            if not isinstance(arg, ast.Name):
                return f"the launch at line {call.lineno} passes the output {out} as an expression, not a variable"
            stmt = enclosing_stmt(p, call)
            if not (isinstance(stmt, ast.Expr) and stmt.value is call):
                return f"the launch at line {call.lineno} is not a statement of its own"
            tup, lam, why = grid_of(p, call)
            if tup is None:
                return f"the launch at line {call.lineno}: {why}"
            if len(tup.elts) != 1:
                return f"the launch at line {call.lineno} has a {len(tup.elts)}-D grid"
            plan.launches.append((call, arg, stmt, tup, lam))
        return plan

    @staticmethod
    def _carried(body: list[ast.stmt], name: str) -> bool:
        """`name` is read in the loop body before it is (re)assigned there: its value crosses iterations."""
        for s in body:
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == name:
                return True
            if name in names_read(s):
                return True
            if name in names_stored(s):
                return False
        return False

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        def site(p: Parsed, k: JitKernel) -> str | tuple[str, dict[str, ParamValue]]:
            plan = self._plan(p, k)
            if isinstance(plan, str):
                return plan
            return (f"the sum over the loop at line {plan.loop.lineno} splits across {PARAM} programs (axis 1), "
                    "combined by atomic_add into fp32", {PARAM: 4})

        return kernel_sites(NAME, source, path, site)

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        refuse_unknown(NAME, params, {PARAM})
        split = int_param(NAME, params, PARAM, 4)
        p, k = parse_for_apply(source, site)
        plan = self._plan(p, k)
        if isinstance(plan, str):
            raise TransformError(plan)
        src, tl = p.src, p.al.tl_prefix()
        torch = _torch_name(src.tree)
        taken = used_names(src.tree)
        sid, chunk = fresh(taken, "split_id"), fresh(taken, "split_len")
        loop = plan.loop
        it = loop.iter  # type: ignore[attr-defined]
        stop, step = text(p, it.args[1]), text(p, it.args[2])
        ind = indent_of(src, loop)
        at = src.line_starts[loop.lineno - 1]
        edits: list[Edit] = [
            add_params(p, k, [f"{PARAM}: {constexpr_annotation(p)}"]),
            (at, at, f"{ind}{sid} = {tl}.program_id(1)  # this program sums chunk {sid} of {PARAM}\n"
                     f"{ind}{chunk} = {tl}.cdiv({tl}.cdiv({stop}, {step}), {PARAM}) * {step}\n"),
            (src.start(it.args[0]), src.end(it.args[0]), f"{sid} * {chunk}"),
            (src.start(it.args[1]), src.end(it.args[1]), f"{tl}.minimum({sid} * {chunk} + {chunk}, {stop})"),
            (src.start(plan.store.func), src.end(plan.store.func), f"{tl}.atomic_add"),
        ]
        value, inner = plan.store.args[1], plan.store.args[1]
        while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "to" \
                and p.al.tl_attr(inner.func) is None:
            inner = inner.func.value  # the buffer is fp32: the cast to the output dtype happens in copy_
        if inner is not value:
            edits.append((src.start(value), src.end(value), text(p, inner)))
        for call, out_arg, stmt, tup, lam in plan.launches:
            buf = fresh(taken, f"{out_arg.id}_acc")
            line_ind = indent_of(src, stmt)
            s_at = src.line_starts[stmt.lineno - 1]
            edits.append((s_at, s_at, f"{line_ind}{buf} = {torch}.zeros({out_arg.id}.shape, device={out_arg.id}.device, "
                                      f"dtype={torch}.float32)  # partial sums meet here\n"))
            edits.append((src.start(out_arg), src.end(out_arg), buf))
            end = src.end(stmt)
            edits.append((end, end, f"\n{line_ind}{out_arg.id}.copy_({buf})"))
            slice_ = call.func.slice  # type: ignore[attr-defined]
            first = tup.elts[0]
            if lam is not None:
                arg = lam.args.args[0].arg if lam.args.args else None
                if arg is None:
                    raise TransformError(f"the grid lambda at line {call.lineno} takes no META argument")
                edits.append((src.start(tup), src.end(tup), f"({text(p, first)}, {arg}[{PARAM!r}])"))
            elif isinstance(slice_, (ast.Tuple, ast.List)):
                edits.append((src.start(slice_), src.end(slice_), f"lambda META: ({text(p, first)}, META[{PARAM!r}])"))
            else:
                g = text(p, slice_)
                edits.append((src.start(slice_), src.end(slice_), f"lambda META: ({g}[0], META[{PARAM!r}])"))
            edits.append(add_launch_kwargs(p, call, [(PARAM, str(split))]))
        try:
            return apply_edits(source, edits, what=f"{NAME} on {site}")
        except BadInput as exc:
            raise TransformError(str(exc)) from None
