"""Static resource report: registers, spills, shared memory, warps, stages. No ncu needed.

Triton: read from the compiled kernels in the JIT caches of the candidate module
after it ran (`n_regs`, `n_spills`, `metadata.shared`, `num_warps`, `num_stages`);
this needs the GPU driver (the registers are known only once the cubin is loaded)
and runs in a child. CUDA: `ptxas -v` on the candidate's CUDA sources through nvcc;
this needs no GPU. Both work where hardware counters are not permitted.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import types
from pathlib import Path
from typing import Any

from kernelopt.errors import MissingRequirement, ToolFailed
from kernelopt.models.harness import Candidate, Problem
from kernelopt.models.metrics import StaticResources

NVCC_TIMEOUT_S = 300.0


# ---------------------------------------------------------------- Triton

def _jit_functions(module: types.ModuleType) -> list[Any]:
    """JITFunction objects defined in `module`, unwrapping @autotune/@heuristics."""
    from triton.runtime.jit import JITFunction

    found: dict[int, Any] = {}
    for value in list(vars(module).values()):
        fn, depth = value, 0
        while not isinstance(fn, JITFunction) and hasattr(fn, "fn") and depth < 8:
            fn, depth = fn.fn, depth + 1
        if isinstance(fn, JITFunction):
            found[id(fn)] = fn
    return list(found.values())


def _compiled_kernels(jit_fn: Any) -> list[Any]:
    caches = getattr(jit_fn, "device_caches", None)
    kernels: list[Any] = []
    if caches:
        # triton >= 3.2: device -> (kernel_cache, ...); the kernel cache is always first
        for entry in caches.values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            kernels.extend(cache.values())
    else:
        for cache in (getattr(jit_fn, "cache", None) or {}).values():  # triton 3.0/3.1
            kernels.extend(cache.values())
    return kernels


def triton_static(module: types.ModuleType) -> list[StaticResources]:
    """One record per compiled variant of every Triton kernel the module defines."""
    out: list[StaticResources] = []
    for jit_fn in _jit_functions(module):
        for kernel in _compiled_kernels(jit_fn):
            init = getattr(kernel, "_init_handles", None)
            if callable(init) and getattr(kernel, "n_regs", None) is None:
                init()  # loads the cubin: registers and spills are known only then
            md = kernel.metadata
            num_warps = int(getattr(md, "num_warps", 0)) or None
            # Triton's n_spills is the cubin's local memory per thread (spills and stack
            # frame) in 4-byte words: its driver divides CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES by 4.
            n_spills = _int(getattr(kernel, "n_spills", None))
            out.append(
                StaticResources(
                    kernel=str(getattr(md, "name", None) or jit_fn.__name__),
                    source="triton",
                    registers_per_thread=_int(getattr(kernel, "n_regs", None)),
                    spill_bytes=4 * n_spills if n_spills is not None else None,
                    shared_mem_bytes=_int(getattr(md, "shared", None)),
                    num_warps=num_warps,
                    num_stages=_int(getattr(md, "num_stages", None)),
                    threads_per_block=num_warps * 32 if num_warps else None,
                )
            )
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def loaded_candidate_module(candidate: Candidate) -> types.ModuleType | None:
    """The module object the binding already imported for `candidate` (its JIT caches are filled)."""
    import sys

    target = Path(candidate.path).resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == target:
            return module
    return None


def child_static(args: dict[str, Any]) -> dict[str, Any]:
    """`CHILD_MODES["static"]`: run the candidate once on the GPU, then read the Triton caches."""
    from kernelopt.harness import binding
    from kernelopt.harness.timing import require_cuda

    require_cuda("the static report of a Triton kernel")
    import torch

    from kernelopt.harness.protocol import ProfileRequest

    request = ProfileRequest.model_validate(args)
    problem, candidate = request.problem, request.candidate
    prepared = binding.prepare(problem, candidate, device="cuda", seed=request.seed)
    prepared.candidate(prepared.make_inputs(0))
    torch.cuda.synchronize()
    module = loaded_candidate_module(candidate)
    found = triton_static(module) if module is not None else []
    return {"static": [s.model_dump(mode="json") for s in found]}


# ---------------------------------------------------------------- ptxas

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(.*)")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> list[StaticResources]:
    """Parse `ptxas -v` (or `nvcc -Xptxas -v`) output into one record per kernel."""
    records: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _ENTRY.search(line) or _PROPS.search(line)
        if m:
            current = m.group(1)
            records.setdefault(current, {})
            continue
        if current is None:
            continue
        m = _SPILL.search(line)
        if m:
            records[current]["spill"] = int(m.group(2))
            continue
        m = _USED.search(line)
        if m:
            records[current]["regs"] = int(m.group(1))
            smem = _SMEM.search(m.group(2))
            records[current]["smem"] = int(smem.group(1)) if smem else 0
    return [
        StaticResources(
            kernel=_demangle(name),
            source="ptxas",
            registers_per_thread=r.get("regs"),
            spill_bytes=r.get("spill"),
            shared_mem_bytes=r.get("smem"),
        )
        for name, r in records.items()
        if "regs" in r
    ]


def _demangle(name: str) -> str:
    """'_Z10add_kernelPKfS0_Pfi' -> 'add_kernel' (the name part of an Itanium mangled symbol)."""
    m = re.match(r"_Z(?:N\d*)?(\d+)(\w+)", name)
    if m:
        n = int(m.group(1))
        return m.group(2)[:n]
    return name


def ptxas_static(candidate: Candidate, *, arch: str = "sm_90") -> list[StaticResources]:
    """Compile the candidate's CUDA sources with `nvcc -Xptxas -v` (no GPU needed) and parse."""
    from kernelopt.harness.envinfo import find_tool
    from kernelopt.problem import cuda_sources

    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise MissingRequirement("nvcc not found: the static report of a CUDA kernel needs it (set CUDA_HOME)",
                                 reason="tool_missing")
    sources = cuda_sources(candidate.path)
    if not sources:
        return []
    try:
        from torch.utils.cpp_extension import include_paths

        includes = [f"-I{p}" for p in include_paths(device_type="cuda")]
    except Exception:  # noqa: BLE001 - without torch headers plain CUDA sources still compile
        includes = []
    out: list[StaticResources] = []
    with tempfile.TemporaryDirectory(prefix="kernelopt-ptxas-") as tmp:
        for i, src in enumerate(sources):
            cu = Path(tmp) / f"src{i}.cu"
            cu.write_text(src)
            cmd = [nvcc, f"-arch={arch}", "-Xptxas", "-v", "-c", str(cu), "-o", str(Path(tmp) / f"src{i}.o"), *includes]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                raise ToolFailed(f"nvcc did not finish within {NVCC_TIMEOUT_S:g} s compiling {candidate.path}",
                                 reason="timeout") from None
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()
                raise ToolFailed(f"nvcc failed on {candidate.path}: {tail[-1] if tail else proc.returncode}")
            out.extend(parse_ptxas(proc.stderr + proc.stdout))
    return out


def static_metrics(static: list[StaticResources]) -> dict[str, float]:
    """Catalog keys (static_*, num_warps, num_stages) from the heaviest static record."""
    if not static:
        return {}
    top = max(static, key=lambda s: (s.registers_per_thread or 0, s.shared_mem_bytes or 0))
    pairs = {
        "static_registers_per_thread": top.registers_per_thread,
        "static_spill_bytes": top.spill_bytes,
        "static_shared_mem_bytes": top.shared_mem_bytes,
        "num_warps": top.num_warps,
        "num_stages": top.num_stages,
    }
    return {k: float(v) for k, v in pairs.items() if v is not None}
