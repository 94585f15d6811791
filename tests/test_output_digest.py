"""`arena.output_digest`: the digest the runner takes of a copied output and the verifier of the
slot. The device fingerprint is plain torch, so its arithmetic is checked here on CPU tensors
(tests/gpu/test_trust_gpu.py checks it on a GPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernelopt.harness import arena  # noqa: E402


@pytest.fixture
def small_table(monkeypatch):
    # Several table rows and a row tail at a size the CPU handles quickly.
    monkeypatch.setattr(arena, "_FINGERPRINT_WORDS", 64)
    monkeypatch.setattr(arena, "_FINGERPRINT_ROWS_PER_STEP", 3)


@pytest.mark.parametrize("numel, dtype", [(64 * 7 + 9, torch.float32), (64 * 10 * 2 + 3, torch.float16),
                                          (5, torch.uint8), (0, torch.float32)])
def test_fingerprint_is_a_function_of_the_bytes_and_the_key(small_table, numel, dtype):
    t = (torch.randn(numel) * 100).to(dtype)
    a = arena._device_fingerprint(t, 11)
    assert a == arena._device_fingerprint(t.clone(), 11)
    assert a.startswith(f"{t.numel() * t.element_size()}:")
    if numel:
        assert arena._device_fingerprint(t, 12) != a


@pytest.mark.parametrize("index", [0, 63, 64, 64 * 7 - 1, 64 * 7 + 8])
def test_fingerprint_tells_any_one_changed_element(small_table, index):
    t = torch.randn(64 * 7 + 9)
    u = t.clone()
    u[index] = u[index] + 1.0
    assert arena._device_fingerprint(u, 3) != arena._device_fingerprint(t, 3)


def test_fingerprint_tells_swapped_rows(small_table):
    t = torch.randn(64 * 4)
    u = torch.cat([t[64:128], t[:64], t[128:]])
    assert arena._device_fingerprint(u, 5) != arena._device_fingerprint(t, 5)


def test_fingerprint_reads_a_non_contiguous_tensor_as_its_values():
    t = torch.randn(8, 6)
    assert arena._device_fingerprint(t.t(), 1) == arena._device_fingerprint(t.t().contiguous(), 1)


def test_cpu_digest_is_sha256_of_the_bytes():
    import hashlib

    t = torch.arange(10, dtype=torch.int32)
    assert arena.output_digest(t, 99) == hashlib.sha256(t.numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("t", [torch.randn(9, dtype=torch.float16)[1:], torch.arange(9, dtype=torch.int8)[3:],
                               torch.randn(5, dtype=torch.complex64).conj()],
                         ids=["half-offset-2-bytes", "int8-offset-3", "conjugate-view"])
def test_digests_take_an_output_that_is_a_slice_or_a_conjugate_view(small_table, t):
    # An honest kernel may return a slice of a 1- or 2-byte buffer (a storage offset that is not a
    # multiple of 4 bytes) or a conjugate view: both are copied into the slot fine, and the digests
    # must read them as their values, like the verifier reads the slot.
    plain = t.resolve_conj().clone()
    assert arena._device_fingerprint(t, 4) == arena._device_fingerprint(plain, 4)
    assert arena.output_digest(t, 4) == arena.output_digest(plain, 4)


def test_fingerprint_tells_a_flipped_sign_bit_in_every_word(small_table):
    # A change of 2^31 in an int32 word (a float32's sign) vanishes under an even weight.
    t = torch.randn(64 * 2 + 5)
    for i in range(t.numel()):
        u = t.clone()
        u[i] = -u[i]
        assert arena._device_fingerprint(u, 7) != arena._device_fingerprint(t, 7), i
