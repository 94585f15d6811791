"""The suite's report: suite_result.json, suite_report.md, speedup.png and roofline.png.

Every figure comes from the SuiteResult (`kernelopt.suite`); a baseline that was never
timed is shown as "not measured", never as 0.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from kernelopt.models.suite import SuiteResult
from kernelopt.rundir import atomic_write

SPEEDUP_PNG = "speedup.png"
ROOFLINE_PNG = "roofline.png"
REPORT_MD = "suite_report.md"
RESULT_JSON = "suite_result.json"
# Same colours as an optimize run's convergence plot (kernelopt.report.plots).
COLOURS = {"eager": "tab:red", "compile": "tab:green", "start": "tab:blue"}
LABELS = {"eager": "vs eager", "compile": "vs torch.compile", "start": "vs starting kernel"}


def write_suite_report(summary: SuiteResult, out: str | Path) -> list[Path]:
    """Write the four files into `out`, record them in `summary.files`, return their paths."""
    from kernelopt.resources import render_template

    out = Path(out)
    written = [plot_speedups(summary, out / SPEEDUP_PNG), plot_roofline(summary, out / ROOFLINE_PNG)]
    md = out / REPORT_MD
    atomic_write(md, render_template("suite_report.md", s=summary, fmt_ms=fmt_ms, fmt_x=fmt_x, fmt_frac=fmt_frac,
                                     fmt_pct=fmt_pct, speedup_png=SPEEDUP_PNG, roofline_png=ROOFLINE_PNG))
    written.append(md)
    js = out / RESULT_JSON
    summary.files = [str(p) for p in sorted(written + [js])]
    atomic_write(js, summary.model_dump_json(indent=2) + "\n")
    return sorted(written + [js])


def fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def fmt_x(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}x"


def fmt_frac(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}"


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _figure(width: float) -> tuple[Any, Any]:
    # A bare Figure, not pyplot: no global figure registry, so plots drawn while other
    # threads draw (problems run in parallel) cannot interfere, and no display is needed.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 4.6), dpi=100)
    return fig, fig.subplots()


def _save(fig: Any, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    atomic_write(path, buffer.getvalue())
    return path


def _shape_note(s: SuiteResult) -> str:
    parts = [s.time_label]
    if s.small:
        parts.append("SMALL shapes")
    return ", ".join(parts)


def plot_speedups(s: SuiteResult, path: Path) -> Path:
    """Grouped bars per problem: best kernel's speedup over eager and torch.compile (log scale,
    a line at 1x); the starting kernel's bar as well. A baseline never timed gets no bars and
    the figure says so."""
    from kernelopt.report.plots import plain_log_axis

    names = [r.name for r in s.problems]
    measured = [b for b in ("eager", "compile", "start") if any(r.speedup(b) for r in s.problems)]
    # About a quarter inch per bar, within what a page or a screen shows at once.
    fig, ax = _figure(min(20.0, max(7.0, 0.25 * len(names) * max(1, len(measured)) + 2.5)))
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--")
    width = 0.8 / max(1, len(measured))
    values: list[float] = []
    for j, b in enumerate(measured):
        xs, ys = [], []
        for i, r in enumerate(s.problems):
            x = r.speedup(b)
            if x:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(x)
        values += ys
        ax.bar(xs, ys, width=width, color=COLOURS[b], label=LABELS[b])
    for i, r in enumerate(s.problems):
        if not r.correct:
            ax.text(i, 1.0, "incorrect", rotation=90, ha="center", va="bottom", fontsize=8, color="tab:red")
    absent = [LABELS[b].removeprefix("vs ") for b in ("eager", "compile") if b not in measured]
    ax.set_yscale("log")
    if values:
        lo, hi = min(values + [1.0]), max(values + [1.0])
        ax.set_ylim(lo / 1.5, hi * 1.5)
    plain_log_axis(ax.yaxis)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel("speedup of the best kernel (x, log)")
    title = f"Speedup per problem ({_shape_note(s)})"
    if absent:
        title += f"\nnot measured (no baseline time): {', '.join(absent)}"
    ax.set_title(title, fontsize=11)
    if measured:
        ax.legend(loc="upper right")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return _save(fig, path)


def plot_roofline(s: SuiteResult, path: Path) -> Path:
    """Each problem's final roofline fraction (0..1); a figure that says why when none is known."""
    names = [r.name for r in s.problems]
    fig, ax = _figure(max(7.0, 0.45 * len(names) + 2.0))
    known = [(i, r) for i, r in enumerate(s.problems) if r.roofline_fraction is not None]
    for i, r in known:
        colour = "tab:purple" if r.roofline_bound == "compute" else "tab:orange"
        ax.bar(i, r.roofline_fraction, color=colour)
    if known:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color="tab:orange", label="DRAM bound"),
                           Patch(color="tab:purple", label="compute bound")], loc="upper right")
        top = max(1.25, max(r.roofline_fraction or 0.0 for _, r in known) * 1.1)  # room for the legend
        ax.set_ylim(0, top)
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--")
    else:
        why = "the device's peaks are unknown" if s.interpreter or not s.device else "no correct problem was timed"
        if s.interpreter:
            why = "interpreter wall times on the CPU: no device peak to hold them against"
        ax.text(0.5, 0.5, f"no roofline fraction:\n{why}", ha="center", va="center", transform=ax.transAxes)
        ax.set_ylim(0, 1.05)
    for i, r in enumerate(s.problems):
        if not r.correct:
            ax.text(i, 0.02, "incorrect", rotation=90, ha="center", va="bottom", fontsize=8, color="tab:red")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel("fraction of the roofline bound (best time)")
    ax.set_title(f"Roofline fraction per problem ({_shape_note(s)})\n{s.device or 'device unknown'}", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


__all__ = ["write_suite_report", "plot_speedups", "plot_roofline"]
