"""Search throughput on a real CUDA device (issue #23): baselines timed once and reused.

Run on the GPU host: `python -m pytest -q tests/gpu/test_throughput_gpu.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "examples" / "softmax"


def test_a_second_engine_reuses_the_baselines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt.harness.evaluate import Engine
    from kernelopt.problem import load_problem

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    problem = load_problem(SOFTMAX / "problem.py", {"ROWS": "4096", "COLS": "4096"})
    with Engine(problem, baselines=["eager", "compile"], devices=["cuda:0"]) as first:
        cold = first.ready[0]
    with Engine(problem, baselines=["eager", "compile"], devices=["cuda:0"]) as second:
        warm = second.ready[0]
    with Engine(problem, baselines=["eager", "compile"], devices=["cuda:0"], cache=False) as third:
        fresh = third.ready[0]
    assert cold.baselines_cached == [] and fresh.baselines_cached == []
    assert warm.baselines_cached == ["eager", "compile"]
    assert all(t.stats is not None for t in cold.baselines.values())
    assert {k: t.stats for k, t in warm.baselines.items()} == {k: t.stats for k, t in cold.baselines.items()}
    # torch.compile and the timing are skipped: the cached start is far shorter than the cold one.
    assert warm.baselines_s < 1.0 < cold.baselines_s and fresh.baselines_s > 1.0
    assert (tmp_path / "kernelopt" / "baselines.json").is_file()
