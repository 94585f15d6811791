"""cuda_block_template: a CUDA launch's literal block size becomes a #define the grid follows.

    kernel<<<(n + 255) / 256, 256>>>(...)

writes the threads per block twice, and the knob discovery sees only the block (`kernel.block`):
moving it alone launches too few blocks. The rewrite names it once,

    #define BLOCK_SIZE 256
    kernel<<<(n + BLOCK_SIZE - 1) / BLOCK_SIZE, BLOCK_SIZE>>>(...)

(`__launch_bounds__(256)` on the kernel follows too), so the block size is one knob
(`BLOCK_SIZE`, threads 32..1024) whose every value covers all `n` elements: the kernel reads
its block size through blockDim, which is what the launch says.

It declines a grid not written as `(n + B - 1) / B` (it would not follow), a kernel body that
writes the same number itself (a shared array sized by the block would have to follow too:
that is a change of meaning this rewrite does not judge), block sizes that are already named,
and CUDA strings that are not triple-quoted (the #define needs a line of its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelopt.errors import BadInput
from kernelopt.models.transform import ParamValue, SiteReport, TransformParam
from kernelopt.optimize.transforms.base import TransformError
from kernelopt.source import CUDA_GLOBAL, CUDA_LAUNCH, SourceFile, apply_edits, cuda_strings

NAME = "cuda_block_template"
THREADS = [32, 64, 128, 256, 512, 1024]
_GRID_MINUS1 = re.compile(rb"^\(\s*(.+?)\s*\+\s*(\d+)\s*\)\s*/\s*(\d+)$")  # (n + 255) / 256
_GRID_B_MINUS_1 = re.compile(rb"^\(\s*(.+?)\s*\+\s*(\d+)\s*-\s*1\s*\)\s*/\s*(\d+)$")  # (n + 256 - 1) / 256
_TRIPLE = re.compile(rb"^[rRuU]?('''|\"\"\")")


def kernel_span(seg: bytes, name: str) -> tuple[int, int, int] | None:
    """(start of `__global__`, start of the body `{`, end after its `}`) of the named kernel in `seg`."""
    for m in CUDA_GLOBAL.finditer(seg):
        if m.group(1).decode() != name:
            continue
        brace = seg.find(b"{", m.end())
        if brace < 0:
            return None
        depth = 0
        for i in range(brace, len(seg)):
            if seg[i:i + 1] == b"{":
                depth += 1
            elif seg[i:i + 1] == b"}":
                depth -= 1
                if depth == 0:
                    return m.start(), brace, i + 1
        return None
    return None


@dataclass
class _Site:
    kernel: str
    line: int
    block: int | None = None
    why: str | None = None
    edits: list[tuple[int, int, str]] = field(default_factory=list)  # file offsets; '{B}' = the define's name
    define_at: int = 0
    name: str = "BLOCK_SIZE"


def _sites(src: SourceFile) -> list[_Site]:
    out: list[_Site] = []
    for s, _e, seg in cuda_strings(src):
        kernels = [m.group(1).decode() for m in CUDA_GLOBAL.finditer(seg)]
        launches: dict[str, list[re.Match[bytes]]] = {}
        for m in CUDA_LAUNCH.finditer(seg):
            launches.setdefault(m.group(1).decode(), []).append(m)
        taken = set(re.findall(rb"\b[A-Za-z_]\w*\b", seg))
        many = len([k for k in kernels if k in launches]) > 1
        for kname in kernels:
            site = _Site(kname, src.line_of(s + seg.find(kname.encode())))
            out.append(site)
            found = launches.get(kname)
            if not found:
                site.why = "no <<<grid, block>>> launch of this kernel in the CUDA source"
                continue
            blocks = {m.group(3) for m in found}
            if len(blocks) != 1:
                site.why = "launched with different block sizes"
                continue
            block = blocks.pop()
            if not block.isdigit():
                site.why = f"the block size {block.decode()} is already named (a knob when bound once to a literal)"
                continue
            n = int(block)
            site.block = n
            site.line = src.line_of(s + found[0].start(3))
            if not _TRIPLE.match(seg):
                site.why = "the CUDA string is not triple-quoted (the #define needs a line of its own)"
                continue
            span = kernel_span(seg, kname)
            if span is None:
                site.why = "the kernel's body could not be delimited"
                continue
            head, body_start, body_end = span
            hit = re.search(rb"\b%d\b" % n, seg[body_start:body_end])
            if hit:
                line = src.line_of(s + body_start + hit.start())
                site.why = (f"the kernel body writes {n} itself (line {line}): if it is the block size it "
                            "would have to change with it")
                continue
            name = f"{kname.upper()}_BLOCK_SIZE" if many else "BLOCK_SIZE"
            while name.encode() in taken:
                name += "_"
            site.name = name
            for m in found:
                grid = m.group(2)
                g = _GRID_MINUS1.match(grid)
                ok = g is not None and int(g.group(2)) == n - 1 and int(g.group(3)) == n
                if not ok:
                    g = _GRID_B_MINUS_1.match(grid)
                    ok = g is not None and int(g.group(2)) == n and int(g.group(3)) == n
                if not ok or g is None:
                    site.why = (f"the grid {grid.decode()} is not written as (n + {n - 1}) / {n}: it would not "
                                "follow the block size")
                    break
                site.edits.append((s + m.start(2), s + m.end(2), f"({g.group(1).decode()} + {{B}} - 1) / {{B}}"))
                site.edits.append((s + m.start(3), s + m.end(3), "{B}"))
            if site.why:
                site.edits = []
                continue
            bounds = re.compile(rb"__launch_bounds__\s*\(\s*(%d)\b" % n).search(seg, head, body_start)
            if bounds:
                site.edits.append((s + bounds.start(1), s + bounds.end(1), "{B}"))
            includes = list(re.finditer(rb"^[ \t]*#[ \t]*include[^\n]*\n", seg, re.M))
            if includes:
                site.define_at = s + includes[-1].end()
            else:
                q = _TRIPLE.match(seg)
                assert q is not None
                site.define_at = s + q.end() + (1 if seg[q.end():q.end() + 1] == b"\n" else 0)
    return out


class CudaBlockTemplate:
    name = NAME
    backend = "cuda"
    summary = "a CUDA launch's literal block size becomes one #define that the grid and __launch_bounds__ follow"
    requires = ["cuda"]
    params = [TransformParam(name="BLOCK_SIZE", default=None, domain=[*THREADS, None],
                             doc="threads per block written into the #define (None: keep the current size)")]

    def sites(self, source: str, path: str = "<candidate>") -> list[SiteReport]:
        try:
            src = SourceFile(source, path)
        except BadInput as exc:
            return [SiteReport(transform=NAME, applies=False, reason=f"the source does not parse: {exc}")]
        found = _sites(src)
        if not found:
            return [SiteReport(transform=NAME, applies=False, reason="no CUDA source (__global__) in a Python string")]
        out = []
        for site in found:
            if site.why:
                out.append(SiteReport(transform=NAME, applies=False, reason=site.why, kernel=site.kernel,
                                      line=site.line))
            else:
                out.append(SiteReport(transform=NAME, site=site.kernel, applies=True, kernel=site.kernel,
                                      line=site.line, params={"BLOCK_SIZE": site.block},
                                      reason=f"block {site.block} written at the launch and in the grid: "
                                             f"one #define {site.name}"))
        return out

    def apply(self, source: str, site: str, **params: ParamValue) -> str:
        try:
            src = SourceFile(source, "<candidate>")
        except BadInput as exc:
            raise TransformError(f"the source does not parse: {exc}") from None
        name = site.split("@")[0]
        found = next((s for s in _sites(src) if s.kernel == name), None)
        if found is None:
            raise TransformError(f"no CUDA kernel {name!r} in the source")
        if found.why:
            raise TransformError(f"{name}: {found.why}")
        value = params.get("BLOCK_SIZE") or found.block
        if value not in THREADS:
            raise TransformError(f"BLOCK_SIZE={value!r}: expected one of {THREADS}")
        edits = [(found.define_at, found.define_at, f"#define {found.name} {value}\n")]
        edits += [(a, b, t.replace("{B}", found.name)) for a, b, t in found.edits]
        return apply_edits(source, edits, what=f"{NAME} edits")
