"""Shared checks for the transform tests: apply, find the new knobs, verify on the interpreter.

Verification goes through kernelopt.harness.verify (the one verification path): every
rewritten kernel runs in the harness's child process against the problem's reference.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelopt.harness.verify import verify_many
from kernelopt.optimize.knobs import discover_knobs
from kernelopt.optimize.transforms import TransformError, get_transform
from kernelopt.optimize.transforms.base import Transform
from kernelopt.problem import load_candidate, load_problem

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "transforms"
SUITE = ROOT / "benchmarks" / "suite"

# Kernels that advance their pointer arguments (`a_ptr += program_id * stride`, as Liger-Kernel's and unsloth's
# do): (fixture, kernel, problem, ragged shapes, the arguments advanced). rows_per_program and persistent_grid
# wrap such a body in a loop and must restore the arguments at each pass.
ADVANCING_KERNELS = [
    (FIX / "scale_add_rows_advance.py", "scale_add_advance", FIX / "problem_scale_add.py",
     [{"N_ROWS": "5", "HIDDEN": "33"}, {"N_ROWS": "1", "HIDDEN": "7"}, {"N_ROWS": "9", "HIDDEN": "1"}],
     ["x_ptr", "y_ptr", "out_ptr"]),
    (FIX / "layernorm_liger_rstd.py", "_ln_centre_rstd", SUITE / "layernorm" / "problem.py",
     [{"ROWS": "5", "DIM": "33"}, {"ROWS": "1", "DIM": "7"}, {"ROWS": "9", "DIM": "40"}],
     ["Y_ptr", "X_ptr", "RSTD_ptr"]),
]


def read(path: Path) -> str:
    return path.read_text()


def report(name: str, source: str) -> dict[str | None, object]:
    """kernel -> its SiteReport for transform `name`."""
    return {r.kernel: r for r in get_transform(name).sites(source)}


def declined(t: Transform, source: str, kernel: str) -> str:
    """The reason `t` gives for declining `kernel` (its one report there); asserts that `apply` refuses it too."""
    (r,) = [r for r in t.sites(source) if r.kernel == kernel]
    assert not r.applies, r.reason
    with pytest.raises(TransformError):
        t.apply(source, kernel)
    return r.reason


def knob_names(source: str) -> set[str]:
    return {k.name for k in discover_knobs(source)}


def knob_value(source: str, name: str) -> object:
    return next(k.value for k in discover_knobs(source) if k.name == name)


def verify_all(tmp: Path, problem: Path, shapes: list[dict[str, str]], sources: list[str], trials: int = 1) -> None:
    """Every source passes verification at every shape (asserts, naming the shape and the message)."""
    paths = []
    for i, source in enumerate(sources):
        path = tmp / f"cand{i}.py"
        path.write_text(source)
        paths.append(path)
    for shape in shapes:
        prob = load_problem(problem, shape)
        results = verify_many(prob, [load_candidate(p) for p in paths], trials=trials)
        for path, v in zip(paths, results):
            assert v.passed, f"{path.name} at {shape}: {v.reason}: {v.message}"


def fails(tmp: Path, problem: Path, shape: dict[str, str], source: str) -> bool:
    """The source fails verification at the shape (a check that the test can see a broken kernel)."""
    path = tmp / "broken.py"
    path.write_text(source)
    (v,) = verify_many(load_problem(problem, shape), [load_candidate(path)], trials=1)
    return not v.passed


def without_restores(source: str) -> str:
    """A rewrite with its loop's `x_ptr = x_ptr_0` lines removed (rows_per_program, persistent_grid restore
    the parameters a body assigns to at each pass): a check that a test sees the restores matter."""
    return "".join(line for line in source.splitlines(keepends=True)
                   if not re.fullmatch(r"\s*(\w+) = \1_0\n", line))


def cuda_source_of(source: str) -> str:
    """The CUDA code a candidate holds in a Python string (the one with __global__)."""
    import ast

    return next(n.value for n in ast.walk(ast.parse(source))
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and "__global__" in n.value)


def nvcc_compile(tmp: Path, source: str) -> None:
    """`nvcc -c` the candidate's CUDA code against a declarations-only torch/extension.h stub
    (the real headers take minutes on this CPU); asserts it compiles for sm_90."""
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    cu = tmp / "kernel.cu"
    cu.write_text(cuda_source_of(source))
    r = subprocess.run([nvcc, "-c", str(cu), "-o", str(tmp / "kernel.o"), "-std=c++17", "-arch=sm_90",
                        "-I", str(FIX / "cuda_stub")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
