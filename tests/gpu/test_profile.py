"""Live profiling on a CUDA device with Nsight Compute.

Run on the GPU host: `python -m pytest -q tests/gpu/test_profile.py`.
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
FX = ROOT / "tests" / "fixtures" / "profile"


def _need_ncu() -> None:
    from kernelopt.harness.envinfo import find_tool

    if find_tool("ncu") is None:
        pytest.skip("ncu not installed")


@pytest.mark.parametrize("example", ["softmax", "matvec"])
def test_profile_example_end_to_end(example: str, tmp_path: Path):
    _need_ncu()
    from kernelopt.profile import profile_candidate

    d = ROOT / "examples" / example
    m = profile_candidate(d / "problem.py", d / "kernel.py", out_dir=tmp_path)
    (k,) = m.kernels  # exactly the one call inside the NVTX range: warm-ups were not profiled
    assert k.name == f"{example}_kernel" and k.dominant and k.duration_ns > 0
    assert k.rules and m.provenance["tool"] == "ncu"
    # static (Triton cache) and ncu agree on registers, from the same child
    assert m.static and k.metrics["static_registers_per_thread"].value == k.metrics["registers_per_thread"].value
    assert m.roofline is not None and 0 < m.roofline.dram_fraction < 1.5
    for f in ("metrics.json", "ncu_summary.md", "ncu_details.md", "profile.ncu-rep"):
        assert (tmp_path / f).is_file()


def test_no_kernel_in_range_is_one_line_exit_2(tmp_path: Path):
    _need_ncu()
    proc = subprocess.run(
        [sys.executable, "-m", "kernelopt", "profile", str(ROOT / "examples/softmax/problem.py"),
         "--kernel", str(FX / "noop_kernel.py"), "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no GPU kernel inside the 'kernelopt' NVTX range" in proc.stderr and proc.stderr.count("\n") == 1


def test_static_profiler_reads_triton_caches(tmp_path: Path):
    from kernelopt.profile import profile_candidate

    d = ROOT / "examples" / "rmsnorm"
    m = profile_candidate(d / "problem.py", d / "kernel.py", out_dir=tmp_path, profiler="static")
    assert m.source == "static" and m.static[0].kernel == "rmsnorm_kernel"
    assert m.values()["static_registers_per_thread"] > 0 and m.values()["num_warps"] >= 1


def test_env_measure_caches_ceilings(tmp_path: Path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    import os

    proc = subprocess.run([sys.executable, "-m", "kernelopt", "env", "--measure", "--json"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    measured = json.loads(proc.stdout)["measured"]
    assert measured["dram_bytes_per_s"] > 1e11 and measured["flops"]["fp32"] > 1e12
    cache = json.loads((tmp_path / "kernelopt" / "ceilings.json").read_text())
    assert len(cache) == 1


def test_optimize_goes_on_when_ncu_fails_and_records_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """On a GPU, with an ncu that fails every time: the optimize run finishes its search, each profiled
    version's `profiled` event holds the failure (tool_failed, ncu's message), and the report lists them."""
    import kernelopt.profile as profile_mod
    from kernelopt.optimize import loop
    from kernelopt.profile.ncu import NcuProfiler

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ncu"
    fake.write_text("#!/bin/sh\necho '==ERROR== fake ncu failed' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ.get('PATH', '')}")  # the loop finds an ncu
    monkeypatch.setattr(profile_mod, "get_profiler", lambda name="ncu", **kw: NcuProfiler(ncu=str(fake)))
    d = ROOT / "examples" / "matvec"
    run = tmp_path / "run"
    state = loop.optimize(d / "problem.py", d / "kernel.py", run_dir=run, overrides={"M": "64", "K": "256"},
                          optimizer="knobs", rounds=2, beam=1,
                          proposals_per_member=2, budget_evals=4, baselines=(), experience=False, profile=True)
    assert state.finished and state.evaluations_done >= 3 and state.best is not None
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if x.strip()]
    profiled = [e for e in events if e["type"] == "profiled"]
    assert profiled and all(e["profiler"] == "ncu" and e["failure"]["reason"] == "tool_failed"
                            and "fake ncu failed" in e["failure"]["message"] for e in profiled)
    assert "### Profiles that failed" in (run / "final_report.md").read_text()
