"""Build `Metrics` from files: ncu `--csv --page raw`, `.ncu-rep`, and JSON dumps.

Each reader produces `RawKernel`s (ncu names -> (value, unit), plus rule results);
`assemble` turns them into Metrics through the one catalog lookup, computes each
kernel's share of the time, marks the dominant kernel(s) and the combined view.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.models.metrics import KernelMetrics, Metrics, RuleResult
from kernelopt.profile.catalog import RawValue, load_catalog, parse_value
from kernelopt.registry import Registry

# Device/host description metrics: one copy per kernel is noise in the output.
_DROP_PREFIXES = ("device__attribute_", "nvlink__", "numa__", "profiler__", "c2clink__")
_KEEP = {"device__attribute_multiprocessor_count", "device__attribute_clock_rate"}  # read by the catalog


def _dropped(name: str) -> bool:
    return name.startswith(_DROP_PREFIXES) and name not in _KEEP
# A kernel at least this share of the longest kernel's time is marked dominant too.
DOMINANT_RATIO = 0.5


@dataclass
class RawKernel:
    name: str
    raw: dict[str, RawValue]
    rules: list[RuleResult] = field(default_factory=list)
    long_name: str | None = None
    device: str | None = None
    grid: list[int] | None = None
    block: list[int] | None = None


def import_file(path: str | Path) -> Metrics:
    """Read an ncu raw CSV, an `.ncu-rep`, a JSON dump or kernelopt's own metrics.json, chosen by content.

    Each importer of `REGISTRY` says whether the file is its format (None: not mine). Those of
    installed distributions (group `kernelopt.metric_importers`: a function `(path) -> Metrics |
    None`) are asked first, so a plug-in can read a format the built-ins would refuse."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    names = [n for n in REGISTRY.available() if n not in REGISTRY.builtin] + list(REGISTRY.builtin)
    for name in names:
        try:
            reader = REGISTRY.factory(name)
        except Exception as exc:  # noqa: BLE001 - third-party code: whatever it raised is bad input
            raise BadInput(f"metrics importer {name!r}: failed to load: {type(exc).__name__}: {exc}") from None
        metrics = reader(path) if reader is not None else None
        if metrics is not None:
            return metrics
    raise BadInput(f"{path}: not a recognised metrics file (ncu --csv --page raw, .ncu-rep, or JSON dump)")


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read as text ({exc}); expected ncu CSV, JSON or .ncu-rep") from None


def import_ncu_rep(path: Path) -> Metrics | None:
    """An Nsight Compute report (`.ncu-rep`), read through ncu's own Python module."""
    return _assembled(read_ncu_rep(path), path, source="ncu-rep") if path.suffix == ".ncu-rep" else None


def import_json(path: Path) -> Metrics | None:
    """kernelopt's own metrics.json, else a JSON dump of ncu metrics."""
    text = _text(path)
    if not text.lstrip().startswith("{"):
        return None
    doc = _load_json(text, path)  # parsed once, whichever of the two JSON forms it is
    saved = read_metrics_json(doc, path)
    if saved is not None:
        return saved
    return _assembled(read_json_dump(doc, path), path, source="json", numeric=True)


def import_ncu_csv(path: Path) -> Metrics | None:
    """`ncu --csv --page raw` output."""
    text = _text(path)
    if '"ID"' in text[:10000] or text.lstrip().startswith("ID,"):
        return _assembled(read_ncu_csv(text, path), path, source="ncu-csv", numeric=True)
    return None


# Built-in importers, asked in this order after any of installed distributions.
REGISTRY = Registry("metrics importer", "kernelopt.metric_importers", {
    "ncu-rep": "kernelopt.profile.importers:import_ncu_rep",
    "json": "kernelopt.profile.importers:import_json",
    "ncu-csv": "kernelopt.profile.importers:import_ncu_csv",
})


def _assembled(raw: list[RawKernel], path: Path, *, source: str, numeric: bool = False) -> Metrics:
    """`assemble` for a file: whatever the file holds that the models refuse is bad input,
    named by file, never a ValidationError traceback. With `numeric`, a catalog metric
    whose value is text (`"abc"`) is refused instead of shown as "DRAM throughput abc %"."""
    from pydantic import ValidationError

    try:
        metrics = assemble(raw, source=source, provenance={"file": str(path)})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(document)"
        raise BadInput(f"{path}: unusable metrics (damaged or truncated file?): {where}: {first['msg']}") from None
    if numeric:
        for k in metrics.kernels:
            for key, mv in k.metrics.items():
                if isinstance(mv.value, str):
                    raise BadInput(f"{path}: kernel {k.name!r}: {mv.name} ({key}) = {mv.value!r} is not a number")
    return metrics


def _load_json(text: Any, path: str | Path) -> Any:
    """JSON text parsed (BadInput names file and line); an already parsed document as is."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None


def read_metrics_json(text: Any, path: str | Path) -> Metrics | None:
    """kernelopt's own Metrics document (`metrics.json`, `profile --json`), as text or parsed; None for other JSON."""
    from pydantic import ValidationError

    doc = _load_json(text, path)
    if not (isinstance(doc, dict) and "kernels" in doc and "source" in doc):
        return None
    try:
        return Metrics.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise BadInput(f"{path}: not a valid kernelopt Metrics document: {where}: {first['msg']}") from None


# ---------------------------------------------------------------- CSV

def read_ncu_csv(text: str, path: str | Path = "<csv>") -> list[RawKernel]:
    """`ncu --csv --page raw` output: header row, units row, one row per profiled kernel.

    Lines ncu prints before the table (==PROF== ...) are skipped.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') or line.startswith("ID,")), None)
    if start is None:
        raise BadInput(f"{path}: no ncu CSV header (expected the output of `ncu --csv --page raw`)")
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    except csv.Error as exc:
        raise BadInput(f"{path}: malformed CSV: {exc}") from None
    header = rows[0]
    if "Kernel Name" not in header:
        raise BadInput(f"{path}: CSV has no 'Kernel Name' column; expected `ncu --csv --page raw` output")
    if "Metric Name" in header:
        raise BadInput(f"{path}: this is the details page; export with `ncu --csv --page raw`")
    units: list[str] = [""] * len(header)
    first = 1
    if len(rows) > 1 and rows[1] and rows[1][0] == "":
        units, first = rows[1], 2
    kernels: list[RawKernel] = []
    for index in range(first, len(rows)):
        row, lineno = rows[index], start + index + 1
        if not row or all(not c for c in row):
            continue
        if len(row) != len(header):
            raise BadInput(
                f"{path}: row {lineno} has {len(row)} fields, header has {len(header)} (truncated file?)"
            )
        cells = dict(zip(header, row))
        raw: dict[str, RawValue] = {}
        for col, unit in zip(header, units):
            if "__" not in col or _dropped(col):
                continue
            raw[col] = (parse_value(cells[col]), unit or None)
        name = cells.get("Kernel Name", "")
        kernels.append(
            RawKernel(
                name=_short_name(name),
                long_name=name,
                raw=raw,
                device=cells.get("device__attribute_display_name") or None,
                grid=_dims(cells.get("Grid Size")),
                block=_dims(cells.get("Block Size")),
            )
        )
    if not kernels:
        raise BadInput(f"{path}: the CSV holds no kernel rows (no kernel profiled, or a truncated file?)")
    return kernels


def _dims(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x.replace(",", "")) for x in text.strip("() ").split(", ")]
    except ValueError:
        return None


def _short_name(name: str) -> str:
    """'void at::native::foo<4, ...>(int, T2)' -> 'foo': the identifier before template args."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch in "<(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    return s.rsplit("::", 1)[-1] or name


# ---------------------------------------------------------------- .ncu-rep

_MSG_TYPES = {0: "INF", 1: "INF", 2: "OPT", 3: "WRN", 4: "ERR"}  # ncu shows MsgType OK as INF
_SPEEDUP_TYPES = {1: "local", 2: "global"}


_LINK_MARKUP = re.compile(r"@(section|url):([^@]*)@")


def clean_rule_text(text: str) -> str:
    """ncu's '@section:Id:Label@' -> 'Label', '@url:Label:https://...@' -> '[Label](https://...)'."""

    def repl(m: re.Match[str]) -> str:
        kind, body = m.groups()
        if kind == "section":
            return body.split(":", 1)[-1]
        label, _, url = body.partition(":")
        return f"[{label}]({url})" if url else label

    return _LINK_MARKUP.sub(repl, text)


def nsight_python_dirs() -> list[Path]:
    """Where an Nsight Compute installation keeps its own Python reader (`extras/python`):
    beside the ncu found on PATH / CUDA_HOME, then the usual install folders, newest first."""
    import glob
    import os

    from kernelopt.harness.envinfo import find_tool

    dirs: list[Path] = []
    ncu = find_tool("ncu")
    if ncu:
        real = Path(os.path.realpath(ncu)).parent
        # The real binary sits in nsight-compute-<ver>/; CUDA's bin/ncu is a wrapper next to it.
        dirs += [real / "extras" / "python"] + [Path(p) / "extras" / "python" for p in
                                                 sorted(glob.glob(str(real.parent / "nsight-compute*")), reverse=True)]
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for root in filter(None, roots):
        dirs += [Path(p) / "extras" / "python" for p in sorted(glob.glob(os.path.join(root, "nsight-compute*")), reverse=True)]
    dirs += [Path(p) / "extras" / "python" for p in sorted(glob.glob("/opt/nvidia/nsight-compute/*"), reverse=True)]
    return [d for d in dict.fromkeys(dirs) if (d / "ncu_report.py").is_file()]


def ncu_report_module() -> Any:
    """The `ncu_report` reader: the pip package, else the module shipped in Nsight Compute's
    `extras/python` (the same reader; the package is a repackaging of it)."""
    import importlib.util
    import sys

    try:
        import ncu_report

        return ncu_report
    except ImportError:
        pass
    tried = nsight_python_dirs()
    for folder in tried:
        spec = importlib.util.spec_from_file_location("ncu_report", folder / "ncu_report.py")
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        # The module loads its compiled half (_ncu_report) from its own folder.
        sys.path.insert(0, str(folder))
        try:
            spec.loader.exec_module(module)
        except Exception:  # noqa: BLE001 - a broken install: try the next one
            sys.path.remove(str(folder))
            continue
        sys.modules["ncu_report"] = module
        return module
    where = f" (also tried {', '.join(str(d) for d in tried)})" if tried else " (no Nsight Compute extras/python found)"
    raise BadInput(f"reading .ncu-rep needs the ncu-report package (pip install ncu-report){where}")


# Reading a report takes well under a second; a reader that hangs on a file is a bad file.
READ_TIMEOUT_S = 120.0


def read_ncu_rep(path: str | Path) -> list[RawKernel]:
    """Every profiled kernel of a report, with all metrics and structured rule results.

    Read in a child process (`isolate.run_in_child`): the reader is native code (`_ncu_report`), and
    a report it cannot handle -- damaged, hostile, or written by another ncu version -- may crash it.
    On 4 H200s (session 12) Nsight Compute 2025.3.1's own `extras/python` reader killed a whole
    suite run with SIGSEGV right after ncu had written a report. A crash is a bad report (BadInput,
    one line), never the caller's death."""
    from kernelopt.harness.isolate import run_in_child

    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    result = run_in_child("read_ncu_rep", {"path": str(path.resolve())}, timeout_s=READ_TIMEOUT_S)
    if result.ok and result.value is not None:
        return _kernels_json().validate_python(result.value["kernels"])
    if result.error_kind == "bad_input" and result.message:
        raise BadInput(result.message)
    how = {"timeout": f"did not finish in {READ_TIMEOUT_S:g} s", "crash": "crashed"}.get(result.error_kind or "", "failed")
    raise BadInput(f"{path}: the Nsight Compute report reader {how} on this file ({result.message or 'no message'})")


def child_read_ncu_rep(args: dict[str, Any]) -> dict[str, Any]:
    """`read_ncu_rep`'s child: the kernels as JSON."""
    kernels = _read_ncu_rep_here(Path(args["path"]))
    return {"kernels": _kernels_json().dump_python(kernels, mode="json")}


def _kernels_json() -> Any:
    """The kernels' JSON form, between `read_ncu_rep` and its child (pydantic, imported when read)."""
    from pydantic import TypeAdapter

    return TypeAdapter(list[RawKernel])


def _read_ncu_rep_here(path: Path) -> list[RawKernel]:
    ncu_report = ncu_report_module()
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as exc:  # noqa: BLE001 - the loader raises plain RuntimeError on corrupt files
        raise BadInput(f"{path}: cannot load Nsight Compute report: {str(exc).strip() or type(exc).__name__}") from None
    try:
        return _read_report(ctx, path)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - the reader's objects fail in many ways on a damaged file
        raise BadInput(f"{path}: damaged or truncated Nsight Compute report: {type(exc).__name__}: {exc}") from None


def _read_report(ctx: Any, path: Path) -> list[RawKernel]:
    kernels: list[RawKernel] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            raw: dict[str, RawValue] = {}
            device = None
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                if metric is None or not metric.has_value():
                    continue
                if name == "device__attribute_display_name":
                    device = str(metric.value())
                if _dropped(name):
                    continue
                value = metric.value()
                if not isinstance(value, (int, float, str)):
                    continue
                raw[name] = (value if isinstance(value, str) else float(value), metric.unit() or None)
            name = action.name()
            if not isinstance(name, str) or not name:
                # What a report cut short gives: the kernel's record is incomplete.
                raise BadInput(f"{path}: kernel {a} of range {r} has no name: truncated or damaged report")
            long_name = action.name(action.NameBase_DEMANGLED)
            rules = [_rule(d) for d in action.rule_results_as_dicts()]
            grid = [int(raw[f"launch__grid_dim_{d}"][0]) for d in "xyz" if f"launch__grid_dim_{d}" in raw]  # type: ignore[arg-type]
            block = [int(raw[f"launch__block_dim_{d}"][0]) for d in "xyz" if f"launch__block_dim_{d}" in raw]  # type: ignore[arg-type]
            kernels.append(
                RawKernel(
                    name=name,
                    long_name=long_name if isinstance(long_name, str) else None,
                    raw=raw,
                    rules=rules,
                    device=device,
                    grid=grid or None,
                    block=block or None,
                )
            )
    if not kernels:
        raise BadInput(f"{path}: the report holds no profiled kernel (empty or truncated report?)")
    return kernels


def _rule(d: dict[str, Any]) -> RuleResult:
    msg = d.get("rule_message") or {}
    speedup = d.get("speedup_estimation") or {}
    title = msg.get("title") or ""
    text = clean_rule_text(" ".join(str(msg.get("message", "")).split()))
    return RuleResult(
        rule=str(d.get("rule_identifier") or d.get("name") or "?"),
        section=d.get("section_identifier"),
        type=_MSG_TYPES.get(int(msg.get("type", 0)), "INF"),  # type: ignore[arg-type]
        message=f"{title}: {text}" if title else text,
        est_speedup_pct=float(speedup["speedup"]) if "speedup" in speedup else None,
        speedup_type=_SPEEDUP_TYPES.get(int(speedup.get("type", 0))),  # type: ignore[arg-type]
        focus_metrics=[
            {k: fm.get(k) for k in ("name", "value", "severity", "info")} for fm in d.get("focus_metrics") or []
        ],
    )


# ---------------------------------------------------------------- JSON dumps

def read_json_dump(text: Any, path: str | Path = "<json>") -> list[RawKernel]:
    """`{"metrics": {kernel: {ncu_name: value | {"value": v, "unit": u}}}, "device": ...}`, as text or parsed."""
    doc = _load_json(text, path)
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        raise BadInput(f"{path}: expected a JSON object with a 'metrics' object of kernel -> {{ncu_name: value}}")
    device = doc.get("device") if isinstance(doc.get("device"), str) else None
    kernels = []
    for kname, metrics in doc["metrics"].items():
        if not isinstance(metrics, dict):
            raise BadInput(f"{path}: metrics[{kname!r}] must be an object of ncu_name -> value")
        raw: dict[str, RawValue] = {}
        for mname, v in metrics.items():
            if isinstance(v, dict):
                raw[mname] = (parse_value(v.get("value")), v.get("unit"))
            elif v is None or isinstance(v, (int, float, str)):
                raw[mname] = (parse_value(v), None)
            else:
                raise BadInput(f"{path}: metrics[{kname!r}][{mname!r}]: expected a number, string or {{value, unit}}")
        kernels.append(RawKernel(name=_short_name(kname), long_name=kname, raw=raw, device=device))
    if not kernels:
        raise BadInput(f"{path}: 'metrics' is empty")
    return kernels


# ---------------------------------------------------------------- assembly

def assemble(
    raw_kernels: list[RawKernel],
    *,
    source: str,
    device: str | None = None,
    provenance: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> Metrics:
    catalog = load_catalog()
    kernels: list[KernelMetrics] = []
    for i, rk in enumerate(raw_kernels):
        by_key, rest = catalog.resolve(rk.raw)
        duration = by_key.get("duration_ns")
        kernels.append(
            KernelMetrics(
                name=rk.name,
                index=i,
                grid=rk.grid,
                block=rk.block,
                duration_ns=float(duration.value) if duration and isinstance(duration.value, (int, float)) else None,
                metrics=by_key,
                raw=rest,
                rules=rk.rules,
            )
        )
    mark_dominant(kernels)
    return Metrics(
        source=source,  # type: ignore[arg-type]
        device=device or next((k.device for k in raw_kernels if k.device), None),
        kernels=kernels,
        combined=combine(kernels),
        provenance=provenance or {},
        notes=list(notes or []),
    )


def mark_dominant(kernels: list[KernelMetrics]) -> None:
    """Time share per kernel; the longest kernel, and any within DOMINANT_RATIO of it, dominate."""
    durations = [k.duration_ns or 0.0 for k in kernels]
    total = sum(durations)
    if total <= 0:
        if kernels:
            kernels[0].dominant = True
        return
    longest = max(durations)
    for k, d in zip(kernels, durations):
        k.time_fraction = d / total
        k.dominant = d >= DOMINANT_RATIO * longest


def combine(kernels: list[KernelMetrics]) -> dict[str, float]:
    """Duration-weighted view over all kernels, by catalog key (see `aggregate` in the catalog)."""
    catalog = load_catalog()
    if not kernels:
        return {}
    weights = [k.duration_ns or 0.0 for k in kernels]
    if sum(weights) <= 0:
        weights = [1.0] * len(kernels)
    top = max(range(len(kernels)), key=lambda i: weights[i])
    out: dict[str, float] = {}
    keys = dict.fromkeys(key for k in kernels for key in k.metrics)
    for key in keys:
        entry = catalog.by_key.get(key)
        rule = entry.aggregate if entry else "mean"
        pairs = [
            (float(k.metrics[key].value), w)  # type: ignore[arg-type]
            for k, w in zip(kernels, weights)
            if key in k.metrics and isinstance(k.metrics[key].value, (int, float))
        ]
        if not pairs:
            continue
        if rule == "sum":
            out[key] = sum(v for v, _ in pairs)
        elif rule == "dominant":
            mv = kernels[top].metrics.get(key)
            if mv is not None and isinstance(mv.value, (int, float)):
                out[key] = float(mv.value)
        else:
            wsum = sum(w for _, w in pairs)
            out[key] = sum(v * w for v, w in pairs) / wsum if wsum else pairs[0][0]
    return out
