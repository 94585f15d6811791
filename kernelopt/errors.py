"""Errors that the CLI turns into one-line messages and documented exit codes.

Exit codes (the same for every command):
  0  success
  1  the candidate is wrong or failed, or something the requested mode needs is missing (no GPU)
  2  bad input or usage: missing file, malformed problem/kernel/YAML/database; an external
     tool (ncu, nvcc) missing or failing. A missing ncu is 2, not 1: exit 1 is a verdict on
     the candidate (or the machine has no GPU at all), and a search loop must not count a
     missing profiler against a candidate.

With `--json`, a failing command also prints {"error": {"message", "exit_code", "type"}}
on stdout (kernelopt.cli.report_error).
"""

from __future__ import annotations

import threading


class KerneloptError(Exception):
    """Base class: `str(err)` is the one-line message, `exit_code` the process exit code.

    `reason` is the engine's failure taxonomy (`kernelopt.models.harness.FailureReason`) where
    the raiser knows it, so a caller that keeps failures as data (the profile stage's
    `ProfileResult`, an evaluation) records the same reason the engine would."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        self.reason = reason


class BadInput(KerneloptError):
    """A file or argument the user gave cannot be used (exit 2)."""

    exit_code = 2


class CandidateFailed(KerneloptError):
    """The candidate kernel failed: compile error, crash, timeout or wrong result (exit 1)."""

    exit_code = 1


class MissingRequirement(KerneloptError):
    """Something the requested mode needs is not available (exit 1): a GPU for `bench`, or
    whatever `env --require` names. A missing or failing ncu under `profile` is ToolFailed (exit 2)."""

    exit_code = 1


class ToolFailed(KerneloptError):
    """An external tool (ncu, ptxas) is missing, failed or timed out (exit 2)."""

    exit_code = 2


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so the same cleanup runs (engine workers stopped, lock released)."""


# Set by the CLI's SIGINT/SIGTERM handling (cli.common.interruptible) and by the reaper's
# (harness.sandbox._on_signal, before it kills the children). An exception raised from a
# signal handler lands wherever the main thread is, and some places swallow it (logging's lock
# release, a finalizer): the flag is what the run directory checks before it records anything,
# so a run that went on after a swallowed interrupt records nothing more (never the candidate in
# flight as a crash, which is what its killed workers look like).
_interrupted: list[int] = []


def mark_interrupted(signum: int) -> None:
    _interrupted.append(signum)


def interrupted_by() -> int | None:
    """The signal that interrupted this process (SIGINT/SIGTERM), or None."""
    return _interrupted[0] if _interrupted else None


def clear_interrupted() -> None:
    _interrupted.clear()


# Writable run directories and suite runs open in this process: the work an interrupt stops. The
# reaper marks every interrupt (`sandbox._on_signal`), also in a library caller that catches the
# KeyboardInterrupt and goes on (a notebook); the mark ends with the work it stopped, so the
# caller's next run records again, while a suite's other threads still see it.
_open_work = [0]
_work_lock = threading.Lock()


def work_opened() -> None:
    """A run directory or a suite opened for writing. With nothing else open, an interrupt marked
    earlier stopped work that has all ended: it is cleared."""
    with _work_lock:
        if _open_work[0] == 0:
            _interrupted.clear()
        _open_work[0] += 1


def work_closed() -> None:
    with _work_lock:
        _open_work[0] = max(0, _open_work[0] - 1)


def end_interrupt() -> None:
    """A command's interrupt is over: cleared, unless work it stopped is still open (a suite's
    problem threads, which run on while the process exits, must not record what the killed
    engines made)."""
    with _work_lock:
        if _open_work[0] == 0:
            _interrupted.clear()
