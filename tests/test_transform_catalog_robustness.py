"""Every transform of this catalog on every kernel the repository holds: sites() never raises,
each applying site rewrites to source that parses and whose knobs are discovered, and each
declining kernel refuses apply() with a TransformError (never another exception)."""

from __future__ import annotations

import ast

import pytest

from kernelopt.optimize.knobs import discover_knobs
from kernelopt.optimize.transforms import get_transform
from kernelopt.optimize.transforms.base import TransformError
from tests.transform_checks import FIX, ROOT, SUITE

NAMES = ["grouped_program_order", "flat_elementwise", "persistent_grid", "autotune_table", "dot_inner_product",
         "cuda_block_template", "cuda_vectorized_loads", "single_pass_row", "rows_per_program", "split_reduction",
         "block_program_axis", "dot_rank1_loop"]
FILES = sorted([*SUITE.glob("*/kernel.py"), *(ROOT / "examples").glob("*/kernel*.py"), *FIX.glob("*.py"),
                *(ROOT / "tests" / "fixtures" / "knobs").glob("*.py"), *(ROOT / "tests" / "fixtures" / "harness").glob("*.py")])
ODD = ["", "x = 1\n", "def broken(:\n", "import triton\n@triton.jit\ndef k():\n    pass\n",
       "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x, N: tl.constexpr):\n    tl.store(x, 1)\n"]


@pytest.mark.parametrize("name", NAMES)
def test_every_repository_kernel(name):
    t = get_transform(name)
    applied = 0
    for path in FILES:
        source = path.read_text()
        reports = t.sites(source, str(path))
        assert reports, path
        for r in reports:
            assert r.transform == name and r.reason and "\n" not in r.reason, (path, r)
            if r.applies:
                out = t.apply(source, r.site, **r.params)
                ast.parse(out)
                assert out != source
                discover_knobs(out)
                applied += 1
            elif r.kernel is not None and not any(o.applies and o.kernel == r.kernel for o in reports):
                with pytest.raises(TransformError):
                    t.apply(source, r.kernel)
    assert applied >= 2, f"{name} applies to fewer than two kernels of the repository"


@pytest.mark.parametrize("name", NAMES)
def test_odd_sources_decline_without_raising(name):
    t = get_transform(name)
    for source in ODD:
        for r in t.sites(source):
            assert not r.applies
        with pytest.raises(TransformError):
            t.apply(source, "k")


@pytest.mark.parametrize("name, param, bad, kind", [
    ("grouped_program_order", "GROUP_M", 0, "positive"), ("persistent_grid", "PROGRAMS_PER_SM", True, "positive"),
    ("autotune_table", "RADIUS", -1, "non-negative"), ("split_reduction", "SPLIT", 2.0, "positive"),
    ("rows_per_program", "ROWS_PER_PROGRAM", 0, "positive"), ("block_program_axis", "BLOCK_PID", 0, "positive")])
def test_a_bad_integer_parameter_is_refused_alike(name, param, bad, kind):
    # one check (triton_edit.int_param) for every transform's integer parameter, before any parsing
    with pytest.raises(TransformError, match=rf"^{name}: {param}={bad!r} is not a {kind} integer$"):
        get_transform(name).apply("", "k", **{param: bad})
