"""Verification: is the candidate correct, over several seeds, and not cheating?

`verify()` is `evaluate(problem, [candidate], time=False)` reduced to its
Verification. The verdicts themselves are computed here, by `judge_trial`, in the
verifier worker (`kernelopt.harness.worker`), a process that never runs candidate
code: the runner writes the candidate's outputs into the shared arena, and the
verifier compares them with the reference outputs it computed before any candidate
was imported. Each trial draws fresh inputs with its own seed and checks, in order:

  hidden_stream     outputs change after a device-wide synchronize (CUDA only)
  shape_mismatch    an output is missing or has another shape
  unwritten_output  an output element still holds the poison pattern
  cached_result     the output equals the previous trial's while the reference changed
  modified_input    an input differs from a fresh copy after the call
  nonfinite         NaN/Inf where the reference is finite
  incorrect         |out - ref| > atol + rtol * |ref| anywhere, a relative L2 error
                    above rtol, or another dtype
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sysconfig
import time
from pathlib import Path
from typing import Any

from kernelopt.errors import BadInput
from kernelopt.harness.isolate import ChildError
from kernelopt.models.harness import Candidate, FailureReason, OutputCheck, Problem, Trial, Verification

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_TRIALS = 3
# dtype of the outputs -> default atol = rtol
DEFAULT_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}
NVCC_TIMEOUT_S = 240.0
# Elements compared per chunk: bounds the float64 scratch memory of a comparison (512 MiB per operand).
COMPARE_CHUNK = 1 << 26


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
    """Verify `candidate` against `problem` (one evaluation without timing).

    Returns a Verification (passed or not, with a FailureReason); raises BadInput
    when the problem itself is broken (its import, `Model` or `get_inputs()` fails).
    `device=None` picks the first GPU when there is one, else the CPU interpreter.
    """
    from kernelopt.harness.evaluate import evaluate

    if trials < 1:
        raise BadInput(f"--trials {trials}: need at least 1")
    (ev,) = evaluate(problem, [candidate], time=False, trials=trials, atol=atol, rtol=rtol, timeout_s=timeout_s,
                     devices=[device] if device else None, seed=seed)
    return as_verification(ev)


def verify_many(
    problem: Problem,
    candidates: list[Candidate],
    *,
    trials: int = DEFAULT_TRIALS,
    atol: float | None = None,
    rtol: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolate: str = "worker",
    progress: Any = None,
    seed: int = 0,
) -> list[Verification]:
    """Verify several candidates through one engine (inputs and references built once); results in order."""
    from kernelopt.harness.evaluate import evaluate

    evs = evaluate(problem, candidates, time=False, trials=trials, atol=atol, rtol=rtol, timeout_s=timeout_s,
                   isolate=isolate, progress=progress, seed=seed)  # type: ignore[arg-type]
    return [as_verification(ev) for ev in evs]


def as_verification(ev: Any) -> Verification:
    """The Verification of an Evaluation; a failure before any trial becomes a failed Verification."""
    if ev.verification is not None:
        if ev.failure is None:
            return ev.verification
        update: dict[str, Any] = {"failure": ev.failure}
        if ev.verification.passed or ev.verification.reason is None:  # e.g. tampered after correct trials
            update.update(passed=False, reason=ev.failure.reason, message=ev.failure.message)
        return ev.verification.model_copy(update=update)
    a, r = resolve_tolerances(ev.problem, ev.problem.dtype, None, None)
    failure = ev.failure
    return Verification(
        problem=ev.problem, candidate=ev.candidate, passed=failure is None,
        reason=failure.reason if failure else None, message=failure.message if failure else None,
        device=ev.device or "unknown", interpreter=ev.interpreter, atol=a, rtol=r, failure=failure,
    )


# --- the verdicts (verifier process) ---------------------------------------------------------


def _dtype_key(t: Any) -> str | None:
    import torch

    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(getattr(t, "dtype", None))


def outputs_dtype(outputs: list[Any]) -> str | None:
    """The least precise floating dtype among the reference outputs (sets the tolerance)."""
    keys = [_dtype_key(o) for o in outputs]
    for key in ("fp16", "bf16", "fp32"):
        if key in keys:
            return key
    return None


def fingerprint(values: list[Any]) -> tuple[Any, ...]:
    """A cheap identity of tensors' bytes (for cached_result and the determinism check).

    Shape, dtype and two position-weighted sums over the bytes as int32 words (bytes where
    the size is not a multiple of 4), computed in chunks so a 4 GB tensor needs no 32 GB copy.
    """
    import torch

    out: list[Any] = []
    for v in values:
        if not isinstance(v, torch.Tensor):
            out.append(repr(v))
            continue
        flat = v.detach().reshape(-1)
        words = flat.view(torch.uint8) if flat.numel() else flat
        if words.numel() % 4 == 0 and words.numel():
            words = words.view(torch.int32)
        s1 = s2 = 0
        for start in range(0, words.numel(), COMPARE_CHUNK):
            chunk = words[start : start + COMPARE_CHUNK].to(torch.int64)
            weight = torch.arange(start, start + chunk.numel(), device=chunk.device, dtype=torch.int64) % 65521 + 1
            s1 += int(chunk.sum())
            s2 += int((chunk * weight).sum())
        out.append((tuple(v.shape), str(v.dtype), s1, s2))
    return tuple(out)


def same_values(a: Any, b: Any) -> bool:
    """Bitwise-equal tensors (NaN equals NaN), same shape and dtype; == for anything else."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))) if a.numel() else True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def compare_output(index: int, out: Any, ref: Any, atol: float, rtol: float) -> tuple[OutputCheck, int]:
    """One output against the reference, on the reference's device, in chunks.

    Returns the check and the number of elements that still hold the poison pattern.
    """
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
            ), 0
    check: dict[str, Any] = {
        "index": index,
        "shape": list(out.shape),
        "dtype": str(out.dtype).replace("torch.", ""),
        "ref_shape": list(ref_t.shape),
        "ref_dtype": str(ref_t.dtype).replace("torch.", ""),
    }
    if out.shape != ref_t.shape:
        return OutputCheck(**check, passed=False), 0
    o_all = out.detach().reshape(-1).to(ref_t.device)
    r_all = ref_t.detach().reshape(-1)
    n = r_all.numel()
    count = nonfinite = poisoned = 0
    first: int | None = None
    max_abs = ref_sq = diff_sq = 0.0
    for start in range(0, n, COMPARE_CHUNK):
        o_raw = o_all[start : start + COMPARE_CHUNK]
        if o_raw.is_floating_point():
            poisoned += int(poison_mask(o_raw).sum())
        o = o_raw.to(torch.float64)
        r = r_all[start : start + COMPARE_CHUNK].to(torch.float64)
        out_finite, ref_finite = torch.isfinite(o), torch.isfinite(r)
        bad_nonfinite = ~out_finite & ref_finite
        mismatch = ~torch.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True) | bad_nonfinite
        chunk_count = int(mismatch.sum())
        if chunk_count and first is None:
            first = start + int(torch.nonzero(mismatch)[0])
        count += chunk_count
        nonfinite += int(bad_nonfinite.sum())
        both = out_finite & ref_finite
        if bool(both.any()):
            diff = (o[both] - r[both]).abs()
            max_abs = max(max_abs, float(diff.max()))
            ref_sq += float((r[both] * r[both]).sum())
            diff_sq += float((diff * diff).sum())
    ref_norm, diff_norm = ref_sq**0.5, diff_sq**0.5
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    first_index = None
    if first is not None:
        first_index = [int(i) for i in torch.unravel_index(torch.tensor(first), tuple(ref_t.shape))] if ref_t.dim() else []
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
        first_mismatch=first_index,
        nonfinite=nonfinite,
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


def judge_trial(
    seed: int,
    returned: list[Any],
    outputs: list[Any],
    refs: list[Any],
    inputs_after: list[Any],
    inputs_fresh: list[Any],
    atol: float,
    rtol: float,
    *,
    changed_after_sync: int | None = None,
    previous: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None,
) -> tuple[Trial, tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """The verdict of one trial, from what the runner wrote into the arena.

    `returned`: the runner's OutputInfo per returned value (shape/dtype as returned,
    and whether it was copied); `outputs`: the arena views of the outputs, or the
    runner's scalars; `refs`: the reference outputs; `inputs_after`: the arena's
    inputs after the call; `inputs_fresh`: the same seed's inputs, freshly built.
    `previous` is the last trial's (output, reference) fingerprints. Returns the
    Trial and this trial's fingerprints.
    """
    prints = (fingerprint(outputs), fingerprint(refs))

    def fail(reason: FailureReason, message: str, checks: list[OutputCheck] | None = None) -> tuple[Trial, Any]:
        return Trial(seed=seed, passed=False, reason=reason, message=message, outputs=checks or []), prints

    if changed_after_sync is not None:
        return fail("hidden_stream", f"output {changed_after_sync} changed after torch.cuda.synchronize(): "
                    "work was left running on another stream")
    if len(returned) != len(refs):
        return fail("shape_mismatch", f"the candidate returned {len(returned)} outputs, the reference {len(refs)}")
    checks: list[OutputCheck] = []
    poison_counts: list[int] = []
    for i, (info, o, r) in enumerate(zip(returned, outputs, refs)):
        ref_shape = list(getattr(r, "shape", []))
        ref_dtype = str(getattr(r, "dtype", type(r).__name__)).replace("torch.", "")
        if not getattr(info, "copied", True):
            shape = info.shape if info.shape is not None else []
            checks.append(OutputCheck(index=i, shape=shape, dtype=info.dtype or "?", ref_shape=ref_shape,
                                      ref_dtype=ref_dtype, passed=False))
            poison_counts.append(0)
            continue
        check, poisoned = compare_output(i, o, r, atol, rtol)
        checks.append(check)
        poison_counts.append(poisoned)
    for c in checks:
        if c.shape != c.ref_shape:
            return fail("shape_mismatch", f"output {c.index}: shape {c.shape}, the reference {c.ref_shape}", checks)
        if c.max_abs_error is None and not c.passed:
            return fail("incorrect", f"output {c.index}: dtype {c.dtype}, the reference {c.ref_dtype}", checks)
    for c, n in zip(checks, poison_counts):
        if n:
            return fail("unwritten_output", f"output {c.index}: {n} elements were never written "
                        "(they still hold the NaN poison the memory was filled with)", checks)
    if previous is not None and any(not c.passed for c in checks):
        prev_out, prev_ref = previous
        if prints[0] == prev_out and prints[1] != prev_ref:
            return fail("cached_result", "the outputs equal the previous trial's although the inputs and the "
                        "reference changed: a result cached from an earlier call", checks)
    modified = [i for i, (a, b) in enumerate(zip(inputs_after, inputs_fresh)) if not same_values(a, b)]
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
    return Trial(seed=seed, passed=True, outputs=checks), prints


def compile_cuda_without_gpu(candidate: Candidate, timeout_s: float | None = None) -> tuple[bool, str]:
    """Compile a CUDA candidate's CUDA source strings with nvcc (no GPU needed).

    Returns (compiled, message). Used when the machine has no CUDA device: the
    candidate cannot run, but a compile error is still worth reporting. All of it is
    bounded by `timeout_s` (the evaluation's --timeout; at most NVCC_TIMEOUT_S), and
    nvcc's whole tree (cicc, ptxas) is killed at the limit.
    """
    from kernelopt.problem import cuda_sources

    nvcc = shutil.which("nvcc")
    sources = cuda_sources(candidate.path)
    if not sources:
        return False, "no CUDA source string (with __global__) found to compile"
    if nvcc is None:
        return False, "nvcc not found, so the CUDA source was not compiled"
    import torch.utils.cpp_extension as cpp

    from kernelopt.harness.sandbox import make_tmpdir, remove_tmpdir

    includes = [*cpp.include_paths(), sysconfig.get_paths()["include"]]
    limit = min(NVCC_TIMEOUT_S, timeout_s) if timeout_s else NVCC_TIMEOUT_S
    deadline = time.monotonic() + limit
    # In the verifier's own dir (kernelopt-child-verifier-*), which goes with it even when it is
    # SIGKILLed mid-compile: no copy of the candidate's source is left in the user's temp dir.
    tmp = make_tmpdir("nvcc")
    try:
        for index, source in enumerate(sources):
            src = Path(tmp) / f"source{index}.cu"
            src.write_text(source)
            # Device code only (--ptx): host compilation of the torch headers would
            # double the time and proves nothing about the kernel.
            cmd = [nvcc, "-std=c++17", "--ptx", "-w", str(src), "-o", str(Path(tmp) / f"source{index}.ptx")]
            for inc in includes:
                cmd += ["-I", inc]
            # Its own session, so that the limit kills nvcc's children (cicc, ptxas) too.
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                _, stderr = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return False, f"nvcc did not finish within {limit:g} s"
            if proc.returncode != 0:
                errors = [line for line in stderr.splitlines() if "error" in line]
                detail = (errors[0] if errors else stderr.strip()[-300:]).replace(str(src), f"<cuda source {index}>")
                raise ChildError("compile", f"nvcc failed: {detail}")
    finally:
        remove_tmpdir(tmp)
    return True, f"compiled {len(sources)} CUDA source(s) with nvcc"
