"""The inside of `--isolate sandbox`: confine this process, then exec the runner.

`python -m kernelopt.harness.confine WRITABLE... -- ARGV...`, started by `sandbox.sandbox_argv`
under `unshare --user --map-root-user --mount --net [--pid --fork --mount-proc]`. It runs as
root of a fresh user namespace (no rights outside it) and, before any candidate code exists:

1. bind-mounts each WRITABLE path (the runner's private dir, the arena's file) onto itself;
2. remounts every other mount read-only (a read-only view of the user's files), except /proc,
   /sys and /dev with its device nodes (a GPU must stay reachable); /dev/shm is read-only too,
   but for the arena; on a GPU /dev/shm is a private tmpfs instead (`private_shm`): empty with the
   fd-shared arena (cuda_fd.py), holding the verifier's IPC files with legacy CUDA IPC;
3. sets resource limits: no core files, file size, processes (counted in this namespace),
   and, on the CPU only, address space (CUDA reserves more address space than any limit);
4. drops every capability, the bounding set included, and sets no_new_privs: the candidate is
   uid 0 in its namespace but can neither remount, nor ptrace, nor regain a capability;
5. execs ARGV.

Any step that fails is fatal (exit 126 with one line on stderr): a sandbox that is only half
there must not pass for one.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
_KEEP_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
# Mount points left as they are: the namespace's own /proc, /sys, and the device nodes.
_LEAVE = ("/proc", "/sys", "/dev")

FILE_SIZE_LIMIT = 16 << 30
PROCESS_LIMIT = 4096  # threads count: torch and Triton start one pool per core
CPU_MEMORY_FRACTION = 0.75


class ConfineError(Exception):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if libc.mount(source.encode() if source else None, target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise ConfineError(f"mount {target}: {os.strerror(err)}")


def _mounts() -> list[tuple[str, int]]:
    """(mount point, flags to keep) of every mount, from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            flags = 0
            for opt in fields[5].split(","):
                flags |= _KEEP_FLAGS.get(opt, 0)
            out.append((point, flags))
    return out


def _left_alone(point: str, writable: list[str]) -> bool:
    if point in writable:
        return True
    if point == "/dev/shm" or point.startswith("/dev/shm/"):
        return False
    return any(point == p or point.startswith(p + "/") for p in _LEAVE)


def private_shm(shared: list[str]) -> None:
    """A fresh tmpfs on /dev/shm holding only `shared`, the host's files under /dev/shm bound in.

    CUDA IPC (the arena on a GPU) needs /dev/shm writable in the importing process: on the H100
    a runner with a read-only /dev/shm could not map the verifier's buffer ("mapping of buffer
    object failed"), and one with a writable /dev/shm could. The runner gets a /dev/shm of its own
    instead of the user's: the exporter's IPC files (the driver's `cuda.shm.*` and torch's ref
    counter, named by the verifier) are bound into it, and nothing else of the host's is there.
    """
    # O_PATH: a writable directory may lie under /dev/shm too (the runner's private dir when
    # TMPDIR=/dev/shm), and is bound in like a file.
    fds = [os.open(path, os.O_PATH) for path in shared]  # before the tmpfs hides them
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777") != 0:
        raise ConfineError(f"mount tmpfs on /dev/shm: {os.strerror(ctypes.get_errno())}")
    for path, fd in zip(shared, fds):
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
        os.makedirs(path if is_dir else os.path.dirname(path), exist_ok=True)  # the mount point, in the new tmpfs
        if not is_dir:
            with open(path, "wb"):
                pass
        _mount(f"/proc/self/fd/{fd}", path, MS_BIND | (MS_REC if is_dir else 0))
        os.close(fd)


def read_only_view(writable: list[str], shm_private: bool = False) -> None:
    _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing done here propagates back to the host
    shared_shm = [p for p in writable if p.startswith("/dev/shm/")] if shm_private else []
    if shm_private:
        private_shm(shared_shm)
    for path in writable:
        if path not in shared_shm:
            _mount(path, path, MS_BIND | MS_REC)
    failed = []
    for point, flags in _mounts():
        if _left_alone(point, writable) or (shm_private and (point == "/dev/shm" or point.startswith("/dev/shm/"))):
            continue
        try:
            _mount(None, point, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except ConfineError as exc:
            if os.path.exists(point):
                failed.append(str(exc))
    if failed:
        raise ConfineError("could not make the file system read-only: " + "; ".join(failed[:3]))


def set_limits(cpu_only: bool) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT))
    if cpu_only:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limit = int(total * CPU_MEMORY_FRACTION)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    libc = _libc()
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP; EINVAL: no such cap
            raise ConfineError(f"could not drop capability {cap} from the bounding set")
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise ConfineError("could not set no_new_privs")
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise ConfineError(f"capset: {os.strerror(ctypes.get_errno())}")


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: python -m kernelopt.harness.confine WRITABLE... -- ARGV...", file=sys.stderr)
        return 2
    sep = argv.index("--")
    writable, cmd = [os.path.realpath(p) for p in argv[:sep]], argv[sep + 1 :]
    try:
        cpu_only = os.environ.get("KERNELOPT_SANDBOX_DEVICE", "cpu") == "cpu"  # sandbox.SANDBOX_DEVICE_VAR
        read_only_view(writable, shm_private=not cpu_only)
        set_limits(cpu_only=cpu_only)
        drop_capabilities()
    except (ConfineError, OSError, ValueError) as exc:
        print(f"kernelopt sandbox: {exc}", file=sys.stderr)
        return 126
    os.execvpe(cmd[0], cmd, os.environ)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
