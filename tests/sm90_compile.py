"""Compile one @triton.jit kernel of a file for sm_90 offline (no GPU, no driver) and print JSON.

Run as a script in a process without TRITON_INTERPRET (the tests' own process interprets):
    python3 tests/sm90_compile.py FILE KERNEL '{"BLOCK": 1024}' ['["n_cols", "stride"]']
Parameters: constexprs take the given values, pointers (bare terms of a tl.load/tl.store
address, or of an atomic's, also through `[:, None]` and a base bound once to a name) are *fp32, every other parameter i32; those named in the optional
fourth argument (and every pointer) are specialised as multiples of 16, as Triton does at a
launch where they are. Prints {"ok": true, "ptx_lines": N, "ttir_dots": N, "ptx_v4": N} (ptx_v4:
128-bit global loads and stores) or {"ok": false, "error": "..."}. It catches what only the compiler checks: scalar types
through tl.where and if, tl.range over runtime bounds, tl.dot operand layouts.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys


def main() -> None:
    path, kname, consts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    aligned = set(json.loads(sys.argv[4])) if len(sys.argv) > 4 else set()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernelopt.optimize.transforms.autotune_table import _addends
    from kernelopt.optimize.transforms.triton_edit import parse, tl_calls

    source = open(path).read()
    p = parse(source, path)
    k = p.kernels[kname]
    # a pointer is a bare term of an address, seen through `p[:, None]` and through names bound
    # once to an address (`a_ptrs = A + rm * sam`)
    bound = {}
    for n in ast.walk(k.fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            bound[n.targets[0].id] = None if n.targets[0].id in bound else n.value

    def terms(node: ast.AST, seen: frozenset = frozenset()) -> set[str]:
        out: set[str] = set()
        for i, t in enumerate(_addends(node)):
            while isinstance(t, ast.Subscript):
                t = t.value
            if isinstance(t, ast.Name):
                if t.id in k.params:
                    out.add(t.id)
                elif i == 0 and bound.get(t.id) is not None and t.id not in seen:  # the address's base
                    out |= terms(bound[t.id], seen | {t.id})
            elif isinstance(t, ast.BinOp) and isinstance(t.op, (ast.Add, ast.Sub)):
                out |= terms(t, seen)
        return out

    ptrs: set[str] = set()
    for attr in ("load", "store", "atomic_add", "atomic_max", "atomic_min"):
        for c in tl_calls(k.fn, p.al, attr):
            ptrs |= terms(c.args[0])
    sig = {n: "constexpr" if n in k.constexprs else "*fp32" if n in ptrs else "i32" for n in k.params}
    spec = importlib.util.spec_from_file_location("candidate", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        fn = getattr(mod, kname)
        attrs = {(k.params.index(n),): [["tt.divisibility", 16]] for n in k.params
                 if n in aligned or (aligned and sig[n] == "*fp32")} or None
        src = ASTSource(fn=fn, signature=sig, constexprs={n: consts.get(n, 1) for n in k.constexprs}, attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        ptx = compiled.asm["ptx"]
        print(json.dumps({"ok": True, "ptx_lines": ptx.count("\n"), "ttir_dots": compiled.asm["ttir"].count("tt.dot "),
                          "ptx_v4": ptx.count("ld.global.v4") + ptx.count("st.global.v4")}))
    except Exception as exc:  # noqa: BLE001 - the message is the result
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}))


if __name__ == "__main__":
    main()
