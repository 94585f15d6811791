"""Poison the memory a candidate will be handed, so unwritten outputs show.

Every floating buffer the candidate can get (from `torch.empty*` in Python, or from
the CUDA caching allocator inside an extension) is filled with one NaN bit pattern:
the 16-bit word 0x7FFA repeated. That word is a quiet NaN as fp16 and as bf16,
two of them are a quiet NaN as fp32 and four as fp64, so one fill of raw bytes
poisons a buffer whatever dtype it is later viewed as. A NaN that arithmetic
produces has another payload (GPUs write the canonical 0x7FFF...), so an output
element that still holds this exact pattern was never written.

Used only inside child processes (`kernelopt.harness.verify`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

POISON_WORD16 = 0x7FFA
# element size in bytes -> (integer dtype name, poison value)
_PATTERN = {2: ("int16", 0x7FFA), 4: ("int32", 0x7FFA7FFA), 8: ("int64", 0x7FFA7FFA7FFA7FFA)}
_FACTORIES = ("empty", "empty_like", "empty_strided")
_METHODS = ("new_empty", "new_empty_strided")


def _int_view(t: Any) -> Any | None:
    import torch

    if not t.is_floating_point() or t.element_size() not in _PATTERN:
        return None
    return t.view(getattr(torch, _PATTERN[t.element_size()][0]))


def fill_poison(t: Any) -> Any:
    """Fill a floating tensor in place with the poison pattern (other dtypes are left alone)."""
    view = _int_view(t)
    if view is not None:
        view.fill_(_PATTERN[t.element_size()][1])
    return t


def poison_mask(t: Any) -> Any:
    """Boolean tensor: True where `t` still holds the poison pattern."""
    import torch

    view = _int_view(t)
    if view is None:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    return view == _PATTERN[t.element_size()][1]


@contextlib.contextmanager
def poisoned_factories() -> Iterator[None]:
    """While active, torch.empty/empty_like/empty_strided and Tensor.new_empty* return poisoned memory.

    This is how unwritten outputs are caught on the CPU (the Triton interpreter),
    and on a GPU for buffers allocated from Python.
    """
    import torch

    saved_funcs = {name: getattr(torch, name) for name in _FACTORIES}
    saved_methods = {name: getattr(torch.Tensor, name) for name in _METHODS}

    def wrap(fn: Any) -> Any:
        def poisoned(*args: Any, **kwargs: Any) -> Any:
            return fill_poison(fn(*args, **kwargs))

        poisoned.__wrapped__ = fn  # type: ignore[attr-defined]
        return poisoned

    try:
        for name, fn in saved_funcs.items():
            setattr(torch, name, wrap(fn))
        for name, fn in saved_methods.items():
            setattr(torch.Tensor, name, wrap(fn))
        yield
    finally:
        for name, fn in saved_funcs.items():
            setattr(torch, name, fn)
        for name, fn in saved_methods.items():
            setattr(torch.Tensor, name, fn)


# Request sizes, largest first. Requests up to 1 MiB come from the allocator's small
# pool (2 MiB segments, 512-byte granules), larger ones from the large pool; the
# smallest of each pool reaches every cached fragment that pool can still hand out.
_LARGE_SIZES = (256 << 20, 32 << 20, 4 << 20, (1 << 20) + 512)
_SMALL_SIZES = (1 << 20, 128 << 10, 16 << 10, 2 << 10, 512)
_MAX_REQUESTS_PER_SIZE = 4096


def _reserved_bytes_reader() -> Any:
    """A cheap `torch.cuda.memory_reserved()` for the current device.

    The poisoning loop asks after every block (thousands of times per trial). The public call
    flattens the allocator's whole nested statistics into a new dict each time: on the H100 that
    was 0.4 ms a call and 4.4 s of every verification trial. The raw statistics hold the same
    number; where their layout differs (another torch), the public call is used.
    """
    import torch

    device = torch.cuda.current_device()
    try:
        stats = torch._C._cuda_memoryStats(device)
        if stats["reserved_bytes"]["all"]["current"] == torch.cuda.memory_reserved(device):
            return lambda: torch._C._cuda_memoryStats(device)["reserved_bytes"]["all"]["current"]
    except (AttributeError, KeyError, TypeError, RuntimeError):
        pass
    return lambda: torch.cuda.memory_reserved(device)


def poison_cuda_allocator(
    fresh_large_bytes: int = 256 << 20, fresh_small_bytes: int = 16 << 20, max_bytes: int = 8 << 30
) -> int:
    """Fill the caching allocator's free blocks, and some fresh ones, with poison.

    Blocks are requested largest first, filled and kept; a size is given up (for
    the next smaller one) when a request reserves new device memory beyond the
    pool's `fresh_*_bytes` allowance, so every cached fragment, which holds stale
    data such as an earlier reference result, ends up poisoned, and at most one
    new segment per size overshoots the allowance (the unfilled rest of such a
    segment is fresh memory, as the candidate would get anyway). Then all blocks
    are freed without `empty_cache()`: the candidate's next allocations (also
    those inside C++/CUDA extensions) are carved out of poisoned memory.
    Returns the number of bytes poisoned.
    """
    import torch

    torch.cuda.synchronize()
    reserved = _reserved_bytes_reader()
    value = _PATTERN[4][1]
    blocks = []
    total = 0
    for sizes, fresh_left in ((_LARGE_SIZES, fresh_large_bytes), (_SMALL_SIZES, fresh_small_bytes)):
        for size in sizes:
            for _ in range(_MAX_REQUESTS_PER_SIZE):
                if total + size > max_bytes:
                    break
                before = reserved()
                try:
                    block = torch.empty(size // 4, dtype=torch.int32, device="cuda")
                except torch.OutOfMemoryError:
                    break
                # Fill even the block that overdraws the allowance: once freed, its
                # fresh memory stays cached and could be handed to the candidate.
                block.fill_(value)
                blocks.append(block)
                total += size
                grew = reserved() - before
                fresh_left -= grew
                if grew and fresh_left < 0:
                    break  # smaller sizes still take what the cache holds
    torch.cuda.synchronize()
    del blocks
    return total
