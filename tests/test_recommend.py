"""kernelopt.recommend: one stage for packs and experience - votes, crowding, seeds, similarity
across problems, failures ranked later, and memory reaching the next optimize run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernelopt.experience.store import ExperienceStore
from kernelopt.models import Situation
from kernelopt.models.experience import ExperienceRecord
from kernelopt.recommend import LEGACY_KNOBS, recommend

ROOT = Path(__file__).resolve().parent.parent
MATVEC = ROOT / "examples" / "matvec"


@pytest.fixture()
def store(tmp_path: Path) -> ExperienceStore:
    s = ExperienceStore(tmp_path / "e.db", seed=False)
    yield s
    s.close()


def knob_run(kernel: str, vid: int, before: float, after: float, params: dict[str, Any], *,
             strategies: list[str] | None = None, **kw: Any) -> ExperienceRecord:
    """A record as the loop writes it for one version of a knob-search run."""
    return ExperienceRecord(kernel=kernel, backend="triton", device="cuda:0 (NVIDIA H100 80GB HBM3)", correct=True,
                            time_before_ms=before, time_after_ms=after, speedup=before / after, params=params,
                            strategies=strategies or [], source=f"run:kernel:2026-01-01:v{vid}", **kw)


H100 = dict(backend="triton", device="cuda:3 (NVIDIA H100 80GB HBM3)")


def test_records_without_a_strategy_do_not_crowd_out_the_votes(store: ExperienceStore) -> None:
    """~120 bare knob-run records on one kernel took every voting slot: 'no recommendation', although
    the store held the user's own measured successes. They vote no more (and take no slot)."""
    store.add_many([ExperienceRecord(kernel="row_sum", correct=True, outcome="neutral", speedup=1.0,
                                     time_after_ms=1.0, notes=f"bare {i}", **H100) for i in range(120)])
    # Measured on another GPU: a little less relevant than the bare records, which took every slot.
    store.add_many([knob_run("row_sum", 200 + i, 2.0, 1.2, {"BLOCK": 1024}, strategies=["my-own-trick"])
                    .model_copy(update={"device": "cuda:0 (NVIDIA A100-SXM4-80GB)"}) for i in range(3)])
    advice = recommend(Situation(kernel="row_sum", **H100), store, include_packs=False)
    assert advice.recommendations and advice.recommendations[0].strategy == "my-own-trick"
    assert "other device" in advice.recommendations[0].reason


def test_bare_knob_run_records_still_vote_and_seed(store: ExperienceStore) -> None:
    """Records of knob runs from before every proposal carried a strategy: with knob values they vote as
    a generic knob search and give the seed."""
    store.add_many([knob_run("row_sum", i, 2.0, 2.0 / (1 + i / 10), {"BLOCK": 64 * (i + 1)}) for i in range(120)])
    advice = recommend(Situation(kernel="row_sum", **H100), store, include_packs=False)
    assert [r.strategy for r in advice.recommendations] == [LEGACY_KNOBS]
    assert advice.recommendations[0].generic
    assert advice.seed is not None and advice.seed.knobs == {"BLOCK": 64 * 120}


def test_seed_is_the_fastest_configuration_not_the_largest_step(store: ExperienceStore) -> None:
    """v1 2x over v0 in one step; v5 3.3x over v0 through smaller steps: the seed is v5's configuration."""
    v0 = 10.0
    store.add(knob_run("softmax", 1, v0, 5.0, {"BLOCK": 256, "num_warps": 4}))  # 2x in one step
    store.add(knob_run("softmax", 3, 5.0, 4.0, {"BLOCK": 512, "num_warps": 4}))  # 1.25x
    store.add(knob_run("softmax", 5, 4.0, 3.0, {"BLOCK": 512, "num_warps": 8}))  # 1.33x: 3.3x over v0
    # Faster still, but measured on another device: not a seed for the H100.
    store.add(knob_run("softmax", 7, 4.0, 1.0, {"BLOCK": 32, "num_warps": 1}).model_copy(
        update={"device": "cuda:0 (NVIDIA A100-SXM4-80GB)"}))
    advice = recommend(Situation(kernel="softmax", **H100), store)
    assert advice.seed is not None
    assert advice.seed.knobs == {"BLOCK": 512, "num_warps": 8}
    assert advice.seed.time_ms == 3.0


def test_seed_keeps_to_the_shape_class(store: ExperienceStore) -> None:
    """A --small run does not seed a full-size run: the seed needs the same shape class."""
    small = {"ROWS": 16, "COLS": 100}
    store.add(knob_run("softmax", 1, 1.0, 0.1, {"BLOCK": 128}, dims=small))
    full = Situation(kernel="softmax", shape_class="~1e9B", **H100)
    assert recommend(full, store).seed is None
    from kernelopt.experience.labels import shape_class

    assert recommend(Situation(kernel="softmax", shape_class=shape_class(small), **H100), store).seed is not None


def test_other_problems_count_when_similar_and_other_devices_count_less(store: ExperienceStore) -> None:
    """A record of another problem of the same family votes; one from another device counts less and says so."""
    store.add(knob_run("layernorm", 1, 2.0, 1.0, {}, strategies=["single-pass-row"], family="norm"))
    store.add(knob_run("zz_unrelated_kernel", 2, 2.0, 1.0, {}, strategies=["grouped-tile-order"], family="matmul")
              .model_copy(update={"device": "cuda:0 (NVIDIA A100-SXM4-80GB)"}))
    advice = recommend(Situation(kernel="rmsnorm", family="norm", **H100), store, include_packs=False)
    ranked = [r.strategy for r in advice.recommendations]
    assert ranked[0] == "single-pass-row"
    a100 = next((r for r in advice.recommendations if r.strategy == "grouped-tile-order"), None)
    if a100 is not None:
        assert "other device" in a100.reason and "counts less" in a100.reason
    # Same record, same situation but on the A100: its relevance is lower on the H100.
    h100 = recommend(Situation(kernel="zz_unrelated_kernel", family="matmul", **H100), store, include_packs=False)
    a100s = recommend(Situation(kernel="zz_unrelated_kernel", family="matmul", backend="triton",
                                device="cuda:0 (NVIDIA A100-SXM4-80GB)"), store, include_packs=False)
    s_h = next(r for r in h100.recommendations if r.strategy == "grouped-tile-order")
    s_a = next(r for r in a100s.recommendations if r.strategy == "grouped-tile-order")
    assert s_h.parts["similarity"] < s_a.parts["similarity"]
    assert "other device" in s_h.reason and "other device" not in s_a.reason


def test_a_strategy_that_failed_on_similar_kernels_goes_later_not_never(store: ExperienceStore) -> None:
    for i in range(2):
        store.add(knob_run("softmax", i, 2.0, 1.0, {}, strategies=["a-strategy"]))
        store.add(knob_run("softmax", 10 + i, 2.0, 1.0, {}, strategies=["b-strategy"]))
    before = [r.strategy for r in recommend(Situation(kernel="softmax", **H100), store,
                                            include_packs=False).recommendations]
    assert set(before) == {"a-strategy", "b-strategy"}
    for i in range(3):
        store.add(knob_run("softmax", 20 + i, 2.0, 4.0, {}, strategies=[before[0]],
                           outcome="failure"))
    after = recommend(Situation(kernel="softmax", **H100), store, include_packs=False)
    ranked = [r.strategy for r in after.recommendations]
    assert ranked == [before[1], before[0]]  # later, still there
    failed = after.recommendations[1]
    assert failed.failures and "ranked later" in failed.reason
    assert before[0] in {f.strategy for f in after.known_failures}


def test_packs_and_experience_in_one_ranking_with_transform_names(store: ExperienceStore) -> None:
    """The packs answer for a diagnosis with no store; with one, experience joins the same ranking."""
    alone = recommend(Situation(kernel="softmax", bottleneck="dram", backend="triton"), None)
    assert alone.recommendations and all(r.source == "pack" for r in alone.recommendations)
    top = alone.recommendations[-1].strategy
    for i in range(3):
        store.add(knob_run("softmax", i, 3.0, 1.0, {}, strategies=[top], bottleneck="dram"))
    both = recommend(Situation(kernel="softmax", bottleneck="dram", **H100), store, n=20)
    first = both.recommendations[0]
    assert first.strategy == top and first.source == "both" and first.records
    assert both.transforms() == [(r.strategy, r.transform) for r in both.recommendations if r.transform]


# ---------------------------------------------------------------------------------------------- the loop


def test_a_second_optimize_run_starts_from_what_the_first_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two knob-search runs against one database: the first proposal of the second run is the fastest
    configuration the first measured, and every outcome of the first recorded a strategy."""
    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.optimize import loop as loop_mod
    from conftest import FakeEngine

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: FakeEngine(problem))
    db = tmp_path / "exp.db"
    common = dict(problem_path=MATVEC / "problem.py", kernel_path=MATVEC / "kernel.py",
                  overrides={"M": "64", "K": "256"}, optimizer="knobs", rounds=3, beam=2,
                  proposals_per_member=3, seed=1, profile=False, experience=str(db))
    first = loop_mod.optimize(run_dir=tmp_path / "a", budget_evals=12, **common)
    with ExperienceStore(db, seed=False) as s:
        records = [r for r in s.list() if (r.source or "").startswith("run:")]
    assert len(records) == first.evaluations_done - 1
    assert all(r.strategies for r in records)  # every outcome votes
    assert any(r.strategies == ["knobs.coordinate"] for r in records)  # a move no pack entry made, named
    fastest = min(records, key=lambda r: r.time_after_ms or 1e9)
    best = first.versions[first.best]
    assert best.proposal is not None and fastest.params == best.proposal.knobs

    second = loop_mod.optimize(run_dir=tmp_path / "b", budget_evals=4, **common)
    v1 = second.versions["v1"]
    assert v1.proposal is not None and v1.proposal.strategy == "knobs.seed"
    assert v1.proposal.knobs == fastest.params
    assert v1.median_ms == best.median_ms  # the second run's first step is the first run's best
    events = [json.loads(x) for x in (tmp_path / "b" / "events.jsonl").read_text().splitlines() if x.strip()]
    assert [e["version"] for e in events if e["type"] == "proposed"][:2] == ["v0", "v1"]


def test_transform_names_only_where_the_precondition_holds() -> None:
    """single-pass-row carries the single_pass_row transform, which needs a multi-pass row kernel:
    named for one, not for a single-pass one (the reason says why)."""
    def ranked(features: list[str]):
        advice = recommend(Situation(kernel="softmax", bottleneck="dram", backend="triton", features=features), n=30)
        return next(r for r in advice.recommendations if r.strategy == "single-pass-row"), advice

    multi, advice = ranked(["triton", "row_loop", "multi_pass", "reduction"])
    assert multi.transform == "single_pass_row" and ("single-pass-row", "single_pass_row") in advice.transforms()
    single, advice = ranked(["triton", "row_loop", "reduction"])
    assert single.transform is None and "single_pass_row does not apply here" in single.reason
    assert "single-pass-row" not in dict(advice.transforms())


def test_cli_recommends_and_names_where_to_start_after_many_knob_runs(tmp_path: Path) -> None:
    """`experience recommend` after ~120 knob-run records on one kernel: not 'no recommendation' but the
    knob search that worked there, and the fastest configuration measured, to start from."""
    from click.testing import CliRunner

    from kernelopt.cli import main

    db = tmp_path / "e.db"
    with ExperienceStore(db, seed=False) as s:
        s.add_many([knob_run("row_sum", i, 2.0, 2.0 / (1 + i / 100), {"BLOCK": 64 + i}) for i in range(120)])
    res = CliRunner().invoke(main, ["experience", "recommend", "--db", str(db), "--kernel", "row_sum",
                                    "--backend", "triton", "--device", "NVIDIA H100 80GB HBM3", "--no-packs"])
    assert res.exit_code == 0, res.output
    assert "no recommendation" not in res.output
    assert f"1. {LEGACY_KNOBS}" in res.output
    assert "start from: BLOCK=183" in res.output


# ---------------------------------------------------------------------------------------------- the family


def _plain_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem: Path, kernel: Path,
               overrides: dict[str, str]) -> list[ExperienceRecord]:
    """A plain optimize run (no family given) on the fake engine; the records it put in its store."""
    import kernelopt.harness.evaluate as evaluate_mod
    from kernelopt.optimize import loop as loop_mod
    from conftest import FakeEngine

    monkeypatch.setattr(evaluate_mod, "Engine", lambda problem, **kw: FakeEngine(problem))
    db = tmp_path / "exp.db"
    loop_mod.optimize(problem, kernel, run_dir=tmp_path / "run", overrides=overrides, optimizer="knobs", rounds=1,
                      beam=1, proposals_per_member=2, budget_evals=3, profile=False, experience=str(db), baselines=())
    with ExperienceStore(db, seed=False) as s:
        records = [r for r in s.list() if (r.source or "").startswith("run:")]
    assert records
    return records


def test_a_plain_optimize_run_records_the_family_the_problem_declares(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """FAMILY in the problem file wins; a suite problem's family is its README row, as `suite run` records it."""
    problem = tmp_path / "mv" / "problem.py"
    problem.parent.mkdir()
    problem.write_text((MATVEC / "problem.py").read_text() + '\nFAMILY = "matrix-vector"\n')
    records = _plain_run(tmp_path / "a", monkeypatch, problem, MATVEC / "kernel.py", {"M": "64", "K": "256"})
    assert {r.family for r in records} == {"matrix-vector"}

    gelu = ROOT / "benchmarks" / "suite" / "gelu"
    records = _plain_run(tmp_path / "b", monkeypatch, gelu / "problem.py", gelu / "kernel.py",
                         {"ROWS": "3", "COLS": "300"})
    assert {r.family for r in records} == {"elementwise, activation"}


def test_a_plain_optimize_run_derives_the_family_from_the_kernel_or_says_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No declared family: the starting kernel's structural features name one (matvec: tl.sum, a reduction);
    none of them: 'unknown', which recommend never counts as the same family."""
    from kernelopt.recommend import FEATURE_FAMILIES, UNKNOWN_FAMILY, problem_family

    records = _plain_run(tmp_path / "a", monkeypatch, MATVEC / "problem.py", MATVEC / "kernel.py",
                         {"M": "64", "K": "256"})
    assert {r.family for r in records} == {"reduction"} == {dict(FEATURE_FAMILIES)["reduction"]}
    torch_kernel = tmp_path / "torch_kernel.py"
    torch_kernel.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
                            "    def forward(self, x):\n        return x\n")
    assert problem_family(MATVEC / "problem.py", torch_kernel) == UNKNOWN_FAMILY


def test_unknown_family_is_no_match(store: ExperienceStore) -> None:
    """Two kernels of unknown family are not similar for it (as if neither named one); two of a named
    family are."""
    def similarity(family: str | None) -> float:
        advice = recommend(Situation(kernel="zz_mine", family=family, **H100), store, include_packs=False)
        return advice.recommendations[0].parts["similarity"]

    store.add(knob_run("zz_other_kernel", 1, 2.0, 1.0, {}, strategies=["single-pass-row"], family="unknown"))
    assert similarity("unknown") == similarity(None)
    store.add(knob_run("zz_third_kernel", 2, 2.0, 1.0, {}, strategies=["single-pass-row"], family="norm"))
    assert similarity("norm") > similarity(None)
