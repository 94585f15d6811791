"""`kernelopt report RUNDIR`: re-render an optimize run's report and plots."""

from __future__ import annotations

import click

from kernelopt.cli.common import emit, json_option


@click.command("report", epilog="Exit codes: 0 rendered; 2 not a run directory or a damaged one.")
@click.argument("rundir", metavar="RUNDIR", type=click.Path(file_okay=False))
@json_option
def report(rundir: str, as_json: bool) -> None:
    """Write final_report.md, benchmark.md, convergence.png and best_kernel.py into
    RUNDIR from its events, and print their paths. Works on a finished run, a run
    killed half-way and a run still going (read-only, no lock taken).

    With --json: the run's summary (best version, speedup and spread, lineage,
    every version, strategies, diagnosis before/after) with the files written.
    """
    from kernelopt.report import build_report

    summary = build_report(rundir)
    emit(summary, as_json, lambda s: "\n".join([*s.files, *(f"refused: {c}" for c in s.refused),
                                                *([f"best_kernel.py not written: {s.best_kernel_refused}"]
                                                  if s.best_kernel_refused else [])]))
