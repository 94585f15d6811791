"""Other tools' names -> kernelopt's: optimization names -> strategy pack ids, metric keys -> catalog keys.

The mapping is data (`knowledge/name_mappings.yaml`), extended or overridden by the
files in `KERNELOPT_NAME_MAP` (os.pathsep-separated, later files win), and listed by
`kernelopt experience mappings`.

Strategy names are mapped when records are read for ranking, filtering and stats,
never when they are stored: a record keeps the name it was imported with, so a
corrected mapping applies to records already in the database.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from kernelopt.errors import BadInput

ENV_VAR = "KERNELOPT_NAME_MAP"
BUILTIN_FILE = "name_mappings.yaml"


@dataclass(frozen=True)
class MetricAlias:
    key: str
    scale: float = 1.0
    fraction_at_most: float | None = None
    origin: str = ""

    def convert(self, value: float) -> float:
        if self.fraction_at_most is not None and 0 <= value <= self.fraction_at_most:
            value *= 100.0
        return value * self.scale


@dataclass
class NameMappings:
    # alias (pack spelling) -> {backend or "*": pack id}
    strategies: dict[str, dict[str, str]] = field(default_factory=dict)
    strategy_origin: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, MetricAlias] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def strategy(self, name: str, backend: str | None = None) -> str:
        """The pack id `name` means (for `backend`, when the mapping depends on it); else `name`."""
        from kernelopt.experience.labels import strategy_id

        sid = strategy_id(name)
        targets = self.strategies.get(sid)
        if not targets:
            return sid
        if "*" in targets:
            return targets["*"]
        if backend and backend in targets:
            return targets[backend]
        # No backend known: the first listed target (mappings list Triton first).
        return next(iter(targets.values()))

    def aliases_of(self, pack_id: str) -> list[str]:
        """Every imported name that maps onto `pack_id` (for any backend)."""
        return sorted(a for a, t in self.strategies.items() if pack_id in t.values())

    def metrics_dict(self, values: dict[str, float]) -> dict[str, float]:
        """Metric keys of other tools -> catalog keys, values converted; other keys unchanged.
        A catalog key given directly wins over an alias of it."""
        out: dict[str, float] = {}
        for k, v in values.items():
            alias = self.metrics.get(k)
            if alias is None:
                out[k] = v
            elif alias.key not in values:
                out[alias.key] = alias.convert(v)
        return out


def _parse(path: Path, into: NameMappings) -> None:
    from kernelopt.experience.labels import strategy_id
    from kernelopt.models.common import BACKENDS
    from kernelopt.yamlio import load_yaml

    doc = load_yaml(path)
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict) or set(data) - {"strategies", "metrics"}:
        raise BadInput(f"{doc.where(())}: a name mapping is a mapping with 'strategies' and/or 'metrics'")
    strategies = data.get("strategies") or {}
    if not isinstance(strategies, dict):
        raise BadInput(f"{doc.where(('strategies',))}: strategies: expected name -> pack id")
    for alias, target in strategies.items():
        where = f"{doc.where(('strategies', alias))}: strategies.{alias}"
        if isinstance(target, str) and target.strip():
            targets = {"*": strategy_id(target)}
        elif isinstance(target, dict) and target and all(
                isinstance(b, str) and b in BACKENDS and isinstance(t, str) and t.strip() for b, t in target.items()):
            targets = {b: strategy_id(t) for b, t in target.items()}
        else:
            raise BadInput(f"{where}: expected a pack id or {{backend: pack id}} with backends {', '.join(BACKENDS)}")
        into.strategies[strategy_id(str(alias))] = targets
        into.strategy_origin[strategy_id(str(alias))] = str(path)
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise BadInput(f"{doc.where(('metrics',))}: metrics: expected name -> {{key, scale}}")
    for alias, spec in metrics.items():
        where = f"{doc.where(('metrics', alias))}: metrics.{alias}"
        if isinstance(spec, str):
            spec = {"key": spec}
        if not isinstance(spec, dict) or not isinstance(spec.get("key"), str) or set(spec) - {"key", "scale", "fraction_at_most"}:
            raise BadInput(f"{where}: expected a catalog key or {{key, scale, fraction_at_most}}")
        numbers = {}
        for name in ("scale", "fraction_at_most"):
            value = spec.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise BadInput(f"{where}.{name}: expected a positive number, got {value!r}")
            numbers[name] = float(value)
        into.metrics[str(alias)] = MetricAlias(key=spec["key"], origin=str(path), **numbers)
    into.files.append(str(path))


def mapping_files() -> list[Path]:
    from kernelopt.resources import data_dir

    files = [data_dir("knowledge") / BUILTIN_FILE]
    for entry in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if entry.strip():
            path = Path(entry.strip()).expanduser()
            if not path.is_file():
                raise BadInput(f"{ENV_VAR}: {path}: no such file")
            files.append(path)
    return files


def load_mappings() -> NameMappings:
    """The built-in mapping plus the user's files, later ones overriding earlier names."""
    files = mapping_files()
    stamp = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file())
    return _load(stamp)


@functools.lru_cache(maxsize=8)
def _load(stamp: tuple[tuple[str, int, int], ...]) -> NameMappings:
    out = NameMappings()
    for path, _, _ in stamp:
        _parse(Path(path), out)
    return out


def check_targets(mappings: NameMappings, ids: Iterable[str], keys: Iterable[str]) -> list[str]:
    """Warnings: mapped strategy ids not among `ids` (the loaded packs'), metric keys not among
    `keys` (the metric catalog's). The caller loads both: the store knows neither."""
    ids, keys = set(ids), set(keys)
    warnings = [f"{mappings.strategy_origin[a]}: strategies.{a}: {t!r} is not a strategy in any loaded pack"
                for a, targets in sorted(mappings.strategies.items()) for t in targets.values() if t not in ids]
    warnings += [f"{m.origin}: metrics.{a}: {m.key!r} is not a metric catalog key"
                 for a, m in sorted(mappings.metrics.items()) if m.key not in keys]
    return warnings


def as_table(mappings: NameMappings) -> dict[str, Any]:
    """JSON-ready view for `experience mappings --json`."""
    return {
        "files": mappings.files,
        "strategies": {a: {"targets": t, "file": mappings.strategy_origin[a]} for a, t in sorted(mappings.strategies.items())},
        "metrics": {a: {"key": m.key, "scale": m.scale, "fraction_at_most": m.fraction_at_most, "file": m.origin}
                    for a, m in sorted(mappings.metrics.items())},
    }
