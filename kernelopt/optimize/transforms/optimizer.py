"""StrategiesOptimizer (`--optimizer strategies`): executable strategies, then their knobs.

Per round and beam member:

1. transforms: the strategies recommended for the member (context.recommendations, best
   first) that carry a `transform:` - or, when none of those applies (no diagnosis on the
   CPU, say), every other loaded strategy with a transform whose `requires` holds, those
   matching the member's diagnosis first - and whose transform applies to the
   member's source (`survey.sites_of`) and has not been tried on the member's lineage
   (applied by the member or an ancestor, proposed from an ancestor of the same structure,
   or broken on any ancestor; one that was only slower on an ancestor is tried again once
   another transform changed the structure: transforms compose).
   Each becomes a proposal carrying its strategy id (so its outcome is a vote in the
   experience store) and `extra["transform"] = {name, site, params}`. A transform whose
   sites() or apply() raises or hangs (each runs in a child under a time limit:
   survey.guarded), or that writes source that does not parse, is a failed proposal
   (Proposal.failed): the loop records it in the events and it is not tried again.
2. knobs: the rest of the member's proposals come from the knob search
   (KnobSearchOptimizer, reused as is), with the strategy that made the member first
   among its recommendations, so its knob hints and its transform's parameters lead.

Like every optimizer it keeps no state: what it avoids is read from the context, so a
resumed run proposes what an uninterrupted one would.
"""

from __future__ import annotations

from typing import Any

from kernelopt.models.optimize import OptimizeContext, Proposal, Version
from kernelopt.models.recommendation import Recommendation
from kernelopt.models.strategy import Knob, Strategy, StrategySet
from kernelopt.optimize.base import at_roofline


class StrategiesOptimizer:
    """Options: `strategies` (a StrategySet; default: the loaded packs), `transforms` (list of
    transform names allowed; default all), everything else goes to the knob search
    (`seed_knobs`, `kinds`, `exclude`, `domains`)."""

    name = "strategies"
    # The options it uses (kernelopt.optimize.base.check_options refuses others before a run starts).
    accepts = frozenset({"strategies", "transforms", "seed_knobs", "kinds", "exclude", "domains"})

    def __init__(self, *, strategies: StrategySet | None = None, transforms: list[str] | None = None,
                 **knob_options: Any) -> None:
        from kernelopt.optimize.knobs.search import KnobSearchOptimizer

        self._strategies = strategies
        self.allowed = set(transforms) if transforms is not None else None
        self._knobs_factory = lambda hinted: KnobSearchOptimizer(strategies=hinted, **knob_options)
        self.knobs = self._knobs_factory(strategies)  # checks the knob options now: bad ones are bad input at once
        self._hinted: StrategySet | None = None

    # --- public ---------------------------------------------------------------------------------

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        if not context.beam or at_roofline(context.beam[0], context.roofline_floor_ms, context.reference_ms):
            return []
        budget = context.budget_left
        if budget is not None and budget <= 0:
            return []
        by_member: dict[str, list[Proposal]] = {}
        failed: list[Proposal] = []
        for member in context.beam:
            quota = context.proposals_per_member
            mine: list[Proposal] = []
            for proposal in self._transform_proposals(context, member):
                if proposal.failed:
                    failed.append(proposal)
                    continue
                if len(mine) >= quota:
                    break
                mine.append(proposal)
            by_member[member.id] = mine
        knob_proposals = self._knob_search().propose(self._knob_context(context))
        out: list[Proposal] = []
        for member in context.beam:
            mine = by_member[member.id]
            room = context.proposals_per_member - len(mine)
            mine += [p.model_copy(update={"optimizer": self.name})
                     for p in knob_proposals if p.parent == member.id][:max(0, room)]
            out += mine
        if budget is not None:
            out = out[:budget]
        return failed + out

    # --- transforms -------------------------------------------------------------------------------

    def _strategy_set(self) -> StrategySet:
        if self._strategies is None:
            from kernelopt.strategies import load_strategies

            self._strategies = load_strategies()
        return self._strategies

    def _candidates(self, context: OptimizeContext, member: Version, backend: str) -> tuple[list[Strategy], list[Strategy]]:
        """(recommended, fallback): the strategies with a transform recommended for this member, in
        their order; and every other one for the backend, those matching the diagnosis first and
        none that the member's metrics rule out - tried only when no recommended one applies."""
        loaded = self._strategy_set().strategies

        def usable(s: Strategy | None) -> bool:
            return (s is not None and s.transform is not None and not s.anti_pattern
                    and s.backend in (backend, "any")
                    and (self.allowed is None or s.transform.name in self.allowed))

        ids = dict.fromkeys(r.strategy for r in context.recommendations.get(member.id, []))
        chosen = [loaded[sid] for sid in ids if usable(loaded.get(sid))]
        rest = [s for s in loaded.values() if usable(s) and s.id not in ids and not _avoided(s, member)]
        return chosen, sorted(rest, key=lambda s: (-_diagnosis_match(s, member), s.id))

    def _transform_proposals(self, context: OptimizeContext, member: Version):  # -> Iterator[Proposal]
        from kernelopt.files import read_text
        from kernelopt.source import features

        try:
            source = read_text(member.path, "candidate")
            found = features(source, member.path)
        except Exception:  # noqa: BLE001 - a member whose source cannot be read gets knob proposals only
            return
        backend = "cuda" if "cuda" in found and "triton" not in found else "triton"
        from kernelopt.optimize.knobs.rewrite import structure_hash

        tried = _tried_on_lineage(context, member, structure_hash(source, member.path))
        recommended, fallback = self._candidates(context, member, backend)
        known = set(context.tried_sources)
        produced = False
        for proposal in self._from(recommended, source, found, member, tried, known):
            produced = True
            yield proposal
        if not produced:
            yield from self._from(fallback, source, found, member, tried, known)

    def _from(self, candidates: list[Strategy], source: str, found: set[str], member: Version,
              tried: set[tuple[str, str, str]], known: set[str]):  # -> Iterator[Proposal]
        from kernelopt.optimize.transforms import get_transform
        from kernelopt.optimize.transforms.survey import TransformFailed, apply_named, sites_of
        from kernelopt.problem import normalized_source_hash

        for strategy in candidates:
            spec = strategy.transform
            assert spec is not None
            held, _ = spec.holds(found)
            whole = (strategy.id, spec.name, "")  # the transform failed as a whole on this lineage
            if not held or whole in tried:
                continue
            try:
                transform = get_transform(spec.name)
            except Exception as exc:  # noqa: BLE001 - an unknown or broken plug-in: one failed proposal
                tried.add(whole)
                yield self._failed(member, strategy, "", {}, f"transform {spec.name}: {exc}")
                continue
            try:
                reports = sites_of(transform, source, member.path, found, strict=True)
            except TransformFailed as exc:  # sites() raised or hung: a failed proposal, its reason in the events
                tried.add(whole)
                yield self._failed(member, strategy, "", {}, str(exc))
                continue
            for report in reports:
                if not report.applies or not report.site:
                    continue
                key = (strategy.id, spec.name, report.site)
                if key in tried:
                    continue
                tried.add(key)
                params = {**report.params, **spec.params}
                try:
                    new, report, used = apply_named(source, spec.name, report.site, spec.params, member.path,
                                                    reports=reports)
                except TransformFailed as exc:
                    yield self._failed(member, strategy, report.site or "", params, str(exc))
                    continue
                except Exception as exc:  # noqa: BLE001 - bad params and the like: the run goes on
                    yield self._failed(member, strategy, report.site or "", params,
                                       f"transform {spec.name}@{report.site}: {exc}")
                    continue
                digest = normalized_source_hash(new)
                if digest in known:
                    continue  # the run holds this kernel already (another member made it): no slot spent on it
                known.add(digest)
                yield self._proposal(member, strategy, new, report.site or "", used, report.reason)

    def _proposal(self, member: Version, strategy: Strategy, source: str, site: str, params: dict[str, Any],
                  why: str) -> Proposal:
        from kernelopt.optimize.knobs.rewrite import knob_values

        assert strategy.transform is not None
        name = strategy.transform.name
        try:
            knobs = knob_values(source, member.path)
        except Exception:  # noqa: BLE001 - a source whose knobs cannot be read still gets evaluated
            knobs = {}
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        bottleneck = member.diagnosis.primary.category if member.diagnosis and member.diagnosis.primary else None
        return Proposal(
            source=source, parent=member.id, strategy=strategy.id,
            change=f"transform {name}@{site}" + (f" ({shown})" if shown else ""),
            knobs=knobs, bottleneck=bottleneck, expected=strategy.expect,
            metric=self.knobs._first_metric(strategy.expect or "") if strategy.expect else "duration_ns",
            hypothesis=f"{strategy.title} ({strategy.id}, transform {name}: {why})", optimizer=self.name,
            extra={"phase": "transform", "transform": {"name": name, "site": site, "params": params}},
        )

    def _failed(self, member: Version, strategy: Strategy, site: str, params: dict[str, Any], reason: str) -> Proposal:
        assert strategy.transform is not None
        name = strategy.transform.name
        return Proposal(source="", parent=member.id, strategy=strategy.id, change=f"transform {name}@{site}",
                        optimizer=self.name, failed=" ".join(reason.split()),
                        extra={"phase": "transform", "transform": {"name": name, "site": site, "params": params}})

    # --- knobs ------------------------------------------------------------------------------------

    def _knob_search(self) -> Any:
        """The knob search over a strategy set where each transform strategy also hints the
        parameters its transform declares (their domains), so what a transform made is tuned first."""
        if self._hinted is None:
            self._hinted = _with_param_hints(self._strategy_set())
            self.knobs = self._knobs_factory(self._hinted)
        return self.knobs

    def _knob_context(self, context: OptimizeContext) -> OptimizeContext:
        """The context with, for each member a transform made (or descends from), that strategy first
        among its recommendations: the knob search then moves its hinted knobs first."""
        by_id = {a.version: a for a in context.history}
        recs = dict(context.recommendations)
        for member in context.beam:
            made_by: list[str] = []
            for vid in _lineage(context, member):
                attempt = by_id.get(vid)
                if attempt is not None and attempt.transform and attempt.strategy and attempt.strategy not in made_by:
                    made_by.append(attempt.strategy)
            if made_by:
                own = [r for r in recs.get(member.id, []) if r.strategy not in made_by]
                first = [Recommendation(strategy=s, score=1.0, reason="its transform made this kernel")
                         for s in made_by]
                recs[member.id] = first + own
        return context.model_copy(update={"recommendations": recs})


# --- helpers ------------------------------------------------------------------------------------------


def _lineage(context: OptimizeContext, member: Version) -> list[str]:
    """The member and its ancestors, nearest first."""
    parents = {a.version: a.parent for a in context.history}
    out: list[str] = []
    vid: str | None = member.id
    while vid and vid not in out:
        out.append(vid)
        vid = parents.get(vid) or (member.parent if vid == member.id else None)
    return out


def _tried_on_lineage(context: OptimizeContext, member: Version, structure: str | None = None
                      ) -> set[tuple[str, str, str]]:
    """(strategy, transform, site) tried on the member's lineage: applied by the member or an
    ancestor (the kernel has it already), proposed from an ancestor of the same structure (the
    member differs from it in knob values only), or broken on any ancestor (no source, or a
    result that failed: it would most likely break here too).

    A transform that was merely slower on an ancestor is tried again on a descendant whose
    structure another transform changed: transforms compose (a grouped tile order, then a
    persistent grid; a single pass, then several rows per program), and the result is a
    different kernel. `structure` is the member's structure hash; unknown, every ancestor
    counts as the same structure."""
    lineage = _lineage(context, member)
    structures = {a.version: a.structure for a in context.history}
    mine = structure or structures.get(member.id)
    tried: set[tuple[str, str, str]] = set()
    for a in context.history:
        if not (a.transform and a.strategy) or a.parent not in lineage and a.version not in lineage:
            continue
        broken = a.outcome in ("failed", "incorrect")
        theirs = structures.get(a.parent or "")
        same = mine is None or theirs is None or theirs == mine
        if a.version in lineage or broken or same:
            name, _, site = a.transform.partition("@")
            tried.add((a.strategy, name, site))
    for p in context.failed_proposals:
        spec = p.extra.get("transform") or {}
        if p.parent in lineage and p.strategy and spec.get("name"):
            tried.add((p.strategy, spec["name"], spec.get("site") or ""))
    return tried


def _diagnosis_match(strategy: Strategy, member: Version) -> float:
    """How well a strategy fits the member's diagnosis: primary category, subcause, named by the rule."""
    d = member.diagnosis
    if d is None:
        return 0.0
    score = 0.0
    for rank, b in enumerate([x for x in [d.primary, *d.bottlenecks] if x is not None]):
        weight = 1.0 / (1 + rank)
        if strategy.id in b.strategies:
            score += 2 * weight
        if b.category in strategy.categories:
            score += weight
        if b.subcause and b.subcause in strategy.subcauses:
            score += weight
    return score


def _avoided(strategy: Strategy, member: Version) -> bool:
    """Whether the member's metrics say the strategy hurts (`avoid_when` holds) or cannot help (`when` false)."""
    if member.metrics is None:
        return False
    from kernelopt.conditions import compile_condition

    values = member.metrics.values()
    try:
        if strategy.avoid_when and compile_condition(strategy.avoid_when).evaluate(values) is True:
            return True
        if strategy.when and compile_condition(strategy.when).evaluate(values) is False:
            return True
    except Exception:  # noqa: BLE001 - a condition that cannot be read excludes nothing
        return False
    return False


def _with_param_hints(loaded: StrategySet) -> StrategySet:
    """A copy where each transform strategy also hints its transform's declared parameter domains."""
    from kernelopt.optimize.transforms import get_transform

    out = loaded.model_copy(deep=True)
    for sid, s in out.strategies.items():
        if s.transform is None:
            continue
        try:
            declared = get_transform(s.transform.name).params
        except Exception:  # noqa: BLE001 - unknown transform: reported when it is proposed
            continue
        have = {k.param for k in s.knobs}
        extra = [Knob(param=p.name, values=[v for v in p.domain if v is not None])
                 for p in declared if p.domain and p.name not in have and any(v is not None for v in p.domain)]
        if extra:
            out.strategies[sid] = s.model_copy(update={"knobs": [*s.knobs, *extra]})
    return out
