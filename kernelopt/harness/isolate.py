"""Run one piece of work on a candidate in a child process with a time limit.

Candidate kernels are untrusted: they can hang, segfault, hit an illegal memory
access or corrupt the CUDA context. Every stage that executes a candidate
(verify, time, profile) does it through `run_in_child`, so such a failure fails
that candidate and never the caller.

The child is `python -m kernelopt.harness.isolate REQUEST.json RESULT.json`. The
request names a *mode*; modes map to functions in `CHILD_MODES` (no arbitrary
import paths travel through files). A child function takes the request's `args`
dict and returns a JSON-able dict.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import Field

from kernelopt.harness import sandbox
from kernelopt.models.common import Model

# Captured stdout + stderr kept per child (head and tail of each): enough for a
# traceback and the candidate's prints, small enough for --json.
OUTPUT_CAP_BYTES = 64 * 1024

# mode -> "module:function" run inside the child
CHILD_MODES: dict[str, str] = {
    "profile": "kernelopt.profile.target:child_profile",
    "static": "kernelopt.profile.static:child_static",
    "read_ncu_rep": "kernelopt.profile.importers:child_read_ncu_rep",
    "selftest": "kernelopt.harness.isolate:_child_selftest",
}

ChildErrorKind = Literal["bad_input", "compile", "runtime", "timeout", "crash"]


class ChildResult(Model):
    ok: bool
    value: dict[str, Any] | None = None
    error_kind: ChildErrorKind | None = None
    message: str | None = None
    returncode: int | None = None
    stderr_tail: str = ""
    elapsed_s: float = 0.0
    extra: dict[str, Any] = Field(default_factory=dict)


class ChildError(Exception):
    """Raised inside a child to report a classified failure (compile/runtime/bad_input)."""

    def __init__(self, kind: ChildErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# The isolation mode and device of the run whose candidates the children run: `sandbox` wraps each
# child (and its `prefix`, ncu included) in the OS sandbox, so a candidate profiled in a sandboxed
# run is not run unsandboxed there. Set by the loop around its profile stage (`children_isolated`).
_CHILD_ISOLATION: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar(
    "kernelopt_child_isolation", default=("worker", "cpu"))


@contextlib.contextmanager
def children_isolated(isolate: str, device: str) -> Iterator[None]:
    """Within the block, `run_in_child` runs its children under `isolate` ('sandbox': confined, as the
    engine's runners are; anything else: a plain child) on `device`, the one GPU they see
    (`sandbox.sole_gpu_env`)."""
    token = _CHILD_ISOLATION.set((isolate, device))
    try:
        yield
    finally:
        _CHILD_ISOLATION.reset(token)


def run_in_child(
    mode: str,
    args: dict[str, Any],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
    cwd: str | None = None,
    output_cap_bytes: int = OUTPUT_CAP_BYTES,
    writable: list[str] | None = None,
) -> ChildResult:
    """Run `CHILD_MODES[mode](args)` in a fresh Python process.

    `prefix` wraps the child command (e.g. an `ncu ... --` invocation); `env` adds
    variables (e.g. TRITON_INTERPRET=1) to the allowlisted candidate environment
    (`sandbox.candidate_env`: no API keys or tokens). stdin is closed; stdout/stderr
    are captured, head and tail, within `output_cap_bytes`. On timeout, and after the
    child exits, its whole tree is killed (daemons that setsid'd and double-forked
    included), so nothing the candidate started outlives this call.
    """
    if mode not in CHILD_MODES:
        raise ValueError(f"unknown child mode {mode!r}")
    tmp = sandbox.make_tmpdir(mode)
    req_path = tmp / "request.json"
    out_path = tmp / "result.json"
    try:
        req_path.write_text(json.dumps({"mode": mode, "args": args}))
    except BaseException:
        sandbox.remove_tmpdir(tmp)
        raise
    cmd = [*(prefix or []), sys.executable, "-m", "kernelopt.harness.isolate", str(req_path), str(out_path)]
    isolate, device = _CHILD_ISOLATION.get()
    # On a GPU, that GPU only, as cuda:0 (as the engine's runners see theirs): the profile runs
    # where the caller holds the GPU's lock, and the candidate reaches no other GPU from there.
    env = {**(env or {}), **sandbox.sole_gpu_env(device)}
    if isolate == "sandbox":
        # Read-only but for its own dir and `writable` (a profile's output dir).
        env = {**env, **sandbox.sandbox_env(tmp, device)}
        cmd = sandbox.sandbox_argv(cmd, writable=[str(tmp), *(writable or [])], device=device)
    start = time.monotonic()
    child = sandbox.spawn(
        cmd,
        env=sandbox.candidate_env(env),
        cwd=cwd,
        output_cap_bytes=output_cap_bytes,
        name=mode,
        tmpdir=tmp,
    )
    try:
        code = child.wait(timeout_s)
        elapsed = time.monotonic() - start
        # Whatever the child left running (a daemon holding the pipes, a hung
        # grandchild) dies here, before the result is read.
        child.kill()
        stdout, stderr = child.output()
        extra: dict[str, Any] = {"stdout_tail": stdout}
        if code is None:
            return ChildResult(
                ok=False,
                error_kind="timeout",
                message=f"did not finish within {timeout_s:g} s",
                returncode=child.returncode,
                stderr_tail=stderr,
                elapsed_s=elapsed,
                extra=extra,
            )
        payload = _read_result(out_path)
        if payload is not None:
            return ChildResult(
                ok=bool(payload.get("ok")),
                value=payload.get("value"),
                error_kind=payload.get("error_kind"),
                message=payload.get("message"),
                returncode=code,
                stderr_tail=stderr,
                elapsed_s=elapsed,
                extra=extra,
            )
        return ChildResult(
            ok=False,
            error_kind="crash",
            message=describe_exit(code),
            returncode=code,
            stderr_tail=stderr,
            elapsed_s=elapsed,
            extra=extra,
        )
    finally:
        child.cleanup()


def _read_result(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return None
    return payload if isinstance(payload, dict) else None


def describe_exit(code: int | None, who: str = "child process") -> str:
    """How a process ended, in words: 'died with SIGSEGV' or 'exited with code N'."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} died with {name}"
    return f"{who} exited with code {code} without a result"


def _child_selftest(args: dict[str, Any]) -> dict[str, Any]:
    action = args.get("action")
    if action == "sleep":
        time.sleep(float(args["seconds"]))
    elif action == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif action == "raise":
        raise RuntimeError("boom")
    elif action == "compile_error":
        raise ChildError("compile", "bad kernel")
    elif action in ("fork_hang", "daemon"):
        # fork_hang: a grandchild in its own session holds stdout open and the child
        # hangs; daemon: a double-forked, setsid daemon holds stdout and the child
        # returns. Neither may outlive run_in_child (issue #14's planted bug).
        _spawn_sleeper(str(args["pid_file"]), double_fork=action == "daemon")
        if action == "fork_hang":
            time.sleep(float(args.get("seconds", 60)))
    elif action == "print":
        sys.stdout.write(str(args.get("stdout", "")))
        sys.stderr.write(str(args.get("stderr", "")))
    elif action == "env":
        return {"env": dict(os.environ)}
    elif action == "stdin":
        return {"stdin": sys.stdin.read()}
    elif action == "write":
        # Which of `paths` this child can write (the sandbox's read-only view).
        wrote = []
        for path in args["paths"]:
            try:
                with open(path, "a") as fh:
                    fh.write("child\n")
                wrote.append(path)
            except OSError:
                pass
        return {"wrote": wrote}
    return {"echo": args}


def _spawn_sleeper(pid_file: str, *, double_fork: bool) -> None:
    if os.fork() != 0:
        if double_fork:
            os.wait()
        _wait_for(pid_file)
        return
    os.setsid()
    if double_fork and os.fork() != 0:
        os._exit(0)
    Path(pid_file + ".tmp").write_text(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    time.sleep(60)
    os._exit(0)


def _wait_for(path: str, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.01)


def _child_main(req_path: str, out_path: str) -> int:
    from kernelopt.errors import BadInput

    # Run as __main__, this module's own ChildError is another class than the one
    # child functions raise: catch the importable one.
    from kernelopt.harness.isolate import ChildError
    from kernelopt.harness.sandbox import watch_owner

    watch_owner()
    request = json.loads(Path(req_path).read_text())
    module_name, func_name = CHILD_MODES[request["mode"]].split(":")
    result: dict[str, Any]
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = {"ok": True, "value": func(request["args"])}
    except ChildError as exc:
        result = {"ok": False, "error_kind": exc.kind, "message": str(exc)}
    except BadInput as exc:
        result = {"ok": False, "error_kind": "bad_input", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any failure of untrusted code is a runtime failure
        traceback.print_exc()
        result = {"ok": False, "error_kind": "runtime", "message": f"{type(exc).__name__}: {exc}"}
    Path(out_path).write_text(json.dumps(result, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a candidate may have left CUDA/threads in a bad state.
    os._exit(0)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])
