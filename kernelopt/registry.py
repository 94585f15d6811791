"""The one shape of kernelopt's pluggable parts: built-ins by "module:attribute", plus entry points.

Every pluggable kind keeps a `Registry` (listed in `REGISTRIES`): built-ins are imported only
when chosen (so `kernelopt --help` stays fast), third-party ones come from an entry-point group.
Factories (optimizers, LLM providers, transforms, executors, profilers, importers) are looked up by name
(`factory`); data (strategy packs, rule packs) is loaded all at once (`load_all`).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

# Every registry of kernelopt: kind -> "module:attribute" of its Registry (tests enumerate them).
REGISTRIES: dict[str, str] = {
    "optimizer": "kernelopt.optimize.base:REGISTRY",
    "LLM provider": "kernelopt.optimize.llm.providers:_REGISTRY",
    "transform": "kernelopt.optimize.transforms:REGISTRY",
    "executor": "kernelopt.harness.evaluate:EXECUTOR_REGISTRY",
    "strategy pack": "kernelopt.strategies:REGISTRY",
    "rule pack": "kernelopt.diagnose.packs:REGISTRY",
    "metrics importer": "kernelopt.profile.importers:REGISTRY",
    "experience importer": "kernelopt.experience.importers:REGISTRY",
    "profiler": "kernelopt.profile:REGISTRY",
}


class Registry:
    def __init__(self, kind: str, group: str, builtin: dict[str, str]) -> None:
        self.kind = kind  # "optimizer", "LLM provider": for messages
        self.group = group
        self.builtin = builtin

    def entry_points(self) -> list[Any]:
        """The group's entry points, sorted by name (a stable load order)."""
        from importlib.metadata import entry_points

        try:
            return sorted(entry_points(group=self.group), key=lambda ep: ep.name)
        except Exception:  # noqa: BLE001 - a broken distribution must not break the registry
            return []

    def available(self) -> dict[str, str]:
        """Name -> where it comes from ('builtin' or the entry point's value)."""
        names = {name: "builtin" for name in self.builtin}
        for ep in self.entry_points():
            names.setdefault(ep.name, ep.value)
        return names

    def factory(self, name: str) -> Callable[..., Any] | None:
        if name in self.builtin:
            module_name, attr = self.builtin[name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        for ep in self.entry_points():
            if ep.name == name:
                return ep.load()
        return None

    def load_all(self, *, builtin: bool = True, entry_points: bool = True) -> list[tuple[str, str, Any]]:
        """(name, origin, value) of every item, built-ins first, then entry points by name; origin
        is 'builtin' or 'entry point NAME (VALUE)'. A callable target (a function naming pack
        files) is called with no arguments. For data registries (packs); a third-party entry
        point that fails to load is BadInput naming it."""
        from kernelopt.errors import BadInput

        out: list[tuple[str, str, Any]] = []
        if builtin:
            for name in self.builtin:
                target = self.factory(name)
                out.append((name, "builtin", target() if callable(target) else target))
        if entry_points:
            for ep in self.entry_points():
                origin = f"entry point {ep.name!r} ({ep.value})"
                try:
                    target = ep.load()
                    if callable(target):
                        target = target()
                except Exception as exc:  # noqa: BLE001 - third-party code: whatever it raised is bad input
                    raise BadInput(f"{origin}: failed to load: {type(exc).__name__}: {exc}") from None
                out.append((ep.name, origin, target))
        return out


def registries() -> dict[str, Registry]:
    """Every registry of kernelopt by kind (imports the modules that keep them)."""
    out = {}
    for kind, where in REGISTRIES.items():
        module_name, attr = where.split(":")
        out[kind] = getattr(importlib.import_module(module_name), attr)
    return out
