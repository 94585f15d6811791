"""Strategy packs: load, validate, override. (Ranking them for a situation is `kernelopt.recommend`.)

Packs load in this order, a later pack overriding an earlier one's strategy by id
(every override is recorded in `StrategySet.overrides`):

1. the built-in packs (`strategies/*.yaml` in a checkout, package data in a wheel);
2. files and directories listed in `KERNELOPT_STRATEGY_PATH` (os.pathsep-separated);
3. entry points of the group `kernelopt.strategies` (sorted by name). The loaded
   object is a path (str/Path) to a YAML file or a directory of them, a list of
   paths, or a zero-argument callable returning one of those.

`when` and `avoid_when` are conditions over metric catalog keys, compiled and
evaluated by `kernelopt.conditions` (the one safe evaluator); the prose side of an
anti-pattern lives in `pitfall`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Iterable

from kernelopt.errors import BadInput
from kernelopt.models.strategy import Override, PackCheck, Strategy, StrategyPack, StrategySet
from kernelopt.registry import Registry

ENV_PATH = "KERNELOPT_STRATEGY_PATH"
ENTRY_POINT_GROUP = "kernelopt.strategies"
PACK_SUFFIXES = (".yaml", ".yml")


def metric_keys() -> frozenset[str]:
    """Metric keys a condition may name: the profiler's catalog (knowledge/metrics.yaml)."""
    from kernelopt.profile.catalog import load_catalog

    return frozenset(load_catalog().by_key)


# ----------------------------------------------------------------------------- loading


def _check_raw(doc: Any, keys: frozenset[str], transforms: bool = False) -> list[str]:
    """Checks on the raw document (duplicate ids, conditions and their metric keys, and with
    `transforms` that a named transform resolves and takes the given parameters), so they
    are reported with lines even when other fields of the same pack fail the schema."""
    from kernelopt.conditions import ConditionError, compile_condition

    errors = []
    items = doc.data.get("strategies")
    first_line: dict[str, int | None] = {}
    for index, item in enumerate(items if isinstance(items, list) else []):
        sid = item.get("id") if isinstance(item, dict) else None
        if isinstance(sid, str):
            if sid in first_line:
                errors.append(
                    f"{doc.where(('strategies', index, 'id'))}: strategies.{index}.id: "
                    f"duplicate id {sid!r} (first at line {first_line[sid]})"
                )
            else:
                first_line[sid] = doc.line_of(("strategies", index, "id"))
        for field in ("when", "avoid_when"):
            text = item.get(field) if isinstance(item, dict) else None
            if text is None:
                continue
            try:
                compile_condition(text, known=keys)
            except ConditionError as exc:
                errors.append(f"{doc.where(('strategies', index, field))}: strategies.{index}.{field}: {exc}")
        spec = item.get("transform") if isinstance(item, dict) and transforms else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            problem = _transform_problem(spec["name"], spec.get("params"))
            if problem:
                errors.append(f"{doc.where(('strategies', index, 'transform'))}: strategies.{index}.transform: {problem}")
    return errors


def _transform_problem(name: str, params: Any) -> str | None:
    """Why a pack's `transform:` does not resolve or its params do not fit, or None."""
    from kernelopt.optimize.transforms import get_transform, resolve_params

    try:
        transform = get_transform(name)
        if isinstance(params, dict):
            resolve_params(transform, params)
    except BadInput as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a third-party transform that fails to load is a pack error
        return f"transform {name!r} failed to load: {type(exc).__name__}: {exc}"
    return None


def check_pack(
    path: str | Path, origin: str = "path", transforms: bool = False
) -> tuple[StrategyPack | None, PackCheck]:
    """Validate one pack file: schema, unique kebab-case ids, conditions and their metric keys;
    with `transforms`, also that each named transform resolves and takes its params (this
    imports the transforms, so loading for a run leaves it to the optimizer)."""
    path = Path(path)
    try:
        st = path.stat()
        stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    if stamp is None or transforms:
        # Not cached when resolving transforms: the registry may change under the same file.
        return _check_pack(path, origin, transforms)
    # Parsing YAML with line tracking costs ~0.15 s a pack; every CLI call and every
    # recommend would pay it again. Cache by file stamp and hand out copies.
    pack, report = _check_pack_cached(str(path), origin, stamp)
    return (pack.model_copy(deep=True) if pack else None), report.model_copy(deep=True)


@functools.lru_cache(maxsize=64)
def _check_pack_cached(path: str, origin: str, stamp: tuple[int, int]) -> tuple[StrategyPack | None, PackCheck]:
    return _check_pack(Path(path), origin)


def _check_pack(path: Path, origin: str, transforms: bool = False) -> tuple[StrategyPack | None, PackCheck]:
    from pydantic import ValidationError

    from kernelopt.yamlio import load_yaml, pydantic_errors

    report = PackCheck(path=str(path), ok=False)
    try:
        doc = load_yaml(path)
    except BadInput as exc:
        report.errors.append(str(exc))
        return None, report
    if not isinstance(doc.data, dict):
        report.errors.append(f"{doc.where(())}: (document): a pack is a mapping with `pack` and `strategies`")
        return None, report
    pack: StrategyPack | None = None
    try:
        pack = StrategyPack.model_validate(doc.data)
    except ValidationError as exc:
        report.errors.extend(pydantic_errors(doc, exc))
    report.errors.extend(_check_raw(doc, metric_keys(), transforms))
    # Keep errors in file order: a pack author fixes them top to bottom.
    report.errors.sort(key=_line_of_error)
    if pack is None:
        return None, report
    for strategy in pack.strategies:
        strategy.pack = pack.pack.name
    if not pack.strategies:
        report.warnings.append(f"{doc.where(())}: pack {pack.pack.name!r} has no strategies")
    pack.origin = origin
    pack.path = str(path)
    report.pack = pack.pack.name
    report.strategies = len(pack.strategies)
    report.ok = not report.errors
    return (pack if report.ok else None), report


def _line_of_error(message: str) -> int:
    head = message.split(": ", 1)[0]
    line = head.rsplit(":", 1)[-1]
    return int(line) if line.isdigit() else 0


def load_pack(path: str | Path, origin: str = "path") -> StrategyPack:
    """Load one pack; BadInput (exit 2) names file, line and field of the first error."""
    pack, report = check_pack(path, origin)
    if pack is None:
        extra = len(report.errors) - 1
        more = f" (and {extra} more: kernelopt strategies validate {path})" if extra else ""
        raise BadInput(report.errors[0] + more)
    return pack


def _pack_files(path: Path, source: str) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in PACK_SUFFIXES and p.is_file())
    if path.is_file():
        return [path]
    raise BadInput(f"{source}: {path}: no such file or directory")


def builtin_pack_files() -> list[Path]:
    from kernelopt.resources import data_dir

    return _pack_files(data_dir("strategies"), "built-in strategies")


def env_pack_files() -> list[Path]:
    value = os.environ.get(ENV_PATH, "")
    return [f for entry in value.split(os.pathsep) if entry.strip() for f in _pack_files(Path(entry), ENV_PATH)]


# The built-in packs and those of installed distributions (group `kernelopt.strategies`).
REGISTRY = Registry("strategy pack", ENTRY_POINT_GROUP, {"builtin": "kernelopt.strategies:builtin_pack_files"})


def entry_point_pack_files() -> list[tuple[str, Path]]:
    """(entry point name, file) for every pack that installed distributions expose."""
    out: list[tuple[str, Path]] = []
    for name, source, target in REGISTRY.load_all(builtin=False):
        targets = target if isinstance(target, (list, tuple)) else [target]
        for t in targets:
            if not isinstance(t, (str, os.PathLike)):
                raise BadInput(f"{source}: returned {type(t).__name__}, expected a path to a YAML pack or directory")
            out.extend((name, f) for f in _pack_files(Path(t), source))
    return out


def load_strategies(*, builtin: bool = True, env: bool = True, entry_points: bool = True) -> StrategySet:
    """Every pack in load order; a later strategy with the same id overrides (and is reported)."""
    sources: list[tuple[str, Path]] = []
    if builtin:
        sources += [("builtin", p) for _, _, files in REGISTRY.load_all(entry_points=False) for p in files]
    if env:
        sources += [("path", p) for p in env_pack_files()]
    if entry_points:
        sources += [(f"entry-point:{name}", p) for name, p in entry_point_pack_files()]
    result = StrategySet()
    for origin, path in sources:
        pack = load_pack(path, origin)
        result.packs.append(pack)
        for strategy in pack.strategies:
            old = result.strategies.get(strategy.id)
            if old is not None:
                old_pack = next(p for p in result.packs if p.pack.name == old.pack)
                ov = Override(
                    strategy=strategy.id,
                    old_pack=old.pack or "?",
                    new_pack=pack.pack.name,
                    old_path=old_pack.path,
                    new_path=pack.path,
                )
                result.overrides.append(ov)
                result.warnings.append(
                    f"strategy {ov.strategy!r} of pack {ov.old_pack!r} overridden by pack "
                    f"{ov.new_pack!r} ({ov.new_path})"
                )
            result.strategies[strategy.id] = strategy
    return result


def validate_packs(paths: Iterable[str | Path]) -> list[PackCheck]:
    """Validate pack files (directories expand to their *.yaml files); never raises on a bad pack."""
    reports = []
    for p in paths:
        p = Path(p)
        files = _pack_files(p, "validate") if p.exists() else [p]
        if p.is_dir() and not files:
            reports.append(PackCheck(path=str(p), ok=False, errors=[f"{p}: no *.yaml packs in this directory"]))
        reports.extend(check_pack(f, transforms=True)[1] for f in files)
    return reports


def select(
    strategies: StrategySet, backend: str | None = None, category: str | None = None
) -> list[Strategy]:
    """Strategies for a backend (its own plus `any`) and/or a category, sorted by id."""
    out = []
    for s in strategies.strategies.values():
        if backend is not None and s.backend not in (backend, "any"):
            continue
        if category is not None and category not in s.categories:
            continue
        out.append(s)
    return sorted(out, key=lambda s: s.id)


def list_strategies(backend: str | None = None, category: str | None = None) -> tuple[list[Strategy], StrategySet]:
    loaded = load_strategies()
    return select(loaded, backend, category), loaded


def get_strategy(strategy_id: str) -> Strategy:
    loaded = load_strategies()
    try:
        return loaded.strategies[strategy_id]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(strategy_id, list(loaded.strategies), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise BadInput(f"strategy {strategy_id!r}: not found in any loaded pack{hint}") from None
