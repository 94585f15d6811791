"""One CUDA allocation shared with a child process through an inherited file descriptor.

The verifier's arena on a GPU. It is made with the CUDA driver's virtual memory API
(`cuMemCreate` with a POSIX file-descriptor handle) and exported as an fd that the runner
inherits (`pass_fds`) and maps (`cuMemImportFromShareableHandle`). Unlike legacy CUDA IPC
(`cudaIpcGetMemHandle`, what torch.multiprocessing shares), this needs no file in /dev/shm
and no access to the exporting process: the verifier stays non-dumpable while its runner
starts, and a sandboxed runner's /dev/shm holds nothing of the host's (issue #19; seen on the
H100, 2026-11-27, from a non-dumpable parent into a child in user, mount and network
namespaces with an empty private /dev/shm).

Only ctypes and the driver library (libcuda.so.1, loaded by torch already): the driver API is
called in the thread and device context torch made current.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE


class FdShareUnavailable(RuntimeError):
    """The driver cannot share memory by fd here (no libcuda, an old driver, a refused call)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: Any = None


def _cu() -> Any:
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise FdShareUnavailable(f"no CUDA driver library: {exc}") from exc
    return _driver


def _check(code: int, call: str) -> None:
    if code != 0:
        name = ctypes.c_char_p()
        _cu().cuGetErrorName(code, ctypes.byref(name))
        raise FdShareUnavailable(f"{call} failed: {(name.value or b'?').decode()} ({code})")


def _prop(device_index: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _PINNED
    prop.requestedHandleTypes = _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device_index)
    return prop


class _CudaArray:
    """`__cuda_array_interface__` of a mapped range: torch.as_tensor views it without a copy."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class SharedCudaBuffer:
    """A mapped allocation: `tensor` (uint8, nbytes) and, on the exporting side, `fd`."""

    def __init__(self, handle: int, ptr: int, nbytes: int, device_index: int, fd: int | None) -> None:
        import torch

        self.handle, self.ptr, self.nbytes, self.fd = handle, ptr, nbytes, fd
        with torch.cuda.device(device_index):
            self.tensor = torch.as_tensor(_CudaArray(ptr, nbytes), device=f"cuda:{device_index}")

    @classmethod
    def allocate(cls, nbytes: int, device_index: int) -> "SharedCudaBuffer":
        """Allocate at least `nbytes` on the device, mapped here, with an fd to share it (not
        inheritable until `pass_fds` hands it to a child)."""
        _ready(device_index)
        prop = _prop(device_index)
        grain = ctypes.c_size_t()
        _check(_cu().cuMemGetAllocationGranularity(ctypes.byref(grain), ctypes.byref(prop), 0),
               "cuMemGetAllocationGranularity")
        size = -(-nbytes // grain.value) * grain.value
        handle = ctypes.c_uint64()
        _check(_cu().cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0)),
               "cuMemCreate")
        fd = ctypes.c_int(-1)
        try:
            _check(_cu().cuMemExportToShareableHandle(ctypes.byref(fd), handle, _POSIX_FD, ctypes.c_uint64(0)),
                   "cuMemExportToShareableHandle")
            ptr = _map(handle.value, size, device_index)
        except BaseException:
            _cu().cuMemRelease(handle)
            if fd.value >= 0:
                os.close(fd.value)
            raise
        os.set_inheritable(fd.value, False)
        return cls(handle.value, ptr, size, device_index, fd.value)

    @classmethod
    def open(cls, fd: int, nbytes: int, device_index: int) -> "SharedCudaBuffer":
        """Map the allocation behind an inherited `fd` (the runner's side); the fd is closed after."""
        _ready(device_index)
        handle = ctypes.c_uint64()
        try:
            _check(_cu().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
                   "cuMemImportFromShareableHandle")
        finally:
            os.close(fd)
        return cls(handle.value, _map(handle.value, nbytes, device_index), nbytes, device_index, None)

    def close(self) -> None:
        """Unmap and release (the caller has synchronised and holds no view any more)."""
        if self.ptr:
            _cu().cuMemUnmap(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
            _cu().cuMemAddressFree(ctypes.c_uint64(self.ptr), ctypes.c_size_t(self.nbytes))
            _cu().cuMemRelease(ctypes.c_uint64(self.handle))
            self.ptr = 0
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _ready(device_index: int) -> None:
    """Torch's primary context current on this thread, on the device (the driver calls use it)."""
    import torch

    torch.cuda.set_device(device_index)
    torch.cuda.init()
    torch.empty(1, device=f"cuda:{device_index}")  # the runtime makes the primary context current


def _map(handle: int, size: int, device_index: int) -> int:
    ptr = ctypes.c_uint64()
    _check(_cu().cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(0),
                                     ctypes.c_uint64(0)), "cuMemAddressReserve")
    try:
        _check(_cu().cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle), ctypes.c_uint64(0)),
               "cuMemMap")
        access = _AccessDesc(_Location(_ON_DEVICE, device_index), _READ_WRITE)
        _check(_cu().cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)), "cuMemSetAccess")
    except BaseException:
        _cu().cuMemAddressFree(ptr, ctypes.c_size_t(size))
        raise
    return ptr.value
