"""Verification: is the candidate correct, over several seeds, and not cheating?

`verify()` (parent side) runs `child_verify` in a child process through
`run_in_child`; a hang, crash or compile failure fails the candidate, never the
caller. Inside the child, each trial draws fresh inputs with its own seed,
computes the reference on clones of them, then runs the candidate with its memory
poisoned (`kernelopt.harness.poison`) and checks, in this order:

  hidden_stream     outputs change after a device-wide synchronize (CUDA only)
  shape_mismatch    an output is missing or has another shape
  unwritten_output  an output element still holds the poison pattern
  cached_result     the output equals the previous trial's while the reference changed
  modified_input    an input differs from its clone after the call
  nonfinite         NaN/Inf where the reference is finite
  incorrect         |out - ref| > atol + rtol * |ref| anywhere (or another dtype)

Whether a GPU is used is decided in the child (the parent never imports torch):
without CUDA the child sets TRITON_INTERPRET=1 before anything imports Triton and
runs on CPU tensors, and a CUDA candidate is compiled with nvcc where it exists
and reported as `needs_gpu`; with CUDA it sets TRITON_INTERPRET=0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.harness.isolate import ChildError, run_in_child
from kernelopt.models.harness import Candidate, FailureReason, OutputCheck, Problem, Trial, Verification

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_TRIALS = 3
# dtype of the outputs -> default atol = rtol
DEFAULT_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
NVCC_TIMEOUT_S = 240.0


def default_tolerance(dtype: str | None) -> float:
    return DEFAULT_TOLERANCE.get(dtype or "fp32", DEFAULT_TOLERANCE["fp32"])


def resolve_tolerances(problem: Problem, dtype: str | None, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """Flags win over the problem's `atol`/`rtol` constants, which win over the dtype default."""
    base = default_tolerance(dtype)
    a = atol if atol is not None else problem.atol if problem.atol is not None else base
    r = rtol if rtol is not None else problem.rtol if problem.rtol is not None else base
    return float(a), float(r)


def verify(
    problem: Problem,
    candidate: Candidate,
    *,
    trials: int = DEFAULT_TRIALS,
    atol: float | None = None,
    rtol: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    device: str | None = None,
    seed: int = 0,
) -> Verification:
    """Verify `candidate` against `problem` in a child process.

    Returns a Verification (passed or not, with a FailureReason); raises BadInput
    when the problem itself is broken (its import, `Model` or `get_inputs()` fails).
    `device=None` lets the child pick cuda when available, else the CPU interpreter.
    """
    if trials < 1:
        raise BadInput(f"--trials {trials}: need at least 1")
    args = {
        "problem": problem.model_dump(mode="json"),
        "candidate": candidate.model_dump(mode="json"),
        "trials": trials,
        "atol": atol,
        "rtol": rtol,
        "device": device,
        "seed": seed,
    }
    res = run_in_child("verify", args, timeout_s=timeout_s)
    if res.ok and res.value is not None:
        return Verification.model_validate(res.value)
    if res.error_kind == "bad_input":
        raise BadInput(res.message or f"{problem.path}: broken problem")
    reason: FailureReason = "timeout" if res.error_kind == "timeout" else (
        "compile" if res.error_kind == "compile" else "runtime"
    )
    message = res.message or "failed"
    if res.error_kind == "timeout" and not Path("/dev/nvidiactl").exists():
        message += " (no GPU here: full-size problems are slow in the Triton interpreter; use --set for small shapes)"
    if res.error_kind == "crash" and res.stderr_tail.strip():
        message += ": " + res.stderr_tail.strip().splitlines()[-1][:300]
    a, r = resolve_tolerances(problem, problem.dtype, atol, rtol)
    return Verification(
        problem=problem,
        candidate=candidate,
        passed=False,
        reason=reason,
        message=message,
        device=device or "unknown",
        atol=a,
        rtol=r,
    )


# --- child side ------------------------------------------------------------------------


def _dtype_key(t: Any) -> str | None:
    import torch

    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(getattr(t, "dtype", None))


def _outputs_dtype(outputs: list[Any]) -> str | None:
    """The least precise floating dtype among the reference outputs (sets the tolerance)."""
    keys = [_dtype_key(o) for o in outputs]
    for key in ("fp16", "bf16", "fp32"):
        if key in keys:
            return key
    return None


def _same(a: Any, b: Any) -> bool:
    """Bitwise-equal values (NaN equals NaN) and same shape."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(torch.equal(a.nan_to_num(0.0, 1.0, -1.0), b.nan_to_num(0.0, 1.0, -1.0))) and bool(
                torch.equal(a.isnan(), b.isnan())
            )
        return bool(torch.equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def compare_output(index: int, out: Any, ref: Any, atol: float, rtol: float) -> tuple[OutputCheck, Any]:
    """One output against the reference; returns the check and the poison mask (or None)."""
    import torch

    from kernelopt.harness.poison import poison_mask

    ref_t = torch.as_tensor(ref)
    if not isinstance(out, torch.Tensor):
        try:
            out = torch.as_tensor(out, device=ref_t.device)
        except Exception:  # noqa: BLE001
            return OutputCheck(
                index=index, shape=[], dtype=type(out).__name__, ref_shape=list(ref_t.shape),
                ref_dtype=str(ref_t.dtype).replace("torch.", ""), passed=False,
            ), None
    check: dict[str, Any] = {
        "index": index,
        "shape": list(out.shape),
        "dtype": str(out.dtype).replace("torch.", ""),
        "ref_shape": list(ref_t.shape),
        "ref_dtype": str(ref_t.dtype).replace("torch.", ""),
    }
    if out.shape != ref_t.shape:
        return OutputCheck(**check, passed=False), None
    poisoned = poison_mask(out) if out.is_floating_point() else None
    o = out.detach().to("cpu", torch.float64)
    r = ref_t.detach().to("cpu", torch.float64)
    out_finite, ref_finite = torch.isfinite(o), torch.isfinite(r)
    bad_nonfinite = ~out_finite & ref_finite
    close = torch.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True)
    mismatch = ~close | bad_nonfinite
    both_finite = out_finite & ref_finite
    max_abs = ref_norm = diff_norm = 0.0
    if bool(both_finite.any()):
        diff = (o[both_finite] - r[both_finite]).abs()
        max_abs = float(diff.max())
        ref_norm = float(torch.linalg.vector_norm(r[both_finite]))
        diff_norm = float(torch.linalg.vector_norm(diff))
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    count = int(mismatch.sum())
    first = None
    if count:
        flat = int(torch.nonzero(mismatch.reshape(-1))[0])
        first = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(mismatch.shape))] if mismatch.dim() else []
    # Element-wise closeness alone lets a small systematic error through wherever |ref| is
    # near atol: an off-by-one softmax denominator over 4096 columns passed atol=rtol=1e-4
    # on an H200 with every element "close". The relative L2 error over the whole output
    # must stay within rtol as well.
    passed = count == 0 and out.dtype == ref_t.dtype and rel_l2 <= rtol
    return OutputCheck(
        **check,
        max_abs_error=max_abs,
        rel_l2_error=rel_l2,
        mismatches=count,
        first_mismatch=first,
        nonfinite=int(bad_nonfinite.sum()),
        passed=passed,
    ), poisoned


def _describe_check(c: OutputCheck, atol: float, rtol: float) -> str:
    where = f" (first at {c.first_mismatch})" if c.first_mismatch is not None else ""
    total = 1
    for d in c.shape:
        total *= d
    return (
        f"output {c.index}: {c.mismatches} of {total} elements off by more than atol={atol:g} + rtol={rtol:g}*|ref|"
        f"{where}; max abs error {c.max_abs_error:.3g}, relative L2 error {c.rel_l2_error:.3g}"
    )


def _candidate_reason(exc: ChildError) -> FailureReason:
    return "compile" if exc.kind == "compile" else "runtime"


def _judge_trial(
    prepared: Any,
    seed: int,
    atol: float,
    rtol: float,
    previous: tuple[list[Any], list[Any]] | None,
) -> tuple[Trial, tuple[list[Any], list[Any]] | None]:
    """Run one trial; returns it and (candidate outputs, reference outputs) for the next one."""
    import torch

    from kernelopt.harness.binding import clone_values
    from kernelopt.harness.poison import poison_cuda_allocator, poisoned_factories

    cuda = prepared.device.startswith("cuda")
    inputs = prepared.make_inputs(seed)
    ref_out = prepared.reference(clone_values(inputs))
    if cuda:
        torch.cuda.synchronize()
    inputs_before = clone_values(inputs)
    if cuda:
        poison_cuda_allocator()
    try:
        with poisoned_factories():
            out = prepared.candidate(inputs)
    except ChildError as exc:
        return Trial(seed=seed, passed=False, reason=_candidate_reason(exc), message=str(exc)), None

    def fail(reason: FailureReason, message: str, checks: list[OutputCheck] | None = None) -> tuple[Trial, Any]:
        return Trial(seed=seed, passed=False, reason=reason, message=message, outputs=checks or []), (out, ref_out)

    if cuda:
        # Sync only the current stream first: work left on another stream shows up
        # as outputs that still change after the device-wide synchronize.
        try:
            torch.cuda.current_stream().synchronize()
            snapshot = clone_values(out)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - e.g. an illegal memory access surfaces here
            return Trial(seed=seed, passed=False, reason="runtime", message=f"{type(exc).__name__}: {exc}"), None
        changed = [i for i, (a, b) in enumerate(zip(snapshot, out)) if not _same(a, b)]
        if changed:
            return fail("hidden_stream", f"output {changed[0]} changed after torch.cuda.synchronize(): "
                        "work was left running on another stream")
    if len(out) != len(ref_out):
        return fail("shape_mismatch", f"the candidate returned {len(out)} outputs, the reference {len(ref_out)}")
    checks: list[OutputCheck] = []
    poison_counts: list[int] = []
    for i, (o, r) in enumerate(zip(out, ref_out)):
        check, poisoned = compare_output(i, o, r, atol, rtol)
        checks.append(check)
        poison_counts.append(int(poisoned.sum()) if poisoned is not None else 0)
    for c in checks:
        if c.shape != c.ref_shape or (c.max_abs_error is None and not c.passed):
            return fail("shape_mismatch", f"output {c.index}: shape {c.shape}, the reference {c.ref_shape}", checks)
    for c, n in zip(checks, poison_counts):
        if n:
            return fail("unwritten_output", f"output {c.index}: {n} elements were never written "
                        "(they still hold the NaN poison the memory was filled with)", checks)
    if previous is not None and any(not c.passed for c in checks):
        prev_out, prev_ref = previous
        if len(prev_out) == len(out) and all(_same(a, b) for a, b in zip(out, prev_out)) and not all(
            _same(a, b) for a, b in zip(ref_out, prev_ref)
        ):
            return fail("cached_result", "the outputs equal the previous trial's although the inputs and the "
                        "reference changed: a result cached from an earlier call", checks)
    modified = [i for i, (a, b) in enumerate(zip(inputs, inputs_before)) if not _same(a, b)]
    if modified:
        return fail("modified_input", f"input {modified[0]} was modified by the candidate", checks)
    for c in checks:
        if c.nonfinite:
            return fail("nonfinite", f"output {c.index}: {c.nonfinite} NaN/Inf elements where the reference is finite",
                        checks)
    for c in checks:
        if not c.passed:
            if c.mismatches == 0 and c.dtype != c.ref_dtype:
                return fail("incorrect", f"output {c.index}: dtype {c.dtype}, the reference {c.ref_dtype}", checks)
            if c.mismatches == 0:
                return fail("incorrect", f"output {c.index}: relative L2 error {c.rel_l2_error:.3g} exceeds "
                            f"rtol={rtol:g} although every element is within atol + rtol*|ref| "
                            f"(max abs error {c.max_abs_error:.3g}): a small error on every element", checks)
            return fail("incorrect", _describe_check(c, atol, rtol), checks)
    return Trial(seed=seed, passed=True, outputs=checks), (out, ref_out)


def compile_cuda_without_gpu(candidate: Candidate) -> tuple[bool, str]:
    """Compile a CUDA candidate's CUDA source strings with nvcc (no GPU needed).

    Returns (compiled, message). Used when the machine has no CUDA device: the
    candidate cannot run, but a compile error is still worth reporting.
    """
    from kernelopt.problem import cuda_sources

    nvcc = shutil.which("nvcc")
    sources = cuda_sources(candidate.path)
    if not sources:
        return False, "no CUDA source string (with __global__) found to compile"
    if nvcc is None:
        return False, "nvcc not found, so the CUDA source was not compiled"
    import torch.utils.cpp_extension as cpp

    includes = [*cpp.include_paths(), sysconfig.get_paths()["include"]]
    with tempfile.TemporaryDirectory(prefix="kernelopt-nvcc-") as tmp:
        for index, source in enumerate(sources):
            src = Path(tmp) / f"source{index}.cu"
            src.write_text(source)
            # Device code only (--ptx): host compilation of the torch headers would
            # double the time and proves nothing about the kernel.
            cmd = [nvcc, "-std=c++17", "--ptx", "-w", str(src), "-o", str(Path(tmp) / f"source{index}.ptx")]
            for inc in includes:
                cmd += ["-I", inc]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                return False, f"nvcc did not finish within {NVCC_TIMEOUT_S:g} s"
            if proc.returncode != 0:
                errors = [line for line in proc.stderr.splitlines() if "error" in line]
                detail = (errors[0] if errors else proc.stderr.strip()[-300:]).replace(str(src), f"<cuda source {index}>")
                raise ChildError("compile", f"nvcc failed: {detail}")
    return True, f"compiled {len(sources)} CUDA source(s) with nvcc"


def child_verify(args: dict[str, Any]) -> dict[str, Any]:
    """CHILD_MODES["verify"]: runs in the child; returns a Verification as JSON data."""
    problem = Problem.model_validate(args["problem"])
    candidate = Candidate.model_validate(args["candidate"])
    import torch

    device = args.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    interpreter = not device.startswith("cuda")
    # Must be set before the candidate's @triton.jit runs (the decorator reads it);
    # on a GPU it is forced off, whatever the caller's environment says.
    os.environ["TRITON_INTERPRET"] = "1" if interpreter else "0"
    if not interpreter:
        # The fp32 reference must be fp32: TF32 matmuls/convolutions would miss 1e-4.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    trials = int(args.get("trials") or DEFAULT_TRIALS)
    base_seed = int(args.get("seed") or 0)

    def result(passed: bool, reason: FailureReason | None, message: str | None, atol: float, rtol: float,
               trial_list: list[Trial]) -> dict[str, Any]:
        return Verification(
            problem=problem, candidate=candidate, passed=passed, reason=reason, message=message,
            device=_device_name(device), interpreter=interpreter and candidate.backend == "triton",
            atol=atol, rtol=rtol, trials=trial_list,
        ).model_dump(mode="json")

    if candidate.backend == "cuda" and not device.startswith("cuda"):
        a, r = resolve_tolerances(problem, problem.dtype, args.get("atol"), args.get("rtol"))
        try:
            _, note = compile_cuda_without_gpu(candidate)
        except ChildError as exc:
            return result(False, "compile", str(exc), a, r, [])
        return result(False, "needs_gpu", f"a CUDA candidate needs a GPU to run; {note}", a, r, [])

    from kernelopt.harness.binding import prepare

    try:
        prepared = prepare(problem, candidate, device=device, seed=base_seed)
    except ChildError as exc:
        a, r = resolve_tolerances(problem, problem.dtype, args.get("atol"), args.get("rtol"))
        return result(False, _candidate_reason(exc), str(exc), a, r, [])
    # The tolerance follows the outputs' dtype unless --dtype or the flags say otherwise.
    probe = prepared.reference(prepared.make_inputs(base_seed))
    atol, rtol = resolve_tolerances(problem, problem.dtype or _outputs_dtype(probe), args.get("atol"), args.get("rtol"))
    del probe
    trial_list: list[Trial] = []
    previous = None
    for t in range(trials):
        seed = base_seed + 1 + t
        trial, previous = _judge_trial(prepared, seed, atol, rtol, previous)
        trial_list.append(trial)
        if not trial.passed:
            return result(False, trial.reason, f"trial {t + 1} (seed {seed}): {trial.message}", atol, rtol, trial_list)
    return result(True, None, None, atol, rtol, trial_list)


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"{device} ({torch.cuda.get_device_name()})"
    return f"{device} (Triton interpreter)"

