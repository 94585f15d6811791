"""The launch guard's busy-wait: a kernel that holds every thread slot of every SM.

The timer queues a busy-wait before each timed call's start event, so that the call's kernels are
already queued when the events start (`kernelopt.harness.timing`). `torch.cuda._sleep` is one
thread block on one SM: a call that queues work on a stream of its own, without waiting for the
current stream, ran that work on the other SMs *beside* the guard -- before the start event, finished
before the events ended, so neither the events nor the trailing check saw it
(`tests/fixtures/attacks/guard_overlap.py`).

This guard launches as many blocks as the device can hold at once, each of a size that makes the
blocks fill every SM's thread slots exactly (`cuOccupancyMaxActiveBlocksPerMultiprocessor`). While it
runs, no block of any other kernel of this context can be resident, so work queued beside it waits
until it ends -- inside the events, or after them, where `trailing_us` sees it. It spins on
`%globaltimer` (nanoseconds, independent of the SM clock), sleeping 200 ns between reads.

It assumes the SMs are free when it is queued (the timer synchronizes the device after each call):
blocks another thread queued in between hold slots the guard then cannot take, and they run beside
it; copy-engine work needs no SM at all (docs/harness.md lists both as open).

It is launched through the CUDA driver API (ctypes) from PTX, so it needs no compiler at run time.
The PTX is `nvcc -ptx -arch=compute_75` of

    extern "C" __global__ void kernelopt_launch_guard(unsigned long long ns) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { __nanosleep(200); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
    }

with the header lowered to PTX ISA 7.0 / sm_70 (all it uses is `nanosleep`, sm_70+), so older drivers
load it too. `tests/test_gpu_guard.py` assembles it with `ptxas` for several architectures.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, NamedTuple

KERNEL_NAME = b"kernelopt_launch_guard"
PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry kernelopt_launch_guard(
\t.param .u64 kernelopt_launch_guard_param_0
)
{
\t.reg .pred \t%p<2>;
\t.reg .b32 \t%r<2>;
\t.reg .b64 \t%rd<6>;

\tld.param.u64 \t%rd2, [kernelopt_launch_guard_param_0];
\tmov.u64 %rd3, %globaltimer;

$L__BB0_1:
\tmov.u32 \t%r1, 200;
\tnanosleep.u32 %r1;
\tmov.u64 %rd4, %globaltimer;
\tsub.s64 \t%rd5, %rd4, %rd3;
\tsetp.lt.u64 \t%p1, %rd5, %rd2;
\t@%p1 bra \t$L__BB0_1;

\tret;
}
"""

# cuDeviceGetAttribute's attribute numbers (cuda.h, CUdevice_attribute).
_ATTR_MULTIPROCESSOR_COUNT = 16
_ATTR_MAX_THREADS_PER_MULTIPROCESSOR = 39
# Block sizes tried, largest first: the first whose resident blocks fill an SM's thread slots exactly.
_BLOCK_SIZES = (1024, 768, 512, 384, 256, 128, 64, 32)


# cuLaunchKernel's prototype (cuda.h): f, grid x/y/z, block x/y/z, sharedMemBytes, hStream, kernelParams,
# extra. A prototype's argument conversions are fixed when it is made; a guard calls the driver through a
# fresh pointer of it each time, so no function object a candidate could reach converts its grid.
_LAUNCH_KERNEL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                                  ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p))


class OccupyingGuard(NamedTuple):
    """A loaded guard kernel for one CUDA context: `guard(us, stream)` queues a busy-wait of `us`
    microseconds on `stream` (a `cudaStream_t` as an int, 0 the legacy default stream).

    A tuple of ints, so it cannot be changed in place: the runner's tamper guard records `LOADED`'s
    identity (and these fields' getters), and a guard shrunk to one block would reopen the hole."""

    launch: int  # cuLaunchKernel's address
    func: int  # the kernel's CUfunction
    grid: int
    block: int

    def __call__(self, us: float, stream: int) -> None:
        ns = ctypes.c_uint64(max(0, int(us * 1000.0)))
        params = (ctypes.c_void_p * 1)(ctypes.addressof(ns))
        rc = _LAUNCH_KERNEL(self.launch)(self.func, self.grid, 1, 1, self.block, 1, 1, 0, stream, params, None)
        if rc != 0:
            raise RuntimeError(f"the launch guard kernel failed to launch (CUDA driver error {rc})")


# (context handle, guard) pairs loaded in this process. A tuple, rebound on each load: the runner
# loads its guard before any candidate is imported, and its tamper guard compares this name's
# identity, so a candidate cannot swap in a guard of its own without being reported.
LOADED: tuple[tuple[int, OccupyingGuard], ...] = ()


def occupying_guard() -> OccupyingGuard | None:
    """The guard for the calling thread's current CUDA context (loaded once), or None where the
    driver library, a current context or the kernel is unavailable (the timer then falls back to
    `torch.cuda._sleep`, and says so in its method)."""
    global LOADED
    lib = _driver()
    if lib is None:
        return None
    ctx = ctypes.c_void_p()
    if lib.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
        return None
    for key, guard in LOADED:
        if key == ctx.value:
            return guard
    guard = _load(lib)
    if guard is not None:
        LOADED = LOADED + ((ctx.value, guard),)
    return guard


def _driver() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def _load(lib: Any) -> OccupyingGuard | None:
    device = ctypes.c_int()
    module = ctypes.c_void_p()
    func = ctypes.c_void_p()
    if (lib.cuCtxGetDevice(ctypes.byref(device)) != 0
            or lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)) != 0
            or lib.cuModuleGetFunction(ctypes.byref(func), module, ctypes.c_char_p(KERNEL_NAME)) != 0
            or not func.value):
        return None
    sms, threads = ctypes.c_int(), ctypes.c_int()
    if (lib.cuDeviceGetAttribute(ctypes.byref(sms), _ATTR_MULTIPROCESSOR_COUNT, device) != 0
            or lib.cuDeviceGetAttribute(ctypes.byref(threads), _ATTR_MAX_THREADS_PER_MULTIPROCESSOR, device) != 0):
        return None
    block, per_sm = fill_shape(threads.value, lambda size: _resident_blocks(lib, func, size))
    if block == 0:
        return None
    launch = ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value
    return OccupyingGuard(launch, func.value, sms.value * per_sm, block)


def fill_shape(threads_per_sm: int, resident_blocks: Any) -> tuple[int, int]:
    """(block size, blocks per SM) whose resident blocks hold exactly `threads_per_sm` threads, the
    largest block first; (0, 0) if none does. `resident_blocks(size)` is the occupancy the driver
    reports for blocks of that size."""
    for size in _BLOCK_SIZES:
        if threads_per_sm % size:
            continue
        per_sm = resident_blocks(size)
        if per_sm * size == threads_per_sm:
            return size, per_sm
    return 0, 0


def _resident_blocks(lib: Any, func: ctypes.c_void_p, block: int) -> int:
    n = ctypes.c_int()
    if lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), func, block, ctypes.c_size_t(0)) != 0:
        return 0
    return n.value
