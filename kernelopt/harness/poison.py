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


def poison_cuda_allocator(extra_bytes: int = 256 << 20, max_bytes: int = 8 << 30) -> int:
    """Fill the caching allocator's free blocks (plus `extra_bytes` fresh ones) with poison.

    Tensors are allocated largest first until the cached free memory and some
    fresh memory are used up, filled, and freed again without `empty_cache()`, so
    the next allocations of the candidate (also in C++/CUDA extensions) are carved
    out of poisoned blocks. Returns the number of bytes poisoned.
    """
    import torch

    torch.cuda.synchronize()
    cached_free = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    device_free, _ = torch.cuda.mem_get_info()
    budget = min(cached_free + extra_bytes, max_bytes, cached_free + max(device_free - (1 << 30), 0))
    blocks = []
    remaining = budget
    # Sizes span both of the allocator's pools (small blocks <= 1 MiB, large above).
    for size in (256 << 20, 32 << 20, 4 << 20, 1 << 20, 128 << 10, 16 << 10, 2 << 10, 512):
        while remaining >= size:
            try:
                block = torch.empty(size // 4, dtype=torch.int32, device="cuda")
            except torch.OutOfMemoryError:
                break
            block.fill_(_PATTERN[4][1])
            blocks.append(block)
            remaining -= size
    torch.cuda.synchronize()
    del blocks
    return budget - remaining
