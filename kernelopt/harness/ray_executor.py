"""The Ray executor: verifier workers as Ray actors, on a local instance or an existing cluster.

`Engine(problem, executor="ray")` (or `RayExecutor(address="ray-head:6379")`) puts each
verifier worker (`kernelopt.harness.worker.Verifier`) in its own Ray actor: one GPU each
on a GPU configuration (Ray sets CUDA_VISIBLE_DEVICES per actor, so the verifier inside
uses "cuda:0"), one CPU each in the Triton interpreter. The actor holds the problem, its
inputs and references for its whole life and drives a candidate runner subprocess on its
own node exactly as a local worker does; only the engine's link to it changes (Ray calls
instead of pipes).

What crosses between the engine and an actor is JSON text of the protocol models
(`model_dump_json` / `model_validate_json`), never a pickled pydantic object: the actor
judges candidates but the runner beside it runs them, and the engine takes nothing from
that side that could carry code.

Ray is an optional extra (`pip install 'kernelopt[ray]'`) and is imported only when a
Ray executor is made. See docs/harness.md, "Executors: local and Ray".
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from typing import TYPE_CHECKING, Any, Callable

from kernelopt.errors import BadInput, KerneloptError, MissingRequirement
from kernelopt.harness.protocol import EvaluateRequest, FatalReply, ReadyReply, WorkerConfig
from kernelopt.models.harness import Evaluation, Failure

if TYPE_CHECKING:
    from kernelopt.harness.evaluate import Worker

# Building multi-GB inputs and references, compiling baselines (the local worker's bound too).
WORKER_START_TIMEOUT_S = 900.0
# How long close() waits for an actor to stop its runner and free its arena before killing it.
CLOSE_TIMEOUT_S = 30.0
NEEDS_RAY = "--executor ray needs Ray: pip install 'kernelopt[ray]'"


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BadInput(NEEDS_RAY) from None
    return ray


class VerifierActor:
    """The body of one Ray actor: a Verifier on the actor's own device.

    A plain class (Ray wraps it with `ray.remote` when an executor starts) so that this
    module imports without Ray. Every method takes and returns JSON text.
    """

    def __init__(self) -> None:
        self.verifier: Any = None

    def start(self, config_json: str) -> str:
        """Build the verifier; the reply (ReadyReply or FatalReply) as JSON, with where it runs."""
        from kernelopt.harness.sandbox import _process_prefix, harden_process, install_reaper, owner_record
        from kernelopt.harness.worker import NeedsGpu, Verifier

        # Runners spawned from here must die with this actor: orphans re-parent to it
        # (subreaper), and close() kills every tree it started.
        harden_process()  # the references and the arena recipe live here
        install_reaper()
        # "record": the owner record in the names of the dirs this actor makes (its runners', its
        # arena's), by which the engine removes them once Ray has SIGKILLed it (clean_host).
        info: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "prefix": _process_prefix(),
                                "record": owner_record()}
        try:
            import ray

            info["node_id"] = ray.get_runtime_context().get_node_id()
            info["node_ip"] = ray.util.get_node_ip_address()
        except Exception:  # noqa: BLE001 - where it runs is only for names and cleanup
            pass
        cfg = WorkerConfig.model_validate_json(config_json)
        try:
            # The actor's progress cannot reach the engine cheaply; see docs ("done" only).
            self.verifier = Verifier(cfg, lambda index, text: None)
            reply: ReadyReply | FatalReply = self.verifier.ready()
            spec = self.verifier.arena.spec
            if spec.kind == "file" and spec.path:
                info["arena_dir"] = os.path.dirname(spec.path)
        except BadInput as exc:
            reply = FatalReply(kind="bad_input", message=str(exc))
        except NeedsGpu as exc:
            reply = FatalReply(kind="needs_gpu", message=str(exc))
        except Exception as exc:  # noqa: BLE001 - reported to the engine, not a dead actor
            reply = FatalReply(kind="internal", message=f"{type(exc).__name__}: {exc}")
        info["reply"] = reply.model_dump_json()
        return json.dumps(info)

    def evaluate(self, request_json: str) -> str:
        assert self.verifier is not None, "start() first"
        return self.verifier.evaluate(EvaluateRequest.model_validate_json(request_json)).model_dump_json()

    def close(self) -> None:
        from kernelopt.harness.sandbox import kill_descendants

        try:
            if self.verifier is not None:
                self.verifier.close()
        finally:
            self.verifier = None
            kill_descendants()


class RayWorker:
    """One verifier actor, as the engine sees a worker."""

    def __init__(self, executor: "RayExecutor", index: int, config: WorkerConfig, options: dict[str, Any]) -> None:
        self.executor = executor
        self.index = index
        self.config = config
        self.options = options
        self.name = f"ray:{index}"
        self.actor: Any = None
        self.where: dict[str, Any] = {}
        self._pending: Any = None
        self.ready: ReadyReply = None  # type: ignore[assignment]  # set by finish_start()

    def begin_start(self) -> None:
        """Create the actor and ask it to build its verifier; finish_start() waits for it.

        Split in two so that every actor builds its inputs and references at once.
        """
        if not self.executor.ray.is_initialized():
            # The session ended under us (Ctrl-C, SIGTERM, close() from another thread): an
            # actor made now would make Ray start a fresh local instance of its own.
            raise KerneloptError("the Ray session has ended")
        self.actor = self.executor.actor_class.options(**self.options).remote()
        self._pending = self.actor.start.remote(self.config.model_dump_json())

    def finish_start(self) -> None:
        ray = self.executor.ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        try:
            info = json.loads(ray.get(self._pending, timeout=WORKER_START_TIMEOUT_S))
        except GetTimeoutError:
            self._kill()
            raise KerneloptError(
                f"the Ray verifier actor {self.index} did not start within {WORKER_START_TIMEOUT_S:g} s "
                f"(does the cluster have a free {self._resource_words()}?)"
            ) from None
        except (RayActorError, RayTaskError) as exc:
            self._kill()
            raise KerneloptError(f"the Ray verifier actor {self.index} failed to start: {_last_line(exc)}") from None
        finally:
            self._pending = None
        self.where = {k: v for k, v in info.items() if k != "reply"}
        reply = json.loads(info["reply"])
        if reply.get("type") == "fatal":
            fatal = FatalReply.model_validate(reply)
            self.stop()
            if fatal.kind == "bad_input":
                raise BadInput(fatal.message)
            if fatal.kind == "needs_gpu":
                raise MissingRequirement(fatal.message)
            raise KerneloptError(f"the Ray verifier actor {self.index} failed: {fatal.message}")
        self.ready = ReadyReply.model_validate(reply)
        node = self.where.get("node_ip") or self.where.get("host") or "?"
        self.name = f"ray:{self.index}@{node}:{self.config.device}"

    def _resource_words(self) -> str:
        gpus = self.options.get("num_gpus")
        return f"GPU ({gpus:g} per worker)" if gpus else "CPU"

    def evaluate(self, request: EvaluateRequest, progress: Callable[[str], None]) -> Evaluation:
        ray = self.executor.ray
        from ray.exceptions import GetTimeoutError, RayActorError

        # The actor enforces the candidate's time limit; this bound only catches a wedged actor.
        limit = self.config.timeout_s * 3 + 600
        try:
            raw = ray.get(self.actor.evaluate.remote(request.model_dump_json()), timeout=limit)
        except (RayActorError, GetTimeoutError) as exc:
            # The verifier actor died (out of host memory, its node lost) or wedged: the
            # candidate fails as a crash and the actor is replaced; the batch goes on.
            what = "stopped answering" if isinstance(exc, GetTimeoutError) else "died"
            ev = Evaluation(problem=self.config.problem, candidate=request.candidate, device=self.config.device,
                            worker=self.name,
                            failure=Failure(reason="crash", stage="verify",
                                            message=f"the Ray verifier actor {what}: {_last_line(exc)}"))
            self._kill()
            self.begin_start()
            self.finish_start()
            return ev
        ev = Evaluation.model_validate_json(raw)
        ev.worker = self.name
        return ev

    def _kill(self) -> None:
        """Kill the actor at once, and on this host what it left behind (its runner's tree, its arena)."""
        if self.actor is not None and self.executor.ray.is_initialized():
            try:
                self.executor.ray.kill(self.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.actor = None
        self.clean_host()

    def clean_host(self) -> None:
        """On this host, what the gone actor left behind: its runner's tree, its runners' dirs and
        its arena.

        Ray kills an actor with SIGKILL, so none of its exit hooks runs, and its dirs are only in
        the actor's own at-exit list (the actor is not a process kernelopt spawned); a runner killed
        here has no time to remove its own dir either. They carry the actor's owner record.
        """
        from kernelopt.harness.sandbox import ARENA_PREFIX, sweep_stale_dirs

        if self.where and self.where.get("node_id") == self.executor.node_id:
            _kill_spawned_by(str(self.where.get("prefix") or ""))
            if self.where.get("record"):
                sweep_stale_dirs(owner=str(self.where["record"]))
            arena_dir = self.where.get("arena_dir")  # where owner records cannot be made (not Linux)
            if arena_dir and os.path.basename(arena_dir).startswith(ARENA_PREFIX):
                shutil.rmtree(arena_dir, ignore_errors=True)
        self.where = {}

    def stop(self) -> None:
        """Stop the actor: its runner and arena first, in the actor, then the actor itself."""
        if self.actor is not None and self.executor.ray.is_initialized():
            try:
                self.executor.ray.get(self.actor.close.remote(), timeout=CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - _kill() cleans up what a dead or wedged actor left
                pass
        self._kill()

    def close(self) -> None:
        """The Worker protocol's close: stop the actor; the last one closed ends the executor's Ray session.

        The engine closes its workers but knows nothing of executors, so the executor's
        own shutdown (a private local instance stops with it) hangs on its last worker.
        """
        try:
            self.stop()
        finally:
            self.executor.worker_closed(self)


class RayExecutor:
    """Verifier workers as Ray actors.

    address: a Ray cluster's address ("host:6379", "auto", "ray://host:10001"); None takes
    RAY_ADDRESS from the environment if set; otherwise (or with "local") a private local
    instance starts (single hosts, tests), and close() shuts it down.
    num_workers: how many actors; None gives one per WorkerConfig (per device the engine
    was given). With more workers than configs the configs are reused in turn.
    gpus_per_worker: Ray's num_gpus for each actor of a CUDA configuration.
    ray_init_options: passed to `ray.init` (e.g. runtime_env, namespace; num_cpus only
    for a local instance).
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_workers: int | None = None, gpus_per_worker: float = 1.0,
                 **ray_init_options: Any) -> None:
        self.ray = _require_ray()
        if num_workers is not None and num_workers < 1:
            raise BadInput(f"num_workers {num_workers}: need at least 1")
        if gpus_per_worker <= 0:
            raise BadInput(f"gpus_per_worker {gpus_per_worker:g}: must be > 0")
        self.address = address
        self.num_workers = num_workers
        self.gpus_per_worker = gpus_per_worker
        self.ray_init_options = ray_init_options
        self.connected = False  # this executor called ray.init (and so calls ray.shutdown)
        self.node_id: str | None = None
        self.workers: list[RayWorker] = []
        self._actor_class: Any = None
        self._prev_signals: dict[int, tuple[Any, Any]] = {}

    @property
    def actor_class(self) -> Any:
        if self._actor_class is None:
            self._actor_class = self.ray.remote(VerifierActor)
        return self._actor_class

    def _connect(self, n_cpu_workers: int) -> None:
        ray = self.ray
        if ray.is_initialized():
            return  # the caller's own Ray session: use it, leave it up
        # The CLI cannot pass an address: like Ray itself, take RAY_ADDRESS when none is given.
        address = self.address if self.address is not None else (os.environ.get("RAY_ADDRESS") or None)
        local = address in (None, "local")
        options: dict[str, Any] = {"log_to_driver": False}
        if local:
            # A private instance: no dashboard, and enough CPU slots that CPU workers never
            # wait for each other on a small host (each holds one CPU slot).
            options.update(include_dashboard=False, num_cpus=max(os.cpu_count() or 1, n_cpu_workers))
        options.update(self.ray_init_options)
        import signal
        import threading

        _disable_auto_init()
        main = threading.current_thread() is threading.main_thread()
        before = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(address="local" if local else address, **options)
        except ConnectionError as exc:
            raise BadInput(f"--executor ray: cannot reach the Ray cluster at {address!r}: {_last_line(exc)}") from None
        self.connected = True
        if main and before is not None and signal.getsignal(signal.SIGTERM) is not before:
            # ray.init replaces SIGTERM with a bare sys.exit; put back the engine's reaper
            # (kernelopt.harness.sandbox), which kills every descendant first and exits 143.
            signal.signal(signal.SIGTERM, before)
        if main:
            self._wrap_signals()

    def _wrap_signals(self) -> None:
        """On Ctrl-C, SIGTERM or SIGHUP, leave Ray first, then do what the signal did before.

        The reaper that runs next kills every descendant, a local Ray instance included;
        with Ray's processes gone under a live session, Ray's own exit hooks block on the
        dead GCS. Leaving first stops a local instance cleanly, and on a cluster ends this
        driver's job, which makes Ray kill the actors it owns.
        """
        import signal

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            prev = signal.getsignal(signum)
            if prev is signal.SIG_IGN or prev is None:
                continue

            def on_signal(num: int, frame: Any, prev: Any = prev) -> None:
                self._restore_signals()
                self.shutdown()
                if callable(prev):
                    prev(num, frame)
                    return
                if num == signal.SIGINT:
                    raise KeyboardInterrupt
                raise SystemExit(128 + num)

            self._prev_signals[signum] = (prev, on_signal)
            signal.signal(signum, on_signal)

    def _restore_signals(self) -> None:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for signum, (prev, ours) in list(self._prev_signals.items()):
            if signal.getsignal(signum) is ours:
                signal.signal(signum, prev)
        self._prev_signals.clear()

    def start(self, configs: list[WorkerConfig]) -> list["Worker"]:
        if not configs:
            return []
        count = self.num_workers or len(configs)
        chosen = [configs[i % len(configs)] for i in range(count)]
        cuda = [c.device.startswith("cuda") for c in chosen]
        self._connect(sum(1 for g in cuda if not g))
        ray = self.ray
        self.node_id = ray.get_runtime_context().get_node_id()
        if any(cuda):
            have = ray.cluster_resources().get("GPU", 0)
            if have <= 0:
                self.shutdown()
                raise MissingRequirement(f"--executor ray: the Ray cluster has no GPU for {sum(cuda)} CUDA worker(s)")
        workers: list[RayWorker] = []
        for i, (cfg, gpu) in enumerate(zip(chosen, cuda)):
            # Ray gives each GPU actor its own CUDA_VISIBLE_DEVICES: inside, its GPU is cuda:0.
            inner = cfg.model_copy(update={"device": "cuda:0" if gpu else "cpu"})
            options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}
            if gpu:
                options["num_gpus"] = self.gpus_per_worker
            workers.append(RayWorker(self, i, inner, options))
        try:
            for w in workers:
                w.begin_start()
            for w in workers:
                w.finish_start()
        except BaseException:
            for w in workers:
                try:
                    w.stop()
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass
            self.shutdown()
            raise
        self.workers = list(workers)
        return list(workers)

    def worker_closed(self, worker: RayWorker) -> None:
        if worker in self.workers:
            self.workers.remove(worker)
        if not self.workers:
            self.shutdown()

    def shutdown(self) -> None:
        """Disconnect from Ray; a local instance this executor started stops with it."""
        self._restore_signals()
        if self.connected:
            self.connected = False
            self.ray.shutdown()
            # Ending the session killed the actors still listed (on a signal, close() never ran).
            for w in self.workers:
                w.clean_host()

    def close(self) -> None:
        """Kill every actor, then shut down the Ray session this executor opened."""
        for w in list(self.workers):
            try:
                w.stop()
            except Exception:  # noqa: BLE001 - closing must get through every worker
                pass
        self.workers = []
        self.shutdown()


def _disable_auto_init() -> None:
    """Turn off Ray's auto-init in this process (what RAY_ENABLE_AUTO_CONNECT=0 does when set
    before Ray is imported; here Ray is often imported already).

    Every Ray call (`ray.get`, `ray.kill`, an actor method's `.remote()`) otherwise starts a
    fresh local instance when no session is open. During Ctrl-C or SIGTERM the session goes
    down while the engine's threads still wait on actors; a call made then must fail, not
    start a Ray instance that nothing would stop. Left off afterwards for the same reason.
    """
    try:
        from ray._private import auto_init_hook

        auto_init_hook.enable_auto_connect = False
    except (ImportError, AttributeError):
        pass


def _kill_spawned_by(prefix: str) -> None:
    """Kill, on this host, every process a dead actor's sandbox spawned (its runner's tree).

    An actor killed outright runs no exit hook, and its runner lives in its own session;
    the sandbox tags every spawned process with its spawner's pid-and-token prefix.
    """
    import sys

    if not prefix or not sys.platform.startswith("linux"):
        return
    from kernelopt.harness.sandbox import _kill_loop, _spawned_here, _tag_of

    _kill_loop(lambda table: {p for p in table if _spawned_here(_tag_of(p), prefix + "-")})


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[-1] if text else type(exc).__name__)[:300]
