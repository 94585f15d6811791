"""Render Metrics as Markdown: `ncu_summary.md` (grouped, labelled) and `ncu_details.md` (rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelopt.models.metrics import Metrics


def fmt(value: Any) -> str:
    """Numbers as a person reads them: integers with separators, others to 4 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1e6 or (value != 0 and abs(value) < 1e-3):
        return f"{value:.4g}"
    return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"


def _groups(metric_values: dict[str, Any]) -> list[dict[str, Any]]:
    """Catalog order within catalog groups: [{group, rows: [{label, value, unit, name}]}]."""
    from kernelopt.profile.catalog import GROUPS, load_catalog

    catalog = load_catalog()
    out = []
    for group in GROUPS:
        rows = []
        for entry in catalog.entries:
            if entry.group != group or entry.key not in metric_values:
                continue
            mv = metric_values[entry.key]
            value, name = (mv.value, mv.name) if hasattr(mv, "value") else (mv, "")
            rows.append({"key": entry.key, "label": entry.label, "value": fmt(value), "unit": entry.unit, "name": name})
        if rows:
            out.append({"group": group, "rows": rows})
    return out


def summary_context(metrics: Metrics) -> dict[str, Any]:
    kernels = [
        {
            "name": k.name,
            "index": k.index,
            "dominant": k.dominant,
            "share": f"{100 * k.time_fraction:.1f}%" if k.time_fraction is not None else "",
            "duration": fmt(k.duration_ns),
            "grid": k.grid,
            "block": k.block,
            "groups": _groups(k.metrics),
            "opt_rules": sum(1 for r in k.rules if r.type == "OPT"),
        }
        for k in metrics.kernels
    ]
    roof = metrics.roofline
    return {
        "m": metrics,
        "kernels": kernels,
        "combined": _groups(metrics.combined) if len(metrics.kernels) > 1 else [],
        "roofline": None if roof is None else {
            "device": roof.device,
            "basis": "measured (kernelopt env --measure)" if roof.measured else "datasheet",
            "bw": fmt(roof.achieved_bytes_per_s), "peak_bw": fmt(roof.peak_dram_bytes_per_s),
            "dram": f"{roof.dram_fraction:.3f}" if roof.dram_fraction is not None else "n/a",
            "flops": fmt(roof.achieved_flops_per_s), "peak_flops": fmt(roof.peak_flops_per_s),
            "precision": roof.precision or "n/a",
            "compute": f"{roof.compute_fraction:.3f}" if roof.compute_fraction is not None else "n/a",
        },
        "static": [s.model_dump() for s in metrics.static],
    }


def render_summary(metrics: Metrics) -> str:
    from kernelopt.resources import render_template

    return render_template("ncu_summary.md", **summary_context(metrics))


def render_details(metrics: Metrics) -> str:
    from kernelopt.resources import render_template

    kernels = [
        {
            "name": k.name,
            "dominant": k.dominant,
            "rules": [
                {
                    "type": r.type,
                    "rule": r.rule,
                    "section": r.section or "",
                    "speedup": f"{r.est_speedup_pct:.1f}% ({r.speedup_type or '?'})" if r.est_speedup_pct is not None else "",
                    "message": r.message,
                    "focus": [
                        {"name": f.get("name"), "value": fmt(f.get("value")), "info": f.get("info") or ""}
                        for f in r.focus_metrics
                    ],
                }
                for r in sorted(k.rules, key=lambda r: ({"OPT": 0, "WRN": 1, "ERR": 1}.get(r.type, 2), -(r.est_speedup_pct or 0)))
            ],
        }
        for k in metrics.kernels
    ]
    return render_template("ncu_details.md", m=metrics, kernels=kernels)


def write_outputs(metrics: Metrics, out_dir: str | Path) -> list[Path]:
    """metrics.json, ncu_summary.md and ncu_details.md in `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "metrics.json", out / "ncu_summary.md", out / "ncu_details.md"]
    paths[0].write_text(metrics.model_dump_json(indent=2))
    paths[1].write_text(render_summary(metrics))
    paths[2].write_text(render_details(metrics))
    return paths
