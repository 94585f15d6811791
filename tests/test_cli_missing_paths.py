"""Issue 20: a missing run directory is "no such directory", not "not a run directory"."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args", [
    ["report", "{missing}"],
    ["iterate", "{missing}", "--kernel", str(ROOT / "examples" / "softmax" / "kernel.py"), "--hypothesis", "h"],
    ["optimize", "--resume", "{missing}"],
])
def test_a_missing_run_directory_is_named_as_missing(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "no-such-run"
    res = CliRunner().invoke(main, [a.format(missing=missing) for a in args])
    assert res.exit_code == 2 and res.stderr.strip() == f"kernelopt: {missing}: no such directory"
    assert not missing.exists()


def test_a_folder_that_is_not_a_run_is_still_named_so(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "not a run directory" in res.stderr
