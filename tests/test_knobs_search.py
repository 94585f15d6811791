"""KnobSearchOptimizer on synthetic contexts: a cost function over knob values stands in
for measured times, so the search's order, memory and stopping rules are checked exactly."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import pytest

from kernelopt.errors import BadInput
from kernelopt.models.diagnosis import Bottleneck, Diagnosis
from kernelopt.models.harness import Candidate, Evaluation, Problem, TimingStats
from kernelopt.models.optimize import Attempt, KnobValue, OptimizeContext, Proposal, Version
from kernelopt.models.recommendation import Recommendation
from kernelopt.optimize.base import at_roofline, get_optimizer, roofline_share
from kernelopt.optimize.knobs import discover_knobs, knob_values
from kernelopt.optimize.knobs.search import KnobSearchOptimizer, enumerate_space, space_size

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "knobs" / "search_kernel.py"
PROBLEM = Problem(path=str(ROOT / "examples" / "matvec" / "problem.py"), name="matvec")
SEARCHED = ("BLOCK_M", "BLOCK_K", "num_warps", "num_stages")

Config = dict[str, KnobValue]


def bowl(config: Config) -> float:
    """Convex in log2 of the tiles and warps, and in the stage count; optimum at 32, 512, 8, 4."""
    return (1.0 + (math.log2(config["BLOCK_M"]) - 5) ** 2 + (math.log2(config["BLOCK_K"]) - 9) ** 2  # type: ignore[arg-type]
            + 0.5 * (math.log2(config["num_warps"]) - 3) ** 2 + 0.3 * (config["num_stages"] - 4) ** 2)  # type: ignore[operator]


def diagnosis(category: str, *, near_roofline: bool = False, strategies: list[str] | None = None) -> Diagnosis:
    b = Bottleneck(category=category, confidence=0.9, message=f"{category} bound", rule_id=f"test-{category}",
                   near_roofline=near_roofline, strategies=strategies or [])
    return Diagnosis(primary=b, bottlenecks=[b], rules_pack="test")


class Run:
    """A minimal stand-in for the loop: evaluate proposals with a cost function, keep a beam."""

    def __init__(self, tmp: Path, cost: Callable[[Config], float], *, beam: int = 1, per_member: int = 4,
                 fail: Callable[[Config], str | None] | None = None, diag: Diagnosis | None = None,
                 recs: list[str] | None = None, budget: int | None = None, optimizer: Callable[[], KnobSearchOptimizer]
                 = KnobSearchOptimizer, seed: int = 0) -> None:
        self.tmp, self.cost, self.fail, self.diag, self.recs = tmp, cost, fail, diag, recs or []
        self.beam_width, self.per_member, self.budget, self.make, self.seed = beam, per_member, budget, optimizer, seed
        source = FIXTURE.read_text()
        (tmp / "v0.py").write_text(source)
        self.start = knob_values(source)
        self.evaluated: list[tuple[Version, float]] = [(self.version("v0", None, 0), cost(self.start))]
        self.history: list[Attempt] = []
        self.proposals: list[Proposal] = []
        self.opt = optimizer()

    def version(self, vid: str, parent: str | None, rnd: int) -> Version:
        return Version(id=vid, round=rnd, path=str(self.tmp / f"{vid}.py"), parent=parent, diagnosis=self.diag)

    def context(self, rnd: int) -> OptimizeContext:
        beam = [v for v, _ in sorted(self.evaluated, key=lambda t: t[1])[: self.beam_width]]
        recs = {v.id: [Recommendation(strategy=s, score=1.0 - i / 10, reason="test") for i, s in enumerate(self.recs)]
                for v in beam}
        left = None if self.budget is None else self.budget - len(self.history)
        return OptimizeContext(problem=PROBLEM, round=rnd, beam=beam, recommendations=recs, history=list(self.history),
                               proposals_per_member=self.per_member, budget_left=left, seed=self.seed)

    def step(self, rnd: int, fresh: bool = False) -> list[Proposal]:
        opt = self.make() if fresh else self.opt
        props = opt.propose(self.context(rnd))
        ms_of = {v.id: ms for v, ms in self.evaluated}
        for p in props:
            vid = f"v{len(self.history) + 1}"
            (self.tmp / f"{vid}.py").write_text(p.source)
            assert knob_values(p.source) == p.knobs  # the proposal records the knobs of its own source
            failure = self.fail(p.knobs) if self.fail else None
            ms = None if failure else self.cost(p.knobs)
            outcome = "failed" if failure else ("faster" if ms < ms_of[p.parent] else "slower")  # type: ignore[operator]
            self.history.append(Attempt(version=vid, parent=p.parent, change=p.change, strategy=p.strategy,
                                        outcome=outcome, failure=failure, knobs=p.knobs, median_ms=ms))
            if ms is not None:
                self.evaluated.append((self.version(vid, p.parent, rnd), ms))
            self.proposals.append(p)
        return props

    def run(self, rounds: int = 200, fresh: bool = False) -> int:
        for rnd in range(1, rounds):
            if not self.step(rnd, fresh):
                return rnd
        return rounds

    def best(self) -> Config:
        v, _ = min(self.evaluated, key=lambda t: t[1])
        return knob_values((self.tmp / f"{v.id}.py").read_text())


def searched_space() -> list[Config]:
    return enumerate_space(discover_knobs(FIXTURE.read_text()), limit=10_000)


def test_the_search_space_is_the_launch_and_constexpr_knobs() -> None:
    space = searched_space()
    assert set(space[0]) == set(SEARCHED)
    assert len(space) == 10 * 10 * 6 * 6 == space_size([k for k in discover_knobs(FIXTURE.read_text())
                                                        if k.name in SEARCHED])
    with pytest.raises(BadInput, match="exceeds the limit 100"):
        enumerate_space(discover_knobs(FIXTURE.read_text()), limit=100)


def test_reaches_the_optimum_of_a_bowl_with_far_fewer_proposals_than_exhaustive(tmp_path: Path) -> None:
    run = Run(tmp_path, bowl)
    run.run()
    space = searched_space()
    optimum = min(space, key=bowl)
    best = run.best()
    assert {n: best[n] for n in SEARCHED} == optimum
    assert len(run.proposals) * 4 <= len(space), len(run.proposals)
    # never the same config twice, and never the starting one
    keys = [tuple(sorted(p.knobs.items(), key=lambda kv: kv[0])) for p in run.proposals]
    assert len(keys) == len(set(keys))
    assert run.start not in [p.knobs for p in run.proposals]
    # each proposal is one change from its parent, described in words
    first = run.proposals[0]
    assert " -> " in first.change and first.parent == "v0" and first.optimizer == "knobs"


def test_a_context_without_a_diagnosis_starts_with_coordinate_moves(tmp_path: Path) -> None:
    props = Run(tmp_path, bowl).step(1)
    assert [p.extra["phase"] for p in props] == ["coordinate"] * 4
    assert all(len(p.extra["changes"]) == 1 for p in props)


@pytest.mark.parametrize(("category", "strategy", "first_change"), [
    ("launch", "smaller-tiles-more-programs", "BLOCK_M 128 -> 64"),
    ("dram", "larger-tiles-for-reuse", "BLOCK_M 128 -> 256"),
    ("occupancy", "tune-num-warps", "num_warps 4 -> 2"),
])
def test_the_diagnosis_and_its_strategies_decide_the_first_move(tmp_path: Path, category: str, strategy: str,
                                                                first_change: str) -> None:
    run = Run(tmp_path, bowl, diag=diagnosis(category), recs=[strategy])
    first = run.step(1)[0]
    assert first.change == first_change
    assert (first.strategy, first.bottleneck, first.extra["phase"]) == (strategy, category, "hint")
    assert first.metric and first.metric in (first.expected or "")


def test_strategies_named_by_the_diagnosis_are_used_without_recommendations(tmp_path: Path) -> None:
    run = Run(tmp_path, bowl, diag=diagnosis("launch", strategies=["smaller-tiles-more-programs"]))
    assert run.step(1)[0].change == "BLOCK_M 128 -> 64"


def _timed(version: Version, ms: float) -> Version:
    timing = TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, cv=0.0, count=10, warmup_count=2,
                         l2_flush_bytes=0)
    candidate = Candidate(path=version.path, name=version.id, backend="triton", entry="ModelNew", sha256="0")
    return version.model_copy(update={"evaluation": Evaluation(problem=PROBLEM, candidate=candidate, timing=timing)})


def test_at_the_problems_roofline_proposes_nothing_but_a_busy_unit_does_not_stop(tmp_path: Path) -> None:
    run = Run(tmp_path, bowl, diag=diagnosis("dram", near_roofline=True))
    v0 = _timed(run.evaluated[0][0], 1.0)
    opt = KnobSearchOptimizer()

    def context(floor_ms: float | None, reference_ms: float | None = None) -> OptimizeContext:
        return OptimizeContext(problem=PROBLEM, round=1, beam=[v0], roofline_floor_ms=floor_ms,
                               reference_ms=reference_ms)

    # ncu says DRAM is busy, but the time is twice the problem's floor: the data moves twice.
    assert opt.propose(context(0.5)) != []
    assert opt.propose(context(None)) != []  # no floor (the CPU interpreter): never a roofline stop
    assert opt.propose(context(0.95)) == []  # 95 % of the floor: nothing a knob can buy
    assert roofline_share(v0, 0.95) == pytest.approx(0.95) and at_roofline(v0, 0.9) and not at_roofline(v0, 0.89)
    # At the roofline but slower than a baseline the run measured (torch.compile at 0.97 ms): not done.
    assert opt.propose(context(0.95, reference_ms=0.97)) != []
    assert opt.propose(context(0.95, reference_ms=1.0)) == []  # as fast as the library: done
    assert not at_roofline(v0, 0.95, 0.97) and at_roofline(v0, 0.95, 1.0)


def test_failed_configs_are_never_retried_nor_larger_ones_after_out_of_resources(tmp_path: Path) -> None:
    def fail(config: Config) -> str | None:
        if config["BLOCK_K"] * config["num_stages"] > 1024:  # type: ignore[operator]
            return "compile: OutOfResources: shared memory"
        return None

    run = Run(tmp_path, bowl, fail=fail)
    run.run()
    failed: list[Config] = []
    for attempt, proposal in zip(run.history, run.proposals):
        for f in failed:
            same_elsewhere = all(proposal.knobs[n] == f[n] for n in f if n not in ("BLOCK_K", "num_stages", "BLOCK_M"))
            larger = all(proposal.knobs[n] >= f[n] for n in ("BLOCK_K", "num_stages", "BLOCK_M"))  # type: ignore[operator]
            assert not (same_elsewhere and larger), (proposal.change, f)
        if attempt.outcome == "failed":
            failed.append(dict(attempt.knobs))
    assert failed, "the landscape's optimum (BLOCK_K 512, 4 stages) is out of resources: some attempt fails"
    # the feasible set is not convex, so the search ends at a local optimum: nothing feasible
    # one step away in any combination of knobs is better
    best = run.best()
    domains = {k.name: k.domain for k in discover_knobs(FIXTURE.read_text()) if k.name in SEARCHED}

    def near(c: Config, n: str) -> list[KnobValue]:
        i = domains[n].index(c[n])
        return domains[n][max(0, i - 1): i + 2]

    import itertools
    for combo in itertools.product(*(near(best, n) for n in SEARCHED)):
        other = dict(zip(SEARCHED, combo))
        if fail(other) is None:
            assert bowl(best) <= bowl(other)


@pytest.mark.parametrize(("failure", "neighbour_allowed"), [
    ("incorrect", True),  # a wrong result says nothing about other configs
    ("compile: OutOfResources: shared memory, required 263168", False),  # more stages need more memory
])
def test_what_a_failure_rules_out(tmp_path: Path, failure: str, neighbour_allowed: bool) -> None:
    run = Run(tmp_path, bowl, per_member=10_000)
    failed = {**run.start, "BLOCK_M": 64}
    run.history.append(Attempt(version="v1", parent="v0", change="BLOCK_M 128 -> 64", outcome="failed",
                               failure=failure, knobs=failed))
    configs = [p.knobs for p in run.step(1)]
    assert failed not in configs
    assert ({**failed, "num_stages": 3} in configs) == neighbour_allowed
    assert {**failed, "num_stages": 1} in configs  # fewer stages may fit
    assert run.start not in configs  # the root, recovered from the attempt's change


def test_the_neighbourhood_runs_out(tmp_path: Path) -> None:
    domains = {"BLOCK_M": [64, 128], "BLOCK_K": [128, 256], "num_warps": [4], "num_stages": [2]}
    run = Run(tmp_path, bowl, optimizer=lambda: KnobSearchOptimizer(domains=domains))
    run.run()
    assert run.step(999) == []
    assert len(run.proposals) == 3  # the other three of 2 x 2, then nothing


def test_budget_and_proposals_per_member_are_respected(tmp_path: Path) -> None:
    run = Run(tmp_path, bowl, beam=2, per_member=3)
    run.step(1)
    props = run.step(2)
    assert len(props) == 6 and len({p.parent for p in props}) == 2
    assert all(sum(p.parent == v for p in props) == 3 for v in {p.parent for p in props})
    (tmp_path / "t").mkdir()
    tight = Run(tmp_path / "t", bowl, budget=2)
    assert len(tight.step(1)) == 2 and tight.step(2) == []


def test_experience_seed_is_proposed_first(tmp_path: Path) -> None:
    seed = {"BLOCK_M": 32, "num_warps": 8}
    run = Run(tmp_path, bowl, optimizer=lambda: KnobSearchOptimizer(seed_knobs=seed))
    first = run.step(1)[0]
    assert first.extra["phase"] == "seed"
    assert (first.knobs["BLOCK_M"], first.knobs["num_warps"]) == (32, 8)


def test_registered_as_knobs_and_rejects_unknown_options() -> None:
    opt = get_optimizer("knobs", seed_knobs={"BLOCK_M": 64})
    assert isinstance(opt, KnobSearchOptimizer) and opt.name == "knobs"
    with pytest.raises(BadInput, match="unknown option"):
        get_optimizer("knobs", temperature=0.5)


@pytest.mark.parametrize(("speedup", "deferred"), [(0.4, True), (0.97, False)])
def test_a_change_that_clearly_lost_is_tried_again_only_after_every_other_move(
        tmp_path: Path, speedup: float, deferred: bool) -> None:
    run = Run(tmp_path, bowl, per_member=10_000)
    stages = run.start["num_stages"]
    other = next(v for k in discover_knobs(FIXTURE.read_text()) if k.name == "num_stages" for v in k.domain
                 if v != stages)
    run.history.append(Attempt(version="v1", parent="v0", change=f"num_stages {stages} -> {other}", outcome="slower",
                               speedup_vs_parent=speedup, knobs={**run.start, "num_stages": other}))
    props = run.step(1)
    repeats = [i for i, p in enumerate(props) if p.knobs["num_stages"] == other]
    rest = [i for i, p in enumerate(props) if p.knobs["num_stages"] != other]
    assert repeats and rest
    # A clear loss (0.4x) goes last, with every move that contains it; within noise (0.97x) it is no verdict.
    assert (min(repeats) > max(rest)) == deferred


def test_a_hint_moves_its_knob_to_one_value_before_the_coordinate_moves(tmp_path: Path) -> None:
    """tune-num-warps offers 2, 8, 16 for num_warps 4: the first, then the coordinate moves, then the rest."""
    run = Run(tmp_path, bowl, diag=diagnosis("occupancy"), recs=["tune-num-warps"], per_member=10_000)
    props = run.step(1)
    assert (props[0].change, props[0].extra["phase"]) == ("num_warps 4 -> 2", "hint")
    assert [p.extra["phase"] for p in props[1:4]] == ["coordinate"] * 3
    later = [p for p in props if p.extra["phase"] == "hint" and p.extra["changes"] == {"num_warps": 16}]
    assert later and props.index(later[0]) > max(i for i, p in enumerate(props) if p.extra["phase"] == "coordinate")


def test_a_transforms_own_parameter_hint_moves_no_other_tile(tmp_path: Path) -> None:
    """block-program-axis hints BLOCK_PID (the parameter its transform adds). The fixture has no such
    knob, so the hint moves nothing: the tiles are searched from their own directions (upwards first).
    On an H200 that hint once moved gelu's elementwise BLOCK 128 -> 16 and its search downwards."""
    run = Run(tmp_path, bowl, recs=["block-program-axis"])
    props = run.step(1)
    assert all(p.strategy != "block-program-axis" for p in props)
    assert props[0].change == "BLOCK_M 128 -> 256"
    # "BLOCK_*" in a pack still means every tile dimension.
    assert Run(tmp_path, bowl, recs=["larger-tiles-for-reuse"]).step(1)[0].change == "BLOCK_M 128 -> 256"


def test_past_a_local_optimum_one_knob_moves_two_or_more_steps(tmp_path: Path) -> None:
    """A cost whose one-step neighbourhood of the start is all worse, with a better value of
    num_warps two steps away (layernorm on an H200, session 11: 4 -> 16 was 2 % faster, 8 and 2
    slower): once the neighbourhood is spent the search reaches it, nearest first."""
    start = knob_values(FIXTURE.read_text())
    far_warps = {2: 16, 4: 16, 8: 32}.get(start["num_warps"], 16)

    def cost(config: Config) -> float:
        if config["num_warps"] == far_warps and all(config[n] == start[n] for n in SEARCHED if n != "num_warps"):
            return 0.5
        return 1.0 + sum(config[n] != start[n] for n in SEARCHED)

    run = Run(tmp_path, cost)
    run.run()
    # Around the start: every one-step move (coordinate, pair, polish) before the first reach.
    phases = [p.extra["phase"] for p in run.proposals if p.parent == "v0"]
    assert "reach" in phases and phases.index("reach") > max(i for i, ph in enumerate(phases) if ph == "polish")
    assert run.best()["num_warps"] == far_warps
    first_reach = next(p for p in run.proposals if p.extra["phase"] == "reach")
    assert len(first_reach.extra["changes"]) == 1 and first_reach.strategy == "knobs.reach"


def test_the_tf32_hint_moves_each_dots_input_precision_first(tmp_path: Path) -> None:
    """tf32-input-precision hints input_precision (tf32x3, then tf32): the directive joins the search
    for that strategy only, and its first move sets the suite's fp32 GEMM draft's ieee dot to tf32x3."""
    draft = ROOT / "benchmarks" / "suite" / "matmul_fp32"
    (tmp_path / "v0.py").write_text((draft / "kernel.py").read_text())
    problem = Problem(path=str(draft / "problem.py"), name="matmul_fp32")
    member = Version(id="v0", round=0, path=str(tmp_path / "v0.py"), diagnosis=diagnosis("compute"))

    def first(recs: list[str]) -> Proposal:
        ranked = {"v0": [Recommendation(strategy=s, score=1.0, reason="test") for s in recs]}
        ctx = OptimizeContext(problem=problem, round=1, beam=[member], recommendations=ranked, history=[],
                              proposals_per_member=4, budget_left=None, seed=0)
        return KnobSearchOptimizer().propose(ctx)[0]

    hinted = first(["tf32-input-precision"])
    assert hinted.strategy == "tf32-input-precision" and hinted.extra["phase"] == "hint"
    ((name, value),) = hinted.extra["changes"].items()
    assert name.startswith("dot@L") and name.endswith(".input_precision") and value == "tf32x3"
    assert 'input_precision="tf32x3"' in hinted.source
    # Without the hint a dot's precision is never moved.
    assert "input_precision" not in "".join(first(["tune-num-warps"]).extra["changes"])
