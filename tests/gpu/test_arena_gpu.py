"""The GPU arena is shared by an inherited fd (cuda_fd.py), skipped without CUDA.

    python3 -m pytest -q tests/gpu/test_arena_gpu.py

A non-dumpable verifier shares it with a runner confined as `--isolate sandbox` confines one (user,
mount, network and pid namespaces, an empty private /dev/shm): no dumpable window, no host file
under /dev/shm, and a pid namespace on a GPU too (issue #19).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

_CHILD = r"""
import json, os, sys
from kernelopt.harness.arena import Arena
from kernelopt.harness.protocol import ArenaSpec
spec = ArenaSpec.model_validate_json(sys.argv[1])
arena = Arena.open(spec)
import torch
before = int(arena.buffer[:4096].to(torch.int64).sum())
arena.buffer[:4096].fill_(7)
torch.cuda.synchronize()
print(json.dumps({"before": before, "shm": sorted(os.listdir("/dev/shm")), "fd_open": os.path.exists(f"/proc/self/fd/{spec.fd}"),
                  "pid": os.getpid()}))
"""


def _child(spec_json: str, confined: bool, tmp) -> tuple[list[str], dict[str, str]]:
    import os

    from kernelopt.harness import sandbox

    argv = [sys.executable, "-c", _CHILD, spec_json]
    if not confined:
        return argv, dict(os.environ)
    # The runner's own confinement: user, mount, network and pid namespaces, read-only files,
    # a private empty /dev/shm, no capability (kernelopt.harness.confine).
    return (sandbox.sandbox_argv(argv, writable=[str(tmp)], device="cuda:0"),
            {**os.environ, **sandbox.sandbox_env(tmp, "cuda:0")})


@pytest.mark.parametrize("confined", [False, True], ids=["plain", "sandbox"])
def test_a_non_dumpable_verifier_shares_its_arena_by_fd(confined, tmp_path):
    import json

    from kernelopt.harness.arena import Arena
    from kernelopt.harness.sandbox import harden_process, is_hardened

    from kernelopt.harness.sandbox import sandbox_unavailable

    if confined and sandbox_unavailable("cuda:0"):
        pytest.skip(f"no sandbox here: {sandbox_unavailable('cuda:0')}")
    harden_process()
    assert is_hardened()
    arena = Arena.allocate(3 << 20, "cuda:0")
    try:
        assert arena.spec.kind == "cuda_fd", arena.spec
        assert arena.ipc_files() == []  # nothing of the host's /dev/shm to bind into a sandbox
        arena.buffer[:4096].fill_(3)
        torch.cuda.synchronize()
        argv, env = _child(arena.spec.model_dump_json(), confined, tmp_path)
        done = subprocess.run(argv, env=env, pass_fds=arena.pass_fds(), capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-2000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["before"] == 3 * 4096  # the child saw the verifier's bytes
        assert not seen["fd_open"]  # the runner closes the allocation's fd once mapped
        if confined:
            assert seen["shm"] == []  # a private /dev/shm with nothing of the host's
            assert seen["pid"] == 1  # its own pid namespace, on a GPU too
        assert int(arena.buffer[:4096].to(torch.int64).sum()) == 7 * 4096  # and the verifier sees the child's
        assert is_hardened()  # never dumpable on the way
    finally:
        arena.close()
