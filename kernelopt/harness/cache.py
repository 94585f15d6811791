"""What does not change between runs, timed once: the baselines' times.

The eager and torch.compile baselines of a problem depend only on the problem file, its
shape overrides and dtype, the seed its inputs and weights are drawn with, the device,
the library versions (torch, triton, the driver) and the timing options. A suite re-run,
a resumed run, a second optimize or a bench of the same problem reuses them from
`$XDG_CACHE_HOME/kernelopt/baselines.json` (`~/.cache/kernelopt/` when XDG_CACHE_HOME is
not set), the directory the measured device ceilings share. `--no-cache` (optimize, suite
run, bench; `cache=False` in the library) neither reads nor writes it. Only successful
timings are kept: a baseline that failed is timed (and fails) again.

The file is one JSON object, key -> entry; a key is the sha256 of everything the time
depends on, and the entry repeats those fields (`what`) so a person can read what was
cached. Writers take an exclusive lock (fcntl) on a sibling lock file and rename a new
file over the old one, so two workers writing at once lose nothing and a reader never
sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from kernelopt.files import cache_dir
from kernelopt.models.harness import Problem, Timing

BASELINES_FILE = "baselines.json"


def baselines_path() -> Path:
    return cache_dir() / BASELINES_FILE


def library_versions() -> dict[str, str | None]:
    """torch, triton, the CUDA runtime torch was built with, and the driver: a change in any re-times."""
    import torch

    from kernelopt.harness.envinfo import driver_version

    try:
        import triton

        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    return {"torch": torch.__version__, "triton": triton_version, "cuda": torch.version.cuda,
            "driver": driver_version()}


def baseline_what(problem: Problem, name: str, *, device: str, seed: int, timing: dict[str, Any],
                  versions: dict[str, str | None]) -> dict[str, Any]:
    """Everything a baseline's time depends on (the cache key is the hash of this)."""
    from kernelopt.harness.timing import timing_defaults

    try:
        content = hashlib.sha256(Path(problem.path).read_bytes()).hexdigest()
    except OSError:
        content = None  # cannot be keyed: never cached (see baseline_key)
    return {
        "baseline": name,
        "problem": problem.name,
        "problem_sha256": content,
        "overrides": {k: str(v) for k, v in sorted(problem.overrides.items())},
        "dtype": problem.dtype,
        "seed": seed,
        "device": device,
        "versions": dict(versions),
        "timing": {**{k: v for k, v in timing_defaults().items()}, **timing},
    }


def baseline_key(what: dict[str, Any]) -> str | None:
    if what.get("problem_sha256") is None:
        return None
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # missing or damaged: a cache, not a record; it is rebuilt
    return data if isinstance(data, dict) else {}


def cached_baselines(keys: dict[str, str | None]) -> dict[str, Timing]:
    """name -> the cached Timing for each baseline whose key is in the cache."""
    data = _read(baselines_path())
    out: dict[str, Timing] = {}
    for name, key in keys.items():
        entry = data.get(key) if key else None
        if not isinstance(entry, dict):
            continue
        try:
            timing = Timing.model_validate(entry.get("timing"))
        except ValueError:
            continue
        if timing.stats is not None and timing.error is None:
            out[name] = timing
    return out


def store_baselines(entries: dict[str, tuple[dict[str, Any], Timing]]) -> None:
    """Add key -> (what, timing) for each successful timing; a cache that cannot be written is skipped."""
    import fcntl

    from kernelopt.rundir import atomic_write, now_iso

    keep = {k: (w, t) for k, (w, t) in entries.items() if k and t.stats is not None and t.error is None}
    if not keep:
        return
    path = baselines_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = _read(path)
        for key, (what, timing) in keep.items():
            data[key] = {"what": what, "timing": timing.model_dump(mode="json"), "cached_at": now_iso()}
        atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass
    finally:
        os.close(fd)  # closing releases the lock


def baselines_once(problem: Problem, names: list[str], *, device: str, seed: int, timing: dict[str, Any],
                   enabled: bool, time_them: Any) -> tuple[dict[str, Timing], list[str]]:
    """The baselines `names`, from the cache where it holds them, else `time_them(missing) -> {name: Timing}`
    (then cached); returns (timings in the order asked, the names that came from the cache)."""
    keys: dict[str, str | None] = {}
    whats: dict[str, dict[str, Any]] = {}
    if enabled and names:
        versions = library_versions()
        for name in names:
            whats[name] = baseline_what(problem, name, device=device, seed=seed, timing=timing, versions=versions)
            keys[name] = baseline_key(whats[name])
    hits = cached_baselines(keys) if keys else {}
    missing = [n for n in names if n not in hits]
    timed: dict[str, Timing] = time_them(missing) if missing else {}
    if keys:
        store_baselines({keys[n]: (whats[n], t) for n, t in timed.items() if keys.get(n)})  # type: ignore[misc]
    return {n: hits[n] if n in hits else timed[n] for n in names}, [n for n in names if n in hits]
