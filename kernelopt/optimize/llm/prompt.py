"""Prompt building: the measured facts as labelled text, rendered through jinja2 templates.

Templates live in `templates/prompts/` (`system.j2`, `propose.j2`, `repair.j2`,
`reflexion.j2`). A directory given as `prompt_dir` (or KERNELOPT_PROMPT_DIR) is
searched first, so a user can override any one of them and keep the rest.

Metrics reach the model as lines such as `DRAM throughput [dram_throughput_pct]:
41.2 %`: labels and units from the metric catalog (`kernelopt.profile.catalog`),
the key in brackets so the reply can name it in its EXPECTED line. Never a raw dict.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from kernelopt.models.diagnosis import Bottleneck, Diagnosis, Evidence
from kernelopt.models.harness import Evaluation
from kernelopt.models.metrics import Metrics, RuleResult
from kernelopt.models.optimize import Attempt, OptimizeContext, Version
from kernelopt.models.recommendation import Recommendation

PROMPT_DIR_ENV = "KERNELOPT_PROMPT_DIR"
TEXT_LIMIT = 4000  # characters of a traceback / stdout worth sending back
HISTORY_LIMIT = 20  # attempts of a lineage shown, newest last
_UNITLESS = {"fraction", "count", ""}


def prompt_dir_from(option: str | Path | None) -> Path | None:
    chosen = option or os.environ.get(PROMPT_DIR_ENV) or None
    if chosen is None:
        return None
    path = Path(chosen)
    if not path.is_dir():
        from kernelopt.errors import BadInput

        raise BadInput(f"--prompt-dir {path}: not a directory")
    return path


@functools.lru_cache(maxsize=8)
def _environment(user_dir: str | None) -> Any:
    import jinja2

    from kernelopt.resources import data_dir

    loaders = [jinja2.FileSystemLoader(user_dir)] if user_dir else []
    loaders.append(jinja2.FileSystemLoader(str(data_dir("templates") / "prompts")))
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_prompt(name: str, prompt_dir: Path | None = None, **context: Any) -> str:
    """Render `<name>.j2` from the user's prompt directory, else the shipped one."""
    import jinja2

    try:
        template = _environment(str(prompt_dir) if prompt_dir else None).get_template(f"{name}.j2")
    except jinja2.TemplateNotFound:
        from kernelopt.errors import BadInput

        raise BadInput(f"prompt template {name}.j2: not found") from None
    except jinja2.TemplateSyntaxError as exc:
        from kernelopt.errors import BadInput

        raise BadInput(f"{exc.filename or name + '.j2'}:{exc.lineno}: template syntax error: {exc.message}") from None
    return template.render(**context)


# ---------------------------------------------------------------- measured facts as text


def _unit(unit: str) -> str:
    return "" if unit in _UNITLESS else f" {unit}"


def metric_line(key: str, value: float | str | None) -> str:
    """`Label [key]: value unit`, label and unit from the catalog."""
    from kernelopt.profile.catalog import load_catalog
    from kernelopt.profile.report import fmt

    entry = load_catalog().by_key.get(key)
    if entry is None:
        return f"{key}: {fmt(value)}"
    return f"{entry.label} [{key}]: {fmt(value)}{_unit(entry.unit)}"


def metric_lines(metrics: Metrics | None) -> list[str]:
    """Every catalog metric of the profile, in catalog order (groups as `kernelopt profile` shows them)."""
    if metrics is None:
        return []
    from kernelopt.profile.catalog import load_catalog

    values = metrics.values()
    return [metric_line(e.key, values[e.key]) for e in load_catalog().entries if e.key in values]


def roofline_lines(metrics: Metrics | None) -> list[str]:
    roof = metrics.roofline if metrics else None
    if roof is None:
        return []
    basis = "measured" if roof.measured else "datasheet"
    out = []
    if roof.dram_fraction is not None:
        out.append(f"DRAM roofline fraction: {roof.dram_fraction:.3f} of the {basis} DRAM bandwidth")
    if roof.compute_fraction is not None:
        out.append(f"Compute roofline fraction: {roof.compute_fraction:.3f} of the {basis} FLOP rate ({roof.precision or 'n/a'})")
    if roof.tensor_fraction is not None:
        out.append(f"Tensor pipe utilisation: {roof.tensor_fraction:.3f} of peak")
    return out


def _evidence(e: Evidence) -> str:
    line = metric_line(e.key, e.value)
    if e.op is not None and e.threshold is not None and e.label != "cited":
        from kernelopt.profile.report import fmt

        line += f" (rule: {e.op} {fmt(e.threshold)})"
    return line


def bottleneck_block(b: Bottleneck) -> dict[str, Any]:
    return {
        "category": b.category,
        "subcause": b.subcause,
        "confidence": f"{b.confidence:.2f}",
        "message": b.message,
        # One line per metric: a rule may cite the same metric against several thresholds.
        "evidence": [_evidence(e) for e in {e.key: e for e in reversed(b.evidence)}.values()][::-1],
        "headroom": None if b.headroom_pct is None else f"{b.headroom_pct:.0f}%",
        "near_roofline": b.near_roofline,
    }


def rule_lines(rules: list[RuleResult]) -> list[str]:
    """Nsight Compute's own guided-analysis messages, OPT first (they carry estimated speedups)."""
    order = {"OPT": 0, "WRN": 1, "ERR": 1, "INF": 2, "OK": 3}
    out = []
    seen: set[tuple[str, str]] = set()
    for r in sorted(rules, key=lambda r: order.get(r.type, 9)):
        if r.type == "OK" or (r.rule, r.message) in seen:
            continue
        seen.add((r.rule, r.message))
        speed = f" (ncu estimates {r.est_speedup_pct:.0f}% speedup)" if r.est_speedup_pct is not None else ""
        out.append(f"[{r.type}] {r.rule}{speed}: {' '.join(r.message.split())}")
    return out


def floor_line(version: Version, floor_ms: float | None) -> list[str]:
    """The version's time against the problem's own DRAM floor: well below 90 % means the kernel
    moves more data than the problem needs, or does not stream it at full rate."""
    from kernelopt.optimize.base import roofline_share

    share = roofline_share(version, floor_ms)
    if share is None or floor_ms is None:
        return []
    return [f"Problem floor: {floor_ms:.4g} ms (its inputs and outputs once, at peak DRAM bandwidth); "
            f"this version takes {version.median_ms:.4g} ms, {share:.0%} of the floor's speed"]


def diagnosis_context(version: Version, floor_ms: float | None = None) -> dict[str, Any]:
    d: Diagnosis | None = version.diagnosis
    rules = list(d.ncu_rules) if d else []
    if not rules and version.metrics is not None:
        rules = version.metrics.rules()
    notes = list(d.notes) if d else []
    if version.profile_of is not None:
        notes.insert(0, f"{version.id} was not profiled: the diagnosis and metrics here are {version.profile_of}'s, "
                        f"the same kernel with other knob values at nearly the same time (launch figures such as "
                        f"block size, grid and registers are {version.profile_of}'s)")
    return {
        "primary": bottleneck_block(d.primary) if d and d.primary else None,
        "others": [bottleneck_block(b) for b in (d.bottlenecks[1:] if d else [])],
        "notes": notes,
        "metrics": metric_lines(version.metrics),
        "roofline": floor_line(version, floor_ms) + roofline_lines(version.metrics),
        "ncu_rules": rule_lines(rules),
    }


def strategy_context(rec: Recommendation | None) -> dict[str, Any] | None:
    """The recommendation with its pack entry (change sketch, expectation, pitfall) when the pack has it."""
    if rec is None:
        return None
    from kernelopt.errors import BadInput
    from kernelopt.strategies import get_strategy

    try:
        s = get_strategy(rec.strategy)
    except BadInput:  # experience may name a strategy no loaded pack has any more
        s = None
    evidence = f"{len(rec.records)} past outcome(s) in the experience store" if rec.records else None
    return {
        "id": rec.strategy,
        "title": rec.title or (s.title if s else rec.strategy),
        "reason": rec.reason,
        "score": f"{rec.score:.2f}",
        "source": rec.source,
        "experience": evidence,
        "change": s.change.strip() if s and s.change else None,
        "expect": s.expect if s else None,
        "pitfall": s.pitfall if s else None,
    }


def lineage(context: OptimizeContext, version_id: str) -> list[str]:
    """The version and its ancestors, newest first, from the beam and the history."""
    parents: dict[str, str | None] = {a.version: a.parent for a in context.history}
    parents.update({v.id: v.parent for v in context.beam})
    chain, current = [], version_id
    while current is not None and current not in chain:
        chain.append(current)
        current = parents.get(current)
    return chain


def attempt_line(a: Attempt) -> str:
    parts = [f"{a.version} (from {a.parent or 'start'})"]
    if a.strategy:
        parts.append(f"[{a.strategy}]")
    parts.append(f"{a.change}:")
    outcome = a.outcome
    if a.failure and a.outcome in ("failed", "incorrect"):
        outcome += f" ({a.failure})"
    if a.speedup_vs_parent is not None:
        outcome += f", {a.speedup_vs_parent:.2f}x vs parent"
    if a.median_ms is not None:
        outcome += f", median {a.median_ms:.4g} ms"
    parts.append(outcome)
    line = " ".join(parts)
    if a.lesson:
        line += f". Lesson: {' '.join(a.lesson.split())}"
    return line


def history_lines(context: OptimizeContext, version_id: str) -> list[str]:
    """Attempts made from this version or any ancestor: what was tried on this lineage, and how it went."""
    chain = set(lineage(context, version_id))
    attempts = [a for a in context.history if a.parent in chain or a.version in chain]
    return [attempt_line(a) for a in attempts[-HISTORY_LIMIT:]]


def clip(text: str | None, limit: int = TEXT_LIMIT) -> str | None:
    """The tail of a long text (a traceback's last frames say the most)."""
    if not text:
        return None
    text = text.strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def failure_context(evaluation: Evaluation) -> dict[str, Any]:
    """The engine's failure detail: reason, message, traceback, output and the numeric mismatch."""
    f = evaluation.failure
    v = evaluation.verification
    mismatches = []
    if v is not None:
        for trial in v.trials:
            for o in trial.outputs:
                if o.passed:
                    continue
                bits = [f"output {o.index}: shape {o.shape} {o.dtype} (reference {o.ref_shape} {o.ref_dtype})"]
                if o.max_abs_error is not None:
                    bits.append(f"max abs error {o.max_abs_error:.4g}")
                if o.rel_l2_error is not None:
                    bits.append(f"relative L2 error {o.rel_l2_error:.4g}")
                if o.mismatches:
                    bits.append(f"{o.mismatches} elements out of tolerance")
                if o.first_mismatch is not None:
                    bits.append(f"first at index {o.first_mismatch}")
                if o.nonfinite:
                    bits.append(f"{o.nonfinite} non-finite values")
                mismatches.append(f"trial seed {trial.seed}: " + ", ".join(bits))
            if mismatches:
                break  # one failing trial says enough; the others repeat it
    return {
        "reason": (f.reason if f else None) or (v.reason if v else None) or "unknown",
        "stage": f.stage if f else "verify",
        "message": (f.message if f else None) or (v.message if v else None) or "",
        "traceback": clip(f.traceback if f else None),
        "stdout": clip(f.stdout if f else None),
        "stderr": clip(f.stderr if f else None),
        "tolerance": None if v is None else f"atol {v.atol:g}, rtol {v.rtol:g}",
        "mismatches": mismatches,
        "suspect": list(evaluation.suspect),
    }


def metric_changes(before: Metrics | None, after: Metrics | None, first: str | None = None, limit: int = 12) -> list[str]:
    """`Label [key]: before -> after unit` for the metrics that moved most (the predicted one first)."""
    if before is None or after is None:
        return []
    from kernelopt.profile.catalog import load_catalog
    from kernelopt.profile.report import fmt

    b, a = before.values(), after.values()
    catalog = load_catalog()
    moved: list[tuple[float, str]] = []
    for key in b.keys() & a.keys():
        old, new = b[key], a[key]
        scale = max(abs(old), abs(new))
        rel = abs(new - old) / scale if scale else 0.0
        moved.append((rel if key != first else float("inf"), key))
    moved.sort(key=lambda t: (-t[0], t[1]))
    out = []
    for rel, key in moved[:limit]:
        if rel == 0.0:
            break
        entry = catalog.by_key.get(key)
        label = f"{entry.label} [{key}]" if entry else key
        out.append(f"{label}: {fmt(b[key])} -> {fmt(a[key])}{_unit(entry.unit) if entry else ''}")
    return out
