"""LLMOptimizer: asks a model for one change per proposal, guided by the measurements.

For each beam member the optimizer renders `propose.j2` with the problem, the
current kernel, the diagnosis as labelled metrics, Nsight Compute's rule
messages, ONE recommended strategy and the lineage's measured attempts; sends it
through a provider; parses the reply; applies the static guard; and returns a
Proposal. Each member gets a different recommended strategy where the
recommendations allow, and no prompt is ever sent twice: the hashes of sent
prompts are kept, and strategies already tried on a version (from
`context.history`) are skipped, so a resumed run stays diverse.

Replies that yield no usable candidate are not proposals; each is recorded in
`rejections` with its reason, for the loop to log. The loop also calls `repair`
(a candidate failed the engine: its failure detail goes back to the model, at
most `repairs` times) and `reflect` (after an evaluation: the model compares its
prediction with the measurement and states a lesson for the ExperienceStore).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Literal

from kernelopt.errors import BadInput
from kernelopt.files import read_text
from kernelopt.models.common import Model
from kernelopt.models.harness import Evaluation
from kernelopt.models.metrics import Metrics
from kernelopt.models.optimize import OptimizeContext, Proposal, Version
from kernelopt.models.recommendation import Recommendation
from kernelopt.optimize.llm import guard as guard_mod
from kernelopt.optimize.llm import parse as parse_mod
from kernelopt.optimize.llm import prompt as prompt_mod
from kernelopt.optimize.llm.providers import (
    Completion,
    Message,
    Provider,
    ProviderError,
    complete_with_retries,
    get_provider,
    redact,
)

RejectReason = Literal["no_code", "syntax", "no_entry", "guard", "duplicate", "repeat_prompt", "provider_error"]
OTHERS_SHOWN = 5  # other strategies named (so the model keeps to its own); more is noise
LESSON_LIMIT = 600  # characters of a lesson kept when the reply has no LESSON: line

# Options the built-in providers take; anything else given for them is a usage error.
_PROVIDER_OPTIONS = {
    "openai": {"model", "base_url", "api_key", "temperature", "max_tokens"},
    "anthropic": {"model", "base_url", "api_key", "temperature", "max_tokens"},
    "command": {"llm_command", "model"},
}
_FLAG = {"llm_command": "--llm-command", "base_url": "--base-url", "api_key": "--api-key", "model": "--model"}


class Rejection(Model):
    """A reply that produced no proposal (or a prompt that was not sent), and why."""

    kind: Literal["propose", "repair", "reflect"]
    parent: str | None = None
    strategy: str | None = None
    reason: RejectReason
    detail: str
    prompt_sha: str | None = None
    round: int | None = None


class LLMOptimizer:
    name = "llm"
    # Model-written code is the likeliest to probe the harness: a real OS sandbox where there is one.
    isolation = "auto"
    # The loop passes `usage_log` as this file in the run directory.
    usage_log_name = "llm_usage.jsonl"
    # Options a resumed run may change (a hung --llm-command wants a shorter timeout).
    resume_changeable = frozenset({"timeout_s", "retries"})

    def __init__(
        self,
        provider: str | Provider | None = None,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        llm_command: str | None = None,
        repairs: int = 2,
        guard: str = "strict",
        prompt_dir: str | Path | None = None,
        timeout_s: float = 120.0,
        retries: int = 3,
        usage_log: str | Path | None = None,
        backoff_s: float = 1.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if provider is None:
            if not llm_command:
                raise BadInput("--optimizer llm: needs --provider (openai, anthropic, command)")
            provider = "command"
        if repairs < 0 or retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise BadInput("--optimizer llm: repairs and retries must be >= 0, timeout > 0, backoff >= 0")
        self.guard = guard_mod.check_mode(guard)
        self.repairs = repairs
        self.timeout_s = float(timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.usage_log = Path(usage_log) if usage_log else None
        self.prompt_dir = prompt_mod.prompt_dir_from(prompt_dir)
        self._sleep = sleep
        if isinstance(provider, str):
            options = {
                "model": model, "base_url": base_url, "api_key": api_key, "llm_command": llm_command,
                "temperature": temperature, "max_tokens": max_tokens,
            }
            options = {k: v for k, v in options.items() if v is not None}
            allowed = _PROVIDER_OPTIONS.get(provider)
            if allowed is not None:
                extra = sorted(set(options) - allowed)
                if extra:
                    flags = ", ".join(_FLAG.get(k, k) for k in extra)
                    raise BadInput(f"--provider {provider}: does not take {flags}")
            self.provider: Provider = get_provider(provider, **options)
        else:
            self.provider = provider
        # Only for scrubbing text we write; never stored anywhere else.
        self._secrets: tuple[str | None, ...] = (api_key, getattr(self.provider, "_api_key", None))
        self.rejections: list[Rejection] = []
        self._sent: set[str] = set()
        self._metric_keys: frozenset[str] | None = None

    def __repr__(self) -> str:
        return f"LLMOptimizer(provider={self.provider!r}, guard={self.guard!r}, repairs={self.repairs})"

    # ------------------------------------------------------------------ propose

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        """One LLM call per (beam member, strategy), up to `proposals_per_member` per member."""
        # Prompts sent by earlier processes of this run (a resumed run): from the history, so a
        # resumed run never sends a prompt twice.
        self._sent.update(a.extra["prompt_sha"] for a in context.history if a.extra.get("prompt_sha"))
        proposals: list[Proposal] = []
        used_this_round: set[str] = set()
        budget = context.budget_left
        per_member = max(1, context.proposals_per_member)
        for member in context.beam:
            calls = 0
            for rec, others in self._choices(context, member, used_this_round):
                if calls >= per_member or (budget is not None and len(proposals) >= budget):
                    break
                messages = self._propose_messages(context, member, rec, others)
                sha = prompt_sha(messages)
                strategy = rec.strategy if rec else None
                if sha in self._sent:
                    self._reject("propose", "repeat_prompt", "this exact prompt was sent before", member.id, strategy, sha, context.round)
                    continue
                self._sent.add(sha)
                calls += 1
                if strategy:
                    used_this_round.add(strategy)  # asked for, whatever the reply: spread the rest
                completion = self._call("propose", messages, sha, member.id, strategy, context.round)
                if completion is None:
                    continue
                proposal = self._to_proposal(
                    "propose", completion, sha, context, parent=member, strategy=strategy,
                    bottleneck=member.diagnosis.primary.category if member.diagnosis and member.diagnosis.primary else None,
                )
                if proposal is not None:
                    proposals.append(proposal)
        return proposals

    def _choices(
        self, context: OptimizeContext, member: Version, used_this_round: set[str]
    ) -> list[tuple[Recommendation | None, list[str]]]:
        """Strategies for this member, untried on it, those no other member took this round first.

        With no untried recommendation left, one free-choice prompt (strategy None).
        """
        # An optimizer's own generic moves (knobs.coordinate, ...) are no strategy to write code for.
        recs = [r for r in context.recommendations.get(member.id, []) if not r.generic]
        tried = {a.strategy for a in context.history if a.parent == member.id and a.strategy}
        untried = [r for r in dict((r.strategy, r) for r in recs).values() if r.strategy not in tried]
        ordered = [r for r in untried if r.strategy not in used_this_round] + [
            r for r in untried if r.strategy in used_this_round
        ]
        if not ordered:
            return [(None, [])]
        ids = [r.strategy for r in ordered]
        return [(r, [i for i in ids if i != r.strategy]) for r in ordered]

    def _propose_messages(
        self, context: OptimizeContext, member: Version, rec: Recommendation | None, others: list[str]
    ) -> list[Message]:
        kernel_source = read_text(member.path, "kernel")
        entry = parse_mod.defined_entry_of(kernel_source) or "ModelNew"
        user = prompt_mod.render_prompt(
            "propose",
            self.prompt_dir,
            round=context.round,
            version_id=member.id,
            median_ms=f"{member.median_ms:.4g}" if member.median_ms is not None else None,
            device=context.device,
            problem_name=context.problem.name,
            problem_source=read_text(context.problem.path, "problem").strip("\n"),
            kernel_source=kernel_source.strip("\n"),
            diagnosis=prompt_mod.diagnosis_context(member, context.roofline_floor_ms),
            strategy=prompt_mod.strategy_context(rec),
            other_strategies=others[:OTHERS_SHOWN],
            avoid=context.known_failures.get(member.id, [])[:OTHERS_SHOWN],
            seed=", ".join(f"{k}={v}" for k, v in context.seed_knobs.items()),
            overrides=", ".join(f"{k}={v}" for k, v in context.problem.overrides.items()),
            history=prompt_mod.history_lines(context, member.id),
            entry=entry,
        )
        return self._messages(member, entry, user)

    def _messages(self, version: Version, entry: str, user: str) -> list[Message]:
        backend = version.evaluation.candidate.backend if version.evaluation else "triton"
        system = prompt_mod.render_prompt("system", self.prompt_dir, backend=backend, entry=entry)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    # ------------------------------------------------------------------ repair

    def repair(self, context: OptimizeContext, version: Version, evaluation: Evaluation) -> Proposal | None:
        """A fixed source for `version`, which failed `evaluation`; None when the reply has none."""
        previous = version.proposal.extra.get("repair", 0) if version.proposal else 0
        attempt = int(previous) + 1
        if attempt > self.repairs:
            return None
        kernel_source = read_text(version.path, "kernel") if Path(version.path).is_file() else (
            version.proposal.source if version.proposal else ""
        )
        entry = parse_mod.defined_entry_of(kernel_source) or "ModelNew"
        strategy = version.proposal.strategy if version.proposal else None
        user = prompt_mod.render_prompt(
            "repair",
            self.prompt_dir,
            intent=version.proposal.change if version.proposal else None,
            hypothesis=version.proposal.hypothesis if version.proposal else None,
            attempt=attempt,
            max_attempts=self.repairs,
            problem_source=read_text(context.problem.path, "problem").strip("\n"),
            overrides=", ".join(f"{k}={v}" for k, v in context.problem.overrides.items()),
            version_id=version.id,
            kernel_source=kernel_source.strip("\n"),
            failure=prompt_mod.failure_context(evaluation),
            strategy=strategy,
            entry=entry,
        )
        messages = self._messages(version, entry, user)
        sha = prompt_sha(messages)
        if sha in self._sent:
            self._reject("repair", "repeat_prompt", "this exact repair prompt was sent before", version.id, strategy, sha, context.round)
            return None
        self._sent.add(sha)
        completion = self._call("repair", messages, sha, version.id, strategy, context.round)
        if completion is None:
            return None
        parent_version = next((v for v in context.beam if v.id == version.parent), None)
        return self._to_proposal(
            "repair", completion, sha, context, parent=parent_version, parent_id=version.parent,
            strategy=strategy, bottleneck=version.proposal.bottleneck if version.proposal else None,
            extra={"repair": attempt, "repair_of": version.id},
            fallback=version.proposal,
        )

    # ------------------------------------------------------------------ reflect

    def reflect(
        self,
        context: OptimizeContext,
        version: Version,
        evaluation: Evaluation,
        metrics_before: Metrics | None,
        metrics_after: Metrics | None,
    ) -> str:
        """The lesson of one evaluation: what was predicted against what was measured."""
        p = version.proposal
        outcome, timing = _measured(context, version, evaluation)
        failure = None
        if evaluation.failure is not None:
            failure = f"{evaluation.failure.reason}: {' '.join(evaluation.failure.message.split())[:300]}"
        changes = prompt_mod.metric_changes(metrics_before, metrics_after, first=p.metric if p else None)
        facts = {
            "version_id": version.id,
            "parent_id": version.parent,
            "strategy": p.strategy if p else None,
            "change": p.change if p else "starting kernel",
            "hypothesis": p.hypothesis if p else None,
            "expected": p.expected if p else None,
            "outcome": outcome,
            "timing": timing,
            "failure": failure,
            "changes": changes,
        }
        user = prompt_mod.render_prompt("reflexion", self.prompt_dir, **facts)
        messages: list[Message] = [{"role": "user", "content": user}]
        sha = prompt_sha(messages)
        try:
            completion = self._call("reflect", messages, sha, version.id, facts["strategy"], context.round, raise_errors=True)
        except ProviderError as exc:
            if exc.fatal:
                raise
            # No model answer: the lesson is the measured facts alone, said as such.
            return "; ".join(
                x for x in (f"no reflection (provider error); expected {facts['expected'] or 'not stated'}",
                            f"measured: {outcome}", *timing[:1], *changes[:1]) if x
            )
        assert completion is not None
        lesson = parse_mod.fields(completion.text).get("lesson")
        if not lesson:
            lesson = " ".join(completion.text.split())[:LESSON_LIMIT]
        return redact(lesson, self._secrets)

    # ------------------------------------------------------------------ shared

    def _call(
        self,
        kind: str,
        messages: list[Message],
        sha: str,
        version: str | None,
        strategy: str | None,
        round_: int | None,
        *,
        raise_errors: bool = False,
    ) -> Completion | None:
        """The provider call with retries; usage logged; a non-fatal failure recorded (or raised)."""
        try:
            completion = complete_with_retries(
                self.provider, messages, timeout_s=self.timeout_s, retries=self.retries,
                backoff_s=self.backoff_s, sleep=self._sleep,
            )
        except ProviderError as exc:
            message = redact(str(exc), self._secrets)
            exc.args = (message,)
            self._log_usage(kind, sha, version, strategy, None, error=message)
            if exc.fatal or raise_errors:
                raise
            self._reject(kind, "provider_error", message, version, strategy, sha, round_)  # type: ignore[arg-type]
            return None
        self._log_usage(kind, sha, version, strategy, completion)
        return completion

    def _to_proposal(
        self,
        kind: Literal["propose", "repair"],
        completion: Completion,
        sha: str,
        context: OptimizeContext,
        *,
        parent: Version | None,
        strategy: str | None,
        bottleneck: Any = None,
        parent_id: str | None = None,
        extra: dict[str, Any] | None = None,
        fallback: Proposal | None = None,
    ) -> Proposal | None:
        pid = parent.id if parent is not None else parent_id
        reply = parse_mod.parse_reply(completion.text, self._keys())
        if reply.code is None:
            self._reject(kind, reply.error or "no_code", reply.detail or "no code", pid, strategy, sha, context.round)  # type: ignore[arg-type]
            return None
        checked = guard_mod.check_source(reply.code, self.guard)
        if not checked.passed:
            self._reject(kind, "guard", "; ".join(checked.findings), pid, strategy, sha, context.round)
            return None
        if source_sha(reply.code) in set(context.tried_sources):
            self._reject(kind, "duplicate", "the reply's source was already evaluated", pid, strategy, sha, context.round)
            return None
        chosen = strategy or (reply.strategy if reply.strategy and reply.strategy.lower() != "other" else None)
        details: dict[str, Any] = {"prompt_sha": sha, "kind": kind, "usage": _usage(completion)}
        if checked.findings:
            details["guard"] = checked.findings  # warn mode: kept so the report can show them
        details.update(extra or {})
        change, hypothesis, expected, metric = reply.change, reply.hypothesis, reply.expected, reply.metric
        if fallback is not None:
            # A repair keeps the broken proposal's intent (its change and prediction are what the
            # evaluation and the lesson judge); the reply's own lines say what was fixed and why.
            details.update({"repair_fix": reply.change, "repair_cause": reply.hypothesis})
            change = fallback.change
            hypothesis = fallback.hypothesis or hypothesis
            expected = fallback.expected or expected
            metric = fallback.metric or metric
        return Proposal(
            source=reply.code,
            parent=pid,
            strategy=chosen,
            change=change or (f"apply {chosen}" if chosen else "unspecified change"),
            bottleneck=bottleneck,
            metric=metric,
            expected=expected,
            hypothesis=hypothesis,
            optimizer=self.name,
            extra=details,
        )

    def _keys(self) -> frozenset[str]:
        if self._metric_keys is None:
            from kernelopt.profile.catalog import load_catalog

            self._metric_keys = frozenset(load_catalog().by_key)
        return self._metric_keys

    def _reject(
        self, kind: Any, reason: RejectReason, detail: str, parent: str | None, strategy: str | None,
        sha: str | None, round_: int | None,
    ) -> None:
        self.rejections.append(
            Rejection(kind=kind, reason=reason, detail=redact(detail, self._secrets), parent=parent,
                      strategy=strategy, prompt_sha=sha, round=round_)
        )

    def _log_usage(
        self, kind: str, sha: str, version: str | None, strategy: str | None,
        completion: Completion | None, error: str | None = None,
    ) -> None:
        if self.usage_log is None:
            return
        row: dict[str, Any] = {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "kind": kind,
            "version": version,
            "strategy": strategy,
            "provider": getattr(self.provider, "name", type(self.provider).__name__),
            "prompt_sha": sha,
            "ok": completion is not None,
        }
        if completion is not None:
            row.update(_usage(completion))
        if error:
            row["error"] = redact(error, self._secrets)
        self.usage_log.parent.mkdir(parents=True, exist_ok=True)
        with self.usage_log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


def prompt_sha(messages: list[Message]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode("utf-8")).hexdigest()


def source_sha(source: str) -> str:
    """The loop's identity of a source (`context.tried_sources` holds these)."""
    from kernelopt.problem import normalized_source_hash

    return normalized_source_hash(source)


def _usage(c: Completion) -> dict[str, Any]:
    return {
        "model": c.model,
        "prompt_tokens": c.usage.prompt_tokens,
        "completion_tokens": c.usage.completion_tokens,
        "total_tokens": c.usage.total_tokens,
        "latency_s": round(c.latency_s, 3),
        "attempts": c.attempts,
        "prompt_chars": c.prompt_chars,
        "reply_chars": len(c.text),
    }


def _measured(context: OptimizeContext, version: Version, evaluation: Evaluation) -> tuple[str, list[str]]:
    """(outcome word, timing lines) from the evaluation and the parent's measured median."""
    if evaluation.raced_out and evaluation.timing is not None:
        t = evaluation.timing
        return "slower (raced out)", [f"fastest of {t.count} timed calls {t.min_ms:.4g} ms, above the beam's "
                                      f"{t.race_against_ms:.4g} ms; timing stopped early, not verified"]
    if not evaluation.passed:
        # One classification with the loop's attempt outcome: a verdict is "incorrect", no verdict "failed".
        return ("incorrect" if evaluation.wrong_answer else "failed"), []
    parent_ms = next((v.median_ms for v in context.beam if v.id == version.parent), None)
    if parent_ms is None:
        parent_ms = next((a.median_ms for a in context.history if a.version == version.parent), None)
    ms = evaluation.median_ms
    if ms is None:
        return "correct (not timed)", []
    if parent_ms is None:
        return "correct", [f"median {ms:.4g} ms (parent time unknown)"]
    ratio = parent_ms / ms
    word = "faster" if ratio > 1.02 else "slower" if ratio < 0.98 else "about the same (within 2%)"
    return word, [f"median {parent_ms:.4g} ms (parent) -> {ms:.4g} ms ({ratio:.2f}x)"]

