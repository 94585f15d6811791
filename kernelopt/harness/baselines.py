"""Baselines a candidate is timed against: the reference `Model` in PyTorch.

* `eager`   -- the reference model as written, called eagerly;
* `compile` -- `torch.compile(model)` in the default mode.

Both run the very model object and inputs that `binding.prepare` made for the
candidate (same dtype, same device, same values; parameters without gradients,
as `prepare` sets them). A baseline is a zero-argument callable so `time_callable` treats it
exactly like the candidate.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

BASELINES: tuple[str, ...] = ("eager", "compile")


def parse_baselines(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """"eager,compile" (or a list) -> ("eager", "compile"); "" or "none" -> (); unknown names are BadInput."""
    from kernelopt.errors import BadInput

    if text is None:
        return BASELINES
    parts = text.split(",") if isinstance(text, str) else list(text)
    names: list[str] = []
    for part in (p.strip() for p in parts):
        if not part or part == "none":
            continue
        if part not in BASELINES:
            raise BadInput(f"--baselines: unknown baseline {part!r} (known: {', '.join(BASELINES)}, none)")
        if part not in names:
            names.append(part)
    return tuple(names)


def make_baseline(name: str, prepared: Any, inputs: Sequence[Any]) -> Callable[[], Any]:
    """A zero-argument callable running baseline `name` of `prepared.reference_model` on `inputs`.

    `prepared` is a `kernelopt.harness.binding.Prepared`: eager is its reference
    call, exactly as verification runs it. For `compile`, the first call (which
    compiles) happens here, so a compile error surfaces now and compilation never
    counts as warm-up time.
    """
    if name == "eager":
        return prepared.bound_call("reference", list(inputs))
    if name == "compile":
        import torch

        compiled = torch.compile(prepared.reference_model)
        args = tuple(inputs)

        def run() -> Any:
            return compiled(*args)

        run()
        return run
    raise ValueError(f"unknown baseline {name!r}")
