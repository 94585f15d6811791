"""The process layer under every child that runs candidate code.

Candidates are untrusted in the fault sense: they hang, crash, flood their output,
leave daemons behind and may read whatever the environment offers. This module is
the one place that starts such processes (`spawn`) and the one place that makes sure
nothing they start outlives kernelopt (`ChildProcess.kill`, `kill_descendants`,
`install_reaper`). It is fault isolation, not a security sandbox: a child keeps the
user's file-system and network rights (see docs/harness.md, "Process isolation").

How a whole tree is found, without relying on the process group alone (a candidate
can `setsid` and double-fork out of it):

- every spawned child carries `KERNELOPT_SANDBOX_TAG=<token>` in its environment;
  forks inherit it, so `/proc/<pid>/environ` names the tree a process belongs to even
  after it left the session and was re-parented;
- kernelopt makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so orphans
  re-parent to it instead of init, stay its descendants, and can be reaped;
- the process group / session of the child and the parent-pid tree below it.

Linux only for the tree walk (`/proc`); elsewhere `kill` falls back to the group.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

TAG_VAR = "KERNELOPT_SANDBOX_TAG"
# The spawned child's temp dir: a sandboxed process that spawns in turn makes its
# children's dirs inside it, so they go when the outer dir goes even if the middle
# process leaves with os._exit (as the engine's worker does).
DIR_VAR = "KERNELOPT_SANDBOX_DIR"
# "pid:start" of the process that spawned this one (`watch_owner`).
OWNER_VAR = "KERNELOPT_SANDBOX_OWNER"
TMP_PREFIX = "kernelopt-child-"

# Exact names and name prefixes a candidate process may inherit. Everything else
# (API keys, cloud credentials, tokens, the user's shell state) stays behind.
_ALLOWED_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ",
        "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "VIRTUAL_ENV",
        "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
        "PYTHONNOUSERSITE", "PYTHONFAULTHANDLER", "PYTHONWARNINGS",
        # Compiling kernels: Triton's launcher stub, torch's load_inline (MAX_JOBS), nvcc.
        "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
        "CC", "CXX", "CUDACXX", "CUDAHOSTCXX", "MAX_JOBS",
        "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    }
)
_ALLOWED_PREFIXES = (
    "LC_", "CUDA_", "NVIDIA_", "NVCC_", "CUBLAS_", "CUDNN_", "NCCL_",
    "TRITON_", "TORCH", "PYTORCH_", "KERNELOPT_",
    # Nsight Compute / the CUDA profiling interface read these.
    "NV_", "NSIGHT_", "NCU_",
    # Thread counts of the CPU math libraries: not secrets, and they matter on small hosts.
    "OMP_", "MKL_", "OPENBLAS_",
)
# Dropped even when the prefix is allowed (KERNELOPT_API_KEY, NVIDIA_API_KEY, ...).
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")

# The checkout/installation the children must import (as run_in_child always did).
_PKG_ROOT = str(Path(__file__).resolve().parent.parent.parent)


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in _SECRET_MARKERS)


def _allowed(name: str) -> bool:
    if looks_secret(name):
        return False
    return name in _ALLOWED_NAMES or name.startswith(_ALLOWED_PREFIXES)


def candidate_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allowlisted environment for a process that runs candidate code.

    `extra` adds or overrides variables (e.g. TRITON_INTERPRET=0); a secret-looking
    name in it is a programming error (ValueError), never passed on silently.
    kernelopt's own root is prepended to PYTHONPATH so the child imports this checkout.
    """
    env = {name: value for name, value in os.environ.items() if _allowed(name)}
    for name, value in (extra or {}).items():
        if looks_secret(name):
            raise ValueError(f"candidate_env: refusing to pass secret-looking variable {name!r} to a candidate")
        env[name] = value
    env.pop(TAG_VAR, None)  # spawn sets the tag and dir of the tree it starts
    env.pop(DIR_VAR, None)
    env.pop(OWNER_VAR, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PKG_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------------------------------
# /proc


class _Proc(NamedTuple):
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # clock ticks after boot: tells a pid from a later reuse of it

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X")


_Table = dict[int, _Proc]


def _proc_table() -> _Table:
    """pid -> _Proc for the processes of this user.

    Scans /proc/*/stat rather than /proc/<pid>/task/*/children: the latter needs
    CONFIG_PROC_CHILDREN, which some kernels (this project's CI among them) lack.
    """
    table: _Table = {}
    uid = os.getuid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            # A non-dumpable process (`harden_process`: the engine, a verifier) shows its
            # /proc entry as root's; its real uid, in `status`, is still ours.
            if os.stat(f"/proc/{entry}").st_uid != uid and _real_uid(pid) != uid:
                continue
        except OSError:
            continue
        proc = _stat_of(pid)
        if proc is not None:
            table[pid] = proc
    return table


def _real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stat_of(pid: int) -> _Proc | None:
    """/proc/<pid>/stat as a _Proc; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return _parse_stat(raw)


def _parse_stat(raw: bytes) -> _Proc | None:
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return _Proc(int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode(), int(fields[19]))


def _owner_gone() -> bool | None:
    """Whether the process that spawned this one is gone; None if this one was not spawned."""
    pid_text, _, start_text = os.environ.get(OWNER_VAR, "").partition(":")
    if not (pid_text.isdigit() and start_text.isdigit()) or not sys.platform.startswith("linux"):
        return None
    proc = _stat_of(int(pid_text))
    return proc is None or proc.start != int(start_text) or proc.dead


def _remove_own_dir() -> None:
    own = os.environ.get(DIR_VAR, "")
    if not Path(own).name.startswith(TMP_PREFIX):
        return
    remove_tmpdir(own)
    # make_tmpdir nests a child's dir in its owner's. An owner that is gone (not merely stopped)
    # removes nothing any more, and when a candidate SIGKILLs its verifier and the engine together
    # no one else is left to: the owner's dir, and the arena attached to it, go with ours.
    parent = Path(own).parent
    if parent.name.startswith(TMP_PREFIX) and _owner_gone():
        remove_tmpdir(parent)


# An owner stopped (SIGSTOP, Ctrl-Z) this long counts as gone: a candidate that stops the engine
# must not keep its verifier and itself alive forever. KERNELOPT_OWNER_STOP_GRACE_S overrides it.
OWNER_STOP_GRACE_S = 60.0


def _owner_state() -> str | None:
    pid_text, _, _ = os.environ.get(OWNER_VAR, "").partition(":")
    proc = _stat_of(int(pid_text)) if pid_text.isdigit() else None
    return proc.state if proc is not None else None


def _continue_owner() -> None:
    pid_text, _, _ = os.environ.get(OWNER_VAR, "").partition(":")
    if pid_text.isdigit() and _owner_gone() is False:  # by pid and start time: never a reused pid
        try:
            os.kill(int(pid_text), signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_own_tree() -> None:
    """Every process carrying this process's own tag (or one nested under it), this one excepted:
    what a candidate double-forked away from this process, which `kill_descendants` cannot find
    by parentage once its ancestors are dead."""
    own = os.environ.get(TAG_VAR)
    if not own or not sys.platform.startswith("linux"):
        return
    _kill_loop(lambda table: {p for p in table if p != os.getpid() and _under(_tag_of(p), own)})


def watch_owner(interval_s: float = 0.25, on_stopped: Callable[[], None] | None = None) -> None:
    """In a process `spawn` started: once the process that spawned it is gone (or stopped for
    `OWNER_STOP_GRACE_S`), kill what this one started and everything carrying its tag, remove
    its temp dir and exit.

    With `on_stopped` (the verifier's), an owner found stopped on two polls in a row while this
    process runs is not waited out: a Ctrl-Z stops this process before its owner (`_on_tstp`), so
    the stop came from below, from a candidate. `on_stopped()` is called, then the owner continued.

    SIGKILL cannot be caught, so a killed kernelopt never runs its reaper; its children
    learn of it here instead. The verifier and runner would notice at their next read
    of the closed pipe, but only after the work in hand (a timing, a candidate's hang),
    and a profile child under ncu has no pipe at all: on the H100 one ran on after its
    command was SIGKILLed. The owner is named by pid and start time, so a reused pid
    does not count, and a zombie (killed, not yet reaped) counts as gone.
    """
    if _owner_gone() is not False:
        return
    try:
        grace = float(os.environ.get("KERNELOPT_OWNER_STOP_GRACE_S", OWNER_STOP_GRACE_S))
    except ValueError:
        grace = OWNER_STOP_GRACE_S

    def watch() -> None:
        stopped_since: float | None = None
        while not _owner_gone():
            state = _owner_state()
            if state in ("T", "t"):
                stopped_since = stopped_since or time.monotonic()
                # "t" is a debugger's stop (a candidate cannot ptrace the non-dumpable engine): waited out.
                if on_stopped is not None and state == "T" and time.monotonic() - stopped_since >= interval_s:
                    on_stopped()
                    _continue_owner()
                    stopped_since = None
                elif time.monotonic() - stopped_since > grace:
                    break
            else:
                stopped_since = None
            time.sleep(interval_s)
        try:
            kill_descendants()
            _kill_own_tree()
            _remove_own_dir()  # its owner, which made it, can no longer
        finally:
            os._exit(137)

    threading.Thread(target=watch, name="kernelopt-owner-watch", daemon=True).start()


def _tag_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    key = TAG_VAR.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(key):
            return item[len(key) :].decode(errors="replace")
    return None


def _under(tag: str | None, root: str) -> bool:
    return tag is not None and (tag == root or tag.startswith(root + "/"))


def _spawned_here(tag: str | None, prefix: str) -> bool:
    return tag is not None and any(part.startswith(prefix) for part in tag.split("/"))


def _descendants(table: _Table, root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.ppid, []).append(pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _protected() -> set[int]:
    """This process and its ancestors: never killed, whatever a tag or group says."""
    keep = {os.getpid(), 0, 1}
    pid = os.getppid()
    while pid > 1 and pid not in keep:
        keep.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read()
            pid = int(raw[raw.rfind(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return keep


def _kill_loop(select: Callable[[_Table], set[int]], *, deadline_s: float = 5.0) -> None:
    """SIGKILL whatever `select` picks until a scan finds nothing alive, and reap the
    orphans that re-parented to this (subreaper) process.

    Repeated because a process may fork between a scan and its kill: the new process
    inherits the tag and, its parent dead, re-parents here, so the next scan sees it.
    """
    keep = _protected()
    end = time.monotonic() + deadline_s
    while True:
        table = _proc_table()
        targets = select(table) - keep
        with _lock:
            _to_reap.update((pid, table[pid].start) for pid in targets if pid in table)
        live = [pid for pid in targets if pid in table and not table[pid].dead]
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap(table)
        if not live or time.monotonic() > end:
            return
        time.sleep(0.005)


# (pid, start) of processes this module killed; reaped once they are zombies whose
# parent is this subreaper (a grandchild may re-parent here only after a later scan).
_to_reap: set[tuple[int, int]] = set()


def _reap(table: _Table | None = None) -> None:
    # Only processes this module killed: a blanket waitpid(-1) would steal the exit
    # status of subprocesses other code in this process is waiting for; the start
    # time makes sure a recycled pid is never mistaken for one of them.
    if not _to_reap:
        return
    table = _proc_table() if table is None else table
    me = os.getpid()
    tracked = _tracked_pids()
    with _lock:
        for pid, start in list(_to_reap):
            proc = table.get(pid)
            if proc is None or proc.start != start:
                _to_reap.discard((pid, start))  # gone: reaped by its own parent
            elif proc.ppid == me and proc.dead and pid not in tracked:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                _to_reap.discard((pid, start))


# ---------------------------------------------------------------------------------------
# output capture


class _Capture:
    """Drains one pipe on a thread, keeping only its first and last `budget // 2` bytes,
    so a flood never blocks the child and never grows this process."""

    _MARK = "\n[... {n} bytes omitted ...]\n"

    def __init__(self, fd: int, budget: int) -> None:
        self.fd = fd
        self.head_limit = max(budget - 64, 0) // 2  # 64: room for the omission marker
        self.tail_limit = self.head_limit
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"kernelopt-drain-{fd}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # This thread owns the fd and is the only one to close it: closed under a
        # blocked read, its number could be reused and the next read would steal
        # another file's data.
        try:
            while True:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    return
                with self.lock:
                    self._add(chunk)
        except OSError:
            return
        finally:
            os.close(self.fd)

    def _add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or self.tail_limit == 0:
            return
        self.tail.append(chunk[-self.tail_limit :])
        self.tail_size += len(self.tail[-1])
        while self.tail_size - len(self.tail[0]) >= self.tail_limit:
            self.tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        with self.lock:
            tail = b"".join(self.tail)[-self.tail_limit :] if self.tail_limit else b""
            head = bytes(self.head)
            omitted = self.total - len(head) - len(tail)
        if omitted <= 0:
            return (head + tail).decode("utf-8", errors="replace")
        return head.decode("utf-8", errors="replace") + self._MARK.format(n=omitted) + tail.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------
# children

_lock = threading.RLock()
_live: dict[int, ChildProcess] = {}  # id(child) -> child, until cleanup
_tmpdirs: dict[str, int] = {}  # path -> pid of the process that made it
_seq = 0
_token_prefix: tuple[int, str] | None = None  # (pid, random): per process, renewed after a fork


def _process_prefix() -> str:
    global _token_prefix
    if _token_prefix is None or _token_prefix[0] != os.getpid():
        _token_prefix = (os.getpid(), secrets.token_hex(4))
    return f"{_token_prefix[0]}-{_token_prefix[1]}"


def _tracked_pids() -> set[int]:
    with _lock:
        return {c.pid for c in _live.values() if c._popen.returncode is None and c._owner == os.getpid()}


def make_tmpdir(name: str = "candidate") -> Path:
    """A fresh `kernelopt-child-<name>-*` dir that the reaper removes on exit; hand it
    to `spawn(tmpdir=...)` when files must exist before the child starts. One made in the
    temp dir itself (not inside this process's own sandbox dir) carries its owner record in
    its name (`owned_prefix`), so `sweep_stale_dirs` can remove it once this process is dead."""
    outer = os.environ.get(DIR_VAR)
    if outer and os.path.isdir(outer):
        path = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{name}-", dir=outer)  # goes with `outer`
    else:
        path = tempfile.mkdtemp(prefix=owned_prefix(f"{TMP_PREFIX}{name}-"))
    with _lock:
        _tmpdirs[path] = os.getpid()
    return Path(path)


# ---------------------------------------------------------------------------------------
# the sweep: what a SIGKILL of the whole tree (engine included: kill -9, the OOM killer, a job
# killer) left behind, where no handler, watcher or reaper was left to remove it

ARENA_PREFIX = "kernelopt-arena-"
# The names the sweep looks at, in the temp dir and in /dev/shm; nothing else is ever removed.
SWEPT_PREFIXES = (TMP_PREFIX, ARENA_PREFIX)
SHM_DIR = "/dev/shm"
# The owner record in a dir's name, just before mkdtemp's random part (letters, digits, '_'):
# `<prefix><pid>.<start>.<pidns>-<random>`. In the name, not in a file inside: written in the same
# mkdir that makes the dir (no dir without its record, even after a SIGKILL), and out of reach of a
# sandboxed candidate, which can write into its own dir and its arena's file but rename neither.
_RECORD = re.compile(r"-(\d+)\.(\d+)\.(\d+)-[a-z0-9_]+\Z")
_self_record: tuple[int, str | None] | None = None  # (pid, record): per process, renewed after a fork


def owner_record() -> str | None:
    """`<pid>.<start>.<pidns>` of this process: its pid, its start time (field 22 of
    /proc/<pid>/stat, clock ticks after boot: a later process that reuses the pid has another) and
    its pid namespace's inode (a pid means nothing in another namespace sharing the temp dir). None
    where /proc cannot vouch for them (not Linux, or a /proc of another pid namespace)."""
    global _self_record
    pid = os.getpid()
    if _self_record is None or _self_record[0] != pid:
        record = None
        if sys.platform.startswith("linux"):
            try:
                with open("/proc/self/stat", "rb") as fh:
                    raw = fh.read()
                ns = os.stat("/proc/self/ns/pid").st_ino
                me = _parse_stat(raw) if int(raw.split(b" ", 1)[0]) == pid else None
            except (OSError, ValueError):
                me = None
            if me is not None:
                record = f"{pid}.{me.start}.{ns}"
        _self_record = (pid, record)
    return _self_record[1]


def owned_prefix(prefix: str) -> str:
    """`prefix` with this process's owner record (`owner_record`) appended, for `mkdtemp(prefix=...)`
    of a dir this process owns at the top of the temp dir or /dev/shm (a sandbox dir, an arena)."""
    record = owner_record()
    return f"{prefix}{record}-" if record else prefix


def _owner_alive(pid: int, start: int) -> bool | None:
    """Whether the process `pid` that started at `start` lives: False only when provably not
    (no such pid, or another process under it); None when it cannot be told (/proc hides it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, as another user's: a reuse of the pid, which its start time shows below
    proc = _stat_of(pid)
    if proc is not None:
        return proc.start == start  # a zombie not yet reaped still counts: it is gone soon enough
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False  # exited between the two looks
    except PermissionError:
        pass
    return None  # alive, but /proc does not show it (hidepid): not provably dead


def owned_dirs(folders: list[str] | None = None) -> list[tuple[str, str]]:
    """(path, owner record) of the kernelopt dirs in `folders` (default: the temp dir and /dev/shm)
    that carry an owner record (`owned_prefix`): named with a `SWEPT_PREFIXES` prefix, a directory
    itself (lstat: a symlink is never followed), this user's. One listdir per folder."""
    uid = os.getuid()
    found: list[tuple[str, str]] = []
    for folder in dict.fromkeys(folders if folders is not None else [tempfile.gettempdir(), SHM_DIR]):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            record = _RECORD.search(name) if name.startswith(SWEPT_PREFIXES) else None
            if record is None:
                continue
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                found.append((path, ".".join(record.groups())))
    return found


def stale_dirs(folders: list[str] | None = None) -> list[str]:
    """The `owned_dirs` whose owner is provably dead: a record of this pid namespace, and no process
    under its pid or another one (another start time: the pid was reused). A dir without a record
    (made before records existed) is never stale: nothing proves its owner dead."""
    here = owner_record()
    if here is None:
        return []
    ns = here.rsplit(".", 1)[1]
    found = []
    for path, record in owned_dirs(folders):
        pid, start, their_ns = record.split(".")
        if their_ns == ns and _owner_alive(int(pid), int(start)) is False:
            found.append(path)
    return found


def sweep_stale_dirs(folders: list[str] | None = None, *, owner: str | None = None) -> list[str]:
    """Remove the `stale_dirs` (a sandbox dir with the arenas attached to it, `remove_tmpdir`; an
    arena dir with what is in it) and return them: what an engine does once when it starts
    (`sweep_once`). With `owner` (an `owner_record()`), the dirs of that owner instead, dead or
    not: what an executor that ended the owner removes (a Ray actor's, kernelopt.harness.ray_executor)."""
    paths = stale_dirs(folders) if owner is None else [p for p, r in owned_dirs(folders) if r == owner]
    removed = []
    for path in paths:
        if os.path.basename(path).startswith(TMP_PREFIX):
            remove_tmpdir(path)
        else:
            # An arena's dir holds no list of others: the sweep reads nothing a candidate wrote into it.
            shutil.rmtree(path, ignore_errors=True)  # refuses a symlink put there since the lstat
        if not os.path.lexists(path):
            removed.append(path)
    return removed


_swept_pid: int | None = None


def sweep_once() -> None:
    """`sweep_stale_dirs` the first time this process calls it (Engine.start does)."""
    global _swept_pid
    with _lock:
        if _swept_pid == os.getpid():
            return
        _swept_pid = os.getpid()
    try:
        sweep_stale_dirs()
    except Exception:  # noqa: BLE001 - a failed sweep must never stop an engine from starting
        pass


# A file in a sandbox dir listing other directories that go with it (an arena in /dev/shm):
# whoever removes the sandbox dir -- its owner's cleanup, its own watch, the reaper -- removes them.
ALSO_REMOVE = ".kernelopt-also-remove"
# The only directories ALSO_REMOVE may name: nothing else is ever removed through it.
_ALSO_PREFIXES = (ARENA_PREFIX,)
# In an attached dir: the sandbox dir it goes with. A candidate can write an ALSO_REMOVE list into
# its own (writable) dir; only dirs that name that dir here go with it, and a sandboxed candidate
# cannot write this file into any arena's dir (read-only to it: only the arena's file is writable,
# worker.start_runner), so it cannot have them removed.
OWNER_MARK = ".kernelopt-owner"


def attach_dir(extra: Path | str) -> None:
    """Make `extra` (a `kernelopt-arena-*` dir) go when this process's sandbox dir goes, even if
    this process is SIGKILLed; outside a spawned process, when this process exits."""
    own = os.environ.get(DIR_VAR, "")
    if own and Path(own).name.startswith(TMP_PREFIX) and os.path.isdir(own):
        with open(os.path.join(extra, OWNER_MARK), "w") as fh:
            fh.write(os.path.realpath(own))
        with open(os.path.join(own, ALSO_REMOVE), "a") as fh:
            fh.write(str(extra) + "\n")
    with _lock:
        _tmpdirs[str(extra)] = os.getpid()


def _attached_to(extra: str, path: Path | str) -> bool:
    try:
        with open(os.path.join(extra, OWNER_MARK)) as fh:
            return fh.read() == os.path.realpath(path)
    except OSError:
        return False


def remove_tmpdir(path: Path | str) -> None:
    try:
        with open(os.path.join(path, ALSO_REMOVE)) as fh:
            extras = [line.strip() for line in fh if line.strip()]
    except OSError:
        extras = []
    for extra in extras:
        if Path(extra).name.startswith(_ALSO_PREFIXES) and _attached_to(extra, path):
            shutil.rmtree(extra, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    with _lock:
        _tmpdirs.pop(str(path), None)


class ChildProcess:
    """A spawned candidate process and everything it starts."""

    def __init__(self, popen: subprocess.Popen[bytes], tag: str, tmpdir: Path, cap: int, name: str) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.tag = tag
        self.tmpdir = tmpdir
        self.name = name
        assert popen.stdout is not None and popen.stderr is not None
        self._out = _Capture(_take_fd(popen.stdout), cap // 2)
        self._err = _Capture(_take_fd(popen.stderr), cap // 2)
        self._cleaned = False
        self._owner = os.getpid()  # a forked copy of this process must not touch it
        # More processes of its tree than its descendants, group, session and tag name (`adopt`).
        self._also: Callable[[_Table], set[int]] | None = None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """The child's exit code, or None if it is still running after `timeout` s.
        Waits for the child only, not for daemons it left holding its pipes."""
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def _select(self, table: _Table) -> set[int]:
        found: set[int] = set()
        if self._popen.returncode is None:
            # Before the child is reaped its pid is its own; after, it may be reused.
            found.add(self.pid)
            found |= _descendants(table, self.pid)
        # A group/session id is not reused while any member lives, so this stays safe.
        found |= {p for p, proc in table.items() if self.pid in (proc.pgid, proc.sid)}
        # Its own tag, or a tag nested under it (a sandboxed process that spawns in turn).
        found |= {p for p in table if p not in found and _under(_tag_of(p), self.tag)}
        if self._also is not None:
            found |= self._also(table)
        for pid in list(found):
            found |= _descendants(table, pid)
        return found

    def kill(self) -> None:
        """SIGKILL the whole tree: the child, its group and session, every descendant,
        and every process carrying this child's tag (those that setsid'd and
        double-forked away included). Idempotent."""
        if sys.platform.startswith("linux"):
            _kill_loop(self._select)
        else:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._popen.returncode is None:
            try:
                self._popen.kill()
            except ProcessLookupError:
                pass
        self._popen.wait()
        _reap()

    @property
    def bytes_written(self) -> tuple[int, int]:
        """How many bytes the tree wrote to (stdout, stderr), kept or not."""
        return self._out.total, self._err.total

    def output(self, drain_timeout_s: float = 0.5) -> tuple[str, str]:
        """(stdout, stderr) as text, each at most cap // 2 bytes kept: the head and the
        tail with an omission marker between. After the child exits, waits up to
        `drain_timeout_s` for the pipes to drain; a daemon still holding them open does
        not block this."""
        if self._popen.returncode is not None:
            end = time.monotonic() + drain_timeout_s
            for cap in (self._out, self._err):
                cap.thread.join(max(end - time.monotonic(), 0.0))
        return self._out.text(), self._err.text()

    def cleanup(self) -> None:
        """kill(), close the pipes and remove the temp dir. Idempotent."""
        if self._cleaned:
            return
        self.kill()
        # The tree is dead, so the pipes are at EOF unless an untagged stranger holds
        # them; the drain threads close them then.
        for cap in (self._out, self._err):
            cap.thread.join(1.0)
        remove_tmpdir(str(self.tmpdir))
        self._cleaned = True
        with _lock:
            _live.pop(id(self), None)

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def spawn(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | None = None,
    pass_fds: tuple[int, ...] = (),
    output_cap_bytes: int = 1 << 20,
    name: str = "candidate",
    tmpdir: Path | str | None = None,
) -> ChildProcess:
    """Start `argv` (no shell) as a candidate process.

    stdin is /dev/null; stdout/stderr are drained by threads that keep at most
    `output_cap_bytes` in all (head and tail of each stream); the child gets its own
    session and this tree's tag. `env` is used as given (build it with
    `candidate_env`). `tmpdir` (from `make_tmpdir`) is adopted, else one is made;
    `cleanup()` removes it. Installs the reaper on first use.
    """
    install_reaper()
    _reap()
    tmp = Path(tmpdir) if tmpdir is not None else make_tmpdir(name)
    child_env, tag = tree_env(env, tmp)
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            cwd=cwd,
            pass_fds=pass_fds,
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        remove_tmpdir(str(tmp))
        raise
    for stream in (popen.stdout, popen.stderr):
        _grow_pipe(stream)
    child = ChildProcess(popen, tag, tmp, output_cap_bytes, name)
    with _lock:
        _live[id(child)] = child
    return child


class _Adopted:
    """What a ChildProcess needs of its Popen, for a child of this process that no Popen started:
    a runner forked by a zygote (kernelopt.harness.zygote) and re-parented to this subreaper."""

    def __init__(self, pid: int, stdout_fd: int, stderr_fd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)
        self.stderr = os.fdopen(stderr_fd, "rb", buffering=0)
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:
                    pid, status = self.pid, 0  # reaped elsewhere: its status is lost (as Popen does)
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def adopt(pid: int, stdout_fd: int, stderr_fd: int, *, tag: str, tmpdir: Path | str, name: str,
          also: Callable[[_Table], set[int]] | None = None, output_cap_bytes: int = 1 << 20) -> ChildProcess:
    """A ChildProcess for `pid`, a child of this process that `spawn` did not start (a runner a
    zygote forked, re-parented to this subreaper), owning its `tag` and `tmpdir` (from `tree_env`)
    and the read ends of its stdout and stderr. `also(table)` names processes of its tree that
    its descendants, session and tag do not (`marked`): it is killed, drained and cleaned up
    like a spawned child."""
    popen = _Adopted(pid, stdout_fd, stderr_fd)
    for stream in (popen.stdout, popen.stderr):
        _grow_pipe(stream)
    child = ChildProcess(popen, tag, Path(tmpdir), output_cap_bytes, name)  # type: ignore[arg-type]
    child._also = also
    with _lock:
        _live[id(child)] = child
    return child


def marked(table: _Table, marker: str) -> set[int]:
    """The processes of `table` whose command line has the argument `marker`: every process a
    zygote forked (they share its command line) and what they forked without exec. Readable for
    every process, a non-dumpable one too, whose environment (its tag) is not."""
    out = set()
    for pid in table:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read().split(b"\0"):
                    out.add(pid)
        except OSError:
            continue
    return out


def kill_marked(marker: str, keep: set[int]) -> None:
    """SIGKILL every process `marked` with `marker` but those in `keep`, until none is left."""
    if sys.platform.startswith("linux"):
        _kill_loop(lambda table: marked(table, marker) - keep)


def tree_env(env: dict[str, str], tmp: Path | str) -> tuple[dict[str, str], str]:
    """`env` plus what marks a new tree of this process's (its tag, its dir `tmp`, this
    process as its owner), and the tag: what `spawn` gives a child, and what a runner forked
    from a zygote is given (kernelopt.harness.zygote)."""
    global _seq
    with _lock:
        _seq += 1
        own = f"{_process_prefix()}-{_seq}"
        _tmpdirs[str(tmp)] = os.getpid()
    # Nested under the tag this process runs with, if any, so killing an outer tree
    # (the engine's worker) also finds what its inner trees (the runner's) left behind.
    outer = os.environ.get(TAG_VAR)
    tag = f"{outer}/{own}" if outer else own
    child_env = dict(env)
    child_env[TAG_VAR] = tag
    child_env[DIR_VAR] = str(tmp)
    me = _stat_of(os.getpid())
    if me is not None:
        child_env[OWNER_VAR] = f"{os.getpid()}:{me.start}"
    return child_env, tag


def _take_fd(stream: Any) -> int:
    """A private fd for the drain thread; the Popen's file object is closed at once so
    that its garbage collection can never close the fd under the thread."""
    fd = os.dup(stream.fileno())
    stream.close()
    return fd


def _grow_pipe(stream: Any) -> None:
    # A 1 MiB pipe buffer: fewer wake-ups of the drain thread under a flood.
    if stream is None or not sys.platform.startswith("linux"):
        return
    try:
        import fcntl

        fcntl.fcntl(stream.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ
    except OSError:
        pass


# ---------------------------------------------------------------------------------------
# the reaper

_installed_pid: int | None = None
_handlers_pid: int | None = None
_subreaper = False
_prev_handlers: dict[int, Any] = {}
# SIGHUP too: a closed terminal must not leave children behind either.
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _set_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


_PR_SET_DUMPABLE = 4
_hardened = False


def harden_process() -> bool:
    """Make this process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, Linux only).

    A process of the same user can then no longer open this one's
    `/proc/<pid>/{mem,environ,fd/*,maps}` nor ptrace it: a candidate cannot write into
    the verifier's pipes, rewrite its references, or read the engine's environment (an
    API key). `/proc/<pid>/cmdline` stays readable to everyone: keep secrets off the
    command line. Root (CAP_SYS_PTRACE) is not stopped by this; `--isolate sandbox` is
    what keeps a root candidate away. The engine, every verifier and every zygote call it; a
    runner started cold never does (it is the candidate's own process), one forked from a zygote
    inherits it (kernelopt.harness.zygote). Also no core dumps of this process.
    Returns whether it took effect; idempotent. The flag survives fork and is reset by
    exec, so each process calls it itself.
    """
    global _hardened
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        _hardened = libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _hardened = False
    return _hardened


def set_dumpable(on: bool) -> bool:
    """`prctl(PR_SET_DUMPABLE, on)`: `harden_process()` is `set_dumpable(False)`."""
    global _hardened
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        ok = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok:
        _hardened = not on
    return ok


def is_hardened() -> bool:
    """Whether this process is non-dumpable (read from the kernel, not from our flag)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except (OSError, AttributeError):
        return False


def is_subreaper() -> bool:
    return _subreaper


def install_reaper() -> None:
    """Make sure nothing spawned from this process outlives it. Idempotent per process.

    Marks this process a child subreaper (orphans re-parent here, not to init), and on
    SIGINT, SIGTERM, SIGHUP and normal exit kills every live child tree and every
    remaining descendant, reaps them and removes the kernelopt temp dirs of this
    process; then the signal does what it did before (KeyboardInterrupt for SIGINT,
    exit 128+signum otherwise, or the handler that was installed before). Signal
    handlers can only be installed from the main thread: a first call from another
    thread sets up the rest, and the next call from the main thread adds them. An
    ignored signal stays ignored. SIGTSTP (Ctrl-Z), unless the caller handles it, stops the
    spawned trees with this process and continues them with it (`_on_tstp`).
    """
    global _installed_pid, _handlers_pid, _subreaper
    with _lock:
        if _installed_pid != os.getpid():
            _installed_pid = os.getpid()
            _subreaper = _set_subreaper()
            atexit.register(_at_exit)
        if _handlers_pid != os.getpid() and threading.current_thread() is threading.main_thread():
            _handlers_pid = os.getpid()
            for signum in _SIGNALS:
                prev = signal.getsignal(signum)
                if prev is signal.SIG_IGN or prev is None or prev is _on_signal:
                    continue
                _prev_handlers[signum] = prev
                signal.signal(signum, _on_signal)
            if hasattr(signal, "SIGTSTP") and signal.getsignal(signal.SIGTSTP) is signal.SIG_DFL:
                signal.signal(signal.SIGTSTP, _on_tstp)  # a handler of the caller's own stays


def kill_descendants() -> None:
    """Kill every live ChildProcess tree and every other descendant of this process
    (and every process carrying one of this process's tags), reap them, and remove
    this process's kernelopt temp dirs."""
    me = os.getpid()
    with _lock:
        children = [c for c in _live.values() if c._owner == me]
    for child in children:
        try:
            child.cleanup()
        except Exception:  # noqa: BLE001 - the reaper must get through every child
            pass
    if sys.platform.startswith("linux"):
        prefix = _process_prefix() + "-"

        def select(table: _Table) -> set[int]:
            found = _descendants(table, me)
            found |= {p for p in table if p not in found and _spawned_here(_tag_of(p), prefix)}
            for pid in list(found):
                found |= _descendants(table, pid)
            return found

        _kill_loop(select)
    with _lock:
        dirs = [path for path, owner in _tmpdirs.items() if owner == me]
    for path in dirs:
        remove_tmpdir(path)


def exit_cleanup() -> None:
    """What a spawned process does on its way out (also before `os._exit`, which skips
    atexit): kill what it started and, if its owner is gone and so cannot, remove its
    own temp dir (the verifier that read EOF from a SIGKILLed engine)."""
    kill_descendants()
    if _owner_gone():
        _remove_own_dir()


def _at_exit() -> None:
    if _installed_pid == os.getpid():  # not in a forked copy of this process
        exit_cleanup()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    from kernelopt.errors import mark_interrupted

    # Marked before the children die: other threads (a suite's problems, one per GPU) see their
    # engines die at once and must not record what that made as a result (`interrupted_by`). On
    # 4 H200s two problems killed this way were written to suite.jsonl as finished, unretimed.
    mark_interrupted(signum)
    if _installed_pid == os.getpid():
        kill_descendants()
    prev = _prev_handlers.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)  # default_int_handler raises KeyboardInterrupt
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _on_tstp(signum: int, frame: FrameType | None) -> None:
    """SIGTSTP (Ctrl-Z): stop the trees this process spawned, then this process; when it is
    continued (fg, bg), continue them.

    `spawn` starts every child in a session of its own, so a terminal's Ctrl-Z reaches this
    process alone. Stopping the children first is what tells a Ctrl-Z from a candidate's SIGSTOP
    of the engine: a verifier that finds its engine stopped while it runs itself takes the stop
    for a candidate's (`watch_owner`'s `on_stopped`). A SIGTSTP while this process has children
    and is not the foreground job of a terminal is ignored: a candidate below could have sent it,
    and once the whole tree is stopped nothing is left to continue it.
    """
    me = os.getpid()
    with _lock:
        children = [c for c in _live.values() if c._owner == me and c.returncode is None]
    if children and not _terminal_foreground():
        return
    stopped = _stop_trees(children)
    os.kill(me, signal.SIGSTOP)
    # Continued: continue what was stopped here (not what was stopped already, by someone else).
    for pid, start in stopped:
        proc = _stat_of(pid)
        if proc is not None and proc.start == start:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass


def _terminal_foreground() -> bool:
    """Whether this process is in the foreground job of its controlling terminal (a Ctrl-Z's target)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _stop_trees(children: list[ChildProcess], deadline_s: float = 2.0) -> list[tuple[int, int]]:
    """SIGSTOP every running process of `children`'s trees until a scan finds none running (a
    process may fork between a scan and its stop); returns the (pid, start) of those stopped.
    Linux only (`/proc`); elsewhere nothing is stopped and Ctrl-Z stops this process alone."""
    keep = _protected()
    stopped: dict[int, int] = {}
    end = time.monotonic() + deadline_s
    while True:
        table = _proc_table()
        targets: set[int] = set()
        for child in children:
            targets |= child._select(table)
        running = [p for p in targets - keep if p in table and table[p].state not in ("T", "t", "Z", "X")]
        for pid in running:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped.setdefault(pid, table[pid].start)
            except (ProcessLookupError, PermissionError):
                pass
        if not running or time.monotonic() > end:
            return list(stopped.items())
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------
# --isolate sandbox: the runner in its own user, mount and network (and, on the CPU, pid)
# namespaces, with a read-only view of the file system (kernelopt.harness.confine)

_sandbox_probe: dict[str, str | None] = {}


def _unshare_args(pid_namespace: bool = True) -> list[str]:
    args = ["--user", "--map-root-user", "--mount", "--net", "--kill-child"]
    if pid_namespace:
        # Off only for a legacy CUDA IPC arena (old drivers), whose handles cannot cross PID
        # namespaces: that runner stays in the verifier's, and is found by its tag as in the
        # other modes. The fd-shared arena (cuda_fd.py) crosses them.
        args += ["--pid", "--fork", "--mount-proc"]
    return args


def sandbox_unavailable(device: str = "cpu") -> str | None:
    """Why `--isolate sandbox` cannot run here (None: it can). Probed once per process and device kind."""
    key = "cuda" if device.startswith("cuda") else "cpu"
    if key in _sandbox_probe:
        return _sandbox_probe[key]
    why: str | None = None
    unshare = shutil.which("unshare")
    if not sys.platform.startswith("linux"):
        why = "it needs Linux namespaces"
    elif unshare is None:
        why = "`unshare` (util-linux) is not installed"
    else:
        try:
            proc = subprocess.run([unshare, *_unshare_args(), "--", "true"], capture_output=True, text=True,
                                  timeout=30, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                why = "user namespaces are not available (" + (proc.stderr.strip().splitlines() or ["?"])[-1][:120] + ")"
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"unshare failed ({exc})"
    _sandbox_probe[key] = why
    return why


SANDBOX_DEVICE_VAR = "KERNELOPT_SANDBOX_DEVICE"  # read by kernelopt.harness.confine


def sandbox_env(tmp: Path | str, device: str) -> dict[str, str]:
    """What a confined child adds to its environment: everything it may write is in its own `tmp`
    (the file system is read-only), compiler caches included, so each one compiles afresh; and the
    device kind, which tells `confine` whether to limit address space and give a private /dev/shm.
    One set for the engine's runners and for the children `run_in_child` starts (profiling)."""
    tmp = Path(tmp)
    return {"TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp), "TRITON_CACHE_DIR": str(tmp / "triton"),
            "TORCH_EXTENSIONS_DIR": str(tmp / "torch_extensions"), "XDG_CACHE_HOME": str(tmp / "cache"),
            "PYTHONDONTWRITEBYTECODE": "1", SANDBOX_DEVICE_VAR: "cuda" if device.startswith("cuda") else "cpu"}


# The variable that leaves a child of a GPU run only its own GPU (`sole_gpu_env`), and the name that
# child then gives it.
VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"
SOLE_GPU = "cuda:0"


def sole_gpu_env(device: str, uuid: str | None = None) -> dict[str, str]:
    """What a child that runs candidate code on `device` (this process's "cuda:N") adds to its
    environment so that it sees that GPU only, as `SOLE_GPU`: a candidate timed there cannot queue
    its work on another GPU, which no synchronize of its timer waits for (docs/harness.md). {} for
    the CPU. Read when the child initialises CUDA, before any candidate code runs in it.

    By the GPU's `uuid` where the caller has one (the verifier: `envinfo.gpu_uuid`), which names it
    whatever this process's own CUDA_VISIBLE_DEVICES; else by the N-th entry of that variable, or N
    where it is unset: the child then numbers the GPUs as this process does (CUDA_DEVICE_ORDER is
    passed on, `candidate_env`). An entry that names a MIG instance (MIG-...) is kept as it is."""
    if not device.startswith("cuda"):
        return {}
    index = int(device.partition(":")[2] or 0)
    own = os.environ.get(VISIBLE_VAR)
    entries = [e.strip() for e in own.split(",")] if own is not None else None
    entry = entries[index] if entries is not None and index < len(entries) else str(index)
    if uuid and not entry.startswith("MIG-"):
        entry = "GPU-" + uuid.removeprefix("GPU-")
    return {VISIBLE_VAR: entry}


def sandbox_argv(argv: list[str], *, writable: list[str], device: str, pid_namespace: bool = True) -> list[str]:
    """`argv` wrapped to run confined (see kernelopt.harness.confine): new user, mount, network
    and (unless `pid_namespace` is False: a legacy CUDA IPC arena) pid namespaces, a read-only
    file system but `writable`."""
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, *_unshare_args(pid_namespace), "--", sys.executable, "-m", "kernelopt.harness.confine",
            *writable, "--", *argv]


def watch_pipe(fd: int) -> None:
    """Exit once the other end of the pipe `fd` reads from is closed (its writer is gone), without
    reading from it. For a process in its own pid namespace, where `watch_owner` cannot see its owner."""
    import select

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)  # POLLHUP and POLLERR are reported whatever the mask
        while True:
            for _, event in poller.poll():
                if event & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    os._exit(137)

    threading.Thread(target=watch, name="kernelopt-pipe-watch", daemon=True).start()
