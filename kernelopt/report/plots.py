"""Plots of an optimize run (matplotlib, Agg backend, imported only when a plot is drawn)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from kernelopt.models.report import RunSummary
from kernelopt.rundir import atomic_write

BASELINE_STYLES: dict[str, str] = {"eager": "tab:red", "compile": "tab:green"}


def plain_log_axis(axis: Any) -> None:
    """Log scale labelled in plain numbers at 1-2-5 steps (0.05, 0.1, 0.2, 0.5, 1, 2, 5, ...).

    Matplotlib's defaults write 2x10^0, and labelling every minor tick piles the labels
    on top of each other near 1x; one labelled step per 1-2-5 value reads at any range."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_locator(LogLocator(base=10.0, subs=tuple(float(k) for k in range(1, 10))))
    axis.set_minor_formatter(NullFormatter())


def plot_convergence(summary: RunSummary, path: Path) -> Path:
    """Best time per round (log y), with horizontal lines for the eager / torch.compile baselines.

    A run with no correct version yet still gets a figure that says so, so the report's
    link never dangles."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display; must precede pyplot's import
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=100)
    try:
        points = [(p.round, p.best_ms) for p in summary.convergence if p.best_ms is not None]
        if points:
            rounds, times = zip(*points)
            ax.plot(rounds, times, marker="o", drawstyle="steps-post", color="tab:blue", label="best version")
            for label, ms in sorted(summary.baselines_ms.items()):
                ax.axhline(ms, linestyle="--", color=BASELINE_STYLES.get(label, "tab:gray"),
                           label="torch.compile" if label == "compile" else label)
            ax.set_yscale("log")
            plain_log_axis(ax.yaxis)
            ax.set_xticks(sorted({p.round for p in summary.convergence}))
            ax.legend(loc="best")
        else:
            ax.text(0.5, 0.5, "no correct version timed yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("round")
        ax.set_ylabel(f"median ms ({summary.time_label})")
        state = "finished" if summary.finished else "not finished"
        ax.set_title(f"{summary.problem}: best time per round ({state})")
        ax.grid(True, which="both", alpha=0.3)
        buffer = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    atomic_write(path, buffer.getvalue())
    return path
