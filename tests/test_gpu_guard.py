"""The launch guard's kernel (`kernelopt.harness.gpu_guard`) without a GPU: its PTX assembles for
the architectures kernelopt targets, the block shape fills an SM's thread slots exactly, and the
timer queues it (not `torch.cuda._sleep`) before every call once warm. On a GPU,
`tests/gpu/test_timing.py` shows that work queued beside it waits, and `tests/gpu/test_trust_gpu.py`
that the guard-overlap attack is caught."""

from __future__ import annotations

import contextlib
import ctypes
import re
import shutil
import subprocess

import pytest

from kernelopt.harness import gpu_guard


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas (the CUDA toolkit)")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_the_guard_ptx_assembles_with_few_registers(tmp_path, arch):
    src = tmp_path / "guard.ptx"
    src.write_bytes(gpu_guard.PTX)
    done = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "guard.cubin")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"entry function '{gpu_guard.KERNEL_NAME.decode()}'" in done.stderr
    # 2048 threads of it must fit an SM's 65536 registers, or its blocks could not fill the thread slots.
    regs = int(re.search(r"Used (\d+) registers", done.stderr).group(1))
    assert regs * 2048 <= 65536, regs


def test_the_block_shape_fills_every_thread_slot():
    # Hopper/Ampere datacentre parts: 2048 threads an SM, two blocks of 1024.
    assert gpu_guard.fill_shape(2048, lambda size: 2048 // size) == (1024, 2)
    # Ada/Ampere consumer parts: 1536 threads; one block of 1024 would leave 512 free.
    assert gpu_guard.fill_shape(1536, lambda size: 1536 // size) == (768, 2)
    # Where registers or a block limit allow fewer resident blocks, a smaller block that fills the SM.
    assert gpu_guard.fill_shape(2048, lambda size: 1 if size >= 512 else 2048 // size) == (256, 8)
    # Nothing fills it exactly: no guard of this kind (the timer falls back and says so).
    assert gpu_guard.fill_shape(2048, lambda size: 0) == (0, 0)


def test_without_a_driver_there_is_no_guard_kernel(monkeypatch):
    monkeypatch.setattr(gpu_guard, "_driver", lambda: None)
    assert gpu_guard.occupying_guard() is None


def test_the_timer_queues_the_every_sm_guard_before_each_call(monkeypatch):
    """With the guard kernel loaded, every call after the first two (the first may compile, so the
    second's host time sizes the guard) is preceded by one guard launch of
    the size `launch_guard_us` gives, on the current stream; `torch.cuda._sleep` is never used."""
    import torch

    from test_timing_stats import _FakeCuda

    from kernelopt.harness import timing

    cuda = _FakeCuda(event_ms=0.01)
    cuda.install(monkeypatch)
    launches: list[tuple[float, int]] = []
    monkeypatch.setattr(gpu_guard, "occupying_guard", lambda: (lambda us, stream: launches.append((us, stream))))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: pytest.fail("the one-block busy-wait was used"),
                        raising=False)
    calls = {"n": 0}

    def fn() -> None:
        calls["n"] += 1

    stats = timing.time_callable(fn, device="cuda:0", flush_l2=False, warmup_ms=0.05, warmup_calls=3,
                                 min_ms=0.1, min_calls=10)
    assert len(launches) == calls["n"] - 2 and launches, (len(launches), calls["n"])
    assert all(us >= timing.LAUNCH_GUARD_MARGIN_US for us, _ in launches)
    assert {stream for _, stream in launches} == {0}
    assert stats.method == timing.method_text(flush_l2=False) and stats.launch_guard_us > 0


def test_without_the_guard_kernel_the_timer_says_its_guard_held_one_sm(monkeypatch):
    import torch

    from test_timing_stats import _FakeCuda

    from kernelopt.harness import timing

    _FakeCuda(event_ms=0.01).install(monkeypatch)
    monkeypatch.setattr(gpu_guard, "occupying_guard", lambda: None)
    cycles: list[int] = []
    monkeypatch.setattr(torch.cuda, "_sleep", lambda n: cycles.append(n), raising=False)
    stats = timing.time_callable(lambda: None, device="cuda:0", flush_l2=False, warmup_ms=0.05, warmup_calls=3,
                                 min_ms=0.1, min_calls=10)
    assert timing.GUARD_ONE_SM in stats.method and len(cycles) > 10


class _FakeDriver:
    """libcuda as `_load` and a guard use it: 132 SMs of 2048 threads, one module per load; launches
    go through a real C function pointer (the guard's ctypes path) and are recorded."""

    def __init__(self) -> None:
        self.context = 0x1000
        self.loads = 0
        self.launches: list[tuple[int, int, int, int, int]] = []  # (func, grid, block, stream, ns)

        def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            ns = ctypes.cast(params[0], ctypes.POINTER(ctypes.c_uint64))[0]
            self.launches.append((f, gx * gy * gz, bx * by * bz, stream or 0, ns))
            return 0

        self.cuLaunchKernel = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p))(launch)

    def cuCtxGetCurrent(self, ref) -> int:
        ref._obj.value = self.context
        return 0

    def cuCtxGetDevice(self, ref) -> int:
        ref._obj.value = 0
        return 0

    def cuModuleLoadData(self, ref, ptx) -> int:
        self.loads += 1
        ref._obj.value = 0x2000 + self.loads
        return 0

    def cuModuleGetFunction(self, ref, module, name) -> int:
        ref._obj.value = 0x30000 + module.value
        return 0

    def cuDeviceGetAttribute(self, ref, attr, device) -> int:
        ref._obj.value = {gpu_guard._ATTR_MULTIPROCESSOR_COUNT: 132, gpu_guard._ATTR_MAX_THREADS_PER_MULTIPROCESSOR: 2048}[attr]
        return 0

    def cuOccupancyMaxActiveBlocksPerMultiprocessor(self, ref, func, block, smem) -> int:
        ref._obj.value = 2048 // block
        return 0


@pytest.fixture
def fake_driver(monkeypatch) -> _FakeDriver:
    fake = _FakeDriver()
    monkeypatch.setattr(gpu_guard, "_driver", lambda: fake)
    monkeypatch.setattr(gpu_guard, "LOADED", ())
    return fake


def test_one_guard_per_context_launched_with_every_sm_and_the_wait(fake_driver):
    guard = gpu_guard.occupying_guard()
    assert guard is not None and (guard.grid, guard.block) == (264, 1024)
    assert gpu_guard.occupying_guard() is guard and fake_driver.loads == 1  # loaded once per context
    guard(2.5, 0x7700)
    assert fake_driver.launches == [(0x30000 + 0x2001, 264, 1024, 0x7700, 2500)]  # the loaded function, 2500 ns
    fake_driver.context = 0x1001  # another context (another device) gets a module of its own
    other = gpu_guard.occupying_guard()
    assert other is not None and other is not guard and fake_driver.loads == 2
    assert [ctx for ctx, _ in gpu_guard.LOADED] == [0x1000, 0x1001]


@pytest.mark.parametrize("how", ["instance", "class", "argtypes"])
def test_a_candidate_cannot_shrink_the_loaded_guard_unseen(fake_driver, monkeypatch, how):
    """The runner records LOADED's identity; the guard it holds must not be changeable in place into
    one block (torch.cuda._sleep's shape, beside which the guard-overlap attack ran) unseen."""
    from kernelopt.harness.runner import Guard

    guard = gpu_guard.occupying_guard()
    tamper = Guard()
    assert tamper.changed() == []
    if how == "instance":
        with contextlib.suppress(AttributeError):
            guard.grid = 1
    elif how == "class":
        monkeypatch.setattr(type(guard), "grid", 1)
    else:  # the driver function object's conversion of its grid argument

        class One:
            @classmethod
            def from_param(cls, value: object) -> int:
                return 1

        fake_driver.cuLaunchKernel.argtypes = [ctypes.c_void_p, One, *([ctypes.c_uint] * 6), ctypes.c_void_p,
                                               ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
    guard(1.0, 0)
    assert fake_driver.launches[-1][1] == 264 or tamper.changed(), (fake_driver.launches, tamper.changed())
