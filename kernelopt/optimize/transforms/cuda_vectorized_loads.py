"""cuda_vectorized_loads: 16-byte loads and stores for a contiguous elementwise CUDA kernel.

A kernel of the form

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];           // or `if (i >= n) return; ...`

issues one 4-byte (or 2-byte) load per tensor per thread. The rewrite gives each thread
VEC consecutive elements (4 floats, or 8 half/bfloat16 values): when all of them are in
range and every pointer it touches is 16-byte aligned, each tensor is read (and written)
with one 16-byte access (`float4`; `uint4` into an aligned local array for halves) and the
body runs once per lane on registers; otherwise (the tail, or a misaligned view) the
original body runs per element in a loop of VEC. Every launch gets `((grid) + VEC - 1) /
VEC` blocks, which cover at least what `grid` blocks of one element per thread did.

The body must touch memory only as `p[i]` of pointer parameters of one element type (float,
or a 2-byte half/bfloat16 type), use `i` nowhere else, and hold no `return`, barrier, atomic
or warp shuffle (each lane's copy must mean exactly what the scalar body means). Other
kernels are declined with the reason.
"""

from __future__ import annotations

import re

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.optimize.transforms.cuda_block_template import kernel_span
from kernelopt.source import CUDA_GLOBAL, CUDA_LAUNCH, SourceFile, apply_edits, cuda_strings

NAME = "cuda_vectorized_loads"
VEC = 4  # floats per float4
LANES = "xyzw"
# 2-byte element types: 8 per 16-byte access, through an aligned local array loaded as one uint4
HALF_TYPES = {b"__half", b"half", b"__nv_bfloat16", b"at::Half", b"c10::Half", b"at::BFloat16", b"c10::BFloat16"}
_INDEX_DECL = re.compile(
    rb"^\s*(?:const\s+)?(int|unsigned|unsigned int|long|long long|int64_t|size_t|auto)\s+([A-Za-z_]\w*)\s*=\s*([^;]+);")
_GLOBAL_INDEX = {b"blockIdx.x*blockDim.x+threadIdx.x", b"threadIdx.x+blockIdx.x*blockDim.x",
                 b"blockDim.x*blockIdx.x+threadIdx.x", b"threadIdx.x+blockDim.x*blockIdx.x"}
_PARAM = re.compile(rb"^\s*(const\s+)?([A-Za-z_][\w:]*)\s*(?:const\s*)?\*\s*(?:const\s+)?(?:__restrict__\s+)?([A-Za-z_]\w*)\s*$")
_FORBIDDEN = re.compile(rb"\b(return|__syncthreads|__syncwarp|atomic\w*|__shfl\w*|goto|asm)\b")
_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)


def _strip_casts(expr: bytes) -> bytes:
    e = re.sub(rb"\((?:int|unsigned|long long|int64_t|size_t|long)\)", b"", expr)
    return re.sub(rb"[\s()]", b"", e)


def _matching(text: bytes, open_at: int) -> int:
    """Index just after the bracket closing the one at `open_at`, or -1."""
    pairs = {b"(": b")", b"{": b"}"}
    o, c = text[open_at:open_at + 1], pairs[text[open_at:open_at + 1]]
    depth = 0
    for i in range(open_at, len(text)):
        ch = text[i:i + 1]
        if ch == o:
            depth += 1
        elif ch == c:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


class _Plan:
    def __init__(self) -> None:
        self.body_span = (0, 0)  # file offsets of the text between the kernel's braces
        self.idx_type = b"int"
        self.idx = b"i"
        self.idx_expr = b""
        self.bound = b""
        self.guarded = b""  # the scalar body run for one element (braced)
        self.reads: list[str] = []
        self.elem = b""  # the element type every touched pointer shares
        self.writes: list[str] = []
        self.launches: list[tuple[int, int, bytes]] = []  # file offsets of each launch's grid


def _plan(seg: bytes, s: int, kname: str) -> _Plan | str:
    span = kernel_span(seg, kname)
    if span is None:
        return "the kernel's body could not be delimited"
    head, open_at, end = span
    sig_open = seg.find(b"(", seg.find(kname.encode(), head))
    sig_close = _matching(seg, sig_open)
    params: dict[str, tuple[bool, bytes]] = {}  # name -> (const, element type)
    for part in seg[sig_open + 1:sig_close - 1].split(b","):
        m = _PARAM.match(part)
        if m:
            params[m.group(3).decode()] = (m.group(1) is not None, m.group(2))
    body = seg[open_at + 1:end - 1]
    plan = _Plan()
    plan.body_span = (s + open_at + 1, s + end - 1)
    code = _COMMENTS.sub(lambda m: b" " * len(m.group(0)), body)
    m = _INDEX_DECL.match(code)
    if m is None or _strip_casts(m.group(3)) not in _GLOBAL_INDEX:
        return "does not start with i = blockIdx.x * blockDim.x + threadIdx.x (one element per thread)"
    plan.idx_type, plan.idx, plan.idx_expr = m.group(1), m.group(2), m.group(3).strip()
    rest_at = m.end()
    rest = code[rest_at:]
    idx = re.escape(plan.idx)
    lt = re.match(rb"\s*if\s*\(\s*%s\s*<\s*" % idx, rest)
    ge = re.match(rb"\s*if\s*\(\s*%s\s*>=\s*" % idx, rest)
    if lt or ge:
        cond_open = rest.find(b"(")
        cond_close = _matching(rest, cond_open)
        plan.bound = rest[(lt or ge).end():cond_close - 1].strip()  # type: ignore[union-attr]
        after = rest[cond_close:]
        if lt:
            stripped = after.lstrip()
            lead = len(after) - len(stripped)
            if stripped.startswith(b"{"):
                close = _matching(after, lead)
                inner_code, tail = after[lead:close], after[close:]
            else:
                semi = after.find(b";")
                inner_code, tail = after[lead:semi + 1], after[semi + 1:]
            if tail.strip():
                return "statements after the bounds check"
            start = rest_at + cond_close + lead
            plan.guarded = body[start:start + len(inner_code)]
            if not stripped.startswith(b"{"):
                plan.guarded = b"{ " + plan.guarded + b" }"
        else:
            ret = re.match(rb"\s*return\s*;", after)
            if ret is None:
                return "the bounds check does not return"
            start = rest_at + cond_close + ret.end()
            inner_code = after[ret.end():]
            plan.guarded = b"{" + body[start:] + b"\n}"
    else:
        return "no bounds check if (i < n) / if (i >= n) return right after the index"
    if _FORBIDDEN.search(inner_code):
        return f"the body uses {_FORBIDDEN.search(inner_code).group(1).decode()}: a per-lane copy would change it"  # type: ignore[union-attr]
    if b"?" in plan.bound or b"," in plan.bound:
        return "the bound is not a plain expression"
    subs = list(re.finditer(rb"\b([A-Za-z_]\w*)\s*\[\s*([^\]]*?)\s*\]", inner_code))
    for sub in subs:
        name = sub.group(1).decode()
        if sub.group(2) != plan.idx:
            return f"indexes {name}[{sub.group(2).decode()}]: only p[{plan.idx.decode()}] accesses can be vectorised"
        if name not in params:
            return f"{name} is not a pointer parameter"
        elem = params[name][1]
        if elem != b"float" and elem not in HALF_TYPES:
            return (f"{name} points to {elem.decode()}: only float (float4) and 2-byte half/bfloat16 "
                    "(8 per 16 bytes) are vectorised here")
        if plan.elem and plan.elem != elem:
            return f"mixes {plan.elem.decode()} and {elem.decode()} pointers: one vector width cannot serve both"
        plan.elem = elem
        write = re.match(rb"\s*([-+*/%&|^]?=)(?!=)", inner_code[sub.end():])
        if write and name not in plan.writes:
            if params[name][0]:
                return f"writes through const {name}"
            plan.writes.append(name)
        if not write or re.match(rb"\s*[-+*/%&|^]=", inner_code[sub.end():]):
            if name not in plan.reads:
                plan.reads.append(name)
    if not subs:
        return "touches no p[i] of a pointer parameter"
    without = re.sub(rb"\b[A-Za-z_]\w*\s*\[[^\]]*\]", b"", inner_code)
    if re.search(rb"\b%s\b" % idx, without):
        return f"uses {plan.idx.decode()} beyond p[{plan.idx.decode()}] (each lane would need its own value)"
    # A pointer read after the body writes it reads the value written: reads of written pointers
    # come from the same float4 register, which the lane code updates in place.
    return plan


def vec_of(plan: _Plan) -> int:
    return VEC if plan.elem == b"float" else 8


def _rewrite(plan: _Plan, kname: str) -> str:
    i, n, t = plan.idx.decode(), plan.bound.decode(), plan.idx_type.decode()
    elem, vec = plan.elem.decode(), vec_of(plan)
    ptrs = plan.reads + [w for w in plan.writes if w not in plan.reads]
    v = {p: f"ko_{p}_v" for p in ptrs}
    ind = "    "
    wide = "float4" if elem == "float" else "uint4"
    out = [f"\n{ind}// {NAME}: {vec} consecutive elements per thread, one 16-byte access per tensor when aligned "
           "and in range",
           f"{ind}const {t} ko_base = ({plan.idx_expr.decode()}) * {vec};",
           f"{ind}const bool ko_aligned = ((" + " | ".join(f"reinterpret_cast<unsigned long long>({p})" for p in ptrs)
           + ") & 15) == 0;",
           f"{ind}if (ko_aligned && ko_base + {vec} <= ({n})) {{"]
    for p in ptrs:
        load = f"reinterpret_cast<const {wide}*>({p})[ko_base / {vec}]"
        if elem == "float":
            out.append(f"{ind}{ind}float4 {v[p]}" + (f" = {load};" if p in plan.reads else ";"))
        else:
            out.append(f"{ind}{ind}alignas(16) {elem} {v[p]}[{vec}];")
            if p in plan.reads:
                out.append(f"{ind}{ind}*reinterpret_cast<uint4*>({v[p]}) = {load};")
    guarded = plan.guarded.decode()
    for lane in range(vec):
        code = guarded
        for p in ptrs:
            ref = f"{v[p]}.{LANES[lane]}" if elem == "float" else f"{v[p]}[{lane}]"
            code = re.sub(r"\b%s\s*\[\s*%s\s*\]" % (re.escape(p), re.escape(i)), ref, code)
        out.append(f"{ind}{ind}{code}")
    for p in plan.writes:
        value = v[p] if elem == "float" else f"*reinterpret_cast<const uint4*>({v[p]})"
        out.append(f"{ind}{ind}reinterpret_cast<{wide}*>({p})[ko_base / {vec}] = {value};")
    out += [f"{ind}}} else {{",
            f"{ind}{ind}for ({t} {i} = ko_base; {i} < ko_base + {vec}; ++{i}) {{",
            f"{ind}{ind}{ind}if ({i} < ({n})) {guarded}",
            f"{ind}{ind}}}",
            f"{ind}}}",
            ""]
    return "\n".join(out)


def _sites(src: SourceFile) -> list[tuple[str, int, _Plan | str]]:
    out: list[tuple[str, int, _Plan | str]] = []
    for s, _e, seg in cuda_strings(src):
        for m in CUDA_GLOBAL.finditer(seg):
            kname = m.group(1).decode()
            line = src.line_of(s + m.start(1))
            plan = _plan(seg, s, kname)
            if isinstance(plan, _Plan):
                plan.launches = [(s + lm.start(2), s + lm.end(2), lm.group(2)) for lm in CUDA_LAUNCH.finditer(seg)
                                 if lm.group(1).decode() == kname]
                if not plan.launches:
                    plan = "no <<<grid, block>>> launch of this kernel in the CUDA source"
            out.append((kname, line, plan))
    return out


class CudaVectorizedLoads:
    name = NAME
    backend = "cuda"
    summary = "16-byte loads/stores (float4; 8 halves) with a scalar tail for a contiguous elementwise CUDA kernel"
    requires = ["cuda"]
    params: list[TransformParam] = []

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        try:
            src = SourceFile(source, path)
        except BadInput as exc:
            return [SiteReport(transform=NAME, applies=False, reason=f"the source does not parse: {exc}")]
        found = _sites(src)
        if not found:
            return [SiteReport(transform=NAME, applies=False, reason="no CUDA source (__global__) in a Python string")]
        out = []
        for kname, line, plan in found:
            if isinstance(plan, str):
                out.append(SiteReport(transform=NAME, applies=False, reason=plan, kernel=kname, line=line))
            else:
                out.append(SiteReport(transform=NAME, site=kname, applies=True, kernel=kname, line=line,
                                      reason=f"reads {', '.join(plan.reads) or 'nothing'}, writes "
                                             f"{', '.join(plan.writes) or 'nothing'} at [{plan.idx.decode()}]: "
                                             f"one 16-byte access per {vec_of(plan)} elements"))
        return out

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        if params:
            raise TransformError(f"{NAME} takes no parameters (got {', '.join(sorted(params))})")
        try:
            src = SourceFile(source, "<candidate>")
        except BadInput as exc:
            raise TransformError(f"the source does not parse: {exc}") from None
        name = site.split("@")[0]
        found = next((p for k, _, p in _sites(src) if k == name), None)
        if found is None:
            raise TransformError(f"no CUDA kernel {name!r} in the source")
        if isinstance(found, str):
            raise TransformError(f"{name}: {found}")
        edits = [(found.body_span[0], found.body_span[1], _rewrite(found, name))]
        vec = vec_of(found)
        edits += [(a, b, f"(({g.decode()}) + {vec - 1}) / {vec}") for a, b, g in found.launches]
        return apply_edits(source, edits, what=f"{NAME} edits")
