"""The one YAML loader: `yaml.safe_load` semantics plus the line of every key.

Strategy packs, rule packs and zoo labels all load through `load_yaml`, so every
validation error can name file, line and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kernelopt.errors import BadInput
from kernelopt.files import read_text

if TYPE_CHECKING:
    from pydantic import BaseModel

Loc = tuple[str | int, ...]


@dataclass
class YamlDoc:
    path: Path
    data: Any
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int | None:
        """Line (1-based) of the deepest known node on `loc`, e.g. ("strategies", 3, "when")."""
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get((), None)

    def where(self, loc: Loc) -> str:
        line = self.line_of(loc)
        return f"{self.path}:{line}" if line else str(self.path)


# Bounds for files anyone may contribute (packs load from KERNELOPT_STRATEGY_PATH and entry
# points): a 556-byte document of nested aliases expands to billions of nodes, and
# every walk over the loaded tree (ours, pydantic's) would expand it. Real packs have
# a few thousand nodes and a depth under 10.
MAX_NODES = 200_000
MAX_DEPTH = 64


def _expanded_size(node: Any, memo: dict[int, int], depth: int = 0) -> int:
    """Nodes of the document with every alias expanded, computed in time linear in the
    node graph (each distinct node once); stops counting past MAX_NODES."""
    import yaml

    if depth > MAX_DEPTH:
        raise _TooBig(f"nested deeper than {MAX_DEPTH} levels")
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = MAX_NODES + 1  # a node reached again while being counted: a cycle
    size = 1
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    else:
        children = []
    for child in children:
        size += _expanded_size(child, memo, depth + 1)
        if size > MAX_NODES:
            break
    memo[id(node)] = size
    if size > MAX_NODES:
        raise _TooBig(f"more than {MAX_NODES} nodes once aliases are expanded (an alias bomb?)")
    return size


class _TooBig(Exception):
    pass


def _walk(node: Any, loc: Loc, lines: dict[Loc, int], seen: set[int]) -> None:
    import yaml

    lines[loc] = node.start_mark.line + 1
    if id(node) in seen:
        return  # an alias: its own lines were recorded where it was defined
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a list/mapping key: constructing the data rejects it as unhashable
            key = key_node.value
            _walk(value_node, loc + (key,), lines, seen)
            # After the walk: a key's line is the key's own, not where its value starts.
            lines[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, loc + (index,), lines, seen)


def load_yaml(path: str | Path) -> YamlDoc:
    """Load one YAML document safely; BadInput names the file and line on any error."""
    import yaml

    path = Path(path)
    text = read_text(path)
    lines: dict[Loc, int] = {}
    data = None
    try:
        # libyaml's loader when present: same safe semantics and marks, ~15x faster
        # (parsing both strategy packs went from ~0.35 s to ~0.02 s). One parse: the
        # node tree gives every key's line (walked before constructing, which flattens
        # `<<` merge keys in place), then the data.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _expanded_size(node, {})
                _walk(node, (), lines, set())
                data = loader.construct_document(node)
        finally:
            loader.dispose()
    except _TooBig as exc:
        raise BadInput(f"{path}: refused: {exc}") from None
    except RecursionError:
        raise BadInput(f"{path}: refused: nested too deeply") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise BadInput(f"{path}{line}: malformed YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: malformed YAML: {exc}") from None
    return YamlDoc(path=path, data=data, lines=lines)


def pydantic_errors(doc: YamlDoc, exc: Exception, base: Loc = ()) -> list[str]:
    """Turn a pydantic ValidationError into `file:line: field: message` lines."""
    out = []
    for err in exc.errors():  # type: ignore[attr-defined]
        loc = base + tuple(err["loc"])
        field_name = ".".join(str(p) for p in loc) or "(document)"
        out.append(f"{doc.where(loc)}: {field_name}: {err['msg']}")
    return out


M = TypeVar("M", bound="BaseModel")


def load_table(path: Path, key: str, model: type[M]) -> list[M]:
    """Rows of a YAML table `{key: [row, ...]}` validated as `model`; BadInput names file:line:field."""
    from pydantic import ValidationError

    doc = load_yaml(path)
    rows = doc.data.get(key) if isinstance(doc.data, dict) else None
    if not isinstance(rows, list):
        raise BadInput(f"{doc.path}: expected a top-level '{key}:' list")
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(model.model_validate(row))
        except ValidationError as exc:
            raise BadInput(pydantic_errors(doc, exc, base=(key, i))[0]) from None
        except ValueError as exc:  # a validator's own error (e.g. a formula that does not parse)
            raise BadInput(f"{doc.where((key, i))}: {exc}") from None
    return out
