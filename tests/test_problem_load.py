"""Static loading of problems and candidates: nothing is executed in the test process."""

from pathlib import Path

import pytest

from kernelopt.errors import BadInput
from kernelopt.problem import detect_backend, load_candidate, load_problem

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "harness"


def test_load_problem_reads_constants_and_types_overrides():
    p = load_problem(ROOT / "examples" / "softmax" / "problem.py", {"ROWS": "8", "COLS": "33"})
    assert p.name == "softmax"
    assert p.overrides == {"ROWS": 8, "COLS": 33}
    assert p.constants["ROWS"] == 8 and p.constants["COLS"] == 33
    assert p.atol is None and p.rtol is None


def test_problem_tolerance_constants_are_read():
    p = load_problem(ROOT / "examples" / "matvec" / "problem.py")
    assert (p.atol, p.rtol) == (1e-3, 1e-3)


def test_override_follows_the_constant_type():
    p = load_problem(FIX / "problem_axpy.py", {"ALPHA": "3", "N": "16"})
    assert p.overrides["ALPHA"] == 3.0 and isinstance(p.overrides["ALPHA"], float)
    assert p.overrides["N"] == 16 and isinstance(p.overrides["N"], int)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"NOPE": "1"}, "no module-level constant NOPE"),
        ({"N": "__import__('os')"}, "not a Python literal"),
        ({"N": "2.5"}, "is an integer"),
        ({"N": "[1, 2]"}, "only scalars"),
    ],
)
def test_bad_overrides_are_bad_input(overrides, message):
    with pytest.raises(BadInput, match=message):
        load_problem(FIX / "problem_axpy.py", overrides)


def test_missing_problem_file():
    with pytest.raises(BadInput, match="no such problem file"):
        load_problem(FIX / "does_not_exist.py")


@pytest.mark.parametrize(
    "name, missing",
    [("bad_problem_no_model.py", "Model"), ("bad_problem_no_get_inputs.py", "get_inputs")],
)
def test_problem_without_entries(name, missing):
    with pytest.raises(BadInput, match=f"missing {missing}") as info:
        load_problem(FIX / name)
    assert name in str(info.value)


def test_problem_syntax_error_names_file_and_line(tmp_path):
    bad = tmp_path / "p.py"
    bad.write_text("class Model:\n  def forward(self\n")
    with pytest.raises(BadInput, match=r"p\.py:\d+: syntax error"):
        load_problem(bad)


def test_candidate_entry_and_backend():
    c = load_candidate(ROOT / "examples" / "softmax" / "kernel.py")
    assert (c.entry, c.backend) == ("ModelNew", "triton") and len(c.sha256) == 64
    c = load_candidate(ROOT / "examples" / "rmsnorm" / "kernel.py")
    assert (c.entry, c.backend) == ("kernel_function", "triton")
    assert load_candidate(FIX / "cuda_axpy.py").backend == "cuda"
    assert load_candidate(FIX / "cuda_raw_axpy.py").backend == "cuda"
    assert load_candidate(FIX / "cheat_cached_result.py").backend == "torch"


def test_backend_detection_variants():
    import ast

    assert detect_backend(ast.parse("from triton import jit\n@jit\ndef k(x): pass\n")) == "triton"
    assert detect_backend(ast.parse("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef k(x): pass\n")) == "triton"
    assert detect_backend(ast.parse("import torch.utils.cpp_extension as ce\nm = ce.load_inline('m', '')\n")) == "cuda"
    # A function named `jit` from elsewhere is not Triton.
    assert detect_backend(ast.parse("from numba import jit\n@jit\ndef k(x): pass\n")) == "torch"


def test_candidate_syntax_error_and_no_entry():
    with pytest.raises(BadInput, match=r"bad_syntax\.py:1: syntax error"):
        load_candidate(FIX / "bad_syntax.py")
    with pytest.raises(BadInput, match="neither class ModelNew nor function kernel_function"):
        load_candidate(FIX / "bad_neither.py")


def test_loading_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys; from kernelopt.problem import load_problem, load_candidate;"
        f"load_problem({str(FIX / 'problem_axpy.py')!r}, {{'N': '5'}}); load_candidate({str(FIX / 'axpy_ok.py')!r});"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
