"""kernelopt.source.features: the structural features transforms and pack preconditions read."""

from kernelopt.source import apply_edits, features

ROW_TWO_PASS = '''
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        acc += tl.load(x_ptr + row * n + off + tl.arange(0, BLOCK))
    s = tl.sum(acc, axis=0)
    for off in range(0, n, BLOCK):
        v = tl.load(x_ptr + row * n + off + tl.arange(0, BLOCK))
        tl.store(y_ptr + row * n + off + tl.arange(0, BLOCK), v / s)
'''

ELEMENTWISE_ALIAS = '''
from triton import jit
import triton.language as language

@jit
def add_one(src, dst, count, BS: language.constexpr):
    offs = language.program_id(axis=0) * BS + language.arange(0, BS)
    language.store(dst + offs, language.load(src + offs, mask=offs < count) + 1, mask=offs < count)
'''

TILED_2D = '''
import triton
import triton.language as tl

@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = acc + tl.dot(tl.load(a), tl.load(b))
    tl.store(c, acc)
'''


def test_row_kernel_with_two_passes():
    f = features(ROW_TWO_PASS)
    assert {"triton", "grid_1d", "row_loop", "multi_pass", "k_loop", "reduction"} <= f
    assert "elementwise" not in f and "grid_2d" not in f


def test_elementwise_kernel_under_other_names():
    f = features(ELEMENTWISE_ALIAS)
    assert {"triton", "grid_1d", "elementwise"} <= f
    assert not f & {"loop", "reduction", "row_loop"}


def test_tiled_2d_dot_kernel():
    f = features(TILED_2D)
    assert {"grid_2d", "dot", "row_loop", "k_loop"} <= f
    assert "multi_pass" not in f


def test_unparseable_source_has_no_features():
    assert features("def broken(:\n") == set()


def test_apply_edits_keeps_other_bytes_and_refuses_overlap():
    src = "x = 1  # é comment\ny = 2\n"
    start = src.encode().index(b"2")
    assert apply_edits(src, [(start, start + 1, "3")]) == "x = 1  # é comment\ny = 3\n"
    import pytest

    from kernelopt.errors import BadInput

    with pytest.raises(BadInput):
        apply_edits(src, [(0, 5, "a"), (3, 6, "b")])
