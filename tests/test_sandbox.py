"""kernelopt.harness.sandbox with real processes: tree kill (setsid + double fork),
the reaper on SIGTERM/SIGINT/exit, output floods, the allowlisted environment, stdin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from kernelopt.harness import sandbox

# argv[1]: a file for the grandchild's pid. The child forks an intermediate that forks
# the grandchild and exits at once (a classic daemon); the grandchild leaves the
# child's session with setsid, so a process-group kill alone misses it.
DOUBLE_FORK = textwrap.dedent(
    """
    import os, sys, time
    out = sys.argv[1]
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            open(out + ".tmp", "w").write(str(os.getpid()))
            os.replace(out + ".tmp", out)
            time.sleep(60)
            os._exit(0)
        os._exit(0)
    os.wait()
    while not os.path.exists(out):
        time.sleep(0.01)
    if len(sys.argv) > 2 and sys.argv[2] == "exit":
        sys.exit(0)
    time.sleep(60)
    """
)

# A driver: a kernelopt-like process that spawns the double-forking child, reports
# the pids and then waits for a signal (or, with "exit", returns without cleanup).
DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from kernelopt.harness import sandbox
    d, how = sys.argv[1], sys.argv[2]
    if how == "no-subreaper":
        sandbox._set_subreaper = lambda: False
    child = sandbox.spawn([sys.executable, "-c", sys.argv[3], d + "/gc"], env=sandbox.candidate_env())
    while not os.path.exists(d + "/gc"):
        time.sleep(0.01)
    print(child.pid, child.tmpdir, sandbox.is_subreaper(), flush=True)
    if how == "no-subreaper":
        child.cleanup()
        print("cleaned", flush=True)
    if how != "exit":
        time.sleep(60)
    """
)


def _state(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].split()[0].decode()


def _alive(pid: int) -> bool:
    """Running or sleeping: a zombie is dead (its parent, maybe this subreaper, has
    not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return _state(pid) not in (None, "Z", "X")


def _wait_dead(pids: list[int], timeout_s: float = 2.0) -> list[int]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.02)
    return [p for p in pids if _alive(p)]


def _wait_file(path: Path, timeout_s: float = 5.0) -> int:
    """The pid written to `path`, once it is there whole (the file exists before its write lands)."""
    end = time.monotonic() + timeout_s
    while not (path.exists() and path.read_text().strip().isdigit()):
        assert time.monotonic() < end, f"{path} never got a pid"
        time.sleep(0.01)
    return int(path.read_text())


def _sid(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rfind(b")") + 2 :].split()[3])


@pytest.fixture(autouse=True)
def _no_leftovers():
    yield
    # A failing test must not leave sleepers for the next one.
    sandbox.kill_descendants()


def test_kill_takes_the_setsid_double_forked_grandchild(tmp_path: Path) -> None:
    child = sandbox.spawn([sys.executable, "-c", DOUBLE_FORK, str(tmp_path / "gc")], env=sandbox.candidate_env())
    gc = _wait_file(tmp_path / "gc")
    # The test means something only if the grandchild escaped the child's session.
    assert _alive(gc) and _sid(gc) != child.pid
    tmpdir = child.tmpdir
    assert tmpdir.is_dir() and tmpdir.name.startswith("kernelopt-child-")
    child.kill()
    assert child.poll() is not None
    assert _wait_dead([child.pid, gc]) == []
    # Re-parented here (the subreaper) and killed, the grandchild is also reaped: a
    # long-lived engine must not pile up zombies.
    assert _state(gc) is None
    child.cleanup()
    assert not tmpdir.exists()


def test_cleanup_takes_a_daemon_the_child_left_behind(tmp_path: Path) -> None:
    child = sandbox.spawn(
        [sys.executable, "-c", DOUBLE_FORK, str(tmp_path / "gc"), "exit"], env=sandbox.candidate_env()
    )
    assert child.wait(10) == 0
    gc = _wait_file(tmp_path / "gc")
    assert _alive(gc)  # the child is gone, its daemon is not
    child.cleanup()
    assert _wait_dead([gc]) == []
    assert _state(gc) is None  # reaped, not a zombie


def test_cleanup_takes_what_a_nested_spawn_left_behind(tmp_path: Path) -> None:
    # The engine's pattern: a sandboxed worker spawns its own sandboxed runner and
    # leaves with os._exit (no reaper runs). The runner's daemon carries a tag nested
    # under the worker's, so cleaning up the worker still finds it.
    outer_code = textwrap.dedent(
        """
        import os, sys
        from kernelopt.harness import sandbox
        inner = sandbox.spawn([sys.executable, "-c", sys.argv[1], sys.argv[2], "exit"], env=sandbox.candidate_env())
        inner.wait(10)
        print(inner.tmpdir, flush=True)
        os._exit(0)
        """
    )
    outer = sandbox.spawn(
        [sys.executable, "-c", outer_code, DOUBLE_FORK, str(tmp_path / "gc")], env=sandbox.candidate_env()
    )
    assert outer.wait(10) == 0, outer.output()
    gc = _wait_file(tmp_path / "gc")
    inner_dir = Path(outer.output()[0].strip())
    assert _alive(gc) and inner_dir.is_dir()
    outer.cleanup()
    assert _wait_dead([gc]) == []
    assert not inner_dir.exists()  # made inside the outer dir, gone with it


def test_kill_catches_a_child_that_keeps_forking(tmp_path: Path) -> None:
    # Forks while kill() scans: each new process re-parents here and carries the tag.
    code = textwrap.dedent(
        """
        import os, sys, time
        log = open(sys.argv[1], "a")
        for _ in range(40):
            if os.fork() == 0:
                os.setsid()
                log.write(f"{os.getpid()}\\n"); log.flush()
                time.sleep(60)
                os._exit(0)
            time.sleep(0.005)
        time.sleep(60)
        """
    )
    log = tmp_path / "pids"
    child = sandbox.spawn([sys.executable, "-c", code, str(log)], env=sandbox.candidate_env())
    end = time.monotonic() + 5
    while (not log.exists() or len(log.read_text().split()) < 5) and time.monotonic() < end:
        time.sleep(0.01)
    child.cleanup()  # mid-forking
    time.sleep(0.1)
    pids = [int(p) for p in log.read_text().split()]
    assert len(pids) >= 5
    assert _wait_dead([child.pid, *pids]) == []


def _run_driver(tmp_path: Path, how: str) -> tuple[subprocess.Popen[str], int, int, Path, str]:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), how, DOUBLE_FORK],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    line = driver.stdout.readline().split()
    assert line, driver.stderr.read() if driver.stderr else ""
    child_pid, tmpdir, subreaper = int(line[0]), Path(line[1]), line[2]
    gc = _wait_file(tmp_path / "gc")
    return driver, child_pid, gc, tmpdir, subreaper


@pytest.mark.parametrize(
    "signum,codes",
    [(signal.SIGTERM, (128 + 15,)), (signal.SIGINT, (-2, 128 + 2)), (signal.SIGHUP, (128 + 1,))],
)
def test_signal_to_kernelopt_kills_the_whole_tree(tmp_path: Path, signum: int, codes: tuple[int, ...]) -> None:
    driver, child_pid, gc, tmpdir, subreaper = _run_driver(tmp_path, "signal")
    assert subreaper == "True" and _alive(child_pid) and _alive(gc) and tmpdir.is_dir()
    driver.send_signal(signum)
    assert driver.wait(5) in codes  # the signal still ends the process as it would have
    assert _wait_dead([child_pid, gc]) == []
    assert not tmpdir.exists()


def test_normal_exit_kills_the_whole_tree(tmp_path: Path) -> None:
    driver, child_pid, gc, tmpdir, _ = _run_driver(tmp_path, "exit")
    assert driver.wait(5) == 0
    assert _wait_dead([child_pid, gc]) == []
    assert not tmpdir.exists()


def test_tag_finds_the_tree_without_a_subreaper(tmp_path: Path) -> None:
    # Without PR_SET_CHILD_SUBREAPER the orphaned grandchild re-parents away from the
    # driver; only its environment tag still ties it to the child.
    driver, child_pid, gc, tmpdir, subreaper = _run_driver(tmp_path, "no-subreaper")
    assert subreaper == "False"
    assert driver.stdout is not None and driver.stdout.readline().strip() == "cleaned"
    # Checked while the driver still lives, so its exit-time reaper cannot be what helped.
    try:
        assert _wait_dead([child_pid, gc]) == []
        assert not tmpdir.exists()
    finally:
        driver.kill()
        driver.wait(5)


FLOOD_DRIVER = textwrap.dedent(
    """
    import json, sys, time
    from kernelopt.harness import sandbox
    flood_mb, cap = int(sys.argv[1]), int(sys.argv[2])
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    code = (
        "import sys\\n"
        "w = sys.stdout.buffer.write\\n"
        "w(b'HEAD-START')\\n"
        "block = b'x' * (1 << 20)\\n"
        f"for _ in range({flood_mb}): w(block)\\n"
        "w(b'TAIL-END')\\n"
        "sys.stderr.write('err-line')\\n"
    )
    before = status("VmHWM")
    t0 = time.monotonic()
    child = sandbox.spawn([sys.executable, "-c", code], env=sandbox.candidate_env(), output_cap_bytes=cap)
    rc = child.wait(60)
    out, err = child.output()
    print(json.dumps({"rc": rc, "out": out, "err": err, "written": child.bytes_written,
                      "hwm_delta": status("VmHWM") - before, "elapsed": time.monotonic() - t0}))
    child.cleanup()
    """
)


def test_output_flood_is_drained_and_capped() -> None:
    cap = 1 << 20
    res = subprocess.run(
        [sys.executable, "-c", FLOOD_DRIVER, "400", str(cap)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["rc"] == 0  # the child was never blocked by a full pipe
    assert data["written"][0] == 400 * (1 << 20) + len("HEAD-START") + len("TAIL-END")
    out, err = data["out"], data["err"]
    assert len(out.encode()) + len(err.encode()) <= cap
    assert out.startswith("HEAD-START") and out.endswith("TAIL-END") and "bytes omitted" in out
    assert err == "err-line"
    # 400 MB went through the parent; its peak RSS grew by far less than that.
    assert data["hwm_delta"] < 50 * (1 << 20)


def test_small_output_is_kept_whole() -> None:
    child = sandbox.spawn(
        [sys.executable, "-c", "import sys; print('hello'); sys.stderr.write('oops')"], env=sandbox.candidate_env()
    )
    assert child.wait(10) == 0
    assert child.output() == ("hello\n", "oops")
    child.cleanup()


SECRETS = {
    "OPENAI_API_KEY": "sk-test",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "GITHUB_TOKEN": "ghp-test",
    "MY_SECRET": "hunter2",
    "AWS_ACCESS_KEY_ID": "AKIA",
    "HF_TOKEN": "hf-test",
    "KERNELOPT_API_KEY": "nope",  # an allowed prefix does not let a secret through
    "DB_PASSWORD": "pw",
}


def test_candidate_env_is_allowlisted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("KERNELOPT_DB", "/tmp/x.db")
    monkeypatch.setenv("SOME_RANDOM_VAR", "x")
    child = sandbox.spawn(
        [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
        env=sandbox.candidate_env({"TRITON_DEBUG": "0"}),
    )
    assert child.wait(10) == 0
    seen = json.loads(child.output()[0])
    child.cleanup()
    assert not set(SECRETS) & set(seen)
    assert "SOME_RANDOM_VAR" not in seen
    assert seen["PATH"] == os.environ["PATH"]
    assert seen["TRITON_INTERPRET"] == "1" and seen["TRITON_DEBUG"] == "0" and seen["KERNELOPT_DB"] == "/tmp/x.db"
    root = str(Path(sandbox.__file__).resolve().parent.parent.parent)
    assert seen["PYTHONPATH"].split(os.pathsep)[0] == root


def test_candidate_env_refuses_a_secret_in_extra() -> None:
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        sandbox.candidate_env({"OPENAI_API_KEY": "sk"})


def test_stdin_is_closed() -> None:
    child = sandbox.spawn(
        [sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], env=sandbox.candidate_env()
    )
    assert child.wait(5) == 0  # EOF at once, not a hang waiting for a terminal
    assert child.output()[0] == "''\n"
    child.cleanup()


def test_wait_times_out_with_none() -> None:
    child = sandbox.spawn([sys.executable, "-c", "import time; time.sleep(30)"], env=sandbox.candidate_env())
    t0 = time.monotonic()
    assert child.wait(0.3) is None and child.poll() is None
    assert time.monotonic() - t0 < 2
    child.cleanup()
    assert child.returncode == -signal.SIGKILL


FIXTURES = Path(__file__).parent / "fixtures" / "harness"


def _cli_check_then_signal(tmp_path: Path, signum: int) -> tuple[int, int, Path]:
    """`kernelopt check` on a candidate that leaves a daemon, stopped by `signum` once
    the daemon is up; its temp dirs go to a private TMPDIR. -> (exit code, daemon, TMPDIR)."""
    pid_file = tmp_path / "daemon.pid"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cli = subprocess.Popen(
        [sys.executable, "-m", "kernelopt", "check", str(FIXTURES / "problem_axpy.py"),
         "--kernel", str(FIXTURES / "daemon.py"), "--trials", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KERNELOPT_TEST_PIDFILE": str(pid_file), "TMPDIR": str(tmp), "KERNELOPT_TEST_HOLD": "60"},
    )
    try:
        daemon = _wait_file(pid_file, timeout_s=30)
        assert _alive(daemon)
        cli.send_signal(signum)
        code = cli.wait(10)
    finally:
        cli.kill()
        cli.wait()
    return code, daemon, tmp


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_cli_leaves_no_candidate_behind(tmp_path: Path, signum: int) -> None:
    # Issue #10, found by a new user: Ctrl-C or SIGTERM on a command left its child
    # spinning. Here the candidate's daemon (setsid + double fork) is up and the
    # verification still running when the command is told to stop.
    code, daemon, _ = _cli_check_then_signal(tmp_path, signum)
    assert code != 0  # stopped, not finished
    assert _wait_dead([daemon]) == []


@pytest.mark.slow
def test_sigkill_of_the_cli_leaves_nothing_behind(tmp_path: Path) -> None:
    # SIGKILL cannot be caught: the CLI's reaper never runs. Its verifier watches it
    # (`watch_owner`) and takes the runner, the candidate's daemon and the temp dirs down.
    code, daemon, tmp = _cli_check_then_signal(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert _wait_dead([daemon]) == []
    deadline = time.monotonic() + 10
    while list(tmp.glob("kernelopt-child-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(tmp.glob("kernelopt-child-*"))


@pytest.mark.slow
def test_sigterm_to_the_cli_runs_the_reaper(tmp_path: Path) -> None:
    code, _daemon, tmp = _cli_check_then_signal(tmp_path, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM  # the reaper's exit, not death by the signal
    assert not list(tmp.glob("kernelopt-child-*"))


_THROUGH_PROC = """
import sys
for path in sys.argv[1:]:
    try:
        open(path, "a").write("pwned")
        print("WROTE", path)
    except OSError as exc:
        print("BLOCKED", type(exc).__name__, path)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces")
def test_the_gpu_sandbox_reaches_no_writable_view_through_proc(tmp_path: Path) -> None:
    """With a legacy CUDA IPC arena (old drivers) the GPU sandbox has no pid namespace, so the
    candidate sees the user's processes. Their
    `/proc/<pid>/root` and `/cwd` lead to the host's writable mounts, but a process in another user
    namespace may not open them (docs/harness.md: the run directory stays read-only to it)."""
    why = sandbox.sandbox_unavailable("cpu")
    if why:
        pytest.skip(f"no sandbox here: {why}")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    own = tmp_path / "own"
    own.mkdir()
    bystander = subprocess.Popen(["sleep", "60"], cwd=tmp_path)  # a dumpable process of the user's
    try:
        argv = sandbox.sandbox_argv([sys.executable, "-c", _THROUGH_PROC, str(victim),
                                     f"/proc/{bystander.pid}/root{victim}", f"/proc/{bystander.pid}/cwd/victim.txt"],
                                    writable=[str(own)], device="cuda:0", pid_namespace=False)
        assert "--pid" not in argv  # the legacy-IPC GPU's namespaces, run on the CPU
        env = {**os.environ, "KERNELOPT_SANDBOX_DEVICE": "cpu"}
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    finally:
        bystander.kill()
        bystander.wait()
    lines = [line for line in out.stdout.splitlines() if line.startswith(("WROTE", "BLOCKED"))]
    assert len(lines) == 3 and all(line.startswith("BLOCKED") for line in lines), (out.stdout, out.stderr)
    assert victim.read_text() == "keep"


_SEE_SHM = """
import os, sys
shared, other = sys.argv[1], sys.argv[2]
print("LIST", sorted(os.listdir("/dev/shm")))
print("OTHER", os.path.exists(other))
with open(shared, "r+b") as fh:
    fh.write(b"written inside")
open("/dev/shm/scratch", "wb").write(b"x")
print("DONE")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces")
def test_the_gpu_sandbox_has_a_private_dev_shm_with_only_the_shared_ipc_files(tmp_path: Path) -> None:
    """On a GPU the runner's /dev/shm must be writable for CUDA IPC (seen on the H100): it is a
    private tmpfs holding the files the verifier names, bound to the host's, and nothing else of
    the host's /dev/shm; what the runner writes there besides goes with it."""
    why = sandbox.sandbox_unavailable("cpu")
    if why:
        pytest.skip(f"no sandbox here: {why}")
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    import tempfile

    shared = tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="kernelopt-test-shared-", delete=False)
    other = tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="kernelopt-test-other-", delete=False)
    shared.write(b"from the host.."), shared.close(), other.close()
    own = tmp_path / "own"
    own.mkdir()
    try:
        argv = sandbox.sandbox_argv([sys.executable, "-c", _SEE_SHM, shared.name, other.name],
                                    writable=[str(own), shared.name], device="cuda:0")
        env = {**os.environ, "KERNELOPT_SANDBOX_DEVICE": "cuda"}
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
        assert "DONE" in out.stdout, (out.stdout, out.stderr)
        assert f"LIST {sorted([os.path.basename(shared.name)])}" in out.stdout
        assert "OTHER False" in out.stdout
        assert Path(shared.name).read_bytes() == b"written inside."  # the host's file, through the bind
        assert not Path("/dev/shm/scratch").exists()  # the private tmpfs went with the sandbox
    finally:
        os.unlink(shared.name)
        os.unlink(other.name)


_WRITE_OWN = """
import os, sys
own = sys.argv[1]
open(os.path.join(own, "scratch"), "wb").write(b"mine")
print("DONE")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces")
def test_the_gpu_sandbox_keeps_a_private_dir_that_lies_under_dev_shm_writable(tmp_path: Path) -> None:
    """With TMPDIR=/dev/shm the runner's private dir (make_tmpdir) is under /dev/shm: the GPU
    sandbox's private tmpfs must bind that directory in too, not refuse to start the runner."""
    why = sandbox.sandbox_unavailable("cpu")
    if why:
        pytest.skip(f"no sandbox here: {why}")
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    import shutil
    import tempfile

    outer = tempfile.mkdtemp(dir="/dev/shm", prefix="kernelopt-test-tmpdir-")
    own = os.path.join(outer, "kernelopt-child-runner-x")
    os.mkdir(own)
    try:
        argv = sandbox.sandbox_argv([sys.executable, "-c", _WRITE_OWN, own], writable=[own], device="cuda:0")
        env = {**os.environ, "KERNELOPT_SANDBOX_DEVICE": "cuda"}
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and "DONE" in out.stdout, (out.returncode, out.stdout, out.stderr)
        assert Path(own, "scratch").read_bytes() == b"mine"  # the host's dir, through the bind
    finally:
        shutil.rmtree(outer)


def test_the_ipc_files_named_are_this_process_s_only(monkeypatch) -> None:
    """The driver's file carries the pid in hex, torch's in decimal: pid 18 (0x12) must not take
    the files of pid 0x123, 0x1, 183 or 1 (a prefix or suffix of its pid in either base)."""
    from kernelopt.harness import arena as arena_mod
    from kernelopt.harness.protocol import ArenaSpec

    names = ["cuda.shm.0.12.1", "cuda.shm.1.12.a", "torch_18_2192319269_0", "torch_18_1_12",
             "cuda.shm.0.123.1", "cuda.shm.0.112.1", "cuda.shm.0.1.1", "cuda.shm.0.18.1", "cuda.shm.12.1.1",
             "torch_183_1_0", "torch_1_18_0", "torch_118_1_0", "xtorch_18_1_0", "cuda.shm.0.12.1.x", "sem.torch_18_1"]
    monkeypatch.setattr(arena_mod.os, "getpid", lambda: 18)
    monkeypatch.setattr(arena_mod.os, "listdir", lambda path: list(names))
    arena = arena_mod.Arena(None, ArenaSpec(kind="cuda_ipc", nbytes=1, handle="x", device="cuda:0"))
    assert arena.ipc_files() == sorted(f"/dev/shm/{n}" for n in ("cuda.shm.0.12.1", "cuda.shm.1.12.a",
                                                                 "torch_18_2192319269_0", "torch_18_1_12"))
    file_arena = arena_mod.Arena(None, ArenaSpec(kind="file", nbytes=1, path="/dev/shm/x/arena"))
    assert file_arena.ipc_files() == []  # the CPU path binds nothing


def test_a_gpu_arena_that_falls_back_to_legacy_ipc_says_so(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """A driver that cannot share the arena by fd (an old one, or a refused call) means legacy CUDA
    IPC: the verifier's dumpable window and no pid namespace in a GPU sandbox. The weaker mode is
    said in one line on stderr, never taken silently (run on the CPU: the driver calls are faked)."""
    import torch

    from kernelopt.harness import arena as arena_mod
    from kernelopt.harness import cuda_fd

    def refuse(cls: Any, nbytes: int, device_index: int) -> Any:
        raise cuda_fd.FdShareUnavailable("cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED (801)")

    empty = torch.empty
    monkeypatch.setattr(cuda_fd.SharedCudaBuffer, "allocate", classmethod(refuse))
    monkeypatch.setattr(torch, "empty", lambda *a, device, **kw: empty(*a, **kw))  # a CPU buffer for "cuda:0"
    monkeypatch.setattr("torch.multiprocessing.reductions.reduce_tensor", lambda buf: (tuple, ((),)))
    arena = arena_mod.Arena.allocate(4096, "cuda:0")
    assert arena.spec.kind == "cuda_ipc"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "legacy CUDA IPC" in err[0] and "CUDA_ERROR_NOT_SUPPORTED" in err[0] and "dumpable" in err[0], err


def test_a_list_written_by_a_candidate_removes_no_other_runs_arena(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate can write `.kernelopt-also-remove` into its own writable dir, naming another
    run's arena: removing its dir must not remove that arena. The verifier's own attached arena,
    marked with its owner, still goes with its dir."""
    own = Path(tempfile_mkdtemp(prefix=sandbox.TMP_PREFIX + "verifier-", dir=tmp_path))
    victim = tmp_path / "kernelopt-arena-victim"
    victim.mkdir()
    (victim / "arena").write_bytes(b"another run's inputs")
    candidate_dir = own / (sandbox.TMP_PREFIX + "runner-x")
    candidate_dir.mkdir()
    (candidate_dir / sandbox.ALSO_REMOVE).write_text(f"{victim}\n")
    sandbox.remove_tmpdir(candidate_dir)
    assert victim.exists() and not candidate_dir.exists()

    monkeypatch.setenv(sandbox.DIR_VAR, str(own))
    mine = tmp_path / "kernelopt-arena-mine"
    mine.mkdir()
    sandbox.attach_dir(mine)
    (own / sandbox.ALSO_REMOVE).write_text(f"{mine}\n{victim}\n")  # a candidate appended the victim
    sandbox.remove_tmpdir(own)
    assert not mine.exists() and victim.exists() and not own.exists()


def tempfile_mkdtemp(**kwargs: Any) -> str:
    import tempfile

    return tempfile.mkdtemp(**kwargs)
