"""One plug-in shape: every pluggable kind of kernelopt is a `Registry` with an entry-point group,
and a third-party entry point of each kind is found."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kernelopt.registry import REGISTRIES, Registry, registries

PKG = Path(__file__).resolve().parent.parent / "kernelopt"


class FakeEntryPoint:
    """What importlib.metadata gives for an installed plug-in's entry point."""

    def __init__(self, name: str, group: str, target: Any) -> None:
        self.name, self.group, self.value, self.target = name, group, f"thirdparty_pkg:{name}", target

    def load(self) -> Any:
        return self.target


def third_party(monkeypatch: pytest.MonkeyPatch, registry: Registry, name: str, target: Any) -> None:
    """Install a fake distribution exposing `name` in the registry's group."""
    import importlib.metadata

    real = importlib.metadata.entry_points

    def entry_points(**kw: Any) -> Any:
        if kw.get("group") == registry.group:
            return [FakeEntryPoint(name, registry.group, target)]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_every_registry_is_a_registry_with_an_entry_point_group() -> None:
    found = registries()
    assert set(found) == set(REGISTRIES)
    groups = set()
    for kind, registry in found.items():
        assert isinstance(registry, Registry), kind
        assert registry.group.startswith("kernelopt."), kind
        groups.add(registry.group)
    assert len(groups) == len(found)  # one group per kind
    # Every Registry built in kernelopt's source is listed in REGISTRIES (none kept on the side).
    built = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                   if re.search(r"=\s*Registry\(", p.read_text(encoding="utf-8")))
    listed = sorted({where.split(":")[0].replace(".", "/").removeprefix("kernelopt/") for where in REGISTRIES.values()})
    assert [b.removesuffix(".py").removesuffix("/__init__") for b in built] == listed


def test_a_third_party_executor_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt.errors import BadInput
    from kernelopt.harness.evaluate import EXECUTOR_REGISTRY, get_executor

    class Remote:
        def __init__(self, **options: Any) -> None:
            self.options = options

    third_party(monkeypatch, EXECUTOR_REGISTRY, "remote", Remote)
    executor = get_executor("remote", host="h")
    assert isinstance(executor, Remote) and executor.options == {"host": "h"}
    assert EXECUTOR_REGISTRY.available()["remote"] == "thirdparty_pkg:remote"
    with pytest.raises(BadInput, match="unknown executor .*local, ray, remote"):
        get_executor("nope")


@pytest.mark.parametrize("kind, name", [("optimizer", "thirdparty"), ("LLM provider", "thirdparty"),
                                        ("transform", "thirdparty"), ("profiler", "thirdparty")])
def test_a_third_party_factory_is_found(monkeypatch: pytest.MonkeyPatch, kind: str, name: str) -> None:
    registry = registries()[kind]
    target = object()
    third_party(monkeypatch, registry, name, target)
    assert registry.factory(name) is target
    assert name in registry.available()


def test_a_third_party_profiler_is_built_by_get_profiler(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt import profile

    class Mine:
        def __init__(self, **options: Any) -> None:
            self.options = options

    third_party(monkeypatch, profile.REGISTRY, "mine", Mine)
    assert profile.get_profiler("mine", rate=2).options == {"rate": 2}
    with pytest.raises(KeyError, match="known: mine, ncu, static"):
        profile.get_profiler("nope")


def test_a_third_party_strategy_pack_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kernelopt import strategies

    monkeypatch.delenv(strategies.ENV_PATH, raising=False)
    pack = strategies.builtin_pack_files()[0]
    third_party(monkeypatch, strategies.REGISTRY, "thirdparty", lambda: [str(pack)])  # a callable naming files
    loaded = strategies.load_strategies()
    assert [(p.origin, p.path) for p in loaded.packs][-1] == ("entry-point:thirdparty", str(pack))
    assert strategies.REGISTRY.load_all(entry_points=False)[0][:2] == ("builtin", "builtin")


def test_a_third_party_rule_pack_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import shutil

    from kernelopt.diagnose import packs

    monkeypatch.delenv(packs.ENV_VAR, raising=False)
    mine = tmp_path / "vendor.yaml"
    shutil.copy(packs.available_packs()[packs.DEFAULT_PACK], mine)
    third_party(monkeypatch, packs.REGISTRY, "vendor", str(mine))  # a path to one pack file
    assert packs.available_packs()["vendor"] == mine
    assert Path(packs.load_pack("vendor").path) == mine.resolve()
    assert "kernelopt" in packs.available_packs()  # the shipped ones are still there


def test_a_third_party_metrics_importer_is_asked_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kernelopt.errors import BadInput
    from kernelopt.models.metrics import Metrics
    from kernelopt.profile import importers

    vendor = tmp_path / "run.vendor"
    vendor.write_text('{"vendor": 1}')  # JSON the built-in reader would refuse
    seen: list[Path] = []

    def read_vendor(path: Path) -> Metrics | None:
        seen.append(path)
        return importers.assemble([], source="json", provenance={"reader": "vendor"}) if path.suffix == ".vendor" else None

    third_party(monkeypatch, importers.REGISTRY, "vendor", read_vendor)
    assert isinstance(importers.import_file(vendor), Metrics) and seen == [vendor]
    other = tmp_path / "x.txt"
    other.write_text("nothing")
    with pytest.raises(BadInput, match="not a recognised metrics file"):  # declined by it, then the built-ins
        importers.import_file(other)
    assert seen[-1] == other


def test_a_third_party_experience_importer_is_asked_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kernelopt.experience import importers

    log = tmp_path / "tuning.csv"
    log.write_text("kernel,speedup\nsoftmax,1.5\n")  # a format no built-in reads

    def read_csv(path: Path, text: str) -> list[Any] | None:
        if path.suffix != ".csv":
            return None
        rows = [line.split(",") for line in text.splitlines()[1:]]
        return [importers.record_from_dict({"kernel": k, "speedup": float(v)}, str(path)) for k, v in rows]

    third_party(monkeypatch, importers.REGISTRY, "csv", read_csv)
    assert [(r.kernel, r.speedup) for r in importers.read_records(log)] == [("softmax", 1.5)]
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text('{"kernel": "gelu", "speedup": 2.0}\n')  # declined by it: the built-ins read it
    assert [r.kernel for r in importers.read_records(jsonl)] == ["gelu"]
