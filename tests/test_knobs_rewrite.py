"""Rewriting knobs: only the value bytes change; the result parses, rediscovers and verifies."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.optimize.knobs import discover_knobs, knob_values, set_knobs

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "knobs"
MATVEC = ROOT / "examples" / "matvec" / "kernel.py"
ALL = sorted((ROOT / "examples").glob("*/kernel.py")) + sorted((ROOT / "benchmarks" / "zoo").glob("*/kernel.py")) \
    + sorted(FIX.glob("*.py"))


def line_of(source: str, text: str) -> int:
    return next(i + 1 for i, line in enumerate(source.splitlines()) if text in line)


def test_a_value_change_touches_only_the_value_bytes() -> None:
    src = MATVEC.read_text()
    out = set_knobs(src, {"BLOCK_M": 64})
    assert out == src.replace("BLOCK_M, BLOCK_K = 16, 128", "BLOCK_M, BLOCK_K = 64, 128", 1)


def test_absent_knobs_are_inserted_after_the_last_argument_on_its_line() -> None:
    src = MATVEC.read_text()
    launch = "BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K)"
    out = set_knobs(src, {"num_warps": 2, "num_stages": 4})
    assert out == src.replace(launch, "BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K, num_warps=2, num_stages=4)", 1)
    loop = line_of(src, "for k0 in range(")
    out = set_knobs(src, {f"loop@L{loop}.num_stages": 2, f"loop@L{loop}.loop_unroll_factor": 4})
    assert out == src.replace("for k0 in range(0, K, BLOCK_K):",
                              "for k0 in tl.range(0, K, BLOCK_K, num_stages=2, loop_unroll_factor=4):", 1)
    assert len(out.splitlines()) == len(src.splitlines())


def test_directives_round_trip_to_the_original_bytes() -> None:
    src = MATVEC.read_text()
    load = line_of(src, "x = tl.load(")
    name = f"load@L{load}.eviction_policy"
    out = set_knobs(src, {name: "evict_first"})
    assert out == src.replace("other=0.0).to(tl.float32)\n        acc",
                              "other=0.0, eviction_policy=\"evict_first\").to(tl.float32)\n        acc", 1)
    assert knob_values(out)[name] == "evict_first"
    assert set_knobs(out, {name: ""}) == src  # unset again: the kwarg goes, every byte is back


def test_existing_quotes_multiline_calls_and_non_ascii_comments_are_kept() -> None:
    path = FIX / "derived.py"
    src = path.read_text(encoding="utf-8")
    load = line_of(src, "x = tl.load(")
    loop = line_of(src, "for r in tl.range(")
    out = set_knobs(src, {f"load@L{load}.eviction_policy": "evict_first", "ROWS": 8, "num_stages": 3,
                          f"loop@L{loop}.num_stages": 4}, str(path))
    expected = (src.replace("eviction_policy='evict_last'", "eviction_policy='evict_first'", 1)
                .replace("ROWS_PER_PROGRAM = 2", "ROWS_PER_PROGRAM = 8", 1)
                .replace("warps, stages = 4, 1", "warps, stages = 4, 3", 1)
                .replace("tl.range(0, ROWS, num_stages=2)", "tl.range(0, ROWS, num_stages=4)", 1))
    assert out == expected
    # unsetting the loop's stages removes the kwarg and its separator
    assert set_knobs(src, {f"loop@L{loop}.num_stages": None}) == src.replace(
        "tl.range(0, ROWS, num_stages=2)", "tl.range(0, ROWS)", 1)


def test_a_kwarg_on_its_own_line_is_removed_without_removing_the_line(tmp_path: Path) -> None:
    src = (FIX / "derived.py").read_text(encoding="utf-8")
    load = line_of(src, "x = tl.load(")
    out = set_knobs(src, {f"load@L{load}.eviction_policy": ""})
    assert out == src.replace("eviction_policy='evict_last')", ")", 1)
    assert len(out.splitlines()) == len(src.splitlines())
    ast.parse(out)


def test_cuda_values_change_inside_the_string() -> None:
    src = (FIX / "cuda_launch.py").read_text()
    out = set_knobs(src, {"ITEMS_PER_THREAD": 8, "threads": 256, "UNROLL": 4, "sum_kernel.block": 64})
    assert out == (src.replace("#define ITEMS_PER_THREAD 4", "#define ITEMS_PER_THREAD 8", 1)
                   .replace("const int threads = 128;", "const int threads = 256;", 1)
                   .replace("constexpr int UNROLL = 2;", "constexpr int UNROLL = 4;", 1)
                   .replace("sum_kernel<<<1, 32>>>", "sum_kernel<<<1, 64>>>", 1))


def test_autotune_configs_are_rewritten_in_place() -> None:
    src = (FIX / "autotuned.py").read_text()
    out = set_knobs(src, {"config0.BLOCK": 512, "config0.num_stages": 4, "config1.num_warps": 2})
    assert out == src.replace('triton.Config({"BLOCK": 128}, num_warps=4)',
                              'triton.Config({"BLOCK": 512}, num_warps=4, num_stages=4)', 1).replace(
        "num_warps=8, num_stages=2", "num_warps=2, num_stages=2", 1)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_knob_moves_alone_and_keeps_every_other_line(path: Path) -> None:
    src = path.read_text(encoding="utf-8")
    before = discover_knobs(src, str(path))
    lines = src.splitlines()
    for knob in before:
        other = [v for v in knob.domain if v != knob.value or type(v) is not type(knob.value)]
        if not other:
            continue
        out = set_knobs(src, {knob.name: other[-1]}, str(path))
        ast.parse(out)
        after = knob_values(out, str(path))
        assert after[knob.name] == other[-1]
        assert {k.name: k.value for k in before if k.name != knob.name} == {
            n: v for n, v in after.items() if n != knob.name}
        new_lines = out.splitlines()
        assert len(new_lines) == len(lines)
        changed = [i for i, (a, b) in enumerate(zip(lines, new_lines)) if a != b]
        assert len(changed) <= 2  # the value's line (and `range` -> `tl.range` of a loop, on its line)


def test_unknown_knobs_and_values_outside_the_domain_are_bad_input() -> None:
    src = MATVEC.read_text()
    with pytest.raises(BadInput, match="no such knob"):
        set_knobs(src, {"BLOCK_Q": 32})
    with pytest.raises(BadInput, match="outside its domain"):
        set_knobs(src, {"BLOCK_M": 48})
    with pytest.raises(BadInput, match="outside its domain"):
        set_knobs(src, {"num_warps": 3})
    with pytest.raises(BadInput, match="outside its domain"):
        set_knobs(src, {"num_warps": True})  # 1 == True, but a bool is not a warp count
    with pytest.raises(BadInput, match="outside its domain"):
        set_knobs((FIX / "autotuned.py").read_text(), {"scale_kernel.BLOCK": 128})  # the autotuner's


def test_rewritten_matvec_still_verifies_in_the_interpreter(tmp_path: Path) -> None:
    from kernelopt.harness.verify import verify
    from kernelopt.problem import load_candidate, load_problem

    src = MATVEC.read_text()
    loop = line_of(src, "for k0 in range(")
    load = line_of(src, "a = tl.load(")
    out = set_knobs(src, {"BLOCK_M": 32, "BLOCK_K": 32, "num_warps": 2, f"loop@L{loop}.num_stages": 2,
                          f"load@L{load}.eviction_policy": "evict_first"})
    cand = tmp_path / "kernel.py"
    cand.write_text(out)
    problem = load_problem(ROOT / "examples" / "matvec" / "problem.py", {"M": "64", "K": "96"})
    result = verify(problem, load_candidate(cand), trials=1)
    assert result.passed, result.message


def test_a_dots_input_precision_is_set_changed_and_removed() -> None:
    path = ROOT / "benchmarks" / "suite" / "matmul_fp32" / "kernel.py"
    source = path.read_text()
    name = f"dot@L{line_of(source, 'tl.dot(')}.input_precision"
    tf32 = set_knobs(source, {name: "tf32x3"}, str(path))
    assert 'input_precision="tf32x3"' in tf32 and 'input_precision="ieee"' not in tf32
    assert knob_values(tf32)[name] == "tf32x3"
    default = set_knobs(source, {name: ""}, str(path))
    assert "input_precision" not in default.split("tl.dot(")[1].split(")")[0]
    assert set_knobs(default, {name: "ieee"}, str(path)).count("input_precision") == 1
    ast.parse(default)
