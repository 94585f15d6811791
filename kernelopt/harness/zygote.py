"""The zygote: a fork server that makes a fresh runner in milliseconds instead of seconds (issue #23).

On a GPU every timed candidate gets a fresh runner (its CUDA events must be recorded by code no
earlier candidate ran in), and a runner started cold pays a Python start and the imports of torch,
Triton and kernelopt (about 5 s on the H100, CUDA's init included) per candidate. A verifier
with a zygote starts it once, with its own start, before any candidate exists:
`python -m kernelopt.harness.zygote CTRL_FD MARKER`. The zygote

- makes itself non-dumpable first (`sandbox.harden_process`): no process of the user can open its
  `/proc/<pid>/{mem,fd,environ}` nor ptrace it;
- imports what a runner needs (torch, Triton, the runner and the modules it uses), but initialises
  no CUDA and starts no thread: a fork of it is a clean process. Both are checked before every
  fork; a zygote that fails the check forks nothing, and the verifier starts its runners cold;
- forks a runner on each request of its verifier (`ZygoteRequest` on a unix socket, with the
  runner's pipes, and on a GPU the arena's fd, passed as SCM_RIGHTS): the runner gets its own
  session, the arena's fd at the number it has in the verifier, stdin on /dev/null, its
  stdout and stderr on pipes the verifier drains, the environment and private working directory
  the verifier made for it (`candidate_env`, `sandbox.tree_env`: its own tag, dir and owner), and
  then runs `runner.serve` as a runner started cold does. It never execs, so it is non-dumpable
  from its first instruction to its last (PR_SET_DUMPABLE survives fork; only execve resets it): a
  runner started cold is dumpable, and another process of the user -- an earlier candidate's
  daemon -- could open its memory and replace its clock;
- forks twice, so that the runner re-parents to its verifier (a subreaper, `sandbox.install_reaper`)
  and is its child like a runner started cold: the verifier reads its exit status and kills its
  tree as it does a spawned runner's (`sandbox.adopt`). Every process a zygote forks shares its
  command line, `MARKER` included, which the verifier reads (a non-dumpable process's environment,
  where its tag is, is not readable to it) to find what a runner forked without exec;
- exits when its verifier closes the socket or dies, killing everything that carries its marker.

The verifier keeps one runner forked ahead (the spare), forked once the runner before it has
started: it waits for its `RunnerInit`, and touches no CUDA before it. Cold starts remain where no
zygote is running or it failed (a fork refused, a zygote killed or stopped by a candidate: the
verifier never starts a second one, which would be dumpable from its exec to its prctl while
candidates may be alive), and in `--isolate sandbox`, whose runners each get namespaces of their own.
"""

from __future__ import annotations

import os
import secrets
import select
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, NoReturn

from kernelopt.errors import BadInput

# "1" or "0": the zygote on or off, whatever the device (the engine's `zygote=` option wins).
ZYGOTE_VAR = "KERNELOPT_ZYGOTE"
# How long the verifier waits for the zygote's imports, and for one fork.
READY_TIMEOUT_S = 180.0
FORK_TIMEOUT_S = 30.0
MAX_MESSAGE = 1 << 20
MAX_FDS = 16


def resolve(option: bool | None, device: str, isolate: str) -> bool:
    """Whether the verifier of `device` forks its runners from a zygote: `option` (the engine's),
    else $KERNELOPT_ZYGOTE, else on for a CUDA device. Never in sandbox mode (each sandboxed
    runner has namespaces of its own; a zygote would put them all in one)."""
    if isolate == "sandbox":
        return False
    if option is None:
        env = os.environ.get(ZYGOTE_VAR, "").strip()
        if env not in ("", "0", "1"):
            raise BadInput(f"{ZYGOTE_VAR}={env!r}: expected 1 (fork runners from a zygote) or 0 (start them cold)")
        option = (env == "1") if env else device.startswith("cuda")
    return option


# --- the zygote's side ---------------------------------------------------------------------------


def _preload() -> None:
    """What a runner imports (runner.Runner, its guard, load, trial, time), imported once here."""
    import torch  # noqa: F401

    import kernelopt.harness.arena  # noqa: F401
    import kernelopt.harness.binding  # noqa: F401
    import kernelopt.harness.isolate  # noqa: F401
    import kernelopt.harness.poison  # noqa: F401
    import kernelopt.harness.runner  # noqa: F401
    import kernelopt.harness.timing  # noqa: F401

    try:
        import triton  # noqa: F401
    except ImportError:
        return
    try:
        # Imported at a runner's first JIT compile, and Triton's key (a hash of its own files,
        # cached per process): about 0.6 s of every runner on the H100 (session 7's profile).
        import triton.experimental.gluon  # noqa: F401
        from triton.runtime.cache import triton_key

        triton_key()
    except Exception:  # noqa: BLE001 - an optimisation only: a runner does it again itself
        pass


def why_not_fork() -> str | None:
    """Why this process must not fork a runner now (None: it may): a thread (a fork copies only the
    forking one, and any lock another held stays locked in the child), or CUDA initialised (a
    forked child cannot use it)."""
    import threading

    import torch

    if threading.active_count() != 1:
        return f"the zygote runs {threading.active_count()} threads"
    if torch.cuda.is_initialized():
        return "CUDA is initialised in the zygote"
    return None


def _close_all_but(keep: set[int]) -> None:
    start = 0
    for fd in sorted(keep):
        if fd > start:  # closerange of an empty range closes more than nothing on some Pythons
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


def _become_runner(ctrl: socket.socket, req: Any, fds: list[int]) -> NoReturn:
    """In the forked runner, before any candidate code: its own session, fds, environment, cwd."""
    try:
        import fcntl

        ctrl.close()
        os.setsid()
        # Every fd received moved above every number in play, then each inherited one to its number.
        base = max([2, *fds, *req.inherit]) + 1
        to_runner, from_runner, out, err, *inherited = (fcntl.fcntl(fd, fcntl.F_DUPFD, base) for fd in fds)
        for fd, number in zip(inherited, req.inherit):
            os.dup2(fd, number)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        _close_all_but({0, 1, 2, to_runner, from_runner, *req.inherit})
        os.environ.clear()
        os.environ.update(req.env)
        os.chdir(req.cwd)
        tempfile.tempdir = None  # TMPDIR is the runner's own now
        from kernelopt.harness.runner import serve
    except BaseException as exc:  # noqa: BLE001 - say why on the runner's stderr, which the verifier reads
        try:
            os.write(2, f"kernelopt zygote: the forked runner could not start: {exc!r}\n".encode())
        finally:
            os._exit(126)
    try:
        serve(to_runner, from_runner)
    finally:  # serve exits; an exception out of it is printed, and never returns into the zygote's code
        import traceback

        traceback.print_exc()
        os._exit(1)


def _quiet_fork() -> int:
    """os.fork() without Python 3.12's warning about native threads: `why_not_fork` has checked the
    Python ones; a native pool started by an import (OpenBLAS's, under numpy) shuts itself down
    around a fork (pthread_atfork), and torch starts its own pools at their first use."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _fork(ctrl: socket.socket, req: Any, fds: list[int]) -> int:
    """Fork the runner through an intermediate that exits at once: the runner re-parents to the
    verifier, the nearest subreaper."""
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    mid = _quiet_fork()
    if mid == 0:
        code = 1
        try:
            os.close(r)
            pid = _quiet_fork()
            if pid == 0:
                os.close(w)
                _become_runner(ctrl, req, fds)
            os.write(w, str(pid).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 64):
        data += chunk
    os.close(r)
    os.waitpid(mid, 0)
    if not data.isdigit():
        raise OSError("the zygote's fork failed")
    return int(data)


def _send(ctrl: socket.socket, reply: Any) -> None:
    ctrl.send(reply.model_dump_json().encode())


def main(ctrl_fd: int, marker: str) -> int:
    from kernelopt.harness.protocol import ZygoteReply, ZygoteRequest
    from kernelopt.harness.sandbox import exit_cleanup, kill_marked

    ctrl = socket.socket(fileno=ctrl_fd)
    try:
        _preload()
        why = why_not_fork()
    except Exception as exc:  # noqa: BLE001 - reported: the verifier starts its runners cold
        why = f"the zygote's imports failed: {type(exc).__name__}: {exc}"
    try:
        _send(ctrl, ZygoteReply(ready=True, pid=os.getpid(), error=why))
        while why is None:
            # Only the verifier holds the other end: a closed socket (its exit, its death) is the end.
            select.select([ctrl], [], [])
            msg, fds, _, _ = socket.recv_fds(ctrl, MAX_MESSAGE, MAX_FDS)
            if not msg:
                break
            try:
                req = ZygoteRequest.model_validate_json(msg)
                refused = why_not_fork() or (None if len(fds) == 4 + len(req.inherit) else "a request without its fds")
                _send(ctrl, ZygoteReply(pid=None if refused else _fork(ctrl, req, fds), error=refused))
            except (OSError, ValueError) as exc:
                _send(ctrl, ZygoteReply(error=f"{type(exc).__name__}: {exc}"))
            finally:
                for fd in fds:
                    os.close(fd)
    except OSError:
        pass  # the verifier is gone
    finally:
        # Its runners, the spare and what they forked: nothing outlives the verifier. And, as a
        # spawned process's watch does, its own dir and, if the verifier is gone, the verifier's (its
        # arena with it): the runner, whose watch would have removed them, was just killed.
        kill_marked(marker, {os.getpid()})
        exit_cleanup()
    return 0


# --- the verifier's side -------------------------------------------------------------------------


class Zygote:
    """A verifier's zygote: `start()` it before any candidate exists, `take()` a runner per fresh
    runner needed (None: start one cold), `close()` it with the verifier."""

    def __init__(self, child: Any, ctrl: socket.socket, marker: str, env_for: Callable[[Path], dict[str, str]],
                 inherit: Callable[[], tuple[int, ...]]) -> None:
        self.child = child
        self.ctrl = ctrl
        self.marker = marker
        self.env_for = env_for
        self.inherit = inherit
        self.pid: int | None = None  # the zygote's, once it is ready
        self.failed: str | None = None  # why no runner comes from it any more
        self.spare: tuple[Any, Any] | None = None  # (ChildProcess, Channel): the runner forked ahead
        self.forked: list[Any] = []  # the ChildProcess of every runner forked and not yet reaped

    @classmethod
    def start(cls, env_for: Callable[[Path], dict[str, str]],
              inherit: Callable[[], tuple[int, ...]] = tuple) -> "Zygote | None":
        """Spawn the zygote; `env_for(dir)` is a runner's environment with `dir` its private dir,
        `inherit()` the fds of this process a runner inherits at the same numbers (the arena's)."""
        from kernelopt.harness.sandbox import is_subreaper, make_tmpdir, spawn

        if not sys.platform.startswith("linux"):
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        marker = f"kernelopt-zygote-{secrets.token_hex(8)}"
        tmp = make_tmpdir("zygote")
        try:
            child = spawn([sys.executable, "-m", "kernelopt.harness.zygote", str(theirs.fileno()), marker],
                          env=env_for(tmp), cwd=str(tmp), pass_fds=(theirs.fileno(),), name="zygote", tmpdir=tmp)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        zygote = cls(child, ours, marker, env_for, inherit)
        if not is_subreaper():  # a forked runner would re-parent to init: no exit status, no tree
            zygote._fail("this process cannot be a subreaper")
        return zygote

    def _recv(self, timeout_s: float) -> Any:
        from kernelopt.harness.protocol import ZygoteReply

        ready, _, _ = select.select([self.ctrl], [], [], timeout_s)
        if not ready:
            raise OSError(f"the zygote did not answer within {timeout_s:g} s")
        msg = self.ctrl.recv(MAX_MESSAGE)
        if not msg:
            raise OSError("the zygote is gone")
        return ZygoteReply.model_validate_json(msg)

    def _fail(self, why: str) -> None:
        """No runner comes from this zygote any more; it and its spare go. Not the runner in hand:
        it carries the zygote's tag (its environment as /proc shows it is the zygote's), so the
        zygote's tree is only killed by `close()`, after the runner was stopped."""
        import signal

        self.failed = self.failed or why
        if self.spare is not None:
            self.spare[0].cleanup()
            self.spare[1].close()
            self.spare = None
        try:
            os.kill(self.child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.child.wait(5.0)
        self.ctrl.close()
        if why != "closed":
            tail = (self.child.output()[1].strip().splitlines() or [""])[-1][:300]
            print(f"kernelopt: the zygote failed ({why}{'; ' + tail if tail else ''}); runners start cold",
                  file=sys.stderr)

    def _fork(self) -> tuple[Any, Any] | None:
        from kernelopt.harness.protocol import Channel, ZygoteRequest
        from kernelopt.harness.sandbox import adopt, make_tmpdir, remove_tmpdir, tree_env

        if self.failed is not None:
            return None
        try:
            if self.pid is None:
                hello = self._recv(READY_TIMEOUT_S)
                if hello.error or hello.pid is None:
                    raise OSError(hello.error or "no ready message")
                self.pid = hello.pid
        except (OSError, ValueError) as exc:
            self._fail(str(exc))
            return None
        tmp = make_tmpdir("runner")
        env, tag = tree_env(self.env_for(tmp), tmp)
        to_runner_r, to_runner_w = os.pipe()
        from_runner_r, from_runner_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        theirs = [to_runner_r, from_runner_w, out_w, err_w]
        inherit = list(self.inherit())
        try:
            socket.send_fds(self.ctrl, [ZygoteRequest(env=env, cwd=str(tmp), inherit=inherit).model_dump_json().encode()],
                            theirs + inherit)
            reply = self._recv(FORK_TIMEOUT_S)
            if reply.pid is None:
                raise OSError(reply.error or "no pid")
        except (OSError, ValueError) as exc:
            for fd in (to_runner_w, from_runner_r, out_r, err_r):
                os.close(fd)
            remove_tmpdir(tmp)
            self._fail(str(exc))
            return None
        finally:
            for fd in theirs:
                os.close(fd)
        own: list[Any] = []
        runner = adopt(reply.pid, out_r, err_r, tag=tag, tmpdir=tmp, name="runner",
                       also=lambda table: self._born(table, own[0]))
        own.append(runner)
        self.forked = [r for r in self.forked if r.returncode is None] + [runner]
        return runner, Channel(from_runner_r, to_runner_w)

    def _born(self, table: Any, runner: Any) -> set[int]:
        """The processes of `runner`'s tree that only the zygote's marker names (what it forked
        without exec, wherever it re-parented): every marked process but the zygote and the
        other runners it forked that are alive (the spare, or the runner in hand)."""
        from kernelopt.harness.sandbox import marked

        others = {r.pid for r in self.forked if r is not runner and r.returncode is None}
        return marked(table, self.marker) - {self.child.pid} - others

    def take(self) -> tuple[Any, Any] | None:
        """A fresh runner that has loaded nothing (the spare, or one forked now) and its channel;
        None if the zygote cannot give one (start it cold)."""
        runner, self.spare = self.spare, None
        if runner is not None and runner[0].poll() is not None:  # killed while it waited (a candidate can signal it)
            runner[0].cleanup()
            runner[1].close()
            runner = None
        if runner is not None:
            import signal

            try:
                os.kill(runner[0].pid, signal.SIGCONT)  # stopped while it waited: it goes on
            except ProcessLookupError:
                pass
        return runner or self._fork()

    def prefork(self) -> None:
        """Fork the next runner ahead (call once the runner in hand has started)."""
        if self.spare is None:
            self.spare = self._fork()

    def close(self) -> None:
        """With the verifier, once its runner is stopped: the zygote's whole tree goes."""
        self._fail("closed")
        self.child.cleanup()


if __name__ == "__main__":
    from kernelopt.harness.sandbox import harden_process

    # First, before anything a runner inherits exists: no process of this user may open this
    # one's memory or fds, nor those of any runner forked from it.
    harden_process()
    # `python -m` put the working directory first on sys.path: no module of a runner forked from
    # here may come from a directory a candidate can write.
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    os._exit(main(int(sys.argv[1]), sys.argv[2]))
