"""Find the knobs of a candidate: tunable values whose change keeps the kernel's meaning.

Everything here reads the candidate with `ast` (and, for CUDA source held in Python
strings, with regular expressions over the string's bytes); the candidate is never
imported or executed. Each knob is found together with *where* its value is written
(a byte span) or *where* it would be written when absent (an insertion point), so
`kernelopt.optimize.knobs.rewrite.set_knobs` can change exactly those bytes.

Offsets are UTF-8 byte offsets, the unit `ast` reports `col_offset` in: a candidate
with non-ASCII comments still rewrites at the right place.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernelopt.models.optimize import KnobSpec, KnobValue
from kernelopt.source import (
    CUDA_GLOBAL,
    CUDA_LAUNCH,
    JitKernel,
    SourceFile,
    TritonAliases,
    bindings,
    cuda_strings,
    grid_names,
    int_literal,
    jit_kernels,
    keyword_delete_span,
    last_arg_end,
    resolve_literal,
    scopes_of,
)

# --- domains ----------------------------------------------------------------------------

# Launch meta-parameters Triton accepts on `kernel[grid](...)` and `triton.Config`, with the
# domains the compiler accepts. Which of them the installed Triton knows (and their defaults)
# is read from `triton.Config`'s signature; this list is the fallback without triton.
NUM_WARPS = [1, 2, 4, 8, 16, 32]
NUM_STAGES = [1, 2, 3, 4, 5, 6]
_LAUNCH_DOMAINS: dict[str, list[KnobValue]] = {
    "num_warps": list(NUM_WARPS),
    "num_stages": list(NUM_STAGES),
    "num_ctas": [1, 2, 4],
    "maxnreg": [None, 64, 128, 255],
}
_FALLBACK_LAUNCH_DEFAULTS: dict[str, KnobValue] = {"num_warps": 4, "num_stages": 3}

EVICTION_POLICIES = ["", "evict_first", "evict_last"]
LOAD_CACHE_MODIFIERS = ["", ".cg", ".ca"]
STORE_CACHE_MODIFIERS = ["", ".wb", ".cg", ".cs", ".wt"]
# tl.dot's input_precision, most precise first ("" leaves Triton's default: tf32 for fp32 operands). It
# changes the products of fp32 operands only (fp16/bf16 ignore it); verification judges the result.
DOT_INPUT_PRECISIONS = ["", "ieee", "tf32x3", "tf32"]
LOOP_NUM_STAGES: list[KnobValue] = [None, 1, 2, 3, 4, 5, 6]
LOOP_UNROLL: list[KnobValue] = [None, 1, 2, 4, 8]

TILE_MIN, TILE_MAX, DOT_MIN = 16, 8192, 16
CUDA_THREADS = [32, 64, 128, 256, 512, 1024]


KINDS = ("constexpr", "launch", "autotune", "directive", "define", "cuda_launch")


@functools.lru_cache(maxsize=1)
def launch_params() -> dict[str, KnobValue]:
    """Launch meta-parameters the installed Triton supports -> their default values."""
    try:
        import inspect

        import triton

        sig = inspect.signature(triton.Config)
    except Exception:  # noqa: BLE001 - no (working) triton: the fixed list still describes the source
        return dict(_FALLBACK_LAUNCH_DEFAULTS)
    return {name: sig.parameters[name].default for name in _LAUNCH_DOMAINS if name in sig.parameters}


def is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def pow2_range(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def _with(domain: list[KnobValue], current: KnobValue) -> list[KnobValue]:
    """The domain always holds the current value (a legal program is its own domain)."""
    if current in domain and all(type(d) is type(current) for d in domain if d == current):
        return domain
    ints = [d for d in domain if isinstance(d, int) and not isinstance(d, bool)]
    if isinstance(current, int) and not isinstance(current, bool) and len(ints) == len(domain):
        return sorted(set(ints) | {current})
    return domain + [current]


def tile_domain(value: int, uses_dot: bool) -> list[KnobValue]:
    """Powers of two 16..8192 (extended to hold the current value); >= 16 under tl.dot."""
    lo = DOT_MIN if uses_dot else min(TILE_MIN, value)
    return _with(list(pow2_range(max(1, lo), max(TILE_MAX, value))), value)


def int_domain(value: int) -> list[KnobValue]:
    """A non-tile integer constexpr or #define: powers of two from 1 up to 4x (at least 64)."""
    if is_pow2(value):
        return list(pow2_range(1, max(64, 4 * value)))
    return sorted({max(1, value // 4), max(1, value // 2), value, value * 2, value * 4})


# --- where a knob lives in the bytes --------------------------------------------------------


@dataclass
class KnobSite:
    """A knob plus how to write it: replace `span`, or insert `kwarg=value` at `insert_at`."""

    names: list[str]  # least to most qualified; the first unique one is used
    value: KnobValue
    kernel: str | None
    line: int
    domain: list[KnobValue]
    kind: str
    span: tuple[int, int] | None = None  # bytes of the value token when written in the source
    delete_span: tuple[int, int] | None = None  # bytes removing `kwarg=value` (setting None)
    insert_at: int | None = None  # where `, kwarg=value` goes when the kwarg is absent
    kwarg: str | None = None
    quote: str = '"'
    rename: tuple[int, int, str] | None = None  # range -> tl.range, applied with any non-None value
    unset: KnobValue = None  # the value that means "absent": setting it removes the kwarg (delete_span)
    role: str | None = None  # 'parallel' (in the grid), 'loop' (a loop step), else None
    tile: bool = False
    pos: int = 0  # byte offset used to order knobs as they appear
    name: str = ""

    def spec(self) -> KnobSpec:
        return KnobSpec(name=self.name, value=self.value, kernel=self.kernel, line=self.line,
                        domain=list(self.domain), kind=self.kind)


def _triton_sites(src: SourceFile) -> list[KnobSite]:
    tree = src.tree
    al = TritonAliases(tree)
    if not (al.triton or al.tl or al.bare):
        return []
    kernels = jit_kernels(tree, al)
    if not kernels:
        return []
    scope_map = scopes_of(tree)
    sites: list[KnobSite] = []
    by_span: dict[tuple[int, int], KnobSite] = {}
    launch_defaults = launch_params()

    def add(site: KnobSite) -> None:
        if site.span is not None:
            if site.span in by_span:  # one variable feeding two launches is one knob
                return
            by_span[site.span] = site
        sites.append(site)

    # Launch sites: kernel[grid](...)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in kernels):
            continue
        k = kernels[node.func.value.id]
        kname = k.fn.name
        scopes = scope_map.get(id(node), [tree])
        grid_vars, meta_keys = grid_names(node.func.slice, scopes)
        tuned: set[str] = set()
        if k.autotune is not None:
            tuned = _autotuned_names(k.autotune, tree)
        passed: list[tuple[str, ast.AST, ast.AST | None]] = []  # (param, value expr, keyword node)
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            if i < len(k.params):
                passed.append((k.params[i], arg, None))
        for kw in node.keywords:
            if kw.arg is not None:
                passed.append((kw.arg, kw.value, kw))
        given = {p for p, _, _ in passed}
        for param, expr, kw in passed:
            is_launch = param in launch_defaults or param in _LAUNCH_DOMAINS
            if param not in k.constexprs and not is_launch:
                continue
            if param in tuned:
                continue
            literal: ast.Constant | None = expr if int_literal(expr) else None  # type: ignore[assignment]
            var = expr.id if isinstance(expr, ast.Name) else None
            if literal is None and var is not None:
                literal = resolve_literal(var, scopes)
            if literal is None:
                if is_launch and isinstance(expr, ast.Constant) and expr.value is None and param == "maxnreg":
                    pass  # maxnreg=None written out: same as absent; not worth a knob of its own
                continue  # derived (computed from shapes, a parameter, reassigned): not a knob
            value = literal.value
            if is_launch:
                domain = _with(list(_LAUNCH_DOMAINS.get(param, [value])), value)
                kind, tile, role = "launch", False, None
                names = [param, f"{kname}.{param}", f"{kname}.{param}@L{literal.lineno}"]
            else:
                tile = param in k.tiles
                domain = tile_domain(value, k.uses_dot) if tile else int_domain(value)
                role = ("parallel" if (var is not None and var in grid_vars) or param in meta_keys
                        else "loop" if param in k.loop_steps else None)
                kind = "constexpr"
                names = [param, f"{kname}.{param}", f"{kname}.{param}@L{literal.lineno}"]
            add(KnobSite(names=names, value=value, kernel=kname, line=literal.lineno, domain=domain, kind=kind,
                         span=(src.start(literal), src.end(literal)), tile=tile, role=role,
                         pos=src.start(literal)))
        if k.autotune is None:
            # Launch meta-parameters the call leaves to Triton's default: a knob written by insertion.
            for param, default in launch_defaults.items():
                if param in given or not (node.args or node.keywords):
                    continue
                add(KnobSite(names=[param, f"{kname}.{param}", f"{kname}.{param}@L{node.lineno}"], value=default,
                             kernel=kname, line=node.lineno, domain=_with(list(_LAUNCH_DOMAINS[param]), default),
                             kind="launch", insert_at=last_arg_end(src, node), kwarg=param, pos=src.end(node)))
    for kname, k in kernels.items():
        if k.autotune is not None:
            sites.extend(_autotune_sites(src, k, tree))
        sites.extend(_directive_sites(src, k, al))
    return sites


def _config_calls(autotune: ast.Call, tree: ast.Module) -> list[ast.Call]:
    configs: ast.AST | None = next((kw.value for kw in autotune.keywords if kw.arg == "configs"), None)
    if configs is None and autotune.args:
        configs = autotune.args[0]
    if isinstance(configs, ast.Name):
        configs = _module_value(tree, configs.id)
    if not isinstance(configs, (ast.List, ast.Tuple)):
        return []  # built by a comprehension or a function: the configs are derived
    return [c for c in configs.elts if isinstance(c, ast.Call)
            and ((isinstance(c.func, ast.Attribute) and c.func.attr == "Config")
                 or (isinstance(c.func, ast.Name) and c.func.id == "Config"))]


def _module_value(tree: ast.Module, name: str) -> ast.AST | None:
    binds = bindings(tree, name)
    return binds[0][1] if len(binds) == 1 else None


def _autotuned_names(autotune: ast.Call, tree: ast.Module) -> set[str]:
    names: set[str] = set()
    calls = _config_calls(autotune, tree)
    for c in calls:
        if c.args and isinstance(c.args[0], ast.Dict):
            names |= {k.value for k in c.args[0].keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        names |= {kw.arg for kw in c.keywords if kw.arg}
    if not calls:
        # configs we cannot read: the launch meta-parameters still belong to the autotuner
        names |= set(launch_params())
    return names | {"num_warps", "num_stages"}


def _autotune_sites(src: SourceFile, k: JitKernel, tree: ast.Module) -> list[KnobSite]:
    """Each Config's kwargs, num_warps and num_stages; plus the tuned names, decided by the autotuner."""
    kname = k.fn.name
    out: list[KnobSite] = []
    assert k.autotune is not None
    for name in sorted(_autotuned_names(k.autotune, tree)):
        out.append(KnobSite(names=[name, f"{kname}.{name}"], value=None, kernel=kname, line=k.autotune.lineno,
                            domain=[None], kind="autotune", pos=src.start(k.autotune)))
    for i, call in enumerate(_config_calls(k.autotune, tree)):
        if call.args and isinstance(call.args[0], ast.Dict):
            for key, val in zip(call.args[0].keys, call.args[0].values):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and int_literal(val)):
                    continue
                tile = key.value in k.tiles
                v = val.value  # type: ignore[union-attr]
                out.append(KnobSite(names=[f"config{i}.{key.value}", f"{kname}.config{i}.{key.value}"], value=v,
                                    kernel=kname, line=val.lineno, kind="autotune",
                                    domain=tile_domain(v, k.uses_dot) if tile else int_domain(v),
                                    span=(src.start(val), src.end(val)), tile=tile, pos=src.start(val)))
        present = {kw.arg: kw for kw in call.keywords if kw.arg}
        for param in ("num_warps", "num_stages"):
            names = [f"config{i}.{param}", f"{kname}.config{i}.{param}"]
            kw = present.get(param)
            if kw is not None:
                if int_literal(kw.value):
                    v = kw.value.value  # type: ignore[union-attr]
                    out.append(KnobSite(names=names, value=v, kernel=kname, line=kw.value.lineno, kind="autotune",
                                        domain=_with(list(_LAUNCH_DOMAINS[param]), v),
                                        span=(src.start(kw.value), src.end(kw.value)), pos=src.start(kw.value)))
            elif call.args or call.keywords:
                default = launch_params().get(param, _FALLBACK_LAUNCH_DEFAULTS[param])
                out.append(KnobSite(names=names, value=default, kernel=kname, line=call.lineno, kind="autotune",
                                    domain=_with(list(_LAUNCH_DOMAINS[param]), default),
                                    insert_at=last_arg_end(src, call), kwarg=param, pos=src.end(call)))
    return out


def _str_kw(src: SourceFile, call: ast.Call, kw: ast.keyword, names: list[str], kernel: str, domain: list[str],
            kind: str = "directive") -> KnobSite | None:
    if not (isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)):
        return None  # computed: not a knob
    s, e = src.start(kw.value), src.end(kw.value)
    token = src.data[s:e]
    if token[:1] not in (b"'", b'"') or token[:3] in (b"'''", b'"""'):
        return None  # prefixed (r'', b'') or triple-quoted: leave it alone
    v = kw.value.value
    return KnobSite(names=names, value=v, kernel=kernel, line=call.lineno, domain=_with(list(domain), v), kind=kind,
                    span=(s, e), delete_span=keyword_delete_span(src, call, kw), quote=token[:1].decode(),
                    unset="", pos=src.start(call))


def _directive_sites(src: SourceFile, k: JitKernel, al: TritonAliases) -> list[KnobSite]:
    """eviction_policy / cache_modifier of each tl.load/tl.store; input_precision of each tl.dot;
    num_stages / unroll of each loop."""
    kname = k.fn.name
    out = _string_kwarg_sites(src, k, al, {
        "load": (("eviction_policy", EVICTION_POLICIES), ("cache_modifier", LOAD_CACHE_MODIFIERS)),
        "store": (("eviction_policy", EVICTION_POLICIES), ("cache_modifier", STORE_CACHE_MODIFIERS))})
    # A dot that says `allow_tf32` (the older spelling, which Triton refuses beside input_precision)
    # or passes **kwargs is left alone.
    out += _string_kwarg_sites(src, k, al, {"dot": (("input_precision", DOT_INPUT_PRECISIONS),)},
                               lambda call: len(call.args) >= 2 and all(kw.arg not in (None, "allow_tf32")
                                                                        for kw in call.keywords))
    for node in ast.walk(k.fn):
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and node.iter.args):
            continue
        it = node.iter
        is_builtin = isinstance(it.func, ast.Name) and it.func.id == "range"
        if not (is_builtin or al.tl_attr(it.func) == "range"):
            continue  # static_range and other iterators are unrolled or not loops the compiler pipelines
        tag = f"loop@L{node.lineno}"
        kws = {kw.arg: kw for kw in it.keywords if kw.arg}
        rename = (src.start(it.func), src.end(it.func), f"{al.tl_prefix()}.range") if is_builtin else None
        for param, domain in (("num_stages", LOOP_NUM_STAGES), ("loop_unroll_factor", LOOP_UNROLL)):
            names = [f"{tag}.{param}", f"{kname}.{tag}.{param}"]
            kw = kws.get(param)
            if kw is not None:
                if not int_literal(kw.value):
                    continue
                v = kw.value.value  # type: ignore[union-attr]
                out.append(KnobSite(names=names, value=v, kernel=kname, line=node.lineno,
                                    domain=_with(list(domain), v), kind="directive",
                                    span=(src.start(kw.value), src.end(kw.value)),
                                    delete_span=keyword_delete_span(src, it, kw), pos=src.start(it)))
            else:
                out.append(KnobSite(names=names, value=None, kernel=kname, line=node.lineno, domain=list(domain),
                                    kind="directive", insert_at=last_arg_end(src, it), kwarg=param,
                                    rename=rename, pos=src.start(it)))
    return out


def _string_kwarg_sites(src: SourceFile, k: JitKernel, al: TritonAliases,
                        params: dict[str, tuple[tuple[str, list[str]], ...]],
                        wanted: Callable[[ast.Call], bool] = lambda call: True) -> list[KnobSite]:
    """A string keyword of each `tl.<what>(...)` call named in `params` ({what: ((param, domain), ...)}),
    in source order: `load@L41.eviction_policy`, `#2` for a second such call on the line. A literal is
    a knob at its value; an absent keyword is one at '' (inserted when set), on a call with arguments."""
    kname = k.fn.name
    calls = sorted(((al.tl_attr(n.func) or "", n) for n in ast.walk(k.fn)
                    if isinstance(n, ast.Call) and al.tl_attr(n.func) in params and wanted(n)),
                   key=lambda t: src.start(t[1]))
    per_line: dict[tuple[str, int], int] = {}
    for what, call in calls:
        per_line[(what, call.lineno)] = per_line.get((what, call.lineno), 0) + 1
    out: list[KnobSite] = []
    seen: dict[tuple[str, int], int] = {}
    for what, call in calls:
        key = (what, call.lineno)
        seen[key] = seen.get(key, 0) + 1
        tag = f"{what}@L{call.lineno}" + (f"#{seen[key]}" if per_line[key] > 1 else "")
        kws = {kw.arg: kw for kw in call.keywords if kw.arg}
        for param, domain in params[what]:
            names = [f"{tag}.{param}", f"{kname}.{tag}.{param}"]
            if param in kws:
                site = _str_kw(src, call, kws[param], names, kname, domain)
                if site is not None:
                    out.append(site)
            elif call.args or call.keywords:
                out.append(KnobSite(names=names, value="", kernel=kname, line=call.lineno, domain=list(domain),
                                    kind="directive", insert_at=last_arg_end(src, call), kwarg=param,
                                    pos=src.start(call)))
    return out


# --- CUDA ---------------------------------------------------------------------------------------

_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(\d+)[uUlL]*[ \t]*(?://[^\n]*|/\*[^\n]*)?$", re.M)
_CONSTEXPR = re.compile(
    rb"\bconstexpr[ \t]+(?:(?:unsigned|signed|const|static)[ \t]+)*"
    rb"(?:int|long|short|unsigned|size_t|int32_t|int64_t|uint32_t|uint64_t)[ \t]+([A-Za-z_]\w*)[ \t]*=[ \t]*(\d+)[uUlL]*[ \t]*;")
_LOCAL_CONST = rb"(?:const[ \t]+)?(?:int|unsigned|size_t|int32_t|uint32_t)[ \t]+%s[ \t]*=[ \t]*(\d+)[uUlL]*[ \t]*;"
_LAUNCH_BOUNDS = re.compile(rb"__launch_bounds__\s*\(\s*([A-Za-z_]\w*|\d+)")
_IDENT = re.compile(rb"^[A-Za-z_]\w*$")
_DIGITS = re.compile(rb"^\d+$")


def _cuda_sites(src: SourceFile) -> list[KnobSite]:
    out: list[KnobSite] = []
    for s, _e, seg in cuda_strings(src):
        kernels = [m.group(1).decode() for m in CUDA_GLOBAL.finditer(seg)]
        first = kernels[0] if kernels else None

        def line(offset: int) -> int:
            return src.line_of(s + offset)

        threads: set[bytes] = {m.group(1) for m in _LAUNCH_BOUNDS.finditer(seg)}
        launches = list(CUDA_LAUNCH.finditer(seg))
        threads |= {m.group(3) for m in launches}
        named: dict[bytes, KnobSite] = {}
        for rx, kind in ((_DEFINE, "define"), (_CONSTEXPR, "define")):
            for m in rx.finditer(seg):
                name, value = m.group(1), int(m.group(2))
                domain = _with(list(CUDA_THREADS), value) if name in threads else int_domain(value)
                site = KnobSite(names=[name.decode(), f"{first}.{name.decode()}", f"{name.decode()}@L{line(m.start(2))}"],
                                value=value, kernel=first, line=line(m.start(2)), domain=domain, kind=kind,
                                span=(s + m.start(2), s + m.end(2)), pos=s + m.start(2))
                named.setdefault(name, site)
                out.append(site)
        for m in launches:
            kernel = m.group(1).decode()
            for group, what in ((2, "grid"), (3, "block")):
                arg = m.group(group)
                if _DIGITS.match(arg):
                    v = int(arg)
                    domain = _with(list(CUDA_THREADS), v) if what == "block" else int_domain(v)
                    out.append(KnobSite(names=[f"{kernel}.{what}", f"{kernel}.{what}@L{line(m.start(group))}"],
                                        value=v, kernel=kernel, line=line(m.start(group)), domain=domain,
                                        kind="cuda_launch", span=(s + m.start(group), s + m.end(group)),
                                        pos=s + m.start(group)))
                elif _IDENT.match(arg) and arg not in named:
                    # a named integer: a knob only when it is bound to a literal exactly once
                    hits = list(re.finditer(_LOCAL_CONST % re.escape(arg), seg))
                    assigned = re.findall(rb"\b%s[ \t]*[-+*/]?=(?!=)" % re.escape(arg), seg)
                    if len(hits) == 1 and len(assigned) == 1:
                        h = hits[0]
                        v = int(h.group(1))
                        domain = _with(list(CUDA_THREADS), v) if what == "block" else int_domain(v)
                        site = KnobSite(names=[arg.decode(), f"{kernel}.{arg.decode()}"], value=v, kernel=kernel,
                                        line=line(h.start(1)), domain=domain, kind="cuda_launch",
                                        span=(s + h.start(1), s + h.end(1)), pos=s + h.start(1))
                        named[arg] = site
                        out.append(site)
    return out


# --- public ---------------------------------------------------------------------------------------


def _name_sites(sites: list[KnobSite]) -> None:
    """Plain names where unique, qualified where not: each site takes its least qualified unique name."""
    level = [0] * len(sites)
    for _ in range(4):
        counts: dict[str, int] = {}
        for site, lv in zip(sites, level):
            n = site.names[min(lv, len(site.names) - 1)]
            counts[n] = counts.get(n, 0) + 1
        clash = False
        for i, (site, lv) in enumerate(zip(sites, level)):
            if counts[site.names[min(lv, len(site.names) - 1)]] > 1 and lv < len(site.names) - 1:
                level[i] += 1
                clash = True
        if not clash:
            break
    used: dict[str, int] = {}
    for site, lv in zip(sites, level):
        n = site.names[min(lv, len(site.names) - 1)]
        used[n] = used.get(n, 0) + 1
        site.name = n if used[n] == 1 else f"{n}#{used[n]}"


def find_sites(source: str, path: str = "<candidate>") -> list[KnobSite]:
    """Every knob with where it is written; BadInput when the source does not parse."""
    src = SourceFile(source, path)
    sites = _triton_sites(src) + _cuda_sites(src)
    sites.sort(key=lambda s: (s.pos, s.line))
    _name_sites(sites)
    return sites


def discover_knobs(source: str, path: str = "<candidate>") -> list[KnobSpec]:
    """The knobs of a candidate's source, in source order (see docs/knobs.md)."""
    return [site.spec() for site in find_sites(source, path)]


def list_knobs(path: str | Path) -> list[KnobSpec]:
    """The knobs of the candidate file at `path` (`kernelopt knobs`); BadInput for a missing or broken
    file, or one that is not a candidate (no ModelNew / kernel_function), as `check` says."""
    from kernelopt.files import read_text
    from kernelopt.problem import load_candidate

    load_candidate(path)
    return discover_knobs(read_text(path, "candidate"), str(path))
