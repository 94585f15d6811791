"""The one seam that runs candidates: `evaluate(problem, candidates) -> list[Evaluation]`.

Every caller -- `check`, `bench`, the optimize loop, the suite, the benchmarks --
goes through `evaluate` or a long-lived `Engine`. An Evaluation holds the
verification, the timing and the failure as data, with one failure taxonomy
(`kernelopt.models.harness.FailureReason`).

An engine keeps one verifier worker per device (`kernelopt.harness.worker`) for its
whole life: the problem's inputs and reference outputs are built once per worker,
on the device, and every candidate is judged against them. Executors decide where
workers live: `local` (a worker per visible GPU on this host, or one on the CPU in
the Triton interpreter) and `ray` (workers as Ray actors, one GPU each, on an
existing cluster; `pip install kernelopt[ray]`).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence

from kernelopt.errors import BadInput, KerneloptError, MissingRequirement
from kernelopt.harness.protocol import (
    Channel,
    EvaluateRequest,
    FatalReply,
    ProgressReply,
    ProtocolError,
    ReadyReply,
    ResultReply,
    ShutdownRequest,
    WorkerConfig,
    parse_verifier_reply,
)
from kernelopt.harness.zygote import resolve as resolve_zygote
from kernelopt.models.harness import Candidate, Evaluation, Failure, Problem
from kernelopt.registry import Registry

WORKER_START_TIMEOUT_S = 900.0  # building multi-GB inputs and references, compiling baselines
# The watchdog over one evaluation: a verifier that has not answered within this many seconds
# beyond the candidate's own limits is killed and the candidate fails as `timeout`. One
# evaluation may use the candidate's time limit for loading + verifying + timing + re-verifying
# (the verifier's own deadline), plus building the timing reference and a runner start.
WATCHDOG_SLACK_S = 240.0
# A verifier sends a heartbeat every HEARTBEAT_S while it evaluates; one that stays silent this
# long (stopped with SIGSTOP, frozen) is killed, whatever the time limit.
SILENCE_LIMIT_S = 60.0


def watchdog_s(timeout_s: float) -> float:
    """How long the engine waits for a verifier's answer to one evaluation, heartbeats or not."""
    from kernelopt.harness.worker import RUNNER_START_TIMEOUT_S

    return 2 * timeout_s + RUNNER_START_TIMEOUT_S + WATCHDOG_SLACK_S


class Forged(Exception):
    """A line on the engine's channel that answers no request in flight."""
Isolation = Literal["worker", "candidate", "sandbox", "auto"]
_noted: set[str] = set()


def resolve_isolation(isolate: str, devices: list[str] | None = None) -> Literal["worker", "candidate", "sandbox"]:
    """`auto` is `sandbox` where the OS offers one, else `worker`; `sandbox` where it cannot run
    becomes `candidate` (a fresh runner per candidate). Either fallback is said once, in one line
    on stderr."""
    if isolate not in ("sandbox", "auto"):
        return isolate  # type: ignore[return-value]
    from kernelopt.harness.sandbox import sandbox_unavailable

    device = (devices or visible_devices())[0]
    why = sandbox_unavailable(device)
    if why is None:
        return "sandbox"
    fallback = "candidate" if isolate == "sandbox" else "worker"
    if why not in _noted:
        _noted.add(why)
        print(f"kernelopt: no sandbox here: {why}; candidates run with --isolate {fallback}", file=sys.stderr)
    return fallback  # type: ignore[return-value]


@dataclass
class ProgressEvent:
    """What a long evaluation reports while it runs (one line each on a terminal)."""

    index: int
    candidate: str
    text: str
    worker: str
    elapsed_s: float


ProgressFn = Callable[[ProgressEvent], None]
ResultFn = Callable[[int, Evaluation], None]


def visible_devices() -> list[str]:
    """'cuda:N' for every GPU this process may use, without importing torch; ['cpu'] when there is none."""
    if not os.path.exists("/dev/nvidiactl"):
        return ["cpu"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return [f"cuda:{i}" for i in range(len(ids))] or ["cpu"]
    gpus = Path("/proc/driver/nvidia/gpus")
    count = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    if count == 0:
        try:
            import torch

            count = torch.cuda.device_count()
        except Exception:  # noqa: BLE001
            count = 0
    return [f"cuda:{i}" for i in range(count)] or ["cpu"]


class Worker(Protocol):
    """One verifier on one device, as an executor exposes it."""

    name: str
    ready: ReadyReply

    def evaluate(self, request: EvaluateRequest, progress: Callable[[str], None]) -> Evaluation: ...

    def close(self) -> None: ...


class Executor(Protocol):
    name: str

    def start(self, configs: list[WorkerConfig]) -> list[Worker]: ...


class LocalWorker:
    """A verifier process on this host, spoken to over pipes."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.name = f"local:{config.device}"
        self.child: Any = None
        self.chan: Channel | None = None
        self.ready = self._start()

    def _start(self) -> ReadyReply:
        from kernelopt.harness.sandbox import candidate_env, spawn

        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        try:
            self.child = spawn([sys.executable, "-m", "kernelopt.harness.worker", str(to_r), str(from_w)],
                               env=candidate_env(), pass_fds=(to_r, from_w), name="verifier")
        finally:
            os.close(to_r)
            os.close(from_w)
        self.chan = Channel(from_r, to_w)
        self.chan.send(self.config)
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while True:
            try:
                reply = parse_verifier_reply(self.chan.recv_json(max(0.0, deadline - time.monotonic())))
            except ProtocolError as exc:
                _, err = self._stop()
                tail = err.strip().splitlines()[-1][:300] if err.strip() else str(exc)
                raise KerneloptError(f"the verifier worker on {self.config.device} failed to start: {tail}") from None
            if isinstance(reply, ReadyReply):
                return reply
            if isinstance(reply, FatalReply):
                self._stop()
                if reply.kind == "bad_input":
                    raise BadInput(reply.message)
                if reply.kind == "needs_gpu":
                    raise MissingRequirement(reply.message)
                raise KerneloptError(f"the verifier worker on {self.config.device} failed: {reply.message}")

    def evaluate(self, request: EvaluateRequest, progress: Callable[[str], None]) -> Evaluation:
        assert self.chan is not None
        deadline = time.monotonic() + watchdog_s(self.config.timeout_s)
        try:
            self.chan.send(request)
            while True:
                # The verifier enforces the candidate's time limit; this watchdog catches a verifier
                # that is stopped (SIGSTOP), wedged or starved.
                left = deadline - time.monotonic()
                try:
                    data = self.chan.recv_json(max(0.0, min(left, SILENCE_LIMIT_S)))
                except ProtocolError as exc:
                    if exc.timeout and left > SILENCE_LIMIT_S:
                        raise ProtocolError(f"no heartbeat for {SILENCE_LIMIT_S:g} s", timeout=True) from None
                    raise
                try:
                    reply = parse_verifier_reply(data)
                except ValueError:
                    raise Forged("a line that is no verifier reply") from None
                if not isinstance(reply, (ProgressReply, ResultReply)):
                    raise Forged(f"a {reply.type!r} message in the middle of an evaluation")
                if reply.index != request.index or reply.nonce != request.nonce:
                    raise Forged(f"a {reply.type} for index {reply.index} that does not carry this request's nonce")
                if isinstance(reply, ProgressReply):
                    if reply.text:  # "" is a heartbeat
                        progress(reply.text)
                else:
                    return reply.evaluation
        except Forged as exc:
            # Only code running below this verifier can have written it: the candidate in its runner.
            # The channel is no longer trusted, so the verifier goes and a fresh one serves the next.
            return self._fail_and_restart(request, "tampered", "someone other than the verifier wrote into the "
                                          f"engine's channel ({exc}): the candidate forged its verdict")
        except ProtocolError as exc:
            if exc.timeout:
                return self._fail_and_restart(request, "timeout", f"the verifier stopped answering ({exc}; the "
                                              f"watchdog allows {SILENCE_LIMIT_S:g} s of silence and "
                                              f"{watchdog_s(self.config.timeout_s):g} s per candidate): it was killed")
            if "not JSON" in str(exc) or "not a JSON object" in str(exc) or "longer than" in str(exc):
                return self._fail_and_restart(request, "tampered", "someone other than the verifier wrote into the "
                                              f"engine's channel ({exc}): the candidate forged its verdict")
            # The verifier itself died (out of host memory, killed): the candidate fails, the worker restarts.
            return self._fail_and_restart(request, "crash", "the verifier worker died: {tail}", default_tail=str(exc))

    def _fail_and_restart(self, request: EvaluateRequest, reason: Any, message: str, default_tail: str = "") -> Evaluation:
        _, err = self._stop()
        tail = err.strip().splitlines()[-1][:300] if err.strip() else default_tail
        ev = Evaluation(problem=self.config.problem, candidate=request.candidate, device=self.config.device,
                        worker=self.name,
                        failure=Failure(reason=reason, stage="verify", message=message.replace("{tail}", tail),
                                        stderr=err[-20000:] or None))
        self.ready = self._start()
        return ev

    def _stop(self) -> tuple[str, str]:
        out = ("", "")
        if self.child is not None:
            self.child.kill()
            out = self.child.output()
            self.child.cleanup()
        if self.chan is not None:
            self.chan.close()
        self.child = None
        self.chan = None
        return out

    def close(self) -> None:
        if self.chan is not None:
            try:
                self.chan.send(ShutdownRequest())
                if self.child is not None:
                    self.child.wait(10.0)
            except ProtocolError:
                pass
        self._stop()


class LocalExecutor:
    """A verifier worker per device on this host (the default)."""

    name = "local"

    def start(self, configs: list[WorkerConfig]) -> list[Worker]:
        # Workers build their inputs and references in parallel.
        started: list[Worker] = []
        try:
            in_threads(lambda cfg: started.append(LocalWorker(cfg)), configs)
        except BaseException:
            for w in started:
                w.close()
            raise
        order = {c.device: i for i, c in enumerate(configs)}
        return sorted(started, key=lambda w: order.get(w.name.split(":", 1)[1], 0))


def in_threads(fn: Callable[[Any], None], items: Sequence[Any]) -> None:
    """`fn(item)` for every item, each on its own thread; the first exception is re-raised here,
    on the caller's thread, once all have finished."""
    errors: list[BaseException] = []

    def run(item: Any) -> None:
        try:
            fn(item)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(item,), daemon=True) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


EXECUTORS: dict[str, str] = {
    "local": "kernelopt.harness.evaluate:LocalExecutor",
    "ray": "kernelopt.harness.ray_executor:RayExecutor",
}
# Third-party executors register in the entry-point group `kernelopt.executors`.
EXECUTOR_REGISTRY = Registry("executor", "kernelopt.executors", EXECUTORS)


def get_executor(name: str | Executor, **options: Any) -> Executor:
    if not isinstance(name, str):
        return name
    factory = EXECUTOR_REGISTRY.factory(name)
    if factory is None:
        raise BadInput(f"--executor {name!r}: unknown executor (known: {', '.join(EXECUTOR_REGISTRY.available())})")
    return factory(**options)


class Engine:
    """Workers that hold one problem and evaluate candidate after candidate.

    Use as a context manager; `evaluate()` may be called many times (the optimize loop
    does, round after round) and reuses the workers, their inputs and references.
    `cache=False` times the baselines even where the user's cache holds them
    (`kernelopt.harness.cache`). `zygote`: fork fresh runners from a zygote instead of starting
    them cold (`kernelopt.harness.zygote`); None: $KERNELOPT_ZYGOTE, else on for CUDA devices
    (never in sandbox mode).
    """

    def __init__(
        self,
        problem: Problem,
        *,
        trials: int = 3,
        atol: float | None = None,
        rtol: float | None = None,
        timeout_s: float = 300.0,
        baselines: Sequence[str] = (),
        isolate: Isolation = "worker",
        executor: str | Executor = "local",
        executor_options: dict[str, Any] | None = None,
        devices: Sequence[str] | None = None,
        seed: int = 0,
        timing: dict[str, Any] | None = None,
        progress: ProgressFn | None = None,
        cpu_timing_calls: int = 3,
        cache: bool = True,
        zygote: bool | None = None,
    ) -> None:
        if trials < 1:
            raise BadInput(f"--trials {trials}: need at least 1")
        if isolate not in ("worker", "candidate", "sandbox", "auto"):
            raise BadInput(f"--isolate {isolate!r}: expected worker, candidate, sandbox or auto")
        isolate = resolve_isolation(isolate, list(devices) if devices else None)
        self.isolate = isolate  # as resolved: what a later engine for the same run (other shapes) must use
        self.problem = problem
        self.progress = progress
        self.executor = get_executor(executor, **(executor_options or {}))
        self.devices = list(devices) if devices else visible_devices()
        self.configs = [
            WorkerConfig(problem=problem, device=d, trials=trials, seed=seed, atol=atol, rtol=rtol,
                         timing=dict(timing or {}), baselines=list(baselines), isolate=isolate, timeout_s=timeout_s,
                         cpu_timing_calls=cpu_timing_calls, cache=cache, zygote=resolve_zygote(zygote, d, isolate))
            for d in self.devices
        ]
        self.workers: list[Worker] = []

    def __enter__(self) -> "Engine":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        from kernelopt.harness.sandbox import harden_process, install_reaper, sweep_once

        # The engine holds the user's environment (API keys) and the verifiers' channels: no
        # candidate running as the same user may open its /proc/<pid>/{environ,fd,mem}.
        harden_process()
        # On the caller's thread: signal handlers can only be installed from the main
        # thread, and workers are spawned from boot threads.
        install_reaper()
        # What an earlier run killed with everything it started (SIGKILL, the OOM killer) left:
        # its sandbox dirs and arenas, whose owners are provably dead. Once per process.
        sweep_once()
        if not self.workers:
            self.workers = self.executor.start(self.configs)

    @property
    def ready(self) -> list[ReadyReply]:
        return [w.ready for w in self.workers]

    def evaluate(
        self,
        candidates: Sequence[Candidate],
        *,
        verify: bool = True,
        time: bool = True,
        on_result: ResultFn | None = None,
        workers: int | None = None,
        race_against_ms: float | Sequence[float | None] | None = None,
    ) -> list[Evaluation]:
        """Evaluate `candidates` (spread over the workers); results in the given order.

        `workers=1` runs them one after another on the first worker, in order: an
        interleaved re-timing (A-B-B-A) needs one device and one order.
        `race_against_ms` (racing): each candidate is timed first and stops being timed once
        it is clearly slower than this (`timing.clearly_slower`); such an evaluation is
        `raced_out`, unverified and not passed. The others are fully timed and verified. A sequence
        gives each candidate its own threshold (None: not raced).
        """
        races = (list(race_against_ms) if isinstance(race_against_ms, Sequence)
                 else [race_against_ms] * len(candidates))
        if len(races) != len(candidates):
            raise ValueError(f"race_against_ms: {len(races)} thresholds for {len(candidates)} candidates")
        self.start()
        jobs: queue.Queue[int] = queue.Queue()
        for i in range(len(candidates)):
            jobs.put(i)
        results: list[Evaluation | None] = [None] * len(candidates)
        lock = threading.Lock()
        started = _now()

        def serve(worker: Worker) -> None:
            while True:
                try:
                    i = jobs.get_nowait()
                except queue.Empty:
                    return
                cand = candidates[i]

                def report(text: str, i: int = i, cand: Candidate = cand) -> None:
                    if self.progress is not None:
                        self.progress(ProgressEvent(i, cand.name, text, worker.name, _now() - started))

                ev = worker.evaluate(EvaluateRequest(index=i, candidate=cand, verify=verify, time=time,
                                                     race_against_ms=races[i]), report)
                with lock:
                    results[i] = ev
                    if on_result is not None:
                        on_result(i, ev)
                report("done: " + _summary(ev))

        in_threads(serve, self.workers[:workers] if workers else self.workers)
        return [r for r in results if r is not None]

    def close(self) -> None:
        for w in self.workers:
            try:
                w.close()
            except Exception:  # noqa: BLE001 - closing must get through every worker
                pass
        self.workers = []


def evaluate(
    problem: Problem,
    candidates: Sequence[Candidate],
    *,
    verify: bool = True,
    time: bool = True,
    on_result: ResultFn | None = None,
    **engine_options: Any,
) -> list[Evaluation]:
    """Evaluate `candidates` on `problem` once (see `Engine` for the options and a reusable engine)."""
    with Engine(problem, **engine_options) as engine:
        return engine.evaluate(candidates, verify=verify, time=time, on_result=on_result)


def _now() -> float:
    return time.monotonic()


def _summary(ev: Evaluation) -> str:
    if ev.failure is not None:
        return f"FAIL ({ev.failure.reason})"
    if ev.raced_out and ev.timing is not None:
        return f"raced out ({ev.timing.min_ms:.4g} ms > {ev.timing.race_against_ms:.4g} ms after {ev.timing.count} calls)"
    parts = ["PASS" if ev.verification is not None else "ok"]
    if ev.timing is not None:
        parts.append(f"{ev.timing.median_ms:.4g} ms")
    return " ".join(parts)
