"""Static resource report: ptxas -v parsing, nvcc on a CUDA candidate, Triton JIT caches."""

import types
from pathlib import Path

import pytest

from kernelopt.errors import MissingRequirement
from kernelopt.problem import load_candidate
from kernelopt.profile.static import parse_ptxas, ptxas_static, static_metrics, triton_static

FX = Path(__file__).parent / "fixtures" / "profile"


def test_parse_real_ptxas_output():
    records = {r.kernel: r for r in parse_ptxas((FX / "ptxas" / "ptxas_v.txt").read_text())}
    assert set(records) == {"tile_kernel", "add_kernel"}
    tile, add = records["tile_kernel"], records["add_kernel"]
    assert (tile.registers_per_thread, tile.spill_bytes, tile.shared_mem_bytes) == (47, 0, 4224)
    assert (add.registers_per_thread, add.shared_mem_bytes) == (12, 0)
    assert all(r.source == "ptxas" for r in records.values())


def test_parse_spills():
    text = (
        "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\n"
        "ptxas info    : Function properties for _Z1kPf\n"
        "    64 bytes stack frame, 40 bytes spill stores, 40 bytes spill loads\n"
        "ptxas info    : Used 255 registers, 380 bytes cmem[0]\n"
    )
    (r,) = parse_ptxas(text)
    assert (r.kernel, r.registers_per_thread, r.spill_bytes, r.shared_mem_bytes) == ("k", 255, 40, 0)
    assert static_metrics([r]) == {"static_registers_per_thread": 255.0, "static_spill_bytes": 40.0, "static_shared_mem_bytes": 0.0}


def test_nvcc_on_a_cuda_candidate():
    candidate = load_candidate(FX / "cuda_add_kernel.py")
    assert candidate.backend == "cuda"
    try:
        (r,) = ptxas_static(candidate)
    except MissingRequirement:
        pytest.skip("nvcc not installed")
    assert r.kernel == "add_kernel" and r.registers_per_thread > 0 and r.shared_mem_bytes == 1024


def test_triton_caches_are_read_through_autotune():
    """A JITFunction (wrapped in @autotune) whose cache holds a compiled kernel: its resources are reported."""
    import triton
    from triton.runtime.jit import JITFunction

    def scale(x_ptr, BLOCK: "tl.constexpr"):  # noqa: F821 - never compiled here
        pass

    jit = JITFunction(scale)
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=[])(jit)

    class Compiled:  # the fields Triton's CompiledKernel carries after its cubin is loaded
        n_regs, n_spills = 40, 8
        metadata = types.SimpleNamespace(name="scale", shared=2048, num_warps=8, num_stages=3)

    jit.device_caches[0] = ({"key": Compiled()}, {}, None, None, None)
    module = types.ModuleType("cand")
    module.scale = tuned
    module.other = 3
    (r,) = triton_static(module)
    # n_spills counts 4-byte words of local memory (Triton's driver divides the bytes by 4).
    assert (r.kernel, r.registers_per_thread, r.spill_bytes, r.shared_mem_bytes) == ("scale", 40, 32, 2048)
    assert (r.num_warps, r.num_stages, r.threads_per_block) == (8, 3, 256)
    assert static_metrics([r])["num_warps"] == 8.0
