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

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kernelopt.models.common import Model

# mode -> "module:function" run inside the child
CHILD_MODES: dict[str, str] = {
    "verify": "kernelopt.harness.verify:child_verify",
    "time": "kernelopt.harness.timing:child_time",
    "profile": "kernelopt.profile.target:child_profile",
    "static": "kernelopt.profile.static:child_static",
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


def run_in_child(
    mode: str,
    args: dict[str, Any],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
    cwd: str | None = None,
) -> ChildResult:
    """Run `CHILD_MODES[mode](args)` in a fresh Python process.

    `prefix` wraps the child command (e.g. an `ncu ... --` invocation); `env` adds
    variables (e.g. TRITON_INTERPRET=1). The child's whole process group is killed
    on timeout.
    """
    if mode not in CHILD_MODES:
        raise ValueError(f"unknown child mode {mode!r}")
    with tempfile.TemporaryDirectory(prefix="kernelopt-child-") as tmp:
        req_path = Path(tmp) / "request.json"
        out_path = Path(tmp) / "result.json"
        req_path.write_text(json.dumps({"mode": mode, "args": args}))
        cmd = [*(prefix or []), sys.executable, "-m", "kernelopt.harness.isolate", str(req_path), str(out_path)]
        child_env = dict(os.environ)
        child_env.update(env or {})
        # The child must import this very checkout/installation.
        pkg_root = str(Path(__file__).resolve().parent.parent.parent)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, child_env.get("PYTHONPATH", "")) if p)
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            return ChildResult(
                ok=False,
                error_kind="timeout",
                message=f"did not finish within {timeout_s:g} s",
                returncode=proc.returncode,
                stderr_tail=_tail(stderr),
                elapsed_s=time.monotonic() - start,
            )
        elapsed = time.monotonic() - start
        extra = {"stdout_tail": _tail(stdout)}
        if out_path.is_file():
            try:
                payload = json.loads(out_path.read_text())
            except json.JSONDecodeError:
                payload = None
            if isinstance(payload, dict):
                return ChildResult(
                    ok=bool(payload.get("ok")),
                    value=payload.get("value"),
                    error_kind=payload.get("error_kind"),
                    message=payload.get("message"),
                    returncode=proc.returncode,
                    stderr_tail=_tail(stderr),
                    elapsed_s=elapsed,
                    extra=extra,
                )
        return ChildResult(
            ok=False,
            error_kind="crash",
            message=_describe_exit(proc.returncode),
            returncode=proc.returncode,
            stderr_tail=_tail(stderr),
            elapsed_s=elapsed,
            extra=extra,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _tail(data: bytes | None, limit: int = 4000) -> str:
    if not data:
        return ""
    return data.decode("utf-8", errors="replace")[-limit:]


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"child process died with {name}"
    return f"child process exited with code {code} without a result"


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
    return {"echo": args}


def _child_main(req_path: str, out_path: str) -> int:
    from kernelopt.errors import BadInput

    # Run as __main__, this module's own ChildError is another class than the one
    # child functions raise: catch the importable one.
    from kernelopt.harness.isolate import ChildError

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
