"""The shared arena: device memory both the verifier and its runner can see.

The verifier allocates it, writes each trial's inputs into it, and reads the
candidate's outputs from it; the runner maps it and runs the candidate on views of
it. On a GPU it is one CUDA allocation shared through a file descriptor the runner
inherits (cuda_fd.py; legacy CUDA IPC where the driver cannot); on the CPU a file
(in /dev/shm where there is room) mapped by both. Only the verifier hands out the
recipe to map it (verifier -> runner), never the other way.
"""

from __future__ import annotations

import base64
import os
import pickle
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelopt.harness.protocol import ArenaSpec, Slot, Value

ALIGN = 256  # bytes: every slot starts aligned for vectorised access


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def torch_dtype_of(name: str) -> Any:
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def layout(values: list[Any], start: int = 0) -> tuple[list[Value], int]:
    """Slots for the tensors among `values` from offset `start`; returns (values, end offset)."""
    import torch

    out: list[Value] = []
    offset = start
    for v in values:
        if isinstance(v, torch.Tensor):
            nbytes = v.numel() * v.element_size()
            out.append(Value(slot=Slot(offset=offset, nbytes=nbytes, dtype=dtype_name(v), shape=list(v.shape))))
            offset = _align(offset + max(nbytes, 1))
        else:
            out.append(Value(scalar=v if isinstance(v, (int, float, bool, str, type(None))) else repr(v)))
    return out, offset


def output_digest(t: Any, key: int = 0) -> str:
    """A digest of a tensor's bytes: what the runner copied into an output slot, taken from the
    candidate's returned tensor, and what the verifier finds in the slot afterwards. A helper that
    fills the slot with other bytes after the copy (a thread or process the candidate started, or
    a kernel it left running) makes the two differ.

    On the CPU, sha256. On a GPU, where hashing gigabytes on the host would cost seconds, a keyed
    fingerprint computed on the device (`_device_fingerprint`): to match it with other bytes, a
    candidate must know the bytes it claims, i.e. have computed them."""
    if t.device.type != "cpu":
        return _device_fingerprint(t, key)
    import hashlib

    raw = _plain(t).reshape(-1)
    return hashlib.sha256(raw.view(torch_dtype_of("uint8")).numpy().tobytes()).hexdigest()


# The fingerprint's weight table (int32 words); rows of the output's words are weighted by it,
# and the row sums by their odd row number, in wrapping integer arithmetic (deterministic: integer
# sums do not depend on the order of the reduction).
_FINGERPRINT_WORDS = 1 << 20
# 64 rows a step, whatever the output's size: a 256 MiB int32 product and the 512 MiB int64 copy
# of it that `sum(dtype=torch.int64)` makes (seen with torch's profiler on the CPU).
_FINGERPRINT_ROWS_PER_STEP = 64


def _plain(t: Any) -> Any:
    """`t`'s values as a contiguous tensor that can be viewed as bytes: a conjugate or negative view
    resolved (a byte view refuses them), and a copy where the storage offset is not a multiple of 4
    bytes (a slice of a 1- or 2-byte tensor; the int32 view of the fingerprint refuses it)."""
    out = t.detach().resolve_conj().resolve_neg().contiguous()
    if out.storage_offset() * out.element_size() % 4:
        out = out.clone()
    return out


def _device_fingerprint(t: Any, key: int) -> str:
    import torch

    raw = _plain(t).reshape(-1).view(torch.uint8)
    n = raw.numel()
    gen = torch.Generator(device=raw.device)
    gen.manual_seed(key & 0x7FFF_FFFF_FFFF_FFFF)
    # Odd weights: an even weight w would hide a change of 2^31 in its word (w * 2^31 wraps to 0
    # in int32 -- a float32's sign bit), and 2^30 for w = 2 mod 4, ...; an odd one hides none.
    table = torch.randint(-(1 << 31), (1 << 31) - 1, (_FINGERPRINT_WORDS,), dtype=torch.int32,
                          device=raw.device, generator=gen).bitwise_or_(1)
    words = raw[: n // 4 * 4].view(torch.int32)
    rows = words.numel() // _FINGERPRINT_WORDS
    total = torch.zeros((), dtype=torch.int64, device=raw.device)
    grid = words[: rows * _FINGERPRINT_WORDS].view(rows, _FINGERPRINT_WORDS)
    for r0 in range(0, rows, _FINGERPRINT_ROWS_PER_STEP):
        block = grid[r0 : r0 + _FINGERPRINT_ROWS_PER_STEP]
        row_sums = (block * table).sum(dim=1, dtype=torch.int64)
        odd = torch.arange(r0, r0 + block.shape[0], device=raw.device, dtype=torch.int64) * 2 + 1
        total += (row_sums * odd).sum()
    tail = words[rows * _FINGERPRINT_WORDS:]
    total += (tail * table[: tail.numel()]).sum(dtype=torch.int64) * (2 * rows + 1)
    loose = raw[n // 4 * 4:].to(torch.int64)  # the last 0-3 bytes
    total += (loose * table[: loose.numel()].to(torch.int64)).sum() * (2 * rows + 3)
    return f"{n}:{int(total.item()) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


class Arena:
    """A flat uint8 buffer and typed views of its slots."""

    def __init__(self, buffer: Any, spec: ArenaSpec, owner_dir: str | None = None) -> None:
        self.buffer = buffer
        self.spec = spec
        self._owner_dir = owner_dir
        self._shared: Any = None  # kind "cuda_fd": the SharedCudaBuffer behind `buffer`

    @classmethod
    def allocate(cls, nbytes: int, device: str) -> "Arena":
        import torch

        nbytes = max(_align(nbytes), ALIGN)
        if device.startswith("cuda"):
            from kernelopt.harness.cuda_fd import FdShareUnavailable, SharedCudaBuffer

            try:
                shared = SharedCudaBuffer.allocate(nbytes, torch.device(device).index or 0)
            except FdShareUnavailable as exc:
                # An old driver: legacy CUDA IPC, which weakens two protections; said, never silent.
                print(f"kernelopt: the GPU arena cannot be shared by fd ({exc}); legacy CUDA IPC instead: the "
                      "verifier is dumpable while each runner starts and a GPU sandbox gets no pid namespace "
                      "(docs/harness.md)", file=sys.stderr)
                shared = None
            if shared is not None:
                arena = cls(shared.tensor[:nbytes], ArenaSpec(kind="cuda_fd", nbytes=nbytes, fd=shared.fd,
                                                                  mapped_nbytes=shared.nbytes, device=device))
                arena._shared = shared
                return arena
            buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            from torch.multiprocessing.reductions import reduce_tensor

            recipe = reduce_tensor(buf)
            handle = base64.b64encode(pickle.dumps(recipe)).decode()
            return cls(buf, ArenaSpec(kind="cuda_ipc", nbytes=nbytes, handle=handle, device=device))
        from kernelopt.harness.sandbox import ARENA_PREFIX, attach_dir, owned_prefix

        # Its name carries this process as its owner: a SIGKILL of the whole tree leaves it to the
        # next engine's sweep (sandbox.sweep_stale_dirs).
        folder = tempfile.mkdtemp(prefix=owned_prefix(ARENA_PREFIX), dir=_shm_dir(nbytes))
        # Removed with the verifier's sandbox dir: an interrupt or a SIGKILL leaves no arena behind.
        attach_dir(folder)
        path = os.path.join(folder, "arena")
        buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
        return cls(buf, ArenaSpec(kind="file", nbytes=nbytes, path=path, device="cpu"), owner_dir=folder)

    @classmethod
    def open(cls, spec: ArenaSpec) -> "Arena":
        """Map an arena the verifier allocated (runner side)."""
        import torch

        if spec.kind == "cuda_fd":
            from kernelopt.harness.cuda_fd import SharedCudaBuffer

            assert spec.fd is not None
            shared = SharedCudaBuffer.open(spec.fd, spec.mapped_nbytes or spec.nbytes, torch.device(spec.device).index or 0)
            arena = cls(shared.tensor[: spec.nbytes], spec)
            arena._shared = shared
            return arena
        if spec.kind == "cuda_ipc":
            assert spec.handle is not None
            # The recipe comes from the verifier, which runs no candidate code.
            fn, args = pickle.loads(base64.b64decode(spec.handle))  # noqa: S301 - trusted direction only
            torch.cuda.set_device(torch.device(spec.device))
            return cls(fn(*args), spec)
        assert spec.path is not None
        return cls(torch.from_file(spec.path, shared=True, size=spec.nbytes, dtype=torch.uint8), spec)

    def spec_for(self, device: str) -> ArenaSpec:
        """The spec a runner that names this arena's GPU `device` opens: its CUDA_VISIBLE_DEVICES
        leaves it that GPU only (`sandbox.sole_gpu_env`), as cuda:0, whatever index it has here.
        A legacy CUDA IPC recipe carries the device index too: rewritten (the recipe is this
        process's own, made in `allocate`)."""
        if self.spec.kind == "cuda_ipc" and self.spec.handle is not None and device != self.spec.device:
            import inspect

            import torch

            fn, args = pickle.loads(base64.b64decode(self.spec.handle))  # noqa: S301 - this process's own recipe
            at = list(inspect.signature(fn).parameters).index("storage_device")
            args = (*args[:at], torch.device(device).index or 0, *args[at + 1:])
            handle = base64.b64encode(pickle.dumps((fn, args))).decode()
            return self.spec.model_copy(update={"device": device, "handle": handle})
        return self.spec.model_copy(update={"device": device})

    def pass_fds(self) -> tuple[int, ...]:
        """The fds a runner must inherit to open this arena (kind "cuda_fd": the allocation's)."""
        return (self.spec.fd,) if self.spec.kind == "cuda_fd" and self.spec.fd is not None else ()

    def ipc_files(self) -> list[str]:
        """The files in /dev/shm through which a CUDA arena is shared: the driver's IPC file of
        this process (`cuda.shm.<dev>.<pid in hex>.<n>`) and torch's ref counter
        (`torch_<pid>_*`). A sandboxed runner gets them in its private /dev/shm (confine)."""
        if self.spec.kind != "cuda_ipc":
            return []
        pid = os.getpid()
        try:
            names = os.listdir("/dev/shm")
        except OSError:
            return []
        # The pid field is exact between dots (hex) or underscores (decimal): no other pid's files.
        # The fields around it are taken in hex too: a driver that counts in hex past 9 must not
        # leave a file out (the runner's CUDA IPC would fail); seen on the H100: cuda.shm.0.1d4.1.
        mine = re.compile(rf"cuda\.shm\.[0-9a-f]+\.{pid:x}\.[0-9a-f]+|torch_{pid}_.*")
        return sorted(os.path.join("/dev/shm", n) for n in names if mine.fullmatch(n))

    def view(self, slot: Slot) -> Any:
        raw = self.buffer[slot.offset : slot.offset + slot.nbytes]
        return raw.view(torch_dtype_of(slot.dtype)).view(slot.shape)

    def values(self, specs: list[Value]) -> list[Any]:
        return [self.view(v.slot) if v.slot is not None else v.scalar for v in specs]

    def write(self, specs: list[Value], values: list[Any]) -> None:
        for spec, value in zip(specs, values):
            if spec.slot is not None:
                self.view(spec.slot).copy_(value.reshape(spec.slot.shape))

    def close(self) -> None:
        self.buffer = None
        if self._shared is not None:
            import torch

            torch.cuda.synchronize(self.spec.device)
            self._shared.close()
            self._shared = None
        if self._owner_dir:
            shutil.rmtree(self._owner_dir, ignore_errors=True)


def _shm_dir(nbytes: int) -> str | None:
    """/dev/shm when it exists and has room (containers often give it 64 MB), else the temp dir."""
    shm = Path("/dev/shm")
    try:
        if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * nbytes:
            return str(shm)
    except OSError:
        pass
    return None
