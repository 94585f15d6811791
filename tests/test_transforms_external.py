"""benchmarks/transforms_external.py: every (file, transform, site) judged; crashes and bad rewrites fail it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import load_script
from transform_fixtures import NAME, fixture_transforms  # noqa: F401 - pytest fixture

ROOT = Path(__file__).resolve().parents[1]

KERNEL = '''# source: tests (written for this test)
import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n) * 2, mask=i < n)


def double(x):
    y = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y
'''
CHECK = '''import torch
CASES = [5, 130]
def run(mod, case):
    return mod.double(torch.randn(case))
'''


def test_outcomes_counted_and_a_crash_fails_the_run(tmp_path: Path, fixture_transforms, monkeypatch) -> None:
    script = load_script(ROOT / "benchmarks" / "transforms_external.py")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "double.py").write_text(KERNEL)
    (corpus / "double.check.py").write_text(CHECK)
    (corpus / "plain.py").write_text("def kernel_function(x):\n    return x\n")
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["transforms_external.py", str(corpus), "-o", str(out),
                                      "--only", f"{NAME},exploding,breaking"])
    assert script.main() == 1  # exploding crashes, breaking writes source that does not parse
    rows = json.loads((out / "summary.json").read_text())["rows"]
    got = {(r["file"], r["transform"]): r for r in rows}
    assert got[("double.py", NAME)]["outcome"] == "applied"
    assert got[("double.py", NAME)]["verified"] == "equal"  # ran on the interpreter against the original
    assert got[("double.py", "exploding")]["outcome"] == "crash"
    assert got[("double.py", "breaking")]["outcome"] == "bad_rewrite"
    assert got[("plain.py", NAME)]["outcome"] == "declined"
    table = (out / "summary.md").read_text()
    assert f"| `{NAME}` | 2 | 1 | 1 | 1 | 0 | 0 | 0 | 1 | 0 |" in table
    assert "| double.py | tests (written for this test) | yes |" in table

    monkeypatch.setattr(sys, "argv", ["transforms_external.py", str(corpus), "-o", str(out), "--only", NAME])
    assert script.main() == 0
