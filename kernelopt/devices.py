"""Device ceilings: what a device can do at most (the floor every stage may read).

Two sources of ceilings: the datasheet table `knowledge/devices.yaml` (published
peaks, each row citing its source) and the measured ceilings that
`kernelopt.harness.ceilings.measure_ceilings()` (`kernelopt env --measure`) caches here,
once per device and driver, under the user's cache directory. `dram_peak` and
`compute_peak` are the one choice of a ceiling. The roofline of a profiled kernel is
`kernelopt.profile.devices` (the profile stage); the engine's floor (harness) and the
suite's roofline fraction read the ceilings here.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from kernelopt.models.common import Model

PRECISIONS = ("fp32", "fp64", "fp64_tensor", "tf32_tensor", "bf16_tensor", "fp16_tensor")


class DeviceSpec(Model):
    name: str
    match: list[str]
    sm_count: int | None = None
    dram_bytes_per_s: float | None = None
    l2_bytes: int | None = None
    flops: dict[str, float | None] = Field(default_factory=dict, description="peak FLOP/s by precision")
    source: str


class Ceilings(Model):
    """Measured achievable rates of one device (bytes/s, FLOP/s)."""

    device: str
    driver: str | None = None
    dram_bytes_per_s: float
    flops: dict[str, float] = Field(default_factory=dict)
    method: dict[str, Any] = Field(default_factory=dict)
    measured_at: str


@functools.lru_cache(maxsize=None)
def known_devices() -> tuple[DeviceSpec, ...]:
    from kernelopt.yamlio import load_table
    from kernelopt.resources import data_dir

    return tuple(load_table(data_dir("knowledge") / "devices.yaml", "devices", DeviceSpec))


def lookup_device(name: str | None) -> DeviceSpec | None:
    """The datasheet row for a device name as torch/ncu report it, e.g. 'NVIDIA H100 80GB HBM3'."""
    if not name:
        return None
    low = name.lower()
    return next((d for d in known_devices() if all(m in low for m in d.match)), None)


# ---------------------------------------------------------------- measured ceilings

def cache_path() -> Path:
    from kernelopt.files import cache_dir

    return cache_dir() / "ceilings.json"


def _cache_key(device: str, driver: str | None) -> str:
    return f"{device}|{driver or '?'}"


def _read_cache() -> dict[str, Any]:
    """The ceilings cache; empty when it is missing or unreadable."""
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def cached_ceilings(device: str | None, driver: str | None = None) -> Ceilings | None:
    """Measured ceilings for `device` (and `driver` when given) from the cache, if any."""
    if not device:
        return None
    data = _read_cache()
    entries = [data.get(_cache_key(device, driver))] if driver else [
        v for k, v in data.items() if k.split("|", 1)[0] == device
    ]
    for entry in entries:
        try:
            return Ceilings.model_validate(entry)
        except ValidationError:
            continue
    return None


def store_ceilings(ceilings: Ceilings) -> None:
    """Cache measured ceilings for their device and driver (kernelopt.harness.ceilings measures them)."""
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _read_cache()
    data[_cache_key(ceilings.device, ceilings.driver)] = ceilings.model_dump(mode="json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


# ---------------------------------------------------------------- roofline

def dram_peak(device: str | None, *, highest: bool = False) -> tuple[float | None, str | None]:
    """(peak DRAM bytes/s, where it comes from) for `device`; (None, None) when unknown.

    The one choice of a DRAM ceiling. By default the measured figure (`kernelopt env
    --measure`, cached per device) where present, else the datasheet row: a fraction of
    the roofline is a fraction of what this machine does. `highest=True` takes the larger
    of the two: a floor on a kernel's time must be a lower bound, so a measured copy
    bandwidth below the datasheet must not raise it."""
    if not device:
        return None, None
    return choose_dram_peak(cached_ceilings(device), lookup_device(device), highest)


def compute_peak(device: str | None, precision: str | None) -> tuple[float | None, str | None]:
    """(peak FLOP/s of `precision`, where it comes from): measured where cached, else the datasheet."""
    if not device or not precision:
        return None, None
    return choose_compute_peak(cached_ceilings(device), lookup_device(device), precision)


def choose_dram_peak(measured: Ceilings | None, spec: DeviceSpec | None, highest: bool) -> tuple[float | None, str | None]:
    options = []
    if measured is not None and measured.dram_bytes_per_s:
        options.append((measured.dram_bytes_per_s, "measured DRAM"))
    if spec is not None and spec.dram_bytes_per_s:
        options.append((spec.dram_bytes_per_s, f"datasheet DRAM ({spec.name})"))
    if not options:
        return None, None
    return max(options) if highest else options[0]


def choose_compute_peak(measured: Ceilings | None, spec: DeviceSpec | None, precision: str) -> tuple[float | None, str | None]:
    if measured is not None and measured.flops.get(precision):
        return measured.flops[precision], f"measured {precision}"
    if spec is not None and spec.flops.get(precision):
        return spec.flops[precision], f"datasheet {precision} ({spec.name})"
    return None, None
