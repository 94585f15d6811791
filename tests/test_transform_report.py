"""Transform steps in the run directory and the report: v{n}/change.diff for every version with a
parent, the lineage naming each transform step with a link to its diff, failed transform proposals
in the events, and transforms counted in "which strategies paid"."""

from __future__ import annotations

from pathlib import Path

from run_fixtures import SOURCE, config, evaluation

from kernelopt.models.optimize import Proposal
from kernelopt.rundir import RunDir
from kernelopt.report.run_report import build_report

TRANSFORMED = SOURCE.format(block=64).replace("    return x\n", "    y = x\n    return y\n")


def _run(path: Path) -> RunDir:
    run = RunDir.create(path, config())
    run.record_round_started(0)
    v0 = run.write_version(SOURCE.format(block=64), round=0)
    run.record_evaluated("v0", evaluation(Path(v0.path), 8.0))
    run.record_promoted(["v0"])
    run.record_round_finished(0, "v0")
    run.record_round_started(1)
    spec = {"name": "single_pass_row", "site": "kernel_function", "params": {"ROWS": 2}}
    v1 = run.write_version(TRANSFORMED, round=1, proposal=Proposal(
        source=TRANSFORMED, parent="v0", strategy="single-pass-row", change="transform single_pass_row@kernel_function",
        knobs={"BLOCK_SIZE": 64}, optimizer="strategies", extra={"phase": "transform", "transform": spec}))
    run.record_proposal_failed(Proposal(source="", parent="v0", strategy="split-reduction", optimizer="strategies",
                                        change="transform split_reduction@kernel_function",
                                        failed="transform split_reduction@kernel_function: does not parse",
                                        extra={"transform": {"name": "split_reduction", "site": "kernel_function"}}),
                               round=1)
    run.record_evaluated("v1", evaluation(Path(v1.path), 4.0))
    moved = TRANSFORMED.replace("= 64", "= 128")
    v2 = run.write_version(moved, round=1, proposal=Proposal(
        source=moved, parent="v1", strategy="single-pass-row", change="BLOCK_SIZE 64 -> 128",
        knobs={"BLOCK_SIZE": 128}, optimizer="strategies", extra={"phase": "hint"}))
    run.record_evaluated("v2", evaluation(Path(v2.path), 2.0))
    run.record_promoted(["v2", "v1"])
    run.record_round_finished(1, "v2")
    run.record_run_finished("rounds", "v2")
    return run


def test_change_diff_lineage_and_strategy_table(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    assert not (tmp_path / "run" / "v0" / "change.diff").exists()
    diff = (tmp_path / "run" / "v1" / "change.diff").read_text()
    assert diff.startswith("--- v0/kernel.py\n+++ v1/kernel.py\n")
    assert "-    return x\n" in diff and "+    y = x\n" in diff
    assert "-BLOCK_SIZE = 64" in (tmp_path / "run" / "v2" / "change.diff").read_text()

    state = run.replay()
    assert [p.strategy for p in state.failed_proposals] == ["split-reduction"]
    summary = build_report(run)
    run.close()
    steps = {r.id: r for r in summary.lineage}
    assert steps["v1"].transform == "single_pass_row@kernel_function" and steps["v1"].diff == "v1/change.diff"
    assert steps["v2"].transform is None and steps["v2"].diff == "v2/change.diff"
    report = (tmp_path / "run" / "final_report.md").read_text()
    assert ("| 1 | v1 | transform single_pass_row@kernel_function | single-pass-row | **single_pass_row@kernel_function**"
            " | [change.diff](v1/change.diff) |") in report
    paid = {s.strategy: s for s in summary.strategies}
    assert paid["single-pass-row"].tried == 2 and paid["single-pass-row"].improved == 2
    assert paid["single-pass-row"].transform == "single_pass_row"
    assert paid["split-reduction"].tried == 1 and paid["split-reduction"].correct == 0
    assert "| split-reduction | split_reduction | 1 | 0 | 0 |" in report
