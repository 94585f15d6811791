"""KnobSearchOptimizer: a profile-guided local search over a candidate's knobs (no LLM).

Order of moves around each beam member (see docs/knobs.md):

1. experience seed (the `seed_knobs` option, else `context.seed_knobs`: the fastest
   configuration the recommend stage found measured for a similar situation);
2. the strategy packs' knob hints, in the recommend stage's blended order (packs and
   experience: context.recommendations, then the diagnosis' own strategy ids): `values`
   are tried as listed, `scale` factors snap to the next legal value in their direction.
   What moves first and which way comes from the packs, not from code here;
3. coordinate moves: one knob one step in its domain (hinted knobs and directions first);
4. pairs: two knobs one step each;
5. polish: the rest of the full {-1, 0, +1} neighbourhood, in an order fixed by the seed;
6. reach: once all of that is spent, one knob two or more steps away, nearest first.

The optimizer keeps no state: everything it avoids is read from the context (history
attempts carry their knob values and failures; the beam members' sources are read from
their paths), so a resumed run proposes exactly what an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import random
import re
from dataclasses import dataclass
from typing import Any, Iterator

from kernelopt.errors import BadInput
from kernelopt.models.harness import VERDICT_FAILURES
from kernelopt.models.optimize import Attempt, KnobSpec, KnobValue, OptimizeContext, Proposal, Version
from kernelopt.models.strategy import Knob, Strategy
from kernelopt.optimize.base import at_roofline
from kernelopt.optimize.knobs.discover import KnobSite, find_sites
from kernelopt.optimize.knobs.rewrite import in_domain, knob_key, set_knobs, structure_hash
from kernelopt.recommend import generic_strategy

# Kinds the search moves by default. Directives (eviction policy, cache modifiers, loop
# pipelining) and autotune configs join only when a pack hint names them; num_ctas and
# maxnreg likewise (cluster launch and register caps are niche and multiply the space).
DEFAULT_KINDS: tuple[str, ...] = ("constexpr", "launch", "define", "cuda_launch")
DEFAULT_EXCLUDE: tuple[str, ...] = ("num_ctas", "maxnreg")
POLISH_MAX_KNOBS = 8
# A change that made its parent at least this much slower (speedup < CLEAR_LOSS) is tried on
# another member only after every other move: on the H100 the max_dim1 draft's search spent 6 of
# its 8 evaluations on one loop-stages hint that lost 2.5-3x on v0, again on v1.
CLEAR_LOSS = 0.9
# Failures whose cause grows with tiles and pipeline depth: a config at least as large in
# every such knob fails the same way, so it is not proposed either.
_RESOURCE = re.compile(r"resource|shared mem|smem|register|too many|out of memory", re.I)
# A verdict on the answer (incorrect, timing_mismatch, ...) is never a resource failure.
_NON_RESOURCE_FAILURES = VERDICT_FAILURES

Config = dict[str, KnobValue]
# What the search has tried is keyed on (structure hash, knob values): a transform's rewrite
# that kept its parent's knob values is a new candidate. An attempt whose structure is unknown
# (a context built without it) keys as ANY and matches every structure, as before.
ANY = "*"
Seen = set[tuple[str, tuple[tuple[str, str], ...]]]
_KEEP: Any = object()  # "this knob stays" in a polish combination (None is a knob value)


def param_of(name: str) -> str:
    """The parameter a knob name refers to: 'kernel.BLOCK@L31' -> 'BLOCK', 'load@L3.eviction_policy' -> 'eviction_policy'."""
    return re.split(r"[@#]", name.split(".")[-1])[0]


_key = knob_key


def _matches(glob: str, site: KnobSite) -> bool:
    param = param_of(site.name)
    if fnmatch.fnmatchcase(param, glob) or fnmatch.fnmatchcase(site.name, glob):
        return True
    # Packs say BLOCK_* for "every tile dimension"; tiles are also called BLOCK, BM, TILE... A name
    # without a wildcard (BLOCK_PID, BLOCK_K: a transform's own parameter) means that parameter only:
    # on the H200 block-program-axis's BLOCK_PID hint moved gelu's elementwise BLOCK 128 -> 16 (8x
    # slower) and set the tile's search direction downwards, away from the 1.8x that BLOCK 256 gave.
    return "BLOCK" in glob and any(c in glob for c in "*?[") and site.tile


def select_knobs(sites: list[KnobSite], kinds: tuple[str, ...] = DEFAULT_KINDS,
                 exclude: tuple[str, ...] = DEFAULT_EXCLUDE,
                 domains: dict[str, list[KnobValue]] | None = None) -> list[KnobSite]:
    """The knobs the search moves by default (and the exhaustive enumerator enumerates)."""
    out = []
    for site in sites:
        if site.kind not in kinds or param_of(site.name) in exclude or (site.value is None and site.kind == "autotune"):
            continue
        restricted = _restrict(site, domains)
        if len(restricted.domain) > 1:
            out.append(restricted)
    return out


def _restrict(site: KnobSite, domains: dict[str, list[KnobValue]] | None) -> KnobSite:
    if not domains or site.name not in domains:
        return site
    allowed = [v for v in site.domain if in_domain(v, domains[site.name]) or _same(v, site.value)]
    return dataclasses.replace(site, domain=allowed)


def space_size(knobs: list[KnobSpec]) -> int:
    size = 1
    for k in knobs:
        size *= max(1, len(k.domain))
    return size


def enumerate_space(knobs: list[KnobSpec], limit: int = 10_000, *, kinds: tuple[str, ...] = DEFAULT_KINDS,
                    exclude: tuple[str, ...] = DEFAULT_EXCLUDE) -> list[Config]:
    """Every combination of the knobs the search moves (same selection as the search).

    Raises BadInput when the space holds more than `limit` configurations: a benchmark
    must never compare against a silently truncated "exhaustive" search. Restrict the
    domains (KnobSpec.domain) first for a smaller space."""
    chosen = [k for k in knobs if k.kind in kinds and param_of(k.name) not in exclude
              and not (k.value is None and k.kind == "autotune") and len(k.domain) > 1]
    size = space_size(chosen)
    if size > limit:
        raise BadInput(f"knob space of {size} configurations exceeds the limit {limit} "
                       f"({', '.join(f'{k.name}:{len(k.domain)}' for k in chosen)})")
    names = [k.name for k in chosen]
    return [dict(zip(names, combo)) for combo in itertools.product(*(k.domain for k in chosen))]


@dataclass
class _Move:
    changes: Config
    phase: str
    strategy: Strategy | None = None


@dataclass
class _Failure:
    config: Config
    resource: bool
    structure: str = ANY


class KnobSearchOptimizer:
    """Profile-guided knob search; `kernelopt.optimize.base.get_optimizer('knobs', **options)`.

    Options: `seed_knobs` (dict: knob or parameter name -> value, from experience),
    `kinds` (knob kinds to move), `exclude` (parameter names never moved), `domains`
    (knob name -> allowed values), `strategies` (a StrategySet; default: the loaded packs).
    """

    name = "knobs"

    # The options it uses (kernelopt.optimize.base.check_options refuses others before a run starts).
    accepts = frozenset({"seed_knobs", "kinds", "exclude", "domains", "strategies"})

    def __init__(self, *, seed_knobs: dict[str, KnobValue] | None = None, kinds: list[str] | tuple[str, ...] | None = None,
                 exclude: list[str] | tuple[str, ...] | None = None, domains: dict[str, list[KnobValue]] | None = None,
                 strategies: Any = None, **unknown: Any) -> None:
        if unknown:
            raise BadInput(f"optimizer knobs: unknown option(s) {', '.join(sorted(unknown))} "
                           "(known: seed_knobs, kinds, exclude, domains)")
        self.seed_knobs = dict(seed_knobs or {})
        self.kinds = tuple(kinds) if kinds else DEFAULT_KINDS
        self.exclude = tuple(exclude) if exclude is not None else DEFAULT_EXCLUDE
        self.domains = dict(domains or {})
        self._strategies = strategies
        self._metric_keys: frozenset[str] | None = None

    # --- public ---------------------------------------------------------------------------

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        if not context.beam:
            return []
        best = context.beam[0]
        if at_roofline(best, context.roofline_floor_ms, context.reference_ms):
            return []  # at the problem's roofline: no knob will buy a measurable gain
        budget = context.budget_left if context.budget_left is not None else None
        if budget is not None and budget <= 0:
            return []
        seen: Seen = set()
        failures: list[_Failure] = []
        losers: list[Config] = []
        for attempt in context.history:
            if attempt.knobs:
                structure = attempt.structure or ANY
                seen.add((structure, _key(attempt.knobs)))
                parent = _parent_config(attempt)  # the root (v0) is no attempt: recover its knobs
                if parent is not None:
                    seen.add((structure, _key(parent)))  # a knob move keeps its parent's structure
                    if attempt.speedup_vs_parent is not None and attempt.speedup_vs_parent < CLEAR_LOSS:
                        losers.append({n: v for n, v in attempt.knobs.items() if not _same(v, parent.get(n))})
                if attempt.outcome == "failed" or attempt.failure:
                    failures.append(_Failure(dict(attempt.knobs), _is_resource_failure(attempt), structure))
        members: list[tuple[Version, str, list[KnobSite], str]] = []
        for version in context.beam:
            source = _read_source(version)
            sites = find_sites(source, version.path)
            structure = structure_hash(source, version.path)
            seen.add((structure, _key({s.name: s.value for s in sites})))
            members.append((version, source, sites, structure))
        proposals: list[Proposal] = []
        for version, source, sites, structure in members:
            quota = context.proposals_per_member
            for proposal in self._member_proposals(context, version, source, sites, seen, failures, losers,
                                                   structure):
                if quota <= 0 or (budget is not None and len(proposals) >= budget):
                    break
                proposals.append(proposal)
                quota -= 1
            if budget is not None and len(proposals) >= budget:
                break
        return proposals

    # --- one beam member -------------------------------------------------------------------

    def _member_proposals(self, context: OptimizeContext, version: Version, source: str, sites: list[KnobSite],
                          seen: Seen, failures: list[_Failure], losers: list[Config],
                          structure: str = ANY) -> Iterator[Proposal]:
        current: Config = {s.name: s.value for s in sites}
        by_name = {s.name: s for s in sites}
        chosen = select_knobs(sites, self.kinds, self.exclude, self.domains)
        hints = self._hints(context, version)
        # A hint may name a directive (eviction_policy, a loop's num_stages): it joins the search.
        for _, knob in hints:
            for site in sites:
                if (site.kind == "directive" and _matches(knob.param, site) and len(site.domain) > 1
                        and site.name not in {c.name for c in chosen}):
                    chosen.append(_restrict(site, self.domains))
        space = {s.name: s for s in chosen}
        tiles_and_stages = {s.name for s in sites if s.tile or param_of(s.name) == "num_stages"}
        def untried() -> Iterator[tuple[Config, Config, _Move]]:
            deferred: list[tuple[Config, Config, _Move]] = []
            for move in self._moves(context, version, current, space, hints):
                changes = {n: v for n, v in move.changes.items() if n in by_name and not _same(v, current[n])}
                if not changes:
                    continue
                config = {**current, **changes}
                key = _key(config)
                if ((structure, key) in seen or (ANY, key) in seen
                        or _excluded(config, failures, tiles_and_stages, structure)):
                    continue
                seen.add((structure, key))
                if _repeats_a_loss(changes, losers):
                    deferred.append((changes, config, move))  # after every other move
                else:
                    yield changes, config, move
            yield from deferred

        for changes, config, move in untried():
            try:
                new_source = set_knobs(source, changes, version.path)
            except BadInput:
                continue  # a value the member's own domain does not allow (restricted domains)
            yield self._proposal(version, new_source, current, changes, config, move)

    def _moves(self, context: OptimizeContext, version: Version, current: Config, space: dict[str, KnobSite],
               hints: list[tuple[Strategy, Knob]]) -> Iterator[_Move]:
        # 1. experience seed: the whole seed at once, then each of its values alone
        seed = self._seed_changes(self.seed_knobs or context.seed_knobs, current, space)
        if seed:
            yield _Move(seed, "seed")
            if len(seed) > 1:
                for n, v in seed.items():
                    yield _Move({n: v}, "seed")
        # 2. pack hints, in the order strategies are recommended
        direction: dict[str, int] = {}
        order: list[str] = []
        by_strategy: dict[str, list[dict[str, KnobValue]]] = {}
        # One value per hinted knob comes first; a hint's further values for the same knob
        # (num_stages 2, 3, 4) wait until after the coordinate moves. Tried together they
        # share one verdict: on the H100's max_dim1 draft all three lost 2-3x in one round.
        later: list[_Move] = []
        for strategy, knob in hints:
            for site in _ordered_sites([s for s in space.values() if _matches(knob.param, s)]):
                targets = _hint_targets(knob, site)
                for k, target in enumerate(targets):
                    step = _direction(site, target)
                    direction.setdefault(site.name, step)
                    if site.name not in order:
                        order.append(site.name)
                    move = _Move({site.name: target}, "hint", strategy)
                    if k == 0:
                        yield move
                    else:
                        later.append(move)
                if targets:
                    by_strategy.setdefault(strategy.id, []).append({site.name: targets[0]})
        # a strategy with hints on several knobs also moves them together (its first targets)
        for strategy, _ in hints:
            parts = by_strategy.pop(strategy.id, [])
            if len(parts) > 1:
                yield _Move({k: v for p in parts for k, v in p.items()}, "hint", strategy)
        # 3. coordinate moves; 4. pairs; 5. polish. Hinted knobs and directions first.
        names = order + [n for n in space if n not in order]
        steps = {n: _steps(space[n], current[n], direction.get(n, 0)) for n in names}
        for n in names:
            for target in steps[n]:
                yield _Move({n: target}, "coordinate")
        yield from later
        for a, b in itertools.combinations(names, 2):
            for ta in steps[a]:
                for tb in steps[b]:
                    yield _Move({a: ta, b: tb}, "pair")
        polish = names[:POLISH_MAX_KNOBS]
        combos = [c for c in itertools.product(*([_KEEP, *steps[n]] for n in polish))
                  if sum(v is not _KEEP for v in c) >= 3]
        random.Random(context.seed).shuffle(combos)
        combos.sort(key=lambda c: sum(v is not _KEEP for v in c))  # stable: nearest first, seeded within
        for combo in combos:
            yield _Move({n: v for n, v in zip(polish, combo) if v is not _KEEP}, "polish")
        # 6. reach. A config no one-step move improves is only a local optimum: on an H200 the
        # strategies run's layernorm stopped at num_warps 4 ("no new proposals", about 34 s of its budget
        # left) where the knob run's path reached 16, 2 % faster (session 11).
        far = {n: _far_steps(space[n], current[n], direction.get(n, 0)) for n in names}
        for k in range(max((len(v) for v in far.values()), default=0)):
            for n in names:
                if k < len(far[n]):
                    yield _Move({n: far[n][k]}, "reach")

    # --- hints, seed, proposal ----------------------------------------------------------------

    def _strategy_set(self) -> Any:
        if self._strategies is None:
            from kernelopt.strategies import load_strategies

            self._strategies = load_strategies()
        return self._strategies

    def _hints(self, context: OptimizeContext, version: Version) -> list[tuple[Strategy, Knob]]:
        """(strategy, knob hint) pairs in recommendation order: the context's recommendations
        for this member, then the strategy ids the diagnosis itself names."""
        ids: list[str] = [r.strategy for r in context.recommendations.get(version.id, [])]
        if version.diagnosis is not None:
            ranked = list(version.diagnosis.bottlenecks)
            if version.diagnosis.primary is not None:
                ranked.insert(0, version.diagnosis.primary)
            for b in ranked:
                ids.extend(b.strategies)
        loaded = self._strategy_set().strategies
        out: list[tuple[Strategy, Knob]] = []
        for sid in dict.fromkeys(ids):
            strategy = loaded.get(sid)
            if strategy is None or strategy.anti_pattern:
                continue
            out.extend((strategy, knob) for knob in strategy.knobs)
        return out

    def _seed_changes(self, seed: Config, current: Config, space: dict[str, KnobSite]) -> Config:
        changes: Config = {}
        for name, value in seed.items():
            targets = [name] if name in space else [n for n in space if param_of(n) == name]
            if len(targets) != 1:
                continue  # ambiguous or absent here: the seed came from another kernel
            site = space[targets[0]]
            if in_domain(value, site.domain) and not _same(value, current[site.name]):
                changes[site.name] = value
        return changes

    def _proposal(self, version: Version, source: str, current: Config, changes: Config, config: Config,
                  move: _Move) -> Proposal:
        change = "; ".join(f"{n} {_fmt(current[n])} -> {_fmt(v)}" for n, v in changes.items())
        bottleneck = None
        if version.diagnosis is not None and version.diagnosis.primary is not None:
            bottleneck = version.diagnosis.primary.category
        strategy = move.strategy
        if strategy is not None:
            metric = self._first_metric(strategy.expect or "")
            expected = strategy.expect
            hypothesis = f"{strategy.title} ({strategy.id}, from its knob hints)"
        else:
            metric = "duration_ns"
            expected = "duration_ns falls"
            hypothesis = {"seed": "knob values that worked on a similar kernel (experience)",
                          "coordinate": "local search: one knob one step from the best config",
                          "pair": "local search: two knobs one step each",
                          "polish": "local search: the full neighbourhood of the best config",
                          "reach": "local search: one knob two or more steps from the best config"}.get(move.phase, move.phase)
        # A move no pack entry made still names its kind (knobs.coordinate, ...): every outcome votes.
        return Proposal(source=source, parent=version.id, strategy=strategy.id if strategy else generic_strategy(self.name, move.phase),
                        change=change,
                        knobs=config, bottleneck=bottleneck, metric=metric, expected=expected, hypothesis=hypothesis,
                        optimizer=self.name, extra={"phase": move.phase, "changes": changes})

    def _first_metric(self, text: str) -> str | None:
        if self._metric_keys is None:
            from kernelopt.strategies import metric_keys

            self._metric_keys = metric_keys()
        for word in re.findall(r"[a-z][a-z0-9_]+", text):
            if word in self._metric_keys:
                return word
        return None


# --- helpers --------------------------------------------------------------------------------------


def _same(a: KnobValue, b: KnobValue) -> bool:
    return a == b and type(a) is type(b)


def _fmt(v: KnobValue) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _read_source(version: Version) -> str:
    from kernelopt.files import read_text

    return read_text(version.path, "candidate")


_CHANGE = re.compile(r"^(\S+) (.+?) -> (.+)$")


def _parent_config(attempt: Attempt) -> Config | None:
    """The parent's knob values, undoing this optimizer's own `change` text ("A 1 -> 2; B '' -> '.cg'").

    The starting kernel never appears as an attempt and leaves the beam once beaten; without
    this its config could be proposed again after the beam moved on."""
    import ast

    config = dict(attempt.knobs)
    for part in attempt.change.split("; "):
        m = _CHANGE.match(part)
        if m is None or m.group(1) not in config:
            return None  # not a knob change written by this optimizer
        try:
            config[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            return None
    return config


def _is_resource_failure(attempt: Attempt) -> bool:
    text = " ".join(x for x in (attempt.failure, attempt.lesson) if x)
    # Attempt.failure reads "reason: message".
    if attempt.failure and attempt.failure.split(":", 1)[0].strip() in _NON_RESOURCE_FAILURES:
        return False
    return bool(_RESOURCE.search(text))


def _repeats_a_loss(changes: Config, losers: list[Config]) -> bool:
    """Does this move make, among its changes, every change of one that clearly lost before?"""
    return any(loss and all(n in changes and _same(changes[n], v) for n, v in loss.items()) for loss in losers)


def _excluded(config: Config, failures: list[_Failure], monotone: set[str], structure: str = ANY) -> bool:
    """Is `config` a failed one, or at least as large as a resource failure in every tile and stage
    count, on the same structure (a failure of another kernel structure says nothing here)?"""
    for f in failures:
        if f.structure not in (ANY, structure) and structure != ANY:
            continue
        same = True
        for name, value in f.config.items():
            mine = config.get(name, value)
            if _same(mine, value):
                continue
            if (f.resource and name in monotone and isinstance(mine, int) and isinstance(value, int)
                    and mine >= value):
                continue
            same = False
            break
        if same:
            return True
    return False


def _ordered_sites(sites: list[KnobSite]) -> list[KnobSite]:
    # The grid's own tile dimension first: a tile hint ("shrink the tile so the grid fills the
    # SMs", "grow it for reuse") acts on parallelism through the parallel dimension.
    rank = {"parallel": 0, None: 1, "loop": 2}
    return sorted(sites, key=lambda s: rank.get(s.role, 1))


def _index(domain: list[KnobValue], value: KnobValue) -> int:
    return next(i for i, d in enumerate(domain) if _same(d, value))


def _numeric(v: KnobValue) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _hint_targets(knob: Knob, site: KnobSite) -> list[KnobValue]:
    if knob.values is not None:
        return [v for v in knob.values if in_domain(v, site.domain) and not _same(v, site.value)]
    out: list[KnobValue] = []
    if not _numeric(site.value):
        return out
    legal = sorted(v for v in site.domain if _numeric(v))
    for factor in knob.scale or []:
        goal = site.value * factor  # type: ignore[operator]
        if factor > 1:
            pick = next((v for v in legal if v >= goal), None)
        else:
            pick = next((v for v in reversed(legal) if v <= goal), None)
        if pick is not None and not _same(pick, site.value) and pick not in out:
            out.append(pick)
    return out


def _direction(site: KnobSite, target: KnobValue) -> int:
    """+1 when `target` lies after the current value in the domain's order, else -1."""
    return 1 if _index(site.domain, target) > _index(site.domain, site.value) else -1


def _steps_at(site: KnobSite, value: KnobValue, direction: int, distance: int) -> list[KnobValue]:
    """The domain values `distance` steps from `value`, the hinted direction first (else upwards first)."""
    i = _index(site.domain, value)
    up = [site.domain[i + distance]] if i + distance < len(site.domain) else []
    down = [site.domain[i - distance]] if i - distance >= 0 else []
    return down + up if direction < 0 else up + down


def _steps(site: KnobSite, value: KnobValue, direction: int) -> list[KnobValue]:
    """The domain neighbours of `value`, the hinted direction first (else upwards first)."""
    return _steps_at(site, value, direction, 1)


def _far_steps(site: KnobSite, value: KnobValue, direction: int) -> list[KnobValue]:
    """The domain values two or more steps from `value`, nearest first."""
    return [v for d in range(2, len(site.domain)) for v in _steps_at(site, value, direction, d)]
