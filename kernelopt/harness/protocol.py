"""Typed messages between the engine, its verifier workers and their candidate runners.

Three kinds of process take part in an evaluation (see docs/harness.md):

  engine (the kernelopt command)  --EngineRequest-->   verifier (one per device, trusted)
  verifier                        --RunnerRequest-->   runner   (imports and runs candidates)

Every message is one JSON line of a pydantic model on a pipe; nothing is pickled
from a process that ran candidate code, so a candidate can forge no object in a
process that judges it. Tensors never travel in messages: the verifier owns a
shared arena (CUDA IPC on a GPU, a shared file on the CPU) where it writes the
inputs and the runner writes the outputs (`kernelopt.harness.arena`).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import time
from typing import Any, Literal, Union

from pydantic import Field, TypeAdapter

from kernelopt.models.common import Model
from kernelopt.models.harness import Candidate, Evaluation, FailureReason, Problem, Timing, TimingStats

# A reply longer than this is a candidate flooding the channel, not a reply.
MAX_LINE_BYTES = 16 << 20


class ProtocolError(Exception):
    """The other side closed the pipe, sent garbage, or did not answer in time."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class Slot(Model):
    """Where one tensor lives in the arena (contiguous, `nbytes` from `offset`)."""

    offset: int
    nbytes: int
    dtype: str  # torch dtype name without "torch."
    shape: list[int]


class Value(Model):
    """One positional input or output: a tensor in a slot, or a JSON-able scalar."""

    slot: Slot | None = None
    scalar: Any = None


class ArenaSpec(Model):
    kind: Literal["file", "cuda_fd", "cuda_ipc"]
    nbytes: int
    path: str | None = None  # kind == "file"
    fd: int | None = None  # kind == "cuda_fd": the allocation's fd, inherited by the runner (cuda_fd.py)
    mapped_nbytes: int | None = None  # kind == "cuda_fd": nbytes rounded up to the driver's allocation grain
    handle: str | None = None  # kind == "cuda_ipc" (old drivers): base64 of the pickled IPC rebuild recipe (verifier -> runner only)
    device: str = "cpu"


# --- engine -> verifier -------------------------------------------------------------------


class WorkerConfig(Model):
    """What a verifier worker holds for its whole life: the problem and how to judge."""

    problem: Problem
    device: str  # "cuda:0", "cpu"
    trials: int = 3
    seed: int = 0
    atol: float | None = None
    rtol: float | None = None
    timing: dict[str, Any] = Field(default_factory=dict, description="keyword options of time_callable")
    baselines: list[str] = Field(default_factory=list)
    isolate: Literal["worker", "candidate", "sandbox"] = "worker"
    timeout_s: float = 300.0
    cpu_timing_calls: int = 3
    cache: bool = Field(True, description="baselines from / into the user's cache (kernelopt.harness.cache)")
    zygote: bool = Field(False, description="fork runners from a zygote (kernelopt.harness.zygote), not start them cold")


def new_nonce() -> str:
    return secrets.token_hex(16)


class EvaluateRequest(Model):
    type: Literal["evaluate"] = "evaluate"
    index: int
    # Unguessable, fresh per request: every reply to this request carries it back, so a line
    # written into the engine's pipe by anyone but the verifier answers no request.
    nonce: str = Field(default_factory=new_nonce)
    candidate: Candidate
    verify: bool = True
    time: bool = True
    race_against_ms: float | None = Field(
        None, description="racing: time first and stop once clearly slower than this (then no verification)")


class ShutdownRequest(Model):
    type: Literal["shutdown"] = "shutdown"


EngineRequest = Union[EvaluateRequest, ShutdownRequest]


class ReadyReply(Model):
    type: Literal["ready"] = "ready"
    device: str
    interpreter: bool
    atol: float
    rtol: float
    baselines: dict[str, Timing] = Field(default_factory=dict)
    reference_floor_ms: float | None = None
    reference_bytes: int = Field(0, description="bytes of the inputs and outputs: the least DRAM traffic of any kernel")
    setup_s: float = Field(0.0, description="seconds from the worker's start to this reply, baselines_s included")
    baselines_s: float = Field(0.0, description="of setup_s, the seconds spent timing the baselines (0 when cached)")
    baselines_cached: list[str] = Field(default_factory=list, description="baselines that came from the cache")


class ProgressReply(Model):
    type: Literal["progress"] = "progress"
    index: int
    nonce: str = ""
    text: str


class ResultReply(Model):
    type: Literal["result"] = "result"
    index: int
    nonce: str = ""
    evaluation: Evaluation


class FatalReply(Model):
    """The worker cannot go on (the problem is broken, the device is unusable)."""

    type: Literal["fatal"] = "fatal"
    kind: Literal["bad_input", "needs_gpu", "internal"]
    message: str


VerifierReply = Union[ReadyReply, ProgressReply, ResultReply, FatalReply]


# --- verifier -> runner -------------------------------------------------------------------


class RunnerRequestBase(Model):
    # Fresh per request (set by the verifier), echoed in the reply: a reply the candidate wrote into
    # its runner's channel in advance answers no request.
    nonce: str = ""


class RunnerInit(RunnerRequestBase):
    type: Literal["init"] = "init"
    problem: Problem
    device: str
    seed: int
    arena: ArenaSpec
    inputs: list[Value]
    outputs: list[Value]  # the reference outputs' layout: where the runner copies the candidate's
    digest_key: int = 0  # keys `arena.output_digest` on a GPU (drawn by the verifier per runner)


class LoadRequest(RunnerRequestBase):
    type: Literal["load"] = "load"
    candidate: Candidate
    seed: int
    source: str | None = Field(None, description="the candidate's text, as the verifier read it and checked against "
                                                 "candidate.sha256; the runner runs it instead of reading the file")


class TrialRequest(RunnerRequestBase):
    type: Literal["trial"] = "trial"
    seed: int


class TimeRequest(RunnerRequestBase):
    """Time the candidate on the arena's inputs with CUDA events (`time_callable`), in the runner."""

    type: Literal["time"] = "time"
    timing: dict[str, Any] = Field(default_factory=dict)
    race_against_ms: float | None = Field(None, description="racing: stop timing once clearly slower than this")


class CallRequest(RunnerRequestBase):
    """One timed call of the candidate on the arena's inputs (the interpreter path: the verifier holds
    the clock around this request); the runner copies what it returned into the arena."""

    type: Literal["call"] = "call"


class UnloadRequest(RunnerRequestBase):
    type: Literal["unload"] = "unload"


RunnerRequest = Union[RunnerInit, LoadRequest, TrialRequest, TimeRequest, CallRequest, UnloadRequest]


class OutputInfo(Model):
    """What the candidate returned at one output position (as the runner saw it)."""

    shape: list[int] | None = None
    dtype: str | None = None
    copied: bool = False  # written into the arena slot (same shape and dtype as the reference)
    scalar: Any = None
    # Of every copied output (a trial's, the judged timed call's, an interpreter call's):
    # `arena.output_digest` of the value the runner copied, taken from the candidate's returned
    # tensor right after the copy. The verifier finds the same digest in the slot it judges, or
    # something wrote the slot after the copy -- a helper thread, process or kernel the candidate
    # started (docs/harness.md).
    digest: str | None = None


class RunnerReply(Model):
    """Every runner answer. `ok=False` carries a classified failure."""

    ok: bool
    nonce: str = ""  # the request's, echoed
    reason: FailureReason | None = None
    message: str | None = None
    traceback: str | None = None
    # load
    sha256: str | None = None
    # trial
    outputs: list[OutputInfo] = Field(default_factory=list)
    changed_after_sync: int | None = Field(None, description="index of an output that changed after a device-wide sync")
    # time
    timing: TimingStats | None = None
    calls: int = 0
    judged_call: int | None = Field(None, description="which call's outputs the arena holds (1-based over all "
                                   "calls, the warm-up's included): one drawn uniformly over the timed calls")
    # after any request: did the checks' functions stay the originals, is the device usable
    tampered: list[str] = Field(default_factory=list)
    guard: dict[str, int] = Field(default_factory=dict, description="id() of every guarded function, read now")
    device_ok: bool = True


# --- verifier -> zygote (kernelopt.harness.zygote) ----------------------------------------------
# One message each way on a unix socket; the fork request carries the new runner's fds (SCM_RIGHTS).


class ZygoteRequest(Model):
    """Fork a runner: its environment (what `candidate_env` and `sandbox.tree_env` give a spawned
    runner) and its working directory, both made by the verifier."""

    env: dict[str, str]
    cwd: str
    inherit: list[int] = Field(default_factory=list, description="numbers at which the runner gets the fds passed after "
                               "its 4 pipe ends, as a spawned runner inherits them (pass_fds): the GPU arena's")


class ZygoteReply(Model):
    ready: bool = Field(False, description="the zygote's first message: imports done, waiting for requests")
    pid: int | None = Field(None, description="the runner forked for the request")
    error: str | None = Field(None, description="why the zygote did not fork (the verifier starts a runner cold)")


# --- engine -> profiling child (run_in_child under ncu) ---------------------------------------


class ProfileRequest(Model):
    """What a profiling child (`kernelopt.profile.target` / `.static`) is asked to do."""

    problem: Problem
    candidate: Candidate
    seed: int = 0
    warmup_calls: int = 1


# --- JSON lines on pipes ------------------------------------------------------------------

_ENGINE = TypeAdapter(EngineRequest)
_VERIFIER = TypeAdapter(VerifierReply)
_RUNNER = TypeAdapter(RunnerRequest)


class Channel:
    """One end of a pair of pipes carrying JSON lines."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self._buf = b""

    def send(self, message: Model) -> None:
        data = message.model_dump_json().encode() + b"\n"
        view = memoryview(data)
        try:
            while view:
                written = os.write(self.write_fd, view)
                view = view[written:]
        except (BrokenPipeError, OSError) as exc:
            raise ProtocolError(f"the other process is gone ({exc})") from None

    def recv_json(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The next line as a JSON object; ProtocolError on EOF, garbage or timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE_BYTES:
                raise ProtocolError(f"a message longer than {MAX_LINE_BYTES} bytes")
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.read_fd], [], [], wait)
            if not ready:
                raise ProtocolError(f"no answer within {timeout_s:g} s", timeout=True)
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise ProtocolError("the other process closed its pipe")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            data = json.loads(line)
        except ValueError:
            raise ProtocolError("a message that is not JSON") from None
        if not isinstance(data, dict):
            raise ProtocolError("a message that is not a JSON object")
        return data

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def parse_engine_request(data: dict[str, Any]) -> EngineRequest:
    return _ENGINE.validate_python(data)


def parse_verifier_reply(data: dict[str, Any]) -> VerifierReply:
    return _VERIFIER.validate_python(data)


def parse_runner_request(data: dict[str, Any]) -> RunnerRequest:
    return _RUNNER.validate_python(data)


def parse_runner_reply(data: dict[str, Any]) -> RunnerReply:
    return RunnerReply.model_validate(data)
