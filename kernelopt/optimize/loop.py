"""The optimize loop: the only place that sequences the stages.

    v0 -> evaluate -> profile + diagnose the beam -> recommend -> optimizer.propose
       -> dedup -> evaluate the proposals (one engine, every GPU) -> record outcomes
       -> promote the best k correct -> ... -> re-time the best few A-B-B-A -> report

The run directory's `events.jsonl` is the state (`kernelopt.rundir`): each
evaluation is recorded the moment it finishes, so a kill loses at most the
evaluations in flight, and `resume` evaluates exactly the versions proposed but not
evaluated, then goes on. Optimizers are stateless given the context the loop
rebuilds from the events, so a resumed run proposes what the uninterrupted one would.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from kernelopt.errors import BadInput, CandidateFailed
from kernelopt.models.harness import Candidate, Evaluation, Problem, ShapeCheck, TimingStats
from kernelopt.models.optimize import (INHERITED_PREFIX, Attempt, OptimizeContext, Proposal, RunConfig, RunState,
                                       Version)
from kernelopt.optimize import DEFAULT_OPTIMIZER
from kernelopt.optimize.base import at_roofline, capability, roofline_share
from kernelopt.rundir import changed_message
from kernelopt.problem import normalized_source_hash

# A change counts as faster / slower beyond this relative difference of medians.
SAME_BAND = 0.02
RETIME_TOP = 3
# A profile's cost before any was measured: a profiling child starts like an engine, ncu adds about
# PROFILE_NCU_S, and the kernel runs about PROFILE_CALLS times (its replay passes, several of them
# instrumented). On an H200 the suite's conv3d (397 ms a call) took 66 s to profile, 150 calls' worth.
PROFILE_NCU_S = 3.0
PROFILE_CALLS = 150
# With a time budget, a beam member is profiled only if its profile's estimated cost is at most this
# share of the time left: under a tight budget evaluations are worth more than another diagnosis.
PROFILE_SHARE = 0.5
# A beam member of the same structure as a profiled ancestor and within this share of its time takes
# that ancestor's metrics and diagnosis instead of a profile of its own: a knob move that changed the
# time by 2 % did not change the bottleneck. On an H100 (session 13) bias_silu_residual's second
# profile (10.6 s of a 120 s budget) was of `num_stages 3 -> 4`, 1.7269 ms against v0's 1.7270.
INHERIT_PROFILE_MARGIN = 0.05
# Strategies asked of the recommend stage for each beam member.
RECOMMENDATIONS = 12
# A new structure (a transform's rewrite, say) starts with its parent's knob values, tuned for another
# structure, so its first time undersells it: a flat elementwise grid inherits a row kernel's 16 warps.
# One beam slot beyond --beam keeps the fastest structure that the beam lacks, while it is within this
# share of the best and no knob variant of it was timed yet, and racing spares such structures up to
# the same share (`Loop.on_probation`, `Loop.evaluate`).
PROBATION_MARGIN = 0.10


def timing_alone_s(phases: dict[str, float], warm_verify: float, choices_kept: bool = False) -> float:
    """What timing one version in a fresh runner costs, from its search evaluation's phases (in the
    order they ran). The first call compiles (an autotuned kernel times its whole table there), and
    that lands in whichever phase ran first: timed first, its runner's start, load and timing; verified
    first, its verification too, less what a verification costs once the first call is paid
    (`warm_verify`, `_warm_verify_s`); on a GPU the timing's first call is a phase of its own
    (`first_call`). Where a later runner keeps the autotune choice (`choices_kept`: the engine's
    runners keep theirs, `autotune_cache.keeps_choices`, and one verifier does all the finishing, one
    GPU), it loads the compiled kernel from Triton's disk cache and the choice from the store, so
    neither first call is paid again (on an H200, linear_bias_gelu's autotuned winner: 11.2 s
    verified first, its four re-timings 8 s in all; the reserve that counted it held 70 s back for a
    33 s finish, session 12)."""
    cost = phases.get("runner_start", 0.0) + phases.get("load", 0.0) + phases.get("time", 0.0)
    if choices_kept:
        return cost
    # The timing's untimed first call (`first_call`, a phase of its own on a GPU), and a first call
    # paid while verifying.
    cost += phases.get("first_call", 0.0)
    if _checks_in_order(phases)[:1] == ["verify"]:
        cost += max(0.0, phases["verify"] - warm_verify)
    return cost


def _checks_in_order(phases: dict[str, float]) -> list[str]:
    """'verify' and 'time' as an evaluation ran them (its phases keep their order)."""
    return [p for p in phases if p in ("verify", "time")]


def _warm_verify_s(evs: Sequence[Evaluation]) -> float:
    """What a verification costs once the first call is paid: the median of the run's verifications
    that ran after their version's timing; before there are any, the shortest verification (a
    kernel verified first pays its compile there, and the cheapest one paid the least)."""
    warm = [e.phases["verify"] for e in evs if _checks_in_order(e.phases) == ["time", "verify"]]
    if warm:
        return statistics.median(warm)
    return min((e.phases["verify"] for e in evs if "verify" in e.phases), default=0.0)


class VersionRefused(BadInput):
    """A version's kernel.py is not the file the loop wrote (its recorded sha256): it is not sent."""


class Loop:
    """One optimize run over one engine. Use `optimize()` unless you need the pieces."""

    def __init__(
        self,
        rundir: Any,
        problem: Problem,
        config: RunConfig,
        *,
        engine: Any,
        optimizer: Any,
        profile: bool = True,
        experience: Any = None,
        progress: Callable[[str], None] | None = None,
        status: Callable[[str], None] | None = None,
        started: float | None = None,
        setup: dict[str, float] | None = None,
        milestone: Callable[[str], None] | None = None,
        check_shapes: bool = True,
        timeout_s: float = 300.0,
    ) -> None:
        """`started`: when this process began the run (`time.monotonic()`, before its engine started;
        default now); `setup`: seconds its engine took to start, by phase ('startup', 'baselines')."""
        self.rundir = rundir
        self.check_shapes = check_shapes  # verify the winner at the problem's SMALL and ragged shapes
        self._other_shapes: int | None = None  # how many: counted once, for the finish's time reserve
        self._unprofiled: set[str] = set()  # beam members left unprofiled for the budget (said once)
        self.timeout_s = timeout_s
        self.problem = problem
        self.config = config
        self.engine = engine
        self.optimizer = optimizer
        self.profile = profile
        self.experience = experience
        self.say = progress or (lambda text: None)
        self.status = status or (lambda text: None)
        # One line per round (and per problem in a suite): shown even where the detail lines are not
        # (stderr not a terminal: logs, CI, a coding agent), so a long run is never mute.
        self.milestone = milestone or self.say
        self._rejections_seen = 0
        self.started = time.monotonic() if started is None else started
        self.setup = dict(setup or {})
        self.state: RunState = rundir.replay()
        # What earlier processes of this run spent (a resumed run): the budget is the whole run's.
        self.spent_before = sum(self.state.spent.values())
        self._hashes: dict[str, str] = {}  # version id -> normalised source hash (a version's file never changes)
        self._advice: dict[tuple[int, str], Any] = {}  # (round, version id) -> recommend's Advice
        self._structures: dict[str, str] = {}  # version id -> structure hash (source with knob values masked)

    # --- helpers ---------------------------------------------------------------------------

    def candidate(self, version_id: str) -> Candidate:
        """The version as the engine sends it, hashed from its file as it is now (never cached: a
        candidate can rewrite any version's file). VersionRefused when that hash is not the one
        recorded when the loop wrote the file, so other bytes are never evaluated, re-timed or shipped."""
        from kernelopt.problem import load_candidate

        version = self.state.versions.get(version_id)
        if version is not None and version.refused:
            raise VersionRefused(version.refused)
        try:
            cand = load_candidate(self.rundir.kernel_path(version_id))
        except BadInput as exc:
            raise VersionRefused(f"{version_id}/kernel.py: {exc}") from None
        recorded = version.sha256 if version is not None else None
        if recorded and cand.sha256 != recorded:
            raise VersionRefused(changed_message(f"{version_id}/kernel.py", recorded, cand.sha256))
        return cand

    def refresh(self) -> None:
        self.state = self.rundir.replay()

    def correct(self) -> list[Version]:
        """Correct versions with a credible time, fastest first."""
        out = [v for v in self.state.versions.values()
               if v.correct and v.median_ms is not None and not (v.evaluation and v.evaluation.suspect)]
        return sorted(out, key=lambda v: (v.median_ms, int(v.id[1:])))

    def budget_left(self) -> int | None:
        if self.config.budget_evals is None:
            return None
        return max(0, self.config.budget_evals - self.state.evaluations_done)

    def elapsed_s(self) -> float:
        """The run's wall time so far: this process from its start (engine start included) plus what
        earlier processes of the run recorded."""
        return self.spent_before + time.monotonic() - self.started

    def finish_reserve_s(self) -> float:
        """What finishing the run will take once the search stops, kept back from the time budget:
        the interleaved re-timing (two timings of each of the best few and v0, one after another),
        the winner's verification once more, and its checks at the problem's other shapes (an
        engine each: the run's own start, then a verification). On the H100 the re-timing alone was
        kept back while the shape checks' engines were not: a 3-minute run ended 42 s late.

        The best few and v0 count at their own cost (`timing_alone_s`), the places not yet filled at
        the mean of this run's timings (0 before any). A kernel that autotunes pays its table again
        in every fresh runner: on an H200 the GEMMs' re-timing took 49-64 s against the mean's
        estimate of about 8 x 1.5 s, and their 2-minute runs ended 28-36 s late (session 11)."""
        from kernelopt.harness.autotune_cache import keeps_choices

        evs = [v.evaluation for v in self.state.versions.values() if v.evaluation is not None]

        def mean(phases: tuple[str, ...], need: str) -> float:
            costs = [sum(e.phases.get(p, 0.0) for p in phases) for e in evs if need in e.phases]
            return sum(costs) / len(costs) if costs else 0.0

        timing = mean(("runner_start", "load", "time"), "time")
        if timing == 0.0:
            return 0.0
        verifying = mean(("runner_start", "load", "verify"), "verify")
        warm_verify = _warm_verify_s(evs)
        # The best few as they stand now (the beam grows while the budget is spent), and v0.
        best = self.correct()[:RETIME_TOP]
        v0 = self.state.versions.get("v0")
        retimed = best + ([v0] if v0 is not None and v0 not in best else [])
        # Kept per verifier: a version searched on another GPU's verifier has no stored choice in the one
        # that re-times (`workers=1`), so with several GPUs its table counts (found in review).
        kept = (keeps_choices(getattr(self.engine, "isolate", "worker"))
                and len(getattr(self.engine, "devices", None) or [None]) == 1)
        timed = [v.evaluation.phases for v in retimed if v.evaluation is not None and "time" in v.evaluation.phases]
        own = [timing_alone_s(phases, warm_verify, kept) for phases in timed]
        reserve = 2 * (sum(own) + max(0, RETIME_TOP + 1 - len(own)) * timing)
        # The winner is verified in a fresh runner too: at least what timing it alone costs.
        verify_winner = max([verifying] + own[:1])
        reserve += verify_winner
        if self.check_shapes:
            if self._other_shapes is None:
                from kernelopt.harness.shapes import other_shapes

                self._other_shapes = len(other_shapes(self.problem))
            engine_start = self.state.spent.get("startup", 0.0) / max(1, self.state.resumes + 1)
            # A new engine at each shape: no stored choice there (and a new autotune key), so the
            # winner's first call costs what it did in the search. Counted one after another, though
            # they run at the same time (`check_shapes`): engines on one device slow each other.
            first_call = timing_alone_s(timed[0], warm_verify) if timed else 0.0
            reserve += self._other_shapes * (engine_start + max(verify_winner, first_call))
        return reserve

    def evals_that_fit(self) -> int | None:
        """How many evaluations the time budget left still holds, at the mean wall time of those run
        so far, spread over the engine's workers; at least one. None without a time budget.

        The budget is otherwise checked between rounds only, and a round of many proposals could
        overrun it by a whole round. One-off costs (the engine's start, baselines, profiling) are in
        the time already spent, never in the per-evaluation figure (the worker starts its first
        runner before the first candidate), and the final re-timing's share is kept back."""
        per_eval_s = self.per_eval_s()
        left_s = self.time_left_s()
        if left_s is None or per_eval_s is None:
            return None
        return max(1, int(left_s // per_eval_s))

    def time_left_s(self) -> float | None:
        """The time budget left for the search: what finishing will take is kept back. None without one."""
        if self.config.budget_minutes is None:
            return None
        return self.config.budget_minutes * 60 - self.elapsed_s() - self.finish_reserve_s()

    def per_eval_s(self) -> float | None:
        """The mean wall time of an evaluation so far, spread over the engine's workers."""
        walls = [v.evaluation.wall_s for v in self.state.versions.values() if v.evaluation and v.evaluation.wall_s > 0]
        if not walls:
            return None
        return sum(walls) / len(walls) / max(1, len(getattr(self.engine, "devices", None) or [None]))

    def out_of_time(self) -> bool:
        """No time left for one more evaluation beside what finishing the run will take."""
        left_s = self.time_left_s()
        return left_s is not None and (left_s <= 0 or left_s < (self.per_eval_s() or 0.0))

    def spend(self, phase: str, since: float) -> None:
        """Record the seconds since `since` as spent on `phase` (the report's split of the run's time)."""
        seconds = time.monotonic() - since
        if seconds > 0:
            self.rundir.record_spent(phase, seconds)

    # --- stages ------------------------------------------------------------------------------

    def evaluate(self, version_ids: Sequence[str]) -> None:
        """Evaluate versions through the engine, recording each the moment it finishes."""
        if not version_ids:
            return
        ids = list(version_ids)

        sent: list[str] = []
        cands: list[Candidate] = []
        for vid in ids:
            try:
                cands.append(self.candidate(vid))
                sent.append(vid)
            except VersionRefused as exc:
                # Its file is not what the loop wrote: evaluating it would credit these bytes to the version.
                self.rundir.record_evaluated(vid, self.refused_evaluation(vid, str(exc)))
                self.say(f"{vid}: refused: {exc}")

        def record(index: int, ev: Evaluation) -> None:
            self.rundir.record_evaluated(sent[index], ev)
            if ev.raced_out and ev.timing is not None:
                verdict = (f"raced out: slower than the beam (fastest of {ev.timing.count} calls "
                           f"{ev.timing.min_ms:.4g} ms > {ev.timing.race_against_ms:.4g} ms)")
            else:
                verdict = f"{ev.timing.median_ms:.4g} ms" if ev.passed and ev.timing else f"FAIL {ev.failure.reason if ev.failure else ''}"
            self.say(f"{sent[index]}: {verdict}" + (" (suspect time)" if ev.suspect else ""))

        race = self.race_against_ms()
        if cands and race is None:
            self.engine.evaluate(cands, on_result=record)
        elif cands:
            # A structure the beam lacks races against a looser bound: on probation it may enter the beam
            # within PROBATION_MARGIN of the best, so racing must not stop it first.
            beam_structures = {self.structure(v.id) for v in self.correct()[: self.config.beam]}
            races = [race if self.structure(vid) in beam_structures else race * (1.0 + PROBATION_MARGIN)
                     for vid in sent]
            self.engine.evaluate(cands, on_result=record, race_against_ms=races)
        self.refresh()

    def race_against_ms(self) -> float | None:
        """Racing's time to beat: the upper bound (`timing.race_threshold`) of the worst member of a
        full beam; None when racing is off or the beam has room (any correct candidate would enter).
        A candidate clearly slower than it could not enter the beam: it stops being timed, is not
        verified and is never promoted (`Evaluation.raced_out`)."""
        from kernelopt.harness.timing import race_threshold

        if not self.config.race:
            return None
        beam = self.correct()[: self.config.beam]
        if len(beam) < self.config.beam:
            return None
        worst = beam[-1].evaluation
        return race_threshold(worst.timing) if worst is not None and worst.timing is not None else None

    def refused_evaluation(self, version_id: str, why: str) -> Evaluation:
        """The evaluation of a version whose file changed before it was sent: failed, never run."""
        from kernelopt.models.harness import Failure

        version = self.state.versions[version_id]
        cand = Candidate(path=version.path, name=version_id, backend="torch", entry="ModelNew", sha256="")
        return Evaluation(problem=self.problem, candidate=cand,
                          failure=Failure(reason="tampered", stage="load", message=why))

    def profile_beam(self) -> None:
        """Profile and diagnose beam members not yet profiled (on a GPU with ncu; static otherwise)."""
        if not self.profile:
            return
        since = time.monotonic()
        # A version whose profile failed is not profiled again: its failure is recorded (the reason).
        todo = [vid for vid in self.state.beam if self.state.versions[vid].diagnosis is None
                and self.state.versions[vid].metrics is None and self.state.versions[vid].profile_failure is None]
        profiled = False
        for vid in todo:
            donor = self.profile_donor(vid)
            if donor is not None:
                self.inherit_profile(vid, donor)
                continue
            if not self.profile_fits(vid):
                continue
            self.profile_one(vid)
            profiled = True
        if profiled:
            self.spend("profiling", since)

    def profile_donor(self, vid: str) -> Version | None:
        """The nearest ancestor of `vid` that was profiled (not itself inheriting), has the same
        structure, and whose time is within INHERIT_PROFILE_MARGIN of vid's; None if there is none,
        or in agent mode (an agent reads each version's own profile)."""
        if capability(self.optimizer, "interactive"):
            return None
        version = self.state.versions[vid]
        seen: set[str] = set()
        parent_id = version.parent
        while parent_id and parent_id not in seen:
            seen.add(parent_id)
            ancestor = self.state.versions.get(parent_id)
            if ancestor is None or self.structure(ancestor.id) != self.structure(vid):
                return None  # another structure: its profile says nothing about this one
            if ancestor.metrics is not None and ancestor.diagnosis is not None and ancestor.profile_of is None:
                if version.median_ms and ancestor.median_ms and \
                        abs(version.median_ms / ancestor.median_ms - 1.0) <= INHERIT_PROFILE_MARGIN:
                    return ancestor
                return None
            parent_id = ancestor.parent
        return None

    def inherit_profile(self, vid: str, donor: Version) -> None:
        """Record `donor`'s metrics and diagnosis as vid's, its `profiled` event naming the donor."""
        version = self.state.versions[vid]
        share = version.median_ms / donor.median_ms if version.median_ms and donor.median_ms else None
        self.rundir.record_profiled(
            vid, metrics=donor.metrics, diagnosis=donor.diagnosis, profiler=f"{INHERITED_PREFIX}{donor.id}",
            notes=[f"not profiled: {donor.id}'s profile (same structure, time {share:.3f}x of it)"] if share else None)
        self.say(f"{vid}: {donor.id}'s profile (same structure, within {INHERIT_PROFILE_MARGIN:.0%} of its time)")
        self.refresh()

    def profile_cost_s(self, vid: str) -> float:
        """What profiling `vid` is expected to take: the mean of this run's profiles so far, or before
        any, a profiling child's start (the engine's, measured) plus ncu's own cost plus the kernel's
        replays at its measured median; whichever is larger."""
        version = self.state.versions[vid]
        engine_start = self.state.spent.get("startup", 0.0) / max(1, self.state.resumes + 1)
        estimate = engine_start + PROFILE_NCU_S + PROFILE_CALLS * (version.median_ms or 0.0) / 1000.0
        done = [v for v in self.state.versions.values() if v.profile_of is None
                and (v.metrics is not None or v.diagnosis is not None or v.profile_failure is not None)]
        spent = self.state.spent.get("profiling", 0.0)
        if done and spent > 0:
            estimate = max(estimate, spent / len(done))
        return estimate

    def profile_fits(self, vid: str) -> bool:
        """Whether profiling `vid` (with ncu, on a GPU) fits the time budget: at most PROFILE_SHARE of
        the time left, with room for one more evaluation after it. Without a time budget, for the CPU's
        static diagnosis (no kernel runs), or in agent mode (an agent decides the evaluations, the budget
        does not stop them, and the diagnosis is what it works from), always. On an H200 the 2-minute
        suite run of conv3d spent 66 s of its 120 profiling v0 and had no time left for a single proposal."""
        left_s = self.time_left_s()
        if left_s is None or not str(self.engine.devices[0]).startswith("cuda") or capability(self.optimizer, "interactive"):
            return True
        cost = self.profile_cost_s(vid)
        # ... and an evaluation must still fit after it, or the diagnosis would guide nothing.
        if cost <= PROFILE_SHARE * left_s and left_s - cost >= (self.per_eval_s() or 0.0):
            return True
        if vid not in self._unprofiled:
            self._unprofiled.add(vid)
            self.say(f"{vid}: not profiled: a profile (about {cost:.0f} s) would take more than "
                     f"{PROFILE_SHARE:.0%} of the {max(0.0, left_s):.0f} s left; the search goes on without its diagnosis")
        return False

    def profile_one(self, vid: str) -> str:
        """Profile and diagnose one version and record it; returns how: 'ncu', 'static' or 'no'."""
        self.status(f"profiling {vid}")
        try:
            cand = self.candidate(vid)
        except VersionRefused as exc:
            self.say(f"{vid}: not profiled: {exc}")
            return "no"
        from kernelopt.harness.isolate import children_isolated

        # Profiling runs the candidate too: in a sandboxed run, inside the sandbox (a profile that
        # cannot run there is a recorded failure, never an unsandboxed run).
        with children_isolated(getattr(self.engine, "isolate", "worker"), self.engine.devices[0]):
            result, diagnosis, summary = profile_version(self.problem, cand,
                                                         self.rundir.version_dir(vid) / "profile", self.engine.devices[0],
                                                         lock_timeout_s=max(600.0, 2 * self.timeout_s))
        # Recorded either way: a failed profile is data (its reason in the `profiled` event and the report).
        self.rundir.record_profiled(vid, metrics=result.metrics, diagnosis=diagnosis, ncu_summary=summary,
                                    profiler=result.profiler, failure=result.failure, notes=result.notes)
        if result.failure is not None:
            self.say(f"{vid}: not profiled ({result.profiler}): {result.failure.reason}: {result.failure.message}")
            self.refresh()
            return "no"
        if diagnosis is not None and diagnosis.primary is not None:
            self.say(f"{vid}: {diagnosis.primary.category}"
                     + (f"/{diagnosis.primary.subcause}" if diagnosis.primary.subcause else "")
                     + (" (near roofline)" if diagnosis.primary.near_roofline else ""))
        self.refresh()
        return "ncu" if summary is not None else "static"

    def promote(self) -> list[str]:
        ranked = self.correct()
        beam = [v.id for v in ranked[: self.config.beam]]
        trial = self.on_probation(ranked)
        if trial is not None:
            beam.append(trial)
        if beam != self.state.beam:
            self.rundir.record_promoted(beam)
            self.refresh()
        return beam

    def on_probation(self, ranked: list[Version]) -> str | None:
        """The version that takes the beam's probation slot (PROBATION_MARGIN), if any: the best version
        of the fastest structure that no member of the top --beam has, within the margin of the best,
        not v0, and whose knobs were not tried yet: no child of its own structure was timed (a knob
        variant; a transform's rewrite or a failure tells nothing about its knobs). Once they were tried
        and none beat it, its probation is over; a child that did beat it is the structure's best and
        goes on."""
        k = self.config.beam
        if len(ranked) <= k or ranked[0].median_ms is None:
            return None
        limit = ranked[0].median_ms * (1.0 + PROBATION_MARGIN)
        taken = {self.structure(v.id) for v in ranked[:k]}
        expanded = {v.parent for v in self.state.versions.values()
                    if v.parent and v.evaluation is not None and v.evaluation.timing is not None
                    and self.structure(v.id) == self.structure(v.parent)}
        for v in ranked[k:]:
            if v.median_ms is None or v.median_ms > limit:
                return None  # fastest first: the rest are slower still
            structure = self.structure(v.id)
            if structure in taken:
                continue
            taken.add(structure)  # the first of a structure is its best: its slower versions never count
            if v.parent is not None and v.id not in expanded:
                return v.id
        return None

    def context(self, round_: int) -> OptimizeContext:
        beam = [self.state.versions[v] for v in self.state.beam]
        advice = {v.id: self.advice(v, round_) for v in beam}
        recs = {vid: a.recommendations for vid, a in advice.items()}
        seed = next((a.seed for a in advice.values() if a.seed is not None), None)
        tried = sorted(self.known_sources())
        options = dict(self.config.optimizer_options)
        return OptimizeContext(
            problem=self.problem, round=round_, beam=beam, recommendations=recs,
            known_failures={vid: a.known_failures for vid, a in advice.items()},
            seed_knobs=seed.knobs if seed is not None else {}, history=self.history(),
            failed_proposals=list(self.state.failed_proposals),
            tried_sources=tried, proposals_per_member=self.config.proposals_per_member,
            budget_left=self.budget_left(), device=self.config.device, roofline_floor_ms=self.floor_ms(),
            reference_ms=self.reference_ms(),
            seed=self.config.seed, options=options,
        )

    def advice(self, version: Version, round_: int) -> Any:
        """The recommend stage's answer for one beam member this round (packs and experience; asked
        again each round, so outcomes other runs record meanwhile count; this run's own records are
        left out: the optimizer sees its history directly)."""
        from kernelopt.models.recommendation import Advice
        from kernelopt.recommend import recommend

        key = (round_, version.id)
        if key not in self._advice:
            try:
                self._advice[key] = recommend(self.situation(version), self.experience, n=RECOMMENDATIONS)
            except Exception as exc:  # noqa: BLE001 - advice is advisory: the search goes on without hints
                self.say(f"{version.id}: no recommendation ({type(exc).__name__}: {exc})")
                self._advice[key] = Advice()
        return self._advice[key]

    def situation(self, version: Version) -> Any:
        """What recommend is asked about for `version` (`version_situation`)."""
        return version_situation(version, self.problem, self.config, self.candidate(version.id).backend)

    def floor_ms(self) -> float | None:
        """The problem's DRAM floor as the engine's workers measured it (None on the CPU)."""
        ready = getattr(self.engine, "ready", None) or []
        floors = [r.reference_floor_ms for r in ready if r.reference_floor_ms]
        return min(floors) if floors else None

    def reference_ms(self) -> float | None:
        """The fastest baseline (eager, torch.compile) this run measured, None without baselines."""
        times = [t.stats.median_ms for t in self.state.baselines.values() if t.stats is not None and t.stats.median_ms]
        return min(times) if times else None

    def history(self) -> list[Attempt]:
        out = []
        for v in self.state.versions.values():
            if v.evaluation is None:
                continue
            parent = self.state.versions.get(v.parent or "")
            out.append(attempt_of(v, parent, self.structure(v.id)))
        return out

    def structure(self, version_id: str) -> str:
        """The version's structure hash (its source with knob values masked), computed once."""
        from kernelopt.optimize.knobs.rewrite import structure_hash

        if version_id not in self._structures:
            v = self.state.versions.get(version_id)  # None: proposed this round, state not replayed yet
            path = v.path if v is not None else str(self.rundir.kernel_path(version_id))
            try:
                text = Path(path).read_text()
            except (OSError, UnicodeDecodeError):  # a refused version's file may be gone
                text = v.proposal.source if v is not None and v.proposal else ""
            self._structures[version_id] = structure_hash(text, path)
        return self._structures[version_id]

    def propose(self, round_: int) -> list[str]:
        """Ask the optimizer, drop duplicates, write the new versions; returns their ids."""
        self.status(f"round {round_}: proposing")
        proposals = self.optimizer.propose(self.context(round_))
        from kernelopt.optimize.knobs.rewrite import knob_key, structure_hash

        seen = self.known_sources()
        # Knob values alone do not identify a candidate: a transform's rewrite may keep its
        # parent's values. (structure, knob values) does.
        seen_configs = {(self.structure(vid), knob_key(v.proposal.knobs)) for vid, v in self.state.versions.items()
                        if v.proposal and v.proposal.knobs}
        ids = []
        caps = [c for c in (self.budget_left(), self.evals_that_fit()) if c is not None]
        left = min(caps) if caps else None
        for p in self.interleave_probation(proposals):
            if p.failed:  # no source to evaluate: recorded, so the optimizer does not try it again
                p = p.model_copy(update={"optimizer": p.optimizer or getattr(self.optimizer, "name", None)})
                self.rundir.record_proposal_failed(p, round=round_)
                self.say(f"proposal failed ({p.strategy or p.change}): {p.failed}")
                continue
            if left is not None and len(ids) >= left:
                break
            digest = normalized_source_hash(p.source)
            config = (structure_hash(p.source), knob_key(p.knobs)) if p.knobs else None
            if digest in seen or config in seen_configs:
                continue
            seen.add(digest)
            if config is not None:
                seen_configs.add(config)
            p = p.model_copy(update={"optimizer": p.optimizer or getattr(self.optimizer, "name", None)})
            ids.append(self.rundir.write_version(p.source, round=round_, proposal=p).id)
        if any(p.failed for p in proposals):
            self.refresh()
        return ids

    def interleave_probation(self, proposals: list[Proposal]) -> list[Proposal]:
        """The proposals with the probation member's (`on_probation`: the beam's last, beyond --beam)
        taking every other place, so a round the budget cuts short still tunes it. Optimizers list
        their proposals member by member, best first: on an H200 (session 12) a round of three held
        only the best member's, and bias_silu_residual's flat rewrite left the beam untuned."""
        if len(self.state.beam) <= self.config.beam:
            return proposals
        trial = self.state.beam[-1]
        mine = [p for p in proposals if p.parent == trial]
        rest = [p for p in proposals if p.parent != trial]
        out: list[Proposal] = []
        for i in range(max(len(mine), len(rest))):
            out += rest[i:i + 1] + mine[i:i + 1]
        return out

    def repair(self, version_ids: Sequence[str], round_: int) -> list[str]:
        """Optimizers that can (the LLM) get each failed version back with its failure detail;
        a repaired source is a new version of the same round, evaluated like any other. The
        optimizer bounds the attempts (`--repairs`)."""
        fix = capability(self.optimizer, "repair")
        if fix is None:
            return []
        added: list[str] = []
        todo = list(version_ids)
        while todo:
            new_ids = []
            for vid in todo:
                version = self.state.versions[vid]
                ev = version.evaluation
                if ev is None or ev.passed or (self.budget_left() is not None and self.budget_left() <= len(new_ids)):
                    continue
                self.status(f"repairing {vid}")
                proposal = fix(self.context(round_), version, ev)
                if proposal is None or normalized_source_hash(proposal.source) in self.known_sources():
                    continue
                proposal = proposal.model_copy(update={"parent": version.parent, "optimizer": self.optimizer.name})
                new_ids.append(self.rundir.write_version(proposal.source, round=round_, proposal=proposal).id)
                self.say(f"{vid}: repair proposed as {new_ids[-1]}")
            self.evaluate(new_ids)
            added += new_ids
            todo = new_ids
        return added

    def reflect(self, version_ids: Sequence[str], round_: int) -> None:
        """Optimizers that can (the LLM) compare what they predicted with what was measured; the
        lesson goes into the run (and, through the experience record, into the store)."""
        think = capability(self.optimizer, "reflect")
        if think is None:
            return
        context = self.context(round_)  # nothing below changes what it holds
        for vid in version_ids:
            version = self.state.versions[vid]
            parent = self.state.versions.get(version.parent or "")
            if version.evaluation is None or version.proposal is None:
                continue
            try:
                lesson = think(context, version, version.evaluation,
                               parent.metrics if parent else None, version.metrics)
            except Exception as exc:  # noqa: BLE001 - a failed reflection costs the lesson, not the run
                self.say(f"{vid}: no lesson ({exc})")
                continue
            if lesson:
                self.rundir.record_lesson(lesson, vid)
        self.refresh()

    def record_rejections(self, round_: int) -> list[dict[str, Any]]:
        """The optimizer's rejected replies since the last call (the LLM's parse, guard and provider
        failures) as `rejected` events, each also a progress line; returns them."""
        found = capability(self.optimizer, "rejections") or []
        new = found[self._rejections_seen:]
        self._rejections_seen = len(found)
        out = []
        for item in new:
            data = item.model_dump(mode="json") if hasattr(item, "model_dump") else dict(item)
            data.setdefault("round", round_)
            self.rundir.record_rejected(data)
            self.say(f"round {round_}: reply for {data.get('parent') or '-'} rejected "
                     f"({data.get('reason')}: {_first_line(str(data.get('detail', '')))})")
            out.append(data)
        return out

    def state_lessons(self) -> list[tuple[str, str | None]]:
        return [(e.get("text", ""), e.get("version")) for e in self.rundir.events() if e["type"] == "lesson"]

    def known_sources(self) -> set[str]:
        """Normalised hashes of every version's source (each file read once per run)."""
        for vid, v in self.state.versions.items():
            if vid not in self._hashes:
                try:
                    text = Path(v.path).read_text()
                except (OSError, UnicodeDecodeError):  # a refused version's file may be gone
                    text = v.proposal.source if v.proposal else ""
                self._hashes[vid] = normalized_source_hash(text)
        return set(self._hashes.values())

    def record_experience(self, version_ids: Sequence[str]) -> None:
        if self.experience is None:
            return
        self.refresh()
        all_lessons = self.state_lessons()  # one read of the events, not one per version
        for vid in version_ids:
            version = self.state.versions.get(vid)
            parent = self.state.versions.get(version.parent or "") if version else None
            if version is None or version.proposal is None or parent is None or vid in self.state.experience:
                continue
            if version.evaluation is not None and version.evaluation.raced_out:
                continue  # unverified, partly timed: not an outcome the store can hold as correct or not
            record = experience_record(version, parent, self.problem, self.config)
            lessons = [text for text, v in all_lessons if v == vid]
            if lessons:
                record = record.model_copy(update={"notes": "; ".join(filter(None, [record.notes, *lessons]))})
            try:
                stored = self.experience.add(record)
            except Exception as exc:  # noqa: BLE001 - the store is advisory; a locked or read-only db must not stop a run
                self.say(f"experience not recorded for {vid}: {exc}")
                continue
            self.rundir.record_experience(vid, stored.id)

    # --- the run -------------------------------------------------------------------------------

    def run(self) -> RunState:
        self.refresh()
        if self.state.finished:
            return self.state
        for version in self.state.versions.values():
            if version.refused:  # a resumed run whose files were edited meanwhile: said once, never used
                self.say(f"{version.id}: refused: {version.refused}")
        if "v0" not in self.state.versions:
            source = Path(self.config.kernel).read_text()
            self.rundir.write_version(source, round=0)
            self.refresh()
        if not self.state.baselines and self.engine.ready and self.engine.ready[0].baselines:
            self.rundir.record_baselines(self.engine.ready[0].baselines,
                                         cached=getattr(self.engine.ready[0], "baselines_cached", None))
        for phase, seconds in self.setup.items():
            if seconds > 0:
                self.rundir.record_spent(phase, seconds)
        self.setup = {}
        # Whatever was proposed but not evaluated before a kill, first.
        pending = self.rundir.pending()
        if pending:
            since = time.monotonic()
            self.evaluate(pending)
            self.spend("search", since)
        self.record_experience(list(self.state.versions))
        v0 = self.state.versions["v0"]
        if not v0.correct:
            reason = v0.refused or (v0.evaluation.failure.message if v0.evaluation and v0.evaluation.failure else "failed")
            self.rundir.record_run_finished("starting kernel failed", None)
            raise CandidateFailed(f"{self.config.kernel}: the starting kernel failed: {reason}")
        self.promote()
        if self.state.rounds_finished == 0:
            self.rundir.record_round_finished(0, "v0")  # round 0: the starting kernel
            self.refresh()
        if capability(self.optimizer, "interactive"):
            # Agent mode: v0 is measured and diagnosed; an agent writes the next versions
            # (`kernelopt iterate`), so the run stays open (no run_finished).
            self.profile_beam()
            return self.state
        stop = "rounds"
        # rounds_finished counts from round 0 (the starting kernel): round r done -> r + 1.
        start_round = max(1, self.state.rounds_finished)
        for round_ in range(start_round, self.config.rounds + 1):
            since = time.monotonic()
            # A round killed after its proposals were written: they were evaluated above (pending);
            # proposing again would give this round a second batch the uninterrupted run never had,
            # and the round is finished first, whatever the budget says now.
            ids = [v.id for v in self.state.versions.values() if v.round == round_ and v.proposal is not None]
            if not ids:
                self.profile_beam()
                since = time.monotonic()
                head = self.state.versions[self.state.beam[0]] if self.state.beam else None
                if head is not None and at_roofline(head, floor := self.floor_ms(), reference := self.reference_ms()):
                    stop = f"at the roofline ({roofline_share(head, floor):.0%} of the DRAM floor)" + (
                        ", no slower than the fastest baseline" if reference is not None else "")
                    break
                if self.budget_left() == 0:
                    stop = "evaluation budget"
                    break
                if self.out_of_time():
                    stop = "time budget"
                    break
                if self.state.round < round_:
                    self.rundir.record_round_started(round_)
                ids = self.propose(round_)
                rejected = self.record_rejections(round_)
                self.say(f"round {round_}: {len(ids)} proposals")
                self.evaluate(ids)
                ids = ids + self.repair(ids, round_)
                self.reflect(ids, round_)
                rejected += self.record_rejections(round_)
                if not ids:
                    useless = [r for r in rejected if r.get("reason") != "repeat_prompt"]
                    stop = ("the model produced nothing usable: " + summarize_rejections(useless)) if useless \
                        else "converged: no new proposals"
                    self.spend("search", since)
                    self.refresh()
                    self.rundir.record_round_finished(round_, self.state.beam[0] if self.state.beam else None)
                    self.milestone(f"round {round_}: no proposals ({stop})")
                    break
            self.record_experience(ids)
            beam = self.promote()
            self.spend("search", since)
            self.rundir.record_round_finished(round_, beam[0] if beam else None)
            self.refresh()
            self.milestone(self.round_line(round_))
        else:
            stop = "rounds"
        since = time.monotonic()
        winner = self.choose_winner()
        self.spend("retiming", since)
        self.rundir.record_run_finished(stop, winner)
        self.refresh()
        return self.state

    def round_line(self, round_: int) -> str:
        """`round 3/8: 14 evaluations, best v9 0.412 ms, 1.17x v0` (search timings)."""
        v0 = self.state.versions.get("v0")
        beam = self.state.beam
        best = self.state.versions[beam[0]] if beam else None
        text = f"round {round_}/{self.config.rounds}: {self.state.evaluations_done} evaluations"
        if best is not None and best.median_ms:
            text += f", best {best.id} {best.median_ms:.4g} ms"
            if v0 is not None and v0.median_ms:
                text += f", {v0.median_ms / best.median_ms:.2f}x v0"
        return text

    def choose_winner(self) -> str | None:
        """Re-time the best few, then verify the fastest once more before it is named: the winner."""
        return self.ship(self.retime())

    def retime(self) -> list[str]:
        """Re-time v0 and the best few interleaved (A-B-C-C-B-A, same method); the candidates for
        winner, fastest first on the pooled medians (one noisy sample never picks the winner), then
        those without two credible re-timings in their search order, v0 last."""
        ranked = [v.id for v in self.correct()[:RETIME_TOP]]
        fallback = ranked + (["v0"] if "v0" not in ranked else [])
        ids = []
        cands: dict[str, Candidate] = {}
        for vid in fallback:
            try:
                cands[vid] = self.candidate(vid)
                ids.append(vid)
            except VersionRefused as exc:
                self.say(f"{vid}: refused: {exc}")
        if len(ids) < 2:
            return fallback
        self.status("re-timing the best candidates")
        order = ids + ids[::-1]
        evs = self.engine.evaluate([cands[v] for v in order], verify=False, time=True, workers=1)
        pooled: dict[str, list[float]] = {}
        stats: dict[str, TimingStats] = {}
        for vid, ev in zip(order, evs):
            if ev.timing is None or ev.failure is not None or ev.suspect:
                continue  # only credible times pick a winner, as in the search
            pooled.setdefault(vid, []).append(ev.timing.median_ms)
            prev = stats.get(vid)
            stats[vid] = ev.timing if prev is None else _pool(prev, ev.timing)
        if stats:
            self.rundir.record_retimed(stats)
        timed = sorted((v for v in ranked if v in pooled and len(pooled[v]) == 2), key=lambda v: sum(pooled[v]) / 2)
        if timed and "v0" in pooled and len(pooled["v0"]) == 2:
            base = sum(pooled["v0"]) / 2
            best = sum(pooled[timed[0]]) / 2
            self.say(f"re-timed: {timed[0]} {best:.4g} ms vs v0 {base:.4g} ms ({base / best:.2f}x)")
        return timed + [v for v in fallback if v not in timed]

    def ship(self, order: Sequence[str]) -> str | None:
        """The first of `order` whose file still holds the bytes evaluated and that passes verification
        once more (through the engine, at the run's shape); it is then verified at the problem's other
        shapes. A failure there is reported next to the speedup, not hidden: the kernel is still the
        fastest correct one at the shape it was optimized for. Everything lands in a `verified` event,
        and the report writes best_kernel.py from the bytes with the recorded hash."""
        from kernelopt.harness import shapes

        for vid in order:
            try:
                cand = self.candidate(vid)
            except VersionRefused as exc:
                self.say(f"{vid}: refused: {exc}")
                continue
            self.status(f"verifying {vid} once more")
            (ev,) = self.engine.evaluate([cand], verify=True, time=False)
            ok = ev.passed and ev.candidate.sha256 == cand.sha256
            failure = ev.failure or (ev.verification if ev.verification and not ev.verification.passed else None)
            checks = [ShapeCheck(label="declared", overrides=dict(self.problem.overrides), passed=ok,
                                 reason=getattr(failure, "reason", None) if not ok else None,
                                 message=getattr(failure, "message", None) if not ok else None)]
            if ok and self.check_shapes:
                self.status(f"verifying {vid} at the problem's other shapes")
                checks += shapes.check_shapes(self.problem, cand, timeout_s=self.timeout_s, seed=self.config.seed,
                                              isolate=getattr(self.engine, "isolate", "worker"),
                                              devices=list(getattr(self.engine, "devices", None) or [])[:1] or None)
            self.rundir.record_verified(vid, cand.sha256, checks)
            self.refresh()
            if ok:
                if len(checks) > 1:
                    self.say(f"{vid}: {shapes.describe(checks[1:])}")
                return vid
            self.say(f"{vid}: refused: failed the final re-verification ({checks[0].reason})")
        return None


def engine_setup(engine: Any, wall_s: float) -> dict[str, float]:
    """The engine's start split into 'baselines' (the workers timed them in parallel: the longest)
    and 'startup' (workers, inputs, references, the first runner: the rest)."""
    baselines_s = max((getattr(r, "baselines_s", 0.0) for r in (getattr(engine, "ready", None) or [])), default=0.0)
    baselines_s = min(baselines_s, wall_s)
    return {"startup": wall_s - baselines_s, "baselines": baselines_s}


def _first_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def summarize_rejections(rejections: Sequence[dict[str, Any]]) -> str:
    """`4 replies rejected (provider_error: --llm-command x: exited with code 1: ...)`: the count
    and the most common reason with its first detail, in one line."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for r in rejections:
        by_reason.setdefault(str(r.get("reason")), []).append(r)
    reason, items = max(by_reason.items(), key=lambda kv: len(kv[1]))
    others = sorted(k for k in by_reason if k != reason)
    more = f"; also {', '.join(others)}" if others else ""
    n = len(rejections)
    return f"{n} repl{'y' if n == 1 else 'ies'} rejected ({reason}: {_first_line(str(items[0].get('detail', '')))}{more})"


def _pool(a: TimingStats, b: TimingStats) -> TimingStats:
    """Two timings of one candidate as one: the mean of their medians, the wider spread."""
    return a.model_copy(update={
        "median_ms": (a.median_ms + b.median_ms) / 2,
        "mean_ms": (a.mean_ms + b.mean_ms) / 2,
        "min_ms": min(a.min_ms, b.min_ms),
        "max_ms": max(a.max_ms, b.max_ms),
        "iqr_ms": max(a.iqr_ms, b.iqr_ms, abs(a.median_ms - b.median_ms)),
        "count": a.count + b.count,
    })


def attempt_of(version: Version, parent: Version | None, structure: str | None = None) -> Attempt:
    ev = version.evaluation
    change = version.proposal.change if version.proposal else "starting kernel"
    failure = None
    if ev is not None and ev.failure is not None:
        failure = f"{ev.failure.reason}: {ev.failure.message.splitlines()[0][:300] if ev.failure.message else ''}"
    ratio = None
    if version.median_ms and parent is not None and parent.median_ms:
        ratio = parent.median_ms / version.median_ms
    median = version.median_ms
    if ev is not None and ev.raced_out and ev.timing is not None:
        # Clearly slower than the beam's worst after a few calls: slower, with its partial median.
        median = ev.timing.median_ms
        ratio = parent.median_ms / median if parent is not None and parent.median_ms else None
        outcome = "slower"
    elif ev is None or ev.failure is not None:
        # A wrong answer (a verdict) is "incorrect"; not getting one (build, crash, hang) is "failed".
        outcome = "incorrect" if ev is not None and ev.wrong_answer else "failed"
    elif ratio is None:
        outcome = "same"
    else:
        outcome = "faster" if ratio > 1 + SAME_BAND else "slower" if ratio < 1 - SAME_BAND else "same"
    return Attempt(
        version=version.id, parent=version.parent, change=change,
        strategy=version.proposal.strategy if version.proposal else None,
        outcome=outcome, speedup_vs_parent=ratio, failure=failure,
        knobs=dict(version.proposal.knobs) if version.proposal else starting_knobs(version),
        structure=structure, median_ms=median,
        transform=_transform_of(version.proposal),
        extra=dict(version.proposal.extra) if version.proposal else {},
    )


def _transform_of(proposal: Any) -> str | None:
    """'name@site' of the transform a proposal applied (the strategies optimizer puts it in extra)."""
    spec = proposal.extra.get("transform") if proposal is not None else None
    if not isinstance(spec, dict) or not spec.get("name"):
        return None
    return f"{spec['name']}@{spec.get('site') or ''}"


def starting_knobs(version: Version) -> dict[str, Any]:
    """The starting kernel's knob values (the knob search's origin), when its source can be read."""
    try:
        from kernelopt.optimize.knobs.discover import discover_knobs

        return {k.name: k.value for k in discover_knobs(Path(version.path).read_text(), version.path)}
    except Exception:  # noqa: BLE001 - a CUDA or unparsable kernel simply has no knob record
        return {}


def experience_record(version: Version, parent: Version, problem: Problem, config: RunConfig) -> Any:
    from kernelopt.models.experience import ExperienceRecord

    ev = version.evaluation
    proposal = version.proposal
    assert proposal is not None
    # Measured metrics only: a version that carries an ancestor's profile (Loop.inherit_profile) was
    # not profiled, and its ancestor's figures are not its own, before a change or after it.
    before = parent.metrics.values() if parent.metrics and parent.profile_of is None else {}
    after = version.metrics.values() if version.metrics and version.profile_of is None else {}
    primary = parent.diagnosis.primary if parent.diagnosis else None
    borrowed = (f"bottleneck from {parent.profile_of}'s profile ({parent.id} was not profiled)"
                if parent.profile_of is not None and primary is not None else None)
    correct = bool(ev is not None and ev.passed)
    speedup = parent.median_ms / version.median_ms if correct and parent.median_ms and version.median_ms else None
    outcome = None
    if ev is not None and ev.wrong_answer:
        outcome = "incorrect"
    elif ev is None or ev.failure is not None:
        outcome = "failure"
    elif speedup is not None:
        outcome = "success" if speedup > 1 + SAME_BAND else "failure" if speedup < 1 - SAME_BAND else "neutral"
    interpreter = bool(ev and ev.interpreter)
    timing_note = ("interpreter wall times (CPU), not GPU times" if interpreter else None) or \
        (f"{ev.failure.reason}: {ev.failure.message[:300]}" if ev and ev.failure else None)
    from kernelopt.recommend import generic_strategy
    from kernelopt.source import features

    try:
        feats = sorted(features(Path(parent.path).read_text(), parent.path))
    except OSError:
        feats = []
    return ExperienceRecord(
        kernel=problem.name, family=config.family, features=feats,
        backend=(ev.candidate.backend if ev else None),
        device=(ev.device if ev else None),
        dims=problem_dims(problem) or None,
        dtype=problem.dtype,
        bottleneck=primary.category if primary else None,
        stall=primary.subcause if primary else None,
        metrics_before={k: float(v) for k, v in before.items()},
        metrics_after={k: float(v) for k, v in after.items()},
        # Every outcome votes: a move no pack entry fits records its optimizer's generic id.
        strategies=[proposal.strategy or generic_strategy(proposal.optimizer or config.optimizer,
                                                          proposal.extra.get("phase"))],
        params={k: v for k, v in proposal.knobs.items()},
        hypothesis=proposal.change,
        expected=proposal.expected,
        outcome=outcome,
        correct=correct,
        speedup=speedup,
        time_before_ms=parent.median_ms,
        time_after_ms=version.median_ms if correct else None,
        notes="; ".join(n for n in (timing_note, borrowed) if n) or None,
        source=f"{run_source(config)}{version.id}",
    )


def run_source(config: RunConfig) -> str:
    """The `source` prefix of the experience records a run writes (one per version after it)."""
    return f"run:{Path(config.kernel).stem}:{config.created_at}:"


def version_situation(version: Version, problem: Problem, config: RunConfig, backend: str | None) -> Any:
    """What recommend is asked about for a run's `version` (the loop every round, agent mode for its
    next steps): this problem, its family, dtype and shape class, where the version ran, its diagnosis
    and the structural features of its source; this run's own records left out (the run knows them)."""
    from kernelopt.experience.labels import shape_class
    from kernelopt.recommend import situation_from
    from kernelopt.source import features

    try:
        feats = sorted(features(Path(version.path).read_text(), version.path))
    except OSError:
        feats = []
    return situation_from(
        kernel=problem.name, backend=backend, diagnosis=version.diagnosis,
        metrics=version.metrics.values() if version.metrics else None,
        device=version.evaluation.device if version.evaluation and version.evaluation.device else None,
        dtype=problem.dtype, family=config.family, shape_class=shape_class(problem_dims(problem)),
        features=feats, exclude_sources=[run_source(config)],
    )


def open_experience(choice: Any, say: Callable[[str], None] | None = None) -> Any:
    """The experience store a run's `experience` setting names (True: the default database, a path:
    that one, False/None: none), opened; None, said through `say`, when it cannot be opened: the
    store is advisory, the run goes on without remembering."""
    if not choice:
        return None
    try:
        from kernelopt.experience.store import ExperienceStore

        return ExperienceStore(None if choice is True else choice)
    except Exception as exc:  # noqa: BLE001 - advisory: the run goes on without remembering
        (say or (lambda t: None))(f"experience store unavailable ({exc}); outcomes are not recorded")
        return None


def problem_dims(problem: Problem) -> dict[str, Any]:
    """The problem's numeric module constants (its shape): what records keep as `dims`."""
    return {k: v for k, v in problem.constants.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def profile_version(problem: Problem, candidate: Candidate, out_dir: Path, device: str,
                    lock_timeout_s: float = 600.0) -> tuple[Any, Any, str | None]:
    """(ProfileResult, diagnosis, ncu summary) of one version; a profile that fails is the result's
    `failure` (`kernelopt.profile.profile_result`), never an exception.

    On a GPU with ncu: the ncu profiler under the per-GPU lock (never overlapping a timing);
    elsewhere the static report (compiler resources) only, noted in the result. The wait for the
    lock is bounded by `lock_timeout_s`: a lock held by a stopped process or a candidate's daemon
    costs the profile (a timeout failure), never the run. The loop sequences the stages: profile,
    then diagnose what it measured.
    """
    import shutil

    from kernelopt.diagnose.classifier import BottleneckClassifier
    from kernelopt.harness.timing import gpu_lock
    from kernelopt.profile import get_profiler, profile_result

    use_ncu = device.startswith("cuda") and shutil.which("ncu") is not None
    existed = out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    result = profile_result(get_profiler("ncu" if use_ncu else "static"), problem, candidate, out_dir=out_dir,
                            guard=gpu_lock(device, what="profiling", timeout_s=lock_timeout_s))
    if device.startswith("cuda") and not use_ncu:
        result.notes.insert(0, "ncu (Nsight Compute) not found: static resources only, no hardware counters, "
                               "no diagnosis")
    if result.failure is not None or result.metrics is None:
        if not existed and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()  # no empty profile/ folder suggesting a profile (a CPU run has none)
        return result, None, None
    try:
        diagnosis = BottleneckClassifier().classify(result.metrics) if use_ncu else None
    except Exception as exc:  # noqa: BLE001 - the measured metrics stay; the diagnosis is advisory
        result.notes.append(f"no diagnosis: {type(exc).__name__}: {exc}")
        diagnosis = None
    from kernelopt.profile.report import render_summary

    return result, diagnosis, render_summary(result.metrics) if use_ncu else None


# RunConfig fields a resumed run may change: more rounds or a larger budget extend the search.
RESUME_CHANGEABLE = ("rounds", "budget_evals", "budget_minutes")
# Options older run.json files carry that no optimizer takes (the loop once injected them).
LEGACY_OPTIONS = ("prompt_shas",)
# RunConfig field -> the flag that sets it, for one-line refusals.
CONFIG_FLAGS: dict[str, str] = {
    "problem": "PROBLEM", "kernel": "--kernel", "overrides": "--set", "dtype": "--dtype", "optimizer": "--optimizer",
    "rounds": "--rounds", "budget_evals": "--budget-evals", "budget_minutes": "--budget-minutes", "beam": "--beam",
    "proposals_per_member": "--proposals", "seed": "--seed", "executor": "--executor", "baselines": "--baselines",
    "trials": "--trials", "timeout_s": "--timeout", "profile": "--no-profile", "experience": "--no-experience",
    "race": "--no-race", "isolate": "--isolate",
}
# Above this many elements (the product of a problem's integer shape constants) the Triton
# interpreter takes minutes per version: matvec at 8192 x 8192 took 317 s for one run.
INTERPRETER_ELEMENTS_WARN = 1 << 22


def make_optimizer(config: RunConfig, secrets: dict[str, Any] | None, run_path: Path) -> Any:
    """The run's optimizer, built from run.json's options (and the secrets, never stored).

    Called before the run directory is created (or a resume appends anything), so an unknown
    optimizer or provider, a missing --provider or an --llm-command that cannot start is a
    usage error that leaves nothing behind."""
    from kernelopt.optimize.base import check_options, get_optimizer, optimizer_factory

    options = {k: v for k, v in config.optimizer_options.items() if k not in LEGACY_OPTIONS}
    check_options(config.optimizer, {**options, **(secrets or {})})
    # An optimizer that keeps a log of its own (the LLM's token usage) names the file as a class
    # attribute; the loop puts it in the run directory.
    log_name = capability(optimizer_factory(config.optimizer), "usage_log_name")
    if log_name:
        options.setdefault("usage_log", str(Path(run_path) / log_name))
    return get_optimizer(config.optimizer, **options, **(secrets or {}))


def interpreter_size_note(problem: Problem, devices: Sequence[str] | None) -> str | None:
    """One line when the run would use the Triton interpreter on a full-size problem, else None."""
    from kernelopt.harness.evaluate import visible_devices

    if any(d.startswith("cuda") for d in (devices or visible_devices())):
        return None
    sizes = {k: v for k, v in problem.constants.items() if isinstance(v, int) and not isinstance(v, bool) and v > 1}
    elements = 1
    for v in sizes.values():
        elements *= v
    if not sizes or elements <= INTERPRETER_ELEMENTS_WARN:
        return None
    shape = ", ".join(f"{k}={v}" for k, v in sizes.items())
    hint = "give smaller sizes with --set NAME=VALUE"
    from kernelopt.problem import small_shape

    try:
        small = small_shape(problem.path)
    except BadInput:
        small = None
    if small:
        hint += " (its SMALL shape: " + " ".join(f"--set {k}={v}" for k, v in small.items()) + ")"
    return (f"note: no GPU: the Triton interpreter runs {problem.name} at {shape}, which can take minutes "
            f"per version; {hint}")


def optimize(
    problem_path: str | Path,
    kernel_path: str | Path,
    *,
    run_dir: str | Path,
    overrides: dict[str, str] | None = None,
    dtype: str | None = None,
    optimizer: str = DEFAULT_OPTIMIZER,
    optimizer_options: dict[str, Any] | None = None,
    budget_evals: int | None = None,
    budget_minutes: float | None = None,
    rounds: int = 8,
    beam: int = 2,
    proposals_per_member: int = 4,
    seed: int = 0,
    executor: str = "local",
    devices: Sequence[str] | None = None,
    baselines: Sequence[str] = ("eager", "compile"),
    trials: int = 3,
    timeout_s: float = 300.0,
    profile: bool = True,
    experience: Any = True,
    family: str | None = None,
    cache: bool = True,
    race: bool = True,
    isolate: str | None = None,
    optimizer_secrets: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    status: Callable[[str], None] | None = None,
    engine_progress: Callable[[Any], None] | None = None,
    milestone: Callable[[str], None] | None = None,
) -> RunState:
    """Search for a faster correct kernel; everything lands in `run_dir` (see docs/optimize.md).

    Every option is validated, and the optimizer built, before `run_dir` is created. All of
    them are recorded in run.json, so `resume` continues with the same ones. `optimizer_secrets`
    (an API key) reach the optimizer only: they are never written to the run directory.
    `milestone` gets one line per round (`progress` the detail lines; it defaults to `progress`).
    `experience`: True uses the default store ($KERNELOPT_DB), a path that database, an open
    ExperienceStore itself, False none:
    the store is asked for recommendations and seeds every round, and learns each outcome.
    `family`: the problem family, which recommend matches other problems' records on; None: the
    problem's declared one, else derived from the kernel, else 'unknown' (`recommend.problem_family`).
    `isolate`: worker, candidate, sandbox or auto (`harness.evaluate.resolve_isolation`); None
    leaves it to the optimizer's default.
    `budget_minutes` bounds the whole run's wall time: engine start and baselines, profiling,
    search and the final re-timing."""
    started = time.monotonic()
    from kernelopt.harness.envinfo import git_commit, kernelopt_version
    from kernelopt.optimize.base import check_options
    from kernelopt.rundir import RunDir, now_iso
    from kernelopt.problem import load_candidate, load_problem

    for name, value in (("--rounds", rounds), ("--beam", beam), ("--proposals", proposals_per_member),
                        ("--trials", trials)):
        if value < 1:
            raise BadInput(f"{name} {value}: need at least 1")
    if budget_evals is not None and budget_evals < 1:
        raise BadInput(f"--budget-evals {budget_evals}: need at least 1")
    if timeout_s <= 0:
        raise BadInput(f"--timeout {timeout_s}: must be positive")
    if isolate not in (None, "worker", "candidate", "sandbox", "auto"):
        raise BadInput(f"--isolate {isolate}: choose worker, candidate, sandbox or auto")
    problem = load_problem(problem_path, overrides, dtype)
    load_candidate(kernel_path)  # a bad starting kernel is bad input before anything starts
    if family is None:
        from kernelopt.recommend import problem_family

        family = problem_family(problem_path, kernel_path)
    optimizer_options = dict(optimizer_options or {})
    check_options(optimizer, {**optimizer_options, **(optimizer_secrets or {})})
    config = RunConfig(
        problem=str(Path(problem_path).resolve()), overrides=dict(overrides or {}), dtype=dtype,
        kernel=str(Path(kernel_path).resolve()), optimizer=optimizer, optimizer_options=optimizer_options,
        budget_evals=budget_evals, budget_minutes=budget_minutes, rounds=rounds, beam=beam,
        proposals_per_member=proposals_per_member, seed=seed, executor=executor, family=family, race=race,
        isolate=isolate, baselines=list(baselines), trials=trials, timeout_s=timeout_s, profile=profile,
        experience=experience if isinstance(experience, bool) else str(getattr(experience, "path", experience)),
        kernelopt_version=kernelopt_version(), git_commit=git_commit(), created_at=now_iso(),
    )
    opt = make_optimizer(config, optimizer_secrets, Path(run_dir))
    note = interpreter_size_note(problem, devices)
    if note:
        (milestone or progress or (lambda text: None))(note)
    rundir = RunDir.create(run_dir, config)
    return _run(rundir, problem, config, opt, devices=devices, progress=progress, status=status,
                milestone=milestone, engine_progress=engine_progress, started=started,
                store=experience if hasattr(experience, "add") else None, cache=cache)


def reconcile(config: RunConfig, given: dict[str, Any]) -> tuple[RunConfig, dict[str, list[Any]]]:
    """The run's config with the options a resume gives again: the same value is fine; more rounds,
    a budget or an LLM timeout/retry count is applied; any other change is refused in one line.
    Returns (new config, {field: [old, new]})."""
    updates: dict[str, Any] = {}
    changes: dict[str, list[Any]] = {}
    refused: list[str] = []
    for key, value in given.items():
        if key not in RunConfig.model_fields:
            raise BadInput(f"resume: unknown option {key!r}")
        if key == "optimizer_options":
            from kernelopt.optimize.base import capability, optimizer_factory

            # The optimizer's options a resumed run may change (`Optimizer.resume_changeable`).
            changeable = capability(optimizer_factory(config.optimizer), "resume_changeable")
            options = dict(config.optimizer_options)
            for name, v in (value or {}).items():
                if options.get(name) == v:
                    continue
                if name in changeable:
                    changes[f"optimizer_options.{name}"] = [options.get(name), v]
                    options[name] = v
                else:
                    from kernelopt.optimize.base import OPTION_FLAGS

                    refused.append(f"{OPTION_FLAGS.get(name, f'--opt {name}')} (this run: {options.get(name)!r})")
            updates["optimizer_options"] = options
            continue
        current = getattr(config, key)
        value = list(value) if isinstance(value, tuple) else value
        if value == current:
            continue
        if key in RESUME_CHANGEABLE:
            updates[key] = value
            changes[key] = [current, value]
        else:
            refused.append(f"{CONFIG_FLAGS.get(key, key)} (this run: {current!r})")
    if refused:
        raise BadInput(f"a resumed run keeps the options it started with; cannot change {', '.join(refused)}: "
                       "start a new run with -o to use other ones")
    return config.model_copy(update=updates), changes


def resume(run_dir: str | Path, *, devices: Sequence[str] | None = None, cache: bool = True,
           optimizer_secrets: dict[str, Any] | None = None,
           progress: Callable[[str], None] | None = None, status: Callable[[str], None] | None = None,
           engine_progress: Callable[[Any], None] | None = None, milestone: Callable[[str], None] | None = None,
           **given: Any) -> RunState:
    """Continue a run killed at any point, with the options in its run.json: nothing finished is
    evaluated again.

    `given` (RunConfig field names: rounds, budget_evals, trials, profile, ...) are options given
    again: more rounds or a larger budget are applied (run.json and the `resumed` event say so),
    anything else that differs from the run's is refused (`reconcile`). A finished run is left
    as it is (nothing appended). The time budget counts what the earlier processes of the run spent.
    `cache` (use the baseline cache) is this process's choice, not the run's."""
    started = time.monotonic()
    from kernelopt.rundir import RunDir
    from kernelopt.problem import load_problem

    # An open ExperienceStore (a library caller's) is used as it is: run.json names its path.
    store = given.pop("experience") if hasattr(given.get("experience"), "add") else None
    rundir = RunDir.open(run_dir)
    try:
        config, changes = reconcile(rundir.config, given)
        state = rundir.replay()
        if state.finished:
            if changes:
                raise BadInput(f"{run_dir}: the run already finished ({state.stop_reason}); it cannot be extended "
                               f"({', '.join(changes)}): start a new run")
            (milestone or progress or (lambda text: None))(
                f"{run_dir}: already finished ({state.stop_reason}); nothing to resume")
            rundir.close()
            return state
        problem = load_problem(config.problem, config.overrides, config.dtype)
        opt = make_optimizer(config, optimizer_secrets, rundir.path)
        if changes:
            rundir.update_config(config)
        rundir.record_resumed(changes)
    except BaseException:
        rundir.close()
        raise
    return _run(rundir, problem, config, opt, devices=devices, progress=progress, status=status,
                milestone=milestone, engine_progress=engine_progress, started=started, store=store, cache=cache)


def _run(rundir: Any, problem: Problem, config: RunConfig, opt: Any, *, devices: Sequence[str] | None,
         progress: Any, status: Any, milestone: Any, engine_progress: Any, started: float | None = None,
         store: Any = None, cache: bool = True) -> RunState:
    from kernelopt.harness.evaluate import Engine
    from kernelopt.report.run_report import render_run

    # `store`: an open ExperienceStore, given by the caller; else the one run.json names.
    if store is None:
        store = open_experience(config.experience, progress)
    try:
        engine_start = time.monotonic()
        # --isolate, else the optimizer's own default (`Optimizer.isolation`): model-written candidates
        # are the likeliest to probe the harness, so the LLM asks for a real OS sandbox where there is one.
        with Engine(problem, baselines=config.baselines, trials=config.trials, timeout_s=config.timeout_s,
                    seed=config.seed, executor=config.executor, devices=devices, progress=engine_progress, cache=cache,
                    isolate=config.isolate or capability(opt, "isolation")) as engine:
            if engine.ready and engine.ready[0].device and not config.device:
                from kernelopt.harness.envinfo import software_summary

                config = rundir.record_environment(engine.ready[0].device, software_summary())
            loop = Loop(rundir, problem, config, engine=engine, optimizer=opt, profile=config.profile,
                        experience=store, progress=progress, status=status, milestone=milestone, started=started,
                        timeout_s=config.timeout_s,
                        setup=engine_setup(engine, time.monotonic() - (engine_start if started is None else started)))
            state = loop.run()
    finally:
        try:
            render_run(rundir.path)
        except Exception as exc:  # noqa: BLE001 - the report can be re-rendered with `kernelopt report`
            (progress or (lambda t: None))(f"report not rendered ({exc}); run `kernelopt report {rundir.path}`")
        rundir.close()
    return state


__all__ = ["Loop", "optimize", "resume", "normalized_source_hash"]
