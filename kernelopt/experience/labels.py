"""The one place where outside labels become kernelopt's vocabulary.

Bottleneck labels from other tools and experience logs map onto the six diagnosis
categories (`kernelopt.models.CATEGORIES`); anything unknown is rejected with the
allowed list. Outcomes are derived from the measured speedup and correctness with
the thresholds below unless a record states its outcome.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.models.common import BACKENDS, CATEGORIES

# Outcome thresholds (speedup = time_before / time_after):
#   incorrect  the changed kernel's output was wrong (whatever its speed)
#   success    speedup >= SUCCESS_SPEEDUP
#   failure    speedup <= FAILURE_SPEEDUP
#   neutral    in between: within timing noise of the baseline
SUCCESS_SPEEDUP = 1.05
FAILURE_SPEEDUP = 0.97
OUTCOMES: tuple[str, ...] = ("success", "neutral", "failure", "incorrect")

# Keys are compared after lower-casing and turning '-', ' ' and '/' into '_'.
BOTTLENECK_ALIASES: dict[str, str] = {
    **{c: c for c in CATEGORIES},
    # DRAM bandwidth
    "memory": "dram", "memory_bound": "dram", "mem_bound": "dram", "bandwidth": "dram",
    "bandwidth_bound": "dram", "dram_bound": "dram", "hbm": "dram", "hbm_bound": "dram",
    "global_memory": "dram", "memory_bandwidth": "dram",
    # caches and shared memory: on-chip memory traffic, not DRAM
    "onchip": "onchip_memory", "on_chip": "onchip_memory", "on_chip_memory": "onchip_memory",
    "l1": "onchip_memory", "l1_bound": "onchip_memory", "l1tex": "onchip_memory", "l2": "onchip_memory",
    "l2_bound": "onchip_memory", "shared": "onchip_memory", "shared_memory": "onchip_memory",
    "smem": "onchip_memory", "smem_bound": "onchip_memory", "cache": "onchip_memory",
    "cache_bound": "onchip_memory", "bank_conflicts": "onchip_memory",
    # compute
    "compute_bound": "compute", "math": "compute", "math_bound": "compute", "alu": "compute",
    "fma": "compute", "tensor": "compute", "tensor_core": "compute", "compute_throughput": "compute",
    # latency: neither memory nor compute is busy, warps wait
    "latency_bound": "latency", "stall": "latency", "stall_bound": "latency",
    # "underutilized" (used by kernel-opt-skill) means low throughput on every unit
    # without a starved launch: that is the latency case in our taxonomy; a grid too
    # small for the device is labelled `launch`/`occupancy` by the tools that know it.
    "underutilized": "latency", "under_utilized": "latency", "underutilization": "latency",
    # occupancy
    "occupancy_bound": "occupancy", "low_occupancy": "occupancy", "register_bound": "occupancy",
    "registers": "occupancy", "register_pressure": "occupancy",
    # launch: too few blocks/waves, launch overhead
    "launch_bound": "launch", "launch_overhead": "launch", "small_grid": "launch", "tail": "launch",
    "tail_effect": "launch", "overhead": "launch",
}


def _key(label: str) -> str:
    return re.sub(r"[\s\-/]+", "_", label.strip().lower())


def normalize_bottleneck(label: str | None) -> str | None:
    """`memory-bound` -> `dram`, ...; None/empty stays None; unknown labels raise BadInput."""
    if label is None or not str(label).strip():
        return None
    key = _key(str(label))
    if key in BOTTLENECK_ALIASES:
        return BOTTLENECK_ALIASES[key]
    raise BadInput(
        f"unknown bottleneck {label!r}: use one of {', '.join(CATEGORIES)} "
        f"(or an alias such as memory_bound, compute_bound, latency_bound, occupancy_bound, underutilized)"
    )


def normalize_backend(label: str | None) -> str | None:
    if label is None or not str(label).strip():
        return None
    key = _key(str(label))
    key = {"pytorch": "torch", "cuda_c": "cuda", "cuda_cpp": "cuda", "cpp": "cuda"}.get(key, key)
    if key not in BACKENDS:
        raise BadInput(f"unknown backend {label!r}: use one of {', '.join(BACKENDS)}")
    return key


def normalize_outcome(label: str | None) -> str | None:
    if label is None or not str(label).strip():
        return None
    key = _key(str(label))
    key = {
        "improved": "success", "win": "success", "better": "success", "pass": "success", "ok": "success",
        "no_change": "neutral", "same": "neutral", "regressed": "failure", "regression": "failure",
        "slower": "failure", "worse": "failure", "fail": "failure", "failed": "failure",
        "wrong": "incorrect", "incorrect_result": "incorrect", "mismatch": "incorrect",
    }.get(key, key)
    if key not in OUTCOMES:
        raise BadInput(f"unknown outcome {label!r}: use one of {', '.join(OUTCOMES)}")
    return key


def derive_outcome(speedup: float | None, correct: bool | None = True) -> str | None:
    """Outcome from correctness and speedup with the thresholds above; None if unknown."""
    if correct is False:
        return "incorrect"
    if speedup is None:
        return None
    if speedup >= SUCCESS_SPEEDUP:
        return "success"
    if speedup <= FAILURE_SPEEDUP:
        return "failure"
    return "neutral"


@functools.lru_cache(maxsize=256)
def chip_family(chip: str | None) -> str | None:
    """`sm_90a` / `SM90` / `9.0` -> `sm_9`; device names are matched by their first word."""
    if not chip:
        return None
    text = chip.strip().lower()
    m = re.search(r"sm_?(\d+)", text) or re.fullmatch(r"(\d+)\.(\d)", text)
    if m:
        digits = "".join(g for g in m.groups() if g)
        return f"sm_{digits[:-1] or digits}"
    for name, fam in (("h100", "sm_9"), ("h200", "sm_9"), ("h800", "sm_9"), ("gh200", "sm_9"),
                      ("a100", "sm_8"), ("a10", "sm_8"), ("l4", "sm_8"), ("l40", "sm_8"), ("rtx 40", "sm_8"),
                      ("rtx 30", "sm_8"), ("b200", "sm_10"), ("b100", "sm_10"), ("v100", "sm_7"), ("t4", "sm_7")):
        if name in text:
            return fam
    return text.split()[0]


def strategy_id(name: str) -> str:
    """Strategy ids are spelled like the packs' (`vectorize-with-alignment-hints`): lower case, hyphens."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def parse_optimization(text: str | None) -> tuple[list[str], dict[str, Any]]:
    """kernel-opt-skill's `name{params}` (e.g. `vectorize{width=4}`, `a+b`) -> ids and params."""
    if text is None or not str(text).strip():
        return [], {}
    text = str(text).strip()
    params: dict[str, Any] = {}
    ids: list[str] = []
    for part in re.split(r"\s*[+,;]\s*(?![^{]*\})", text):
        m = re.fullmatch(r"([^{}]+?)\s*(?:\{(.*)\})?", part.strip())
        if not m or not m.group(1):
            raise BadInput(f"optimization {text!r}: expected name or name{{key=value,...}}")
        sid = strategy_id(m.group(1))
        ids.append(sid)
        for kv in filter(None, (p.strip() for p in (m.group(2) or "").split(","))):
            k, sep, v = kv.partition("=") if "=" in kv else kv.partition(":")
            params[k.strip()] = _scalar(v.strip()) if sep else True
    return ids, params


def _scalar(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v.strip("'\"")


# Kernel jargon the embedding model does not know (all-MiniLM-L6-v2 puts "rmsnorm" nearer to
# "sgemm" than to "layernorm forward"): each known word gets its plain-English gloss
# appended before embedding, on records and queries alike.
KERNEL_GLOSSARY: dict[str, str] = {
    "layernorm": "layer normalization", "ln": "layer normalization",
    "rmsnorm": "rms layer normalization", "rms": "root mean square normalization",
    "groupnorm": "group normalization", "batchnorm": "batch normalization", "bn": "batch normalization",
    "norm": "normalization",
    "gemm": "matrix multiplication", "sgemm": "fp32 matrix multiplication", "hgemm": "fp16 matrix multiplication",
    "matmul": "matrix multiplication", "mm": "matrix multiplication", "bmm": "batched matrix multiplication",
    "gemv": "matrix vector multiplication", "linear": "matrix multiplication with bias",
    "sdpa": "attention", "mha": "multi head attention", "gqa": "grouped query attention",
    "flash": "fused attention", "attn": "attention",
    "conv": "convolution", "conv2d": "2d convolution",
    "gelu": "elementwise activation", "relu": "elementwise activation", "silu": "elementwise activation",
    "swiglu": "gated elementwise activation", "geglu": "gated elementwise activation",
    "rope": "rotary position embedding elementwise", "ce": "cross entropy loss",
    "xent": "cross entropy loss", "logsumexp": "row reduction like softmax",
    "argmax": "row reduction", "cumsum": "prefix scan", "scan": "prefix scan",
    "topk": "selection", "embedding": "gather lookup", "memcpy": "memory copy",
}


def kernel_text(kernel: str | None) -> str:
    """A kernel description as embedded: words split (`rms_norm`, `RMSNorm`), jargon glossed."""
    text = (kernel or "").strip()
    words = re.findall(r"[A-Za-z]+[0-9]*d?|[0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " "))
    glosses = []
    lowered = [w.lower() for w in words]
    joined = "".join(lowered)
    for candidate in [joined, *lowered]:
        gloss = KERNEL_GLOSSARY.get(candidate)
        if gloss and gloss not in glosses:
            glosses.append(gloss)
    plain = " ".join(lowered) if words else text.lower()
    return f"{plain} ({'; '.join(glosses)})" if glosses else plain


_NOT_A_DIM = {"BYTES", "FLOPS", "SEED"}


def shape_class(dims: Any) -> str | None:
    """The order of magnitude of a problem's size, in steps of 1000x: '~1e9B' for a 4 GB problem.

    From the problem's BYTES when it declares one, else from the product of its integer
    constants (4 bytes an element). A `--small` run and a full-size run of one problem land
    in different classes; the suite's full-size problems share one."""
    import math

    if not isinstance(dims, dict) or not dims:
        return None
    nbytes = dims.get("BYTES")
    if not isinstance(nbytes, (int, float)) or isinstance(nbytes, bool) or nbytes <= 0:
        sizes = [v for k, v in dims.items() if k not in _NOT_A_DIM and isinstance(v, int)
                 and not isinstance(v, bool) and v >= 2]
        if not sizes:
            return None
        nbytes = 4.0 * math.prod(sizes)
    return f"~1e{3 * round(math.log10(float(nbytes)) / 3)}B"


def device_model(device: str | None) -> str | None:
    """The device's model, without its index: 'cuda:1 (NVIDIA H100 80GB HBM3)' -> 'nvidia h100 80gb hbm3';
    'cpu (Triton interpreter)' stays itself. None when unknown."""
    if not device or not device.strip():
        return None
    text = device.strip()
    m = re.fullmatch(r"cuda(?::\d+)?\s*\((.*)\)", text)
    return (m.group(1) if m else text).strip().lower()
