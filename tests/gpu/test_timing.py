"""Timing on a real CUDA device: time_callable, the L2 flush, bench with baselines, env.

Run on the GPU host: `python -m pytest -q tests/gpu/test_timing.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROOT = Path(__file__).resolve().parents[2]


def test_flush_buffer_is_at_least_twice_l2():
    from kernelopt.harness.timing import l2_flush_bytes, time_callable

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert l2 > 0 and l2_flush_bytes(0) >= 2 * l2
    x = torch.zeros(1024, device="cuda")
    stats = time_callable(lambda: x.add_(1), min_ms=1, min_calls=10)
    assert stats.l2_flush_bytes >= 2 * l2
    assert time_callable(lambda: x.add_(1), min_ms=1, min_calls=10, flush_l2=False).l2_flush_bytes == 0


def test_copy_kernel_stats_are_sane():
    from kernelopt.harness.timing import time_callable

    n = 64 * 2**20  # 256 MiB of fp32 each way: far beyond any L2
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    calls = []

    def copy() -> None:
        calls.append(1)
        dst.copy_(src)

    stats = time_callable(copy)
    assert torch.equal(dst, src)
    assert stats.count >= 10 and stats.warmup_count >= 3
    assert len(calls) == stats.count + stats.warmup_count
    assert stats.count * stats.mean_ms >= 100 * 0.999
    assert 0 < stats.min_ms <= stats.median_ms <= stats.max_ms
    assert stats.iqr_ms >= 0 and 0 <= stats.cv < 0.25
    # A copy reads and writes n * 4 bytes: the implied bandwidth must be physically plausible
    # (above 50 GB/s, below 20 TB/s) -- events that missed the kernel would give far more.
    gbps = 2 * n * 4 / (stats.median_ms * 1e-3) / 1e9
    assert 50 < gbps < 20_000, gbps


def test_time_callable_propagates_failures():
    from kernelopt.harness.timing import time_callable

    def boom() -> None:
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        time_callable(boom)


@pytest.mark.slow
def test_bench_example_against_eager_and_compile(tmp_path):
    out = tmp_path / "benchmark.md"
    r = subprocess.run(
        [sys.executable, "-m", "kernelopt", "bench", str(ROOT / "examples/softmax/problem.py"),
         "--kernel", str(ROOT / "examples/softmax/kernel.py"), "--json", "-o", str(out)],
        capture_output=True, text=True, timeout=900, check=False, cwd=str(ROOT),
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["timings"]) == {"candidate", "eager", "compile"}
    for label, t in doc["timings"].items():
        assert t["error"] is None and t["stats"]["count"] >= 10, (label, t)
    cand = doc["timings"]["candidate"]["stats"]["median_ms"]
    for base in ("eager", "compile"):
        assert doc["speedups"][base] == pytest.approx(doc["timings"][base]["stats"]["median_ms"] / cand)
    assert doc["env"]["gpus"] and doc["device"] == doc["env"]["gpus"][0]["name"]
    md = out.read_text()
    assert "| candidate |" in md and "| eager |" in md and "| compile |" in md and "x |" in md


def test_env_sees_the_gpu():
    from kernelopt.harness.envinfo import collect_env, missing_requirements

    env = collect_env(tools=False)
    g = env.gpus[0]
    props = torch.cuda.get_device_properties(0)
    assert g.name == props.name and g.sm_count == props.multi_processor_count and g.l2_bytes == props.L2_cache_size
    assert env.driver and env.cuda_driver and missing_requirements(env, ["gpu"]) == []
    r = subprocess.run([sys.executable, "-m", "kernelopt", "env", "--require", "gpu"], capture_output=True, text=True,
                       timeout=120, check=False, cwd=str(ROOT))
    assert r.returncode == 0 and props.name in r.stdout


def test_the_launch_guard_holds_every_sm():
    """Work queued on another stream while the launch guard runs waits until the guard ends: the
    guard's blocks fill every SM's thread slots. With `torch.cuda._sleep` (one block, the guard
    before) the same work finished long before the busy-wait did (the guard-overlap attack)."""
    from kernelopt.harness.gpu_guard import occupying_guard
    from kernelopt.harness.timing import _sleep_cycles_per_us

    torch.cuda.synchronize()
    guard = occupying_guard()
    assert guard is not None
    props = torch.cuda.get_device_properties(0)
    per_sm = getattr(props, "max_threads_per_multi_processor", 2048)
    assert guard.grid * guard.block == props.multi_processor_count * per_sm, (guard.grid, guard.block)
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")

    def overlap(busy_wait) -> tuple[float, float]:
        """(the busy-wait's ms, ms from its start until the side stream's work is done)."""
        begin, end, side_done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        torch.cuda.synchronize()
        begin.record()
        busy_wait()
        end.record()
        with torch.cuda.stream(side):
            x.add_(1)  # queued beside the busy-wait, not waiting for the current stream
            side_done.record()
        torch.cuda.synchronize()
        return begin.elapsed_time(end), begin.elapsed_time(side_done)

    for _ in range(3):
        waited, side_ms = overlap(lambda: guard(2000.0, torch.cuda.current_stream().cuda_stream))
        assert 1.9 <= waited < 4.0, waited
        assert side_ms >= waited, (waited, side_ms)
    cycles = _sleep_cycles_per_us(torch.cuda._sleep, torch.cuda.Event(enable_timing=True),
                                  torch.cuda.Event(enable_timing=True), torch.device("cuda", 0))
    waited, side_ms = overlap(lambda: torch.cuda._sleep(int(2000.0 * cycles)))
    assert waited >= 1.5 and side_ms < waited / 2, (waited, side_ms)
    assert x[0].item() == 4.0
