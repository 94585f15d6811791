"""autotune_table: literal launch parameters become an @triton.autotune table keyed on the shapes.

The interpreter cannot benchmark (the autotuner needs a GPU driver), so every config of the
table is verified on its own: a table of one config runs without benchmarking."""

from __future__ import annotations

import ast

import pytest

from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import FIX, SUITE, knob_names, read, report, verify_all

T = get_transform("autotune_table")


def one_config_each(source: str) -> list[str]:
    """The source once per config of its autotune table, the table cut to that config."""
    tree = ast.parse(source)
    configs = next(n for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "configs").value
    assert isinstance(configs, ast.List)
    lines = source.splitlines(keepends=True)

    def offset(line: int, col: int) -> int:
        return sum(len(x) for x in lines[: line - 1]) + col

    start, end = offset(configs.lineno, configs.col_offset), offset(configs.end_lineno, configs.end_col_offset)
    return [source[:start] + "[" + ast.get_source_segment(source, c) + "]" + source[end:] for c in configs.elts]


def table(source: str) -> list[dict]:
    tree = ast.parse(source)
    configs = next(n for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "configs").value
    out = []
    for c in configs.elts:
        d = ast.literal_eval(c.args[0])
        d.update({kw.arg: ast.literal_eval(kw.value) for kw in c.keywords})
        out.append(d)
    return out


def test_meta_lambda_model_new(tmp_path):
    source = read(FIX / "leaky_relu_meta.py")
    r = report("autotune_table", source)["leaky"]
    assert r.applies and "keyed on count, slope" in r.reason
    out = T.apply(source, "leaky")
    rows = table(out)
    assert rows[0] == {"CHUNK": 64, "num_warps": 2, "num_stages": 3}  # the current values come first
    assert {"CHUNK": 128, "num_warps": 2, "num_stages": 3} in rows and {"CHUNK": 64, "num_warps": 4, "num_stages": 3} in rows
    assert "CHUNK=64" not in out and "num_warps=2)" not in out.split("class ModelNew")[1]
    assert "key=['count', 'slope']" in out
    assert {"config0.CHUNK", "config1.num_warps"} <= knob_names(out)  # the table's values are knobs
    shapes = [{"N": "300"}, {"N": "7"}, {"N": "129"}]
    verify_all(tmp_path, FIX / "problem_leaky_relu.py", shapes, one_config_each(out))


def test_split_pid_kernel_function_grid_becomes_meta(tmp_path):
    source = read(FIX / "matmul_split_pid.py")
    out = T.apply(source, "mm_flat", RADIUS=1)
    # the tuple grid read bm/bn: it now reads META so each config launches its own grid
    assert "mm_flat[lambda META: (tr.cdiv(m, META['BM']) * tr.cdiv(n, META['BN']),)]" in out
    rows = table(out)
    assert all(min(r["BM"], r["BN"], r["BK"]) >= 16 for r in rows)  # tl.dot tiles stay >= 16
    assert len(rows) == 8 and rows[0] == {"BM": 16, "BN": 16, "BK": 16, "num_warps": 4, "num_stages": 3}
    picked = [s for s, r in zip(one_config_each(out), rows) if r["num_warps"] == 4 and r["num_stages"] == 3]
    verify_all(tmp_path, FIX / "problem_matmul.py", [{"M": "40", "N": "36", "K": "24"}, {"M": "17", "N": "33", "K": "40"}],
               picked)


def test_only_meaning_preserving_values_are_tuned():
    # COL_BLOCK=64 is not tied to the grid (the grid writes its own 64): it stays at the launch
    source = read(FIX / "bias_relu_2d_grid.py")
    out = T.apply(source, "bias_relu_rows", RADIUS=1)
    assert "COL_BLOCK=64" in out and all("COL_BLOCK" not in r for r in table(out))


def test_suite_gelu(tmp_path):
    source = read(SUITE / "gelu" / "kernel.py")
    out = T.apply(source, "gelu_kernel", RADIUS=1)
    assert "key=['n']" in out
    sources = one_config_each(out)
    verify_all(tmp_path, SUITE / "gelu" / "problem.py", [{"ROWS": "3", "COLS": "100"}], sources[:3])


@pytest.mark.parametrize("path, why", [
    (FIX.parent / "knobs" / "autotuned.py", "already autotuned"),
    (SUITE / "mse_loss" / "kernel.py", "uses atomics"),
    (FIX / "matmul_meta_grid.py", "does not `import triton`"),
])
def test_declines(path, why):
    reports = T.sites(read(path))
    assert any(not r.applies and why in r.reason for r in reports), [r.reason for r in reports]


def test_declines_a_tile_the_host_reads():
    source = read(SUITE / "gelu" / "kernel.py").replace(
        "    BLOCK = 128\n", "    BLOCK = 128\n    partial = torch.empty(triton.cdiv(n, BLOCK), device=x.device)\n")
    (r,) = T.sites(source)
    assert not r.applies and "host code reads BLOCK" in r.reason
    with pytest.raises(TransformError):
        T.apply(source, "gelu_kernel")


def test_key_holds_shapes_not_pointers_or_memory_strides():
    (r,) = T.sites(read(SUITE / "avgpool2d" / "kernel.py"))  # `stride` there is the pooling step: a shape
    assert r.reason.endswith("keyed on H, W, H_out, W_out, ksize, stride, padding")
    (r,) = T.sites(read(SUITE / "matmul_fp32" / "kernel.py"))  # stride_am... are memory strides
    assert "keyed on M, N, K;" in r.reason
    (r,) = T.sites(read(FIX / "bias_relu_2d_grid.py"))  # `width` multiplies the row: a size, not a pointer
    assert r.reason.endswith("keyed on width")


def test_neighbouring_tuned_keywords_on_their_own_line(tmp_path):
    # found on an LLM-written matmul: BLOCK_M=.., BLOCK_N=.. on one line after the pointers; the
    # two deletions shared a comma and the rewrite did not parse (apply raised BadInput)
    source = read(FIX / "leaky_relu_multiline_launch.py")
    assert report("autotune_table", source)["leaky_multiline"].applies
    out = T.apply(source, "leaky_multiline")
    ast.parse(out)
    launch = out.split("leaky_multiline[grid](")[1].split(")\n")[0]
    assert "TILE" not in launch and "num_warps" not in launch and ",," not in launch.replace(" ", "").replace("\n", "")
    first = table(out)[0]  # the current values come first
    assert (first["TILE"], first["num_warps"]) == (128, 4)
    verify_all(tmp_path, FIX / "problem_leaky_relu.py", [{"N": "300"}, {"N": "7"}, {"N": "129"}],
               one_config_each(out))


DOT_SHAPES = {"M": "70", "N": "36", "K": "50"}


def test_dot_preset_suite_matmul_kernel_function(tmp_path):
    """The suite's bf16 matmul (kernel_function, 2-D grid, BLOCK_M/N/K): Triton's matmul tile
    configs on its own names, the current config first; every config verifies (one table each)."""
    source = read(SUITE / "matmul_bf16" / "kernel.py")
    assert "PRESET='dot': matmul tile configs for BLOCK_M, BLOCK_N, BLOCK_K" in report("autotune_table", source)[
        "matmul_kernel"].reason
    out = T.apply(source, "matmul_kernel", PRESET="dot")
    rows = table(out)
    assert rows[0] == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}
    assert {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3} in rows
    assert len(rows) == 9 and len({tuple(sorted(r.items())) for r in rows}) == 9
    assert "matmul_kernel[lambda META: (triton.cdiv(m, META['BLOCK_M']), triton.cdiv(n, META['BLOCK_N']))]" in out
    # fp32 operands (the interpreter's bf16 tl.dot is not what is tested here): the fixture's GEMM problem
    verify_all(tmp_path, FIX / "problem_matmul.py", [DOT_SHAPES], one_config_each(out)[:4])


def test_dot_preset_flat_grid_short_names(tmp_path):
    """Another author's GEMM (flat pid split into pid_m/pid_n, tiles BM/BN/BK): the same configs
    land on BM/BN/BK, and they verify at ragged shapes."""
    source = read(FIX / "matmul_split_pid.py")
    out = T.apply(source, "mm_flat", PRESET="dot")
    rows = table(out)
    assert {"BM": 256, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 3} in rows
    assert rows[0]["BM"] == 16  # its own config first
    picked = [s for s, r in zip(one_config_each(out), rows) if r["BM"] in (16, 64) and r["BN"] <= 128]
    verify_all(tmp_path, FIX / "problem_matmul.py", [{"M": "40", "N": "36", "K": "24"}, {"M": "17", "N": "33", "K": "40"}],
               picked)


@pytest.mark.parametrize(("path", "site", "why"), [
    (SUITE / "gelu" / "kernel.py", "gelu_kernel", "no tl.dot"),
    (FIX / "matmul_outer_product_loop.py", None, "no tl.dot"),
])
def test_dot_preset_declines_without_a_dot_accumulator(path, site, why):
    source = read(path)
    site = site or next(r.site for r in T.sites(source) if r.applies)
    with pytest.raises(TransformError, match=why):
        T.apply(source, site, PRESET="dot")
    with pytest.raises(TransformError, match="PRESET"):
        T.apply(source, site, PRESET="tiles")


def test_dot_preset_tile_count_loop(tmp_path):
    """The tutorial's K loop over tile counts (`range(0, tl.cdiv(K, BLOCK_K))`) makes BLOCK_K a loop
    tile like a `range(0, K, BLOCK_K)` step: it is tuned, and the dot preset applies (it once
    declined: "the loop over K is not stepped by one tuned tile")."""
    source = read(FIX / "matmul_tile_count_loop.py")
    r = report("autotune_table", source)["matmul_kernel"]
    assert r.applies and "tunes BLOCK_M, BLOCK_N, BLOCK_K" in r.reason and "PRESET='dot'" in r.reason
    out = T.apply(source, "matmul_kernel", PRESET="dot")
    rows = table(out)
    assert rows[0] == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "num_warps": 4, "num_stages": 3}
    assert {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3} in rows
    picked = [s for s, row in zip(one_config_each(out), rows) if row["BLOCK_M"] <= 64 and row["BLOCK_N"] <= 64]
    assert len(picked) == 2  # its own config and (64, 64, 32)
    verify_all(tmp_path, FIX / "problem_matmul.py", [{"M": "40", "N": "36", "K": "24"}, {"M": "17", "N": "33", "K": "70"}],
               picked)
