"""The diagnosis zoo: profile every planted kernel and its fix, then score the rule packs.

    # on a GPU machine with ncu (writes FIXTURES/<entry>/ and FIXTURES/<entry>.fixed/: metrics.json, raw.csv, ...):
    python3 benchmarks/zoo/run_zoo.py profile tests/fixtures/zoo [ENTRY ...]

    # anywhere (CPU): classify every profiled kernel with each pack and write the table
    python3 benchmarks/zoo/run_zoo.py score tests/fixtures/zoo [--out benchmarks/results]

`profile` drives benchmarks/profile_fixtures.py (the project's one fixture writer)
with a NAME=PROBLEM:KERNEL pair per zoo entry and variant. `score` reads each
variant's metrics.json (falling back to raw.csv), classifies it with the kernelopt,
roofline and sol4 packs, and writes zoo_accuracy_<gpu>.md and .json: the
primary-label accuracy of each pack on the planted kernels, per entry what each
pack said, and what kernelopt says about the fix (with the measured durations).
Published-pack labels are mapped onto the six categories by each pack's `labels`
(roofline: memory->dram, compute->compute, underutilized->latency; sol4: memory->dram,
compute->compute, latency->latency, occupancy->occupancy).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ZOO = Path(__file__).resolve().parent
PACKS = ("kernelopt", "roofline", "sol4")
VARIANTS = ("kernel", "fixed")
sys.path.insert(0, str(ROOT))


def entries(names: list[str] | None = None) -> list[Path]:
    """Zoo entry folders (those with a label.yaml), sorted; `names` selects some."""
    found = sorted(d for d in ZOO.iterdir() if (d / "label.yaml").is_file())
    if names:
        unknown = sorted(set(names) - {d.name for d in found})
        if unknown:
            raise SystemExit(f"unknown zoo entries: {', '.join(unknown)}")
        found = [d for d in found if d.name in names]
    return found


def load_label(entry: Path) -> dict[str, Any]:
    from kernelopt.models import CATEGORIES
    from kernelopt.yamlio import load_yaml

    doc = load_yaml(entry / "label.yaml")
    data = doc.data
    if not isinstance(data, dict) or data.get("category") not in CATEGORIES:
        raise SystemExit(f"{doc.path}: 'category' must be one of {', '.join(CATEGORIES)}")
    for key in ("subcause", "why", "fix"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise SystemExit(f"{doc.where((key,))}: '{key}' must be a non-empty string")
    return data


def profile(fixtures: Path, names: list[str] | None, extra: list[str]) -> int:
    # Paths relative to the checkout, so provenance.json names the same files on every machine.
    pairs = []
    for entry in entries(names):
        rel = entry.relative_to(ROOT)
        pairs += [f"{fixture_name(entry.name, v)}={rel / 'problem.py'}:{rel / (v + '.py')}" for v in VARIANTS]
    cmd = [sys.executable, "benchmarks/profile_fixtures.py", str(fixtures.resolve()), *pairs, *extra]
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd, check=False, cwd=ROOT).returncode


def fixture_name(entry: str, variant: str) -> str:
    """Fixture folder of a variant: `<entry>` for the planted kernel, `<entry>.fixed` for the fix."""
    return entry if variant == "kernel" else f"{entry}.{variant}"


def variant_folder(fixtures: Path, entry: str, variant: str) -> Path:
    return fixtures / fixture_name(entry, variant)


def kernel_names(source: Path) -> set[str]:
    """Names of the GPU kernels a candidate file defines (@triton.jit functions, __global__ functions)."""
    import ast
    import re

    text = source.read_text(encoding="utf-8")
    # `__global__ void [__launch_bounds__(...)] name(`
    names = set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)", text))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            names.add(node.name)
    return names


def stale(entry: Path, variant: str, metrics: Any) -> str | None:
    """Why a profile no longer describes the candidate (its kernels were renamed/replaced), else None."""
    defined = kernel_names(entry / f"{variant}.py")
    profiled = {k.name for k in metrics.kernels}
    if defined and not defined & profiled:
        return (f"profile is of kernels {sorted(profiled)}, but {entry.name}/{variant}.py now defines "
                f"{sorted(defined)}: re-profile it")
    return None


def variant_metrics(folder: Path) -> Any | None:
    """Metrics of one profiled variant: metrics.json (with static resources) or raw.csv."""
    from kernelopt.diagnose import load_metrics

    for name in ("metrics.json", "raw.csv"):
        if (folder / name).is_file():
            return load_metrics(folder / name)
    return None


def gpu_tag(gpu: str | None) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'h100': the short GPU name in result file names."""
    words = (gpu or "").split()
    if words and words[0].upper() == "NVIDIA":
        words = words[1:]
    return words[0].lower() if words else None


def score(fixtures: Path, out: Path, names: list[str] | None = None, stem: str | None = None) -> dict[str, Any]:
    """Classify every profiled zoo kernel with each pack; write STEM.json and STEM.md to `out`.

    STEM defaults to zoo_accuracy_<gpu> (from the profiles' provenance), so the tables
    of profiles taken on different GPUs sit side by side.
    """
    from kernelopt.diagnose.classifier import BottleneckClassifier

    classifiers = {pack: BottleneckClassifier(pack) for pack in PACKS}
    rows: list[dict[str, Any]] = []
    provenance: dict[str, Any] = {}
    for entry in entries(names):
        label = load_label(entry)
        row: dict[str, Any] = {
            "entry": entry.name, "category": label["category"], "subcause": label["subcause"], "variants": {},
        }
        if label.get("note"):
            row["note"] = label["note"]
        row["relabelled_after_profile"] = bool(label.get("relabelled_after_profile"))
        for variant in VARIANTS:
            folder = variant_folder(fixtures, entry.name, variant)
            metrics = variant_metrics(folder)
            if metrics is None:
                continue
            reason = stale(entry, variant, metrics)
            if reason is not None:
                row.setdefault("stale", {})[variant] = reason
                continue
            prov_file = folder / "provenance.json"
            if prov_file.is_file() and not provenance:
                prov = json.loads(prov_file.read_text())
                provenance = {k: prov.get(k) for k in ("gpu", "nvidia_smi", "ncu_version", "torch", "triton", "date")}
            durations = [k.duration_ns for k in metrics.kernels if k.duration_ns is not None]
            result: dict[str, Any] = {"gpu_time_ns": sum(durations) if durations else None, "packs": {}}
            for pack, clf in classifiers.items():
                d = clf.classify(metrics)
                p = d.primary
                result["packs"][pack] = {
                    "category": p.category if p else None,
                    "label": p.label if p else None,
                    "subcause": p.subcause if p else None,
                    "rule": p.rule_id if p else None,
                    "confidence": p.confidence if p else None,
                    "near_roofline": p.near_roofline if p else None,
                    "correct": (p is not None and p.category == label["category"]) if variant == "kernel" else None,
                }
            row["variants"][variant] = result
        rows.append(row)
    profiled = [r for r in rows if "kernel" in r["variants"]]
    accuracy = {
        pack: {
            "correct": sum(1 for r in profiled if r["variants"]["kernel"]["packs"][pack]["correct"]),
            "total": len(profiled),
            "subcause_correct": sum(
                1 for r in profiled if r["variants"]["kernel"]["packs"][pack]["subcause"] == r["subcause"]
            ) if pack == "kernelopt" else None,
        }
        for pack in PACKS
    }
    # Labels corrected after their profile was seen are not independent evidence: count without them too.
    blind = [r for r in profiled if not r["relabelled_after_profile"]]
    for pack in PACKS:
        accuracy[pack]["correct_labelled_before_profile"] = sum(
            1 for r in blind if r["variants"]["kernel"]["packs"][pack]["correct"]
        )
        accuracy[pack]["total_labelled_before_profile"] = len(blind)
    report = {"fixtures": str(fixtures), "provenance": provenance, "accuracy": accuracy, "entries": rows}
    tag = gpu_tag(provenance.get("gpu"))
    stem = stem or (f"zoo_accuracy_{tag}" if tag else "zoo_accuracy")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(report))
    report["written"] = [str(out / f"{stem}.md"), str(out / f"{stem}.json")]
    return report


def _cell(pack_result: dict[str, Any] | None) -> str:
    if not pack_result or pack_result["category"] is None:
        return "- (none)"
    text = pack_result["category"]
    if pack_result.get("label") and pack_result["label"] != pack_result["category"]:
        text = f"{pack_result['label']} -> {text}"
    elif pack_result.get("subcause"):
        text += f"/{pack_result['subcause']}"
    mark = {True: " ✓", False: " ✗", None: ""}[pack_result.get("correct")]
    return text + mark


def markdown(report: dict[str, Any]) -> str:
    acc = report["accuracy"]
    prov = report["provenance"]
    lines = [
        "# Diagnosis zoo: primary-label accuracy",
        "",
        "Generated by `python3 benchmarks/zoo/run_zoo.py score " + report["fixtures"] + "` from the committed",
        "Nsight Compute profiles of every zoo kernel (`benchmarks/zoo/*/kernel.py`) and its fix (`fixed.py`).",
        "",
    ]
    if prov:
        lines += [
            "Profiles: " + ", ".join(f"{k}: {v}" for k, v in prov.items() if v) + "; one ncu run per candidate",
            "(`benchmarks/profile_fixtures.py`, command and versions in each fixture's `provenance.json`).",
            "",
        ]
    lines += [
        "A planted kernel counts as correct when the pack's primary bottleneck maps to the category in its",
        "`label.yaml`. Published-pack labels map onto categories as: roofline memory->dram, compute->compute,",
        "underutilized->latency; sol4 memory->dram, compute->compute, latency->latency, occupancy->occupancy.",
        "",
        "| pack | correct | planted kernels | accuracy | labelled before profiling: correct / total |",
        "|---|---:|---:|---:|---:|",
    ]
    for pack, a in acc.items():
        pct = f"{100 * a['correct'] / a['total']:.0f}%" if a["total"] else "n/a"
        blind = f"{a['correct_labelled_before_profile']} / {a['total_labelled_before_profile']}"
        lines.append(f"| {pack} | {a['correct']} | {a['total']} | {pct} | {blind} |")
    lines += [
        "",
        "The last column counts only the entries whose label was written before their profile was seen;",
        "labels corrected afterwards (`relabelled_after_profile` in label.yaml) are explained in the notes below.",
    ]
    sub = acc.get("kernelopt", {})
    if sub.get("total"):
        lines += ["", f"kernelopt sub-cause matches the label on {sub['subcause_correct']} of {sub['total']}."]
    lines += [
        "",
        "## Per kernel",
        "",
        "| entry | label | kernelopt | roofline | sol4 | kernelopt on the fix | GPU time kernel -> fix |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["entries"]:
        k = row["variants"].get("kernel")
        f = row["variants"].get("fixed")
        if k is None:
            state = "profile stale (kernel changed)" if "kernel" in row.get("stale", {}) else "not profiled"
            lines.append(f"| {row['entry']} | {row['category']}/{row['subcause']} | {state} | | | | |")
            continue
        timing = ""
        if f and k.get("gpu_time_ns") and f.get("gpu_time_ns"):
            timing = f"{k['gpu_time_ns'] / 1000:.1f} us -> {f['gpu_time_ns'] / 1000:.1f} us ({k['gpu_time_ns'] / f['gpu_time_ns']:.2f}x)"
        lines.append(
            f"| {row['entry']} | {row['category']}/{row['subcause']} | {_cell(k['packs']['kernelopt'])} | "
            f"{_cell(k['packs']['roofline'])} | {_cell(k['packs']['sol4'])} | "
            f"{_cell(f['packs']['kernelopt']) if f else 'not profiled'} | {timing} |"
        )
    notes = [(row["entry"], row["note"]) for row in report["entries"] if row.get("note")]
    stale = [(row["entry"], reason) for row in report["entries"] for reason in row.get("stale", {}).values()]
    lines += [
        "",
        "GPU time is the sum of the profiled kernels' `gpu__time_duration` under ncu (one replayed call, caches",
        "flushed by ncu); it is not a benchmark timing.",
    ]
    if notes:
        lines += ["", "## Label notes", ""] + [f"- `{entry}`: {note}" for entry, note in notes]
    if stale:
        lines += ["", "## Not scored (profile older than the kernel)", ""] + [f"- `{e}`: {r}" for e, r in stale]
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("profile", help="profile every zoo kernel and fix with ncu (GPU)")
    p.add_argument("fixtures", type=Path)
    p.add_argument("entries", nargs="*")
    p.add_argument("--timeout", default="600", help="per-pair profiling timeout, seconds")
    s = sub.add_parser("score", help="classify the profiles with each pack and write the accuracy table")
    s.add_argument("fixtures", type=Path)
    s.add_argument("entries", nargs="*")
    s.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    s.add_argument("--stem", help="output file stem (default: zoo_accuracy_<gpu of the profiles>)")
    opts = ap.parse_args()
    if opts.cmd == "profile":
        return profile(opts.fixtures, opts.entries, ["--timeout", opts.timeout])
    report = score(opts.fixtures, opts.out, opts.entries, opts.stem)
    for pack, a in report["accuracy"].items():
        print(f"{pack}: {a['correct']}/{a['total']}")
    print("wrote " + " and ".join(report["written"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
