"""benchmarks/transforms_table.py: one row per draft, the applying sites, and every reason."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import load_script
from transform_fixtures import NAME, fixture_transforms  # noqa: F401 - pytest fixture

ROOT = Path(__file__).resolve().parents[1]


def test_table_lists_sites_and_reasons(tmp_path: Path, fixture_transforms) -> None:
    build_table = load_script(ROOT / "benchmarks" / "transforms_table.py").build_table

    (tmp_path / "softmax").mkdir()
    shutil.copy(ROOT / "examples" / "softmax" / "kernel.py", tmp_path / "softmax" / "kernel.py")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "kernel.py").write_text("import torch\n\ndef kernel_function(x):\n    return x\n")
    body, drafts, hits = build_table(tmp_path)
    assert drafts == 2 and hits >= 1
    matrix = body.split("## Every answer")[0]
    rows = {line.split("|")[1].strip(): line for line in matrix.splitlines() if line.startswith("| ")}
    assert "**softmax_kernel**" in rows["softmax"]
    assert f"| softmax | `{NAME}` | softmax_kernel | yes | MARK=1 |" in body
    assert f"| plain | `{NAME}` | - | no |  | needs triton" in body
    assert "| softmax | `exploding` | - | no |  | sites() raised RuntimeError: boom in sites |" in body
