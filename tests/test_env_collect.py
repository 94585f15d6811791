"""`collect_env`, tool discovery and version parsing, requirement checks and `kernelopt env`."""

from __future__ import annotations

import json
import os
import platform
import stat
import subprocess
import sys

import pytest

from kernelopt.harness import envinfo
from kernelopt.harness.envinfo import (
    EnvInfo,
    GpuInfo,
    ToolInfo,
    collect_env,
    find_tool,
    missing_requirements,
    parse_smi_query,
    parse_tool_version,
    run_tool,
    tool_info,
)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_collect_env_reports_this_python_and_libraries():
    import torch
    import triton

    env = collect_env(tools=False)
    assert env.python == platform.python_version()
    assert env.torch == torch.__version__ and env.triton == triton.__version__
    assert env.cuda_available == torch.cuda.is_available()
    assert len(env.gpus) == (torch.cuda.device_count() if env.cuda_available else 0)
    assert "ncu" not in env.tools and "nvcc" not in env.tools


@pytest.mark.skipif(find_tool("nvcc") is None, reason="no nvcc on this machine")
def test_nvcc_version_matches_its_own_output():
    out = subprocess.run([find_tool("nvcc"), "--version"], capture_output=True, text=True, check=True).stdout
    release = next(line for line in out.splitlines() if "release" in line)
    info = tool_info("nvcc")
    assert info.version and info.version in release and info.version.startswith("release")


def _fake_tool(dir_, name, body):
    path = dir_ / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_tool_looks_in_cuda_home(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir, "ncu", 'echo "NVIDIA (R) Nsight Compute Command Line Profiler"; echo "Version 2099.1.0.0"')
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    info = tool_info("ncu")
    assert info.path == str(bindir / "ncu") and info.version == "2099.1.0.0" and info.error is None


def test_failing_and_hanging_tools_become_errors(tmp_path):
    failing = _fake_tool(tmp_path, "failing", 'echo "cannot open device" >&2; exit 3')
    out, err = run_tool([str(failing)])
    assert out is None and "exited with 3" in err and "cannot open device" in err
    hanging = _fake_tool(tmp_path, "hanging", "sleep 30")
    out, err = run_tool([str(hanging)], timeout_s=0.5)
    assert out is None and "did not answer" in err


def test_parse_tool_version_forms():
    nvcc = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\nBuild x"
    assert parse_tool_version(nvcc) == "release 12.4, V12.4.131"
    assert parse_tool_version("NVIDIA (R) Nsight Compute\nVersion 2025.3.1.0 (build 1)") == "2025.3.1.0 (build 1)"
    assert parse_tool_version("") is None


def test_parse_smi_query_fields_and_missing_values():
    # The layout nvidia-smi prints for --format=csv,noheader,nounits, in _SMI_FIELDS order.
    text = "0, GPU-aaaa, 570.1, 1500, 1980, 2600, 2619, NVIDIA Test, Rev 2\n1, GPU-bbbb, 570.1, [N/A], [N/A], 2600, 2619, X\n"
    rows = parse_smi_query(text)
    assert rows[0]["name"] == "NVIDIA Test, Rev 2" and rows[0]["uuid"] == "GPU-aaaa" and rows[0]["driver"] == "570.1"
    assert rows[0]["clocks"].sm_mhz == 1500 and rows[0]["clocks"].mem_max_mhz == 2619
    assert rows[1]["clocks"].sm_mhz is None and rows[1]["clocks"].mem_mhz == 2600
    assert parse_smi_query("No devices were found\n") == {}


def test_missing_requirements():
    env = EnvInfo(python="3", platform="p", tools={"ncu": ToolInfo(error="ncu not found"), "nvcc": ToolInfo(path="/x", version="v")})
    assert missing_requirements(env, ["nvcc"]) == []
    assert missing_requirements(env, ["gpu", "ncu", "gpu"]) == ["gpu: no CUDA GPU is visible to torch", "ncu: ncu not found"]
    env.gpus.append(GpuInfo(index=0, name="g", compute_capability="9.0", sm_count=1, l2_bytes=1, memory_bytes=1))
    assert missing_requirements(env, ["gpu"]) == []
    with pytest.raises(ValueError):
        missing_requirements(env, ["tpu"])


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kernelopt", *args], capture_output=True, text=True, timeout=120, check=False)


def test_env_cli_json_and_human():
    r = run_cli("env", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["python"] == platform.python_version() and {"ncu", "nvcc", "ptxas", "nvidia-smi"} <= set(doc["tools"])
    human = run_cli("env")
    assert human.returncode == 0 and f"python" in human.stdout and doc["torch"] in human.stdout


@pytest.mark.skipif(_cuda(), reason="checks the no-GPU behaviour")
def test_env_require_gpu_exits_1_with_one_line():
    r = run_cli("env", "--require", "gpu")
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "gpu: no CUDA GPU" in r.stderr and "Traceback" not in r.stderr


def test_env_require_unknown_is_usage_error():
    assert run_cli("env", "--require", "tpu").returncode == 2
