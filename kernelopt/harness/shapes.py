"""Does a candidate hold at its problem's other shapes? (`check --shapes auto`, the loop's winner)

A kernel can be right at the shape it was written for and wrong at another: a tail
mask left out because the declared sizes are multiples of the block, a size baked in.
Verification at one shape cannot see that, so the winner of a run (and a candidate
under `kernelopt check --shapes auto`) is verified again, through the one engine, at:

- the problem's `SMALL` shape, where it declares one (its module-level `SMALL` dict);
- a *ragged* shape: each shape constant moved to an odd nearby value (n -> n - 1 for an
  even n, n + 2 for an odd one), so no size is a multiple of a power-of-two block.

The shape constants are the keys of `SMALL`; a problem without `SMALL` has no declared
shape constants, so its integer constants of 8 or more stand in (sizes, not a window of
3 or an axis of 1). Each check is one engine at that shape: the cost of one more
verification per shape, not a search.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kernelopt.models.harness import Candidate, Problem, ShapeCheck, Verification

# A problem without SMALL: integer constants from this size up are taken for sizes.
MIN_SIZE_WITHOUT_SMALL = 8


def shape_constants(problem: Problem) -> list[str]:
    """The names of the problem's shape constants (the keys of SMALL, else its integer sizes)."""
    from kernelopt.problem import small_shape

    small = small_shape(problem.path)
    if small:
        return [name for name in small if name in problem.constants]
    return [name for name, value in problem.constants.items()
            if type(value) is int and value >= MIN_SIZE_WITHOUT_SMALL]


def ragged(value: int) -> int:
    """An odd size next to `value`: no power-of-two block divides it."""
    return value - 1 if value % 2 == 0 else value + 2


def other_shapes(problem: Problem) -> list[tuple[str, dict[str, Any]]]:
    """(label, constants to set) for each shape the candidate is checked at besides its own."""
    from kernelopt.problem import small_shape

    out: list[tuple[str, dict[str, Any]]] = []
    small = small_shape(problem.path)
    if small and any(str(problem.constants.get(k)) != v for k, v in small.items()):
        out.append(("SMALL", dict(small)))
    names = [n for n in shape_constants(problem) if type(problem.constants.get(n)) is int]
    if names:
        out.append(("ragged", {n: ragged(problem.constants[n]) for n in names}))
    return out


def check_shapes(
    problem: Problem,
    candidate: Candidate,
    *,
    trials: int = 2,
    timeout_s: float = 300.0,
    seed: int = 0,
    devices: Sequence[str] | None = None,
    progress: Callable[[Any], None] | None = None,
    isolate: str = "worker",
) -> list[ShapeCheck]:
    """Verify `candidate` at each of `other_shapes(problem)` (one engine per shape, through
    `kernelopt.harness.evaluate`); a problem that cannot take a shape is reported, not raised.
    `isolate` is the run's: the winner of a sandboxed run is run sandboxed here too.

    The shapes' engines run at the same time: each is mostly its own start (a verifier process,
    the inputs and references at that shape, a runner), nothing is timed, and one shape's
    verdict never depends on another's. The checks come back in `other_shapes` order."""
    from kernelopt.harness.evaluate import in_threads, visible_devices

    shapes = other_shapes(problem)
    checks: list[ShapeCheck | None] = [None] * len(shapes)
    # One candidate, one device: an engine over every GPU would start a verifier on each for nothing.
    one_device = list(devices or visible_devices())[:1]

    def check(i: int) -> None:
        label, constants = shapes[i]
        checks[i] = _check_at(problem, candidate, label, constants, trials=trials, timeout_s=timeout_s, seed=seed,
                              devices=one_device, progress=progress, isolate=isolate)

    in_threads(check, range(len(shapes)))
    return [c for c in checks if c is not None]


def _check_at(problem: Problem, candidate: Candidate, label: str, constants: dict[str, Any], *, trials: int,
              timeout_s: float, seed: int, devices: list[str], progress: Callable[[Any], None] | None,
              isolate: str) -> ShapeCheck:
    from kernelopt.errors import BadInput
    from kernelopt.harness.evaluate import evaluate
    from kernelopt.harness.verify import as_verification
    from kernelopt.problem import load_problem

    overrides = {**{k: str(v) for k, v in problem.overrides.items()}, **{k: str(v) for k, v in constants.items()}}
    try:
        at = load_problem(problem.path, overrides, problem.dtype)
        (ev,) = evaluate(at, [candidate], time=False, trials=trials, timeout_s=timeout_s, seed=seed,
                         devices=devices, progress=progress, isolate=isolate)
    except BadInput as exc:  # the problem itself does not build at this shape: no verdict on the kernel
        return ShapeCheck(label=label, overrides=constants, passed=True, checked=False,
                          message=f"the problem does not build at this shape ({exc})")
    v = as_verification(ev)
    return ShapeCheck(label=label, overrides=constants, passed=v.passed, reason=v.reason,
                      message=None if v.passed else v.message)


def with_shapes(problem: Problem, verifications: Sequence[Verification], *, trials: int = 2,
                timeout_s: float = 300.0, seed: int = 0, progress: Callable[[Any], None] | None = None,
                isolate: str = "worker") -> list[Verification]:
    """`kernelopt check --shapes auto`: each candidate that passed at its shape, checked at the
    problem's other shapes; one that fails there is no longer `passed` (reason and message say where)."""
    out: list[Verification] = []
    for v in verifications:
        if not v.passed:
            out.append(v)
            continue
        checks = check_shapes(problem, v.candidate, trials=trials, timeout_s=timeout_s, seed=seed, progress=progress,
                              isolate=isolate)
        failed = next((c for c in checks if not c.passed), None)
        update: dict[str, Any] = {"shapes": checks}
        if failed is not None:
            update.update(passed=False, reason=failed.reason, message=f"correct at the given shape; {describe(checks)}")
        out.append(v.model_copy(update=update))
    return out


def describe(checks: Sequence[ShapeCheck]) -> str:
    """One line: 'holds at SMALL (ROWS=3, COLS=300), ragged (...)' or what failed where."""
    def shape(c: ShapeCheck) -> str:
        return f"{c.label} ({', '.join(f'{k}={v}' for k, v in c.overrides.items())})" if c.overrides else c.label

    failed = [c for c in checks if not c.passed]
    held = [c for c in checks if c.passed and c.checked]
    skipped = [c for c in checks if not c.checked]
    parts = []
    if failed:
        parts.append("FAILS at " + "; ".join(f"{shape(c)}: {c.reason}" + (f" ({_first(c.message)})" if c.message else "")
                                            for c in failed))
    if held:
        parts.append("holds at " + ", ".join(shape(c) for c in held))
    if skipped:
        parts.append("not checked at " + ", ".join(shape(c) for c in skipped))
    return "; ".join(parts) or "no other shape to check"


def _first(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 160 else line[:157] + "..."
