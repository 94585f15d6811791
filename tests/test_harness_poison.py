"""The poison pattern: NaN in every float dtype, distinguishable from computed NaN."""

import pytest

torch = pytest.importorskip("torch")

from kernelopt.harness.poison import fill_poison, poison_mask, poisoned_factories  # noqa: E402


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_poison_is_nan_and_detected(dtype):
    t = fill_poison(torch.zeros(5, dtype=getattr(torch, dtype)))
    assert t.isnan().all() and poison_mask(t).all()
    computed = torch.zeros(5, dtype=t.dtype) / torch.zeros(5, dtype=t.dtype)
    assert computed.isnan().all() and not poison_mask(computed).any()


def test_one_byte_pattern_poisons_every_float_view():
    raw = torch.empty(16, dtype=torch.uint8)
    raw.view(torch.int16).fill_(0x7FFA)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert raw.view(dtype).isnan().all() and poison_mask(raw.view(dtype)).all()


def test_factories_are_poisoned_only_inside_the_context():
    x = torch.ones(3)
    with poisoned_factories():
        made = [torch.empty(4), torch.empty_like(x), torch.empty_strided((2, 2), (1, 2)), x.new_empty(2)]
        ints = torch.empty(3, dtype=torch.int32)
    assert all(poison_mask(t).all() for t in made)
    assert ints.dtype == torch.int32  # non-float buffers are left alone
    assert torch.empty is getattr(torch.empty, "__wrapped__", torch.empty)


def _fake_cuda(monkeypatch, raw, public, device=3):
    """torch.cuda's current device and memory_reserved faked (no GPU here); `raw` stands in for
    torch._C._cuda_memoryStats (None: this torch has none, as a CPU build)."""
    asked = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: device)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: asked.append(d) or public[0])
    if raw is None:
        monkeypatch.delattr(torch._C, "_cuda_memoryStats", raising=False)
    else:
        monkeypatch.setattr(torch._C, "_cuda_memoryStats", raw, raising=False)
    return asked


def test_reserved_bytes_come_from_the_raw_statistics_of_the_current_device(monkeypatch):
    from kernelopt.harness.poison import _reserved_bytes_reader

    public = [4096]
    devices = []
    raw = lambda d: devices.append(d) or {"reserved_bytes": {"all": {"current": public[0]}}}  # noqa: E731
    _fake_cuda(monkeypatch, raw, public)
    reserved = _reserved_bytes_reader()
    public[0] = 8192
    assert reserved() == 8192 and set(devices) == {3}


@pytest.mark.parametrize("raw", [
    None,  # no raw statistics in this torch
    lambda d: {"reserved_bytes": {"all": {"current": 1}}},  # the same layout, another number
    lambda d: {"reserved_bytes.all.current": 4096},  # another layout
    lambda d: [4096],
])
def test_reserved_bytes_fall_back_to_the_public_call(monkeypatch, raw):
    from kernelopt.harness.poison import _reserved_bytes_reader

    public = [4096]
    asked = _fake_cuda(monkeypatch, raw, public)
    reserved = _reserved_bytes_reader()
    public[0] = 8192
    assert reserved() == 8192 and asked[-1] == 3  # the current device's, through the public call
