"""Reading and rewriting candidate source: the one set of primitives every source tool uses.

The knob discovery (`kernelopt.optimize.knobs`) and the transforms
(`kernelopt.optimize.transforms`) both read a candidate with `ast` and change it by byte
spans, so a rewrite keeps every byte it does not mean to change (comments, layout). The
candidate is never imported or executed here.

Offsets are UTF-8 byte offsets, the unit `ast` reports `col_offset` in: a candidate with
non-ASCII comments still rewrites at the right place.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from kernelopt.errors import BadInput

# tl functions whose arguments are tensor shapes: a constexpr used there must be a power of two.
SHAPE_FUNCS = {"arange", "zeros", "full", "reshape", "view", "broadcast_to", "make_block_ptr"}
TILE_NAME = re.compile(r"^(BLOCK|TILE)|BLOCK|^B[MNKD]$|^BLK")


class SourceFile:
    """The candidate's bytes, its tree, and byte offsets of ast positions."""

    def __init__(self, source: str, path: str) -> None:
        from kernelopt.problem import _parse

        self.text = source
        self.data = source.encode("utf-8")
        self.tree = _parse(Path(path), source)
        self.line_starts = [0]
        for i, b in enumerate(self.data):
            if b == 0x0A:
                self.line_starts.append(i + 1)

    def start(self, node: ast.AST) -> int:
        return self.line_starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.line_starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]

    def line_of(self, offset: int) -> int:
        import bisect

        return bisect.bisect_right(self.line_starts, offset)


# --- Triton -----------------------------------------------------------------------------------


def int_literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


class TritonAliases:
    """Names the module binds to `triton` and `triton.language` (and bare `jit`, `autotune`)."""

    def __init__(self, tree: ast.Module) -> None:
        self.triton: set[str] = set()
        self.tl: set[str] = set()
        self.bare: dict[str, str] = {}  # local name -> triton attribute (from triton import jit)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "triton":
                        self.triton.add(a.asname or "triton")
                    elif a.name == "triton.language":
                        if a.asname:
                            self.tl.add(a.asname)
                        else:
                            self.triton.add("triton")
            elif isinstance(node, ast.ImportFrom) and node.module in ("triton", "triton.language"):
                for a in node.names:
                    if node.module == "triton" and a.name == "language":
                        self.tl.add(a.asname or "language")
                    elif node.module == "triton":
                        self.bare[a.asname or a.name] = a.name

    def is_triton_attr(self, node: ast.AST, attr: str) -> bool:
        """`triton.<attr>` or a bare name imported from triton."""
        if isinstance(node, ast.Attribute) and node.attr == attr:
            return isinstance(node.value, ast.Name) and node.value.id in self.triton
        return isinstance(node, ast.Name) and self.bare.get(node.id) == attr

    def tl_attr(self, node: ast.AST) -> str | None:
        """'load' for `tl.load` / `triton.language.load`, else None."""
        if not isinstance(node, ast.Attribute):
            return None
        v = node.value
        if isinstance(v, ast.Name) and v.id in self.tl:
            return node.attr
        if (isinstance(v, ast.Attribute) and v.attr == "language" and isinstance(v.value, ast.Name)
                and v.value.id in self.triton):
            return node.attr
        return None

    def tl_prefix(self) -> str:
        if self.tl:
            return sorted(self.tl)[0]
        return f"{sorted(self.triton)[0]}.language" if self.triton else "triton.language"


@dataclass
class JitKernel:
    fn: ast.FunctionDef
    params: list[str]
    constexprs: set[str]
    autotune: ast.Call | None
    tiles: set[str]
    loop_steps: set[str]
    uses_dot: bool


def is_constexpr(annotation: ast.AST | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "constexpr"
    if isinstance(annotation, ast.Name):
        return annotation.id == "constexpr"
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split(".")[-1] == "constexpr"
    return False


def jit_kernels(tree: ast.Module, al: TritonAliases) -> dict[str, JitKernel]:
    out: dict[str, JitKernel] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        jit, autotune = False, None
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if al.is_triton_attr(target, "jit"):
                jit = True
            elif al.is_triton_attr(target, "autotune") and isinstance(dec, ast.Call):
                autotune = dec
        if not jit:
            continue
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        constexprs = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                      if is_constexpr(a.annotation)}
        tiles: set[str] = set()
        steps: set[str] = set()
        uses_dot = False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                attr = al.tl_attr(sub.func)
                if attr == "dot":
                    uses_dot = True
                if attr in SHAPE_FUNCS:
                    tiles |= {n.id for n in ast.walk(sub) if isinstance(n, ast.Name)} & constexprs
            if isinstance(sub, ast.For) and isinstance(sub.iter, ast.Call) and len(sub.iter.args) == 3:
                step = sub.iter.args[2]
                if isinstance(step, ast.Name):
                    steps.add(step.id)
            elif (counted := block_count_loop(sub, node, al)) is not None and isinstance(counted[1], ast.Name):
                # a loop over tiles, as in Triton's matmul tutorial: `range(0, tl.cdiv(K, BLOCK_K))`
                steps.add(counted[1].id)
        tiles |= {c for c in constexprs if TILE_NAME.search(c)}
        out[node.name] = JitKernel(node, params, constexprs, autotune, tiles, steps, uses_dot)
    return out


def scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function or module body, not descending into nested defs, lambdas, classes."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def bindings(scope: ast.AST, name: str) -> list[tuple[ast.AST, ast.AST | None]]:
    """Every binding of `name` in the scope: (statement, the literal it is bound to or None)."""
    found: list[tuple[ast.AST, ast.AST | None]] = []
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = scope.args
        if name in {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {
                x.arg for x in (a.vararg, a.kwarg) if x is not None}:
            found.append((scope, None))  # a parameter: its value comes from the caller
    for node in scope_nodes(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    found.append((node, node.value))
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for i, elt in enumerate(target.elts):
                        if isinstance(elt, ast.Name) and elt.id == name:
                            value = node.value
                            same = (isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                                    and not any(isinstance(e, ast.Starred) for e in target.elts + value.elts))
                            found.append((node, value.elts[i] if same else None))  # type: ignore[union-attr]
                        elif isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Name) and elt.value.id == name:
                            found.append((node, None))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            if isinstance(node.target, ast.Name) and node.target.id == name:
                found.append((node, node.value if isinstance(node, ast.AnnAssign) else None))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.target)):
                found.append((node, None))
        elif isinstance(node, ast.NamedExpr) and node.target.id == name:
            found.append((node, None))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None and any(
                        isinstance(n, ast.Name) and n.id == name for n in ast.walk(item.optional_vars)):
                    found.append((node, None))
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            found.append((node, None))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                found.append((node, None))
    return found


def resolve_literal(name: str, scopes: list[ast.AST]) -> ast.Constant | None:
    """The int literal a name is bound to exactly once (innermost scope that binds it), else None.

    A name bound twice, to a call, to an expression or as a parameter is derived: not a knob."""
    for scope in scopes:
        binds = bindings(scope, name)
        if not binds:
            continue
        if len(binds) == 1 and int_literal(binds[0][1]):
            return binds[0][1]  # type: ignore[return-value]
        return None
    return None


def last_arg_end(src: SourceFile, call: ast.Call) -> int:
    """Where `, kwarg=value` is inserted: just after the call's last argument."""
    items: list[ast.AST] = [*call.args, *call.keywords]
    if not items:
        raise ValueError("no arguments")  # callers only insert into calls that have arguments
    return max(src.end(n) for n in items)


def keyword_delete_span(src: SourceFile, call: ast.Call, kw: ast.keyword) -> tuple[int, int]:
    """Bytes removing `kw` from the call without touching any other line."""
    return keywords_delete_spans(src, call, [kw])[0]


def keywords_delete_spans(src: SourceFile, call: ast.Call, kws: Sequence[ast.keyword]) -> list[tuple[int, int]]:
    """Bytes removing every keyword of `kws` from the call, one span per run of adjacent ones:
    a run goes like one item, with one separator (the one before it when that sits on the same
    line, else the comma after it), so removing neighbours never drops a comma twice or leaves
    two in a row."""
    items = sorted([*call.args, *call.keywords], key=src.start)
    gone = {id(k) for k in kws}
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(items):
        if id(items[i]) not in gone:
            i += 1
            continue
        j = i
        while j + 1 < len(items) and id(items[j + 1]) in gone:
            j += 1
        start, end = src.start(items[i]), src.end(items[j])
        prev_end = src.end(items[i - 1]) if i > 0 else None
        gap = src.data[prev_end:start] if prev_end is not None else b"\n"
        if b"\n" not in gap and b"#" not in gap:
            spans.append((prev_end, end))  # type: ignore[arg-type] # ", kw=value" on one line: its separator with it
        else:
            m = re.match(rb"[ \t]*,", src.data[end:])
            spans.append((start, end + (m.end() if m else 0)))
        i = j + 1
    return spans


def scopes_of(tree: ast.Module) -> dict[int, list[ast.AST]]:
    """id(node) -> enclosing function scopes (innermost first) then the module."""
    out: dict[int, list[ast.AST]] = {}

    def visit(node: ast.AST, scopes: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            out[id(child)] = scopes
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, [child, *scopes])
            else:
                visit(child, scopes)

    visit(tree, [tree])
    return out


def grid_names(grid: ast.AST, scopes: list[ast.AST]) -> tuple[set[str], set[str]]:
    """Names the grid expression reads (following a local `grid = ...`) and META[...] keys."""
    names: set[str] = set()
    meta: set[str] = set()
    todo = [grid]
    seen: set[str] = set()
    while todo:
        expr = todo.pop()
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and n.id not in seen:
                seen.add(n.id)
                names.add(n.id)
                for scope in scopes:
                    binds = bindings(scope, n.id)
                    if binds:
                        if len(binds) == 1 and binds[0][1] is not None:
                            todo.append(binds[0][1])  # type: ignore[arg-type]
                        break
            elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                meta.add(n.slice.value)
    return names, meta


Edit = tuple[int, int, str]  # replace bytes [start, end) with the text


def apply_edits(source: str, edits: Sequence[Edit], path: str = "<candidate>", what: str = "the edits") -> str:
    """`source` with byte-span `edits` applied (in source order, ties in the given order); every
    byte outside the spans is kept. BadInput when two edits overlap or the result does not parse."""
    if not edits:
        return source
    data = source.encode("utf-8")
    ranked = sorted(enumerate(edits), key=lambda t: (t[1][0], t[1][1], t[0]))
    out: list[bytes] = []
    pos = 0
    for _, (start, end, text) in ranked:
        if start < pos:
            raise BadInput(f"{path}: {what} overlap in the source; apply them one at a time")
        out.append(data[pos:start])
        out.append(text.encode("utf-8"))
        pos = end
    out.append(data[pos:])
    result = b"".join(out).decode("utf-8")
    try:
        ast.parse(result)
    except SyntaxError as exc:  # a bug in the caller, never the user's: say which edits
        raise BadInput(f"{path}: {what} would not parse ({exc.msg})") from None
    return result


def segment(src: SourceFile, node: ast.AST) -> str:
    """The exact source text of a node."""
    return src.data[src.start(node):src.end(node)].decode("utf-8")


def indent_of(src: SourceFile, node: ast.AST) -> str:
    """The whitespace a statement's line starts with."""
    line_start = src.line_starts[node.lineno - 1]  # type: ignore[attr-defined]
    m = re.match(rb"[ \t]*", src.data[line_start:])
    return m.group(0).decode() if m else ""


def parse_triton(source: str, path: str = "<candidate>") -> tuple[SourceFile, TritonAliases, dict[str, JitKernel]]:
    """The source, its triton aliases and its `@triton.jit` kernels by name (BadInput if it does not parse)."""
    src = SourceFile(source, path)
    al = TritonAliases(src.tree)
    return src, al, jit_kernels(src.tree, al)


# --- CUDA held in Python strings -------------------------------------------------------------

# `kernel<<<grid, block[, ...]>>>`: groups 1 kernel, 2 grid, 3 block.
CUDA_LAUNCH = re.compile(rb"\b([A-Za-z_]\w*)[ \t]*<<<[ \t]*([^,<>]+?)[ \t]*,[ \t]*([^,<>]+?)[ \t]*(?:,[^<>]*)?>>>")
# `__global__ void name(`: group 1 the kernel's name.
CUDA_GLOBAL = re.compile(rb"__global__[\s\w]*?(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(")


def cuda_strings(src: SourceFile) -> list[tuple[int, int, bytes]]:
    """(start, end, bytes) of each string literal holding CUDA source (`__global__`), as written:
    offsets inside the bytes are offsets into the file. f-strings and bytes are skipped (what
    runs is not what is written)."""
    out = []
    for node in ast.walk(src.tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value):
            continue
        s, e = src.start(node), src.end(node)
        seg = src.data[s:e]
        if re.match(rb"^[rRuU]?('''|\"\"\"|'|\")", seg):
            out.append((s, e, seg))
    return sorted(out)


# --- structural features -----------------------------------------------------------------------

# The vocabulary a transform's `requires` and a pack entry's static precondition use.
FEATURES = {
    "triton": "the file has a @triton.jit kernel",
    "cuda": "the file compiles CUDA source (load_inline / __global__)",
    "grid_1d": "a kernel reads only program_id(0)",
    "grid_2d": "a kernel reads program_id(1) (a 2-D program grid)",
    "loop": "a kernel has a for loop",
    "row_loop": "a kernel loops over a dimension in constexpr-sized blocks (range(0, n, BLOCK) or range(cdiv(n, BLOCK)))",
    "multi_pass": "a kernel has two or more such block loops in sequence (it reads its data more than once)",
    "k_loop": "a loop accumulates into a value carried across iterations (acc += ... / acc = acc + ...)",
    "reduction": "a kernel calls tl.sum / tl.max / tl.min / tl.argmax / tl.argmin / tl.reduce",
    "dot": "a kernel calls tl.dot",
    "atomic": "a kernel calls a tl.atomic_* function",
    "elementwise": "a 1-D kernel with no loop, reduction or dot",
    "autotuned": "a kernel is decorated with @triton.autotune",
    "block_ptr": "a kernel uses tl.make_block_ptr",
}

_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum", "cumprod", "associative_scan"}


def stepped_block_loop(node: ast.AST, al: TritonAliases, constexprs: set[str]) -> bool:
    """`for v in range(a, b, BLOCK)` / `tl.range(a, b, BLOCK)` with a constexpr step."""
    if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and len(node.iter.args) == 3):
        return False
    f = node.iter.func
    if not ((isinstance(f, ast.Name) and f.id == "range") or al.tl_attr(f) == "range"):
        return False
    step = node.iter.args[2]
    return isinstance(step, ast.Name) and step.id in constexprs


def block_loop(node: ast.AST, al: TritonAliases, k: JitKernel) -> tuple[str, ast.AST, ast.AST] | None:
    """(BLOCK, n, start) of a loop over a row in blocks; None for any other statement.

    `for off in range(start, n, BLOCK)` (BLOCK a constexpr), or a loop over block indices
    `for b in range([0,] cdiv(n, BLOCK)[, 1])` - cdiv written as tl.cdiv / triton.cdiv /
    (n + BLOCK - 1) // BLOCK, inline or through a name bound once at the kernel's top level.
    Either runs exactly once, with its variable 0, when BLOCK >= n >= 1."""
    if stepped_block_loop(node, al, k.constexprs):
        it = node.iter  # type: ignore[attr-defined]
        return it.args[2].id, it.args[1], it.args[0]
    n_blk = block_count_loop(node, k.fn, al)
    if n_blk is None or not (isinstance(n_blk[1], ast.Name) and n_blk[1].id in k.constexprs):
        return None
    args = node.iter.args  # type: ignore[attr-defined]
    return n_blk[1].id, n_blk[0], args[0] if len(args) >= 2 else ast.Constant(0)


def block_count_loop(node: ast.AST, fn: ast.FunctionDef, al: TritonAliases) -> tuple[ast.AST, ast.AST] | None:
    """(n, BLOCK) of a loop over block indices `for b in range([0,] cdiv(n, BLOCK)[, 1])` in `fn`
    (range or tl.range), cdiv inline or through a name bound once at the kernel's top level."""
    if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and 1 <= len(node.iter.args) <= 3):
        return None
    f, args = node.iter.func, node.iter.args
    if not ((isinstance(f, ast.Name) and f.id == "range") or al.tl_attr(f) == "range"):
        return None
    if len(args) == 3 and not (isinstance(args[2], ast.Constant) and args[2].value == 1):
        return None
    count = args[1] if len(args) >= 2 else args[0]
    if isinstance(count, ast.Name):
        binds = [s for s in fn.body if isinstance(s, ast.Assign) and len(s.targets) == 1
                 and isinstance(s.targets[0], ast.Name) and s.targets[0].id == count.id]
        stores = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                  and n.id == count.id]
        if len(binds) != 1 or len(stores) != 1:
            return None
        count = binds[0].value
    return cdiv_args(count, al)


def cdiv_args(node: ast.AST, al: TritonAliases) -> tuple[ast.AST, ast.AST] | None:
    """(n, b) of `tl.cdiv(n, b)`, `triton.cdiv(n, b)` or `(n + b - 1) // b`."""
    if isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords and (
            al.tl_attr(node.func) == "cdiv" or al.is_triton_attr(node.func, "cdiv")):
        return node.args[0], node.args[1]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and isinstance(node.right, ast.Name):
        b = node.right.id
        num = node.left
        if (isinstance(num, ast.BinOp) and isinstance(num.op, ast.Sub) and isinstance(num.right, ast.Constant)
                and num.right.value == 1 and isinstance(num.left, ast.BinOp) and isinstance(num.left.op, ast.Add)
                and isinstance(num.left.right, ast.Name) and num.left.right.id == b):
            return num.left.left, node.right
    return None


def _block_loops(k: JitKernel, al: TritonAliases) -> list[ast.For]:
    """The kernel's loops over a dimension in constexpr-sized blocks (see `block_loop`)."""
    return [node for node in ast.walk(k.fn) if block_loop(node, al, k) is not None]  # type: ignore[misc]


def _carried(loop: ast.For) -> bool:
    for node in ast.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            return True
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.BinOp)
                and any(isinstance(n, ast.Name) and n.id == node.targets[0].id for n in ast.walk(node.value))):
            return True
    return False


def kernel_features(k: JitKernel, al: TritonAliases) -> set[str]:
    """The structural features (FEATURES) of one @triton.jit kernel."""
    out = {"triton"}
    axes: set[int] = set()
    calls: set[str] = set()
    for node in ast.walk(k.fn):
        if isinstance(node, ast.Call):
            attr = al.tl_attr(node.func)
            if attr is None:
                continue
            calls.add(attr)
            if attr in ("program_id", "num_programs"):
                arg = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "axis"), None)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                    axes.add(arg.value)
    out.add("grid_2d" if axes - {0} else "grid_1d")
    loops = [n for n in ast.walk(k.fn) if isinstance(n, (ast.For, ast.While))]
    blocks = _block_loops(k, al)
    if loops:
        out.add("loop")
    if blocks:
        out.add("row_loop")
        top = [b for b in blocks if not any(b is not o and b in ast.walk(o) for o in blocks)]
        if len(top) >= 2:
            out.add("multi_pass")
    if any(_carried(loop) for loop in loops if isinstance(loop, ast.For)):
        out.add("k_loop")
    if calls & _REDUCTIONS:
        out.add("reduction")
    if "dot" in calls:
        out.add("dot")
    if any(c.startswith("atomic_") for c in calls):
        out.add("atomic")
    if "make_block_ptr" in calls:
        out.add("block_ptr")
    if k.autotune is not None:
        out.add("autotuned")
    if not loops and not (calls & _REDUCTIONS) and "dot" not in calls and "grid_1d" in out:
        out.add("elementwise")
    return out


def features(source: str, path: str = "<candidate>") -> set[str]:
    """The structural features (FEATURES) of a candidate: the union over its kernels. Empty for
    source that does not parse (a feature is never guessed)."""
    try:
        src, al, kernels = parse_triton(source, path)
    except BadInput:
        return set()
    out: set[str] = set()
    for k in kernels.values():
        out |= kernel_features(k, al)
    if not kernels and ("__global__" in source or "load_inline" in source):
        out.add("cuda")
    return out
