"""The recommend stage: one ranking of strategies for a situation, from the strategy packs and
the experience store together, with the failures to avoid and a seed configuration.

    recommend(situation, store) -> Advice(recommendations, known_failures, seed, notes)

The loop asks it for every beam member every round (`Loop.context`), agent mode asks it for
the next step, `kernelopt experience recommend` prints it, and the LLM prompt shows it.

Relevance of a past record to the situation, in [0, 1]:

    relevance = (0.45 * similar + 0.25 * bottleneck + 0.15 * backend + 0.10 * chip family + 0.05 * stall)
                * OTHER_CONTEXT ** (how many of device, dtype, shape class are known on both sides and differ)

`similar` is the best of: the cosine similarity of the two kernel descriptions' embeddings
(BM25 relevance when no model loads), FAMILY_SIMILARITY when both name the same problem
family (never 'unknown'), and the Jaccard overlap of the kernels' structural features (`kernelopt.source`).
Each structured term is 1 on a match, 0 on a mismatch and 0.5 when either side does not
say. So a record of another problem counts when it is similar, and one measured on another
device, dtype or shape class counts less; the reasons say which.

Voting: the NEIGHBOURS most relevant records that carry a strategy vote (records without
one never take a slot: a store full of bare knob-run records still answers). A knob-run
record without a strategy but with knob values votes as LEGACY_KNOBS. A record whose
bottleneck is known and differs from the situation's does not vote.

    score = similarity * (0.40 + 0.25 * success_rate + 0.20 * gain + 0.15 * support)
          + OWN_WEIGHT * own    (the user's own measured success in a matching situation)
          + PACK_WEIGHT * pack  (the packs' score for the diagnosis, scaled to [0, 1])
    then * (1 - FAILURE_PENALTY * failed share) when it failed in similar situations:
    a strategy that failed there goes later, not never.

The seed: the fastest configuration measured for a similar situation (lowest time after,
same backend, device and shape class), from the most similar problem that has one.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelopt.experience.labels import chip_family, device_model
from kernelopt.models.diagnosis import Bottleneck, Diagnosis
from kernelopt.models.metrics import Metrics
from kernelopt.models.recommendation import Advice, KnownFailure, Recommendation, Seed, Situation

if TYPE_CHECKING:
    import numpy as np

    from kernelopt.models.strategy import Strategy, StrategySet

W_SEMANTIC, W_BOTTLENECK, W_BACKEND, W_CHIP, W_STALL = 0.45, 0.25, 0.15, 0.10, 0.05
W_BASE, W_SUCCESS, W_GAIN, W_SUPPORT = 0.40, 0.25, 0.20, 0.15
PACK_WEIGHT = 0.30
# The user's own measured successes (records of their database with a speedup, not the
# shipped seed) in a matching situation: above curated guidance and pack advice.
OWN_WEIGHT = 0.40
OWN_RELEVANCE = 0.6
CURATED_GAIN = 0.3
NEIGHBOURS = 100
FAILURE_RELEVANCE = 0.6
FAILURE_PENALTY = 0.5
FAMILY_SIMILARITY = 0.7
OTHER_CONTEXT = 0.8
SEED_RELEVANCE = 0.5
# Ids of an optimizer's own moves where no pack entry fits: every evaluated proposal votes.
GENERIC_PREFIXES = ("knobs.", "llm.", "agent.", "manual.")
LEGACY_KNOBS = "knobs.search"

# Pack scoring: confidence / (1 + rank) times these factors; `parts` shows them.
RULE_BOOST = 1.5  # the diagnosis rule named this strategy
SUBCAUSE_MATCH = 1.3  # the strategy lists the diagnosed subcause
WHEN_UNKNOWN = 0.8  # its precondition could not be checked (metrics missing)


# A run's problem family (`problem_family`): declared by the problem, else the first of these
# structural features (`kernelopt.source.FEATURES`) its starting kernel has, else UNKNOWN_FAMILY,
# which matches nothing (two kernels of unknown family are not thereby similar).
FEATURE_FAMILIES = (("dot", "matmul"), ("reduction", "reduction"), ("elementwise", "elementwise"))
UNKNOWN_FAMILY = "unknown"


def problem_family(problem_path: str | Path, kernel_path: str | Path) -> str:
    """The family a run records and recommend matches other problems' records on: the problem's
    declared one (`kernelopt.problem.declared_family`: FAMILY, or its suite README's table), else
    one derived from the starting kernel's structural features (FEATURE_FAMILIES), else 'unknown'."""
    from kernelopt.problem import declared_family
    from kernelopt.source import features

    declared = declared_family(problem_path)
    if declared:
        return declared
    try:
        feats = features(Path(kernel_path).read_text(encoding="utf-8", errors="replace"), str(kernel_path))
    except OSError:
        feats = set()
    return next((family for feature, family in FEATURE_FAMILIES if feature in feats), UNKNOWN_FAMILY)


def generic_strategy(optimizer: str | None, phase: str | None = None) -> str:
    """The strategy id of a proposal no pack entry fits: 'knobs.coordinate', 'llm.free', ..."""
    return f"{optimizer or 'manual'}.{phase or 'free'}"


def is_generic(strategy: str) -> bool:
    return strategy.startswith(GENERIC_PREFIXES) or strategy == LEGACY_KNOBS


# ----------------------------------------------------------------------------- the stage


def recommend(situation: Situation, store: Any = None, *, n: int = 5, include_packs: bool = True,
              strategies: "StrategySet | None" = None) -> Advice:
    """Strategies for `situation`, best first, each with its reason citing pack entries and
    experience records; the failures to avoid; the seed configuration. Without a `store`
    (an ExperienceStore), the packs alone answer."""
    notes: list[str] = []
    recs: dict[str, Recommendation] = {}
    fails: dict[str, list[int]] = {}
    succ_w: dict[str, float] = {}
    known: list[KnownFailure] = []
    seed: Seed | None = None
    mode = "structured"
    idx = rel = None
    if store is not None:
        idx, rel, mode = _relevance(store, situation, notes)
        recs, fails, known, succ_w = _from_experience(idx, rel, situation)
        seed = _seed(idx, rel, situation)
    loaded = strategies
    if include_packs:
        try:
            loaded = loaded if loaded is not None else _strategy_set()
        except Exception as exc:  # noqa: BLE001 - a broken pack leaves experience to answer alone
            notes.append(f"strategy packs unavailable ({exc})")
            loaded = None
    if include_packs and loaded is not None:
        diagnosis = situation_diagnosis(situation)
        if diagnosis is not None and situation.backend is not None:
            _blend_packs(recs, pack_scores(diagnosis, situation.backend, situation.metrics, strategies=loaded))
            listed = {f.strategy for f in known}
            known += [
                KnownFailure(strategy=p.strategy, reason=f"pack anti-pattern: {p.title or p.strategy}; {p.reason}",
                             source="pack")
                for p in pack_scores(diagnosis, situation.backend, situation.metrics, strategies=loaded,
                                     anti_patterns=True) if p.strategy not in listed
            ]
    packs = loaded.strategies if loaded is not None else {}
    for r in recs.values():
        entry = packs.get(r.strategy)
        if entry is not None:
            r.title = r.title or entry.title
            r.transform = _transform_here(r, entry, situation)
        r.generic = entry is None and is_generic(r.strategy)
        if idx is not None and rel is not None and r.strategy in fails:
            _penalise(r, idx, rel, fails[r.strategy], succ_w.get(r.strategy, 0.0))
    # A CUDA-only strategy is no step for a Triton kernel, whatever the records say.
    ranked = [r for r in recs.values() if situation.backend is None or r.strategy not in packs
              or packs[r.strategy].backend in (situation.backend, "any")]
    ranked.sort(key=lambda r: (-r.score, r.strategy))
    return Advice(recommendations=ranked[:n], known_failures=known, seed=seed, retrieval=mode, notes=notes)


@functools.lru_cache(maxsize=1)
def _strategy_set() -> Any:
    # Parsing and validating the YAML packs takes ~150 ms: once per process, not per query.
    from kernelopt.strategies import load_strategies

    return load_strategies()


def _transform_here(r: Recommendation, entry: "Strategy", situation: Situation) -> str | None:
    """The name of the entry's transform when its static precondition holds for the situation's
    features (or no features are known); otherwise None, and the reason says why."""
    transform = getattr(entry, "transform", None)
    if transform is None:
        return None
    if situation.features:
        holds, why = transform.holds(set(situation.features))
        if not holds:
            if "transform" not in r.reason:
                r.reason += f"; transform {transform.name} does not apply here ({why})"
            return None
    return str(transform.name)


def situation_diagnosis(situation: Situation) -> Diagnosis | None:
    """The diagnosis the packs rank by: the situation's own, else one built from its bottleneck."""
    if situation.diagnosis is not None:
        return situation.diagnosis
    if situation.bottleneck is None:
        return None
    primary = Bottleneck(category=situation.bottleneck, subcause=situation.stall, confidence=1.0,
                         message="given by the caller", rule_id="recommend.situation")
    return Diagnosis(primary=primary, bottlenecks=[primary], rules_pack="recommend", kernel=situation.kernel)


# ----------------------------------------------------------------------------- experience


def _match(idx: Any, column: str, value: str | None) -> "np.ndarray":
    """1 where equal, 0 where both known and different, 0.5 where either side is unknown."""
    import numpy as np

    if not value:
        return np.full(len(idx.ids), 0.5)
    out = idx.eq(column, value).astype(np.float64)
    out[idx.eq(column, "")] = 0.5
    return out


def _differs(idx: Any, column: str, value: str | None) -> "np.ndarray":
    """1 where both sides are known and different, else 0."""
    import numpy as np

    if not value:
        return np.zeros(len(idx.ids))
    return (~idx.eq(column, value) & ~idx.eq(column, "")).astype(np.float64)


def _context(situation: Situation) -> dict[str, str | None]:
    """The situation's device, dtype and shape class as the index spells them."""
    return {"device": device_model(situation.device), "dtype": (situation.dtype or "").strip().lower() or None,
            "shape_class": situation.shape_class or None}


def _relevance(store: Any, situation: Situation, notes: list[str]) -> tuple[Any, "np.ndarray", str]:
    import numpy as np

    from kernelopt.experience.index import semantic_scores, situation_text

    idx = store.index()
    sem, mode = semantic_scores(store, idx, situation_text(situation.kernel), notes)
    family = (situation.family or "").strip().lower()
    if family and family != UNKNOWN_FAMILY:
        sem = np.where(idx.family == family, np.maximum(sem, FAMILY_SIMILARITY), sem)
    if situation.features and idx.feature_sets:
        mine = set(situation.features)
        overlap = np.array([len(mine & s) / len(mine | s) if s else 0.0 for s in idx.feature_sets])
        sem = np.maximum(sem, overlap[idx.feature_idx])
    stall = (situation.stall or "").strip().lower() or None
    chip = chip_family(situation.chip) or chip_family(situation.device)
    rel = (
        W_SEMANTIC * sem
        + W_BOTTLENECK * _match(idx, "bottleneck", situation.bottleneck)
        + W_BACKEND * _match(idx, "backend", situation.backend)
        + W_CHIP * _match(idx, "chip_family", chip)
        + W_STALL * (idx.eq("stall", stall).astype(float) if stall else 0.0)
    )
    ctx = _context(situation)
    other = _differs(idx, "device", ctx["device"]) + _differs(idx, "dtype", ctx["dtype"]) \
        + _differs(idx, "shape_class", ctx["shape_class"])
    rel = rel * OTHER_CONTEXT ** other
    if situation.exclude_sources:
        prefixes = tuple(situation.exclude_sources)
        rel = rel * np.array([not s.startswith(prefixes) for s in idx.source], dtype=np.float64)
    return idx, rel, mode


def _voting(idx: Any, i: int) -> list[str]:
    """The strategies record `i` votes for: its own, or LEGACY_KNOBS for a bare knob-run record."""
    if idx.strategies[i]:
        return idx.strategies[i]
    return [LEGACY_KNOBS] if idx.has_params[i] else []


def _own_measured(idx: Any, i: int) -> bool:
    return not bool(idx.seed[i]) and not math.isnan(idx.speedup[i])


def _elsewhere(idx: Any, i: int, ctx: dict[str, str | None]) -> str:
    """' (other device: x; counts less)' when record i was measured in another context."""
    what = [f"other {name.replace('_', ' ')}: {getattr(idx, name)[i]}" for name in ("device", "dtype", "shape_class")
            if ctx[name] and getattr(idx, name)[i] and getattr(idx, name)[i] != ctx[name]]
    return f" ({'; '.join(what)}; counts less)" if what else ""


def _reason(idx: Any, rel: "np.ndarray", strategy: str, members: list[int], own: list[int], tries: float,
            ctx: dict[str, str | None]) -> str:
    """Which records support a strategy: the user's measured ones by id and speedup, then the rest."""
    parts = []
    if own:
        shown = ", ".join(f"{idx.ids[i][:8]} {idx.kernel[i]} {idx.speedup[i]:.2f}x{_elsewhere(idx, i, ctx)}"
                          for i in own[:3])
        more = f" and {len(own) - 3} more" if len(own) > 3 else ""
        parts.append(f"your measured success(es) in a matching situation: {shown}{more}")
    others = [i for i in members if i not in own]
    if others:
        best = others[0]
        sp = idx.speedup[best]
        kind = "seed" if idx.seed[best] else "yours"
        measured = f"{sp:.2f}x" if not math.isnan(sp) else "curated guidance"
        where = f"{idx.kernel[best]}" + (f", {idx.bottleneck[best]}" if idx.bottleneck[best] else "")
        lead = f"{len(others)} other success(es); closest" if own else "closest"
        parts.append(f"{lead}: {idx.ids[best][:8]} {where} ({kind}, {measured}, relevance {rel[best]:.2f})"
                     f"{_elsewhere(idx, best, ctx)}")
    renamed = sorted({n for i in members for n, m in zip(idx.recorded[i], idx.strategies[i]) if m == strategy != n})
    text = f"{len(members)} success(es) of {int(tries)} tries in similar situations: " + "; ".join(parts)
    if renamed:
        text += f" (recorded as {', '.join(renamed)})"
    return text


def _gain(speedup: float) -> float:
    if math.isnan(speedup):
        return CURATED_GAIN
    return min(1.0, max(0.05, math.log2(speedup))) if speedup > 1 else 0.05


def _from_experience(idx: Any, rel: "np.ndarray", situation: Situation
                     ) -> tuple[dict[str, Recommendation], dict[str, list[int]], list[KnownFailure], dict[str, float]]:
    """Experience's recommendations, the close failures by strategy, the known failures, and each
    strategy's relevance-weighted successes."""
    import numpy as np

    ctx = _context(situation)
    voters = np.flatnonzero((rel > 0) & idx.votes)
    k = min(NEIGHBOURS, len(voters))
    top = voters[np.argpartition(-rel[voters], k - 1)[:k]] if k else np.array([], dtype=np.int64)
    succ: dict[str, list[int]] = defaultdict(list)
    tries: dict[str, float] = defaultdict(float)
    fails: dict[str, list[int]] = defaultdict(list)
    for i in top.tolist():
        if situation.bottleneck and idx.bottleneck[i] and idx.bottleneck[i] != situation.bottleneck:
            continue
        for s in _voting(idx, i):
            tries[s] += idx.weight[i]
            if idx.outcome[i] == "success":
                succ[s].append(i)
            elif idx.outcome[i] in ("failure", "incorrect"):
                fails[s].append(i)
    recs: dict[str, Recommendation] = {}
    succ_w: dict[str, float] = {}
    for s, members in succ.items():
        members.sort(key=lambda i: -rel[i])
        own = [i for i in members if _own_measured(idx, i) and rel[i] >= OWN_RELEVANCE]
        rels = np.array([rel[i] for i in members])
        gains = np.array([_gain(idx.speedup[i]) for i in members])
        wsucc = float(sum(idx.weight[i] for i in members))
        succ_w[s] = float(sum(idx.weight[i] * rel[i] for i in members))
        parts = {
            "similarity": float(rels[0]),
            "success_rate": (wsucc + 1.0) / (tries[s] + 2.0),
            "gain": float((rels * gains).sum() / rels.sum()) if rels.sum() > 0 else 0.0,
            "support": 1.0 - math.exp(-float((rels * np.array([idx.weight[i] for i in members])).sum()) / 2.0),
        }
        score = parts["similarity"] * (W_BASE + W_SUCCESS * parts["success_rate"]
                                       + W_GAIN * parts["gain"] + W_SUPPORT * parts["support"])
        if own:
            parts["own"] = float(rel[own[0]])
            score += OWN_WEIGHT * parts["own"]
        cited = own + [i for i in members if i not in own]
        recs[s] = Recommendation(strategy=s, score=round(score, 4),
                                 reason=_reason(idx, rel, s, members, own, tries[s], ctx),
                                 source="experience", records=[idx.ids[i] for i in cited[:10]],
                                 parts={k2: round(v, 4) for k2, v in parts.items()})
    known = []
    close_fails: dict[str, list[int]] = {}
    for s, members in fails.items():
        members = sorted((i for i in members if rel[i] >= FAILURE_RELEVANCE), key=lambda i: -rel[i])
        if not members:
            continue
        close_fails[s] = members
        counts: dict[str, int] = defaultdict(int)
        for i in members:
            counts[str(idx.outcome[i])] += 1
        speeds = [idx.speedup[i] for i in members if not math.isnan(idx.speedup[i])]
        worst = min(speeds) if speeds else None
        known.append(KnownFailure(
            strategy=s, records=[idx.ids[i] for i in members[:10]], outcomes=dict(counts),
            worst_speedup=None if worst is None else round(float(worst), 4), similarity=round(float(rel[members[0]]), 4),
            reason=f"{sum(counts.values())} failed tr{'y' if sum(counts.values()) == 1 else 'ies'} in similar situations; "
                   f"closest: {idx.ids[members[0]][:8]} {idx.kernel[members[0]]}"
                   + (f" ({worst:.2f}x)" if worst is not None else "") + _elsewhere(idx, members[0], ctx),
        ))
    known.sort(key=lambda f: (-(f.similarity or 0.0), f.strategy))
    return recs, close_fails, known, succ_w


def _penalise(r: Recommendation, idx: Any, rel: "np.ndarray", members: list[int], wsucc: float) -> None:
    """A strategy that failed in similar situations goes later (by its relevance-weighted failed
    share of the close tries), not away."""
    wfail = float(sum(idx.weight[i] * rel[i] for i in members))
    share = wfail / (wfail + wsucc) if wfail + wsucc > 0 else 0.0
    r.parts["failed"] = round(share, 4)
    r.score = round(r.score * (1.0 - FAILURE_PENALTY * share), 4)
    r.failures = [idx.ids[i] for i in members[:10]]
    r.reason += f"; but {len(members)} failed tr{'y' if len(members) == 1 else 'ies'} in similar situations " \
                f"(closest {idx.ids[members[0]][:8]} {idx.kernel[members[0]]}): ranked later"


def _seed(idx: Any, rel: "np.ndarray", situation: Situation) -> Seed | None:
    """The fastest configuration measured for a similar situation: among correct records with knob
    values and a time, of the same backend, device and shape class, the most similar problem's
    lowest time after."""
    import numpy as np

    ctx = _context(situation)
    ok = (~np.isnan(idx.time_after)) & (rel >= SEED_RELEVANCE) & idx.has_params
    if situation.backend:
        ok &= idx.eq("backend", situation.backend)
    for name in ("device", "shape_class"):
        if ctx[name]:
            ok &= idx.eq(name, ctx[name])
    ok &= ~idx.eq("outcome", "incorrect")
    candidates = np.flatnonzero(ok)
    if not len(candidates):
        return None
    # The most similar situation that has a measured configuration (the same problem first: its
    # kernel text matches exactly), then its fastest configuration.
    top = int(candidates[np.lexsort((idx.time_after[candidates], -rel[candidates]))[0]])
    group = np.flatnonzero(ok & idx.eq("kernel", idx.kernel[top]) & idx.eq("shape_class", idx.shape_class[top]))
    best_group = group.tolist()
    i = min(best_group, key=lambda j: (idx.time_after[j], idx.ids[j]))
    knobs = idx.knobs(i)
    if not knobs:
        return None
    sp = None if math.isnan(idx.speedup[i]) else float(idx.speedup[i])
    same = idx.kernel[i] == situation.kernel
    return Seed(knobs=knobs, record=idx.ids[i], kernel=idx.kernel[i], time_ms=float(idx.time_after[i]), speedup=sp,
                similarity=round(float(rel[i]), 4),
                reason=f"fastest configuration measured for {'this problem' if same else 'a similar problem'}: "
                       f"{idx.ids[i][:8]} {idx.kernel[i]} {idx.time_after[i]:.4g} ms of {len(best_group)} measured "
                       f"(relevance {rel[i]:.2f})")


# ----------------------------------------------------------------------------- packs


def _blend_packs(recs: dict[str, Recommendation], packs: list[Recommendation]) -> None:
    top_pack = max((p.score for p in packs), default=0.0) or 1.0
    for p in packs:
        pscore = max(0.0, p.score) / top_pack
        if p.strategy in recs:
            r = recs[p.strategy]
            r.parts["pack"] = round(pscore, 4)
            r.score = round(r.score + PACK_WEIGHT * pscore, 4)
            r.source, r.title, r.category = "both", p.title, p.category
            r.reason = f"{r.reason}; pack: {p.reason}"
        else:
            recs[p.strategy] = Recommendation(
                strategy=p.strategy, title=p.title, category=p.category, score=round(PACK_WEIGHT * pscore, 4),
                reason=f"pack: {p.reason} (no recorded outcome yet)", source="pack", parts={"pack": round(pscore, 4)})


def _metric_values(metrics: Metrics | dict[str, float] | None) -> dict[str, float] | None:
    if metrics is None:
        return None
    if isinstance(metrics, Metrics):
        return metrics.values()
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}


def _evaluate(text: str, values: dict[str, float] | None) -> tuple[bool | None, str]:
    """(result, explanation): None when metrics are absent or a key it reads is missing."""
    from kernelopt.conditions import compile_condition

    cond = compile_condition(text)
    if values is None:
        return None, f"not checked, no metrics ({', '.join(sorted(cond.names))})"
    result = cond.evaluate(values)
    if result is None:
        return None, f"not checked, missing {', '.join(cond.missing(values))}"
    facts = ", ".join(f"{e.key}={e.value:g} {e.op} {e.threshold:g}" for e in cond.evidence(values)
                      if e.value is not None and e.threshold is not None)
    return result, facts


def _bottlenecks(diagnosis: Diagnosis) -> list[Bottleneck]:
    ranked = list(diagnosis.bottlenecks)
    if diagnosis.primary is not None and diagnosis.primary not in ranked:
        ranked.insert(0, diagnosis.primary)
    return ranked


def _pack_score(strategy: "Strategy", b: Bottleneck, rank: int, values: dict[str, float] | None
                ) -> tuple[float, dict[str, float], list[str]] | None:
    """Score of `strategy` for bottleneck `b`, or None when a condition excludes it."""
    parts: dict[str, float] = {"confidence": b.confidence, "rank": 1.0 / (1 + rank)}
    what = b.category + (f"/{b.subcause}" if b.subcause else "")
    reasons = [f"{strategy.pack or 'pack'}:{strategy.id} addresses {what} (bottleneck #{rank + 1}, "
               f"confidence {b.confidence:.2f})"]
    if strategy.id in b.strategies:
        parts["rule"] = RULE_BOOST
        reasons.append(f"named by rule {b.rule_id}")
    # Only a match counts: no penalty for a miss, since subcause tags come from several
    # sources (rules, experience stalls) and a missing tag says little.
    if b.subcause and b.subcause in strategy.subcauses:
        parts["subcause"] = SUBCAUSE_MATCH
        reasons.append(f"targets subcause {b.subcause}")
    if strategy.when:
        held, why = _evaluate(strategy.when, values)
        if held is False:
            return None
        if held is None:
            parts["when"] = WHEN_UNKNOWN
            reasons.append(f"`when: {strategy.when}` {why}")
        else:
            reasons.append(f"`when` holds ({why or strategy.when})")
    if strategy.avoid_when:
        hurts, why = _evaluate(strategy.avoid_when, values)
        if hurts is True:
            return None
        if hurts is None:
            reasons.append(f"`avoid_when: {strategy.avoid_when}` {why}")
    return math.prod(parts.values()), parts, reasons


def pack_scores(diagnosis: Diagnosis, backend: str, metrics: Metrics | dict[str, float] | None = None, *,
                strategies: "StrategySet | None" = None, anti_patterns: bool = False) -> list[Recommendation]:
    """The packs' half of `recommend`: pack entries that address the diagnosed bottlenecks, ranked.

    An entry qualifies for a bottleneck when its backend matches (or is `any`) and it lists
    the bottleneck's category, or the diagnosis rule names it. It is dropped when its `when`
    is false or its `avoid_when` is true; a condition that cannot be checked (no metrics, or
    a key missing) keeps it, says so in the reason and lowers its score. With
    `anti_patterns=True` the result is the anti-pattern entries that apply instead.
    """
    loaded = strategies if strategies is not None else _strategy_set()
    values = _metric_values(metrics)
    best: dict[str, Recommendation] = {}
    for rank, b in enumerate(_bottlenecks(diagnosis)):
        for s in loaded.strategies.values():
            if s.anti_pattern != anti_patterns or s.backend not in (backend, "any"):
                continue
            if b.category not in s.categories and s.id not in b.strategies:
                continue
            scored = _pack_score(s, b, rank, values)
            if scored is None:
                continue
            score, parts, reasons = scored
            if s.id in best and best[s.id].score >= score:
                continue
            best[s.id] = Recommendation(strategy=s.id, title=s.title, score=round(score, 6), reason="; ".join(reasons),
                                        source="pack", category=b.category,
                                        transform=s.transform.name if s.transform is not None else None, parts=parts)
    return sorted(best.values(), key=lambda r: (-r.score, r.strategy))


# ----------------------------------------------------------------------------- situations


def diagnosis_metrics(diagnosis: Diagnosis) -> dict[str, float]:
    """The measured values a diagnosis cites: every evidence item on a bare metric name."""
    out: dict[str, float] = {}
    for b in diagnosis.bottlenecks or ([diagnosis.primary] if diagnosis.primary else []):
        for e in b.evidence:
            if e.value is not None and e.key.isidentifier() and math.isfinite(e.value):
                out.setdefault(e.key, float(e.value))
    return out


def situation_from(*, kernel: str | None, backend: str | None = None, chip: str | None = None,
                   bottleneck: str | None = None, stall: str | None = None,
                   metrics: dict[str, float] | None = None, diagnosis: Diagnosis | None = None,
                   **context: Any) -> Situation:
    """The situation to recommend for: arguments first, then what a diagnosis says (kernel, primary
    bottleneck and sub-cause, the metric values it cites). `context`: device, dtype, family,
    shape_class, features, exclude_sources."""
    from kernelopt.errors import BadInput
    from kernelopt.experience.labels import normalize_backend, normalize_bottleneck

    values: dict[str, float] = {}
    if diagnosis is not None:
        values.update(diagnosis_metrics(diagnosis))
        primary = diagnosis.primary
        if primary is not None:
            bottleneck = bottleneck or primary.category
            stall = stall or primary.subcause
        kernel = kernel or diagnosis.kernel
    values.update(metrics or {})
    if not kernel or not kernel.strip():
        raise BadInput("experience recommend: --kernel is required (or a --diagnosis that names the kernel)")
    return Situation(kernel=kernel, backend=normalize_backend(backend), chip=chip,
                     bottleneck=normalize_bottleneck(bottleneck), stall=stall, metrics=values, diagnosis=diagnosis,
                     **{k: v for k, v in context.items() if v is not None})
