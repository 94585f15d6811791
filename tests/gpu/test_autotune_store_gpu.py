"""Issue #23's autotune store on a GPU (skipped without CUDA): a later fresh runner of the same
autotuned kernel in the same engine uses the choice of the first, and another engine does not.

    python3 -m pytest -q -s tests/gpu/test_autotune_store_gpu.py

The fixtures fail unless Triton's autotuner benchmarked (autotuned_axpy_first.py) or did not
(autotuned_axpy_again.py) on their first call: `Autotuner.bench_time` is set only by a benchmark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from kernelopt.harness.evaluate import Engine  # noqa: E402
from kernelopt.problem import load_candidate, load_problem  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "harness"


@pytest.mark.parametrize("isolate", ["worker", "candidate"])
def test_a_later_runner_of_an_autotuned_kernel_does_not_benchmark_its_table_again(isolate: str, tmp_path: Path,
                                                                                   monkeypatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # Triton's per-user cache, for this test
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    problem = load_problem(FIX / "problem_axpy.py", {"N": str(1 << 20)})
    first = load_candidate(FIX / "autotuned_axpy_first.py")
    again = load_candidate(FIX / "autotuned_axpy_again.py")
    with Engine(problem, isolate=isolate, devices=["cuda:0"], timeout_s=300) as engine:
        # Timed, so each gets a fresh runner in every mode, as the finish's re-timing does.
        evs = engine.evaluate([first, again, again], time=True)
    for ev in evs:
        assert ev.passed and ev.timing is not None, ev.failure
    with Engine(problem, isolate=isolate, devices=["cuda:0"], timeout_s=300) as engine:
        (other,) = engine.evaluate([again], time=True)
    assert not other.passed and other.failure is not None  # another engine benchmarks afresh
    assert "autotuner benchmarked: True" in (other.failure.message or "") + (other.failure.stderr or "")
    # This Triton routed its autotune files through the cache manager: none in its own dir.
    assert list((tmp_path / "triton").rglob("*.cubin")) and not list((tmp_path / "triton").rglob("*.autotune.json"))


def test_sandboxed_runners_keep_no_autotune_choice() -> None:
    from kernelopt.harness.sandbox import sandbox_unavailable

    if sandbox_unavailable("cuda:0"):
        pytest.skip(f"no sandbox here: {sandbox_unavailable('cuda:0')}")
    problem = load_problem(FIX / "problem_axpy.py", {"N": str(1 << 20)})
    with Engine(problem, isolate="sandbox", devices=["cuda:0"], timeout_s=300) as engine:
        first, again = engine.evaluate([load_candidate(FIX / "autotuned_axpy_first.py"),
                                        load_candidate(FIX / "autotuned_axpy_again.py")], time=True)
    assert first.passed, first.failure
    assert not again.passed  # its own private dirs: it benchmarked again
