"""The metric catalog: ncu names (and their aliases) -> kernelopt's short keys.

The table itself is `knowledge/metrics.yaml`. Every importer and the live profiler
turn raw `{ncu_name: (value, unit)}` maps into catalog keys through `resolve`, so
alias handling and unit conversion exist only here.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal, Union

from pydantic import Field, model_validator

from kernelopt.errors import BadInput
from kernelopt.models.common import Model
from kernelopt.models.metrics import MetricValue
from kernelopt.yamlio import load_table

Group = Literal[
    "speed-of-light", "DRAM", "L2", "L1/shared", "compute pipes", "occupancy", "launch",
    "warp stalls", "divergence", "static", "roofline",
]
GROUPS: tuple[str, ...] = Group.__args__  # type: ignore[attr-defined]

RawValue = tuple[Union[float, str, None], Union[str, None]]


class CatalogEntry(Model):
    key: str
    names: list[str] = Field(default_factory=list, description="ncu names, preferred first, then aliases")
    derive: str | None = Field(None, description="formula over ncu names (+ - * / parentheses)")
    label: str
    unit: str
    group: Group
    aggregate: Literal["sum", "mean", "dominant"]
    meaning: str

    @model_validator(mode="after")
    def _formula_parses(self) -> "CatalogEntry":
        if self.derive:
            _parse_formula(self.derive)
        return self


class Catalog:
    def __init__(self, entries: list[CatalogEntry]) -> None:
        self.entries = entries
        self.by_key: dict[str, CatalogEntry] = {e.key: e for e in entries}
        if len(self.by_key) != len(entries):
            raise ValueError("duplicate key in metric catalog")
        # ncu name -> key, for recognising which raw metrics the catalog covers
        self.name_to_key: dict[str, str] = {n: e.key for e in entries for n in e.names}

    def ncu_names(self) -> list[str]:
        """Every ncu name the catalog can read, including formula inputs."""
        out: list[str] = []
        for e in self.entries:
            out.extend(e.names)
            if e.derive:
                out.extend(_formula_names(e.derive))
        return list(dict.fromkeys(out))

    def resolve(self, raw: dict[str, RawValue]) -> tuple[dict[str, MetricValue], dict[str, MetricValue]]:
        """Split raw ncu metrics into (by catalog key, the rest by ncu name).

        For each key the first of its names present with a value wins; a formula is
        used only when no name is present and all its inputs are.
        """
        found: dict[str, MetricValue] = {}
        used: set[str] = set()
        for entry in self.entries:
            for name in entry.names:
                value, unit = raw.get(name, (None, None))
                if value is None:
                    continue
                found[entry.key] = MetricValue(
                    key=entry.key, name=name, value=convert(value, unit, entry.unit), unit=entry.unit
                )
                used.add(name)
                break
            else:
                if entry.derive:
                    inputs = {n: to_base(*raw.get(n, (None, None))) for n in _formula_names(entry.derive)}
                    if all(isinstance(v, (int, float)) for v in inputs.values()):
                        value = evaluate(entry.derive, inputs)  # type: ignore[arg-type]
                        if value is not None:
                            found[entry.key] = MetricValue(
                                key=entry.key, name=entry.derive, value=value, unit=entry.unit
                            )
        rest = {
            name: MetricValue(key=None, name=name, value=value, unit=unit)
            for name, (value, unit) in raw.items()
            if name not in used and value is not None
        }
        return found, rest

    def label(self, key: str) -> str:
        entry = self.by_key.get(key)
        return entry.label if entry else key


@functools.lru_cache(maxsize=None)
def load_catalog(path: str | None = None) -> Catalog:
    """The catalog from `knowledge/metrics.yaml` (or `path`); BadInput on a malformed table."""
    from kernelopt.resources import data_dir

    table = Path(path) if path else data_dir("knowledge") / "metrics.yaml"
    try:
        return Catalog(load_table(table, "metrics", CatalogEntry))
    except ValueError as exc:
        raise BadInput(f"{table}: {exc}") from None


# ---------------------------------------------------------------- values and units

_NO_VALUE = {"", "n/a", "no data", "nan", "(!) n/a", "-"}


def parse_value(text: str | float | int | None) -> float | str | None:
    """ncu display strings ("16,384", "no data", "PolicySpread") to numbers where they are numbers."""
    if text is None or isinstance(text, (int, float)):
        return text
    s = text.strip().strip('"')
    if s.lower() in _NO_VALUE:
        return None
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return s


_TIME = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0, "second": 1.0}
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def _scale(unit: str) -> tuple[str, float] | None:
    """'Gbyte/s' -> ('byte/s', 1e9); 'us' -> ('s', 1e-6); None when the unit has no known scale."""
    head, sep, tail = unit.strip().partition("/")
    if head in _TIME:
        base, factor = "s", _TIME[head]
    else:
        low = head.lower()
        for base_name in ("byte", "hz"):
            if low.endswith(base_name) and low[: -len(base_name)] in _PREFIX:
                base, factor = base_name, _PREFIX[low[: -len(base_name)]]
                break
        else:
            return None
    return base + sep + tail, factor


def to_base(value: float | str | None, unit: str | None) -> float | str | None:
    """Unprefixed value (Mbyte -> byte, us -> s): CSV exports show display units, reports base units."""
    scale = _scale(unit) if unit and isinstance(value, (int, float)) else None
    return value * scale[1] if scale else value  # type: ignore[operator]


def convert(value: float | str | None, from_unit: str | None, to_unit: str) -> float | str | None:
    """Convert between SI-prefixed units of one kind (us->ns, Kbyte/block->byte/block, Ghz->hz).

    Values whose units have no known scale (%, cycle, inst...) pass through: ncu reports
    those in one unit only, and the catalog states what they mean.
    """
    if not isinstance(value, (int, float)) or not from_unit or from_unit == to_unit:
        return value
    src, dst = _scale(from_unit), _scale(to_unit)
    if src is None or dst is None or src[0] != dst[0]:
        return value
    # 12 significant digits: 45.952 us must read 45952 ns, not 45951.99999999999
    return float(f"{value * src[1] / dst[1]:.12g}")


# ---------------------------------------------------------------- formulas (no eval)

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z_][A-Za-z0-9_.]*)|(.))")


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    for number, name, op in _TOKEN.findall(text):
        if number:
            out.append(("num", number))
        elif name:
            out.append(("name", name))
        elif op.strip():
            if op not in "+-*/()":
                raise ValueError(f"formula {text!r}: unexpected {op!r}")
            out.append(("op", op))
    return out


@functools.lru_cache(maxsize=256)
def _parse_formula(text: str) -> object:
    """Parse into a tiny AST: ('num', x) | ('name', n) | (op, left, right).

    Cached: the catalog's few formulas are parsed when it loads, then evaluated for every kernel.
    """
    toks = _tokens(text)
    pos = 0

    def peek() -> tuple[str, str] | None:
        return toks[pos] if pos < len(toks) else None

    def atom() -> object:
        nonlocal pos
        tok = peek()
        if tok is None:
            raise ValueError(f"formula {text!r}: ends early")
        pos += 1
        if tok[0] == "num":
            return ("num", float(tok[1]))
        if tok[0] == "name":
            return ("name", tok[1])
        if tok == ("op", "("):
            node = expr()
            if peek() != ("op", ")"):
                raise ValueError(f"formula {text!r}: missing ')'")
            pos += 1
            return node
        raise ValueError(f"formula {text!r}: unexpected {tok[1]!r}")

    def term() -> object:
        nonlocal pos
        node = atom()
        while peek() in (("op", "*"), ("op", "/")):
            op = toks[pos][1]
            pos += 1
            node = (op, node, atom())
        return node

    def expr() -> object:
        nonlocal pos
        node = term()
        while peek() in (("op", "+"), ("op", "-")):
            op = toks[pos][1]
            pos += 1
            node = (op, node, term())
        return node

    tree = expr()
    if pos != len(toks):
        raise ValueError(f"formula {text!r}: unexpected {toks[pos][1]!r}")
    return tree


@functools.lru_cache(maxsize=256)
def _formula_names(text: str) -> tuple[str, ...]:
    return tuple(value for kind, value in _tokens(text) if kind == "name")


def evaluate(text: str, values: dict[str, float]) -> float | None:
    """Evaluate a catalog formula; None on division by zero (e.g. no shared-memory requests)."""

    def ev(node: object) -> float:
        kind = node[0]  # type: ignore[index]
        if kind == "num":
            return node[1]  # type: ignore[index,return-value]
        if kind == "name":
            return float(values[node[1]])  # type: ignore[index]
        left, right = ev(node[1]), ev(node[2])  # type: ignore[index]
        if kind == "+":
            return left + right
        if kind == "-":
            return left - right
        if kind == "*":
            return left * right
        return left / right

    try:
        return ev(_parse_formula(text))
    except ZeroDivisionError:
        return None
