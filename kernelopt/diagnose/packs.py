"""Rule packs: YAML files of diagnosis rules, validated at load.

A pack lives in `knowledge/rules/<name>.yaml` (shipped), in a directory given with
`--rules-dir`, in one named by `KERNELOPT_RULES_PATH` (os.pathsep-separated), or in an
installed distribution (entry-point group `kernelopt.rule_packs`: `REGISTRY`).
`--rules PACK` selects a pack by name or by path to a YAML file. Every condition is
compiled with `kernelopt.conditions` when the pack loads, and every name it reads
must be a metric catalog key or a derived value (a typo fails the load, with file
and line, instead of silently never firing).

    pack:
      name: kernelopt
      description: ...
      labels: {memory: dram}        # optional: the pack's own labels -> categories
    rules:
      - id: dram-bandwidth
        category: dram              # or `label:` when the pack declares `labels`
        subcause: dram_bandwidth
        when: dram_throughput_pct >= 60 and dram_throughput_pct >= 0.8 * max_throughput_pct
        evidence: [dram_bytes, l2_hit_rate_pct]   # extra values to cite
        limiter: dram_throughput_pct   # utilisation (%) of the limiting unit: headroom = 100 - it
        priority: 70                   # rank among rules that fire (higher first)
        message: "DRAM is {dram_throughput_pct:.0f}% busy ..."
        strategies: [fuse-elementwise-passes]
        ncu_rules: ["SOLBottleneck:DRAM"]   # agreeing Nsight Compute rule (id or id:text)
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from kernelopt.conditions import Condition, ConditionError, compile_condition
from kernelopt.errors import BadInput
from kernelopt.models.common import CATEGORIES, Category, Model
from kernelopt.registry import Registry

ENV_VAR = "KERNELOPT_RULES_PATH"
DEFAULT_PACK = "kernelopt"
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([^{}]*))?\}")


class RuleSpec(Model):
    id: str
    category: Category | None = None
    label: str | None = None
    subcause: str | None = None
    when: str
    evidence: list[str] = Field(default_factory=list)
    limiter: str | None = None
    priority: int = 50
    message: str
    strategies: list[str] = Field(default_factory=list)
    ncu_rules: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError("lower-case letters, digits, '-', '_' or '.'")
        return v


class PackInfo(Model):
    name: str
    description: str = ""
    source: str | None = Field(None, description="where the rule set comes from")
    labels: dict[str, Category] = Field(default_factory=dict, description="pack label -> category")
    version: int = 1


class PackSpec(Model):
    pack: PackInfo
    rules: list[RuleSpec]

    @model_validator(mode="after")
    def _labels(self) -> "PackSpec":
        for i, rule in enumerate(self.rules):
            if rule.category is None and rule.label is None:
                raise ValueError(f"rules[{i}] ({rule.id}): needs a category (one of {', '.join(CATEGORIES)}) or a label")
            if rule.category is None and rule.label not in self.pack.labels:
                raise ValueError(f"rules[{i}] ({rule.id}): label {rule.label!r} is not in pack.labels")
        ids = [r.id for r in self.rules]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate rule ids: {', '.join(dupes)}")
        return self


@dataclass
class Rule:
    """A validated rule with its compiled conditions."""

    spec: RuleSpec
    category: str
    label: str
    when: Condition
    evidence: list[Condition]
    limiter: Condition | None
    line: int | None = None

    @property
    def id(self) -> str:
        return self.spec.id


@dataclass
class RulePack:
    name: str
    path: Path
    info: PackInfo
    rules: list[Rule] = field(default_factory=list)


def known_names() -> set[str]:
    """Names a condition may read: metric catalog keys and derived values."""
    from kernelopt.diagnose.derived import DERIVED
    from kernelopt.profile.catalog import load_catalog

    return set(load_catalog().by_key) | set(DERIVED)


# A format spec for one number: [[fill]align][sign][z][#][0][width][grouping][.precision][type].
_SPEC = re.compile(r"^(?:.?[<>=^])?[+\- ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d+))?[eEfFgGn%]?$")
MAX_FORMAT_WIDTH = 40  # `{x:>100000000}` in a contributed pack built a 100 MB string


def check_format_spec(spec: str) -> str | None:
    """Why `spec` is not allowed in a message placeholder, or None when it is."""
    m = _SPEC.match(spec)
    if m is None:
        return f"format spec {spec!r} is not a number format (e.g. .1f, .3g, >8.2f)"
    for part in ("width", "precision"):
        if m.group(part) and int(m.group(part)) > MAX_FORMAT_WIDTH:
            return f"format spec {spec!r}: {part} {int(m.group(part))} is above {MAX_FORMAT_WIDTH}"
    try:
        format(1.0, spec)
    except ValueError as exc:
        return f"format spec {spec!r}: {exc}"
    return None


def format_message(template: str, values: dict[str, float]) -> str:
    """Fill `{key}` / `{key:.1f}` with metric values; a missing value shows as `?`.

    Only bare names are substituted (no attribute or index access), so a message
    from a contributed pack cannot reach into Python objects; format specs are checked
    when the pack loads, and again here (a spec that fails the check prints `.4g`).
    """

    def sub(m: re.Match[str]) -> str:
        value = values.get(m.group(1))
        if value is None:
            return "?"
        spec = m.group(2) or ".4g"
        if check_format_spec(spec) is not None:
            spec = ".4g"
        try:
            return format(float(value), spec)
        except (TypeError, ValueError, OverflowError):
            return str(value)

    return _PLACEHOLDER.sub(sub, template)


def _check_message(doc: Any, loc: tuple[str | int, ...], message: str, known: set[str]) -> None:
    for m in _PLACEHOLDER.finditer(message):
        where = f"{doc.where(loc)}: {'.'.join(str(p) for p in loc)}"
        if m.group(1) not in known:
            raise BadInput(f"{where}: placeholder {{{m.group(1)}}} is not a metric key or derived value")
        problem = check_format_spec(m.group(2)) if m.group(2) is not None else None
        if problem:
            raise BadInput(f"{where}: {problem}")


def _compile(doc: Any, loc: tuple[str | int, ...], text: str, known: set[str]) -> Condition:
    try:
        return compile_condition(text, known=known)
    except ConditionError as exc:
        raise BadInput(f"{doc.where(loc)}: {'.'.join(str(p) for p in loc)}: {exc}") from None


def load_pack_file(path: str | Path) -> RulePack:
    """Load and validate one pack; BadInput names file, line and field on any problem."""
    from kernelopt.yamlio import load_yaml, pydantic_errors

    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise BadInput(f"{doc.path}: a rule pack is a mapping with 'pack' and 'rules'")
    try:
        spec = PackSpec.model_validate(doc.data)
    except ValidationError as exc:
        raise BadInput("; ".join(pydantic_errors(doc, exc))) from None
    known = known_names()
    rules = []
    for i, r in enumerate(spec.rules):
        base: tuple[str | int, ...] = ("rules", i)
        when = _compile(doc, base + ("when",), r.when, known)
        evidence = [_compile(doc, base + ("evidence", j), e, known) for j, e in enumerate(r.evidence)]
        limiter = _compile(doc, base + ("limiter",), r.limiter, known) if r.limiter else None
        _check_message(doc, base + ("message",), r.message, known)
        label = r.label or r.category or ""
        category = r.category or spec.pack.labels[label]
        rules.append(Rule(r, category, label, when, evidence, limiter, doc.line_of(base)))
    return RulePack(name=spec.pack.name, path=doc.path, info=spec.pack, rules=rules)


def builtin_rules_dir() -> Path:
    """The shipped packs' directory."""
    from kernelopt.resources import data_dir

    return data_dir("knowledge") / "rules"


# The shipped packs and those of installed distributions: an entry point of the group
# `kernelopt.rule_packs` names a pack file or a directory of them (a path, a list of paths,
# or a zero-argument callable returning one of those).
REGISTRY = Registry("rule pack", "kernelopt.rule_packs", {"builtin": "kernelopt.diagnose.packs:builtin_rules_dir"})


def _registered(*, builtin: bool, entry_points: bool) -> list[Path]:
    out: list[Path] = []
    for _, source, target in REGISTRY.load_all(builtin=builtin, entry_points=entry_points):
        for t in target if isinstance(target, (list, tuple)) else [target]:
            if not isinstance(t, (str, os.PathLike)):
                raise BadInput(f"{source}: returned {type(t).__name__}, expected a path to a rule pack or directory")
            out.append(Path(t))
    return out


def search_dirs(extra_dirs: list[str | Path] | tuple[str | Path, ...] = ()) -> list[Path]:
    """Where packs are looked for, first match wins: --rules-dir, $KERNELOPT_RULES_PATH, the
    packs of installed distributions (entry points), shipped. An entry may be a pack file."""
    dirs = [Path(d) for d in extra_dirs]
    dirs += [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    dirs += _registered(builtin=False, entry_points=True)
    dirs += _registered(builtin=True, entry_points=False)
    return dirs


def available_packs(extra_dirs: list[str | Path] | tuple[str | Path, ...] = ()) -> dict[str, Path]:
    """Pack name (file stem) -> file, earlier directories shadowing later ones."""
    found: dict[str, Path] = {}
    for d in search_dirs(extra_dirs):
        if d.is_file() and d.suffix in (".yaml", ".yml"):
            found.setdefault(d.stem, d)
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
            found.setdefault(f.stem, f)
    return found


@functools.lru_cache(maxsize=64)
def _cached(path: str, mtime_ns: int, size: int) -> RulePack:
    return load_pack_file(path)


def load_pack(name_or_path: str = DEFAULT_PACK, extra_dirs: list[str | Path] | tuple[str | Path, ...] = ()) -> RulePack:
    """A pack by name (searched in `search_dirs`) or by path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        path = candidate
        if not path.is_file():
            raise BadInput(f"--rules {name_or_path}: no such rule pack file")
    else:
        packs = available_packs(extra_dirs)
        if name_or_path not in packs:
            known = ", ".join(sorted(packs)) or "none"
            raise BadInput(f"--rules {name_or_path}: no rule pack of that name (available: {known})")
        path = packs[name_or_path]
    stat = path.stat()
    return _cached(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
