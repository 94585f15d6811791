"""Verification on a real GPU: full-size examples, the CUDA-only cheats, crashes.

Skipped without CUDA. Run: python3 -m pytest -q tests/gpu/test_harness_verify.py
"""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelopt.harness.verify import verify  # noqa: E402
from kernelopt.problem import load_candidate, load_problem  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ROOT = Path(__file__).resolve().parent.parent.parent
FIX = ROOT / "tests" / "fixtures" / "harness"
AXPY = FIX / "problem_axpy.py"


def run(candidate: str, **kwargs):
    return verify(load_problem(AXPY), load_candidate(FIX / candidate), **kwargs)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "matvec"])
def test_examples_full_size(name):
    problem = load_problem(ROOT / "examples" / name / "problem.py")
    good = verify(problem, load_candidate(ROOT / "examples" / name / "kernel.py"))
    assert good.passed, good.message
    assert good.device.startswith("cuda") and not good.interpreter
    bad = verify(problem, load_candidate(ROOT / "examples" / name / "kernel_wrong.py"))
    assert bad.reason == "incorrect", bad.message


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_examples_half_precision(dtype):
    problem = load_problem(ROOT / "examples" / "softmax" / "problem.py", dtype=dtype)
    v = verify(problem, load_candidate(ROOT / "examples" / "softmax" / "kernel.py"))
    assert v.passed, v.message
    assert v.atol == 1e-2 and v.trials[0].outputs[0].dtype == {"fp16": "float16", "bf16": "bfloat16"}[dtype]


def test_triton_axpy_passes():
    v = run("axpy_ok.py")
    assert v.passed, v.message


def test_hidden_stream():
    v = run("cheat_hidden_stream.py")
    assert v.reason == "hidden_stream", v.message


def test_unwritten_output_triton():
    v = run("cheat_unwritten_output.py")
    assert v.reason == "unwritten_output", v.message


def test_unwritten_output_from_the_caching_allocator():
    # torch::empty_like in C++ never passes through Python's torch.empty: only the
    # poisoned caching allocator can catch this one.
    v = run("cuda_unwritten_output.py", timeout_s=600)
    assert v.reason == "unwritten_output", v.message


def test_load_inline_candidate_passes():
    v = run("cuda_axpy.py", timeout_s=600)
    assert v.passed, v.message


def test_modified_input_and_cached_result():
    assert run("cheat_modified_input.py").reason == "modified_input"
    assert run("cheat_cached_result.py").reason == "cached_result"


def test_illegal_memory_access_fails_only_the_candidate():
    v = run("cheat_illegal_address.py")
    assert v.reason == "runtime" and not v.passed, v.message
    # The caller (and the GPU) carry on: the next candidate verifies normally.
    assert run("axpy_ok.py").passed


def test_compile_error_and_timeout():
    assert run("compile_error.py").reason == "compile"
    assert run("cheat_hang.py", timeout_s=30).reason == "timeout"
