"""What has been tried is keyed on (structure, knob values): a transform's rewrite that keeps its
parent's knob values is a new candidate for the loop's duplicate check and for the knob search."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt.models.harness import Problem
from kernelopt.models.optimize import Attempt, OptimizeContext, Proposal, Version
from kernelopt.optimize.knobs import discover_knobs, knob_values
from kernelopt.optimize.knobs.rewrite import set_knobs, structure_hash
from kernelopt.optimize.knobs.search import KnobSearchOptimizer

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "knobs" / "search_kernel.py"
EXAMPLES = [ROOT / "examples" / n / "kernel.py" for n in ("matvec", "softmax", "rmsnorm")]
# A structural rewrite on one line: same knob names (they carry line numbers), same values.
OLD_LINE = "acc += tl.sum(a * x[None, :], axis=1)"
NEW_LINE = "acc += tl.sum(x[None, :] * a, axis=1)"


def test_structure_hash_ignores_knob_values_and_sees_rewrites() -> None:
    source = FIXTURE.read_text()
    base = structure_hash(source)
    moves = [{"BLOCK_M": 32}, {"num_warps": 8, "num_stages": 2}, {"load@L17.eviction_policy": "evict_first"},
             {"loop@L14.loop_unroll_factor": 2, "loop@L14.num_stages": 3}]
    values = knob_values(source)
    for move in moves:
        assert set(move) <= set(values), (move, sorted(values))
        moved = set_knobs(source, move)
        assert moved != source and structure_hash(moved) == base, move
        # and back: the keyword removed again (or tl.range left bare) is the same structure
        back = set_knobs(moved, {k: values[k] for k in move})
        assert structure_hash(back) == base, move
    rewritten = source.replace(OLD_LINE, NEW_LINE)
    assert knob_values(rewritten) == values and structure_hash(rewritten) != base
    for path in EXAMPLES:  # every example's own knob moves keep its structure
        text = path.read_text()
        for name, value in knob_values(text).items():
            site = next(k for k in discover_knobs(text) if k.name == name)
            other = next((d for d in site.domain if d != value), None)
            if other is not None:
                assert structure_hash(set_knobs(text, {name: other})) == structure_hash(text), (path, name)


def _context(tmp_path: Path) -> OptimizeContext:
    """v0 (the fixture) -> v1: a knob move BLOCK_M 128 -> 64; v0 -> v2: a rewrite keeping v0's knobs."""
    source = FIXTURE.read_text()
    v0 = tmp_path / "v0.py"
    v0.write_text(source)
    v2 = tmp_path / "v2.py"
    v2.write_text(source.replace(OLD_LINE, NEW_LINE))
    start = knob_values(source)
    moved = {**start, "BLOCK_M": 64}
    history = [
        Attempt(version="v1", parent="v0", change="BLOCK_M 128 -> 64", outcome="slower", knobs=moved,
                structure=structure_hash(source), median_ms=2.0),
        Attempt(version="v2", parent="v0", change="rewrite", outcome="faster", knobs=start,
                structure=structure_hash(v2.read_text()), median_ms=0.5),
    ]
    beam = [Version(id="v2", round=1, path=str(v2), parent="v0")]
    return OptimizeContext(problem=Problem(path="p.py", name="matvec"), round=2, beam=beam, history=history,
                           proposals_per_member=200)


def test_the_knob_search_tries_on_a_rewrite_what_it_tried_on_its_parent(tmp_path: Path) -> None:
    proposals = KnobSearchOptimizer(strategies=_empty_strategies()).propose(_context(tmp_path))
    start = knob_values(FIXTURE.read_text())
    # Before, v1's config (BLOCK_M 64) was "seen" and never tried on the rewritten kernel.
    assert any(p.knobs == {**start, "BLOCK_M": 64} and p.parent == "v2" for p in proposals)
    # ... while the rewrite's own starting config is not proposed again
    assert all(p.knobs != start for p in proposals)


def test_an_attempt_without_a_structure_still_counts_as_tried(tmp_path: Path) -> None:
    context = _context(tmp_path)
    context.history[0].structure = None
    proposals = KnobSearchOptimizer(strategies=_empty_strategies()).propose(context)
    start = knob_values(FIXTURE.read_text())
    assert proposals and not any(p.knobs == {**start, "BLOCK_M": 64} for p in proposals)


def _empty_strategies():
    from kernelopt.models.strategy import StrategySet

    return StrategySet()


class _Engine:
    ready: list = []
    devices = ["cpu"]


class _Proposer:
    name = "test"

    def __init__(self, proposals: list[Proposal]) -> None:
        self.proposals = proposals

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        return self.proposals


def test_the_loop_keeps_a_rewrite_that_reports_its_parents_knob_values(tmp_path: Path) -> None:
    from run_fixtures import PROBLEM, config

    from kernelopt.optimize.loop import Loop
    from kernelopt.rundir import RunDir

    source = FIXTURE.read_text()
    knobs = knob_values(source)
    cfg = config()
    run = RunDir.create(tmp_path / "run", cfg)
    run.write_version(source, round=0)
    moved = set_knobs(source, {"BLOCK_M": 64})
    run.write_version(moved, round=1, proposal=Proposal(source=moved, parent="v0", change="BLOCK_M 128 -> 64",
                                                        knobs=knob_values(moved)))
    rewrite = source.replace(OLD_LINE, NEW_LINE)
    same_knobs_again = set_knobs(source, {"BLOCK_M": 64, "num_warps": 4})  # v1's config, written differently
    proposals = [
        Proposal(source=moved.replace(OLD_LINE, NEW_LINE), parent="v1", change="rewrite", knobs=knob_values(moved)),
        Proposal(source=same_knobs_again, parent="v0", change="BLOCK_M 128 -> 64", knobs=knob_values(moved)),
        Proposal(source=rewrite, parent="v0", change="rewrite", knobs=knobs),
    ]
    loop = Loop(run, PROBLEM, cfg, engine=_Engine(), optimizer=_Proposer(proposals), profile=False)
    ids = loop.propose(2)
    run.close()
    assert len(ids) == 2  # both rewrites; the knob duplicate of v1 is dropped
    texts = [(tmp_path / "run" / i / "kernel.py").read_text() for i in ids]
    assert NEW_LINE in texts[0] and NEW_LINE in texts[1]


@pytest.mark.slow
def test_every_single_knob_move_of_every_kernel_here_keeps_the_structure() -> None:
    """Every knob of the suite drafts, the examples and the transform fixtures, moved to every value of
    its domain: the structure hash stays (an autotune config's num_stages added as a keyword included)."""
    files = sorted((ROOT / "benchmarks" / "suite").glob("*/kernel.py")) + sorted(
        (ROOT / "tests" / "fixtures" / "transforms").glob("*.py")) + sorted((ROOT / "examples").glob("*/kernel.py"))
    moves = 0
    for path in files:
        text = path.read_text()
        try:
            knobs = discover_knobs(text, str(path))
        except Exception:  # noqa: BLE001 - a fixture that is not a candidate
            continue
        base = structure_hash(text, str(path))
        for k in knobs:
            for value in k.domain:
                if value == k.value and type(value) is type(k.value):
                    continue
                try:
                    moved = set_knobs(text, {k.name: value}, str(path))
                except Exception:  # noqa: BLE001 - a value this file cannot take
                    continue
                moves += 1
                assert structure_hash(moved, str(path)) == base, (path.name, k.name, k.value, value)
    assert moves > 1000
