"""On a GPU: block_program_axis's rewrites compile with real Triton (not the interpreter), are
correct at full size, and their times print beside the draft's (run with -s to see them).

The suite's conv3d draft at its own size (the case the transform was written for: one program
per output channel re-reads the input neighbourhood C_out times), blocked on its output channel
(@pid0) with several BLOCK_PID values and on its output row (@pid1); and the two independently
written fixtures (a kernel_function conv2d, a row-FMA matrix product) at moderate, ragged sizes.
Skipped without CUDA. Run:

    python3 -m pytest -q -s tests/gpu/test_transforms_block_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelopt.harness.evaluate import evaluate  # noqa: E402
from kernelopt.optimize.transforms import get_transform  # noqa: E402
from kernelopt.problem import load_candidate, load_problem  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ROOT = Path(__file__).resolve().parent.parent.parent
FIX = ROOT / "tests" / "fixtures" / "transforms"
SUITE = ROOT / "benchmarks" / "suite"
T = get_transform("block_program_axis")


def _timed(problem: Path, overrides: dict[str, str], draft: Path, variants: list[tuple[str, str]], tmp: Path) -> None:
    """Verify every variant (compiled, not the interpreter) and print its time beside the draft's."""
    paths = []
    for i, (_, source) in enumerate(variants):
        path = tmp / f"variant{i}.py"
        path.write_text(source)
        paths.append(path)
    results = evaluate(load_problem(problem, overrides), [load_candidate(draft), *map(load_candidate, paths)], time=True)
    base, rest = results[0], results[1:]
    assert base.failure is None, f"draft: {base.failure}"
    print(f"\n{draft.name} {overrides or ''}: draft {base.timing.median_ms:.4f} ms")
    for (label, _), ev in zip(variants, rest):
        assert ev.failure is None, f"{label}: {ev.failure}"
        assert ev.verification is not None and ev.verification.passed and not ev.verification.interpreter, label
        print(f"  {label}: {ev.timing.median_ms:.4f} ms, speedup {base.timing.median_ms / ev.timing.median_ms:.2f}x")


def test_conv3d_full_size(tmp_path):
    draft = SUITE / "conv3d" / "kernel.py"
    source = draft.read_text()
    variants = [(f"@pid0 BLOCK_PID={b}", T.apply(source, "conv3d_kernel@pid0", BLOCK_PID=b)) for b in (4, 8, 16, 32)]
    variants.append(("@pid1 BLOCK_PID=8", T.apply(source, "conv3d_kernel@pid1", BLOCK_PID=8)))
    _timed(SUITE / "conv3d" / "problem.py", {}, draft, variants, tmp_path)


@pytest.mark.parametrize("fixture,site,problem,overrides", [
    ("conv2d_pointer_walk.py", "conv2d_direct@pid0", "problem_conv2d.py",
     {"BATCH": "8", "IN_CHANNELS": "35", "OUT_CHANNELS": "67", "HEIGHT": "61", "WIDTH": "59"}),
    ("matmul_row_fma.py", "row_fma_matmul@pid0", "problem_matmul.py", {"M": "1001", "N": "515", "K": "257"}),
], ids=["conv2d", "row_fma"])
def test_fixtures_compile_and_verify(fixture, site, problem, overrides, tmp_path):
    source = (FIX / fixture).read_text()
    variants = [(f"{site} BLOCK_PID={b}", T.apply(source, site, BLOCK_PID=b)) for b in (1, 4, 16)]
    _timed(FIX / problem, overrides, FIX / fixture, variants, tmp_path)
