"""Turn the lead's GPU timings of the diagnosis zoo into measured seed experience.

  python benchmarks/experience/seed_from_zoo.py benchmarks/results/zoo_timings_<gpu>.json \
      [-o knowledge/experience/zoo_measured.jsonl]

Input: the JSON written by benchmarks/zoo_timings.py -- {"provenance": {...}, "kernels":
[{"name", "label": {...}, "kernel_median_ms", "fixed_median_ms", "fix_speedup", ...}]}
-- or a plain list of such entries (keys `name`/`zoo`, `category`/`subcause` or
`label`, `fix_strategy`/`strategies`, `kernel_median_ms`, `fixed_median_ms`,
`device`, `provenance`). Each zoo kernel's label is read from
benchmarks/zoo/<name>/label.yaml (the JSON's copy is the fallback).

Output: one ExperienceRecord per zoo kernel with both timings: the kernel's bottleneck
and sub-cause from its label, the fix's strategy id(s), speedup = kernel ms / fixed ms,
the outcome derived from the speedup (thresholds in kernelopt.experience.labels; a fix
that failed to run is left out and reported), source "zoo:<name>", and the device,
driver, versions and date from the timing run in the notes. Nothing is estimated:
kernels without both timings are skipped.

Strategy ids: a label's `fix_strategy` (a string or a list) when it has one; otherwise
ZOO_FIX_STRATEGIES below, which names the pack strategy that each zoo `fix.py` applies
(read from the fix and its label's `fix:` text); a zoo kernel in neither is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernelopt.errors import BadInput  # noqa: E402
from kernelopt.experience.importers import record_from_dict  # noqa: E402
from kernelopt.experience.labels import strategy_id  # noqa: E402
from kernelopt.yamlio import load_yaml  # noqa: E402

# What each zoo fix changes, as the packs name it (from fixed.py and label.yaml `fix:`).
ZOO_FIX_STRATEGIES: dict[str, list[str]] = {
    "dram_unfused": ["fuse-elementwise-passes"],
    # fma_loop (an algebraic rewrite), fp64_series (fp64 -> fp32 math) and pointer_chase
    # (independent chains per CTA) apply no strategy the packs name: left out unless
    # their label.yaml gains a fix_strategy.
    "register_spill": ["reduce-register-pressure", "tune-num-warps"],
    "sinkhorn_barrier": ["tune-num-warps"],
    "small_blocks": ["tune-num-warps", "more-rows-per-program"],
    "small_grid": ["smaller-tiles-more-programs"],
    "strided_rowsum": ["coalesced-access"],
    "tail_wave": ["smaller-tiles-more-programs"],
    "tensor_matmul": ["grouped-tile-order", "tune-num-stages"],
    "tiny_launch": ["fuse-elementwise-passes"],
}
_NAMESPACE = uuid.UUID("5d2f7d2e-3c0b-4b8e-8f3e-2a8c6a1f9b10")


def _entries(doc: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if isinstance(doc, dict) and isinstance(doc.get("kernels"), list):
        return doc["kernels"], doc.get("provenance") or {}
    if isinstance(doc, list):
        return doc, {}
    raise BadInput("expected the zoo_timings JSON: an object with `kernels` or a list of entries")


def _label(name: str, entry: dict[str, Any], zoo_dir: Path) -> dict[str, Any]:
    path = zoo_dir / name / "label.yaml"
    if path.is_file():
        data = load_yaml(path).data
        if isinstance(data, dict):
            return data
    label = entry.get("label")
    if isinstance(label, dict):
        return label
    return {k: entry[k] for k in ("category", "subcause", "fix_strategy") if k in entry}


def _strategies(name: str, entry: dict[str, Any], label: dict[str, Any]) -> list[str]:
    given = label.get("fix_strategy") or entry.get("fix_strategy") or entry.get("strategies")
    if isinstance(given, str):
        given = [given]
    if given:
        return [strategy_id(s) for s in given]
    return list(ZOO_FIX_STRATEGIES.get(name, []))


def _backend(fixed: Path) -> str:
    from kernelopt.problem import load_candidate

    try:
        return load_candidate(str(fixed)).backend
    except Exception:  # noqa: BLE001 - a zoo entry without its fixed.py in this checkout
        return "triton"


def convert(doc: Any, zoo_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    entries, top_prov = _entries(doc)
    records, skipped = [], []
    for entry in entries:
        name = entry.get("name") or entry.get("zoo") or entry.get("zoo_name")
        if not name:
            skipped.append("(entry without a name)")
            continue
        before, after = entry.get("kernel_median_ms"), entry.get("fixed_median_ms")
        if not isinstance(before, (int, float)) or not isinstance(after, (int, float)) or after <= 0:
            skipped.append(f"{name}: no timing for both kernel and fix "
                           f"({entry.get('kernel_error') or entry.get('fixed_error') or 'missing'})")
            continue
        label = _label(name, entry, zoo_dir)
        strategies = _strategies(name, entry, label)
        if not strategies:
            skipped.append(f"{name}: no strategy id for its fix (add fix_strategy to its label.yaml)")
            continue
        prov = {**top_prov, **(entry.get("provenance") or {})}
        device = entry.get("device") or prov.get("gpu") or prov.get("device")
        facts = ", ".join(f"{k} {prov[k]}" for k in ("gpu", "driver", "torch", "cuda", "torch_cuda", "triton", "date", "command")
                          if prov.get(k))
        rec = {
            "id": str(uuid.uuid5(_NAMESPACE, f"{name}|{device}|{prov.get('date')}")),
            "created_at": prov.get("date"),
            "kernel": name,
            "backend": _backend(zoo_dir / name / "fixed.py"),
            "chip": prov.get("chip") or prov.get("sm"),
            "device": device,
            "bottleneck": label.get("category"),
            "stall": label.get("subcause"),
            "strategies": strategies,
            "hypothesis": label.get("fix"),
            "rationale": label.get("why"),
            "time_before_ms": float(before),
            "time_after_ms": float(after),
            "speedup": float(before) / float(after),
            "correct": True,
            "source": f"zoo:{name}",
            # Correctness: every zoo kernel and fix passes `kernelopt check` in the CPU suite
            # (tests/test_diagnose_zoo*.py, interpreter, small sizes); zoo_timings does not re-check.
            "notes": f"measured by benchmarks/zoo_timings.py ({facts}); kernel.py vs fixed.py medians; "
                     "correctness checked at small sizes in the CPU test suite",
        }
        records.append(json.loads(record_from_dict({k: v for k, v in rec.items() if v is not None},
                                                   f"zoo {name}").model_dump_json(exclude_none=True)))
    return records, skipped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timings", type=Path)
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "knowledge" / "experience" / "zoo_measured.jsonl")
    ap.add_argument("--zoo", type=Path, default=ROOT / "benchmarks" / "zoo")
    args = ap.parse_args()
    try:
        doc = json.loads(args.timings.read_text())
        records, skipped = convert(doc, args.zoo)
    except (OSError, json.JSONDecodeError, BadInput) as exc:
        print(f"seed_from_zoo: {args.timings}: {exc}", file=sys.stderr)
        return 2
    with args.output.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
    print(f"wrote {len(records)} records to {args.output}")
    for s in skipped:
        print(f"skipped {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
