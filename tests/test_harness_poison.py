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
