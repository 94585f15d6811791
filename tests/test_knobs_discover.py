"""Knob discovery: what is a knob, what is not, names, lines and domains (kernelopt.optimize.knobs)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.models.optimize import KnobSpec
from kernelopt.optimize.knobs import discover_knobs
from kernelopt.optimize.knobs.discover import launch_params

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "knobs"
ZOO = sorted((ROOT / "benchmarks" / "zoo").glob("*/kernel.py"))
EXAMPLES = sorted((ROOT / "examples").glob("*/kernel.py"))


def knobs_of(path: Path) -> dict[str, KnobSpec]:
    found = discover_knobs(path.read_text(encoding="utf-8"), str(path))
    return {k.name: k for k in found}


def line_of(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def test_matvec_constexprs_follow_the_tuple_assignment_to_its_literals() -> None:
    path = ROOT / "examples" / "matvec" / "kernel.py"
    k = knobs_of(path)
    assigned = line_of(path, "BLOCK_M, BLOCK_K = 16, 128")
    assert (k["BLOCK_M"].value, k["BLOCK_M"].line, k["BLOCK_M"].kind) == (16, assigned, "constexpr")
    assert (k["BLOCK_K"].value, k["BLOCK_K"].line) == (128, assigned)
    assert k["BLOCK_M"].kernel == "matvec_kernel"
    # a block size: powers of two from 16 to 8192
    assert k["BLOCK_M"].domain == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    # absent launch meta-parameters are knobs at Triton's default, written by insertion
    defaults = launch_params()
    assert k["num_warps"].value == defaults["num_warps"] and k["num_warps"].kind == "launch"
    assert k["num_warps"].domain == [1, 2, 4, 8, 16, 32]
    assert k["num_stages"].domain == [1, 2, 3, 4, 5, 6]
    # the K loop and each load/store carry directive knobs
    loop = line_of(path, "for k0 in range(0, K, BLOCK_K)")
    assert k[f"loop@L{loop}.num_stages"].value is None
    assert k[f"loop@L{loop}.loop_unroll_factor"].domain == [None, 1, 2, 4, 8]
    store = line_of(path, "tl.store(")
    assert k[f"store@L{store}.cache_modifier"].domain == ["", ".wb", ".cg", ".cs", ".wt"]
    load = line_of(path, "a = tl.load(")
    assert k[f"load@L{load}.cache_modifier"].domain == ["", ".cg", ".ca"]
    assert k[f"load@L{load}.eviction_policy"].domain == ["", "evict_first", "evict_last"]


def test_launch_params_follow_the_installed_triton() -> None:
    triton = pytest.importorskip("triton")
    sig = inspect.signature(triton.Config).parameters
    params = launch_params()
    for name in ("num_ctas", "maxnreg"):
        assert (name in params) == (name in sig)
    k = knobs_of(ROOT / "examples" / "matvec" / "kernel.py")
    assert ("num_ctas" in k) == ("num_ctas" in sig)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_a_block_computed_from_the_shape_is_not_a_knob(name: str) -> None:
    k = knobs_of(ROOT / "examples" / name / "kernel.py")
    assert "BLOCK" not in k and not any(s.kind == "constexpr" for s in k.values())
    assert "num_warps" in k  # the launch itself still has knobs


def test_derived_values_are_not_knobs_and_literals_are() -> None:
    path = FIX / "derived.py"
    k = knobs_of(path)
    kinds = {s.name for s in k.values() if s.kind in ("constexpr", "launch")}
    # next_power_of_2(cols), a bool from shapes, a size from the input, a reassigned variable
    assert not {"BLOCK", "EVEN", "CHUNK", "num_warps"} & kinds
    # a module-level constant feeding the launch is a knob, at the constant's line
    assert k["ROWS"].value == 2 and k["ROWS"].line == line_of(path, "ROWS_PER_PROGRAM = 2")
    # `warps, stages = 4, 1`: stages is bound once (a knob), warps twice (derived)
    assert k["num_stages"].value == 1 and k["num_stages"].line == line_of(path, "warps, stages = 4, 1")
    # directives already written are read back
    loop = line_of(path, "for r in tl.range(")
    assert k[f"loop@L{loop}.num_stages"].value == 2
    load = line_of(path, "x = tl.load(")
    assert k[f"load@L{load}.eviction_policy"].value == "evict_last"


def test_autotune_configs_are_knobs_and_the_tuned_values_are_left_to_the_autotuner() -> None:
    path = FIX / "autotuned.py"
    k = knobs_of(path)
    # decided by the autotuner: value None; qualified because add_kernel also has BLOCK
    assert k["scale_kernel.BLOCK"].value is None and k["scale_kernel.BLOCK"].kind == "autotune"
    assert k["scale_kernel.num_warps"].value is None
    assert (k["config0.BLOCK"].value, k["config1.BLOCK"].value) == (128, 256)
    assert (k["config0.num_warps"].value, k["config1.num_warps"].value) == (4, 8)
    assert k["config1.num_stages"].value == 2
    assert k["config0.num_stages"].value == launch_params()["num_stages"]  # absent: the default
    # BLOCK passed by position to the plain kernel is a knob too
    assert k["add_kernel.BLOCK"].value == 512 and k["add_kernel.BLOCK"].kind == "constexpr"
    assert k["add_kernel.num_warps"].kind == "launch"


def test_cuda_defines_constexprs_and_launch_arguments() -> None:
    path = FIX / "cuda_launch.py"
    k = knobs_of(path)
    assert k["ITEMS_PER_THREAD"].value == 4 and k["ITEMS_PER_THREAD"].kind == "define"
    assert k["ITEMS_PER_THREAD"].line == line_of(path, "#define ITEMS_PER_THREAD 4")
    assert k["UNROLL"].value == 2 and k["UNROLL"].line == line_of(path, "constexpr int UNROLL = 2;")
    # a named threads-per-block bound to a literal once: a knob with a threads domain
    assert k["threads"].value == 128 and k["threads"].domain == [32, 64, 128, 256, 512, 1024]
    assert k["threads"].kernel == "scale_kernel"
    # literal launch arguments
    assert (k["sum_kernel.grid"].value, k["sum_kernel.block"].value) == (1, 32)
    # a block count computed from the input is not a knob
    assert "blocks" not in k and "scale_kernel.grid" not in k


def test_cuda_zoo_threads_define_gets_a_threads_domain() -> None:
    k = knobs_of(ROOT / "benchmarks" / "zoo" / "reduce_barrier" / "kernel.py")
    assert k["THREADS"].value == 1024 and k["THREADS"].domain == [32, 64, 128, 256, 512, 1024]
    assert k["ROWS_PER_CTA"].value == 16 and 16 in k["ROWS_PER_CTA"].domain


def test_dot_kernels_keep_tiles_at_16_or_more() -> None:
    k = knobs_of(ROOT / "benchmarks" / "zoo" / "tensor_matmul" / "kernel.py")
    for name in ("BM", "BN", "BK"):
        assert min(k[name].domain) == 16 and all(v & (v - 1) == 0 for v in k[name].domain)  # type: ignore[operator]
    assert (k["BM"].value, k["BK"].value, k["num_warps"].value, k["num_stages"].value) == (128, 64, 8, 3)


def test_tiles_smaller_than_16_extend_the_domain_without_tl_dot() -> None:
    source = (ROOT / "benchmarks" / "zoo" / "small_blocks" / "kernel.py").read_text().replace("BLOCK=32", "BLOCK=4")
    k = {s.name: s for s in discover_knobs(source)}
    assert k["BLOCK"].value == 4 and k["BLOCK"].domain[:3] == [4, 8, 16]


@pytest.mark.parametrize("path", EXAMPLES + ZOO, ids=lambda p: p.parent.name)
def test_every_example_and_zoo_kernel_has_unique_names_and_values_in_their_domains(path: Path) -> None:
    found = discover_knobs(path.read_text(encoding="utf-8"), str(path))
    assert found, "every example and zoo kernel has at least one knob"
    names = [k.name for k in found]
    assert len(names) == len(set(names))
    for k in found:
        assert k.value in k.domain and k.line >= 1


def test_discovery_never_executes_the_candidate(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = (ROOT / "benchmarks" / "zoo" / "small_grid" / "kernel.py").read_text()
    source = f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n" + source
    k = {s.name: s for s in discover_knobs(source)}
    assert k["BLOCK"].value == 4096
    assert not marker.exists()


def test_a_file_that_does_not_parse_is_bad_input() -> None:
    with pytest.raises(BadInput, match=r"cand\.py:2: syntax error"):
        discover_knobs("import triton\ndef f(:\n", "cand.py")


def test_each_tl_dot_has_an_input_precision_directive() -> None:
    """A dot without the keyword (Triton's default) and one with a literal are both knobs, most precise
    first; the GEMM drafts of the suite and the zoo both have one."""
    from kernelopt.optimize.knobs.discover import DOT_INPUT_PRECISIONS

    assert DOT_INPUT_PRECISIONS == ["", "ieee", "tf32x3", "tf32"]
    zoo = ROOT / "benchmarks" / "zoo" / "tensor_matmul" / "kernel.py"
    k = knobs_of(zoo)[f"dot@L{line_of(zoo, 'tl.dot(')}.input_precision"]
    assert (k.kind, k.value, k.domain) == ("directive", "", DOT_INPUT_PRECISIONS)
    draft = ROOT / "benchmarks" / "suite" / "matmul_fp32" / "kernel.py"
    k = knobs_of(draft)[f"dot@L{line_of(draft, 'tl.dot(')}.input_precision"]
    assert (k.value, k.domain) == ("ieee", DOT_INPUT_PRECISIONS)


def test_a_dot_that_says_allow_tf32_or_computes_its_precision_is_not_a_knob() -> None:
    source = '''import triton
import triton.language as tl


@triton.jit
def mm(A, B, C, P: tl.constexpr, BLOCK: tl.constexpr):
    a = tl.load(A + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    acc = tl.dot(a, a, allow_tf32=False)
    acc += tl.dot(a, a, input_precision=P)
    acc += tl.dot(a, a, input_precision="tf32x3")
    tl.store(C + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :], acc)
'''
    sites = {k.name: k for k in discover_knobs(source) if k.name.endswith("input_precision")}
    assert list(sites) == ["dot@L10.input_precision"] and sites["dot@L10.input_precision"].value == "tf32x3"
