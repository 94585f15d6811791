"""Issue #19: a runner sees its verifier's GPU only (CUDA_VISIBLE_DEVICES by UUID), as cuda:0.

A candidate timed on cuda:1 that could see cuda:0 would queue its work there and return: the
timer's synchronize and its trailing-time check wait for the runner's own device only. These CPU
tests check what the verifier gives its runner (environment, init, arena spec), what a profiling
child gets, and that a runner seeing more than one GPU refuses to start; tests/gpu/test_trust_gpu.py
runs the attack (fixtures/attacks/other_gpu.py) and an evaluation on a second GPU for real.
"""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelopt.harness import envinfo
from kernelopt.harness.arena import Arena
from kernelopt.harness.protocol import ArenaSpec
from kernelopt.harness.sandbox import sole_gpu_env
from kernelopt.harness.worker import Verifier
from kernelopt.problem import load_problem

ATT = Path(__file__).resolve().parent / "fixtures" / "attacks"
UUIDS = {"cuda:0": "00000000-1111-2222-3333-444444444444", "cuda:1": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"}


def _verifier(monkeypatch, device: str, isolate: str = "worker", arena: ArenaSpec | None = None) -> Verifier:
    """A verifier on `device` without its start (no GPU here): what the runner's env and init read."""
    monkeypatch.setenv("TRITON_INTERPRET", "0" if device.startswith("cuda") else "1")
    # Only the lookup of the GPU's UUID is faked (torch's, on a GPU host).
    monkeypatch.setattr(envinfo, "gpu_uuid", lambda d: UUIDS.get(d))
    v = object.__new__(Verifier)
    v.cfg = SimpleNamespace(isolate=isolate, problem=load_problem(ATT / "problem.py"), seed=0)
    v.device = device
    v.cuda = device.startswith("cuda")
    v.arena = Arena(None, arena or ArenaSpec(kind="file", nbytes=512, path="/dev/null", device="cpu"))
    v.in_specs, v.out_specs, v.digest_key = [], [], 5
    v.autotune_dir = None  # the autotune store (autotune_cache) is not what these tests read
    return v


@pytest.mark.parametrize("isolate", ["worker", "candidate", "sandbox"])
def test_a_runner_of_the_second_gpu_sees_it_only_by_uuid(monkeypatch, tmp_path, isolate):
    # The verifier's own view: physical GPUs 2 and 3; its cuda:1 is GPU 3, named by its UUID.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    env = _verifier(monkeypatch, "cuda:1", isolate)._runner_env(tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-" + UUIDS["cuda:1"]
    assert env["TMPDIR"] == str(tmp_path)


def test_the_runner_names_its_gpu_cuda0_and_the_verifier_keeps_its_own(monkeypatch):
    spec = ArenaSpec(kind="cuda_fd", nbytes=512, fd=77, mapped_nbytes=2 << 20, device="cuda:1")
    v = _verifier(monkeypatch, "cuda:1", arena=spec)
    init = v._runner_init()
    assert init.device == "cuda:0"
    assert init.arena.device == "cuda:0" and init.arena.fd == 77 and init.arena.kind == "cuda_fd"
    assert v.arena.spec.device == "cuda:1"  # the verifier addresses its GPU as before


def test_a_legacy_ipc_recipe_is_rebuilt_on_the_runners_index():
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    # rebuild_cuda_tensor's arguments, storage_device (the 7th) the verifier's index.
    args = ("cls", (64,), (1,), 0, "storage", "uint8", 1, b"handle", 64, 0, False, b"ref", 0, b"event", True)
    handle = base64.b64encode(pickle.dumps((rebuild_cuda_tensor, args))).decode()
    arena = Arena(None, ArenaSpec(kind="cuda_ipc", nbytes=64, handle=handle, device="cuda:1"))
    spec = arena.spec_for("cuda:0")
    fn, rebuilt = pickle.loads(base64.b64decode(spec.handle))
    assert fn is rebuild_cuda_tensor and spec.device == "cuda:0"
    assert rebuilt == args[:6] + (0,) + args[7:]
    assert arena.spec.handle == handle  # the verifier's own recipe is unchanged


def test_a_cpu_run_adds_no_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    v = _verifier(monkeypatch, "cpu", "sandbox")
    assert "CUDA_VISIBLE_DEVICES" not in v._runner_env(tmp_path)
    init = v._runner_init()
    assert init.device == "cpu" and init.arena == v.arena.spec


def test_a_ray_actors_runner_gets_the_actors_gpu(monkeypatch, tmp_path):
    """Ray sets the actor's CUDA_VISIBLE_DEVICES (here physical GPU 3); its verifier runs on cuda:0."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert _verifier(monkeypatch, "cuda:0")._runner_env(tmp_path)["CUDA_VISIBLE_DEVICES"] == "GPU-" + UUIDS["cuda:0"]
    # Without a UUID (a torch that reports none): the actor's own entry, still GPU 3.
    monkeypatch.setattr(envinfo, "gpu_uuid", lambda d: None)
    assert sole_gpu_env("cuda:0", envinfo.gpu_uuid("cuda:0")) == {"CUDA_VISIBLE_DEVICES": "3"}


def test_sole_gpu_env_without_a_uuid_names_the_gpu_as_this_process_does(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert sole_gpu_env("cuda:2") == {"CUDA_VISIBLE_DEVICES": "2"}
    assert sole_gpu_env("cpu") == {}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert sole_gpu_env("cuda:1") == {"CUDA_VISIBLE_DEVICES": "3"}
    assert sole_gpu_env("cuda:1", "GPU-abc") == {"CUDA_VISIBLE_DEVICES": "GPU-abc"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-0123,MIG-4567")
    assert sole_gpu_env("cuda:1", "4567") == {"CUDA_VISIBLE_DEVICES": "MIG-4567"}  # a MIG instance keeps its name


def test_a_profiling_child_sees_the_profiled_gpu_only(monkeypatch):
    """The loop profiles on the engine's first device under its GPU lock (`children_isolated`):
    the child sees that GPU only (the engine has no CUDA up: by its own numbering)."""
    from kernelopt.harness.isolate import children_isolated, run_in_child

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with children_isolated("worker", "cuda:1"):
        res = run_in_child("selftest", {"action": "env"}, timeout_s=120)
    assert res.ok, res.message
    assert res.value["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    res = run_in_child("selftest", {"action": "env"}, timeout_s=120)  # a CPU child: nothing added
    assert res.ok and "CUDA_VISIBLE_DEVICES" not in res.value["env"]


def test_a_runner_that_sees_more_than_one_gpu_refuses_to_start(monkeypatch):
    """The variable set too late, or not honoured: the runner says so instead of timing a
    candidate that can reach another GPU."""
    import torch

    from kernelopt.harness.protocol import RunnerInit
    from kernelopt.harness.runner import Runner

    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    init = RunnerInit(problem=load_problem(ATT / "problem.py"), device="cuda:0", seed=0,
                      arena=ArenaSpec(kind="file", nbytes=512, path="/dev/null"), inputs=[], outputs=[])
    with pytest.raises(RuntimeError, match="sees 2 GPUs"):
        Runner(init)
