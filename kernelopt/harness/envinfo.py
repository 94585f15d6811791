"""What this machine offers for kernel work: GPU, driver, CUDA, torch, triton, ncu, nvcc, clocks.

`collect_env()` returns an `EnvInfo`; `missing_requirements(env, ["gpu", "ncu"])`
says, one line each, what a mode needs and is not there. External tools run with
argument lists and a timeout (never through a shell); a tool that is absent,
hangs or fails leaves its fields empty and a note, never an exception.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from pydantic import Field

from kernelopt.models.common import Model

# What `missing_requirements` (and `env --require`) can check.
REQUIREMENTS: tuple[str, ...] = ("gpu", "ncu", "nvcc", "ptxas")

TOOL_TIMEOUT_S = 20.0
# nvidia-smi fields, in this order (clocks in MHz with `nounits`); the name goes last
# because it is the only one that could hold a comma.
_SMI_FIELDS = ("index", "uuid", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "name")


class Clocks(Model):
    """Clocks from `nvidia-smi --query-gpu` at the time of the query, MHz."""

    sm_mhz: int | None = None
    sm_max_mhz: int | None = None
    mem_mhz: int | None = None
    mem_max_mhz: int | None = None


class GpuInfo(Model):
    index: int
    name: str
    compute_capability: str = Field(description='"major.minor", e.g. "9.0"')
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    clocks: Clocks | None = None


class ToolInfo(Model):
    path: str | None = None
    version: str | None = None
    error: str | None = None


class EnvInfo(Model):
    python: str
    platform: str
    torch: str | None = None
    torch_cuda: str | None = Field(None, description="CUDA runtime version torch was built with")
    triton: str | None = None
    cuda_available: bool = False
    gpus: list[GpuInfo] = Field(default_factory=list)
    driver: str | None = None
    cuda_driver: str | None = Field(None, description="highest CUDA version the driver supports (cuDriverGetVersion)")
    tools: dict[str, ToolInfo] = Field(default_factory=dict, description="ncu, nvcc, ptxas, nvidia-smi")
    notes: list[str] = Field(default_factory=list)
    measured: dict[str, Any] = Field(
        default_factory=dict, description="achievable bandwidth/FLOP rates, filled by `env --measure`"
    )


def find_tool(name: str) -> str | None:
    """Path of a CUDA tool: on PATH, else under $CUDA_HOME/bin or /usr/local/cuda/bin
    (and, for ncu, the newest /opt/nvidia/nsight-compute/*/ncu)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [
        Path(root) / "bin" / name
        for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")
        if root
    ]
    if name == "ncu":
        candidates += sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"), reverse=True)
    for cand in candidates:
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def run_tool(argv: Sequence[str], timeout_s: float = TOOL_TIMEOUT_S) -> tuple[str | None, str | None]:
    """(stdout, None) on success, (None, one-line reason) otherwise."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return None, f"{argv[0]} not found"
    except subprocess.TimeoutExpired:
        return None, f"{Path(argv[0]).name} did not answer within {timeout_s:g} s"
    except OSError as exc:
        return None, f"{Path(argv[0]).name}: {exc}"
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"{Path(argv[0]).name} exited with {proc.returncode}" + (f": {msg[-1]}" if msg else "")
    return proc.stdout, None


def parse_tool_version(text: str) -> str | None:
    """The version line of `nvcc/ptxas/ncu --version`.

    nvcc/ptxas print "Cuda compilation tools, release 13.0, V13.0.88"; ncu prints
    "Version 2025.3.1.0 (build ...)".
    """
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Cuda compilation tools"):
            return line.split(",", 1)[1].strip() if "," in line else line
        if line.lower().startswith("version"):
            return line.split(None, 1)[1].strip() if " " in line else line
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def tool_info(name: str) -> ToolInfo:
    path = find_tool(name)
    if path is None:
        return ToolInfo(error=f"{name} not found on PATH or in $CUDA_HOME/bin")
    out, err = run_tool([path, "--version"])
    if out is None:
        return ToolInfo(path=path, error=err)
    return ToolInfo(path=path, version=parse_tool_version(out))


def parse_smi_query(text: str) -> dict[int, dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=<_SMI_FIELDS> --format=csv,noheader,nounits` by GPU index."""
    rows: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", len(_SMI_FIELDS) - 1)]
        if len(cells) != len(_SMI_FIELDS):
            continue
        try:
            index = int(cells[0])
        except ValueError:
            continue
        row = dict(zip(_SMI_FIELDS, cells))
        rows[index] = {
            "uuid": row["uuid"],
            "name": row["name"],
            "driver": row["driver_version"],
            "clocks": Clocks(
                sm_mhz=_int_or_none(row["clocks.sm"]),
                sm_max_mhz=_int_or_none(row["clocks.max.sm"]),
                mem_mhz=_int_or_none(row["clocks.mem"]),
                mem_max_mhz=_int_or_none(row["clocks.max.mem"]),
            ),
        }
    return rows


def _int_or_none(cell: str) -> int | None:
    try:
        return int(float(cell))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _query_smi(env: EnvInfo) -> dict[int, dict[str, Any]]:
    path = find_tool("nvidia-smi")
    if path is None:
        env.tools["nvidia-smi"] = ToolInfo(error="nvidia-smi not found")
        return {}
    out, err = run_tool([path, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits"])
    if out is None:
        env.tools["nvidia-smi"] = ToolInfo(path=path, error=err)
        return {}
    rows = parse_smi_query(out)
    driver = next((r["driver"] for r in rows.values() if r.get("driver")), None)
    env.tools["nvidia-smi"] = ToolInfo(path=path, version=driver)
    return rows


def gpu_uuid(device: str) -> str | None:
    """The UUID of `device` ("cuda:N" as this process numbers its GPUs; CUDA initialised here), as
    torch gives it (hex, no GPU- prefix); None where torch reports none."""
    try:
        import torch

        uuid = str(getattr(torch.cuda.get_device_properties(torch.device(device)), "uuid", "") or "")
    except Exception:  # noqa: BLE001 - no such device, or a torch without the field
        return None
    return uuid.removeprefix("GPU-") or None


def _match_smi(smi: dict[int, dict[str, Any]], index: int, props: Any) -> Clocks | None:
    # nvidia-smi numbers GPUs in PCI order, torch after CUDA_VISIBLE_DEVICES: match by UUID.
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        for row in smi.values():
            if row["uuid"].removeprefix("GPU-") == uuid.removeprefix("GPU-"):
                return row["clocks"]
        return None
    row = smi.get(index)
    return row["clocks"] if row and row["name"] == props.name and "CUDA_VISIBLE_DEVICES" not in os.environ else None


def _proc_driver_version() -> str | None:
    # Present on Linux with the NVIDIA kernel module loaded, even without nvidia-smi.
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for token in text.split():
        parts = token.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return token
    return None


def _cuda_driver_version() -> str | None:
    # libcuda answers without creating a context; absent on machines without the driver.
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def driver_version() -> str | None:
    """The NVIDIA driver's version without running nvidia-smi (the kernel module's, else libcuda's CUDA level)."""
    proc = _proc_driver_version()
    if proc:
        return proc
    cuda = _cuda_driver_version()
    return f"cuda {cuda}" if cuda else None


def collect_env(*, tools: bool = True) -> EnvInfo:
    """Describe this machine. `tools=False` skips ncu/nvcc/ptxas (nvidia-smi still runs for clocks)."""
    env = EnvInfo(python=sys.version.split()[0], platform=platform.platform())
    try:
        import torch

        env.torch = torch.__version__
        env.torch_cuda = torch.version.cuda
        env.cuda_available = bool(torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001 - a broken torch install is reported, not fatal
        env.notes.append(f"torch could not be imported: {type(exc).__name__}: {exc}")
        torch = None  # type: ignore[assignment]
    try:
        import triton

        env.triton = triton.__version__
    except Exception as exc:  # noqa: BLE001
        env.notes.append(f"triton could not be imported: {type(exc).__name__}: {exc}")

    smi = _query_smi(env)
    env.driver = next((r["driver"] for r in smi.values() if r.get("driver")), None) or _proc_driver_version()
    env.cuda_driver = _cuda_driver_version()
    if torch is not None and env.cuda_available:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            env.gpus.append(
                GpuInfo(
                    index=i,
                    name=props.name,
                    compute_capability=f"{props.major}.{props.minor}",
                    sm_count=props.multi_processor_count,
                    l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
                    memory_bytes=int(props.total_memory),
                    clocks=_match_smi(smi, i, props),
                )
            )
    elif torch is not None:
        env.notes.append("no CUDA GPU visible to torch (torch.cuda.is_available() is False)")
    if tools:
        for name in ("ncu", "nvcc", "ptxas"):
            env.tools[name] = tool_info(name)
    return env


def software_summary() -> dict[str, str | None]:
    """The software a run's figures depend on (RunConfig.env): python, torch, triton (installed
    versions, read without importing them), the driver and the CUDA version it supports."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"python": sys.version.split()[0], "torch": installed("torch"), "triton": installed("triton"),
            "driver": _proc_driver_version(), "cuda_driver": _cuda_driver_version(),
            "kernelopt": kernelopt_version()}


def missing_requirements(env: EnvInfo, required: Sequence[str]) -> list[str]:
    """One line per requirement in `required` that `env` does not meet."""
    missing: list[str] = []
    for req in dict.fromkeys(required):
        if req == "gpu":
            if not env.gpus:
                missing.append("gpu: no CUDA GPU is visible to torch")
        elif req in REQUIREMENTS:
            info = env.tools.get(req)
            if info is None or info.version is None:
                missing.append(f"{req}: {info.error if info and info.error else 'not checked'}")
        else:
            raise ValueError(f"unknown requirement {req!r}")
    return missing


def kernelopt_version() -> str | None:
    """The installed kernelopt's version; from a checkout that is not installed (a lent GPU runs
    the tree from PYTHONPATH), the package's own `__version__`."""
    try:
        from importlib.metadata import version

        return version("kernelopt")
    except Exception:  # noqa: BLE001 - not installed
        from kernelopt import __version__

        return __version__


def git_commit() -> str | None:
    """The commit a result comes from: `KERNELOPT_COMMIT`, else `git rev-parse HEAD` of this checkout.

    The one provenance helper for runs, suites and benchmarks. A lent GPU gets the work tree
    without .git, so the commit comes from outside there (KERNELOPT_COMMIT)."""
    import os
    import subprocess
    from pathlib import Path

    if os.environ.get("KERNELOPT_COMMIT"):
        return os.environ["KERNELOPT_COMMIT"]
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=str(Path(__file__).resolve().parent), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None
