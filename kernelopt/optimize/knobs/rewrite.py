"""Set knob values in a candidate's source, changing only the bytes of those values.

Every other byte -- comments, formatting, quotes, blank lines -- stays identical, so a
rewritten candidate diffs against its parent in exactly the knobs that moved. A knob
that was absent (a launch's `num_warps`, a load's `eviction_policy`) is written by
inserting `, name=value` after the call's last argument, on that argument's line; a
loop given `num_stages` or `loop_unroll_factor` turns `range` into `tl.range`. No edit
adds or removes a line, so knob names that carry line numbers stay valid.
"""

from __future__ import annotations

import ast

from kernelopt.errors import BadInput
from kernelopt.models.optimize import KnobValue
from kernelopt.optimize.knobs.discover import KnobSite, find_sites
from kernelopt.source import apply_edits


def _same(a: KnobValue, b: KnobValue) -> bool:
    # 1 == True and 4 == 4.0 in Python; a knob value must match in type too.
    return a == b and type(a) is type(b)


def in_domain(value: KnobValue, domain: list[KnobValue]) -> bool:
    return any(_same(value, d) for d in domain)


def _render(site: KnobSite, value: KnobValue) -> str:
    if isinstance(value, str):
        return f"{site.quote}{value}{site.quote}"
    return str(value)


def _edits(site: KnobSite, value: KnobValue) -> list[tuple[int, int, str]]:
    if _same(value, site.value):
        return []
    if site.span is not None:
        if site.delete_span is not None and _same(value, site.unset):
            return [(*site.delete_span, "")]  # back to absent: the call reads as it did before the knob was set
        return [(site.span[0], site.span[1], _render(site, value))]
    if _same(value, site.unset):
        return []  # absent already means unset
    if site.insert_at is None or site.kwarg is None:
        raise BadInput(f"knob {site.name}: has no place to write a value")
    edits = [(site.insert_at, site.insert_at, f", {site.kwarg}={_render(site, value)}")]
    if site.rename is not None:
        edits.append(site.rename)
    return edits


def set_knobs(source: str, values: dict[str, KnobValue], path: str = "<candidate>") -> str:
    """`source` with the named knobs set to `values`; BadInput for an unknown knob or a value
    outside its domain. Knobs not named keep their bytes."""
    sites = {s.name: s for s in find_sites(source, path)}
    edits: list[tuple[int, int, str]] = []
    order: list[int] = []
    for name, value in values.items():
        site = sites.get(name)
        if site is None:
            known = ", ".join(sorted(sites)) or "none"
            raise BadInput(f"knob {name!r}: no such knob in {path} (known: {known})")
        if not in_domain(value, site.domain):
            raise BadInput(f"knob {name}: {value!r} is outside its domain {site.domain}")
        for edit in _edits(site, value):
            if edit not in edits:  # two loop knobs both ask for the same range -> tl.range
                edits.append(edit)
                order.append(len(order))
    return apply_edits(source, edits, path, what=f"knobs {', '.join(values)}")


def knob_values(source: str, path: str = "<candidate>") -> dict[str, KnobValue]:
    """name -> current value for every knob of `source`."""
    return {s.name: s.value for s in find_sites(source, path)}


def knob_key(config: dict[str, KnobValue]) -> tuple[tuple[str, str], ...]:
    """A knob configuration as a hashable key; repr keeps 1 and True, '' and None apart."""
    return tuple(sorted((k, repr(v)) for k, v in config.items()))


KNOB_MASK = "_KNOB_"


def structure_hash(source: str, path: str = "<candidate>") -> str:
    """The hash of a candidate's structure: its normalised source with every knob value masked.

    Two sources that differ only in knob values (a knob search move) share it; a transform's
    rewrite that keeps its parent's knob values does not. The loop's duplicate check and the
    knob search key what they have tried on (structure, knob values). A knob written as a
    keyword (`num_warps=4`, `eviction_policy=...`, a loop's `num_stages`) is masked by removing
    the keyword, since the search adds and removes those: with or without it, and in whatever
    order they were added, the structure is the same (`tl.range` left without keywords reads
    as `range`, the form the search started from)."""
    from kernelopt.problem import normalized_source_hash
    from kernelopt.source import SourceFile, keyword_delete_span

    try:
        sites = find_sites(source, path)
        src = SourceFile(source, path)
    except Exception:  # noqa: BLE001 - a file whose knobs cannot be read is all structure
        return normalized_source_hash(source)
    keywords: dict[int, tuple[ast.Call, ast.keyword]] = {}
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg is not None:
                    keywords[src.start(kw.value)] = (node, kw)
    edits: list[tuple[int, int, str]] = []
    removed: dict[int, tuple[ast.Call, int]] = {}  # id(call) -> (call, keywords removed)
    for site in sites:
        if site.span is None:
            continue  # absent: already the canonical form
        hit = keywords.get(site.span[0]) if site.kind in ("launch", "directive", "autotune") else None
        if hit is not None and hit[1].arg == (site.kwarg or hit[1].arg):
            call, kw = hit
            edits.append((*keyword_delete_span(src, call, kw), ""))
            removed[id(call)] = (call, removed.get(id(call), (call, 0))[1] + 1)
        else:
            edits.append((*site.span, KNOB_MASK))
    for node in ast.walk(src.tree):
        call = node.iter if isinstance(node, ast.For) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "range":
            if removed.get(id(call), (call, 0))[1] == len(call.keywords):
                edits.append((src.start(call.func), src.end(call.func), "range"))
    data = source.encode("utf-8")
    out: list[bytes] = []
    pos = 0
    for start, end, text in sorted(set(edits)):
        if start < pos:
            continue  # nested in a span already masked
        out += [data[pos:start], text.encode("utf-8")]
        pos = end
    out.append(data[pos:])
    return normalized_source_hash(b"".join(out).decode("utf-8", "replace"))
