"""A non-editable install finds its data folders (strategies, knowledge, templates)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_non_editable_install_ships_the_data(tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         str(ROOT)],
        check=True, capture_output=True, timeout=600,
    )
    code = (
        "from kernelopt.resources import data_dir\n"
        "from kernelopt.strategies import list_strategies\n"
        "from kernelopt.diagnose.packs import available_packs\n"
        "print(data_dir('strategies').parent)\n"
        "print(len(list_strategies()[0]))\n"
        "print(sorted(available_packs()))\n"
        "print(sorted(p.name for p in data_dir('templates').iterdir()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    where, count, packs, templates = out.stdout.strip().splitlines()
    assert Path(where).is_relative_to(target)
    assert int(count) >= 50
    assert "kernelopt" in packs and "roofline" in packs and "sol4" in packs
    assert "benchmark.md" in templates and "ncu_summary.md" in templates
