"""The Optimizer protocol and its registry.

An optimizer only proposes source: `propose(context) -> list[Proposal]`. The loop
(`kernelopt.optimize.loop`) evaluates, profiles, diagnoses and promotes; an optimizer
never runs a stage itself. Built-in optimizers are named in `BUILTIN`; third-party
ones register through the entry-point group `kernelopt.optimizers` (a class or a
factory taking keyword options).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kernelopt.errors import BadInput
from kernelopt.models.optimize import OptimizeContext, Proposal, Version
from kernelopt.registry import Registry

ENTRY_POINT_GROUP = "kernelopt.optimizers"

# A version sits at its roofline when its time is within this share of the problem's DRAM
# floor. The floor is the problem's own (its inputs and outputs at peak bandwidth), not a
# unit's utilisation: ncu's "DRAM 90 %" also reads high for a kernel that moves its data
# twice, and an "ALU 85 %" for one that spends its cycles on index arithmetic - on the H100
# suite such kernels sat at 12-45 % of the problem's floor, with knob wins left.
AT_ROOFLINE_SHARE = 0.90

# name -> "module:attribute"; imported only when chosen, so the CLI stays fast.
BUILTIN: dict[str, str] = {
    "knobs": "kernelopt.optimize.knobs.search:KnobSearchOptimizer",
    "llm": "kernelopt.optimize.llm.optimizer:LLMOptimizer",
    "agent": "kernelopt.optimize.agent:AgentOptimizer",
    "strategies": "kernelopt.optimize.transforms.optimizer:StrategiesOptimizer",
}


@runtime_checkable
class Optimizer(Protocol):
    """Proposes new candidate sources from what the loop has measured.

    `name` and `propose` are all an optimizer must have. The loop also uses these optional
    capabilities where an optimizer has them, looked up by attribute (`capability`), never by
    the optimizer's name, so a third-party optimizer gets them by defining them:

    - `repair(context, version, evaluation) -> Proposal | None`: a fix for a failed version
      (`Repairs`); the result is a new version of the same round.
    - `reflect(context, version, evaluation, parent_metrics, metrics) -> str | None`: a lesson
      from what was measured (`Reflects`), recorded in the run and the experience store.
    - `rejections: list`: replies that gave no proposal, each logged as a `rejected` event.
    - `interactive = True`: proposes nothing; the run stays open after v0 for `kernelopt iterate`.
    - `isolation: str`: how the engine isolates its candidates ('worker', the default, or 'auto':
      a real OS sandbox where there is one, for model-written code).
    - `usage_log_name: str` (on the class): a log file of its own in the run directory, passed
      as the `usage_log` option.
    - `resume_changeable: frozenset[str]` (on the class): options a resumed run may change
      (the LLM's `timeout_s` and `retries`: a hung --llm-command wants a shorter timeout);
      any other option given again with another value is refused.
    - Resuming: an optimizer keeps no state the loop does not rebuild. What it must remember
      across processes it puts in `Proposal.extra`, and reads back from `context.history`
      (`Attempt.extra`), e.g. the LLM's prompt hashes.
    """

    name: str

    def propose(self, context: OptimizeContext) -> list[Proposal]:
        """New proposals for this round; an empty list means the optimizer has nothing left to try."""
        ...


@runtime_checkable
class Repairs(Protocol):
    """An optimizer that can fix a failed version from its failure detail."""

    def repair(self, context: OptimizeContext, version: Version, evaluation: Any) -> Proposal | None: ...


@runtime_checkable
class Reflects(Protocol):
    """An optimizer that states a lesson from a measured version."""

    def reflect(self, context: OptimizeContext, version: Version, evaluation: Any,
                parent_metrics: Any, metrics: Any) -> str | None: ...


# Optional attribute -> its value for an optimizer without it (see `Optimizer`).
CAPABILITY_DEFAULTS: dict[str, Any] = {
    "repair": None, "reflect": None, "rejections": None, "interactive": False, "isolation": "worker",
    "usage_log_name": None, "resume_changeable": frozenset(),
}


def capability(optimizer: Any, name: str) -> Any:
    """The optimizer's (or optimizer class's) optional capability `name`, else its default."""
    if name not in CAPABILITY_DEFAULTS:
        raise KeyError(f"{name!r} is not an optimizer capability (known: {', '.join(CAPABILITY_DEFAULTS)})")
    return getattr(optimizer, name, CAPABILITY_DEFAULTS[name])


def roofline_share(version: Version, floor_ms: float | None) -> float | None:
    """floor / time: the share of the problem's DRAM roofline this version reaches; None when unknown."""
    median = version.median_ms
    if not floor_ms or not median:
        return None
    return floor_ms / median


def at_roofline(version: Version, floor_ms: float | None, reference_ms: float | None = None) -> bool:
    """Whether no launch-level change can buy a measurable gain: the version's time is within
    AT_ROOFLINE_SHARE of the problem's DRAM floor, and no slower than `reference_ms` (the fastest
    baseline the run measured, when there is one). At 90 % of the floor a memory-bound kernel can
    still be a few per cent behind the library: on an H100 (session 13) the search stopped
    bias_silu_residual at 91 % of its floor, 0.99x of torch.compile, whose kernel reached 92 %.
    That margin decides whether the result beats the library. Without a floor (the CPU
    interpreter) never."""
    share = roofline_share(version, floor_ms)
    if share is None or share < AT_ROOFLINE_SHARE:
        return False
    return reference_ms is None or version.median_ms is None or version.median_ms <= reference_ms


REGISTRY = Registry("optimizer", ENTRY_POINT_GROUP, BUILTIN)


def available() -> dict[str, str]:
    """Registry name -> where it comes from ('builtin' or the entry point's value)."""
    return REGISTRY.available()


# Option name -> the CLI flag that sets it, for messages that tell the user what to drop.
OPTION_FLAGS: dict[str, str] = {
    "provider": "--provider", "model": "--model", "base_url": "--base-url", "api_key": "--api-key",
    "llm_command": "--llm-command", "repairs": "--repairs", "timeout_s": "--llm-timeout", "retries": "--llm-retries",
}


def optimizer_factory(name: str) -> Any:
    """The class (or factory) registered as `name`; BadInput if unknown."""
    factory = REGISTRY.factory(name)
    if factory is None:
        raise BadInput(f"--optimizer {name!r}: unknown optimizer (known: {', '.join(sorted(available()))})")
    return factory


def accepted_options(name: str) -> frozenset[str] | None:
    """The options optimizer `name` uses: its class's `accepts`, else its named keyword
    parameters; None when it takes any (`**options` and no `accepts`). BadInput if unknown."""
    import inspect

    factory = optimizer_factory(name)
    declared = getattr(factory, "accepts", None)
    if declared is not None:
        return frozenset(declared)
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))


def check_options(name: str, options: dict[str, Any]) -> None:
    """Refuse options that optimizer `name` would ignore (`--provider` with knobs), naming the flag."""
    accepted = accepted_options(name)
    if accepted is None:
        return
    ignored = [k for k in options if k not in accepted]
    if ignored:
        flags = ", ".join(OPTION_FLAGS.get(k, f"--opt {k}") for k in ignored)
        raise BadInput(f"--optimizer {name}: does not use {flags}; leave {'it' if len(ignored) == 1 else 'them'} out")


def get_optimizer(name: str, **options: Any) -> Optimizer:
    """Instantiate the optimizer registered as `name` with `options`; BadInput if unknown."""
    optimizer = optimizer_factory(name)(**options)
    if not isinstance(optimizer, Optimizer):
        raise BadInput(f"optimizer {name!r} does not implement propose(context) and name")
    return optimizer
