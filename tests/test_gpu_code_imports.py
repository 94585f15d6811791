"""Code that only runs on a lent GPU still names kernelopt's current API.

tests/gpu/ is skipped without CUDA and the benchmarks run only on the GPU machine, so a
rename in kernelopt is otherwise first seen there (the zoo test once imported a
`child_verify` that the engine had replaced: 30 of 32 tests failed on the H100). This
checks every `from kernelopt... import name`, at any depth of those files, on the CPU.
"""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_ONLY = sorted([*(ROOT / "tests" / "gpu").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
                   *(ROOT / "benchmarks" / "zoo").glob("*.py")])


def kernelopt_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) for each `from kernelopt[.x] import name` anywhere in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                (node.module == "kernelopt" or node.module.startswith("kernelopt.")):
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def test_the_scan_sees_imports_inside_functions(tmp_path: Path) -> None:
    f = tmp_path / "t.py"
    f.write_text("def test():\n    from kernelopt.harness.verify import child_verify\n")
    assert kernelopt_imports(f) == [(2, "kernelopt.harness.verify", "child_verify")]


@pytest.mark.parametrize("path", GPU_ONLY, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_kernelopt_name_they_import_exists(path: Path) -> None:
    missing = []
    for line, module, name in kernelopt_imports(path):
        mod = importlib.import_module(module)
        if name != "*" and not hasattr(mod, name):
            try:  # `from kernelopt import harness` names a submodule
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"line {line}: from {module} import {name}")
    assert not missing, f"{path.relative_to(ROOT)}: " + "; ".join(missing)
