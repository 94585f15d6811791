"""Reading experience from files and flags: kernelopt JSONL and kernel-opt-skill JSON arrays.

Every way into the store (`add` flags, `add --json`, `import`, the seed) goes
through `record_from_dict`, so labels are normalised in one place
(`kernelopt.experience.labels`) and unknown fields are kept in the notes, not lost.
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.files import read_text
from kernelopt.experience.labels import (
    derive_outcome,
    normalize_backend,
    normalize_bottleneck,
    normalize_outcome,
    parse_optimization,
)
from kernelopt.models.experience import ExperienceRecord
from kernelopt.registry import Registry

# Other tools' field names -> ours.
_ALIASES = {
    "bottleneck_before": "bottleneck",
    "dominant_stall": "stall",
    "subcause": "stall",
    "sub_cause": "stall",
    "gpu": "device",
    "arch": "chip",
    "timestamp": "created_at",
    "date": "created_at",
    "strategy": "strategies",
    "strategy_ids": "strategies",
    "run_id": "source",
    "shape": "dims",
    "shapes": "dims",
}
# Deterministic ids for records that came without one: importing the same file twice
# adds nothing, and the id never depends on the order of the file.
_NAMESPACE = uuid.UUID("6f1c2f0e-8a51-4c5e-9d0b-6b1e3c9f4a21")


def _number(value: Any, where: str) -> float:
    """A finite number from a number or numeric text (`"48%"` -> 48); BadInput otherwise."""
    if isinstance(value, bool):
        raise BadInput(f"{where}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(str(value).strip().rstrip("%"))
        except ValueError:
            raise BadInput(f"{where}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise BadInput(f"{where}: expected a finite number, got {value!r}")
    return number


def metric_values(value: Any, where: str) -> dict[str, float]:
    """Metrics as catalog key -> finite number. Other tools' keys (kernel-opt-skill's
    `memory_sol_pct`, `latency_ms`, ...) are mapped by `kernelopt.experience.names`;
    a value that is not a number is an error, not silently dropped."""
    from kernelopt.experience.names import load_mappings

    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"{where}: metrics must be an object of name -> number")
    out = {str(k): _number(v, f"{where}: {k}") for k, v in value.items()}
    return load_mappings().metrics_dict(out)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def record_from_dict(data: dict[str, Any], where: str = "record", *, content_id: bool = False,
                     origin: str | None = None) -> ExperienceRecord:
    """Normalise one record given as a dict (kernelopt's own fields or kernel-opt-skill's).

    A record without an id gets a random UUID, or with `content_id` (files) one derived
    from its content, so that importing the same file twice adds nothing. An id that
    is not a UUID (kernel-opt-skill numbers its records 1, 2, ...) is another log's
    provenance, not an identity: the record gets a content id and keeps the foreign
    id in `source` (`import:<origin>#id=<id>`), so two logs that both start at 1 do
    not shadow each other, while the same record imported twice is still one."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise BadInput(f"{where}: expected an object, got {type(data).__name__}")
    d: dict[str, Any] = {}
    for k, v in data.items():
        d[_ALIASES.get(k, k)] = v
    foreign_id: str | None = None
    raw_id = d.pop("id", None)
    if raw_id not in (None, ""):
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise BadInput(f"{where}: id: expected a string or an integer, got {raw_id!r}")
        if isinstance(raw_id, str) and _is_uuid(raw_id.strip()):
            d["id"] = raw_id.strip()
        else:
            foreign_id = str(raw_id).strip()
    if "optimization" in d:
        ids, params = parse_optimization(d.pop("optimization"))
        d.setdefault("strategies", ids)
        d["params"] = {**params, **(d.get("params") or {})}
    if isinstance(d.get("strategies"), str):
        ids, params = parse_optimization(d["strategies"])
        d["strategies"], d["params"] = ids, {**params, **(d.get("params") or {})}
    try:
        d["bottleneck"] = normalize_bottleneck(d.get("bottleneck"))
        d["backend"] = normalize_backend(d.get("backend"))
        d["outcome"] = normalize_outcome(d.get("outcome"))
    except BadInput as exc:
        raise BadInput(f"{where}: {exc}") from None
    for key in ("metrics_before", "metrics_after"):
        d[key] = metric_values(d.get(key), f"{where}: {key}")
    for key in ("speedup", "time_before_ms", "time_after_ms"):
        if d.get(key) in ("", None):
            d.pop(key, None)
            continue
        d[key] = _number(d[key], f"{where}: {key}")
        if d[key] <= 0:
            what = "a speedup (time before / time after)" if key == "speedup" else "a measured time"
            raise BadInput(f"{where}: {key}: {what} must be > 0, got {d[key]:g}")
    if d.get("speedup") is None and d.get("time_before_ms") and d.get("time_after_ms"):
        d["speedup"] = d["time_before_ms"] / d["time_after_ms"]
    if d.get("outcome") is None:
        d["outcome"] = derive_outcome(_float(d.get("speedup")), d.get("correct"))
    for key in ("kernel", "chip", "stall", "notes", "hypothesis", "source", "device", "dtype"):
        value = d.get(key)
        if value is None or isinstance(value, str):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            # A list or an object here was stored as its Python repr ("['a', 'b']") before issue 20.
            raise BadInput(f"{where}: {key}: expected text, got {type(value).__name__}")
        d[key] = str(value)
    if d.get("created_at") is not None:
        d["created_at"] = _timestamp(d["created_at"], f"{where}: created_at")
    known = set(ExperienceRecord.model_fields)
    extra = {k: d.pop(k) for k in list(d) if k not in known}
    if extra:
        note = "extra: " + json.dumps(extra, sort_keys=True, default=str)
        d["notes"] = f"{d['notes']} | {note}" if d.get("notes") else note
    if not d.get("kernel"):
        raise BadInput(f"{where}: kernel: required (kernel name or op family)")
    if not d.get("id") and (content_id or foreign_id is not None):
        # The foreign id is part of the content: the same record from the same log is
        # one record; another log's record 1 is another record.
        content = json.dumps({**{k: v for k, v in sorted(d.items())}, "_foreign_id": foreign_id},
                             sort_keys=True, default=str)
        d["id"] = str(uuid.uuid5(_NAMESPACE, content))
    if foreign_id is not None:
        d["source"] = f"{d.get('source') or ('import:' + origin if origin else 'import')}#id={foreign_id}"
    d = {k: v for k, v in d.items() if v is not None}
    for key, value in d.items():
        try:
            json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{where}: {key}: not valid Unicode (a lone surrogate escape such as \\ud800)") from None
    try:
        return ExperienceRecord.model_validate(d)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(record)"
        raise BadInput(f"{where}: {field}: {first['msg']}") from None


def _timestamp(value: Any, where: str) -> str:
    """An ISO 8601 date or date-time (what `created_at` sorts by), as given; BadInput otherwise."""
    import datetime

    if isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            # Python < 3.11 does not read a trailing Z; it means UTC.
            datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
            return text
        except ValueError:
            pass
    raise BadInput(f"{where}: expected an ISO 8601 date or time such as 2026-01-31T12:00:00+00:00, got {value!r}")


def _json(text: str, where: str) -> Any:
    """`json.loads`, every failure one-line bad input (a document nested thousands deep overflows
    the parser's recursion: that is bad input too, not a traceback)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    except RecursionError:
        raise BadInput(f"{where}: refused: JSON nested too deeply") from None


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def read_records(path: str | Path) -> list[ExperienceRecord]:
    """Records from a kernelopt JSONL file or a JSON array (kernel-opt-skill's log, or ours).

    Each importer of `REGISTRY` says whether the file is its format (None: not mine). Those of
    installed distributions (group `kernelopt.experience_importers`: a function `(path, text) ->
    list[ExperienceRecord] | None`, which should build records with `record_from_dict`) are
    asked first; JSON lines, the last built-in, takes whatever is left."""
    path = Path(path)
    text = read_text(path)
    names = [n for n in REGISTRY.available() if n not in REGISTRY.builtin] + list(REGISTRY.builtin)
    for name in names:
        try:
            reader = REGISTRY.factory(name)
        except Exception as exc:  # noqa: BLE001 - third-party code: whatever it raised is bad input
            raise BadInput(f"experience importer {name!r}: failed to load: {type(exc).__name__}: {exc}") from None
        records = reader(path, text) if reader is not None else None
        if records is not None:
            return list(records)
    return []


def import_json(path: Path, text: str) -> list[ExperienceRecord] | None:
    """A JSON array of records (kernel-opt-skill's log, or ours), or one record as an object."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        items = _json(text, str(path))
        if not isinstance(items, list):
            raise BadInput(f"{path}: expected a JSON array of records")
        return [record_from_dict(item, f"{path}[{i}]", content_id=True, origin=path.name)
                for i, item in enumerate(items)]
    if stripped.startswith("{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # not one object: JSON lines, read by the next importer
        except RecursionError:
            raise BadInput(f"{path}: refused: JSON nested too deeply") from None
        if isinstance(whole, dict):
            return [record_from_dict(whole, str(path), content_id=True, origin=path.name)]
    return None


def import_jsonl(path: Path, text: str) -> list[ExperienceRecord] | None:
    """kernelopt's JSON lines (`experience export`): one record per line; # comments skipped."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}:{lineno}: malformed JSON line: {exc.msg}") from None
        except RecursionError:
            raise BadInput(f"{path}:{lineno}: refused: JSON nested too deeply") from None
        out.append(record_from_dict(item, f"{path}:{lineno}", content_id=True, origin=path.name))
    return out


# Built-in importers, asked in this order after any of installed distributions.
REGISTRY = Registry("experience importer", "kernelopt.experience_importers", {
    "json": "kernelopt.experience.importers:import_json",
    "jsonl": "kernelopt.experience.importers:import_jsonl",
})
