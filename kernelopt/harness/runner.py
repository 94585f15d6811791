"""The candidate runner: the only process that imports and runs candidate code.

A verifier (`kernelopt.harness.worker`) starts it as
`python -m kernelopt.harness.runner READ_FD WRITE_FD` and sends it RunnerRequests:
init (the problem and the shared arena), then per candidate load -> trial ... ->
time -> unload. The runner answers each with a RunnerReply and judges nothing:
it copies what the candidate returned into the arena, and the verifier, which
never ran candidate code, compares. After every request it reports whether the
functions its own copying and timing rely on are still the originals (a candidate
that patches `torch.Tensor.copy_` or the timer is `tampered`) and whether the
device still works; either way the verifier then replaces this process.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable, NoReturn

from kernelopt.harness.protocol import (
    CallRequest,
    Channel,
    LoadRequest,
    OutputInfo,
    ProtocolError,
    RunnerInit,
    RunnerReply,
    TimeRequest,
    TrialRequest,
    UnloadRequest,
    parse_runner_request,
)

# What the runner's own copying, syncing and timing call: a candidate must not replace them.
_GUARDED = (
    ("torch", "empty"), ("torch", "empty_like"), ("torch", "equal"), ("torch", "sub"), ("torch", "allclose"),
    ("torch", "isclose"), ("torch.Tensor", "copy_"), ("torch.Tensor", "clone"), ("torch.Tensor", "__sub__"),
    ("torch.Tensor", "__eq__"), ("torch.Tensor", "view"), ("torch.Tensor", "reshape"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "Event"), ("torch.cuda", "current_stream"),
    ("torch.cuda", "_sleep"), ("torch.cuda.Event", "record"), ("torch.cuda.Event", "elapsed_time"),
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"), ("time", "monotonic_ns"),
    ("time", "time"), ("time", "sleep"), ("os", "write"), ("os", "urandom"), ("secrets", "randbelow"),
    ("kernelopt.harness.timing", "time_callable"), ("kernelopt.harness.timing", "sample_calls"),
    ("kernelopt.harness.timing", "summarize"), ("kernelopt.harness.timing", "launch_guard_us"),
    ("statistics", "median"),
    ("kernelopt.harness.timing", "_sleep_cycles_per_us"), ("kernelopt.harness.timing", "_idle_sync_us"),
    ("kernelopt.harness.timing", "_guard_wait"), ("kernelopt.harness.gpu_guard", "occupying_guard"),
    ("kernelopt.harness.gpu_guard", "LOADED"), ("kernelopt.harness.gpu_guard.OccupyingGuard", "__call__"),
    # What a loaded guard's call reads: its fields (a shrunk grid is the one-block guard again) and the
    # driver call's prototype.
    ("kernelopt.harness.gpu_guard.OccupyingGuard", "launch"), ("kernelopt.harness.gpu_guard.OccupyingGuard", "func"),
    ("kernelopt.harness.gpu_guard.OccupyingGuard", "grid"), ("kernelopt.harness.gpu_guard.OccupyingGuard", "block"),
    ("kernelopt.harness.gpu_guard", "_LAUNCH_KERNEL"),
    ("kernelopt.harness.timing", "l2_flush_bytes"), ("kernelopt.harness.timing", "clearly_slower"),
    # What builds the statistics the runner returns (a replacement could report any trailing time).
    ("kernelopt.harness.timing", "mark_raced"), ("kernelopt.harness.timing", "TimingStats"),
    ("kernelopt.harness.poison", "fill_poison"), ("kernelopt.harness.binding", "as_outputs"),
    ("kernelopt.harness.binding.Prepared", "bound_call"), ("kernelopt.harness.arena.Arena", "view"),
    ("kernelopt.harness.arena", "output_digest"), ("kernelopt.harness.arena", "_device_fingerprint"),
    ("kernelopt.harness.arena", "_plain"),
    # What the digest of a copied output computes with (arena.output_digest).
    ("torch", "randint"), ("torch", "Generator"), ("torch", "zeros"), ("torch", "arange"),
    ("torch.Tensor", "sum"), ("torch.Tensor", "item"), ("torch.Tensor", "__mul__"), ("torch.Tensor", "__iadd__"),
    ("torch.Tensor", "to"), ("torch.Tensor", "contiguous"), ("hashlib", "sha256"),
    ("kernelopt.harness.arena.Arena", "values"), ("kernelopt.harness.protocol.Channel", "send"),
    ("kernelopt.harness.protocol.Channel", "recv_json"),
    # The runner's own handlers and this guard: replacing them switches the checks off.
    ("kernelopt.harness.runner.Runner", "trial"), ("kernelopt.harness.runner.Runner", "time"),
    ("kernelopt.harness.runner.Runner", "call"), ("kernelopt.harness.runner.Runner", "_poison_returned"),
    ("kernelopt.harness.runner.Runner", "health"), ("kernelopt.harness.runner.Runner", "_copy_out"),
    ("kernelopt.harness.runner.Runner", "_after_timed_call"), ("kernelopt.harness.runner.Runner", "_collect_outputs"),
    ("kernelopt.harness.runner.JudgedDraw", "keep"),
    ("kernelopt.harness.runner", "_bytes"), ("kernelopt.harness.runner", "_describe"),
    # Called between a timed call's end event and the next call's start event (the stream's
    # synchronize, the L2 flush): a replacement runs work there that no event sees.
    ("torch.cuda.Stream", "synchronize"), ("torch.Tensor", "zero_"),
    ("kernelopt.harness.runner.Guard", "changed"), ("kernelopt.harness.runner.Guard", "snapshot"),
)


class JudgedDraw:
    """Which call of one timing has its outputs judged: reservoir sampling over the timed calls.

    `keep(timed)` counts one call (after it returned, outside the events) and says whether its
    outputs replace the kept ones. The first call's are kept until a timed call runs (so something
    is judged even if the timing ends early); the t-th timed call replaces them with probability
    1/t (`randbelow(t) == 0`, so the first timed call always does). The kept call is then uniform
    over the timed calls whatever their number, never a warm-up call once one was timed, and it is
    replaced about ln(t) times in t calls. A candidate that returns garbage on a fraction f of its
    timed calls passes with probability 1 - f per timing, however well it predicts when the timing
    ends. `judged` is the kept call's 1-based index over all calls, the warm-up's included.
    """

    def __init__(self, randbelow: Callable[[int], int]) -> None:
        self.randbelow = randbelow
        self.calls = 0
        self.timed = 0
        self.judged: int | None = None

    def keep(self, timed: bool) -> bool:
        self.calls += 1
        if timed:
            self.timed += 1
            kept = self.randbelow(self.timed) == 0
        else:
            kept = self.judged is None
        if kept:
            self.judged = self.calls
        return kept


def _resolve(owner: str) -> Any:
    import importlib

    parts = owner.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(owner)


def _lookup(owner: str, attr: str) -> Any:
    """The object stored under `attr` on `owner` (the class's own entry, not a bound method)."""
    obj = _resolve(owner)
    return obj.__dict__[attr] if attr in getattr(obj, "__dict__", {}) else getattr(obj, attr)


class Guard:
    """The identity of every guarded function, captured before any candidate is imported."""

    def __init__(self) -> None:
        self.originals: dict[str, Any] = {}
        for owner, attr in _GUARDED:
            try:
                self.originals[f"{owner}.{attr}"] = _lookup(owner, attr)
            except (ImportError, AttributeError):
                continue

    def snapshot(self) -> dict[str, int]:
        """id() of each guarded name's object as it is now. The verifier keeps the first
        snapshot (taken before any candidate ran) out of the candidate's reach and compares
        every later one with it: editing `originals` here does not hide a replacement."""
        out = {}
        for name in self.originals:
            owner, _, attr = name.rpartition(".")
            try:
                out[name] = id(_lookup(owner, attr))
            except (ImportError, AttributeError):
                out[name] = 0
        return out

    def changed(self) -> list[str]:
        out = []
        for name, original in self.originals.items():
            owner, _, attr = name.rpartition(".")
            try:
                now = _lookup(owner, attr)
            except (ImportError, AttributeError):
                out.append(name)
                continue
            if now is not original:
                out.append(name)
        return out


class Runner:
    def __init__(self, init: RunnerInit) -> None:
        import torch

        from kernelopt.harness import binding
        from kernelopt.harness.arena import Arena

        self.init = init
        self.device = init.device
        self.cuda = init.device.startswith("cuda")
        self.idle_sync_us: float | None = None
        if self.cuda:
            from kernelopt.harness.sandbox import VISIBLE_VAR
            from kernelopt.harness.timing import _idle_sync_us

            # CUDA initialises here, before any candidate is imported: the GPUs it sees are those
            # its CUDA_VISIBLE_DEVICES named then (the verifier's one, `Verifier._runner_env`),
            # whatever a candidate later writes into os.environ. A runner that sees more refuses
            # to start: work queued on another GPU is work no synchronize of its timer waits for.
            torch.cuda.init()
            if torch.cuda.device_count() != 1:
                raise RuntimeError(f"the runner sees {torch.cuda.device_count()} GPUs "
                                   f"({VISIBLE_VAR}={os.environ.get(VISIBLE_VAR)!r}), not its verifier's one only")
            torch.cuda.set_device(torch.device(init.device))
            # Before any candidate is imported: no thread of one can keep the device busy while it is measured.
            self.idle_sync_us = _idle_sync_us(init.device)
            # The launch guard's kernel too: loaded now, its handle is the one the tamper guard records.
            from kernelopt.harness.gpu_guard import occupying_guard

            occupying_guard()
            # The fp32 reference must be fp32 here too: TF32 would change what a candidate's torch calls compute.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        self.arena = Arena.open(init.arena)
        # The problem (trusted) is imported for the reference weights a candidate copies.
        self.prepared = binding.prepare(init.problem, None, device=init.device, seed=init.seed)
        try:
            # Imported with the runner (a one-off cost of the worker), not inside the first candidate's load.
            import triton  # noqa: F401
        except ImportError:
            pass
        self.guard = Guard()
        self.loaded = 0

    # --- requests ---------------------------------------------------------------------

    def load(self, req: LoadRequest) -> RunnerReply:
        from kernelopt.harness.binding import bind_candidate
        from kernelopt.harness.isolate import ChildError

        self.loaded += 1
        try:
            bind_candidate(self.prepared, req.candidate, seed=req.seed, n_inputs=len(self.init.inputs),
                           module_name=f"kernelopt_candidate_{self.loaded}", source=req.source)
        except ChildError as exc:
            return RunnerReply(ok=False, reason=exc.kind if exc.kind in ("compile", "runtime") else "runtime",
                               message=str(exc), traceback=_candidate_traceback(exc))
        module = self.prepared.candidate_module
        return RunnerReply(ok=True, sha256=getattr(module, "__kernelopt_sha256__", None))

    def trial(self, req: TrialRequest) -> RunnerReply:
        import torch

        from kernelopt.harness.binding import as_outputs, classify_exception, describe_exception, seed_everything
        from kernelopt.harness.poison import poison_cuda_allocator, poisoned_factories

        inputs = self.arena.values(self.init.inputs)
        call = self.prepared.bound_call("candidate", inputs)
        seed_everything(req.seed)
        if self.cuda:
            poison_cuda_allocator()
        try:
            with poisoned_factories():
                outputs = as_outputs(call())
        except Exception as exc:  # noqa: BLE001 - untrusted code
            return RunnerReply(ok=False, reason=classify_exception(exc), message=describe_exception(exc),
                               traceback=_candidate_traceback(exc))
        infos: list[OutputInfo] = []
        try:
            if self.cuda:
                # Only the current stream: work left on another stream shows up below.
                torch.cuda.current_stream().synchronize()
            for spec, out in zip(self.init.outputs, outputs):
                infos.append(self._copy_out(spec, out))
            for out in outputs[len(self.init.outputs):]:
                infos.append(_describe(out))
            changed = None
            if self.cuda:
                torch.cuda.current_stream().synchronize()
                torch.cuda.synchronize()
                for i, (spec, out) in enumerate(zip(self.init.outputs, outputs)):
                    if spec.slot is not None and infos[i].copied and not torch.equal(
                        _bytes(self.arena.view(spec.slot)), _bytes(out)
                    ):
                        changed = i
                        break
        except Exception as exc:  # noqa: BLE001 - e.g. an illegal memory access surfaces at the sync
            return RunnerReply(ok=False, reason="runtime", message=describe_exception(exc),
                               traceback=_candidate_traceback(exc))
        return RunnerReply(ok=True, outputs=infos, changed_after_sync=changed)

    def _copy_out(self, spec: Any, out: Any) -> OutputInfo:
        import torch

        info = _describe(out)
        if spec.slot is None or not isinstance(out, torch.Tensor):
            return info
        if list(out.shape) != spec.slot.shape or info.dtype != spec.slot.dtype:
            return info
        from kernelopt.harness.arena import output_digest

        slot = self.arena.view(spec.slot)
        slot.copy_(out)
        info.copied = True
        # Of what the call returned (this process's memory), not of the slot: bytes put into the
        # slot after this copy, by anything the candidate started, are told from the call's. On the
        # slot's device, so a CPU tensor returned for a GPU problem gets the digest the verifier takes.
        info.digest = output_digest(out if out.device == slot.device else out.to(slot.device), self.init.digest_key)
        return info

    def time(self, req: TimeRequest) -> RunnerReply:
        """CUDA-event timing; one timed call's outputs, drawn uniformly over the timed calls, are
        judged (`_after_timed_call`, `JudgedDraw`)."""
        import secrets

        from kernelopt.harness.binding import classify_exception, describe_exception
        from kernelopt.harness.timing import time_callable

        inputs = self.arena.values(self.init.inputs)
        call = self.prepared.bound_call("candidate", inputs)
        self._draw = JudgedDraw(secrets.randbelow)
        self._judged_infos: list[OutputInfo] = []
        try:
            stats = time_callable(call, device=self.device, after_call=self._after_timed_call,
                                  race_against_ms=req.race_against_ms, idle_sync_us=self.idle_sync_us, **req.timing)
        except Exception as exc:  # noqa: BLE001
            return RunnerReply(ok=False, reason=classify_exception(exc), message=f"while timing: {describe_exception(exc)}",
                               traceback=_candidate_traceback(exc))
        return RunnerReply(ok=True, timing=stats, calls=stats.count + stats.warmup_count,
                           judged_call=self._draw.judged, outputs=self._judged_infos)

    def _after_timed_call(self, result: Any, timed: bool) -> None:
        """After each call of a timing (outside the events; `timed`: not a warm-up call): copy its
        outputs into the arena if the draw keeps them (`JudgedDraw`: uniform over the timed calls),
        then poison what it returned, so a later call that skips its work cannot hand back this
        call's result from a reused buffer."""
        from kernelopt.harness.binding import as_outputs

        outputs = as_outputs(result)
        if self._draw.keep(timed):
            self._judged_infos = self._collect_outputs(outputs)
        self._poison_returned(outputs)

    def call(self, req: CallRequest) -> RunnerReply:
        """One timed call of the candidate (the interpreter path: the verifier holds the clock around
        this request): run it, copy its outputs into the arena for the verifier to judge, and poison
        what it returned, so a later call cannot hand back this one's buffer."""
        from kernelopt.harness.binding import as_outputs, classify_exception, describe_exception

        inputs = self.arena.values(self.init.inputs)
        try:
            outputs = as_outputs(self.prepared.bound_call("candidate", inputs)())
        except Exception as exc:  # noqa: BLE001 - untrusted code
            return RunnerReply(ok=False, reason=classify_exception(exc), message=f"while timing: {describe_exception(exc)}",
                               traceback=_candidate_traceback(exc))
        infos = self._collect_outputs(outputs)
        self._poison_returned(outputs)
        return RunnerReply(ok=True, outputs=infos)

    def _collect_outputs(self, outputs: list[Any]) -> list[OutputInfo]:
        infos = [self._copy_out(spec, out) for spec, out in zip(self.init.outputs, outputs)]
        return infos + [_describe(out) for out in outputs[len(self.init.outputs):]]

    def _poison_returned(self, outputs: list[Any]) -> None:
        import torch

        from kernelopt.harness.poison import fill_poison

        base = self.arena.buffer.untyped_storage().data_ptr()
        end = base + self.arena.spec.nbytes
        for out in outputs:
            # Never the arena itself (an output that is a view of an input): that would change the inputs.
            if isinstance(out, torch.Tensor) and out.is_floating_point() and not (
                base <= out.untyped_storage().data_ptr() < end
            ):
                fill_poison(out.detach())

    def unload(self, req: UnloadRequest) -> RunnerReply:
        module = self.prepared.candidate_module
        if module is not None:
            sys.modules.pop(module.__name__, None)
        self.prepared.candidate_module = None
        self.prepared.candidate_model = None
        self.prepared.kernel_function = None
        return RunnerReply(ok=True)

    def health(self, reply: RunnerReply) -> RunnerReply:
        reply.tampered = self.guard.changed()
        reply.guard = self.guard.snapshot()
        if self.cuda:
            try:
                import torch

                torch.cuda.synchronize()
                torch.zeros(1, device=self.device).add_(1).item()
            except Exception:  # noqa: BLE001 - a sticky CUDA error: this context is lost
                reply.device_ok = False
        return reply


def _bytes(t: Any) -> Any:
    import torch

    from kernelopt.harness.arena import _plain

    # Flatten before the byte view: viewing an N-d tensor as uint8 only widens its last dimension.
    return _plain(t).reshape(-1).view(torch.uint8)


def _describe(out: Any) -> OutputInfo:
    import torch

    if isinstance(out, torch.Tensor):
        return OutputInfo(shape=list(out.shape), dtype=str(out.dtype).replace("torch.", ""))
    if isinstance(out, (int, float, bool)) or out is None:
        return OutputInfo(scalar=out, dtype=type(out).__name__)
    return OutputInfo(dtype=type(out).__name__)


def _candidate_traceback(exc: BaseException, limit: int = 8000) -> str:
    """The traceback without kernelopt's own frames: what a person or a model needs to fix the kernel."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/kernelopt/harness/" not in f.filename]
    cause = exc.__cause__ or exc.__context__
    if not frames and cause is not None and cause.__traceback__ is not None:
        frames = [f for f in traceback.extract_tb(cause.__traceback__) if "/kernelopt/harness/" not in f.filename]
        exc = cause
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(exc), exc))
    return text[-limit:]


# A directory: each runner writes the cProfile stats of its request handling there after each
# request (benchmarks/eval_profile.py). A diagnostic of kernelopt's own cost; what a
# candidate could do with it is write a file in that directory, which it can do anyway.
PROFILE_VAR = "KERNELOPT_RUNNER_PROFILE"


def _diagnostic_profiler() -> Any:
    if not os.environ.get(PROFILE_VAR):
        return None
    import cProfile

    return cProfile.Profile()


def main(read_fd: int, write_fd: int) -> int:
    chan = Channel(read_fd, write_fd)
    try:
        init = parse_runner_request(chan.recv_json())
    except ProtocolError:
        return 3
    if not isinstance(init, RunnerInit):
        return 3
    try:
        runner = Runner(init)
    except Exception as exc:  # noqa: BLE001 - report, then exit: the verifier sees a failed init
        chan.send(RunnerReply(ok=False, nonce=init.nonce, reason="runtime", message=f"runner setup failed: {type(exc).__name__}: {exc}",
                              traceback=traceback.format_exc()[-8000:]))
        return 4
    chan.send(runner.health(RunnerReply(ok=True, nonce=init.nonce)))
    handlers = {LoadRequest: runner.load, TrialRequest: runner.trial, TimeRequest: runner.time, CallRequest: runner.call,
                UnloadRequest: runner.unload}
    profiler = _diagnostic_profiler()
    while True:
        try:
            req = parse_runner_request(chan.recv_json())
        except ProtocolError:
            return 0  # the verifier is gone or closed the pipe: nothing left to do
        handler = handlers.get(type(req))
        if handler is None:
            return 3
        try:
            if profiler is not None:
                profiler.enable()
            try:
                reply = handler(req)  # type: ignore[operator]
            finally:
                if profiler is not None:
                    profiler.disable()
                    # After every request: the verifier may kill this runner without a word. A
                    # diagnostic: where it cannot be written (a sandbox's read-only file system),
                    # it is lost, and the request's reply stands.
                    try:
                        profiler.dump_stats(os.path.join(os.environ[PROFILE_VAR], f"runner-{os.getpid()}.prof"))
                    except OSError:
                        pass
        except Exception as exc:  # noqa: BLE001 - a failure outside the candidate call is still the candidate's doing
            reply = RunnerReply(ok=False, reason="runtime", message=f"{type(exc).__name__}: {exc}",
                                traceback=_candidate_traceback(exc))
        reply.nonce = req.nonce
        chan.send(runner.health(reply))


def serve(read_fd: int, write_fd: int) -> NoReturn:
    """The runner's life, in a process started for it (`python -m kernelopt.harness.runner`) or
    forked for it by a zygote (kernelopt.harness.zygote): watch the verifier, answer its requests,
    exit."""
    from kernelopt.harness.sandbox import watch_owner, watch_pipe

    if os.getpid() == 1:
        # The init of its own pid namespace (--isolate sandbox on the CPU): the verifier is not
        # visible from here, its pipe is. When this process exits, everything in the namespace dies.
        watch_pipe(read_fd)
    else:
        watch_owner()
    code = main(read_fd, write_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a candidate may have left CUDA or threads in a bad state.
    os._exit(code)


if __name__ == "__main__":
    # Run as __main__: the guard's "kernelopt.harness.runner.*" entries must name this module's
    # Runner and Guard, the ones that run, not a second copy an import would load.
    sys.modules["kernelopt.harness.runner"] = sys.modules[__name__]
    serve(int(sys.argv[1]), int(sys.argv[2]))
