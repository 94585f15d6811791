"""`kernelopt env`: report GPU, driver, CUDA, torch, triton, ncu, nvcc, ptxas, clocks and Python."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kernelopt.cli.common import emit, json_option

if TYPE_CHECKING:
    from kernelopt.harness.envinfo import EnvInfo


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def format_env(env: "EnvInfo") -> str:
    rows: list[tuple[str, str]] = [
        ("python", env.python),
        ("platform", env.platform),
        ("torch", f"{env.torch or 'not importable'}" + (f" (CUDA {env.torch_cuda})" if env.torch_cuda else "")),
        ("triton", env.triton or "not importable"),
        ("driver", (env.driver or "none found") + (f" (supports CUDA {env.cuda_driver})" if env.cuda_driver else "")),
    ]
    if not env.gpus:
        rows.append(("gpu", "none (no CUDA GPU visible to torch)"))
    for g in env.gpus:
        desc = (
            f"{g.name}, cc {g.compute_capability}, {g.sm_count} SMs, L2 {_mib(g.l2_bytes)}, "
            f"memory {_gib(g.memory_bytes)}"
        )
        rows.append((f"gpu {g.index}", desc))
        if g.clocks:
            c = g.clocks
            rows.append(
                (f"clocks {g.index}", f"SM {c.sm_mhz}/{c.sm_max_mhz} MHz, memory {c.mem_mhz}/{c.mem_max_mhz} MHz (current/max)")
            )
    for name, tool in env.tools.items():
        if tool.version:
            rows.append((name, f"{tool.version} ({tool.path})"))
        else:
            rows.append((name, f"missing: {tool.error}"))
    rows += [("note", n) for n in env.notes]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


@click.command("env", epilog="Exit codes: 0 fine; 1 a --require'd item is missing.")
@click.option(
    "--require",
    "required",
    multiple=True,
    type=click.Choice(["gpu", "ncu", "nvcc", "ptxas"]),
    help="Exit 1, with a one-line reason, if this is missing (repeatable): "
    "gpu (a CUDA device torch can use), ncu, nvcc, ptxas.",
)
@click.option(
    "--measure",
    is_flag=True,
    help="Also measure achievable DRAM bandwidth (1 GiB device copy) and FP32/BF16 matmul rates on the GPU, "
    "once per device and driver (cached; `kernelopt profile` uses them as roofline ceilings).",
)
@json_option
def env(required: tuple[str, ...], as_json: bool, measure: bool = False) -> None:
    """Report the GPU (name, compute capability, SMs, L2, memory, clocks), driver, CUDA runtime,
    torch, triton, ncu, nvcc, ptxas and Python versions."""
    from kernelopt.errors import MissingRequirement
    from kernelopt.harness.envinfo import collect_env, missing_requirements

    info = collect_env()
    if measure:
        from kernelopt.harness.ceilings import describe_ceilings, measure_ceilings

        info.measured = measure_ceilings().model_dump(mode="json")
        emit(info, as_json, lambda e: format_env(e) + "\n" + describe_ceilings(e.measured))
    else:
        emit(info, as_json, format_env)
    missing = missing_requirements(info, required)
    if missing:
        raise MissingRequirement("required but missing: " + "; ".join(missing))
